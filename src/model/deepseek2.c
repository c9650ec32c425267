/* DeepSeek-V2/V3's forward pass (the descriptor and its sources: deepseek2_arch.c). After transformers'
 * modeling_deepseek_v3.py (DeepseekV3Attention, DeepseekV3MoE, DeepseekV3DecoderLayer), in llama.cpp's
 * weight-absorbed form (src/models/deepseek2.cpp, is_mla):
 *
 *   h = x + W_O MLA(RMSNorm_attn(x))
 *   y = h + FFN(RMSNorm_ffn(h))        dense SwiGLU in the first first_k_dense_replace layers, else routed
 *                                      experts plus the shared ones (the layer library's MoE block)
 *
 *   MLA: q = W_QB RMSNorm(W_QA x) (or W_Q x), per head [q_nope | q_pe]; [c | k_pe] = W_KVA x, c normed;
 *        the cache keeps [c | RoPE(k_pe)] per token and layer (kv_lora_rank + qk_rope_head_dim elements,
 *        not heads x (k + v)); per head the absorbed query [W_UK_h^T q_nope | RoPE(q_pe)] attends over
 *        those rows with scale mscale^2 / sqrt(nope + rope), its output's latent part o goes up through
 *        W_UV_h (the backend's MLA op, backend.h). This equals the expanded attention of the modeling
 *        file, since q_nope . (W_UK_h c) = (W_UK_h^T q_nope) . c and sum p W_UV_h c = W_UV_h sum p c.
 *
 * W_UK_h^T and W_UV_h come from GGUF's split attn_k_b / attn_v_b (newer converters), else from the fused
 * kv_b_proj (Hugging Face, older GGUF): W_UV_h is a row range of it; W_UK_h^T is its transpose, made here
 * as F32 from F32, F16 or BF16 weights. A quantized fused attn_kv_b without the split tensors is refused
 * (the transpose would need the quantizer; llama.cpp refuses such files too).
 *
 * With PITH_MLA_EXPAND_MIN set (below: the absorbed form is the default, being the faster one as written),
 * a sequence with at least expand_min new tokens in a step (a long prefill) takes the expanded form
 * instead (backend.h), where the file has the fused kv_b (Hugging Face files, and GGUF files from
 * llama.cpp's converter, which writes it beside the split tensors): expand_min is twice the run length
 * at which the two forms' multiply-adds per query and context position, heads x (2 rank + rope) against
 * heads x (nope + rope + v) plus the expansion heads x (nope + v) x rank shared by the run, break even,
 * 2 (nope + v) rank / (2 rank - nope - v), and at least PITH_BE_MLA_CHUNK (DeepSeek-V2-Lite: 342 tokens;
 * never where 2 rank <= nope + v): PITH_MLA_EXPAND_MIN=auto.
 *
 * The multi-token-prediction layer, when the model loads with pith_model_options.mtp, is
 * deepseek2_mtp.c's (the state both files share: deepseek2_internal.h); it runs after the decoder, so a
 * model with it keeps every token's row through the last layer. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/decoder.h"
#include "model/deepseek2.h"
#include "model/deepseek2_internal.h"
#include "model/layers.h"
#include "model/moe_arch.h"
#include "model/rope.h"

static void ds2_free(pith_decoder *d) {
    ds2 *m = (ds2 *)d;
    ds2_mtp_free(m);
    if (m->owned)
        for (int l = 0; l <= d->base.hp.n_layers; l++) free(m->owned[l]);
    free(m->owned);
    free(m->heads);
    free(m->layers);
    pith_rope_free(&m->rope);
}

static int full_attention(const pith_hparams *hp, int l) { return (void)hp, (void)l, 0; }

/* Binds rows x cols of a 2-D or 3-D tensor starting at element offset elem0, as a matrix of its own. */
static int bind_part(pith_decoder *d, const pith_tensor *t, const char *name, int64_t elem0, int rows, int cols,
                     const pith_weight **out, pith_err *err) {
    size_t rb = pith_dtype_row_bytes(t->type, cols);
    int64_t be = pith_dtype_block_elems(t->type);
    if (!rb || be <= 0 || elem0 % cols || (size_t)(elem0 / cols + rows) * rb > t->nbytes)
        return pith_errf(err, "tensor %s: bad type or size", name);
    pith_tensor part = *t;
    part.n_dims = 2;
    part.ne[0] = cols, part.ne[1] = rows, part.ne[2] = part.ne[3] = 1;
    part.data = (const uint8_t *)t->data + (size_t)(elem0 / cols) * rb;
    part.nbytes = rb * (size_t)rows;
    pith_weight *w;
    if (pith_be_matrix(d->be, &part, name, &w, err)) return -1;
    *out = w;
    return 0;
}

static float elem_f32(const pith_tensor *t, size_t i) {
    const uint8_t *p = t->data;
    uint16_t h;
    float f;
    if (t->type == PITH_F32) return memcpy(&f, p + 4 * i, 4), f;
    memcpy(&h, p + 2 * i, 2);
    return t->type == PITH_F16 ? pith_f16_to_f32(h) : pith_bf16_to_f32(h);
}

/* Layer l's W_UK_h^T (rank x nope) and W_UV_h (v x rank) per head. */
static int load_heads(ds2 *m, int l, ds2_layer *L, pith_err *err) {
    pith_decoder *d = &m->d;
    const pith_hparams *hp = &d->base.hp;
    const pith_deepseek2_params *P = pith_deepseek2_params_of(hp);
    /* this rank's heads: [h0, h0 + H) of the file's HF (all of them unsharded) */
    const int H = hp->n_heads, R = P->kv_lora_rank, N = P->qk_nope, V = P->v_dim;
    const int HF = d->tp.comm ? H * d->tp.size : H, h0 = d->tp.comm ? d->tp.rank * H : 0;
    char kn[64], vn[64], fn[64];
    snprintf(kn, sizeof kn, "blk.%d.attn_k_b.weight", l);
    snprintf(vn, sizeof vn, "blk.%d.attn_v_b.weight", l);
    snprintf(fn, sizeof fn, "blk.%d.attn_kv_b.weight", l);
    const pith_tensor *kb = pith_model_file_tensor(d->file, kn), *vb = pith_model_file_tensor(d->file, vn);
    if (kb || vb) {
        if (!kb || !vb) return pith_errf(err, "missing tensor %s (it goes with %s)", kb ? vn : kn, kb ? kn : vn);
        if (kb->ne[0] != N || kb->ne[1] != R || kb->ne[2] != HF || kb->ne[3] != 1)
            return pith_errf(err, "tensor %s: shape [%lld, %lld, %lld], expected [%d, %d, %d]", kn, (long long)kb->ne[0],
                             (long long)kb->ne[1], (long long)kb->ne[2], N, R, HF);
        if (vb->ne[0] != R || vb->ne[1] != V || vb->ne[2] != HF || vb->ne[3] != 1)
            return pith_errf(err, "tensor %s: shape [%lld, %lld, %lld], expected [%d, %d, %d]", vn, (long long)vb->ne[0],
                             (long long)vb->ne[1], (long long)vb->ne[2], R, V, HF);
        for (int h = 0; h < H; h++)
            if (bind_part(d, kb, kn, (int64_t)(h0 + h) * R * N, R, N, &L->k_b[h], err) ||
                bind_part(d, vb, vn, (int64_t)(h0 + h) * V * R, V, R, &L->v_b[h], err))
                return -1;
        return 0;
    }
    const pith_tensor *kv = pith_model_file_tensor(d->file, fn);
    if (!kv) return pith_errf(err, "missing tensor %s (or the split %s and %s)", fn, kn, vn);
    const int per = N + V;
    if (kv->ne[0] != R || kv->ne[1] != (int64_t)HF * per || kv->ne[2] != 1 || kv->ne[3] != 1)
        return pith_errf(err, "tensor %s: shape [%lld, %lld], expected [%d, %d]", fn, (long long)kv->ne[0],
                         (long long)kv->ne[1], R, HF * per);
    if (kv->type != PITH_F32 && kv->type != PITH_F16 && kv->type != PITH_BF16)
        return pith_errf(err, "tensor %s: a %s fused kv_b without attn_k_b / attn_v_b cannot be absorbed "
                              "(convert the model again: newer converters write the split tensors)", fn,
                         pith_dtype_name(kv->type));
    if (kv->nbytes < (size_t)R * HF * per * (kv->type == PITH_F32 ? 4 : 2))
        return pith_errf(err, "tensor %s: data is shorter than its shape", fn);
    float *t = m->owned[l] = malloc((size_t)H * R * N * sizeof *t);
    if (!t) return pith_errf(err, "out of memory");
    for (int h = 0; h < H; h++)
        for (int r = 0; r < R; r++)
            for (int i = 0; i < N; i++)
                t[((size_t)h * R + r) * N + i] = elem_f32(kv, ((size_t)(h0 + h) * per + i) * R + r);
    pith_tensor tt = {.name = kv->name, .type = PITH_F32, .n_dims = 3, .ne = {N, R, H, 1}, .data = t,
                      .nbytes = (size_t)H * R * N * sizeof *t};
    for (int h = 0; h < H; h++)
        if (bind_part(d, &tt, fn, (int64_t)h * R * N, R, N, &L->k_b[h], err) ||
            bind_part(d, kv, fn, ((int64_t)(h0 + h) * per + N) * R, V, R, &L->v_b[h], err))
            return -1;
    return 0;
}

int ds2_load_layer(ds2 *m, int l, ds2_layer *L, pith_err *err) {
    pith_decoder *d = &m->d;
    const pith_hparams *hp = &d->base.hp;
    const pith_deepseek2_params *P = pith_deepseek2_params_of(hp);
    const int H = hp->n_heads, hd = P->qk_nope + P->qk_rope, R = P->kv_lora_rank;
    if (pith_decoder_vector(d, l, "attn_norm.weight", hp->dim, true, &L->attn_norm, err) ||
        pith_decoder_vector(d, l, "ffn_norm.weight", hp->dim, true, &L->ffn_norm, err) ||
        pith_decoder_matrix_of(d, l, "attn_kv_a_mqa.weight", R + P->qk_rope, hp->dim, &L->wkv_a, err) ||
        pith_decoder_vector(d, l, "attn_kv_a_norm.weight", R, true, &L->kv_a_norm, err) ||
        pith_decoder_matrix_of(d, l, "attn_output.weight", hp->dim, H * P->v_dim, &L->attn.wo, err))
        return -1;
    if (P->q_lora_rank > 0) {
        if (pith_decoder_matrix_of(d, l, "attn_q_a.weight", P->q_lora_rank, hp->dim, &L->wq_a, err) ||
            pith_decoder_vector(d, l, "attn_q_a_norm.weight", P->q_lora_rank, true, &L->q_a_norm, err) ||
            pith_decoder_matrix_of(d, l, "attn_q_b.weight", H * hd, P->q_lora_rank, &L->wq_b, err))
            return -1;
    } else if (pith_decoder_matrix_of(d, l, "attn_q.weight", H * hd, hp->dim, &L->wq, err)) {
        return -1;
    }
    L->k_b = m->heads + (size_t)2 * l * H;
    L->v_b = L->k_b + H;
    if (load_heads(m, l, L, err)) return -1;
    char kv_b[64];
    snprintf(kv_b, sizeof kv_b, "blk.%d.attn_kv_b.weight", l);
    if (m->expand_min < INT_MAX && pith_model_file_tensor(d->file, kv_b) &&
        pith_decoder_matrix_rows(d, l, "attn_kv_b.weight", R, H * (P->qk_nope + P->v_dim), 0,
                                 H * (P->qk_nope + P->v_dim), &L->kv_b, err))
        return -1;
    if (pith_moe_dense_layer(hp, l)) return pith_ffn_block_load(d, l, PITH_GLU_SILU, &L->ffn, err);
    static const char *const hf_experts[3] = {"mlp.experts.%d.gate_proj.weight", "mlp.experts.%d.up_proj.weight",
                                              "mlp.experts.%d.down_proj.weight"};
    return pith_ffn_block_load_moe(d, l, hf_experts, 0, false, &L->ffn, err);
}

/* Layer l's MLA of the normed rows xb (n of them) into bufs.att, its K rows into layer l of the group. */
int ds2_attention(ds2 *m, const ds2_layer *L, int l, const pith_buf *xb, int n, pith_err *err) {
    pith_decoder *d = &m->d;
    if (ds2_attention_qkv(m, L, xb, n, err)) return -1;
    const pith_be_mla_args op = ds2_mla_args(m, L, l);
    return pith_be_mla(d->be, &op, n, err);
}

/* The query (bufs.q) and the latent row [c_kv | k_pe] (m->kv) of the normed rows xb. */
int ds2_attention_qkv(ds2 *m, const ds2_layer *L, const pith_buf *xb, int n, pith_err *err) {
    pith_decoder *d = &m->d;
    const pith_dec_bufs *B = &m->bufs;
    const pith_hparams *hp = &d->base.hp;
    if (L->wq_a) {
        const pith_be_mm a[] = {{L->wq_a, m->qlat, false}, {L->wkv_a, m->kv, false}};
        const pith_be_mm qb = {L->wq_b, B->q, false};
        if (pith_be_matmul(d->be, xb, a, 2, n, err)) return -1;
        pith_be_rmsnorm(d->be, m->qlat, L->q_a_norm, hp->norm_eps, m->qlat, n);
        return pith_be_matmul(d->be, m->qlat, &qb, 1, n, err);
    }
    const pith_be_mm a[] = {{L->wq, B->q, false}, {L->wkv_a, m->kv, false}};
    return pith_be_matmul(d->be, xb, a, 2, n, err);
}

/* The mla op's arguments for layer l (its place in the memory: the decoder's layer l, or the head's). */
pith_be_mla_args ds2_mla_args(const ds2 *m, const ds2_layer *L, int l) {
    const pith_decoder *d = &m->d;
    const pith_dec_bufs *B = &m->bufs;
    const pith_hparams *hp = &d->base.hp;
    const pith_deepseek2_params *P = pith_deepseek2_params_of(hp);
    const pith_be_mla_args op = {
        .q = B->q, .kv = m->kv, .kv_norm = L->kv_a_norm, .eps = hp->norm_eps, .rope_cs = m->cs,
        .rope_style = hp->rope_style, .k_b = L->k_b, .v_b = L->v_b, .qa = m->qa, .lat = m->lat, .out = B->att,
        .n_heads = hp->n_heads, .rank = P->kv_lora_rank, .rope = P->qk_rope, .nope = P->qk_nope, .v = P->v_dim,
        .group = d->layer_group[l], .layer_index = d->layer_index[l],
        .kv_b = m->g ? L->kv_b : NULL, .g = m->g, .kvx = m->kvx, .ms = m->ms, .expand_min = m->expand_min,
    };
    return op;
}

static int ds2_forward(pith_model *base, const pith_batch *b, float *logits, pith_err *err) {
    ds2 *m = base->impl;
    pith_decoder *d = &m->d;
    const pith_dec_bufs *B = &m->bufs;
    const pith_hparams *hp = &base->hp;
    if (pith_decoder_step(d, b, logits, err)) return -1;
    int n = b->n_tokens;
    if (n == 0) return 0;
    if (pith_decoder_first_stage(d)) pith_be_embed(d->be, m->embd, 0, B->x, n);
    else if (pith_decoder_stage_recv(d, B->x, n, err)) return -1;
    pith_be_rope_tables(d->be, &m->rope, m->cs, n);
    for (int l = 0; l < hp->n_layers; l++) {
        if (!pith_decoder_has_layer(d, l)) continue;
        const ds2_layer *L = &m->layers[l];
        pith_be_rmsnorm(d->be, B->x, L->attn_norm, hp->norm_eps, B->xb, n);
        if (ds2_attention(m, L, l, B->xb, n, err)) return -1;
        if (l == hp->n_layers - 1 && !m->mtp) { /* only the rows that want logits or hidden states go on;
                                                  * the MTP head needs every token's */
            pith_buf *const keep[] = {B->att, B->x};
            if ((n = pith_decoder_n_kept(b)) == 0) return pith_head_forward(d, B, m->out_norm, m->output, b, err);
            pith_be_keep_rows(d->be, keep, 2);
        }
        if (pith_attn_block_out(d, &L->attn, B, NULL, n, err)) return -1;
        pith_be_rmsnorm(d->be, B->x, L->ffn_norm, hp->norm_eps, B->xb, n);
        if (pith_ffn_block_forward(d, &L->ffn, B, B->xb, NULL, n, err)) return -1;
    }
    if (!pith_decoder_last_stage(d)) return pith_decoder_stage_send(d, B->x, n, err);
    if (m->mtp) {
        if (ds2_mtp_after_decoder(m, b, err)) return -1;
        pith_buf *const keep[] = {B->x};
        if (pith_decoder_n_kept(b) > 0) pith_be_keep_rows(d->be, keep, 1);
    }
    return pith_head_forward(d, B, m->out_norm, m->output, b, err);
}

static const pith_model_ops ds2_ops = {
    .prepare = pith_decoder_prepare, .mem_alloc = pith_decoder_mem_alloc, .mem_free = pith_decoder_mem_free,
    .copy_blocks = pith_decoder_copy_blocks, .forward = ds2_forward, .mtp_draft = ds2_mtp_draft,
    .destroy = pith_decoder_destroy,
};

static int make_bufs(ds2 *m, pith_err *err) {
    pith_decoder *d = &m->d;
    pith_backend *be = d->be;
    const pith_hparams *hp = &d->base.hp;
    const pith_deepseek2_params *P = pith_deepseek2_params_of(hp);
    const int H = hp->n_heads, D = P->kv_lora_rank + P->qk_rope;
    pith_dec_bufs *B = &m->bufs;
    memset(B, 0, sizeof *B);
    bool dense = hp->n_experts == 0 || hp->expert_dense_leading > 0;
    if (!(B->x = pith_be_buffer(be, hp->dim, err)) || !(B->xb = pith_be_buffer(be, hp->dim, err)) ||
        !(B->q = pith_be_buffer(be, H * (P->qk_nope + P->qk_rope), err)) ||
        !(B->att = pith_be_buffer(be, H * P->v_dim, err)) || !(m->kv = pith_be_buffer(be, D, err)) ||
        !(m->qa = pith_be_buffer(be, H * D, err)) || !(m->lat = pith_be_buffer(be, H * D, err)) ||
        !(m->cs = pith_be_buffer(be, P->qk_rope, err)) ||
        (P->q_lora_rank > 0 && !(m->qlat = pith_be_buffer(be, P->q_lora_rank, err))))
        return -1;
    if (dense && (!(B->hb = pith_be_buffer(be, hp->ffn_dim, err)) || !(B->hb2 = pith_be_buffer(be, hp->ffn_dim, err))))
        return -1;
    /* under --tp the experts' shares are summed across ranks through y (layers.h) */
    if (hp->n_experts > 0 && d->tp.comm && !(B->y = pith_be_buffer(be, hp->dim, err))) return -1;
    bool expand = false;
    for (int l = 0; l < hp->n_layers; l++) expand |= m->layers[l].kv_b != NULL;
    if (expand && (!(m->g = pith_be_buffer(be, D, err)) ||
                   !(m->kvx = pith_be_buffer(be, H * (P->qk_nope + P->v_dim), err)) ||
                   !(m->ms = pith_be_buffer(be, 2 * H, err))))
        return -1;
    return 0;
}

int pith_deepseek2_build(pith_model_file *file, const pith_model_options *opt, pith_model **out, pith_err *err) {
    const pith_hparams *hp = pith_model_file_hparams(file);
    const pith_deepseek2_params *P = pith_deepseek2_params_of(hp);
    ds2 *m = (ds2 *)pith_decoder_new(sizeof *m, file, opt, &ds2_ops, ds2_free, err);
    if (!m) return -1;
    pith_decoder *d = &m->d;
    const int L = hp->n_layers, D = P->kv_lora_rank + P->qk_rope;
    /* under --tp each rank its query heads (their W_UK, W_UV and output columns), the latent rows of
     * every token whole (one row all heads read, computed on each rank) */
    int rc = pith_decoder_shard_begin(d, true, err);
    hp = &d->base.hp;
    long long wide = P->qk_nope + P->v_dim, den = 2LL * P->kv_lora_rank - wide;
    long long even = den > 0 ? (2 * wide * P->kv_lora_rank + den - 1) / den : LLONG_MAX;
    int estimate = even >= INT_MAX ? INT_MAX : even < PITH_BE_MLA_CHUNK ? PITH_BE_MLA_CHUNK : (int)even;
    /* The expanded form is exact but, as written (a scalar online softmax per query and head, where the
     * absorbed form runs on the tiled paged attention), slower at every length measured (DeepSeek-V2-Lite's
     * shape, 2 threads: pp512 257 against 705 t/s, pp2048 98 against 465; docs/performance.md), so the
     * absorbed form takes every step unless PITH_MLA_EXPAND_MIN asks otherwise: a number of new tokens
     * (at least PITH_BE_MLA_CHUNK), "auto" (the multiply-add estimate above) or "never". */
    m->expand_min = INT_MAX;
    const char *env = getenv("PITH_MLA_EXPAND_MIN");
    if (env && *env) {
        char *end;
        long v = strtol(env, &end, 10);
        if (!strcmp(env, "auto")) m->expand_min = estimate;
        else if (!strcmp(env, "never")) m->expand_min = INT_MAX;
        else if (*end == 0 && v >= PITH_BE_MLA_CHUNK && v < INT_MAX) m->expand_min = (int)v;
        else rc = pith_errf(err, "PITH_MLA_EXPAND_MIN=%s: expected a number of tokens >= %d, \"auto\" or \"never\"",
                            env, PITH_BE_MLA_CHUNK);
    }
    if (!d->be->vt->mla)
        rc = pith_errf(err, "the %s backend has no multi-head latent attention (DeepSeek's MLA): use the CPU",
                       d->be->vt->name);
    if (!rc) {
        /* scores: q.k / sqrt(nope + rope) times YaRN's mscale^2 (deepseek2_arch.c) */
        pith_be_attn_shape s = {.n_heads = hp->n_heads, .n_kv_heads = 1, .head_dim = D,
                                .scale = (float)(P->kq_mscale2 / sqrt((double)(P->qk_nope + P->qk_rope)))};
        rc = d->be->vt->attn_shape(d->be, &s, err);
    }
    /* room for the MTP head's layer (index L) too */
    if (!rc && (!(m->layers = calloc((size_t)L + 1, sizeof *m->layers)) ||
                !(m->heads = calloc((size_t)2 * (L + 1) * hp->n_heads, sizeof *m->heads)) ||
                !(m->owned = calloc((size_t)L + 1, sizeof *m->owned))))
        rc = pith_errf(err, "out of memory");
    /* a pipeline stage holds its layers only; the first stage the embeddings, the last the head */
    if (!rc && pith_decoder_first_stage(d)) rc = pith_decoder_table(d, "token_embd.weight", &m->embd, err);
    if (!rc && pith_decoder_last_stage(d))
        rc = pith_decoder_vector(d, -1, "output_norm.weight", hp->dim, true, &m->out_norm, err);
    if (!rc && pith_decoder_last_stage(d)) rc = pith_decoder_output(d, &m->output, err);
    for (int l = 0; !rc && l < L; l++) {
        if (!pith_decoder_has_layer(d, l)) continue;
        rc = ds2_load_layer(m, l, &m->layers[l], err);
        if (!rc) pith_decoder_progress(d, l + 1, L);
    }
    /* the head's layer has experts too: they are placed with the decoder's */
    if (!rc && opt && opt->mtp) rc = ds2_mtp_load(m, err);
    if (!rc && hp->n_experts > 0) rc = d->be->vt->moe_place(d->be, d->base.experts, sizeof d->base.experts, err);
    if (!rc) rc = pith_rope_for(hp, file, P->qk_rope, PITH_ROPE_CAN_YARN | PITH_ROPE_CAN_LINEAR, &m->rope,
                                pith_model_file_path(file), err);
    if (!rc) rc = make_bufs(m, err);
    if (!rc && !m->mtp) rc = pith_decoder_kv_memory(d, D, full_attention, err);
    if (!rc && m->mtp) rc = pith_decoder_mtp_memory(d, D, 0, err); /* latent rows [c_kv | k_pe]: no V */
    d->base.has_mtp = m->mtp != NULL;
    if (!rc && !m->mtp) {
        /* one row of [c_kv | k_pe] per token and layer: the values are read from it (backend.h: MLA) */
        d->base.mem.groups[0].v_dim = 0;
        rc = pith_mem_spec_check(&d->base.mem, L, err);
    }
    return pith_decoder_end(d, rc, out, err);
}
