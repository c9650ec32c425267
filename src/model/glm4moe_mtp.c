/* GLM-4.5's multi-token-prediction layer ("nextn"; GGUF blk.{n_layers}.nextn.*, Hugging Face
 * model.layers.{num_hidden_layers}.*) as a draft source for speculative decoding. The math follows
 * vLLM's model_executor/models/glm4_moe_mtp.py (Glm4MoeMultiTokenPredictorLayer, SharedHead; the same as
 * deepseek_mtp.py's) and llama.cpp's tensor names (LLM_TENSOR_NEXTN_*: eh_proj, enorm, hnorm,
 * shared_head_norm, the optional shared_head_head and embed_tokens), with GLM-4.5's decoder block from
 * transformers' modeling_glm4_moe.py:
 *
 *   u = eh_proj [enorm(embed(x_{i+1})) | hnorm(h_i)]      h_i: the decoder's final-normed hidden state
 *   u = u + o_proj(Attention(u))                          GLM's attention: input_layernorm, Q/K/V biases
 *                                                         and per-head QK norms where the file has them,
 *                                                         partial RoPE, GQA
 *   u = u + FFN(post_attention_layernorm(u))              the layer's experts (or a dense FFN when the
 *                                                         layer index is among the leading dense ones)
 *   logits = head(shared_head_norm(u))                    head: nextn.shared_head_head when the file has
 *                                                         it, else the decoder's output (vLLM's
 *                                                         SharedHead; embed: nextn.embed_tokens, else
 *                                                         token_embd)
 * Drafting k tokens chains it: the next step pairs the drafted token with the layer's output u in place
 * of h. That is u before shared_head_norm, as vLLM's Glm4MoeMultiTokenPredictorLayer.forward returns it
 * (residual + hidden_states; SharedHead's norm applies only on the way to the logits) and as
 * transformers' forward_mtp hands it from one MTP layer to the next; Qwen3.5's head (qwen35_mtp.c, whose
 * design this file otherwise follows) chains the normed state instead, as qwen3_next_mtp.py does. The
 * decoder's h is its final-normed hidden state (the model's last_hidden_state) in both.
 *
 * Where its memory lives: the head's K/V for the pair (x_p, h_{p-1}) sits at position p of the FULL
 * group as that group's last layer, written by every forward from the batch's own hidden states (so
 * prefix caching, preemption, forks and rollback keep it right with no code of their own; position 0
 * holds a pair the head never reads, and RoPE scores depend only on distances, qwen35_mtp.c says why).
 * The hidden state of a sequence's last computed position must outlive the forward that made it (the
 * next forward's first token and the draft pair with it). GLM has no recurrent layer, so the model
 * declares a RECURRENT group of no layer whose whole state is that row (dim floats): the engine's slots
 * then carry it through preemption (a snapshot), prefix-cache hits (the checkpoints mtp_save writes,
 * state_checkpoints) and forks exactly as they carry Qwen3.5's, with no new mechanism (src/core/memory.c
 * only lets a RECURRENT group name no layer). The alternatives were worse: a row kept by the model
 * itself would need engine hooks for preemption, prefix hits, forks and rollback, which the slot already
 * has; the row stored beside the head's K/V in the pool would be rounded to the KV type and tie a
 * per-sequence value to a position. The price: with the head loaded the engine treats the model as one
 * with recurrent state, so its prefix cache is served from state snapshots (dim floats each) at the
 * snapshot points. A model loaded without the head keeps the plain FULL group it always had.
 *
 * A forward with the head computes, after the decoder, every token's head input and the head layer's
 * Q/K/V through the layer library (the query is left unused: the op makes all three), so no row is
 * dropped before the last layer's FFN.
 *
 * On the backend the head reuses Qwen3.5's ops (backend.h): mtp_input, mtp_save, set_draft, mtp_logits
 * as they are, and mtp_attention with `plain` (a query without gate, optional QK norms, partial RoPE).
 * A backend without them (set_draft NULL: partial offload) has the load refuse the head. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/arch.h"
#include "model/glm4moe.h"
#include "model/glm4moe_internal.h"
#include "model/moe_arch.h"

/* The memory groups of a model with the head (pith_decoder_mtp_memory). */
enum { MTP_FULL = PITH_DECODER_MTP_FULL, MTP_RECURRENT = PITH_DECODER_MTP_RECURRENT };

struct glm4moe_mtp {
    glm4moe_layer layer;                          /* blk.{n_layers}.*: GLM's decoder block */
    const pith_weight *eh_proj;                   /* dim x 2 dim */
    const pith_weight *enorm, *hnorm, *out_norm;  /* out_norm: shared_head_norm */
    const pith_weight *embd, *output;             /* the head's own, else the decoder's */
    pith_buf *in, *u, *h;  /* [enorm(embedding) | hnorm(hidden)] (2 dim); the head's residual; its normed rows */
};

static size_t weight_bytes(const pith_weight *w) {
    return w ? (size_t)w->rows * pith_dtype_row_bytes(w->type, w->cols) : 0;
}

/* The dense matrices a step reads of a layer (experts left out: a token reads few of them). */
static size_t layer_bytes(const glm4moe_layer *L) {
    const pith_weight *ws[] = {L->attn.wq, L->attn.wk, L->attn.wv, L->attn.wo, L->ffn.gate, L->ffn.up, L->ffn.down};
    size_t n = 0;
    for (size_t i = 0; i < sizeof ws / sizeof *ws; i++) n += weight_bytes(ws[i]);
    return n;
}

/* A matrix of the head's layer: present with [cols, rows] (the schema checks only the decoder's layers). */
static int check_matrix(const pith_decoder *d, int l, const char *name, int rows, int cols, pith_err *err) {
    char full[96];
    snprintf(full, sizeof full, "blk.%d.%s", l, name);
    const pith_tensor *t = pith_model_file_tensor(d->file, full);
    if (!t) return pith_errf(err, "missing tensor %s", full);
    if (t->ne[0] != cols || t->ne[1] != rows || t->ne[2] != 1 || t->ne[3] != 1)
        return pith_errf(err, "tensor %s: shape [%lld, %lld, %lld, %lld], expected [%d, %d]", full,
                         (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3], cols,
                         rows);
    return 0;
}

static int check_layer(const pith_decoder *d, int l, pith_err *err) {
    const pith_hparams *hp = pith_model_file_hparams(d->file); /* the whole layer's shapes, under --tp too */
    int qd = hp->n_heads * hp->head_dim, kvd = hp->n_kv_heads * hp->head_dim;
    if (check_matrix(d, l, "attn_q.weight", qd, hp->dim, err) || check_matrix(d, l, "attn_k.weight", kvd, hp->dim, err) ||
        check_matrix(d, l, "attn_v.weight", kvd, hp->dim, err) ||
        check_matrix(d, l, "attn_output.weight", hp->dim, qd, err))
        return -1;
    if (pith_moe_dense_layer(hp, l)) return 0; /* pith_ffn_block_load checks the dense FFN's shapes */
    char name[64];
    snprintf(name, sizeof name, "blk.%d.exp_probs_b.bias", l);
    const pith_tensor *t = pith_model_file_tensor(d->file, name);
    if (!t) return pith_errf(err, "missing tensor %s (the experts' selection bias)", name);
    if (pith_tensor_nelems(t) != hp->n_experts || t->ne[0] != hp->n_experts)
        return pith_errf(err, "tensor %s: %lld elements, expected %d (one per expert)", name,
                         (long long)pith_tensor_nelems(t), hp->n_experts);
    return 0;
}

int glm4moe_mtp_load(glm4moe *m, pith_err *err) {
    pith_decoder *d = &m->d;
    const pith_hparams *hp = &d->base.hp;
    if (!d->be->vt->set_draft) /* refused here, not at the first step */
        return pith_errf(err, "the %s backend does not run MTP heads (the CPU and Vulkan backends do, the whole model "
                              "on one device)", d->be->vt->name);
    if (hp->n_mtp_layers != 1)
        return pith_errf(err, "%d MTP layers: Pith runs heads of one layer (GLM-4.5's)", hp->n_mtp_layers);
    if (hp->head_dim > PITH_BE_MTP_MAX_HEAD_DIM)
        return pith_errf(err, "MTP head: head width %d over %d", hp->head_dim, PITH_BE_MTP_MAX_HEAD_DIM);
    glm4moe_mtp *t = calloc(1, sizeof *t);
    if (!t) return pith_errf(err, "out of memory");
    m->mtp = t;
    int L = hp->n_layers, dim = hp->dim;
    char name[96];
    snprintf(name, sizeof name, "blk.%d.nextn.embed_tokens.weight", L);
    bool own_embd = pith_model_file_tensor(d->file, name) != NULL;
    snprintf(name, sizeof name, "blk.%d.nextn.shared_head_head.weight", L);
    bool own_head = pith_model_file_tensor(d->file, name) != NULL;
    if (check_layer(d, L, err) || glm4moe_load_layer(m, L, &t->layer, err) ||
        pith_decoder_matrix_of(d, L, "nextn.eh_proj.weight", dim, 2 * dim, &t->eh_proj, err) ||
        pith_decoder_vector(d, L, "nextn.enorm.weight", dim, true, &t->enorm, err) ||
        pith_decoder_vector(d, L, "nextn.hnorm.weight", dim, true, &t->hnorm, err) ||
        pith_decoder_vector(d, L, "nextn.shared_head_norm.weight", dim, true, &t->out_norm, err) ||
        (own_head && pith_decoder_output_named(d, L, "nextn.shared_head_head.weight", &t->output, err)))
        return pith_err_prefix(err, "the MTP layer");
    if (own_embd) {
        snprintf(name, sizeof name, "blk.%d.nextn.embed_tokens.weight", L);
        const pith_tensor *e = pith_model_file_tensor(d->file, name);
        if (e->ne[0] != dim || e->ne[1] != hp->n_vocab || e->ne[2] != 1 || e->ne[3] != 1)
            return pith_errf(err, "the MTP layer: tensor %s: shape [%lld, %lld], expected [%d, %d]", name,
                             (long long)e->ne[0], (long long)e->ne[1], dim, hp->n_vocab);
        if (pith_decoder_table(d, name, &t->embd, err)) return pith_err_prefix(err, "the MTP layer");
    }
    if (!t->embd) t->embd = m->embd;
    if (!t->output) t->output = m->output;
    if (!(t->in = pith_be_buffer(d->be, 2 * dim, err)) || !(t->u = pith_be_buffer(d->be, dim, err)) ||
        !(t->h = pith_be_buffer(d->be, dim, err)))
        return -1;
    d->base.state_checkpoints = true; /* mtp_save copies the hidden state after checkpointed tokens */
    /* a draft step reads the head's layer, eh_proj and the vocabulary projection; a decode step every
     * layer and the projection (the experts, a few per token in both, left out) */
    size_t head = layer_bytes(&t->layer) + weight_bytes(t->eh_proj) + weight_bytes(t->output);
    size_t decode = weight_bytes(m->output);
    for (int l = 0; l < L; l++) decode += layer_bytes(&m->layers[l]);
    d->base.mtp_cost = decode ? (float)((double)head / (double)decode) : 1.0f;
    return 0;
}

void glm4moe_mtp_free(glm4moe *m) {
    free(m->mtp);
    m->mtp = NULL;
}


/* The head's input rows (mtp_input at step: < 0 a forward's tokens) through eh_proj into u. */
static int head_input(glm4moe *m, const pith_buf *hidden, int step, int n, pith_err *err) {
    pith_decoder *d = &m->d;
    const glm4moe_mtp *t = m->mtp;
    const pith_be_mtp_input_args in = {t->embd, t->enorm, t->hnorm, d->base.hp.norm_eps, hidden, t->in, step,
                                       MTP_RECURRENT, 0};
    pith_be_mtp_input(d->be, &in, n);
    const pith_be_mm eh = {t->eh_proj, t->u, false};
    return pith_be_matmul(d->be, t->in, &eh, 1, n, err);
}

int glm4moe_mtp_after_decoder(glm4moe *m, const pith_batch *b, pith_err *err) {
    pith_decoder *d = &m->d;
    const pith_hparams *hp = &d->base.hp;
    const glm4moe_mtp *t = m->mtp;
    const pith_dec_bufs *B = &m->bufs;
    int n = b->n_tokens, L = hp->n_layers;
    /* every token's final-normed hidden state: what the head reads of the position before */
    pith_be_rmsnorm(d->be, B->x, m->out_norm, hp->norm_eps, B->xb, n);
    if (head_input(m, B->xb, -1, n, err)) return -1;
    /* the head's K and V of every token, stored as layer L's (its query is computed and left unused:
     * the layer library's op makes all three) */
    pith_be_rmsnorm(d->be, t->u, t->layer.attn_norm, hp->norm_eps, t->h, n);
    if (pith_attn_block_qkv(d, &t->layer.attn, L, B, t->h, m->cs, n, err)) return -1;
    /* each sequence's last hidden state, and those of its checkpointed tokens (batch.h) */
    const pith_be_mtp_save_args save = {B->xb, MTP_RECURRENT, 0};
    pith_be_mtp_save(d->be, &save);
    return 0;
}

int glm4moe_mtp_draft(pith_model *base, const pith_batch *b, int n_steps, int32_t *draft, float *logits,
                      pith_err *err) {
    glm4moe *m = base->impl;
    const glm4moe_mtp *t = m->mtp;
    pith_decoder *d = &m->d;
    const pith_hparams *hp = &base->hp;
    if (!t) return pith_errf(err, "this model was not loaded with an MTP head");
    if (logits && d->tp.comm) return pith_errf(err, "the draft's logits rows are not gathered under --tp");
    if (pith_be_set_draft(d->be, b, hp->n_vocab, n_steps, draft, logits, err)) return -1;
    int n = b->n_tokens;
    const glm4moe_layer *L = &t->layer;
    const pith_attn_block *A = &L->attn;
    pith_dec_bufs hb = m->bufs; /* the head's residual is u */
    hb.x = t->u;
    for (int step = 0; step < n_steps; step++) {
        /* step 0 reads the slot's hidden state; a later step the last step's output u (read before
         * eh_proj overwrites it) */
        if (head_input(m, t->u, step, n, err)) return -1;
        pith_be_rmsnorm(d->be, t->u, L->attn_norm, hp->norm_eps, t->h, n);
        const pith_be_mm qkv[] = {{A->wq, hb.q, false}, {A->wk, hb.k, false}, {A->wv, hb.v, false}};
        if (pith_be_matmul(d->be, t->h, qkv, 3, n, err)) return -1;
        if (A->bq) {
            pith_be_add_bias(d->be, hb.q, A->bq, n);
            pith_be_add_bias(d->be, hb.k, A->bk, n);
            pith_be_add_bias(d->be, hb.v, A->bv, n);
        }
        const pith_be_mtp_attn_args att = {
            .qg = hb.q, .q = hb.q, .k = hb.k, .v = hb.v, .out = hb.att, .q_norm = A->q_norm, .k_norm = A->k_norm,
            .eps = hp->norm_eps, .rope = &m->rope, .step = step, .group = d->layer_group[hp->n_layers],
            .layer_index = d->layer_index[hp->n_layers], .plain = true,
        };
        pith_be_mtp_attention(d->be, &att, n);
        if (pith_attn_block_out(d, A, &hb, NULL, n, err)) return -1;
        pith_be_rmsnorm(d->be, t->u, L->ffn_norm, hp->norm_eps, hb.xb, n);
        if (pith_ffn_block_forward(d, &L->ffn, &hb, hb.xb, NULL, n, err)) return -1;
        /* shared_head_norm(u): the logits' input (u itself is the next step's hidden state) */
        pith_be_rmsnorm(d->be, t->u, t->out_norm, hp->norm_eps, t->h, n);
        if (pith_decoder_mtp_logits(d, t->h, t->output, step, n, draft, n_steps, err)) return -1;
    }
    return 0;
}
