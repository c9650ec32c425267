/* Gemma 4 (text) forward pass, after transformers' models/gemma4/modeling_gemma4.py (Gemma4TextModel,
 * Gemma4TextDecoderLayer, Gemma4TextAttention) and llama.cpp's src/models/gemma4-iswa.cpp; gemma4_arch.c
 * says what the hyper-parameters and tensors mean in each format.
 *
 *   x = embed(token) * sqrt(hidden)
 *   per layer (window layers: local shape and RoPE; global layers: the global shape, proportional RoPE):
 *     h = RMSNorm_attn(x)
 *     q = RoPE(RMSNorm_q(h Wq^T) per head); k = RoPE(RMSNorm_k(h Wk^T) per head)
 *     v = RMSNorm(h Wv^T) per head, no weight (Wv = Wk in a layer without attn_v.weight)
 *     x = x + RMSNorm_post_attn(Attention(q, k, v) Wo^T)        scores unscaled (scaling 1.0)
 *     x = x + RMSNorm_post_ffw(down(gelu_tanh(gate h') * up h')), h' = RMSNorm_ffn(x)
 *       (with experts, enable_moe_block: x = x + RMSNorm_post_ffw(RMSNorm_post_ffw_1(that dense MLP)
 *        + RMSNorm_post_ffw_2(experts(x))), the backend's MoE op on the raw residual x: the router reads
 *        RMSNorm(x) * router.scale / sqrt(hidden), the experts RMSNorm_pre_ffw_2(x), GELU-tanh experts,
 *        softmax over all, top k renormalised, times router.per_expert_scale of each chosen expert:
 *        Gemma4TextDecoderLayer, Gemma4TextRouter; llama.cpp's gemma4-iswa.cpp, whose ffn_gate_inp.scale
 *        and ffn_down_exps.scale are those two scales)
 *     x = x + RMSNorm_post_norm(proj(gelu_tanh(inp_gate x) * p_l))     (per-layer embeddings, when P > 0)
 *     x = x * layer_scalar
 *   p_l = (RMSNorm_pl(e W_pl^T / sqrt(hidden))[l] + table_pl[token][l] * sqrt(P)) / sqrt(2), e = x at the
 *   start: every layer's P-wide slice of two n_layers * P rows, cut out by the backend's copy_cols.
 *   A KV-shared layer (the last num_kv_shared_layers) projects Q only and attends over the K and V its
 *   source layer (the last earlier layer of its kind) stored: its memory maps are its source's, and the
 *   groups hold only the layers with K and V of their own.
 *   logits = softcap(RMSNorm_out(x) Wout^T)
 *
 * The two kinds of layer keep their K and V in two memory groups of different widths per token: the
 * WINDOW group (n_kv_heads x head_dim) and the FULL group (n_kv_heads_full x head_dim_full, set on the
 * spec after pith_decoder_kv_memory), and the backend attends over each with its own head shape
 * (pith_be_attn_shape's second shape, for the FULL group). Under --tp each rank holds its share of both
 * kinds' heads, of the MLP's columns and of the experts (summed across ranks after the attention output
 * and each MLP); with fewer global KV heads than ranks, each rank a copy of the one its query heads read;
 * the per-layer embeddings are whole on every rank. */
#include "model/gemma4.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/arch.h"
#include "model/decoder.h"
#include "model/layers.h"
#include "model/rope.h"

enum { LOCAL, GLOBAL };

typedef struct gemma4_layer {
    int kind;                        /* LOCAL (window) or GLOBAL */
    bool shared;                     /* attends over an earlier layer's K and V (wk, wv, k_norm NULL) */
    bool wide;                       /* a double-wide FFN */
    const pith_weight *attn_norm, *wq, *wk, *wv, *wo, *q_norm, *k_norm, *post_attn_norm;
    const pith_weight *ffn_norm, *post_ffw_norm;
    const pith_weight *inp_gate, *proj, *post_norm; /* per-layer embeddings, or NULL */
    pith_ffn_block ffn;
    pith_moe_weights *moe;           /* the experts beside the dense MLP, or NULL */
    const pith_weight *post_ffw_norm_1, *post_ffw_norm_2; /* with experts: the dense MLP's, the experts' */
    float scalar;                    /* layer_scalar (1: none) */
} gemma4_layer;

typedef struct gemma4 {
    pith_decoder d; /* first: the base decoder */
    gemma4_layer *layers;
    const pith_weight *embd, *out_norm, *output;
    float embed_scale;
    pith_rope rope[2];
    pith_buf *cs[2];
    pith_buf *q[2], *k[2], *v[2], *att[2];
    pith_dec_bufs bufs;              /* x, xb, the FFN's hb / hb2 (its q, k, v, att are the local ones) */
    pith_dec_bufs wide;              /* the same with hb / hb2 twice as wide (double-wide FFN layers) */
    pith_buf *y1, *y2;               /* dim, with experts: the dense MLP's output, the experts' */
    /* per-layer embeddings */
    const pith_weight *pl_table, *pl_model_proj, *pl_proj_norm;
    float pl_scale;
    pith_buf *pl_tok, *pl_proj;      /* n_layers * P: every layer's token part and projected part */
    pith_buf *pl_a, *pl_b, *pl_g;    /* P: one layer's slice, its input p_l, its gate */
} gemma4;

static int window_of(const pith_hparams *hp, int l) {
    return hp->sliding_window > 0 && pith_layer_bit(hp->layer_swa, l) ? hp->sliding_window : 0;
}

static void gemma4_free(pith_decoder *d) {
    gemma4 *m = (gemma4 *)d;
    free(m->layers);
    pith_rope_free(&m->rope[LOCAL]);
    pith_rope_free(&m->rope[GLOBAL]);
}

/* A layer with experts (B->xb holds RMSNorm_ffn(x)): the dense MLP into y1, the experts of the raw
 * residual into y2, then x += RMSNorm_post_ffw(RMSNorm_post_ffw_1(y1) + RMSNorm_post_ffw_2(y2)). */
static int moe_ffn(gemma4 *m, const gemma4_layer *L, int n, pith_err *err) {
    pith_decoder *d = &m->d;
    const pith_dec_bufs *B = L->wide ? &m->wide : &m->bufs;
    const float eps = d->base.hp.norm_eps;
    const pith_ffn_block *f = &L->ffn;
    const pith_be_mm gate_up[] = {{f->gate, B->hb, false}, {f->up, B->hb2, false}}, down = {f->down, m->y1, false};
    if (pith_be_matmul(d->be, B->xb, gate_up, 2, n, err)) return -1;
    pith_be_glu(d->be, PITH_GLU_GELU_TANH, B->hb, B->hb2, n);
    if (pith_be_matmul(d->be, B->hb, &down, 1, n, err) || pith_decoder_allreduce(d, m->y1, n, err)) return -1;
    pith_be_zero(d->be, m->y2, n);
    /* under --tp this rank's experts (expert parallelism), summed across ranks like the dense MLP's columns */
    if (pith_be_moe(d->be, L->moe, B->x, m->y2, n, err) || pith_decoder_allreduce(d, m->y2, n, err)) return -1;
    pith_be_rmsnorm(d->be, m->y1, L->post_ffw_norm_1, eps, B->xb, n);
    pith_be_norm_add(d->be, B->xb, m->y2, L->post_ffw_norm_2, eps, n);
    pith_be_norm_add(d->be, B->x, B->xb, L->post_ffw_norm, eps, n);
    return 0;
}

static int gemma4_forward(pith_model *base, const pith_batch *b, float *logits, pith_err *err) {
    gemma4 *m = base->impl;
    pith_decoder *d = &m->d;
    const pith_hparams *hp = &base->hp;
    const pith_dec_bufs *B = &m->bufs;
    if (pith_decoder_step(d, b, logits, err)) return -1;
    int n = b->n_tokens;
    if (n == 0) return 0;
    const int P = pith_gemma4_params_of(hp)->ple_dim;
    /* the first stage embeds; another receives the residual, after the per-layer inputs (which come from
     * the embeddings) are made from its own */
    if (pith_decoder_first_stage(d) || P > 0) pith_be_embed(d->be, m->embd, m->embed_scale, B->x, n);
    if (P > 0) { /* project_per_layer_inputs: both parts for every layer, from the scaled embeddings */
        pith_be_embed(d->be, m->pl_table, m->pl_scale, m->pl_tok, n);
        const pith_be_mm pm = {m->pl_model_proj, m->pl_proj, false};
        if (pith_be_matmul(d->be, B->x, &pm, 1, n, err)) return -1;
        pith_be_scale(d->be, m->pl_proj, (float)(1.0 / sqrt((double)hp->dim)), n);
    }
    if (!pith_decoder_first_stage(d) && pith_decoder_stage_recv(d, B->x, n, err)) return -1;
    for (int t = LOCAL; t <= GLOBAL; t++)
        if (m->cs[t]) pith_be_rope_tables(d->be, &m->rope[t], m->cs[t], n);
    for (int l = 0; l < hp->n_layers; l++) {
        if (!pith_decoder_has_layer(d, l)) continue;
        const gemma4_layer *L = &m->layers[l];
        const int t = L->kind, g = d->layer_group[l];
        pith_be_begin_layer(d->be, l);
        const pith_mem_group *grp = &base->mem.groups[g];
        pith_be_rmsnorm(d->be, B->x, L->attn_norm, hp->norm_eps, B->xb, n);
        const pith_be_mm qkv[] = {{L->wq, m->q[t], false}, {L->wk, m->k[t], false}, {L->wv, m->v[t], false}};
        if (pith_be_matmul(d->be, B->xb, qkv, L->shared ? 1 : 3, n, err)) return -1;
        pith_be_qkv_args op = {
            .q = m->q[t], .k = L->shared ? NULL : m->k[t], .v = L->shared ? NULL : m->v[t],
            .qk_norm = PITH_QK_NORM_HEAD, .q_norm = L->q_norm, .k_norm = L->k_norm, .eps = hp->norm_eps,
            .rope_cs = m->cs[t], .rope_style = hp->rope_style, .group = g, .layer_index = d->layer_index[l],
            .v_norm = !L->shared,
        };
        pith_be_qkv(d->be, &op, n);
        pith_be_attn at = {.q = m->q[t], .out = m->att[t], .group = g, .layer_index = d->layer_index[l],
                           .window = grp->kind == PITH_MEM_WINDOW ? grp->window : 0};
        pith_be_attention(d->be, &at, n);
        if (l == hp->n_layers - 1) { /* only the rows that want logits or hidden states go on */
            pith_buf *const keep[] = {m->att[t], B->x, m->pl_tok, m->pl_proj};
            if ((n = pith_decoder_n_kept(b)) == 0) return pith_head_forward(d, B, m->out_norm, m->output, b, err);
            pith_be_keep_rows(d->be, keep, P > 0 ? 4 : 2);
        }
        const pith_be_mm o = {L->wo, B->xb, false};
        if (pith_be_matmul(d->be, m->att[t], &o, 1, n, err) || pith_decoder_allreduce(d, B->xb, n, err)) return -1;
        pith_be_norm_add(d->be, B->x, B->xb, L->post_attn_norm, hp->norm_eps, n);
        pith_be_rmsnorm(d->be, B->x, L->ffn_norm, hp->norm_eps, B->xb, n);
        if (L->moe ? moe_ffn(m, L, n, err)
                   : pith_ffn_block_forward(d, &L->ffn, L->wide ? &m->wide : B, B->xb, L->post_ffw_norm, n, err))
            return -1;
        if (P > 0) {
            /* p_l = (RMSNorm(projected slice) + token slice) / sqrt(2) */
            pith_be_copy_cols(d->be, m->pl_a, m->pl_proj, l * P, n);
            pith_be_rmsnorm(d->be, m->pl_a, m->pl_proj_norm, hp->norm_eps, m->pl_b, n);
            pith_be_copy_cols(d->be, m->pl_a, m->pl_tok, l * P, n);
            pith_be_scale_add(d->be, m->pl_b, m->pl_a, 1.0f, n);
            pith_be_scale(d->be, m->pl_b, (float)(1.0 / sqrt(2.0)), n);
            const pith_be_mm gm = {L->inp_gate, m->pl_g, false}, pm = {L->proj, B->xb, false};
            if (pith_be_matmul(d->be, B->x, &gm, 1, n, err)) return -1;
            pith_be_glu(d->be, PITH_GLU_GELU_TANH, m->pl_g, m->pl_b, n);
            if (pith_be_matmul(d->be, m->pl_g, &pm, 1, n, err)) return -1;
            pith_be_norm_add(d->be, B->x, B->xb, L->post_norm, hp->norm_eps, n);
        }
        if (L->scalar != 1.0f) pith_be_scale(d->be, B->x, L->scalar, n);
    }
    if (!pith_decoder_last_stage(d)) return pith_decoder_stage_send(d, B->x, n, err);
    return pith_head_forward(d, B, m->out_norm, m->output, b, err);
}

static const pith_model_ops gemma4_ops = PITH_DECODER_OPS(gemma4_forward);

/* transformers multiplies by sqrt(width) as a tensor of the embedding's dtype, so a BF16 or F16
 * checkpoint scales by that rounding of it; llama.cpp (GGUF) scales in F32. */
static float embed_scale(const pith_model_file *file, const char *table, int width) {
    float s = sqrtf((float)width);
    const pith_tensor *e = pith_model_file_tensor(file, table);
    if (pith_model_file_format(file) != PITH_FORMAT_SAFETENSORS || !e) return s;
    if (e->type == PITH_BF16) return pith_bf16_to_f32(pith_f32_to_bf16(s));
    if (e->type == PITH_F16) return pith_f16_to_f32(pith_f32_to_f16(s));
    return s;
}

/* The global layers' proportional RoPE over the whole head: pair i rotates at theta^(-2i / head_dim)
 * divided by rope_freqs.weight[i] where the file has it (GGUF: 1e30 stops a pair), else by the factor for
 * the first rope_pairs_full pairs (the others stand still: frequency 0). */
static int global_rope(pith_decoder *d, pith_rope *r, pith_err *err) {
    const pith_hparams *hp = &d->base.hp;
    const pith_gemma4_params *P = pith_gemma4_params_of(hp);
    const int hd = P->head_dim_full, half = hd / 2;
    const pith_tensor *ft = pith_model_file_tensor(d->file, "rope_freqs.weight");
    /* llama.cpp requires it of a GGUF file with global layers (the converter always writes it) */
    if (!ft && pith_model_file_format(d->file) == PITH_FORMAT_GGUF)
        return pith_errf(err, "missing tensor rope_freqs.weight (the global layers' proportional RoPE)");
    if (ft && (ft->type != PITH_F32 || pith_tensor_nelems(ft) != half || (size_t)ft->nbytes < (size_t)half * 4))
        return pith_errf(err, "tensor rope_freqs.weight: expected %d F32 elements (the global layers' head / 2)", half);
    r->style = hp->rope_style;
    r->half = half;
    r->mscale = 1.0;
    if (!(r->inv_freq = malloc((size_t)half * sizeof *r->inv_freq))) return pith_errf(err, "out of memory");
    for (int i = 0; i < half; i++) {
        double f = pow((double)hp->rope_theta, -2.0 * i / hd);
        if (ft) {
            float div;
            memcpy(&div, (const unsigned char *)ft->data + 4 * (size_t)i, 4);
            if (!(div > 0) || isnan(div))
                return pith_errf(err, "tensor rope_freqs.weight: element %d is %g, expected a positive divisor", i,
                                 div);
            r->inv_freq[i] = f / div;
        } else {
            r->inv_freq[i] = i < P->rope_pairs_full ? f / P->rope_factor_full : 0.0;
        }
    }
    return 0;
}

/* A double-wide FFN: the layer library's block over widths of 2 x ffn_dim. */
static int load_wide_ffn(pith_decoder *d, int l, pith_ffn_block *f, pith_err *err) {
    const int dim = d->base.hp.dim, F = 2 * d->base.hp.ffn_dim;
    memset(f, 0, sizeof *f);
    f->act = PITH_GLU_GELU_TANH;
    return pith_decoder_matrix_rows(d, l, "ffn_gate.weight", dim, F, 0, F, &f->gate, err) ||
           pith_decoder_matrix_rows(d, l, "ffn_up.weight", dim, F, 0, F, &f->up, err) ||
           pith_decoder_matrix_rows(d, l, "ffn_down.weight", F, dim, 0, dim, &f->down, err);
}

/* K or V of kvd rows here: sharded by head, or (copy) the one global KV head this rank's query heads read,
 * whole: head rank * n / ranks of the file's n. */
static int bind_kv(pith_decoder *d, int l, const char *name, bool copy, int kvd, const pith_weight **out,
                   pith_err *err) {
    const int dim = d->base.hp.dim;
    if (!copy) return pith_decoder_matrix_rows(d, l, name, dim, kvd, 0, kvd, out, err);
    const int n = pith_gemma4_params_of(&d->base.hp)->n_kv_heads_full, mine = d->tp.rank * n / d->tp.size;
    int rows[64];
    unsigned char mode[64];
    if (n > 64) return pith_errf(err, "%d global KV heads is too many", n);
    for (int h = 0; h < n; h++) rows[h] = kvd, mode[h] = h == mine ? PITH_PART_WHOLE : PITH_PART_SKIP;
    return pith_decoder_matrix_parts(d, l, name, dim, n, rows, mode, out, err);
}

static int load_layer(pith_decoder *d, int l, gemma4_layer *L, pith_err *err) {
    const pith_hparams *hp = &d->base.hp;
    const pith_gemma4_params *P = pith_gemma4_params_of(hp);
    const int dim = hp->dim;
    L->kind = window_of(hp, l) > 0 ? LOCAL : GLOBAL;
    L->shared = l >= pith_gemma4_first_shared(hp);
    L->wide = L->shared && P->double_wide;
    const int hd = L->kind == LOCAL ? hp->head_dim : P->head_dim_full, R = d->tp.comm ? d->tp.size : 1;
    const int nkv = L->kind == LOCAL ? hp->n_kv_heads : P->n_kv_heads_full < R ? 1 : P->n_kv_heads_full / R;
    const int qd = hp->n_heads * hd, kvd = nkv * hd;
    /* fewer global KV heads than ranks: each rank holds a copy of the one its query heads read */
    const bool kv_copy = L->kind == GLOBAL && P->n_kv_heads_full < R;
    char name[64];
    snprintf(name, sizeof name, "blk.%d.attn_v.weight", l);
    bool has_v = !L->shared && !(L->kind == GLOBAL && P->k_eq_v) && pith_model_file_tensor(d->file, name) != NULL;
    const pith_weight *scalar = NULL;
    const int pd = P->ple_dim;
    if (pith_decoder_vector(d, l, "attn_norm.weight", dim, true, &L->attn_norm, err) ||
        pith_decoder_matrix_rows(d, l, "attn_q.weight", dim, qd, 0, qd, &L->wq, err) ||
        (!L->shared && bind_kv(d, l, "attn_k.weight", kv_copy, kvd, &L->wk, err)) ||
        (has_v && bind_kv(d, l, "attn_v.weight", kv_copy, kvd, &L->wv, err)) ||
        pith_decoder_matrix_rows(d, l, "attn_output.weight", qd, dim, 0, dim, &L->wo, err) ||
        pith_decoder_vector(d, l, "attn_q_norm.weight", hd, true, &L->q_norm, err) ||
        (!L->shared && pith_decoder_vector(d, l, "attn_k_norm.weight", hd, true, &L->k_norm, err)) ||
        pith_decoder_vector(d, l, "post_attention_norm.weight", dim, true, &L->post_attn_norm, err) ||
        pith_decoder_vector(d, l, "ffn_norm.weight", dim, true, &L->ffn_norm, err) ||
        pith_decoder_vector(d, l, "post_ffw_norm.weight", dim, true, &L->post_ffw_norm, err) ||
        (L->wide ? load_wide_ffn(d, l, &L->ffn, err) : pith_ffn_block_load(d, l, PITH_GLU_GELU_TANH, &L->ffn, err)) ||
        pith_decoder_vector(d, l, "layer_output_scale.weight", 1, false, &scalar, err) ||
        (pd > 0 && (pith_decoder_matrix_rows(d, l, "inp_gate.weight", dim, pd, 0, pd, &L->inp_gate, err) ||
                    pith_decoder_matrix_rows(d, l, "proj.weight", pd, dim, 0, dim, &L->proj, err) ||
                    pith_decoder_vector(d, l, "post_norm.weight", dim, true, &L->post_norm, err))))
        return -1;
    if (hp->n_experts > 0) {
        pith_moe_config cfg;
        pith_moe_config_of(hp, &cfg);
        cfg.act = PITH_MOE_GELU_TANH;  /* hidden_activation (llama.cpp: LLM_FFN_GELU) */
        cfg.gating = PITH_GATING_SOFTMAX, cfg.norm_topk = true, cfg.routed_scale = 0; /* fixed in both */
        cfg.in_norm_eps = hp->norm_eps;
        pith_decoder_moe_shard(d, &cfg);
        if (pith_decoder_vector(d, l, "post_ffw_norm_1.weight", dim, true, &L->post_ffw_norm_1, err) ||
            pith_decoder_vector(d, l, "post_ffw_norm_2.weight", dim, true, &L->post_ffw_norm_2, err) ||
            d->be->vt->moe_load(d->be, d->file, l, &cfg, NULL, &L->moe, err))
            return -1;
    }
    if (!has_v) L->wv = L->wk; /* attention_k_eq_v: V is the K projection (NULL in a KV-shared layer) */
    L->scalar = scalar ? scalar->vec[0] : 1.0f;
    if (!isfinite(L->scalar))
        return pith_errf(err, "tensor blk.%d.layer_output_scale.weight: %g is not a finite scale", l, L->scalar);
    return 0;
}

/* The per-layer embeddings' global tensors and buffers (P > 0). */
static int load_ple(gemma4 *m, pith_err *err) {
    pith_decoder *d = &m->d;
    const pith_hparams *hp = &d->base.hp;
    const int P = pith_gemma4_params_of(hp)->ple_dim, LP = hp->n_layers * P;
    const pith_tensor *t = pith_model_file_tensor(d->file, "per_layer_token_embd.weight");
    if (!t) return pith_errf(err, "missing tensor per_layer_token_embd.weight");
    if (t->ne[0] != LP || t->ne[1] != hp->n_vocab || t->ne[2] != 1 || t->ne[3] != 1)
        return pith_errf(err, "tensor per_layer_token_embd.weight: expected [%d, %d] (layers x %d, the vocabulary)", LP,
                         hp->n_vocab, P);
    m->pl_scale = embed_scale(d->file, "per_layer_token_embd.weight", P);
    if (pith_decoder_table(d, "per_layer_token_embd.weight", &m->pl_table, err) ||
        pith_decoder_matrix_rows(d, -1, "per_layer_model_proj.weight", hp->dim, LP, 0, LP, &m->pl_model_proj, err) ||
        pith_decoder_vector(d, -1, "per_layer_proj_norm.weight", P, true, &m->pl_proj_norm, err))
        return -1;
    if (!(m->pl_tok = pith_be_buffer(d->be, LP, err)) || !(m->pl_proj = pith_be_buffer(d->be, LP, err)) ||
        !(m->pl_a = pith_be_buffer(d->be, P, err)) || !(m->pl_b = pith_be_buffer(d->be, P, err)) ||
        !(m->pl_g = pith_be_buffer(d->be, P, err)))
        return -1;
    return 0;
}

/* The memory: the base decoder's WINDOW and FULL groups, then the KV-shared layers taken out of them (the
 * last layers, so the end of each group's list) and pointed at their source's place: the last earlier
 * layer of their kind (Gemma4TextAttention's store_full_length_kv). The FULL group's tokens are the global
 * layers' width. */
static int declare_memory(gemma4 *m, int kv_local, int kv_global, pith_err *err) {
    pith_decoder *d = &m->d;
    const pith_hparams *hp = &d->base.hp;
    const int first = pith_gemma4_first_shared(hp);
    if (pith_decoder_kv_memory(d, kv_local, window_of, err)) return -1;
    pith_mem_spec *spec = &d->base.mem;
    for (int g = 0; g < spec->n_groups; g++) {
        pith_mem_group *grp = &spec->groups[g];
        if (grp->kind == PITH_MEM_FULL) grp->k_dim = grp->v_dim = kv_global;
        int own = 0;
        while (own < grp->n_layers && grp->layers[own] < first) own++;
        grp->n_layers = own;
    }
    for (int l = first; l < hp->n_layers; l++) {
        int src = -1;
        for (int s = first - 1; s >= 0 && src < 0; s--)
            if (m->layers[s].kind == m->layers[l].kind) src = s;
        if (src < 0)
            return pith_errf(err, "layer %d shares the K and V of an earlier %s layer, and there is none", l,
                             m->layers[l].kind == LOCAL ? "window" : "global");
        if (!pith_decoder_has_layer(d, l)) continue;
        if (!pith_decoder_has_layer(d, src))
            return pith_errf(err, "--pp %d: layer %d shares the K and V of layer %d, which stage %d does not hold "
                                  "(fewer stages)", d->tp.n_stages, l, src, d->tp.stage);
        d->layer_group[l] = d->layer_group[src];
        d->layer_index[l] = d->layer_index[src];
    }
    return 0;
}

int pith_gemma4_build(pith_model_file *file, const pith_model_options *opt, pith_model **out, pith_err *err) {
    const pith_hparams *hp = pith_model_file_hparams(file);
    const pith_gemma4_params *P = pith_gemma4_params_of(hp);
    gemma4 *m = (gemma4 *)pith_decoder_new(sizeof *m, file, opt, &gemma4_ops, gemma4_free, err);
    if (!m) return -1;
    pith_decoder *d = &m->d;
    int rc = pith_decoder_shard_begin(d, true, err);
    hp = &d->base.hp; /* this rank's heads and FFN columns */
    const int R = d->tp.comm ? d->tp.size : 1;
    const int nkv_full = P->n_kv_heads_full;
    if (!rc && (nkv_full < R ? R % nkv_full : nkv_full % R))
        rc = pith_errf(err, "--tp %d: the global layers' %d KV heads neither divide by %d nor divide it", R, nkv_full, R);
    const int hd[2] = {hp->head_dim, P->head_dim_full}, nkv[2] = {hp->n_kv_heads, nkv_full < R ? 1 : nkv_full / R};
    bool has[2] = {false, false};
    m->embed_scale = embed_scale(file, "token_embd.weight", hp->dim);
    if (!rc && !(m->layers = calloc((size_t)hp->n_layers, sizeof *m->layers))) rc = pith_errf(err, "out of memory");
    pith_be_begin_layer(d->be, PITH_BE_LAYER_INPUT);
    /* a pipeline stage holds its layers only; the first stage the embeddings (every stage with per-layer
     * embeddings: their inputs come from the token's embedding), the last the head */
    if (!rc && (pith_decoder_first_stage(d) || P->ple_dim > 0))
        rc = pith_decoder_table(d, "token_embd.weight", &m->embd, err);
    if (!rc && P->ple_dim > 0) rc = load_ple(m, err); /* the per-layer inputs are computed with the embeddings */
    pith_be_begin_layer(d->be, PITH_BE_LAYER_OUTPUT);
    if (!rc && pith_decoder_last_stage(d)) rc = pith_decoder_vector(d, -1, "output_norm.weight", hp->dim, true, &m->out_norm, err);
    if (!rc && pith_decoder_last_stage(d)) rc = pith_decoder_output(d, &m->output, err);
    for (int l = 0; !rc && l < hp->n_layers; l++) {
        if (!pith_decoder_has_layer(d, l)) { /* another stage's: its kind still names its memory group */
            m->layers[l].kind = window_of(hp, l) > 0 ? LOCAL : GLOBAL;
            continue;
        }
        pith_be_begin_layer(d->be, l);
        rc = load_layer(d, l, &m->layers[l], err);
        if (!rc) has[m->layers[l].kind] = true, pith_decoder_progress(d, l + 1, hp->n_layers);
    }
    if (!rc && has[LOCAL]) rc = pith_rope_plain(hp, hp->rope_theta_swa, hp->head_dim, &m->rope[LOCAL], err);
    if (!rc && has[GLOBAL]) rc = global_rope(d, &m->rope[GLOBAL], err);
    if (!rc && hp->n_experts > 0) rc = d->be->vt->moe_place(d->be, d->base.experts, sizeof d->base.experts, err);
    if (!rc && hp->n_experts > 0 &&
        (!(m->y1 = pith_be_buffer(d->be, hp->dim, err)) || !(m->y2 = pith_be_buffer(d->be, hp->dim, err))))
        rc = -1;
    if (!rc) rc = pith_dec_bufs_make(d, hp->ffn_dim, &m->bufs, err);
    if (!rc) {
        m->wide = m->bufs;
        if (P->double_wide && (!(m->wide.hb = pith_be_buffer(d->be, 2 * hp->ffn_dim, err)) ||
                               !(m->wide.hb2 = pith_be_buffer(d->be, 2 * hp->ffn_dim, err))))
            rc = -1;
    }
    for (int t = LOCAL; !rc && t <= GLOBAL; t++) {
        if (!has[t]) continue;
        if (t == LOCAL) {
            m->q[t] = m->bufs.q, m->k[t] = m->bufs.k, m->v[t] = m->bufs.v, m->att[t] = m->bufs.att;
        } else if (!(m->q[t] = pith_be_buffer(d->be, hp->n_heads * hd[t], err)) ||
                   !(m->k[t] = pith_be_buffer(d->be, nkv[t] * hd[t], err)) ||
                   !(m->v[t] = pith_be_buffer(d->be, nkv[t] * hd[t], err)) ||
                   !(m->att[t] = pith_be_buffer(d->be, hp->n_heads * hd[t], err))) {
            rc = -1;
        }
        if (!rc && !(m->cs[t] = pith_be_buffer(d->be, hd[t], err))) rc = -1;
    }
    if (!rc) rc = declare_memory(m, nkv[LOCAL] * hd[LOCAL], nkv[GLOBAL] * hd[GLOBAL], err);
    int full = -1;
    for (int g = 0; !rc && g < d->base.mem.n_groups; g++)
        if (d->base.mem.groups[g].kind == PITH_MEM_FULL) full = g;
    if (!rc) {
        pith_be_attn_shape s = {.n_heads = hp->n_heads, .n_kv_heads = nkv[LOCAL], .head_dim = hd[LOCAL],
                                .scale = hp->query_scale > 0 ? hp->query_scale : 1.0f};
        if (full >= 0) s.alt_group = full, s.alt_n_kv_heads = nkv[GLOBAL], s.alt_head_dim = hd[GLOBAL];
        rc = d->be->vt->attn_shape(d->be, &s, err);
    }
    return pith_decoder_end(d, rc, out, err);
}
