/* GLM-4.5 / 4.6 / 4.7 (`glm4moe`): the forward pass, composed from the layer library (model/layers.h) on
 * the base decoder (model/decoder.h). After transformers' models/glm4_moe/modeling_glm4_moe.py
 * (Glm4MoeDecoderLayer, Glm4MoeAttention, Glm4MoeMoE) and llama.cpp's src/models/glm4-moe.cpp:
 *
 *   h = x + o_proj(Attention(q, k, v))        q, k, v = {q,k,v}_proj(RMSNorm_in(x)) (+ biases),
 *                                             each Q and K head RMS-normed where the file has the norms,
 *                                             RoPE on the first rope_dim dimensions of each head (halves
 *                                             of that part), causal GQA attention scaled by 1/sqrt(head_dim)
 *   y = h + FFN(RMSNorm_post_attention(h))    FFN: down(silu(gate u) * up u) in the leading dense layers,
 *                                             else the routed experts plus the ungated shared experts
 *                                             (the backend's MoE op: sigmoid scores, the choice by score +
 *                                             selection bias within the best groups, renormalised and
 *                                             scaled weights; see glm4moe_arch.c)
 *   logits = lm_head(RMSNorm_out(x))
 *
 * The MTP layer the file may carry (blk.{n_layers}.*) runs as a draft source for speculative decoding
 * when the model loads with pith_model_options.mtp (glm4moe_mtp.c); else it is not read. */
#include "model/glm4moe.h"

#include <stdlib.h>

#include "format/arch.h"
#include "model/glm4moe_internal.h"
#include "model/moe_arch.h"

/* Hugging Face names of each expert's matrices after "model.layers.N." (GGUF: ffn_*_exps) */
static const char *const hf_experts[3] = {"mlp.experts.%d.gate_proj.weight", "mlp.experts.%d.up_proj.weight",
                                          "mlp.experts.%d.down_proj.weight"};

static int full_attention(const pith_hparams *hp, int l) { return (void)hp, (void)l, 0; }

static void glm4moe_free(pith_decoder *d) {
    glm4moe *m = (glm4moe *)d;
    glm4moe_mtp_free(m);
    free(m->layers);
    pith_rope_free(&m->rope);
}

static int glm4moe_forward(pith_model *base, const pith_batch *b, float *logits, pith_err *err) {
    glm4moe *m = base->impl;
    pith_decoder *d = &m->d;
    const pith_hparams *hp = &base->hp;
    const pith_dec_bufs *B = &m->bufs;
    if (pith_decoder_step(d, b, logits, err)) return -1;
    int n = b->n_tokens;
    if (n == 0) return 0;
    if (pith_decoder_first_stage(d)) pith_be_embed(d->be, m->embd, 0, B->x, n);
    else if (pith_decoder_stage_recv(d, B->x, n, err)) return -1;
    pith_be_rope_tables(d->be, &m->rope, m->cs, n);
    for (int l = 0; l < hp->n_layers; l++) {
        if (!pith_decoder_has_layer(d, l)) continue;
        const glm4moe_layer *L = &m->layers[l];
        pith_be_begin_layer(d->be, l);
        pith_be_rmsnorm(d->be, B->x, L->attn_norm, hp->norm_eps, B->xb, n);
        if (pith_attn_block_qkv(d, &L->attn, l, B, B->xb, m->cs, n, err)) return -1;
        pith_attn_block_attend(d, &L->attn, l, B, n);
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
        if (glm4moe_mtp_after_decoder(m, b, err)) return -1;
        pith_buf *const keep[] = {B->x};
        if (pith_decoder_n_kept(b) > 0) pith_be_keep_rows(d->be, keep, 1);
    }
    return pith_head_forward(d, B, m->out_norm, m->output, b, err);
}

static const pith_model_ops glm4moe_ops = {
    .prepare = pith_decoder_prepare, .mem_alloc = pith_decoder_mem_alloc, .mem_free = pith_decoder_mem_free,
    .copy_blocks = pith_decoder_copy_blocks, .forward = glm4moe_forward, .mtp_draft = glm4moe_mtp_draft,
    .destroy = pith_decoder_destroy,
};

int glm4moe_load_layer(glm4moe *m, int l, glm4moe_layer *L, pith_err *err) {
    pith_decoder *d = &m->d;
    const pith_hparams *hp = &d->base.hp;
    int rc = pith_decoder_vector(d, l, "attn_norm.weight", hp->dim, true, &L->attn_norm, err) ||
             pith_decoder_vector(d, l, "post_attention_norm.weight", hp->dim, true, &L->ffn_norm, err) ||
             pith_attn_block_load(d, l, PITH_QK_NORM_HEAD, &L->attn, err);
    if (rc) return pith_err_prefix(err, "layer %d", l);
    /* the experts' loader names the layer itself */
    if (pith_moe_dense_layer(hp, l)) return pith_ffn_block_load(d, l, PITH_GLU_SILU, &L->ffn, err);
    return pith_ffn_block_load_moe(d, l, hf_experts, 0, false, &L->ffn, err);
}

int pith_glm4moe_build(pith_model_file *file, const pith_model_options *opt, pith_model **out, pith_err *err) {
    *out = NULL;
    const pith_hparams *hp = pith_model_file_hparams(file);
    const pith_glm4moe_params *P = pith_arch_params(hp);
    const char *path = pith_model_file_path(file);
    const int n_rot = P->rope_dim > 0 ? P->rope_dim : hp->head_dim;
    glm4moe *m = (glm4moe *)pith_decoder_new(sizeof *m, file, opt, &glm4moe_ops, glm4moe_free, err);
    if (!m) return -1;
    pith_decoder *d = &m->d;
    int rc = pith_decoder_shard_begin(d, true, err);
    hp = &d->base.hp; /* this rank's share under tensor parallelism */
    if (!rc) rc = pith_decoder_attn_shape(d, err);
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
        rc = glm4moe_load_layer(m, l, &m->layers[l], err);
        if (!rc) pith_decoder_progress(d, l + 1, hp->n_layers + 1);
    }
    /* the head's layer has experts too: they are placed with the decoder's */
    if (!rc && opt && opt->mtp) rc = glm4moe_mtp_load(m, err);
    if (!rc) rc = d->be->vt->moe_place(d->be, d->base.experts, sizeof d->base.experts, err);
    /* No scaling: GLM-4.5's configs have none, and none of the scaled forms is tested here. */
    if (!rc) rc = pith_rope_for(hp, file, n_rot, 0, &m->rope, path, err);
    if (!rc) rc = pith_dec_bufs_make(d, hp->expert_dense_leading > 0 ? hp->ffn_dim : 0, &m->bufs, err);
    if (!rc && !(m->cs = pith_be_buffer(d->be, n_rot, err))) rc = -1;
    const int kv_dim = hp->n_kv_heads * hp->head_dim;
    if (!rc && !m->mtp) rc = pith_decoder_kv_memory(d, kv_dim, full_attention, err);
    if (!rc && m->mtp) rc = pith_decoder_mtp_memory(d, kv_dim, kv_dim, err);
    d->base.has_mtp = m->mtp != NULL;
    if (!rc) pith_decoder_progress(d, 1, 1);
    return pith_decoder_end(d, rc, out, err);
}
