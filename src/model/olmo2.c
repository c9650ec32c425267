/* OLMo 2 (`olmo2`, Hugging Face Olmo2ForCausalLM): a decoder whose blocks normalise their outputs, not
 * their inputs, and whose QK-norm spans the whole projection. After transformers' modeling_olmo2.py:
 *
 *   q = RMSNorm_q(x Wq^T) over all n_heads * head_dim, k = RMSNorm_k(x Wk^T) over n_kv_heads * head_dim,
 *   then RoPE (rotate-half: GGUF olmo2 is NEOX in llama.cpp, and no converter permutes Q and K)
 *   h = x + RMSNorm_post_attn(Attention(q, k, v) Wo^T)
 *   y = h + RMSNorm_post_ffn(down(silu(gate h) * up h))
 *
 * Everything else (embedding, the paged attention, the SwiGLU FFN, the final norm and head) is the layer
 * library's (model/layers.h) on the base decoder (model/decoder.h); the descriptor below is the schema
 * every tensor is bound from. docs/adding-an-architecture.md walks through this file. */
#include <stdlib.h>

#include "format/arch.h"
#include "model/decoder.h"
#include "model/layers.h"
#include "model/llama_arch.h"
#include "model/rope.h"

/* ---- the descriptor: names and schema ---- */

static const pith_name_map olmo2_hf_layer[] = {
    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.k_proj.weight", "attn_k.weight"},
    {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"self_attn.q_norm.weight", "attn_q_norm.weight"},
    {"self_attn.k_norm.weight", "attn_k_norm.weight"},
    {"post_attention_layernorm.weight", "post_attention_norm.weight"},
    {"post_feedforward_layernorm.weight", "post_ffw_norm.weight"},
    {"mlp.gate_proj.weight", "ffn_gate.weight"},
    {"mlp.up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
    {NULL, NULL},
};

static const pith_tensor_spec olmo2_global_tensors[] = {
    {"token_embd.weight", PITH_D_DIM, PITH_D_VOCAB, PITH_REQUIRED, NULL},
    {"output_norm.weight", PITH_D_DIM, PITH_D_NONE, PITH_REQUIRED, NULL},
    {"output.weight", PITH_D_DIM, PITH_D_VOCAB, PITH_OPTIONAL, NULL}, /* absent: tied to token_embd */
    {NULL, 0, 0, 0, NULL},
};

static const pith_tensor_spec olmo2_layer_tensors[] = {
    {"attn_q.weight", PITH_D_DIM, PITH_D_Q, PITH_REQUIRED, NULL},
    {"attn_k.weight", PITH_D_DIM, PITH_D_KV, PITH_REQUIRED, NULL},
    {"attn_v.weight", PITH_D_DIM, PITH_D_KV, PITH_REQUIRED, NULL},
    {"attn_output.weight", PITH_D_Q, PITH_D_DIM, PITH_REQUIRED, NULL},
    {"attn_q_norm.weight", PITH_D_Q, PITH_D_NONE, PITH_REQUIRED, NULL},
    {"attn_k_norm.weight", PITH_D_KV, PITH_D_NONE, PITH_REQUIRED, NULL},
    {"post_attention_norm.weight", PITH_D_DIM, PITH_D_NONE, PITH_REQUIRED, NULL},
    {"ffn_gate.weight", PITH_D_DIM, PITH_D_FFN, PITH_REQUIRED, NULL},
    {"ffn_up.weight", PITH_D_DIM, PITH_D_FFN, PITH_REQUIRED, NULL},
    {"ffn_down.weight", PITH_D_FFN, PITH_D_DIM, PITH_REQUIRED, NULL},
    {"post_ffw_norm.weight", PITH_D_DIM, PITH_D_NONE, PITH_REQUIRED, NULL},
    {NULL, 0, 0, 0, NULL},
};

/* ---- the model ---- */

typedef struct olmo2_layer {
    pith_attn_block attn;
    pith_ffn_block ffn;
    const pith_weight *post_attn_norm, *post_ffw_norm;
} olmo2_layer;

typedef struct olmo2 {
    pith_decoder d; /* first: the base decoder */
    olmo2_layer *layers;
    const pith_weight *embd, *out_norm, *output;
    pith_rope rope;
    pith_dec_bufs bufs;
    pith_buf *cs;
} olmo2;

static int full_attention(const pith_hparams *hp, int l) { return (void)hp, (void)l, 0; }

static void olmo2_free(pith_decoder *d) {
    olmo2 *m = (olmo2 *)d;
    free(m->layers);
    pith_rope_free(&m->rope);
}

static int olmo2_forward(pith_model *base, const pith_batch *b, float *logits, pith_err *err) {
    olmo2 *m = base->impl;
    pith_decoder *d = &m->d;
    const pith_dec_bufs *B = &m->bufs;
    if (pith_decoder_step(d, b, logits, err)) return -1;
    int n = b->n_tokens;
    if (n == 0) return 0;
    if (pith_decoder_first_stage(d)) pith_be_embed(d->be, m->embd, 0, B->x, n);
    else if (pith_decoder_stage_recv(d, B->x, n, err)) return -1;
    pith_be_rope_tables(d->be, &m->rope, m->cs, n);
    for (int l = 0; l < base->hp.n_layers; l++) {
        if (!pith_decoder_has_layer(d, l)) continue;
        pith_be_begin_layer(d->be, l);
        const olmo2_layer *L = &m->layers[l];
        if (pith_attn_block_qkv(d, &L->attn, l, B, B->x, m->cs, n, err)) return -1;
        pith_attn_block_attend(d, &L->attn, l, B, n);
        if (l == base->hp.n_layers - 1) { /* only the rows that want logits or hidden states go on */
            pith_buf *const keep[] = {B->att, B->x};
            if ((n = pith_decoder_n_kept(b)) == 0) return pith_head_forward(d, B, m->out_norm, m->output, b, err);
            pith_be_keep_rows(d->be, keep, 2);
        }
        if (pith_attn_block_out(d, &L->attn, B, L->post_attn_norm, n, err) ||
            pith_ffn_block_forward(d, &L->ffn, B, B->x, L->post_ffw_norm, n, err))
            return -1;
    }
    if (!pith_decoder_last_stage(d)) return pith_decoder_stage_send(d, B->x, n, err);
    return pith_head_forward(d, B, m->out_norm, m->output, b, err);
}

static const pith_model_ops olmo2_ops = PITH_DECODER_OPS(olmo2_forward);

static int olmo2_build(pith_model_file *file, const pith_model_options *opt, pith_model **out, pith_err *err) {
    const pith_hparams *hp = pith_model_file_hparams(file);
    olmo2 *m = (olmo2 *)pith_decoder_new(sizeof *m, file, opt, &olmo2_ops, olmo2_free, err);
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
    for (int l = 0; !rc && l < hp->n_layers; l++) {
        if (!pith_decoder_has_layer(d, l)) continue;
        pith_be_begin_layer(d->be, l);
        olmo2_layer *L = &m->layers[l];
        rc = pith_attn_block_load(d, l, PITH_QK_NORM_ALL, &L->attn, err) ||
             pith_ffn_block_load(d, l, PITH_GLU_SILU, &L->ffn, err) ||
             pith_decoder_vector(d, l, "post_attention_norm.weight", hp->dim, true, &L->post_attn_norm, err) ||
             pith_decoder_vector(d, l, "post_ffw_norm.weight", hp->dim, true, &L->post_ffw_norm, err);
        if (!rc) pith_decoder_progress(d, l + 1, hp->n_layers);
    }
    if (!rc) rc = pith_rope_for(hp, file, hp->head_dim, PITH_ROPE_CAN_ALL, &m->rope, pith_model_file_path(file), err);
    if (!rc) rc = pith_dec_bufs_make(d, hp->ffn_dim, &m->bufs, err);
    if (!rc && !(m->cs = pith_be_buffer(d->be, hp->head_dim, err))) rc = -1;
    if (!rc) rc = pith_decoder_kv_memory(d, hp->n_kv_heads * hp->head_dim, full_attention, err);
    return pith_decoder_end(d, rc, out, err);
}

/* QK-norm over the whole projection is part of the architecture, not optional. */
static int olmo2_finish(pith_model_file *f, pith_hparams *hp, pith_err *err) {
    (void)f, (void)err;
    hp->has_qk_norm = true;
    return 0;
}

const pith_arch pith_arch_olmo2 = {
    .name = "olmo2",
    .hf_archs = (const char *const[]){"Olmo2ForCausalLM", NULL},
    .hf_model_types = (const char *const[]){"olmo2", NULL},
    .rope_gguf = PITH_ROPE_HALF,
    .rope_hf = PITH_ROPE_HALF,
    .hf_global = pith_llama_hf_global, /* the same global names as Llama */
    .hf_layer = olmo2_hf_layer,
    .global = olmo2_global_tensors,
    .layer = olmo2_layer_tensors,
    .finish = olmo2_finish,
    .build = olmo2_build,
};
