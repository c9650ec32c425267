/* Qwen3.5's multi-token-prediction head (MTP, llama.cpp's "nextn"): a draft source for speculative
 * decoding that ships inside the model file. Written from vLLM's qwen3_next_mtp.py design and
 * llama.cpp's GGUF conventions for Qwen3.5 (blk.{n_layers}.nextn.*).
 *
 * The head predicts the token after next: at position i it takes the decoder's final-normed hidden
 * state h_i (which predicted token i + 1) and the embedding of token i + 1,
 *     u = eh_proj [enorm(embed(x_{i+1})) | hnorm(h_i)]
 * runs one gated full-attention decoder layer over its own K/V of the positions before (attention,
 * then post_attention_norm and the SwiGLU FFN, as the decoder's attention layers), and its output
 * g = shared_head_norm(u) goes through the decoder's vocabulary projection. Drafting k tokens chains
 * it: the next step pairs the drafted token with g in place of h.
 *
 * Where its memory lives (qwen35_internal.h): the head's K/V for the pair (x_p, h_{p-1}) sits at
 * position p of the FULL group, as that group's last layer, written by every forward from the batch's
 * own hidden states; h of a sequence's last computed position sits at the end of its RECURRENT slot.
 * vLLM keeps that pair at position p - 1 and has no pair for token 0: here position 0 holds nothing
 * the head reads (its attention starts at position 1), and since RoPE scores depend only on the
 * distance between positions, the shift by one changes no score. So prefix caching, preemption,
 * forks and rollback keep the head's memory right with no code of their own.
 *
 * On the backend (backend.h, "Qwen3.5"): a forward runs the head's trunk (mtp_input, eh_proj, K/V
 * through gated_qkv without a query, mtp_save for the hidden states); a draft installs its batch with
 * set_draft, whose draft positions' K/V the backend keeps, and runs each step as mtp_input, the head's
 * projections, mtp_attention, the output projection and FFN of the layer library, and mtp_logits (the
 * greedy token, the next step's input). */
#include <stdlib.h>
#include <string.h>

#include "model/qwen35_internal.h"

/* The memory groups of a model with the head (declare_memory in qwen35.c). */
enum { MTP_FULL = 0, MTP_RECURRENT = 1 };

struct q35_mtp {
    q35_layer layer;                              /* blk.{n_layers}.*: an attention layer with a dense FFN */
    const pith_weight *eh_proj;                   /* dim x 2 dim */
    const pith_weight *enorm, *hnorm, *out_norm;
    pith_buf *in, *u, *h;  /* [enorm(embedding) | hnorm(hidden)] (2 dim); the head's residual; its normed rows */
};

size_t q35_mtp_tail_floats(const q35 *m) { return (size_t)m->d.base.hp.dim; }

/* Where a RECURRENT slot keeps the hidden state: its last dim floats. */
static size_t tail_offset(const q35 *m) {
    return m->d.base.mem.groups[MTP_RECURRENT].state_bytes / sizeof(float) - q35_mtp_tail_floats(m);
}

int q35_mtp_load(q35 *m, pith_err *err) {
    pith_decoder *d = &m->d;
    const pith_hparams *hp = &d->base.hp;
    if (!d->be->vt->set_draft) /* refused here, not at the first step */
        return pith_errf(err, "the %s backend does not run MTP heads (the CPU and Vulkan backends do, the whole model "
                              "on one device)", d->be->vt->name);
    if (hp->n_experts > 0) return pith_errf(err, "MTP heads with experts (qwen35moe) are not supported yet");
    if (hp->n_mtp_layers != 1)
        return pith_errf(err, "%d MTP layers: Pith runs heads of one layer (Qwen3.5's)", hp->n_mtp_layers);
    if (hp->head_dim > PITH_BE_MTP_MAX_HEAD_DIM)
        return pith_errf(err, "MTP head: head width %d over %d", hp->head_dim, PITH_BE_MTP_MAX_HEAD_DIM);
    q35_mtp *t = calloc(1, sizeof *t);
    if (!t) return pith_errf(err, "out of memory");
    m->mtp = t;
    int L = hp->n_layers, dim = hp->dim;
    if (q35_load_layer(m, L, false, &t->layer, err) ||
        pith_decoder_matrix_of(d, L, "nextn.eh_proj.weight", dim, 2 * dim, &t->eh_proj, err) ||
        pith_decoder_vector(d, L, "nextn.enorm.weight", dim, true, &t->enorm, err) ||
        pith_decoder_vector(d, L, "nextn.hnorm.weight", dim, true, &t->hnorm, err) ||
        pith_decoder_vector(d, L, "nextn.shared_head_norm.weight", dim, true, &t->out_norm, err))
        return pith_err_prefix(err, "the MTP head");
    if (!(t->in = pith_be_buffer(d->be, 2 * dim, err)) || !(t->u = pith_be_buffer(d->be, dim, err)) ||
        !(t->h = pith_be_buffer(d->be, dim, err)))
        return -1;
    /* a draft step reads the head's layer and the vocabulary projection; a decode step every layer */
    size_t head = q35_layer_bytes(&t->layer) + q35_weight_bytes(t->eh_proj) + q35_weight_bytes(m->output);
    size_t decode = q35_weight_bytes(m->output);
    for (int l = 0; l < L; l++) decode += q35_layer_bytes(&m->layers[l]);
    d->base.mtp_cost = decode ? (float)((double)head / (double)decode) : 1.0f;
    return 0;
}

void q35_mtp_free(q35 *m) {
    free(m->mtp);
    m->mtp = NULL;
}

/* x = attn_norm(u) into h, then K and V (and the step's [query | gate]) by the head's projections. */
static int head_kv(q35 *m, int n, bool with_q, pith_err *err) {
    pith_decoder *d = &m->d;
    const q35_mtp *t = m->mtp;
    const pith_dec_bufs *B = &m->bufs;
    pith_be_rmsnorm(d->be, t->u, t->layer.attn_norm, d->base.hp.norm_eps, t->h, n);
    const pith_be_mm outs[] = {{t->layer.attn.wk, B->k, false}, {t->layer.attn.wv, B->v, false},
                               {t->layer.attn.wq, m->qg, false}};
    return pith_be_matmul(d->be, t->h, outs, with_q ? 3 : 2, n, err);
}

/* The head's input rows (mtp_input at step: < 0 a forward's tokens) through eh_proj into u. */
static int head_input(q35 *m, const pith_buf *hidden, int step, int n, pith_err *err) {
    pith_decoder *d = &m->d;
    const q35_mtp *t = m->mtp;
    const pith_be_mtp_input_args in = {m->embd, t->enorm, t->hnorm, d->base.hp.norm_eps, hidden, t->in, step,
                                       MTP_RECURRENT, tail_offset(m)};
    pith_be_mtp_input(d->be, &in, n);
    const pith_be_mm eh = {t->eh_proj, t->u, false};
    return pith_be_matmul(d->be, t->in, &eh, 1, n, err);
}

int q35_mtp_after_decoder(q35 *m, const pith_batch *b, pith_err *err) {
    pith_decoder *d = &m->d;
    const pith_hparams *hp = &d->base.hp;
    const pith_dec_bufs *B = &m->bufs;
    int n = b->n_tokens;
    /* every token's final-normed hidden state: what the head reads of the position before */
    pith_be_rmsnorm(d->be, B->x, m->out_norm, hp->norm_eps, B->xb, n);
    if (head_input(m, B->xb, -1, n, err) || head_kv(m, n, false, err)) return -1;
    q35_gated_qkv(m, &m->mtp->layer, NULL, d->layer_group[hp->n_layers], d->layer_index[hp->n_layers], n);
    /* each sequence's last hidden state, and those of its checkpointed tokens (batch.h) */
    const pith_be_mtp_save_args save = {B->xb, MTP_RECURRENT, tail_offset(m)};
    pith_be_mtp_save(d->be, &save);
    return 0;
}

int q35_mtp_draft(pith_model *base, const pith_batch *b, int n_steps, int32_t *draft, float *logits, pith_err *err) {
    q35 *m = base->impl;
    const q35_mtp *t = m->mtp;
    pith_decoder *d = &m->d;
    const pith_hparams *hp = &base->hp;
    if (!t) return pith_errf(err, "this model was not loaded with an MTP head");
    if (logits && d->tp.comm) return pith_errf(err, "the draft's logits rows are not gathered under --tp");
    if (pith_be_set_draft(d->be, b, hp->n_vocab, n_steps, draft, logits, err)) return -1;
    int n = b->n_tokens;
    const q35_layer *L = &t->layer;
    pith_dec_bufs hb = m->bufs; /* the head's residual is u */
    hb.x = t->u;
    for (int step = 0; step < n_steps; step++) {
        if (head_input(m, t->h, step, n, err) || head_kv(m, n, true, err)) return -1;
        const pith_be_mtp_attn_args att = {
            .qg = m->qg, .q = hb.q, .k = hb.k, .v = hb.v, .out = hb.att, .q_norm = L->attn.q_norm,
            .k_norm = L->attn.k_norm, .eps = hp->norm_eps, .rope = &m->rope, .step = step,
            .group = d->layer_group[hp->n_layers], .layer_index = d->layer_index[hp->n_layers],
        };
        pith_be_mtp_attention(d->be, &att, n);
        if (pith_attn_block_out(d, &L->attn, &hb, NULL, n, err)) return -1;
        pith_be_rmsnorm(d->be, t->u, L->post_norm, hp->norm_eps, hb.xb, n);
        if (pith_ffn_block_forward(d, &L->ffn, &hb, hb.xb, NULL, n, err)) return -1;
        /* g = shared_head_norm(u): the next step's hidden state and the logits' input */
        pith_be_rmsnorm(d->be, t->u, t->out_norm, hp->norm_eps, t->h, n);
        if (pith_decoder_mtp_logits(d, t->h, m->output, step, n, draft, n_steps, err)) return -1;
    }
    return 0;
}
