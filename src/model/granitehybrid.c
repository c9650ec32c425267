/* The Granite 4.0-H forward pass (see granitehybrid_arch.c), over a flat batch and the model's two
 * memory groups, composed from the layer library (model/layers.h) and the shared Mamba2 mixer
 * (model/mamba2.h) on the base decoder.
 *
 * One step: embed every token (times embedding_scale); per layer, RMSNorm and then its token mixer:
 *   attention layers: Q/K/V projections, RoPE (only for position_embedding_type "rope"), K/V into the
 *     token's slot of the FULL group, causal attention (scores times attention_multiplier) through the
 *     block tables, the output projection;
 *   Mamba2 layers: ssm_in into [z | xBC | dt]; xBC through the causal convolution (its bias, SiLU) whose
 *     last K-1 inputs are the sequence's carried state; the SSD scan per head from the carried SSM state;
 *     y * silu(z), RMS-normed (per B/C group as llama.cpp does for GGUF files, over the whole width as
 *     transformers does for Hugging Face ones); ssm_out;
 * the mixer's output times residual_scale added to the residual; then RMSNorm and the shared SwiGLU MLP
 * (plus the routed experts when the model has them), times residual_scale, added; finally output_norm
 * and the vocabulary projection (tied unless output.weight exists) divided by logit_scale, only for the
 * rows that want logits or hidden states. The residual scale is applied to the input of each block's
 * last projection (the same product, rounded once more: the blocks' out_scale) or, with experts, to the
 * summed FFN output (the backend's MoE op runs the shared MLP as its shared expert then).
 *
 * Memory: a FULL group of the attention layers (K and V, F16) and a RECURRENT group of the Mamba2
 * layers (mamba2.h's state layout); state checkpoints (batch.h) are the mamba2 op's. RoPE is plain
 * theta; a file that declares a scaling is refused when some layer rotates (rope.h). */
#include "model/granitehybrid.h"

#include <stdio.h>
#include <stdlib.h>

#include "format/arch.h"
#include "model/decoder.h"
#include "model/layers.h"
#include "model/mamba2.h"
#include "model/rope.h"

typedef struct gh_layer {
    bool mamba;
    const pith_weight *attn_norm, *ffn_norm;
    pith_attn_block attn;
    pith_mamba2_layer ssm;
    pith_ffn_block ffn; /* the shared MLP, dense or as the experts' shared expert */
} gh_layer;

typedef struct gh {
    pith_decoder d; /* first: the base decoder */
    pith_mamba2_dims md;
    bool rope;      /* some attention layer rotates */
    float res_scale;
    gh_layer *layers;
    const pith_weight *embd, *out_norm, *output;
    pith_rope rope_f;
    pith_dec_bufs bufs;
    pith_mamba2_bufs mb;
    pith_buf *cs; /* RoPE tables, or NULL */
} gh;

static bool has_tensor(const pith_decoder *d, int l, const char *name) {
    char full[96];
    snprintf(full, sizeof full, "blk.%d.%s", l, name);
    return pith_model_file_tensor(d->file, full) != NULL;
}

static int load_layer(gh *m, int l, pith_err *err) {
    pith_decoder *d = &m->d;
    const pith_hparams *hp = &d->base.hp;
    gh_layer *L = &m->layers[l];
    L->mamba = pith_layer_bit(hp->layer_recurrent, l);
    if (pith_decoder_vector(d, l, "attn_norm.weight", hp->dim, true, &L->attn_norm, err) ||
        pith_decoder_vector(d, l, "ffn_norm.weight", hp->dim, true, &L->ffn_norm, err))
        return pith_err_prefix(err, "layer %d", l);
    /* the shared MLP: dense, or the experts' shared expert (GGUF's _shexp tensors, Hugging Face's dense
     * names next to the fused experts: backend/cpu/moe.h) */
    if (hp->n_experts > 0 && !has_tensor(d, l, "ffn_gate_shexp.weight") && !has_tensor(d, l, "ffn_gate_up.weight"))
        return pith_errf(err, "layer %d: missing tensor blk.%d.ffn_gate_shexp.weight (the shared MLP)", l, l);
    if (hp->n_experts > 0) {
        if (pith_ffn_block_load_moe(d, l, NULL, 0, false, &L->ffn, err)) return -1; /* its errors name the layer */
    } else if (pith_ffn_block_load(d, l, PITH_GLU_SILU, &L->ffn, err)) {
        return pith_err_prefix(err, "layer %d", l);
    }
    /* with experts the sum is scaled even by 1, as it always was (backend/cpu/moe.h adds into it) */
    L->ffn.out_scale = m->res_scale;
    if (L->mamba ? pith_mamba2_load(d, l, &m->md, &L->ssm, err)
                 : pith_attn_block_load(d, l, PITH_QK_NORM_NONE, &L->attn, err))
        return pith_err_prefix(err, "layer %d", l);
    L->attn.out_scale = m->res_scale;
    return 0;
}

static void gh_free(pith_decoder *d) {
    gh *m = (gh *)d;
    free(m->layers);
    pith_rope_free(&m->rope_f);
}

static int gh_forward(pith_model *base, const pith_batch *b, float *logits, pith_err *err);
static const pith_model_ops gh_ops = PITH_DECODER_OPS(gh_forward);

int pith_granitehybrid_build(pith_model_file *file, const pith_model_options *opt, pith_model **out, pith_err *err) {
    *out = NULL;
    const pith_hparams *hp = pith_model_file_hparams(file);
    const pith_granite_params *P = pith_arch_params(hp);
    const char *path = pith_model_file_path(file);
    gh *m = (gh *)pith_decoder_new(sizeof *m, file, opt, &gh_ops, gh_free, err);
    if (!m) return -1;
    pith_decoder *d = &m->d;
    d->base.state_checkpoints = true; /* the mamba2 op copies the state after checkpointed tokens */
    /* llama.cpp normalises per B/C group (as Mamba2's own code does), transformers' Granite code over the
     * whole width: the same when n_groups is 1, as in every Granite 4.0-H */
    pith_mamba2_dims_of(hp, pith_model_file_format(file) == PITH_FORMAT_GGUF, &m->md);
    for (int l = 0; l < hp->n_layers; l++)
        m->rope |= !pith_layer_bit(hp->layer_recurrent, l) && !pith_layer_bit(hp->layer_no_rope, l);
    m->res_scale = P->residual_scale > 0 ? P->residual_scale : 1.0f;
    int rc = pith_decoder_shard_begin(d, true, err);
    hp = &d->base.hp; /* this rank's heads, FFN columns and experts */
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
        if (!rc) pith_decoder_progress(d, l + 1, hp->n_layers + 1);
    }
    if (!rc && hp->n_experts > 0) rc = d->be->vt->moe_place(d->be, d->base.experts, sizeof d->base.experts, err);
    /* RoPE scaling was never applied here: refused, as before, when some layer rotates */
    if (!rc && m->rope) rc = pith_rope_for(hp, file, hp->head_dim, 0, &m->rope_f, path, err);
    if (!rc) rc = pith_dec_bufs_make(d, hp->n_experts > 0 ? 0 : hp->ffn_dim, &m->bufs, err);
    if (!rc && hp->n_experts > 0 && !(m->bufs.y = pith_be_buffer(d->be, hp->dim, err))) rc = -1;
    if (!rc) rc = pith_mamba2_bufs_make(d, &m->md, &m->mb, err);
    if (!rc && m->rope && !(m->cs = pith_be_buffer(d->be, hp->head_dim, err))) rc = -1;
    if (!rc)
        rc = pith_decoder_hybrid_memory(d, hp->n_kv_heads * hp->head_dim, m->md.conv_floats + m->md.ssm_floats, 0, err);
    if (!rc) pith_decoder_progress(d, 1, 1);
    return pith_decoder_end(d, rc, out, err);
}

/* ---------------- forward ---------------- */

static int layer_forward(gh *m, const pith_batch *b, int l, int *n_rows, pith_err *err) {
    pith_decoder *d = &m->d;
    const pith_hparams *hp = &d->base.hp;
    const gh_layer *L = &m->layers[l];
    const pith_dec_bufs *B = &m->bufs;
    int n = b->n_tokens;
    pith_be_rmsnorm(d->be, B->x, L->attn_norm, hp->norm_eps, B->xb, n);
    if (L->mamba) {
        if (pith_mamba2_forward(d, &L->ssm, &m->md, l, &m->mb, B->xb, B->x, hp->norm_eps, m->res_scale, n, err))
            return -1;
    } else {
        const pith_buf *cs = pith_layer_bit(hp->layer_no_rope, l) ? NULL : m->cs;
        if (pith_attn_block_qkv(d, &L->attn, l, B, B->xb, cs, n, err)) return -1;
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

static int gh_forward(pith_model *base, const pith_batch *b, float *logits, pith_err *err) {
    gh *m = base->impl;
    pith_decoder *d = &m->d;
    if (pith_decoder_step(d, b, logits, err)) return -1;
    int n = b->n_tokens;
    if (n == 0) return 0;
    const pith_granite_params *P = pith_arch_params(&base->hp);
    float emb = P->embedding_scale;
    if (pith_decoder_first_stage(d)) pith_be_embed(d->be, m->embd, emb > 0 && emb != 1.0f ? emb : 0, m->bufs.x, n);
    else if (pith_decoder_stage_recv(d, m->bufs.x, n, err)) return -1;
    if (m->cs) pith_be_rope_tables(d->be, &m->rope_f, m->cs, n);
    for (int l = 0; l < base->hp.n_layers; l++) {
        if (!pith_decoder_has_layer(d, l)) continue;
        pith_be_begin_layer(d->be, l);
        if (layer_forward(m, b, l, &n, err)) return -1;
    }
    if (!pith_decoder_last_stage(d)) return pith_decoder_stage_send(d, m->bufs.x, n, err);
    return pith_head_forward_scaled(d, &m->bufs, m->out_norm, m->output, P->logit_scale, b, err);
}
