/* The Nemotron-H forward pass (see nemotronh_arch.c), over a flat batch and the model's two memory
 * groups, composed from the layer library (model/layers.h) and the shared Mamba2 mixer (model/mamba2.h)
 * on the base decoder.
 *
 * One step: embed every token; per layer, RMSNorm (the layer's one norm) and then its block, whose
 * output is added to the residual:
 *   Mamba2 layers: projection, convolution and SSD scan with carried state, gated norm per B/C group,
 *     output projection;
 *   attention layers: Q/K/V projections, no RoPE, K/V into the token's slot of the FULL group, causal
 *     attention (scores times 1/sqrt(head_dim)) through the block tables, the output projection;
 *   MLP layers: down(relu(up(x))^2);
 * finally output_norm and the vocabulary projection (tied unless output.weight exists), only for the rows
 * that want logits or hidden states (a last MLP layer runs on those rows alone).
 *
 * Memory: a FULL group of the attention layers (K and V, F16) and a RECURRENT group of the Mamba2 layers
 * (mamba2.h's state layout); MLP layers keep nothing. State checkpoints (batch.h) are the mamba2 op's.
 * No layer rotates, so no RoPE scaling can apply and none is checked. */
#include "model/nemotronh.h"

#include <stdio.h>
#include <stdlib.h>

#include "model/decoder.h"
#include "model/layers.h"
#include "model/mamba2.h"

typedef enum nh_kind { NH_MAMBA, NH_ATTN, NH_MLP } nh_kind;

typedef struct nh_layer {
    nh_kind kind;
    const pith_weight *norm;
    pith_mamba2_layer ssm;
    pith_attn_block attn;
    pith_ffn_block mlp;
} nh_layer;

typedef struct nh {
    pith_decoder d; /* first: the base decoder */
    pith_mamba2_dims md;
    nh_layer *layers;
    const pith_weight *embd, *out_norm, *output;
    pith_dec_bufs bufs;
    pith_mamba2_bufs mb;
} nh;

static int load_layer(nh *m, int l, pith_err *err) {
    pith_decoder *d = &m->d;
    const pith_hparams *hp = &d->base.hp;
    nh_layer *L = &m->layers[l];
    char n[96];
    L->kind = pith_layer_bit(hp->layer_recurrent, l) ? NH_MAMBA : pith_layer_bit(hp->layer_mlp, l) ? NH_MLP : NH_ATTN;
#define NAME(s) (snprintf(n, sizeof n, "blk.%d.%s", l, s), n)
    int rc = 0;
    if (L->kind != NH_MAMBA && pith_model_file_tensor(d->file, NAME("ssm_in.weight")))
        rc = pith_errf(err, "tensor %s in a layer the metadata does not make Mamba2", n);
    const char *biases[] = {"attn_q.bias", "attn_k.bias", "attn_v.bias", "attn_output.bias", "ffn_up.bias",
                            "ffn_down.bias", "ssm_in.bias", "ssm_out.bias"};
    for (size_t i = 0; !rc && i < sizeof biases / sizeof *biases; i++)
        if (pith_model_file_tensor(d->file, NAME(biases[i]))) rc = pith_errf(err, "tensor %s: biases are not supported", n);
#undef NAME
    if (!rc) rc = pith_decoder_vector(d, l, "attn_norm.weight", hp->dim, true, &L->norm, err);
    if (!rc && L->kind == NH_MAMBA) rc = pith_mamba2_load(d, l, &m->md, &L->ssm, err);
    if (!rc && L->kind == NH_MLP) rc = pith_ffn_block_load_mlp(d, l, PITH_ACTIVATION_RELU2, &L->mlp, err);
    if (!rc && L->kind == NH_ATTN) rc = pith_attn_block_load(d, l, PITH_QK_NORM_NONE, &L->attn, err);
    return rc ? pith_err_prefix(err, "layer %d", l) : 0;
}

static void nh_free(pith_decoder *d) { free(((nh *)d)->layers); }

static int nh_forward(pith_model *base, const pith_batch *b, float *logits, pith_err *err);
static const pith_model_ops nh_ops = PITH_DECODER_OPS(nh_forward);

int pith_nemotronh_build(pith_model_file *file, const pith_model_options *opt, pith_model **out, pith_err *err) {
    *out = NULL;
    const pith_hparams *hp = pith_model_file_hparams(file);
    nh *m = (nh *)pith_decoder_new(sizeof *m, file, opt, &nh_ops, nh_free, err);
    if (!m) return -1;
    pith_decoder *d = &m->d;
    d->base.state_checkpoints = true; /* the mamba2 op copies the state after checkpointed tokens */
    pith_mamba2_dims_of(hp, true, &m->md); /* MambaRMSNormGated: per group in both formats */
    bool any_mlp = false;
    for (int l = 0; l < hp->n_layers; l++) any_mlp |= pith_layer_bit(hp->layer_mlp, l);
    int rc = pith_decoder_shard_begin(d, true, err);
    hp = &d->base.hp; /* this rank's heads and MLP columns */
    if (!rc) rc = pith_mamba2_shard(d, &m->md, err);
    if (!rc) rc = pith_decoder_attn_shape(d, err);
    if (!rc && !(m->layers = calloc((size_t)hp->n_layers, sizeof *m->layers))) rc = pith_errf(err, "out of memory");
    pith_be_begin_layer(d->be, PITH_BE_LAYER_INPUT);
    /* a pipeline stage holds its layers only; the first stage the embeddings, the last the head */
    if (!rc && pith_decoder_first_stage(d)) rc = pith_decoder_table(d, "token_embd.weight", &m->embd, err);
    pith_be_begin_layer(d->be, PITH_BE_LAYER_OUTPUT);
    if (!rc && pith_decoder_last_stage(d)) rc = pith_decoder_vector(d, -1, "output_norm.weight", hp->dim, true, &m->out_norm, err);
    if (!rc && pith_decoder_last_stage(d)) rc = pith_decoder_output(d, &m->output, err);
    for (int l = 0; !rc && l < hp->n_layers; l++) {
        if (!pith_decoder_has_layer(d, l)) continue;
        pith_be_begin_layer(d->be, l);
        rc = load_layer(m, l, err);
        if (!rc) pith_decoder_progress(d, l + 1, hp->n_layers);
    }
    if (!rc) rc = pith_dec_bufs_make(d, any_mlp ? hp->ffn_dim : 0, &m->bufs, err);
    if (!rc) rc = pith_mamba2_bufs_make(d, &m->md, &m->mb, err);
    /* MLP layers keep nothing (pith_decoder_hybrid_memory leaves hp.layer_mlp layers out) */
    if (!rc)
        rc = pith_decoder_hybrid_memory(d, hp->n_kv_heads * hp->head_dim, m->md.conv_floats + m->md.ssm_floats, 0, err);
    return pith_decoder_end(d, rc, out, err);
}

/* ---------------- forward ---------------- */

static int nh_forward(pith_model *base, const pith_batch *b, float *logits, pith_err *err) {
    nh *m = base->impl;
    pith_decoder *d = &m->d;
    const pith_hparams *hp = &base->hp;
    const pith_dec_bufs *B = &m->bufs;
    pith_buf *const keep[] = {B->x};
    if (pith_decoder_step(d, b, logits, err)) return -1;
    int n = b->n_tokens;
    if (n == 0) return 0;
    if (pith_decoder_first_stage(d)) pith_be_embed(d->be, m->embd, 0, B->x, n);
    else if (pith_decoder_stage_recv(d, B->x, n, err)) return -1;
    for (int l = 0; l < hp->n_layers; l++) {
        if (!pith_decoder_has_layer(d, l)) continue;
        const nh_layer *L = &m->layers[l];
        pith_be_begin_layer(d->be, l);
        /* a last MLP layer needs only the rows that are read out; the mixers need every token */
        if (l == hp->n_layers - 1 && L->kind == NH_MLP) {
            if ((n = pith_decoder_n_kept(b)) == 0) return pith_head_forward(d, B, m->out_norm, m->output, b, err);
            pith_be_keep_rows(d->be, keep, 1);
        }
        pith_be_rmsnorm(d->be, B->x, L->norm, hp->norm_eps, B->xb, n);
        int rc = 0;
        if (L->kind == NH_MAMBA) {
            rc = pith_mamba2_forward(d, &L->ssm, &m->md, l, &m->mb, B->xb, B->x, hp->norm_eps, 0, n, err);
        } else if (L->kind == NH_MLP) {
            rc = pith_ffn_block_forward(d, &L->mlp, B, B->xb, NULL, n, err);
        } else {
            rc = pith_attn_block_qkv(d, &L->attn, l, B, B->xb, NULL, n, err);
            if (!rc) pith_attn_block_attend(d, &L->attn, l, B, n);
            if (!rc) rc = pith_attn_block_out(d, &L->attn, B, NULL, n, err);
        }
        if (rc) return -1;
    }
    if (!pith_decoder_last_stage(d)) return pith_decoder_stage_send(d, B->x, n, err);
    if (m->layers[hp->n_layers - 1].kind != NH_MLP) {
        if ((n = pith_decoder_n_kept(b)) == 0) return pith_head_forward(d, B, m->out_norm, m->output, b, err);
        pith_be_keep_rows(d->be, keep, 1);
    }
    return pith_head_forward(d, B, m->out_norm, m->output, b, err);
}
