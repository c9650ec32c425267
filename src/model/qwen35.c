/* The Qwen3.5 forward pass (see qwen35_arch.c), over a flat batch and the model's two memory groups.
 *
 * One step: embed every token; per layer, RMSNorm and then its token mixer:
 *   attention layers: Q+gate, K and V projections; an RMS norm on each Q and K head; RoPE over halves of
 *     the first rope_dim dimensions of each head (M-RoPE with every section at the token's position,
 *     which is plain RoPE over those dimensions); K/V into the token's slot of the FULL group; causal
 *     attention through the block tables; the output times sigmoid(gate), projected and added to the
 *     residual;
 *   Gated DeltaNet layers: the q/k/v projection through the causal convolution (SiLU) whose last K-1
 *     inputs are the sequence's carried state; beta = sigmoid(b), g = ssm_a * softplus(a + dt_bias); the
 *     delta rule per value head (recurrent.h), each head's output RMS-normed and gated by silu(z),
 *     projected and added;
 * then post_attention_norm and a SwiGLU feed-forward (qwen35moe: the mixture of experts with its gated
 * shared expert, backend/cpu/moe.h); finally output_norm and the vocabulary projection for the rows that
 * want logits or hidden states.
 *
 * Memory: a FULL group of the attention layers (K and V, F16) and a RECURRENT group of the DeltaNet
 * layers: per sequence, for each DeltaNet layer i of the group in order, its convolution state
 * ([K - 1][conv channels] floats, oldest first) followed by its delta-rule state ([value heads][key
 * width][value width] floats), at float offset i * (both) of the slot. Checkpoints (batch.h): the
 * backend's gdn op copies both states after each checkpointed token (the same bits as one run).
 * RoPE is plain theta over the rotated dimensions (a file that declares a scaling is refused: rope.h).
 *
 * Built on the base decoder (decoder.h) and the layer library (layers.h) over the backend interface;
 * the DeltaNet mixer, its gated norm and the gated attention's Q/K/V and output gate are the backend's
 * Qwen3.5 ops (backend.h), the MTP head's too (qwen35_mtp.c). */
#include "model/qwen35.h"
#include "model/qwen35_internal.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------- build ---------------- */

int q35_load_layer(q35 *m, int l, bool delta, q35_layer *L, pith_err *err) {
    pith_decoder *d = &m->d;
    const pith_hparams *hp = &d->base.hp;
    const pith_qwen35_params *P = pith_arch_params(hp);
    int dim = hp->dim, ffn = hp->ffn_dim, hd = hp->head_dim, nv = P->gdn_v_heads;
    L->delta = delta;
    if (pith_decoder_vector(d, l, "attn_norm.weight", dim, true, &L->attn_norm, err) ||
        pith_decoder_vector(d, l, "post_attention_norm.weight", dim, true, &L->post_norm, err))
        return pith_err_prefix(err, "layer %d", l);
    if (hp->n_experts > 0) {
        static const char *const hf_experts[3] = {"mlp.experts.%d.gate_proj.weight", "mlp.experts.%d.up_proj.weight",
                                                  "mlp.experts.%d.down_proj.weight"};
        if (pith_ffn_block_load_moe(d, l, hf_experts, 0, false, &L->ffn, err)) return pith_err_prefix(err, "layer %d", l);
    } else {
        L->ffn.act = PITH_GLU_SILU;
        if (pith_decoder_matrix_of(d, l, "ffn_gate.weight", ffn, dim, &L->ffn.gate, err) ||
            pith_decoder_matrix_of(d, l, "ffn_up.weight", ffn, dim, &L->ffn.up, err) ||
            pith_decoder_matrix_of(d, l, "ffn_down.weight", dim, ffn, &L->ffn.down, err))
            return pith_err_prefix(err, "layer %d", l);
    }
    if (delta) {
        char name[96];
        snprintf(name, sizeof name, "blk.%d.ssm_conv1d.weight", l);
        const pith_tensor *c = pith_model_file_tensor(d->file, name);
        if (c && c->ne[0] != m->K)
            return pith_errf(err, "layer %d: tensor %s: width %lld, expected %d", l, name, (long long)c->ne[0], m->K);
        /* Qwen3-Next's fused projections (qwen3next_arch.c reorders their rows at load): ssm_in is
         * [q | k | v | z], ssm_ba [beta | alpha]; Qwen3.5's files have neither. Sharded by key head: each
         * rank its nk / N key heads and the value heads that read them, which in GGUF's tiled order (value
         * head h reads key head h % nk) are every nk-th: there the value parts are nv / nk runs of nk heads,
         * each split over the ranks, so that this rank's value head h' reads its key head h' % (nk / N) */
        snprintf(name, sizeof name, "blk.%d.ssm_in.weight", l);
        int fused_in = pith_model_file_tensor(d->file, name) != NULL;
        snprintf(name, sizeof name, "blk.%d.ssm_ba.weight", l);
        int fused_ba = pith_model_file_tensor(d->file, name) != NULL;
        const int nk = P->gdn_k_heads, dk = P->gdn_k_dim, dv = P->gdn_v_dim, K = m->K;
        const int runs = m->qk_tiled ? nv / nk : 1, run_heads = nv / runs;
        enum { MAXP = 2 + 2 * 64 };
        if (runs > 64) return pith_errf(err, "layer %d: %d value heads per key head is too many", l, runs);
        int rows[MAXP], conv[MAXP], heads[MAXP], cols[64];
        unsigned char qkv_mode[MAXP], z_mode[MAXP], b_mode[MAXP], a_mode[MAXP];
        rows[0] = rows[1] = nk * dk, conv[0] = conv[1] = nk * dk * K;
        qkv_mode[0] = qkv_mode[1] = PITH_PART_SPLIT, z_mode[0] = z_mode[1] = PITH_PART_SKIP;
        for (int r = 0; r < runs; r++) {
            rows[2 + r] = rows[2 + runs + r] = run_heads * dv, conv[2 + r] = run_heads * dv * K;
            qkv_mode[2 + r] = PITH_PART_SPLIT, qkv_mode[2 + runs + r] = PITH_PART_SKIP;
            z_mode[2 + r] = PITH_PART_SKIP, z_mode[2 + runs + r] = PITH_PART_SPLIT;
            heads[r] = heads[runs + r] = run_heads, cols[r] = run_heads * dv;
            b_mode[r] = PITH_PART_SPLIT, b_mode[runs + r] = PITH_PART_SKIP;
            a_mode[r] = PITH_PART_SKIP, a_mode[runs + r] = PITH_PART_SPLIT;
        }
        const int n_qkv = 2 + runs, n_all = 2 + 2 * runs;
        if ((fused_in ? pith_decoder_matrix_parts(d, l, "ssm_in.weight", dim, n_all, rows, qkv_mode, &L->wqkv, err) ||
                            pith_decoder_matrix_parts(d, l, "ssm_in.weight", dim, n_all, rows, z_mode, &L->wz, err)
                      : pith_decoder_matrix_parts(d, l, "attn_qkv.weight", dim, n_qkv, rows, NULL, &L->wqkv, err) ||
                            pith_decoder_matrix_parts(d, l, "attn_gate.weight", dim, runs, rows + 2, NULL, &L->wz, err)) ||
            (fused_ba ? pith_decoder_matrix_parts(d, l, "ssm_ba.weight", dim, 2 * runs, heads, b_mode, &L->wb, err) ||
                            pith_decoder_matrix_parts(d, l, "ssm_ba.weight", dim, 2 * runs, heads, a_mode, &L->wa, err)
                      : pith_decoder_matrix_parts(d, l, "ssm_beta.weight", dim, runs, heads, NULL, &L->wb, err) ||
                            pith_decoder_matrix_parts(d, l, "ssm_alpha.weight", dim, runs, heads, NULL, &L->wa, err)) ||
            pith_decoder_matrix_col_parts(d, l, "ssm_out.weight", dim, runs, cols, &L->wout, err) ||
            pith_decoder_vector_parts(d, l, "ssm_conv1d.weight", n_qkv, conv, NULL, &L->conv_w, err) ||
            pith_decoder_vector_parts(d, l, "ssm_dt.bias", runs, heads, NULL, &L->dt_bias, err) ||
            pith_decoder_vector_parts(d, l, "ssm_a", runs, heads, NULL, &L->ssm_a, err) ||
            pith_decoder_vector(d, l, "ssm_norm.weight", P->gdn_v_dim, true, &L->ssm_norm, err))
            return pith_err_prefix(err, "layer %d", l);
        return 0;
    }
    pith_attn_block *A = &L->attn;
    A->qk_norm = PITH_QK_NORM_HEAD;
    if (pith_decoder_matrix_of(d, l, "attn_q.weight", 2 * m->q_dim, dim, &A->wq, err) ||
        pith_decoder_matrix_of(d, l, "attn_k.weight", m->kv_dim, dim, &A->wk, err) ||
        pith_decoder_matrix_of(d, l, "attn_v.weight", m->kv_dim, dim, &A->wv, err) ||
        pith_decoder_matrix_of(d, l, "attn_output.weight", dim, m->q_dim, &A->wo, err) ||
        pith_decoder_vector(d, l, "attn_q_norm.weight", hd, true, &A->q_norm, err) ||
        pith_decoder_vector(d, l, "attn_k_norm.weight", hd, true, &A->k_norm, err))
        return pith_err_prefix(err, "layer %d", l);
    return 0;
}

size_t q35_weight_bytes(const pith_weight *w) {
    return w ? (size_t)w->rows * pith_dtype_row_bytes(w->type, w->cols) : 0;
}

size_t q35_layer_bytes(const q35_layer *L) {
    const pith_weight *ws[] = {L->attn.wq, L->attn.wk, L->attn.wv, L->attn.wo, L->wqkv, L->wz, L->wb, L->wa, L->wout,
                               L->ffn.gate, L->ffn.up, L->ffn.down};
    size_t n = 0;
    for (size_t i = 0; i < sizeof ws / sizeof *ws; i++) n += q35_weight_bytes(ws[i]);
    return n;
}

static void q35_free(pith_decoder *d) {
    q35 *m = (q35 *)d;
    q35_mtp_free(m);
    free(m->layers);
    pith_rope_free(&m->rope);
}

static int q35_forward(pith_model *base, const pith_batch *b, float *logits, pith_err *err);
static const pith_model_ops q35_ops = {
    .prepare = pith_decoder_prepare, .mem_alloc = pith_decoder_mem_alloc, .mem_free = pith_decoder_mem_free,
    .copy_blocks = pith_decoder_copy_blocks, .forward = q35_forward, .mtp_draft = q35_mtp_draft,
    .destroy = pith_decoder_destroy,
};

/* The hybrid memory (decoder.h); with the MTP head, its layer (n_layers) joins the FULL group as the
 * last layer and every RECURRENT slot grows by the head's last hidden state. */
static int declare_memory(q35 *m, pith_err *err) {
    pith_decoder *d = &m->d;
    const pith_hparams *hp = &d->base.hp;
    if (pith_decoder_hybrid_memory(d, m->kv_dim, m->conv_floats + m->state_floats, 1, err)) return -1;
    if (!m->mtp) return 0;
    pith_mem_spec *spec = &d->base.mem;
    if (spec->n_groups != 2 || spec->groups[0].kind != PITH_MEM_FULL)
        return pith_errf(err, "an MTP head needs the decoder to have both attention and DeltaNet layers");
    /* group_layers: the FULL group's layers, then the RECURRENT group's: shift those by one */
    pith_mem_group *full = &spec->groups[0], *rec = &spec->groups[1];
    memmove(d->group_layers + full->n_layers + 1, d->group_layers + full->n_layers, (size_t)rec->n_layers * sizeof(int));
    d->group_layers[full->n_layers] = hp->n_layers;
    d->layer_group[hp->n_layers] = 0;
    d->layer_index[hp->n_layers] = full->n_layers++;
    full->layers = d->group_layers;
    rec->layers = d->group_layers + full->n_layers;
    rec->state_bytes += q35_mtp_tail_floats(m) * sizeof(float);
    return pith_mem_spec_check(spec, hp->n_layers + 1, err);
}

static int make_buffers(q35 *m, pith_err *err) {
    pith_decoder *d = &m->d;
    const pith_hparams *hp = &d->base.hp;
    pith_backend *be = d->be;
    int nv = m->n_v_heads;
    if (pith_dec_bufs_make(d, hp->n_experts > 0 ? 0 : hp->ffn_dim, &m->bufs, err)) return -1;
    return !(m->cs = pith_be_buffer(be, m->n_rot, err)) || !(m->qg = pith_be_buffer(be, 2 * m->q_dim, err)) ||
                   !(m->qkv = pith_be_buffer(be, m->conv_dim, err)) || !(m->z = pith_be_buffer(be, m->value_dim, err)) ||
                   !(m->beta = pith_be_buffer(be, nv, err)) || !(m->alpha = pith_be_buffer(be, nv, err)) ||
                   !(m->dn = pith_be_buffer(be, m->value_dim, err))
               ? -1
               : 0;
}

int pith_qwen35_build(pith_model_file *file, const pith_model_options *opt, pith_model **out, pith_err *err) {
    *out = NULL;
    const pith_hparams *hp = pith_model_file_hparams(file);
    const pith_qwen35_params *P = pith_arch_params(hp);
    q35 *m = (q35 *)pith_decoder_new(sizeof *m, file, opt, &q35_ops, q35_free, err);
    if (!m) return -1;
    pith_decoder *d = &m->d;
    d->base.state_checkpoints = true; /* the gdn op (and mtp_save) copy the state after checkpointed tokens */
    int rc = pith_decoder_shard_begin(d, true, err);
    hp = &d->base.hp; /* this rank's attention heads and FFN columns */
    const int R = d->tp.comm ? d->tp.size : 1;
    if (!rc && (P->gdn_k_heads % R || P->gdn_v_heads % P->gdn_k_heads))
        rc = pith_errf(err, "--tp %d: the DeltaNet's %d key heads do not divide by %d", R, P->gdn_k_heads, R);
    m->n_k_heads = P->gdn_k_heads / R;
    m->n_v_heads = P->gdn_v_heads / R;
    m->q_dim = hp->n_heads * hp->head_dim;
    m->kv_dim = hp->n_kv_heads * hp->head_dim;
    m->n_rot = P->rope_dim > 0 ? P->rope_dim : hp->head_dim;
    m->K = hp->conv_kernel;
    m->key_dim = m->n_k_heads * P->gdn_k_dim;
    m->value_dim = m->n_v_heads * P->gdn_v_dim;
    m->conv_dim = 2 * m->key_dim + m->value_dim;
    m->conv_floats = (size_t)(m->K - 1) * m->conv_dim;
    m->state_floats = (size_t)m->n_v_heads * P->gdn_k_dim * P->gdn_v_dim;
    m->qk_tiled = pith_model_file_format(file) == PITH_FORMAT_GGUF && !P->qk_grouped;
    if (!rc && (long long)m->conv_dim * m->K > INT_MAX)
        rc = pith_errf(err, "DeltaNet convolution of %d channels by %d is too large", m->conv_dim, m->K);
    if (!rc) rc = pith_decoder_attn_shape(d, err);
    if (!rc) rc = pith_be_gdn_shape(d->be, P->gdn_k_dim, P->gdn_v_dim, err);
    if (!rc && !(m->layers = calloc((size_t)hp->n_layers, sizeof *m->layers))) rc = pith_errf(err, "out of memory");
    pith_be_begin_layer(d->be, PITH_BE_LAYER_INPUT);
    /* a pipeline stage holds its layers only; the first stage the embeddings, the last the head */
    if (!rc && pith_decoder_first_stage(d)) rc = pith_decoder_table(d, "token_embd.weight", &m->embd, err);
    pith_be_begin_layer(d->be, PITH_BE_LAYER_OUTPUT);
    if (!rc && pith_decoder_last_stage(d)) rc = pith_decoder_vector(d, -1, "output_norm.weight", hp->dim, true, &m->out_norm, err);
    if (!rc && pith_decoder_last_stage(d)) rc = pith_decoder_output(d, &m->output, err);
    /* Progress: each layer loaded (its matrices repacked), then the experts placed. */
    for (int l = 0; !rc && l < hp->n_layers; l++) {
        if (!pith_decoder_has_layer(d, l)) continue;
        pith_be_begin_layer(d->be, l);
        rc = q35_load_layer(m, l, pith_layer_bit(hp->layer_recurrent, l), &m->layers[l], err);
        if (!rc) pith_decoder_progress(d, l + 1, hp->n_layers + 1);
    }
    if (!rc && hp->n_experts > 0) rc = d->be->vt->moe_place(d->be, d->base.experts, sizeof d->base.experts, err);
    if (!rc && opt && opt->mtp) rc = q35_mtp_load(m, err);
    if (!rc) rc = pith_rope_for(hp, file, m->n_rot, 0, &m->rope, pith_model_file_path(file), err);
    /* M-RoPE (Qwen3-VL's interleaved layout): sections over the rotated pairs make images possible, their
     * tokens on their grid (batch.h: rope_pos); without them the model is text only */
    if (!rc && pith_rope_mrope(&m->rope, P->rope_sections)) d->base.has_embeds = d->base.has_mrope = true;
    if (!rc) rc = make_buffers(m, err);
    if (!rc) rc = declare_memory(m, err);
    d->base.has_mtp = m->mtp != NULL;
    if (!rc) pith_decoder_progress(d, 1, 1);
    return pith_decoder_end(d, rc, out, err);
}

/* ---------------- forward ---------------- */

void q35_gated_qkv(q35 *m, const q35_layer *L, pith_buf *q, int group, int layer_index, int n) {
    pith_decoder *d = &m->d;
    pith_be_gated_qkv_args op = {
        .qg = q ? m->qg : NULL, .q = q, .k = m->bufs.k, .v = m->bufs.v, .q_norm = L->attn.q_norm,
        .k_norm = L->attn.k_norm, .eps = d->base.hp.norm_eps, .rope_cs = m->cs, .rope_style = m->rope.style,
        .group = group, .layer_index = layer_index,
    };
    pith_be_gated_qkv(d->be, &op, n);
}

static int attention_mixer(q35 *m, int l, int n, pith_err *err) {
    pith_decoder *d = &m->d;
    const q35_layer *L = &m->layers[l];
    const pith_dec_bufs *B = &m->bufs;
    const pith_be_mm qkv[] = {{L->attn.wq, m->qg, false}, {L->attn.wk, B->k, false}, {L->attn.wv, B->v, false}};
    if (pith_be_matmul(d->be, B->xb, qkv, 3, n, err)) return -1;
    q35_gated_qkv(m, L, B->q, d->layer_group[l], d->layer_index[l], n);
    pith_attn_block_attend(d, &L->attn, l, B, n);
    const pith_be_attn_gate_args gate = {B->att, m->qg};
    pith_be_attn_gate(d->be, &gate, n);
    return pith_attn_block_out(d, &L->attn, B, NULL, n, err);
}

static int delta_mixer(q35 *m, int l, int n, pith_err *err) {
    pith_decoder *d = &m->d;
    const pith_hparams *hp = &d->base.hp;
    const pith_qwen35_params *P = pith_arch_params(hp);
    const q35_layer *L = &m->layers[l];
    const pith_be_mm proj[] = {{L->wqkv, m->qkv, false}, {L->wz, m->z, false}, {L->wb, m->beta, false},
                               {L->wa, m->alpha, false}};
    if (pith_be_matmul(d->be, m->bufs.xb, proj, 4, n, err)) return -1;
    const pith_be_gdn_args gdn = {
        .qkv = m->qkv, .beta = m->beta, .alpha = m->alpha, .out = m->dn, .conv_w = L->conv_w, .dt_bias = L->dt_bias,
        .ssm_a = L->ssm_a, .kernel = m->K, .n_k_heads = m->n_k_heads, .n_v_heads = m->n_v_heads,
        .dk = P->gdn_k_dim, .dv = P->gdn_v_dim, .qk_tiled = m->qk_tiled, .group = d->layer_group[l],
        .state_offset = (size_t)d->layer_index[l] * (m->conv_floats + m->state_floats),
    };
    pith_be_gdn(d->be, &gdn, n);
    const pith_be_gated_norm_args norm = {m->dn, m->z, L->ssm_norm, hp->norm_eps};
    pith_be_gated_norm(d->be, &norm, n);
    return pith_block_out_proj(d, L->wout, m->dn, &m->bufs, n, err);
}

static int layer_forward(q35 *m, const pith_batch *b, int l, int *n_rows, pith_err *err) {
    pith_decoder *d = &m->d;
    const pith_hparams *hp = &d->base.hp;
    const q35_layer *L = &m->layers[l];
    const pith_dec_bufs *B = &m->bufs;
    int n = b->n_tokens;
    pith_be_rmsnorm(d->be, B->x, L->attn_norm, hp->norm_eps, B->xb, n);
    if ((L->delta ? delta_mixer : attention_mixer)(m, l, n, err)) return -1;
    /* after the last mixer only the rows that want output matter; the MTP head needs every token's */
    if (l == hp->n_layers - 1 && !m->mtp) {
        pith_buf *const keep[] = {B->x};
        n = pith_decoder_n_kept(b);
        if (n > 0) pith_be_keep_rows(d->be, keep, 1);
    }
    *n_rows = n;
    if (n == 0) return 0;
    pith_be_rmsnorm(d->be, B->x, L->post_norm, hp->norm_eps, B->xb, n);
    return pith_ffn_block_forward(d, &L->ffn, B, B->xb, NULL, n, err);
}

static int q35_forward(pith_model *base, const pith_batch *b, float *logits, pith_err *err) {
    q35 *m = base->impl;
    pith_decoder *d = &m->d;
    if (pith_decoder_step(d, b, logits, err)) return -1;
    int n = b->n_tokens;
    if (n == 0) return 0;
    if (pith_decoder_first_stage(d)) pith_be_embed(d->be, m->embd, 0, m->bufs.x, n);
    else if (pith_decoder_stage_recv(d, m->bufs.x, n, err)) return -1;
    pith_be_rope_tables(d->be, &m->rope, m->cs, n);
    for (int l = 0; l < base->hp.n_layers; l++) {
        if (!pith_decoder_has_layer(d, l)) continue;
        pith_be_begin_layer(d->be, l);
        if (layer_forward(m, b, l, &n, err)) return -1;
    }
    if (!pith_decoder_last_stage(d)) return pith_decoder_stage_send(d, m->bufs.x, n, err);
    /* a step that keeps no row still ends with its head (backend.h): a device backend runs it there */
    if (n > 0 && m->mtp) {
        if (q35_mtp_after_decoder(m, b, err)) return -1;
        pith_buf *const keep[] = {m->bufs.x};
        if (pith_decoder_n_kept(b) > 0) pith_be_keep_rows(d->be, keep, 1);
    }
    return pith_head_forward(d, &m->bufs, m->out_norm, m->output, b, err);
}
