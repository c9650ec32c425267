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
 * forks and rollback keep the head's memory right with no code of their own. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/kv_rows.h"
#include "backend/cpu/quants.h"
#include "backend/cpu/recurrent.h"
#include "model/qwen35_internal.h"
#include "sample/rows.h"

#define MTP_MAX_STEPS 16
#define MTP_MAX_HEAD_DIM 1024

struct q35_mtp {
    q35_layer layer;         /* blk.{n_layers}.*: an attention layer with a dense FFN */
    pith_matrix eh_proj;     /* dim x 2 dim */
    float *enorm, *hnorm, *out_norm;
    int cap;                 /* rows of in and u */
    float *in, *u;           /* [cap][2 dim], [cap][dim] */
    /* drafting: per sequence, the K/V of its draft positions, the hidden state it continues from */
    int draft_cap;
    float *dk, *dv, *hid, *cos, *sin, *logits;
    int32_t *tok, *pos;
    int step;                /* the draft step the attention units run */
};

static float *slot_tail(q35 *m, int slot) {
    const pith_kv_cache *c = &m->mem.groups[1]; /* the RECURRENT group (declare_memory) */
    return (float *)(c->state + (size_t)slot * c->state_bytes) + (c->state_bytes / sizeof(float) - (size_t)m->base.hp.dim);
}

size_t q35_mtp_tail_floats(const q35 *m) { return (size_t)m->base.hp.dim; }

int q35_mtp_load(q35 *m, const pith_model_file *f, pith_err *err) {
    const pith_hparams *hp = &m->base.hp;
    if (hp->n_experts > 0) return pith_errf(err, "MTP heads with experts (qwen35moe) are not supported yet");
    if (hp->n_mtp_layers != 1)
        return pith_errf(err, "%d MTP layers: Pith runs heads of one layer (Qwen3.5's)", hp->n_mtp_layers);
    if (hp->head_dim > MTP_MAX_HEAD_DIM) return pith_errf(err, "MTP head: head width %d over %d", hp->head_dim, MTP_MAX_HEAD_DIM);
    q35_mtp *t = calloc(1, sizeof *t);
    if (!t) return pith_errf(err, "out of memory");
    m->mtp = t;
    int L = hp->n_layers, dim = hp->dim;
    char n[96];
#define NAME(s) (snprintf(n, sizeof n, "blk.%d.%s", L, s), n)
    if (q35_load_layer(m, f, L, false, &t->layer, err) ||
        pith_hy_load_mat(f, NAME("nextn.eh_proj.weight"), dim, 2 * dim, &t->eh_proj, err) ||
        pith_hy_load_vec(f, NAME("nextn.enorm.weight"), dim, &t->enorm, err) ||
        pith_hy_load_vec(f, NAME("nextn.hnorm.weight"), dim, &t->hnorm, err) ||
        pith_hy_load_vec(f, NAME("nextn.shared_head_norm.weight"), dim, &t->out_norm, err) ||
        q35_pack_layer(m, &t->layer, err) || pith_matrix_pack(&m->cpu, &t->eh_proj, err))
        return pith_err_prefix(err, "the MTP head");
#undef NAME
    /* a draft step reads the head's layer and the vocabulary projection; a decode step every layer */
    size_t head = q35_layer_bytes(&t->layer) + q35_matrix_bytes(&t->eh_proj) + q35_matrix_bytes(&m->output);
    size_t decode = q35_matrix_bytes(&m->output);
    for (int l = 0; l < L; l++) decode += q35_layer_bytes(&m->layers[l]);
    m->base.mtp_cost = decode ? (float)((double)head / (double)decode) : 1.0f;
    return 0;
}

void q35_mtp_free(q35 *m) {
    q35_mtp *t = m->mtp;
    if (!t) return;
    q35_free_layer(&t->layer);
    pith_matrix_free(&t->eh_proj);
    float *vs[] = {t->enorm, t->hnorm, t->out_norm, t->in, t->u, t->dk, t->dv, t->hid, t->cos, t->sin, t->logits};
    for (size_t i = 0; i < sizeof vs / sizeof *vs; i++) free(vs[i]);
    free(t->tok);
    free(t->pos);
    free(t);
    m->mtp = NULL;
}

int q35_mtp_reserve(q35 *m, int n, pith_err *err) {
    q35_mtp *t = m->mtp;
    size_t dim = (size_t)m->base.hp.dim;
    if (pith_cpu_reserve(&m->cpu, n, 2 * (int)dim, err)) return -1;
    if (n <= t->cap) return 0;
    free(t->in);
    free(t->u);
    t->in = malloc((size_t)n * 2 * dim * sizeof(float));
    t->u = malloc((size_t)n * dim * sizeof(float));
    t->cap = t->in && t->u ? n : 0;
    return t->cap ? 0 : pith_errf(err, "out of memory for the MTP head");
}

/* ---------------- rows ---------------- */

/* in[t] = [enorm(embed(token)) | hnorm(hidden)]; hidden NULL: zeros (position 0, never read). */
static void head_input(q35 *m, int32_t token, const float *hidden, float *in) {
    const pith_hparams *hp = &m->base.hp;
    int dim = hp->dim;
    pith_dequantize_row(m->embd->type, (const uint8_t *)m->embd->data + (size_t)token * m->embd_row_bytes, in, dim);
    pith_hy_rmsnorm(in, in, m->mtp->enorm, dim, hp->norm_eps);
    if (hidden) pith_hy_rmsnorm(in + dim, hidden, m->mtp->hnorm, dim, hp->norm_eps);
    else memset(in + dim, 0, (size_t)dim * sizeof(float));
}

static void trunk_input_row(job *j, int t, int ith) {
    (void)ith;
    q35 *m = j->m;
    const pith_batch *b = j->b;
    int dim = m->base.hp.dim, s = b->seq[t];
    const float *prev = NULL;
    if (t > m->seq_start[s]) prev = m->xb + (size_t)(t - 1) * dim;
    else if (b->positions[t] > 0) prev = slot_tail(m, b->mem[1].state_slots[s]);
    head_input(m, b->tokens[t], prev, m->mtp->in + (size_t)t * 2 * dim);
}

static void head_norm_row(job *j, int t, int ith) {
    (void)ith;
    q35 *m = j->m;
    int dim = m->base.hp.dim;
    pith_hy_rmsnorm(m->x + (size_t)t * dim, m->mtp->u + (size_t)t * dim, j->norm, dim, m->base.hp.norm_eps);
}

/* K (normed, rotated at its token's position) and V of the head into the FULL group. */
static void trunk_kv_row(job *j, int t, int ith) {
    (void)ith;
    q35 *m = j->m;
    const pith_hparams *hp = &m->base.hp;
    int hd = hp->head_dim, half = m->n_rot / 2;
    float *k = m->k + (size_t)t * m->kv_dim, *v = m->v + (size_t)t * m->kv_dim;
    const float *cs = m->rope_cos + (size_t)t * half, *sn = m->rope_sin + (size_t)t * half;
    q35_norm_rope(m, k, k, (size_t)hd, hp->n_kv_heads, m->mtp->layer.k_norm, cs, sn);
    pith_hy_store_kv(&m->cpu, &m->mem, j->b, 0, m->layer_index[hp->n_layers], t, k, v, hp->n_kv_heads, hd);
}

/* x = attn_norm(u), then K and V by the head's projections (into m->k, m->v). */
static int head_kv(q35 *m, const pith_batch *b, int n, bool with_q, pith_err *err) {
    q35_mtp *t = m->mtp;
    int dim = m->base.hp.dim;
    job j = {.m = m, .b = b, .norm = t->layer.attn_norm};
    pith_hy_run(&m->cpu, &j, head_norm_row, n, dim);
    pith_acts a;
    pith_acts_bind(&m->cpu, &a, m->x, n, dim, dim);
    const pith_matmul_out outs[] = {{&t->layer.wk, m->k, m->kv_dim, false},
                                    {&t->layer.wv, m->v, m->kv_dim, false},
                                    {&t->layer.wq, m->q2, 2 * (size_t)m->q_dim, false}};
    return pith_cpu_matmul_many(&m->cpu, &a, outs, with_q ? 3 : 2, err);
}

static int head_project_input(q35 *m, int n, pith_err *err) {
    int dim = m->base.hp.dim;
    pith_acts a;
    pith_acts_bind(&m->cpu, &a, m->mtp->in, n, 2 * dim, 2 * (size_t)dim);
    return pith_cpu_matmul(&m->cpu, &m->mtp->eh_proj, &a, m->mtp->u, dim, false, err);
}

int q35_mtp_after_decoder(q35 *m, const pith_batch *b, pith_err *err) {
    int n = b->n_tokens, dim = m->base.hp.dim;
    job j = {.m = m, .b = b};
    pith_hy_run(&m->cpu, &j, trunk_input_row, n, 4.0 * dim);
    if (head_project_input(m, n, err) || head_kv(m, b, n, false, err)) return -1;
    pith_hy_run(&m->cpu, &j, trunk_kv_row, n, 8.0 * m->kv_dim);
    /* each sequence's last hidden state, and those of its checkpointed tokens (batch.h) */
    const int32_t *ck = b->mem[1].checkpoints;
    for (int s = 0; s < b->n_seqs; s++) {
        int last = m->seq_start[s + 1] - 1;
        memcpy(slot_tail(m, b->mem[1].state_slots[s]), m->xb + (size_t)last * dim, (size_t)dim * sizeof(float));
    }
    for (int i = 0; ck && i < n; i++)
        if (ck[i] >= 0) memcpy(slot_tail(m, ck[i]), m->xb + (size_t)i * dim, (size_t)dim * sizeof(float));
    return 0;
}

/* ---------------- drafting ---------------- */

static float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

static void draft_input_row(job *j, int s, int ith) {
    (void)ith;
    q35 *m = j->m;
    q35_mtp *t = m->mtp;
    int dim = m->base.hp.dim;
    head_input(m, t->tok[s], t->hid + (size_t)s * dim, t->in + (size_t)s * 2 * dim);
}

/* The step's query out of [query | gate], QK norms and RoPE at the draft position; K and V kept. */
static void draft_qk_row(job *j, int s, int ith) {
    (void)ith;
    q35 *m = j->m;
    q35_mtp *t = m->mtp;
    const pith_hparams *hp = &m->base.hp;
    int hd = hp->head_dim, half = m->n_rot / 2;
    float *cs = t->cos + (size_t)s * half, *sn = t->sin + (size_t)s * half;
    q35_rope_angles(m, t->pos[s] + t->step, cs, sn);
    float *q = m->q + (size_t)s * m->q_dim, *k = m->k + (size_t)s * m->kv_dim;
    q35_norm_rope(m, q, m->q2 + (size_t)s * 2 * m->q_dim, 2 * (size_t)hd, hp->n_heads, t->layer.q_norm, cs, sn);
    q35_norm_rope(m, k, k, (size_t)hd, hp->n_kv_heads, t->layer.k_norm, cs, sn);
    size_t at = ((size_t)s * MTP_MAX_STEPS + (size_t)t->step) * m->kv_dim;
    memcpy(t->dk + at, k, (size_t)m->kv_dim * sizeof(float));
    memcpy(t->dv + at, m->v + (size_t)s * m->kv_dim, (size_t)m->kv_dim * sizeof(float));
}

/* One query head of one sequence: softmax attention over the head's K/V of positions 1..p-1 (the
 * FULL group, through the block table) and of the draft positions so far, times sigmoid(gate). */
static void draft_attention_unit(job *j, int u, int ith) {
    (void)ith;
    q35 *m = j->m;
    q35_mtp *t = m->mtp;
    const pith_batch *b = j->b;
    const pith_hparams *hp = &m->base.hp;
    int hd = hp->head_dim, s = u / hp->n_heads, h = u % hp->n_heads, kvh = h / (hp->n_heads / hp->n_kv_heads);
    const float *q = m->q + (size_t)s * m->q_dim + (size_t)h * hd;
    float *o = m->att + (size_t)s * m->q_dim + (size_t)h * hd;
    const pith_kv_cache *c = &m->mem.groups[0];
    const pith_batch_mem *bm = &b->mem[0];
    const float scale = 1.0f / sqrtf((float)hd);
    const int kv_index = m->layer_index[hp->n_layers];
    float krow[MTP_MAX_HEAD_DIM], vrow[MTP_MAX_HEAD_DIM], mx = -INFINITY, den = 0;
    memset(o, 0, (size_t)hd * sizeof(float));
    /* positions 1..p0-1 from the pool, then the draft positions p0..p0+step from the head's own K/V */
    for (int p = 1, p0 = t->pos[s]; p <= p0 + t->step; p++) {
        const float *k = krow, *v = vrow;
        if (p < p0) {
            int block = bm->block_tables[(size_t)s * bm->max_blocks + p / c->block_size];
            size_t off = pith_kv_k_offset(c, kv_index, block) + ((size_t)kvh * c->block_size + p % c->block_size) * hd;
            pith_kv_load_f32(m->cpu.k, c->type, c->k, off, krow, (size_t)hd);
            pith_kv_load_f32(m->cpu.k, c->type, c->v, off, vrow, (size_t)hd);
        } else {
            size_t at = ((size_t)s * MTP_MAX_STEPS + (size_t)(p - p0)) * m->kv_dim + (size_t)kvh * hd;
            k = t->dk + at, v = t->dv + at;
        }
        float d = 0;
        for (int e = 0; e < hd; e++) d += q[e] * k[e];
        d *= scale;
        float nm = d > mx ? d : mx, r = expf(mx - nm), w = expf(d - nm);
        for (int e = 0; e < hd; e++) o[e] = o[e] * r + w * v[e];
        den = den * r + w;
        mx = nm;
    }
    const float *gate = m->q2 + (size_t)s * 2 * m->q_dim + (size_t)h * 2 * hd + hd;
    for (int e = 0; e < hd; e++) o[e] = o[e] / den * sigmoidf(gate[e]);
}

static void draft_post_norm_row(job *j, int s, int ith) {
    (void)ith;
    q35 *m = j->m;
    int dim = m->base.hp.dim;
    pith_hy_rmsnorm(m->xb + (size_t)s * dim, m->mtp->u + (size_t)s * dim, j->norm, dim, m->base.hp.norm_eps);
}

static int draft_buffers(q35 *m, int n, pith_err *err) {
    q35_mtp *t = m->mtp;
    if (n <= t->draft_cap) return 0;
    size_t N = (size_t)n, dim = (size_t)m->base.hp.dim, kv = (size_t)m->kv_dim, half = (size_t)m->n_rot / 2 + 1;
    float **fs[] = {&t->dk, &t->dv, &t->hid, &t->cos, &t->sin, &t->logits};
    size_t sizes[] = {N * MTP_MAX_STEPS * kv, N * MTP_MAX_STEPS * kv, N * dim, N * half, N * half,
                      N * (size_t)m->base.hp.n_vocab};
    bool ok = true;
    for (int i = 0; i < 6; i++) {
        free(*fs[i]);
        ok &= (*fs[i] = malloc(sizes[i] * sizeof(float))) != NULL;
    }
    free(t->tok);
    free(t->pos);
    t->tok = malloc(N * sizeof *t->tok);
    t->pos = malloc(N * sizeof *t->pos);
    t->draft_cap = ok && t->tok && t->pos ? n : 0;
    return t->draft_cap ? 0 : pith_errf(err, "out of memory for MTP drafts of %d sequences", n);
}

/* The batch as mtp_draft takes it (model.h): one token per sequence at a position p >= 1 whose blocks
 * 0..(p - 1) / block_size are in the FULL group's table, a state slot in the RECURRENT group's. */
static int draft_check(q35 *m, const pith_batch *b, pith_err *err) {
    const pith_kv_cache *c = &m->mem.groups[0], *r = &m->mem.groups[1];
    if (!c->k || !r->state) return pith_errf(err, "mtp_draft: no memory allocated");
    if (b->n_tokens < 1 || b->n_tokens != b->n_seqs || b->n_tokens > m->cap)
        return pith_errf(err, "mtp_draft: %d tokens for %d sequences (one each, at most %d)", b->n_tokens, b->n_seqs, m->cap);
    const pith_batch_mem *bm = &b->mem[0];
    for (int s = 0; s < b->n_seqs; s++) {
        int p = b->positions[s];
        if (b->seq[s] != s || b->tokens[s] < 0 || b->tokens[s] >= m->base.hp.n_vocab || p < 1)
            return pith_errf(err, "mtp_draft: token %d is not a sequence's next token at a position >= 1", s);
        if (!bm->block_tables || (p - 1) / c->block_size >= bm->max_blocks)
            return pith_errf(err, "mtp_draft: sequence %d's block table does not reach position %d", s, p - 1);
        for (int k = 0; k <= (p - 1) / c->block_size; k++) {
            int32_t blk = bm->block_tables[(size_t)s * bm->max_blocks + k];
            if (blk < 0 || blk >= c->n_blocks) return pith_errf(err, "mtp_draft: sequence %d: block %d out of range", s, (int)blk);
        }
        int32_t slot = b->mem[1].state_slots ? b->mem[1].state_slots[s] : -1;
        if (slot < 0 || slot >= r->n_slots) return pith_errf(err, "mtp_draft: sequence %d: state slot %d out of range", s, (int)slot);
    }
    return 0;
}

int q35_mtp_draft(pith_model *base, const pith_batch *b, int n_steps, int32_t *draft, float *logits, pith_err *err) {
    q35 *m = base->impl;
    q35_mtp *t = m->mtp;
    const pith_hparams *hp = &base->hp;
    int n = b->n_tokens, dim = hp->dim, V = hp->n_vocab;
    if (!t) return pith_errf(err, "this model was not loaded with an MTP head");
    if (n_steps < 1 || n_steps > MTP_MAX_STEPS) return pith_errf(err, "mtp_draft: %d steps (1..%d)", n_steps, MTP_MAX_STEPS);
    if (draft_check(m, b, err) || draft_buffers(m, n, err)) return -1;
    for (int s = 0; s < n; s++) {
        t->tok[s] = b->tokens[s];
        t->pos[s] = b->positions[s];
        memcpy(t->hid + (size_t)s * dim, slot_tail(m, b->mem[1].state_slots[s]), (size_t)dim * sizeof(float));
    }
    const q35_layer *L = &t->layer;
    job j = {.m = m, .b = b};
    pith_acts a;
    for (t->step = 0; t->step < n_steps; t->step++) {
        pith_hy_run(&m->cpu, &j, draft_input_row, n, 4.0 * dim);
        if (head_project_input(m, n, err) || head_kv(m, b, n, true, err)) return -1;
        pith_hy_run(&m->cpu, &j, draft_qk_row, n, 4.0 * (m->q_dim + m->kv_dim));
        pith_hy_run(&m->cpu, &j, draft_attention_unit, n * hp->n_heads,
                    4.0 * hp->head_dim * (t->pos[0] + t->step));
        pith_acts_bind(&m->cpu, &a, m->att, n, m->q_dim, m->q_dim);
        if (pith_cpu_matmul(&m->cpu, &L->wo, &a, t->u, dim, true, err)) return -1;
        j.norm = L->post_norm;
        pith_hy_run(&m->cpu, &j, draft_post_norm_row, n, dim);
        pith_acts_bind(&m->cpu, &a, m->xb, n, dim, dim);
        const pith_matmul_out gate_up[] = {{&L->gate, m->hb, hp->ffn_dim, false}, {&L->up, m->hb2, hp->ffn_dim, false}};
        if (pith_cpu_matmul_many(&m->cpu, &a, gate_up, 2, err)) return -1;
        pith_hy_run(&m->cpu, &j, q35_swiglu_row, n, 8.0 * hp->ffn_dim);
        pith_acts_bind(&m->cpu, &a, m->hb, n, hp->ffn_dim, hp->ffn_dim);
        if (pith_cpu_matmul(&m->cpu, &L->down, &a, t->u, dim, true, err)) return -1;
        /* g = shared_head_norm(u): the next step's hidden state and the logits' input */
        for (int s = 0; s < n; s++)
            pith_hy_rmsnorm(t->hid + (size_t)s * dim, t->u + (size_t)s * dim, t->out_norm, dim, hp->norm_eps);
        pith_acts_bind(&m->cpu, &a, t->hid, n, dim, dim);
        if (pith_cpu_matmul(&m->cpu, &m->output, &a, t->logits, V, false, err)) return -1;
        for (int s = 0; s < n; s++) {
            const float *row = t->logits + (size_t)s * V;
            t->tok[s] = pith_row_argmax(row, V);
            draft[s * n_steps + t->step] = t->tok[s];
            if (logits) memcpy(logits + ((size_t)s * n_steps + t->step) * V, row, (size_t)V * sizeof(float));
        }
    }
    return 0;
}
