/* DeepSeek-V3's multi-token-prediction layer ("nextn"; GGUF blk.{n_layers}.nextn.*, Hugging Face
 * model.layers.{num_hidden_layers}.*) as a draft source for speculative decoding. The math follows
 * vLLM's model_executor/models/deepseek_mtp.py (DeepSeekMultiTokenPredictorLayer, SharedHead) and
 * llama.cpp's tensor names (src/models/deepseek2.cpp and llama-arch.cpp's LLM_TENSOR_NEXTN_*: eh_proj,
 * enorm, hnorm, shared_head_norm, the optional shared_head_head and embed_tokens), with DeepSeek's
 * decoder block (deepseek2.c: MLA, the MoE FFN) from transformers' modeling_deepseek_v3.py:
 *
 *   u = eh_proj [enorm(embed(x_{i+1})) | hnorm(h_i)]      h_i: the decoder's final-normed hidden state
 *   u = u + o_proj(MLA(input_layernorm(u)))               the head's own latent cache (below)
 *   u = u + FFN(post_attention_layernorm(u))              the layer's experts (a dense FFN where the
 *                                                         layer index is among the leading dense ones)
 *   logits = head(shared_head_norm(u))                    head: nextn.shared_head_head when the file has
 *                                                         it, else the decoder's output (embed likewise:
 *                                                         nextn.embed_tokens, else token_embd)
 * Drafting k tokens chains it: the next step pairs the drafted token with u (before shared_head_norm:
 * deepseek_mtp.py's layer returns residual + hidden_states, SharedHead's norm is on the way to the
 * logits only). One difference from vLLM, shared with glm4moe_mtp.c: deepseek_mtp.py zeroes the
 * embedding of the pair at its position 0, (x_1, h_0) (Pith's position 1: "not needed by MTP"); Pith
 * keeps it, as DeepSeek-V3's report writes the module (every position's Emb(t_{i+k}) with h_i), since
 * mtp_input, shared with the other heads, has no such mask. Only that one pair of a sequence differs.
 *
 * The design is GLM-4.5's head's (glm4moe_mtp.c says why): the head's latent row [c_kv | k_pe] for the
 * pair (x_p, h_{p-1}) sits at position p of the FULL group as that group's last layer, written by every
 * forward from the batch's own hidden states, so prefix caching, preemption, forks and rollback keep it
 * with no code of their own (position 0 holds a pair the head never reads); each sequence's last hidden
 * state is the whole state of a RECURRENT group of no layer (dim floats), carried by the engine's slots.
 *
 * A forward with the head runs the head layer's MLA op on every token (deepseek2.c's, as layer
 * n_layers): it stores the latent rows, and its attention output is left unused (the op makes both;
 * one more layer's attention per forward, the price of not adding a store-only op). The draft steps use
 * the backend's mtp_mla (backend.h: the absorbed MLA of one query per sequence over the head's rows of
 * positions 1..p-1 and the draft rows), with Qwen3.5's mtp_input, mtp_save, set_draft and mtp_logits.
 * Only the CPU backend has mtp_mla: the load refuses the head on a backend without it. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/arch.h"
#include "model/deepseek2.h"
#include "model/deepseek2_internal.h"
#include "model/moe_arch.h"

/* The memory groups of a model with the head (pith_decoder_mtp_memory). */
enum { MTP_FULL = PITH_DECODER_MTP_FULL, MTP_RECURRENT = PITH_DECODER_MTP_RECURRENT };

struct ds2_mtp {
    ds2_layer *layer;                             /* blk.{n_layers}.*: m->layers[n_layers] */
    const pith_weight *eh_proj;                   /* dim x 2 dim */
    const pith_weight *enorm, *hnorm, *out_norm;  /* out_norm: shared_head_norm */
    const pith_weight *embd, *output;             /* the head's own, else the decoder's */
    pith_buf *in, *u, *h;  /* [enorm(embedding) | hnorm(hidden)] (2 dim); the head's residual; its normed rows */
};

static size_t weight_bytes(const pith_weight *w) {
    return w ? (size_t)w->rows * pith_dtype_row_bytes(w->type, w->cols) : 0;
}

/* The dense matrices a step reads of a layer (experts left out: a token reads few of them). */
static size_t layer_bytes(const ds2_layer *L, int n_heads) {
    const pith_weight *ws[] = {L->wq, L->wq_a, L->wq_b, L->wkv_a, L->attn.wo, L->ffn.gate, L->ffn.up, L->ffn.down};
    size_t n = 0;
    for (size_t i = 0; i < sizeof ws / sizeof *ws; i++) n += weight_bytes(ws[i]);
    for (int h = 0; h < n_heads; h++) n += weight_bytes(L->k_b[h]) + weight_bytes(L->v_b[h]);
    return n;
}

/* The experts' selection bias of an MoE head layer, where the decoder's layers have one (the schema
 * checks only the decoder's layers). */
static int check_layer(const ds2 *m, int l, pith_err *err) {
    const pith_decoder *d = &m->d;
    const pith_hparams *hp = &d->base.hp;
    if (pith_moe_dense_layer(hp, l) || hp->n_experts == 0) return 0;
    char name[64], first[64];
    snprintf(name, sizeof name, "blk.%d.exp_probs_b.bias", l);
    snprintf(first, sizeof first, "blk.%d.exp_probs_b.bias", hp->n_layers - 1);
    const pith_tensor *t = pith_model_file_tensor(d->file, name);
    if (!t && pith_model_file_tensor(d->file, first))
        return pith_errf(err, "missing tensor %s (the experts' selection bias)", name);
    if (t && (pith_tensor_nelems(t) != hp->n_experts || t->ne[0] != hp->n_experts))
        return pith_errf(err, "tensor %s: %lld elements, expected %d (one per expert)", name,
                         (long long)pith_tensor_nelems(t), hp->n_experts);
    return 0;
}

int ds2_mtp_load(ds2 *m, pith_err *err) {
    pith_decoder *d = &m->d;
    const pith_hparams *hp = &d->base.hp;
    const pith_deepseek2_params *P = pith_deepseek2_params_of(hp);
    if (!d->be->vt->mtp_mla) /* the CPU backend's op (and the recording backend of the tests, around it) */
        return pith_errf(err, "the %s backend does not run DeepSeek's MTP layer (the CPU backend does)",
                         d->be->vt->name);
    if (hp->n_mtp_layers != 1)
        return pith_errf(err, "%d MTP layers: Pith runs heads of one layer (DeepSeek-V3's)", hp->n_mtp_layers);
    if (P->kv_lora_rank + P->qk_rope > PITH_BE_MTP_MAX_HEAD_DIM)
        return pith_errf(err, "MTP head: latent row of %d over %d", P->kv_lora_rank + P->qk_rope,
                         PITH_BE_MTP_MAX_HEAD_DIM);
    ds2_mtp *t = calloc(1, sizeof *t);
    if (!t) return pith_errf(err, "out of memory");
    m->mtp = t;
    int L = hp->n_layers, dim = hp->dim;
    t->layer = &m->layers[L];
    char name[96];
    snprintf(name, sizeof name, "blk.%d.nextn.embed_tokens.weight", L);
    bool own_embd = pith_model_file_tensor(d->file, name) != NULL;
    snprintf(name, sizeof name, "blk.%d.nextn.shared_head_head.weight", L);
    bool own_head = pith_model_file_tensor(d->file, name) != NULL;
    if (check_layer(m, L, err) || ds2_load_layer(m, L, t->layer, err) ||
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
    size_t head = layer_bytes(t->layer, hp->n_heads) + weight_bytes(t->eh_proj) + weight_bytes(t->output);
    size_t decode = weight_bytes(m->output);
    for (int l = 0; l < L; l++) decode += layer_bytes(&m->layers[l], hp->n_heads);
    d->base.mtp_cost = decode ? (float)((double)head / (double)decode) : 1.0f;
    return 0;
}

void ds2_mtp_free(ds2 *m) {
    free(m->mtp);
    m->mtp = NULL;
}


/* The head's input rows (mtp_input at step: < 0 a forward's tokens) through eh_proj into u. */
static int head_input(ds2 *m, const pith_buf *hidden, int step, int n, pith_err *err) {
    pith_decoder *d = &m->d;
    const ds2_mtp *t = m->mtp;
    const pith_be_mtp_input_args in = {t->embd, t->enorm, t->hnorm, d->base.hp.norm_eps, hidden, t->in, step,
                                       MTP_RECURRENT, 0};
    pith_be_mtp_input(d->be, &in, n);
    const pith_be_mm eh = {t->eh_proj, t->u, false};
    return pith_be_matmul(d->be, t->in, &eh, 1, n, err);
}

int ds2_mtp_after_decoder(ds2 *m, const pith_batch *b, pith_err *err) {
    pith_decoder *d = &m->d;
    const pith_hparams *hp = &d->base.hp;
    const ds2_mtp *t = m->mtp;
    const pith_dec_bufs *B = &m->bufs;
    int n = b->n_tokens, L = hp->n_layers;
    /* every token's final-normed hidden state: what the head reads of the position before */
    pith_be_rmsnorm(d->be, B->x, m->out_norm, hp->norm_eps, B->xb, n);
    if (head_input(m, B->xb, -1, n, err)) return -1;
    /* the head's latent row of every token, stored as layer L's (the op's attention output, into
     * bufs.att, is left unused; the absorbed form: only the store matters) */
    pith_be_rmsnorm(d->be, t->u, t->layer->attn_norm, hp->norm_eps, t->h, n);
    if (ds2_attention_qkv(m, t->layer, t->h, n, err)) return -1;
    pith_be_mla_args op = ds2_mla_args(m, t->layer, L);
    op.kv_b = NULL;
    op.expand_min = INT_MAX;
    if (pith_be_mla(d->be, &op, n, err)) return -1;
    /* each sequence's last hidden state, and those of its checkpointed tokens (batch.h) */
    const pith_be_mtp_save_args save = {B->xb, MTP_RECURRENT, 0};
    pith_be_mtp_save(d->be, &save);
    return 0;
}

int ds2_mtp_draft(pith_model *base, const pith_batch *b, int n_steps, int32_t *draft, float *logits,
                  pith_err *err) {
    ds2 *m = base->impl;
    const ds2_mtp *t = m->mtp;
    pith_decoder *d = &m->d;
    const pith_hparams *hp = &base->hp;
    if (!t) return pith_errf(err, "this model was not loaded with an MTP head");
    if (logits && d->tp.comm) return pith_errf(err, "the draft's logits rows are not gathered under --tp");
    if (pith_be_set_draft(d->be, b, hp->n_vocab, n_steps, draft, logits, err)) return -1;
    int n = b->n_tokens;
    const ds2_layer *L = t->layer;
    pith_dec_bufs hb = m->bufs; /* the head's residual is u */
    hb.x = t->u;
    const pith_be_mla_args op = ds2_mla_args(m, L, hp->n_layers);
    for (int step = 0; step < n_steps; step++) {
        /* step 0 reads the slot's hidden state; a later step the last step's output u (read before
         * eh_proj overwrites it) */
        if (head_input(m, t->u, step, n, err)) return -1;
        pith_be_rmsnorm(d->be, t->u, L->attn_norm, hp->norm_eps, t->h, n);
        if (ds2_attention_qkv(m, L, t->h, n, err)) return -1;
        const pith_be_mtp_mla_args att = {&op, &m->rope, step};
        if (pith_be_mtp_mla(d->be, &att, n, err)) return -1;
        if (pith_attn_block_out(d, &L->attn, &hb, NULL, n, err)) return -1;
        pith_be_rmsnorm(d->be, t->u, L->ffn_norm, hp->norm_eps, hb.xb, n);
        if (pith_ffn_block_forward(d, &L->ffn, &hb, hb.xb, NULL, n, err)) return -1;
        /* shared_head_norm(u): the logits' input (u itself is the next step's hidden state) */
        pith_be_rmsnorm(d->be, t->u, t->out_norm, hp->norm_eps, t->h, n);
        if (pith_decoder_mtp_logits(d, t->h, t->output, step, n, draft, n_steps, err)) return -1;
    }
    return 0;
}
