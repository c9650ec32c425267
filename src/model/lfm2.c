/* The LFM2 forward pass (see lfm2_arch.c), over a flat batch and the model's two memory groups.
 *
 * One step: embed every token; per layer, RMSNorm (operator_norm) and then its token mixer:
 *   attention layers: Q/K/V projections, an RMS norm on each Q and K head, RoPE over halves, K/V into
 *     the token's slot of the FULL group, causal attention through the group's block tables, the output
 *     projection added to the residual;
 *   convolution layers: in_proj into B, C and x (in that order), B * x through a causal depthwise
 *     convolution of width K whose last K-1 inputs are the sequence's carried state (zero at
 *     position 0), C times that, out_proj added to the residual;
 * then RMSNorm and a SwiGLU feed-forward added to the residual; finally token_embd_norm and the
 * vocabulary projection (tied to the embeddings unless output.weight exists), only for the rows that
 * want logits or hidden states. Every projection is one matmul over all tokens of the step.
 *
 * Memory: a FULL group of the attention layers (K and V of n_kv_heads * head_dim per token, F16) and a
 * RECURRENT group of the convolution layers: per sequence, for each convolution layer i of the group in
 * order, its state of (K - 1) x dim floats, [K - 1][dim] oldest first (recurrent.h), at float offset
 * i * (K - 1) * dim of the slot. A group is left out when the model has no layer of its kind.
 * Checkpoints (batch.h): a sequence's run is convolved in pieces ending at its checkpointed tokens, and
 * after each piece the state (the last K-1 inputs up to that token) is copied to the checkpoint slot.
 * RoPE is plain theta (a file that declares a scaling is refused: rope.h). Built from the layer library
 * (model/layers.h) over the backend interface; the short convolution is the backend's short_conv op.
 * Under --tp the convolution splits by channel (each rank its dim / N channels of B, C and x, their
 * kernels and state, and its columns of out_proj, summed across ranks), attention and FFN as Megatron. */
#include "model/lfm2.h"

#include <stdio.h>
#include <stdlib.h>

#include "model/decoder.h"
#include "model/layers.h"
#include "model/rope.h"

typedef struct lfm2_layer {
    bool conv;
    const pith_weight *attn_norm, *ffn_norm;
    pith_attn_block attn;
    const pith_weight *in_proj, *out_proj, *conv_w; /* conv_w: [dim][K] */
    pith_ffn_block ffn;
} lfm2_layer;

typedef struct lfm2 {
    pith_decoder d; /* first: the base decoder */
    int K;
    int conv_dim;   /* the convolution's channels on this rank: dim, or dim / N under --tp */
    lfm2_layer *layers;
    const pith_weight *embd, *out_norm, *output;
    pith_rope rope;
    pith_dec_bufs bufs;
    pith_buf *cs, *bcx, *cx; /* RoPE tables; the convolution's [B | C | x] and its output */
} lfm2;

static int load_layer(lfm2 *m, int l, pith_err *err) {
    pith_decoder *d = &m->d;
    const pith_hparams *hp = &d->base.hp;
    lfm2_layer *L = &m->layers[l];
    int dim = hp->dim, cd = m->conv_dim;
    L->conv = pith_layer_bit(hp->layer_recurrent, l);
    if (pith_decoder_vector(d, l, "attn_norm.weight", dim, true, &L->attn_norm, err) ||
        pith_decoder_vector(d, l, "ffn_norm.weight", dim, true, &L->ffn_norm, err) ||
        pith_ffn_block_load(d, l, PITH_GLU_SILU, &L->ffn, err))
        return pith_err_prefix(err, "layer %d", l);
    if (!L->conv) {
        if (pith_attn_block_load(d, l, PITH_QK_NORM_HEAD, &L->attn, err)) return pith_err_prefix(err, "layer %d", l);
        if (!L->attn.q_norm) return pith_errf(err, "layer %d: missing tensor blk.%d.attn_q_norm.weight", l, l);
        return 0;
    }
    char name[64];
    snprintf(name, sizeof name, "blk.%d.shortconv.conv.weight", l);
    const pith_tensor *c = pith_model_file_tensor(d->file, name);
    if (c && c->ne[0] != m->K)
        return pith_errf(err, "layer %d: tensor %s: width %lld, expected %d", l, name, (long long)c->ne[0], m->K);
    const pith_weight *bias[2];
    if (pith_decoder_vector(d, l, "shortconv.in_proj.bias", 3 * dim, false, &bias[0], err) ||
        pith_decoder_vector(d, l, "shortconv.conv.bias", dim, false, &bias[1], err) || bias[0] || bias[1])
        return pith_errf(err, "layer %d: short convolution biases are not supported", l);
    /* sharded by channel: this rank's rows of each of B, C and x, its channels' kernels, its columns of out */
    const int parts[3] = {dim, dim, dim}, kernels = dim * m->K;
    if (pith_decoder_vector_parts(d, l, "shortconv.conv.weight", 1, &kernels, NULL, &L->conv_w, err) ||
        pith_decoder_matrix_parts(d, l, "shortconv.in_proj.weight", dim, 3, parts, NULL, &L->in_proj, err) ||
        pith_decoder_matrix_rows(d, l, "shortconv.out_proj.weight", cd, dim, 0, dim, &L->out_proj, err))
        return pith_err_prefix(err, "layer %d", l);
    return 0;
}

static void lfm2_free(pith_decoder *d) {
    lfm2 *m = (lfm2 *)d;
    free(m->layers);
    pith_rope_free(&m->rope);
}

static int lfm2_forward(pith_model *base, const pith_batch *b, float *logits, pith_err *err);
static const pith_model_ops lfm2_ops = PITH_DECODER_OPS(lfm2_forward);

int pith_lfm2_build(pith_model_file *file, const pith_model_options *opt, pith_model **out, pith_err *err) {
    *out = NULL;
    const pith_hparams *hp = pith_model_file_hparams(file);
    lfm2 *m = (lfm2 *)pith_decoder_new(sizeof *m, file, opt, &lfm2_ops, lfm2_free, err);
    if (!m) return -1;
    pith_decoder *d = &m->d;
    d->base.state_checkpoints = true; /* the short_conv op copies the state after checkpointed tokens */
    m->K = hp->conv_kernel;
    int rc = pith_decoder_shard_begin(d, true, err);
    hp = &d->base.hp; /* this rank's heads and FFN columns */
    const int N = d->tp.comm ? d->tp.size : 1;
    if (!rc && hp->dim % N) rc = pith_errf(err, "--tp %d: the convolution's %d channels do not divide by %d", N, hp->dim, N);
    m->conv_dim = hp->dim / N;
    if (!rc) rc = pith_decoder_attn_shape(d, err);
    if (!rc && !(m->layers = calloc((size_t)hp->n_layers, sizeof *m->layers))) rc = pith_errf(err, "out of memory");
    pith_be_begin_layer(d->be, PITH_BE_LAYER_INPUT);
    /* a pipeline stage holds its layers only; the first stage the embeddings, the last the head */
    if (!rc && pith_decoder_first_stage(d)) rc = pith_decoder_table(d, "token_embd.weight", &m->embd, err);
    pith_be_begin_layer(d->be, PITH_BE_LAYER_OUTPUT);
    if (!rc && pith_decoder_last_stage(d))
        rc = pith_decoder_vector(d, -1, "token_embd_norm.weight", hp->dim, true, &m->out_norm, err);
    if (!rc && pith_decoder_last_stage(d)) rc = pith_decoder_output(d, &m->output, err);
    for (int l = 0; !rc && l < hp->n_layers; l++) {
        if (!pith_decoder_has_layer(d, l)) continue;
        pith_be_begin_layer(d->be, l);
        rc = load_layer(m, l, err);
        if (!rc) pith_decoder_progress(d, l + 1, hp->n_layers);
    }
    if (!rc) rc = pith_rope_for(hp, file, hp->head_dim, 0, &m->rope, pith_model_file_path(file), err);
    if (!rc) rc = pith_dec_bufs_make(d, hp->ffn_dim, &m->bufs, err);
    if (!rc && (!(m->cs = pith_be_buffer(d->be, hp->head_dim, err)) || !(m->bcx = pith_be_buffer(d->be, 3 * m->conv_dim, err)) ||
                !(m->cx = pith_be_buffer(d->be, m->conv_dim, err))))
        rc = -1;
    if (!rc) rc = pith_decoder_hybrid_memory(d, hp->n_kv_heads * hp->head_dim, (size_t)(m->K - 1) * (size_t)m->conv_dim, 0, err);
    return pith_decoder_end(d, rc, out, err);
}

/* ---------------- forward ---------------- */

static int layer_forward(lfm2 *m, const pith_batch *b, int l, int *n_rows, pith_err *err) {
    pith_decoder *d = &m->d;
    const pith_hparams *hp = &d->base.hp;
    const lfm2_layer *L = &m->layers[l];
    const pith_dec_bufs *B = &m->bufs;
    int n = b->n_tokens;
    pith_be_rmsnorm(d->be, B->x, L->attn_norm, hp->norm_eps, B->xb, n);
    if (L->conv) {
        const pith_be_mm in = {L->in_proj, m->bcx, false};
        pith_be_short_conv_args sc = {m->bcx, m->cx, L->conv_w, m->K, d->layer_group[l],
                                      (size_t)d->layer_index[l] * (m->K - 1) * m->conv_dim};
        if (pith_be_matmul(d->be, B->xb, &in, 1, n, err)) return -1;
        pith_be_short_conv(d->be, &sc, n);
        if (pith_block_out_proj(d, L->out_proj, m->cx, B, n, err)) return -1;
    } else {
        if (pith_attn_block_qkv(d, &L->attn, l, B, B->xb, m->cs, n, err)) return -1;
        pith_attn_block_attend(d, &L->attn, l, B, n);
        if (pith_attn_block_out(d, &L->attn, B, NULL, n, err)) return -1;
    }
    /* after the last mixer only the rows that want output matter */
    if (l == hp->n_layers - 1) {
        pith_buf *const keep[] = {B->x};
        n = pith_decoder_n_kept(b);
        if (n > 0) pith_be_keep_rows(d->be, keep, 1);
    }
    *n_rows = n;
    if (n == 0) return 0;
    pith_be_rmsnorm(d->be, B->x, L->ffn_norm, hp->norm_eps, B->xb, n);
    return pith_ffn_block_forward(d, &L->ffn, B, B->xb, NULL, n, err);
}

static int lfm2_forward(pith_model *base, const pith_batch *b, float *logits, pith_err *err) {
    lfm2 *m = base->impl;
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
    return pith_head_forward(d, &m->bufs, m->out_norm, m->output, b, err);
}
