/* The Vulkan backend's multi-token-prediction head (backend.h: set_draft and the mtp_* ops, which
 * model/qwen35_mtp.c and model/glm4moe_mtp.c compose with the layer library's ops).
 *
 * A forward's part is two dispatches: mtp_input (the token's embedding by embed.comp, then mtp.comp's
 * norms and the hidden state before each token: the row before it, or its sequence's slot tail) and
 * mtp_save (each sequence's last row and each checkpointed token's row into the slot tails).
 *
 * A draft is a step of its own: set_draft writes its batch into the step buffer (one token per sequence,
 * and room for the drafted tokens at ST_DRAFT) and begins recording; each draft step's ops record into
 * it; mtp_logits records the vocabulary product and argmax.comp, which writes each sequence's greedy
 * token into the draft and over the step's token, where the next step's embedding reads it; the last
 * step's mtp_logits submits the whole draft and waits, once. So a draft of k steps is one submission,
 * recorded once per shape (sequences, steps, logits wanted or not) and replayed after, as a forward is.
 *
 * The draft positions' K/V are the backend's own float32 rows (common.glsl: MTP_MAX_STEPS per
 * sequence), written by qkv.comp's draft mode at the draft step's RoPE position (rope.comp's pos_add)
 * and read after the pool's positions 1..p-1 by attention.comp's DRAFT variant. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "backend/batch_check.h"
#include "backend/vulkan/vk.h"

_Static_assert(PITH_BE_MTP_MAX_STEPS == 16, "common.glsl's MTP_MAX_STEPS");

typedef struct {
    uint64_t o, hidden, en, hn, pool, step;
    uint32_t dim, o_ld, h_ld, slot_size, tail, g, mode, n;
    float eps;
} mtp_push;

typedef struct {
    uint64_t logits, step;
    uint32_t n_vocab, ld, n, n_steps, dstep;
} argmax_push;

int pith_vk_set_draft(pith_backend *be, const pith_batch *b, int n_vocab, int n_steps, int32_t *draft, float *logits,
                      pith_err *err) {
    pith_vk *c = pith_vk_of(be);
    pith_vk_step_reset(c);
    if (!c->mem_allocated || !c->has_shape) return pith_errf(err, "mtp_draft: no memory allocated");
    if (pith_draft_check(b, &c->meta, n_vocab, n_steps, INT_MAX, err) || be->vt->reserve(be, b->n_tokens, err))
        return -1;
    size_t n = (size_t)b->n_seqs, kv_dim = (size_t)c->shape.n_kv_heads * c->shape.head_dim;
    size_t rows = n * PITH_BE_MTP_MAX_STEPS * kv_dim * sizeof(float);
    size_t ints = pith_vk_step_ints(c, b) + n * (size_t)n_steps;
    if (pith_vk_grow(c, &c->draft_k, rows, false, err) || pith_vk_grow(c, &c->draft_v, rows, false, err) ||
        pith_vk_grow(c, &c->draft_cs, n * PITH_BE_MTP_MAX_HEAD_DIM * sizeof(float), false, err) ||
        pith_vk_grow_host(c, &c->step, ints * sizeof(int32_t), err) ||
        pith_vk_grow_host(c, &c->logits, n * (size_t)(logits ? n_steps : 1) * (size_t)n_vocab * sizeof(float), err))
        return pith_err_prefix(err, "an MTP draft of %zu sequences", n);
    size_t at = pith_vk_step_put(c, b);
    ((int32_t *)c->step.map)[VK_ST_DRAFT] = (int32_t)at;
    c->b = b, c->out_logits = NULL, c->n_vocab = n_vocab;
    c->n_kept = c->n_hidden = c->n_logits = 0;
    c->draft_steps = n_steps, c->draft_out = draft, c->draft_logits_out = logits;
    return pith_vk_step_begin(c, err);
}

/* The RECURRENT group whose slots hold the hidden state at float tail, or NULL (the step fails). */
static const vk_group *tail_group(pith_vk *c, int g, size_t tail, int dim) {
    const vk_group *G = g >= 0 && g < c->n_groups ? &c->groups[g] : NULL;
    if (!G || G->meta.kind != PITH_MEM_RECURRENT || tail + (size_t)dim > G->meta.state_bytes / sizeof(float)) {
        pith_vk_fail(c, "Vulkan: the MTP head's hidden state is not inside a recurrent group's slots");
        return NULL;
    }
    return G;
}

void pith_vk_mtp_input(pith_backend *be, const pith_be_mtp_input_args *a, int n) {
    pith_vk *c = pith_vk_of(be);
    if (!pith_vk_recording(c) || n == 0) return;
    int dim = a->hidden->cols;
    if (a->out->cols < 2 * dim || a->embd->cols != dim || a->enorm->cols != dim || a->hnorm->cols != dim)
        return pith_vk_fail(c, "Vulkan: mtp_input's rows, embeddings and norms differ in width");
    if (a->step > 0 && !c->draft_steps) return pith_vk_fail(c, "Vulkan: an MTP draft step outside a draft");
    const vk_group *G = tail_group(c, a->group, a->tail_offset, dim);
    if (!G) return;
    const vk_weight *e = a->embd->impl;
    vk_embed_push ep = {e->mem.addr, pith_vk_buf_addr(a->out), c->step.addr, e->row_words, (uint32_t)dim,
                        (uint32_t)a->out->cols, (uint32_t)n, 0.0f};
    pith_vk_record(c, PITH_VK_SH_embed_f32 + e->wtype, &ep, sizeof ep, (uint32_t)n, 1);
    mtp_push p = {pith_vk_buf_addr(a->out), pith_vk_buf_addr(a->hidden), pith_vk_weight_addr(a->enorm),
                  pith_vk_weight_addr(a->hnorm), G->state.addr, c->step.addr, (uint32_t)dim, (uint32_t)a->out->cols,
                  (uint32_t)a->hidden->cols, (uint32_t)(G->meta.state_bytes / sizeof(float)), (uint32_t)a->tail_offset,
                  (uint32_t)a->group, a->step < 0 ? 0u : a->step == 0 ? 1u : 2u, (uint32_t)n, a->eps};
    pith_vk_record(c, PITH_VK_SH_mtp_input, &p, sizeof p, (uint32_t)n, 1);
}

void pith_vk_mtp_save(pith_backend *be, const pith_be_mtp_save_args *a) {
    pith_vk *c = pith_vk_of(be);
    if (!pith_vk_recording(c)) return;
    int dim = a->hidden->cols;
    const vk_group *G = tail_group(c, a->group, a->tail_offset, dim);
    if (!G) return;
    const pith_batch *b = c->b;
    mtp_push p = {0, pith_vk_buf_addr(a->hidden), 0, 0, G->state.addr, c->step.addr, (uint32_t)dim, 0,
                  (uint32_t)a->hidden->cols, (uint32_t)(G->meta.state_bytes / sizeof(float)), (uint32_t)a->tail_offset,
                  (uint32_t)a->group, 0, (uint32_t)b->n_tokens, 0.0f};
    pith_vk_record(c, PITH_VK_SH_mtp_save, &p, sizeof p, (uint32_t)(b->n_seqs + b->n_tokens), 1);
}

void pith_vk_mtp_attention(pith_backend *be, const pith_be_mtp_attn_args *a, int n) {
    pith_vk *c = pith_vk_of(be);
    if (!pith_vk_recording(c) || n == 0) return;
    if (!c->draft_steps || a->step < 0 || a->step >= c->draft_steps)
        return pith_vk_fail(c, "Vulkan: an MTP draft step outside a draft");
    const vk_group *G = a->group >= 0 && a->group < c->n_groups ? &c->groups[a->group] : NULL;
    if (!G || G->meta.kind == PITH_MEM_RECURRENT || a->layer_index < 0 || a->layer_index >= G->meta.n_layers)
        return pith_vk_fail(c, "Vulkan: mtp_attention names no layer of a KV group");
    const pith_kv_cache *m = &G->meta;
    int hd, nkv, nh = c->shape.n_heads, half = a->rope->half;
    pith_vk_group_shape(c, a->group, &nkv, &hd);
    if (nkv * hd != c->shape.n_kv_heads * c->shape.head_dim || m->k_dim != nkv * hd || a->k->cols < nkv * hd ||
        a->v->cols < nkv * hd || a->q->cols < nh * hd || a->out->cols < nh * hd ||
        a->qg->cols < (a->plain ? 1 : 2) * nh * hd || half < 1 || 2 * half > hd)
        return pith_vk_fail(c, "Vulkan: mtp_attention's buffers do not fit the attention shape");
    if (!a->q_norm != !a->k_norm) return pith_vk_fail(c, "Vulkan: an MTP query norm without a key norm, or the reverse");
    if (a->plain && a->q != a->qg) return pith_vk_fail(c, "Vulkan: a plain MTP query is normed and rotated in place (q == qg)");
    pith_err e;
    const vk_rope *r = pith_vk_rope(c, a->rope, &e);
    if (!r) return pith_vk_fail(c, e.msg);
    /* the draft position's RoPE tables (p + step), then its query (the gated head's query halves first),
     * its key normed and rotated, and K and V kept as the draft's rows */
    vk_rope_push rp = {r->freq.addr, c->draft_cs.addr, c->step.addr, (uint32_t)half, 2u * (uint32_t)half, (uint32_t)n,
                       (float)a->rope->mscale, a->step};
    pith_vk_record(c, PITH_VK_SH_rope, &rp, sizeof rp, ((uint32_t)n * (uint32_t)half + 63) / 64, 1);
    if (!a->plain) pith_vk_gate(c, a->q, a->qg, 0, n);
    uint32_t flags = (a->q_norm ? 1u : 0u) | 8u | (a->rope->style == PITH_ROPE_ADJACENT ? 16u : 0u) | 32u |
                     (uint32_t)a->group << 8 | (uint32_t)a->step << 16;
    vk_qkv_push qp = {pith_vk_buf_addr(a->q), pith_vk_buf_addr(a->k), pith_vk_buf_addr(a->v),
                      a->q_norm ? pith_vk_weight_addr(a->q_norm) : 0, a->k_norm ? pith_vk_weight_addr(a->k_norm) : 0,
                      c->draft_cs.addr, c->step.addr, c->draft_k.addr, c->draft_v.addr, (uint32_t)a->q->cols,
                      (uint32_t)a->k->cols, (uint32_t)a->v->cols, (uint32_t)hd, (uint32_t)nh | (uint32_t)nkv << 16,
                      (uint32_t)m->block_size, (uint32_t)(nkv * hd), flags, 2u * (uint32_t)half, (uint32_t)n, a->eps};
    pith_vk_record(c, PITH_VK_SH_qkv_f32, &qp, sizeof qp, (uint32_t)n * (uint32_t)(nh + nkv), 1);
    vk_attn_push ap = {pith_vk_buf_addr(a->q), pith_vk_buf_addr(a->out), 0, pith_vk_layer_base(&G->k, m, a->layer_index),
                       pith_vk_layer_base(&G->v, m, a->layer_index), c->step.addr, (uint32_t)a->q->cols,
                       (uint32_t)a->out->cols, (uint32_t)hd, (uint32_t)nh | (uint32_t)nkv << 16, (uint32_t)m->block_size,
                       (uint32_t)m->k_dim, 0, (a->plain ? 0u : 2u) | (uint32_t)a->group << 8, (uint32_t)n,
                       1.0f / sqrtf((float)hd), c->draft_k.addr, c->draft_v.addr, pith_vk_buf_addr(a->qg),
                       (uint32_t)a->qg->cols, (uint32_t)a->step};
    pith_vk_record(c, PITH_VK_SH_mtp_attn_f32 + pith_vk_kvtype(m->type), &ap, sizeof ap, (uint32_t)n * (uint32_t)nh, 1);
}

int pith_vk_mtp_logits(pith_backend *be, const pith_be_mtp_logits_args *a, int n, pith_err *err) {
    pith_vk *c = pith_vk_of(be);
    int V = c->n_vocab, steps = c->draft_steps;
    if (!steps || a->step < 0 || a->step >= steps) return pith_errf(err, "mtp_logits: step %d outside a draft", a->step);
    if (a->output->cols != a->x->cols || a->output->rows != V)
        return pith_errf(err, "mtp_logits: a [%d x %d] weight does not take rows of %d into %d logits", a->output->rows,
                         a->output->cols, a->x->cols, V);
    bool all = c->draft_logits_out != NULL; /* every step's rows kept: [s][step][V], else the step's [s][V] */
    if (n > 0 && pith_vk_recording(c)) {
        VkDeviceAddress out = c->logits.addr + (all ? (size_t)a->step * V * sizeof(float) : 0);
        uint32_t ld = (uint32_t)(all ? steps * V : V);
        pith_vk_matmul_rows(c, a->x, a->output, out, (int)ld, n);
        argmax_push p = {out, c->step.addr, (uint32_t)V, ld, (uint32_t)n, (uint32_t)steps, (uint32_t)a->step};
        pith_vk_record(c, PITH_VK_SH_argmax, &p, sizeof p, (uint32_t)n, 1);
    }
    if (a->step < steps - 1) return 0;
    /* the draft's end: run it, hand out its tokens (and logits) */
    int rc = pith_vk_step_end(c, err);
    if (!rc) {
        const int32_t *s = c->step.map;
        memcpy(c->draft_out, s + s[VK_ST_DRAFT], (size_t)n * steps * sizeof(int32_t));
        if (all) memcpy(c->draft_logits_out, c->logits.map, (size_t)n * steps * V * sizeof(float));
    }
    c->draft_steps = 0, c->draft_out = NULL, c->draft_logits_out = NULL;
    return rc;
}
