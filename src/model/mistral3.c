/* Mistral 3's forward pass (model/mistral3.h; the files' meaning: mistral3_arch.c), after transformers'
 * models/ministral3/modeling_ministral3.py and llama.cpp's src/models/mistral3.cpp:
 *
 *   per layer: h = RMSNorm(x); q, k, v = h Wq^T, h Wk^T, h Wv^T (+ biases where the file has them);
 *   RoPE (YaRN where the file says: frequencies and cos/sin magnitude from model/rope.c); K and V into
 *   the cache; q times the attention temperature 1 + beta ln(1 + floor(p / length)) of its position p
 *   (Ministral3Attention: after RoPE, queries only; llama.cpp: ggml_mul(Qcur, inp_attn_scale) after
 *   ggml_rope_ext); causal attention (every layer windowed when the file gives a window), scores times
 *   1/sqrt(head_dim); x += att Wo^T; x += down(silu(gate RMSNorm(x)) * up RMSNorm(x));
 *   then the final norm and the output projection.
 *
 * Everything but the temperature is the layer library's (model/layers.h); the temperature is the
 * backend's attn_temp op, which reads each token's position from the step (a backend without it cannot
 * run a file with a temperature, and says so at load). With beta 0 (Mistral Small 3.x's text model) the
 * op is not issued: the forward is then Llama's op for op. */
#include <stdlib.h>

#include "model/decoder.h"
#include "model/layers.h"
#include "model/mistral3.h"
#include "model/rope.h"

typedef struct mistral3_layer {
    const pith_weight *attn_norm, *ffn_norm;
    pith_attn_block attn;
    pith_ffn_block ffn;
} mistral3_layer;

typedef struct mistral3 {
    pith_decoder d; /* first: the base decoder */
    mistral3_layer *layers;
    const pith_weight *embd, *out_norm, *output;
    pith_rope rope;
    pith_dec_bufs bufs;
    pith_buf *cs;
    float temp_beta;
    int temp_length;
} mistral3;

static int layer_window(const pith_hparams *hp, int l) {
    return pith_hparams_layer_swa(hp, l) ? hp->sliding_window : 0;
}

static void mistral3_free(pith_decoder *d) {
    mistral3 *m = (mistral3 *)d;
    free(m->layers);
    pith_rope_free(&m->rope);
}

static int mistral3_forward(pith_model *base, const pith_batch *b, float *logits, pith_err *err) {
    mistral3 *m = base->impl;
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
        pith_be_begin_layer(d->be, l);
        const mistral3_layer *L = &m->layers[l];
        pith_be_rmsnorm(d->be, B->x, L->attn_norm, hp->norm_eps, B->xb, n);
        if (pith_attn_block_qkv(d, &L->attn, l, B, B->xb, m->cs, n, err)) return -1;
        if (m->temp_beta != 0) pith_be_attn_temp(d->be, B->q, m->temp_beta, m->temp_length, n);
        pith_attn_block_attend(d, &L->attn, l, B, n);
        if (l == hp->n_layers - 1) { /* only the rows that want logits or hidden states go on */
            pith_buf *const keep[] = {B->att, B->x};
            if ((n = pith_decoder_n_kept(b)) == 0) return pith_head_forward(d, B, m->out_norm, m->output, b, err);
            pith_be_keep_rows(d->be, keep, 2);
        }
        if (pith_attn_block_out(d, &L->attn, B, NULL, n, err)) return -1;
        pith_be_rmsnorm(d->be, B->x, L->ffn_norm, hp->norm_eps, B->xb, n);
        if (pith_ffn_block_forward(d, &L->ffn, B, B->xb, NULL, n, err)) return -1;
    }
    if (!pith_decoder_last_stage(d)) return pith_decoder_stage_send(d, B->x, n, err);
    return pith_head_forward(d, B, m->out_norm, m->output, b, err);
}

static const pith_model_ops mistral3_ops = PITH_DECODER_OPS(mistral3_forward);

int pith_mistral3_build(pith_model_file *file, const pith_model_options *opt, pith_model **out, pith_err *err) {
    *out = NULL;
    const pith_hparams *hp = pith_model_file_hparams(file);
    const pith_mistral3_params *p = pith_mistral3_params_of(hp);
    mistral3 *m = (mistral3 *)pith_decoder_new(sizeof *m, file, opt, &mistral3_ops, mistral3_free, err);
    if (!m) return -1;
    pith_decoder *d = &m->d;
    m->temp_beta = p->attn_temp_beta;
    m->temp_length = p->attn_temp_length;
    int rc = pith_decoder_shard_begin(d, true, err);
    hp = &d->base.hp; /* this rank's share under tensor parallelism */
    if (m->temp_beta != 0 && !d->be->vt->attn_temp)
        rc = pith_errf(err, "the %s backend has no attention temperature op (Mistral 3's llama_4_scaling_beta %g)",
                       d->be->vt->name, m->temp_beta);
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
        mistral3_layer *L = &m->layers[l];
        rc = pith_decoder_vector(d, l, "attn_norm.weight", hp->dim, true, &L->attn_norm, err) ||
             pith_decoder_vector(d, l, "ffn_norm.weight", hp->dim, true, &L->ffn_norm, err) ||
             pith_attn_block_load(d, l, PITH_QK_NORM_HEAD, &L->attn, err) ||
             pith_ffn_block_load(d, l, PITH_GLU_SILU, &L->ffn, err);
        if (rc) pith_err_prefix(err, "layer %d", l);
        else pith_decoder_progress(d, l + 1, hp->n_layers);
    }
    if (!rc) rc = pith_rope_for(hp, file, hp->head_dim, PITH_ROPE_CAN_ALL, &m->rope, pith_model_file_path(file), err);
    if (!rc) rc = pith_dec_bufs_make(d, hp->ffn_dim, &m->bufs, err);
    if (!rc && !(m->cs = pith_be_buffer(d->be, hp->head_dim, err))) rc = -1;
    if (!rc) rc = pith_decoder_kv_memory(d, hp->n_kv_heads * hp->head_dim, layer_window, err);
    return pith_decoder_end(d, rc, out, err);
}
