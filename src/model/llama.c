/* The decoder forward pass of the Llama family (llama, qwen2, qwen3, smollm3, Mistral) and of the
 * architectures that only vary it (gemma3: see pith_decoder_variant), over a flat batch and the model's
 * own memory groups.
 *
 * One step: embed every token (times embed_scale); per layer, RMSNorm, Q/K/V projections for all tokens
 * at once (optional bias; qwen3 and gemma3 RMS-normalise each Q and K head), RoPE (none in NoPE layers;
 * window layers may use their own base), K/V written to each token's slot of the layer's memory group,
 * causal attention through that group's block tables (a WINDOW group: the last W positions only), the
 * output projection added to the residual (after a post-attention RMSNorm in gemma3), then RMSNorm and a
 * gated feed-forward (SiLU, or GELU-tanh in gemma3; post-FFN RMSNorm in gemma3) likewise; finally the
 * last norm and the vocabulary projection, only for the rows that want logits (soft-capped where the
 * file says). Qwen3-VL (qwen3vl_arch.c) adds M-RoPE and DeepStack: its image tokens' RoPE turns by their
 * place on the image (batch.h rope_pos), and after each of the first layers a part of their encoder row
 * joins their hidden state. Every projection is one matmul over all tokens of the step, so weights stream from memory
 * once per step whatever the batch holds.
 *
 * Memory: one FULL group for the layers that attend to everything and one WINDOW group for the layers
 * with a sliding window (memory.h), each holding K and V of n_kv_heads * head_dim per token.
 *
 * RoPE frequencies: theta^(-2i/head_dim), divided by rope_freqs.weight when the file has it (llama.cpp's
 * way of storing Llama 3 scaling), else rescaled from the hyper-parameters (Hugging Face's "llama3"
 * rope_type), never both; then multiplied by 1/factor under linear scaling (positions divided by the
 * factor), or blended by YaRN with cos and sin times its attention factor (see pith_hparams). Window
 * layers with their own base (rope_theta_swa) use theta_swa^(-2i/head_dim) unscaled.
 * (model/rope.c). Built from the layer library (model/layers.h) over the backend interface. */
#include "model/llama.h"

#include <stdlib.h>

#include "model/decoder.h"
#include "model/layers.h"
#include "model/moe_arch.h"
#include "model/rope.h"

typedef struct llama_layer {
    const pith_weight *attn_norm, *ffn_norm;
    const pith_weight *post_attn_norm, *post_ffw_norm; /* gemma3 (variant post_norms), else NULL */
    pith_attn_block attn;
    pith_ffn_block ffn;
} llama_layer;

typedef struct llama {
    pith_decoder d;             /* first: the base decoder */
    pith_decoder_variant var;
    llama_layer *layers;
    const pith_weight *embd, *out_norm, *output;
    pith_rope rope, rope_swa;   /* rope_swa: window layers with their own base, else no frequencies */
    pith_dec_bufs bufs;
    pith_buf *cs, *cs_swa;      /* the step's RoPE tables */
} llama;

/* The sliding window of layer l, 0 for full attention. */
static int llama_layer_window(const pith_hparams *hp, int l) {
    return pith_hparams_layer_swa(hp, l) ? hp->sliding_window : 0;
}

static int load_layer(llama *m, int l, pith_err *err) {
    const pith_decoder_variant *var = &m->var;
    llama_layer *L = &m->layers[l];
    pith_decoder *d = &m->d;
    int dim = d->base.hp.dim;
    if (pith_decoder_vector(d, l, "attn_norm.weight", dim, true, &L->attn_norm, err) ||
        pith_decoder_vector(d, l, var->ffn_norm ? var->ffn_norm : "ffn_norm.weight", dim, true, &L->ffn_norm, err) ||
        pith_attn_block_load(d, l, PITH_QK_NORM_HEAD, &L->attn, err) ||
        (var->post_norms && (pith_decoder_vector(d, l, "post_attention_norm.weight", dim, true, &L->post_attn_norm, err) ||
                             pith_decoder_vector(d, l, "post_ffw_norm.weight", dim, true, &L->post_ffw_norm, err))))
        return pith_err_prefix(err, "layer %d", l);
    if (pith_moe_dense_layer(&d->base.hp, l)) return pith_ffn_block_load(d, l, var->gelu_tanh ? PITH_GLU_GELU_TANH : PITH_GLU_SILU,
                                                             &L->ffn, err);
    return pith_ffn_block_load_moe(d, l, var->hf_experts[0] ? var->hf_experts : NULL, var->swiglu_limit,
                                   var->fused_halves, &L->ffn, err);
}

static void llama_free(pith_decoder *d) {
    llama *m = (llama *)d;
    free(m->layers);
    pith_rope_free(&m->rope);
    pith_rope_free(&m->rope_swa);
}

static int llama_forward(pith_model *base, const pith_batch *b, float *logits, pith_err *err);
static const pith_model_ops llama_ops = PITH_DECODER_OPS(llama_forward);

int pith_llama_build(pith_model_file *file, const pith_model_options *opt, pith_model **out, pith_err *err) {
    const pith_decoder_variant plain = {0};
    return pith_decoder_build(file, opt, &plain, out, err);
}

int pith_decoder_build(pith_model_file *file, const pith_model_options *opt, const pith_decoder_variant *var,
                       pith_model **out, pith_err *err) {
    *out = NULL;
    const pith_hparams *hp = pith_model_file_hparams(file);
    const char *path = pith_model_file_path(file);
    /* The hyper-parameters were checked when the file opened (validate.c and the descriptor). */
    if (hp->attn_logit_softcap != 0)
        return pith_errf(err, "%s: attention logit soft-capping is not supported", path);
    if (hp->n_experts > 0 && var->post_norms)
        return pith_errf(err, "%s: experts with post-FFN norms are not supported", path);
    llama *m = (llama *)pith_decoder_new(sizeof *m, file, opt, &llama_ops, llama_free, err);
    if (!m) return -1;
    m->var = *var;
    pith_decoder *d = &m->d;
    int rc = pith_decoder_shard_begin(d, true, err);
    hp = &d->base.hp; /* this rank's share under tensor parallelism */
    if (!rc) rc = pith_decoder_attn_shape(d, err);
    if (!rc && !(m->layers = calloc((size_t)hp->n_layers, sizeof *m->layers))) rc = pith_errf(err, "out of memory");
    /* a pipeline stage holds its layers only; the first stage the embeddings, the last the head */
    pith_be_begin_layer(d->be, PITH_BE_LAYER_INPUT);
    if (!rc && pith_decoder_first_stage(d)) rc = pith_decoder_table(d, "token_embd.weight", &m->embd, err);
    pith_be_begin_layer(d->be, PITH_BE_LAYER_OUTPUT);
    if (!rc && pith_decoder_last_stage(d)) rc = pith_decoder_vector(d, -1, "output_norm.weight", hp->dim, true, &m->out_norm, err);
    if (!rc && pith_decoder_last_stage(d)) rc = pith_decoder_output(d, &m->output, err);
    /* Progress: each layer loaded (its matrices repacked), then the experts placed. */
    for (int l = 0; !rc && l < hp->n_layers; l++) {
        if (!pith_decoder_has_layer(d, l)) continue;
        pith_be_begin_layer(d->be, l);
        rc = load_layer(m, l, err);
        if (!rc) pith_decoder_progress(d, l + 1, hp->n_layers + 1);
    }
    if (!rc && hp->n_experts > 0) rc = d->be->vt->moe_place(d->be, d->base.experts, sizeof d->base.experts, err);
    if (!rc) rc = pith_rope_for(hp, file, hp->head_dim, PITH_ROPE_CAN_ALL, &m->rope, path, err);
    if (!rc && var->mrope_sections[0] > 0) { /* images (Qwen3-VL): tokens on their grid, DeepStack parts */
        const int *sec = var->mrope_sections;
        if (var->deepstack < 0 || var->deepstack >= hp->n_layers || (var->deepstack && !d->be->vt->add_embed_part))
            rc = pith_errf(err, "%s: %d DeepStack parts for %d layers (or a backend without them)", path, var->deepstack,
                           hp->n_layers);
        else if (!pith_rope_mrope(&m->rope, sec))
            rc = pith_errf(err, "%s: M-RoPE sections %d + %d + %d do not cover the %d rotated pairs", path, sec[0],
                           sec[1], sec[2], m->rope.half);
        d->base.has_embeds = d->base.has_mrope = !rc;
        d->base.embed_parts = !rc && var->deepstack ? 1 + var->deepstack : 0;
    }
    if (!rc && hp->rope_theta_swa > 0 && hp->sliding_window > 0)
        rc = pith_rope_plain(hp, hp->rope_theta_swa, hp->head_dim, &m->rope_swa, err);
    if (!rc) rc = pith_dec_bufs_make(d, hp->n_experts == 0 || hp->expert_dense_leading > 0 ? hp->ffn_dim : 0, &m->bufs, err);
    if (!rc && !(m->cs = pith_be_buffer(d->be, hp->head_dim, err))) rc = -1;
    if (!rc && m->rope_swa.inv_freq && !(m->cs_swa = pith_be_buffer(d->be, hp->head_dim, err))) rc = -1;
    if (!rc) rc = pith_decoder_kv_memory(d, hp->n_kv_heads * hp->head_dim, llama_layer_window, err);
    if (!rc) pith_decoder_progress(d, 1, 1);
    return pith_decoder_end(d, rc, out, err);
}

/* ---------------- forward ---------------- */

static int layer_forward(llama *m, const pith_batch *b, int l, pith_err *err) {
    pith_decoder *d = &m->d;
    const pith_hparams *hp = &d->base.hp;
    const llama_layer *L = &m->layers[l];
    const pith_dec_bufs *B = &m->bufs;
    int n = b->n_tokens;

    pith_be_rmsnorm(d->be, B->x, L->attn_norm, hp->norm_eps, B->xb, n);
    bool local = m->cs_swa && pith_hparams_layer_swa(hp, l);
    const pith_buf *cs = pith_hparams_layer_no_rope(hp, l) ? NULL : local ? m->cs_swa : m->cs;
    if (pith_attn_block_qkv(d, &L->attn, l, B, B->xb, cs, n, err)) return -1;
    pith_attn_block_attend(d, &L->attn, l, B, n);
    /* After the last layer's attention only the rows that want logits or hidden states matter. */
    if (l == hp->n_layers - 1) {
        pith_buf *const keep[] = {B->att, B->x};
        if ((n = pith_decoder_n_kept(b)) == 0) return 0;
        pith_be_keep_rows(d->be, keep, 2);
    }
    if (pith_attn_block_out(d, &L->attn, B, L->post_attn_norm, n, err)) return -1;
    pith_be_rmsnorm(d->be, B->x, L->ffn_norm, hp->norm_eps, B->xb, n);
    return pith_ffn_block_forward(d, &L->ffn, B, B->xb, L->post_ffw_norm, n, err);
}

static int llama_forward(pith_model *base, const pith_batch *b, float *logits, pith_err *err) {
    llama *m = base->impl;
    pith_decoder *d = &m->d;
    if (pith_decoder_step(d, b, logits, err)) return -1;
    int n = b->n_tokens;
    if (n == 0) return 0;
    if (pith_decoder_first_stage(d)) pith_be_embed(d->be, m->embd, m->var.embed_scale, m->bufs.x, n);
    else if (pith_decoder_stage_recv(d, m->bufs.x, n, err)) return -1;
    pith_be_rope_tables(d->be, &m->rope, m->cs, n);
    if (m->cs_swa) pith_be_rope_tables(d->be, &m->rope_swa, m->cs_swa, n);
    for (int l = 0; l < base->hp.n_layers; l++) {
        if (!pith_decoder_has_layer(d, l)) continue;
        pith_be_begin_layer(d->be, l);
        if (layer_forward(m, b, l, err)) return -1;
        /* DeepStack (batch.h): the image tokens' part l + 1 joins their hidden state after layer l (never
         * the last layer, whose rows may have been narrowed to those that want logits) */
        if (l < m->var.deepstack && b->embed_rows) pith_be_add_embed_part(d->be, m->bufs.x, l + 1, n);
    }
    if (!pith_decoder_last_stage(d)) return pith_decoder_stage_send(d, m->bufs.x, n, err);
    return pith_head_forward(d, &m->bufs, m->out_norm, m->output, b, err);
}
