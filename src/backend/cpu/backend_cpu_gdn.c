/* Qwen3.5's ops on the CPU (backend.h, "Qwen3.5"): the Gated DeltaNet mixer, its gated norm, gated
 * attention's Q/K/V and output gate, and the multi-token-prediction head's input, memory, draft
 * attention and greedy logits. The arithmetic is the recurrent kernels' (recurrent.h) and the forward
 * pass's own, in the order model/qwen35.c ran it before the backend existed, with the same pool jobs:
 *   - the mixer: units of (sequence, block of GDN_CHANNELS convolution channels) scan the sequence's run
 *     through pith_conv1d, the gates go row by row, then units of (sequence, value head) scan the delta
 *     rule (pith_gdn_recurrent) with a thread's scratch. Runs are cut at the checkpointed tokens and
 *     their state copied there; both scans go token by token, so the pieces give the same bits;
 *   - the draft: a row job for Q/K (RoPE at the draft position) and one unit per (sequence, query head)
 *     for its attention, an online softmax over the pool's positions, then the draft positions'.
 *
 * The recurrent form of the delta rule serves every run, a prefill chunk too: its result is then the
 * same bits however the scheduler cuts a prompt into chunks or batches it with others (the chunked WY
 * form sums in another order, and one flipped rounding changes greedy tokens of a quantized model), and
 * on AVX2 machines the recurrent kernel is also the faster of the two today (test_recurrent checks both
 * against the float64 definition; a blocked SIMD chunked kernel would change this). The scratch is
 * sized for either (pith_gdn_scratch_floats). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/batch_check.h"
#include "backend/cpu/backend_cpu.h"
#include "backend/cpu/kv_rows.h"
#include "backend/cpu/quants.h"
#include "backend/cpu/recurrent.h"
#include "util/rows.h"

#define GDN_CHANNELS 256

static float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

int pith_cpu_be_gdn_shape(pith_backend *be, int dk, int dv, pith_err *err) {
    pith_cpu_be *c = pith_cpu_be_of(be);
    if (c->gdn_scratch_floats > 0) return pith_errf(err, "the DeltaNet shape is set once");
    if (dk < 1 || dv < 1) return pith_errf(err, "DeltaNet heads of %d and %d", dk, dv);
    c->gdn_scratch_floats = pith_gdn_scratch_floats(dk, dv);
    /* reserve makes it; after a reserve, now (as a buffer made then) */
    if (c->cap > 0 && !(c->gdn_scratch = malloc((size_t)c->cpu.n_threads * c->gdn_scratch_floats * sizeof(float))))
        return pith_errf(err, "out of memory for the DeltaNet scan's scratch");
    return 0;
}

static void draft_free(pith_cpu_be *c) {
    free(c->draft_k);
    free(c->draft_v);
    free(c->draft_logits);
    free(c->draft_tok);
    c->draft_k = c->draft_v = c->draft_logits = NULL;
    c->draft_tok = NULL;
    c->draft_cap = c->draft_vocab = 0;
}

void pith_cpu_be_qwen35_free(pith_cpu_be *c) {
    free(c->gdn_scratch);
    c->gdn_scratch = NULL;
    draft_free(c);
}

/* ---- the Gated DeltaNet mixer ---- */

static float *slot_state(const pith_cpu_be *c, const pith_be_gdn_args *a, int slot) {
    return pith_cpu_be_state(c, a->group, slot, a->state_offset);
}

/* Unit u: sequence u / blocks, channels of block u % blocks: the convolution (with SiLU) over the
 * sequence's run, in place. */
static void conv_unit(row_job *j, int u, int ith) {
    (void)ith;
    const pith_be_gdn_args *a = j->a;
    int C = a->qkv->cols, blocks = (C + GDN_CHANNELS - 1) / GDN_CHANNELS;
    int c0 = (u % blocks) * GDN_CHANNELS, c1 = c0 + GDN_CHANNELS < C ? c0 + GDN_CHANNELS : C;
    const pith_cpu_be_conv cv = {a->group, a->state_offset, row_of(a->qkv, 0), (size_t)C, C, a->kernel,
                                 a->conv_w->vec, NULL, true, j->c->cpu.k};
    pith_cpu_be_conv_run(j->c, &cv, u / blocks, c0, c1);
}

static void gates_row(row_job *j, int t, int ith) {
    (void)ith;
    const pith_be_gdn_args *a = j->a;
    float *bb = row_of(a->beta, t), *aa = row_of(a->alpha, t);
    for (int h = 0; h < a->n_v_heads; h++) {
        bb[h] = sigmoidf(bb[h]);
        float x = aa[h] + a->dt_bias->vec[h];
        float sp = x > 20.0f ? x : log1pf(expf(x)); /* softplus, as torch's (threshold 20) */
        aa[h] = a->ssm_a->vec[h] * sp;
    }
}

/* Unit u: sequence u / value heads, head u % value heads. */
static void delta_unit(row_job *j, int u, int ith) {
    const pith_be_gdn_args *a = j->a;
    const pith_cpu_be *c = j->c;
    const pith_batch *b = c->step;
    int nv = a->n_v_heads, s = u / nv, h = u % nv, g = a->group;
    int t0 = c->seq_start[s], n = c->seq_end[s] - t0;
    size_t conv_floats = (size_t)(a->kernel - 1) * a->qkv->cols, per_head = (size_t)a->dk * a->dv;
    float *S = slot_state(c, a, b->mem[g].state_slots[s]) + conv_floats;
    if (b->positions[t0] == 0) memset(S + (size_t)h * per_head, 0, per_head * sizeof(float));
    const float *qkv = row_of(a->qkv, t0);
    size_t key_dim = (size_t)a->n_k_heads * a->dk;
    pith_gdn_args ga = {
        .n_tokens = n, .n_heads = nv, .n_qk_heads = a->n_k_heads, .qk_tiled = a->qk_tiled, .dk = a->dk, .dv = a->dv,
        .q = qkv, .k = qkv + key_dim, .ld_qk = (size_t)a->qkv->cols, .v = qkv + 2 * key_dim, .ld_v = (size_t)a->qkv->cols,
        .g = row_of(a->alpha, t0), .beta = row_of(a->beta, t0), .ld_gb = (size_t)nv, .eps = 1e-6f, .state = S,
        .out = row_of(a->out, t0), .ld_out = (size_t)a->out->cols, .portable = c->portable,
        .no_avx512 = strncmp(c->cpu.k->name, "avx512", 6) != 0,
    };
    float *scratch = c->gdn_scratch + (size_t)ith * c->gdn_scratch_floats;
    const int32_t *ck = b->mem[g].checkpoints ? b->mem[g].checkpoints + t0 : NULL;
    if (!ck) {
        pith_gdn_recurrent(&ga, h, scratch);
        return;
    }
    for (int done = 0, end; done < n; done = end) {
        end = pith_cpu_be_piece_end(ck, done, n);
        pith_gdn_args p = ga;
        p.n_tokens = end - done;
        p.q = ga.q + (size_t)done * ga.ld_qk, p.k = ga.k + (size_t)done * ga.ld_qk, p.v = ga.v + (size_t)done * ga.ld_v;
        p.g = ga.g + (size_t)done * ga.ld_gb, p.beta = ga.beta + (size_t)done * ga.ld_gb;
        p.out = ga.out + (size_t)done * ga.ld_out;
        pith_gdn_recurrent(&p, h, scratch);
        if (ck[end - 1] >= 0)
            memcpy(slot_state(c, a, ck[end - 1]) + conv_floats + (size_t)h * per_head, S + (size_t)h * per_head,
                   per_head * sizeof(float));
    }
}

void pith_cpu_be_gdn(pith_backend *be, const pith_be_gdn_args *a, int n) {
    pith_cpu_be *c = pith_cpu_be_of(be);
    int n_seqs = c->step->n_seqs, blocks = (a->qkv->cols + GDN_CHANNELS - 1) / GDN_CHANNELS;
    pith_cpu_be_rows(c, n_seqs * blocks, conv_unit, a, (double)n / n_seqs * GDN_CHANNELS * (a->kernel + 4));
    pith_cpu_be_rows(c, n, gates_row, a, 32.0 * a->n_v_heads);
    pith_cpu_be_rows(c, n_seqs * a->n_v_heads, delta_unit, a, (double)n / n_seqs * 4.0 * a->dk * a->dv);
}

static void gated_norm_row(row_job *j, int t, int ith) {
    (void)ith;
    const pith_be_gated_norm_args *a = j->a;
    int hv = a->w->cols;
    float *o = row_of(a->x, t);
    const float *z = row_of(a->z, t);
    for (int h = 0; h < a->x->cols / hv; h++) pith_gated_rmsnorm(o + h * hv, z + h * hv, a->w->vec, hv, a->eps);
}

void pith_cpu_be_gated_norm(pith_backend *be, const pith_be_gated_norm_args *a, int n) {
    pith_cpu_be_rows(pith_cpu_be_of(be), n, gated_norm_row, a, 8.0 * a->x->cols);
}

/* ---- gated attention ---- */

/* n_heads heads of head_dim: x[h] = rope(rmsnorm(src[h * src_stride]) * norm); x may be src; norm NULL:
 * no norm (the plain MTP draft's heads without QK norms). */
static void norm_rope(const pith_cpu_be *c, float *x, const float *src, size_t src_stride, int n_heads,
                      const pith_weight *norm, float eps, const float *cs, int half, pith_rope_style style) {
    int hd = c->shape.head_dim;
    for (int h = 0; h < n_heads; h++) {
        if (norm) pith_cpu_be_rmsnorm(x + h * hd, src + (size_t)h * src_stride, norm->vec, hd, eps);
        else if (x + h * hd != src + (size_t)h * src_stride)
            memmove(x + h * hd, src + (size_t)h * src_stride, (size_t)hd * sizeof(float));
        if (cs) pith_cpu_be_rope(x + h * hd, cs, cs + half, half, style);
    }
}

static void gated_qkv_row(row_job *j, int t, int ith) {
    (void)ith;
    const pith_be_gated_qkv_args *a = j->a;
    const pith_cpu_be *c = j->c;
    int hd = c->shape.head_dim, half = a->rope_cs ? a->rope_cs->cols / 2 : 0;
    const float *cs = a->rope_cs ? row_of(a->rope_cs, t) : NULL;
    float *k = row_of(a->k, t);
    if (a->q)
        norm_rope(c, row_of(a->q, t), row_of(a->qg, t), 2 * (size_t)hd, c->shape.n_heads, a->q_norm, a->eps, cs, half,
                  a->rope_style);
    norm_rope(c, k, k, (size_t)hd, c->shape.n_kv_heads, a->k_norm, a->eps, cs, half, a->rope_style);
    pith_cpu_be_store_kv(c, a->group, a->layer_index, t, k, row_of(a->v, t));
}

void pith_cpu_be_gated_qkv(pith_backend *be, const pith_be_gated_qkv_args *a, int n) {
    double width = a->q ? 4.0 * (a->q->cols + 2 * a->k->cols) : 8.0 * a->k->cols;
    pith_cpu_be_rows(pith_cpu_be_of(be), n, gated_qkv_row, a, width);
}

static void attn_gate_row(row_job *j, int t, int ith) {
    (void)ith;
    const pith_be_attn_gate_args *a = j->a;
    int hd = j->c->shape.head_dim;
    const float *qg = row_of(a->qg, t);
    float *o = row_of(a->att, t);
    for (int h = 0; h < j->c->shape.n_heads; h++)
        for (int i = 0; i < hd; i++) o[h * hd + i] *= sigmoidf(qg[(size_t)h * 2 * hd + hd + i]);
}

void pith_cpu_be_attn_gate(pith_backend *be, const pith_be_attn_gate_args *a, int n) {
    pith_cpu_be_rows(pith_cpu_be_of(be), n, attn_gate_row, a, 8.0 * a->att->cols);
}

/* ---- the MTP head ---- */

static float *slot_tail(const pith_cpu_be *c, int group, size_t tail_offset, int slot) {
    const pith_kv_cache *kv = &c->kv.groups[group];
    return (float *)(kv->state + (size_t)slot * kv->state_bytes) + tail_offset;
}

/* Draft memory for n sequences of a vocabulary of n_vocab (grown here: set_draft may fail). */
static int draft_memory(pith_cpu_be *c, int n, int n_vocab, pith_err *err) {
    if (n <= c->draft_cap && n_vocab == c->draft_vocab) return 0;
    size_t N = (size_t)n, kv = (size_t)c->shape.n_kv_heads * c->shape.head_dim;
    draft_free(c);
    c->draft_k = malloc(N * PITH_BE_MTP_MAX_STEPS * kv * sizeof(float));
    c->draft_v = malloc(N * PITH_BE_MTP_MAX_STEPS * kv * sizeof(float));
    c->draft_logits = malloc(N * (size_t)n_vocab * sizeof(float));
    c->draft_tok = malloc(N * sizeof(int32_t));
    if (!c->draft_k || !c->draft_v || !c->draft_logits || !c->draft_tok) {
        draft_free(c);
        return pith_errf(err, "out of memory for MTP drafts of %d sequences", n);
    }
    c->draft_cap = n;
    c->draft_vocab = n_vocab;
    return 0;
}

/* The batch as mtp_draft takes it (batch_check.h: pith_draft_check). */
int pith_cpu_be_set_draft(pith_backend *be, const pith_batch *b, int n_vocab, int n_steps, int32_t *draft,
                          float *logits, pith_err *err) {
    pith_cpu_be *c = pith_cpu_be_of(be);
    if (!pith_kv_host_allocated(&c->kv) || !c->has_shape) return pith_errf(err, "mtp_draft: no memory allocated");
    if (c->shape.head_dim > PITH_BE_MTP_MAX_HEAD_DIM)
        return pith_errf(err, "MTP head: head width %d over %d", c->shape.head_dim, PITH_BE_MTP_MAX_HEAD_DIM);
    if (pith_draft_check(b, &c->kv, n_vocab, n_steps, c->cap, err)) return -1;
    if (draft_memory(c, b->n_seqs, n_vocab, err)) return -1;
    for (int s = 0; s <= b->n_seqs; s++) c->seq_start[s] = s;
    c->step = b;
    c->draft_steps = n_steps;
    c->draft_out = draft;
    c->draft_logits_out = logits;
    return 0;
}

static void mtp_input_row(row_job *j, int t, int ith) {
    (void)ith;
    const pith_be_mtp_input_args *a = j->a;
    const pith_cpu_be *c = j->c;
    const pith_batch *b = c->step;
    const int32_t *slots = b->mem[a->group].state_slots;
    int dim = a->hidden->cols;
    int32_t token = a->step > 0 ? c->draft_tok[t] : b->tokens[t];
    const float *prev = NULL; /* none at position 0: zeros (a pair the head never reads) */
    if (a->step > 0) prev = row_of(a->hidden, t);
    else if (a->step == 0) prev = slot_tail(c, a->group, a->tail_offset, slots[t]);
    else if (t > c->seq_start[b->seq[t]]) prev = row_of(a->hidden, t - 1);
    else if (b->positions[t] > 0) prev = slot_tail(c, a->group, a->tail_offset, slots[b->seq[t]]);
    const cpu_weight *e = a->embd->impl;
    float *in = row_of(a->out, t);
    pith_dequantize_row(e->table->type, (const uint8_t *)e->table->data + (size_t)token * e->m.row_bytes, in, dim);
    pith_cpu_be_rmsnorm(in, in, a->enorm->vec, dim, a->eps);
    if (prev) pith_cpu_be_rmsnorm(in + dim, prev, a->hnorm->vec, dim, a->eps);
    else memset(in + dim, 0, (size_t)dim * sizeof(float));
}

void pith_cpu_be_mtp_input(pith_backend *be, const pith_be_mtp_input_args *a, int n) {
    pith_cpu_be_rows(pith_cpu_be_of(be), n, mtp_input_row, a, 4.0 * a->hidden->cols);
}

void pith_cpu_be_mtp_save(pith_backend *be, const pith_be_mtp_save_args *a) {
    const pith_cpu_be *c = pith_cpu_be_of(be);
    const pith_batch *b = c->step;
    size_t row = (size_t)a->hidden->cols * sizeof(float);
    for (int s = 0; s < b->n_seqs; s++)
        memcpy(slot_tail(c, a->group, a->tail_offset, b->mem[a->group].state_slots[s]),
               row_of(a->hidden, c->seq_end[s] - 1), row);
    const int32_t *ck = b->mem[a->group].checkpoints;
    for (int t = 0; ck && t < b->n_tokens; t++)
        if (ck[t] >= 0) memcpy(slot_tail(c, a->group, a->tail_offset, ck[t]), row_of(a->hidden, t), row);
}

/* The step's query and key at the draft position (RoPE angles in double, as the step's tables); K and
 * V kept as the draft position's. */
static void mtp_qk_row(row_job *j, int s, int ith) {
    (void)ith;
    const pith_be_mtp_attn_args *a = j->a;
    const pith_cpu_be *c = j->c;
    int hd = c->shape.head_dim, half = a->rope->half, kv_dim = a->k->cols;
    float cs[PITH_BE_MTP_MAX_HEAD_DIM];
    double pos = c->step->positions[s] + a->step, ms = a->rope->mscale;
    for (int i = 0; i < half; i++) {
        double angle = pos * a->rope->inv_freq[i];
        cs[i] = (float)(cos(angle) * ms);
        cs[half + i] = (float)(sin(angle) * ms);
    }
    float *k = row_of(a->k, s);
    norm_rope(c, row_of(a->q, s), row_of(a->qg, s), (a->plain ? 1 : 2) * (size_t)hd, c->shape.n_heads, a->q_norm,
              a->eps, cs, half, a->rope->style);
    norm_rope(c, k, k, (size_t)hd, c->shape.n_kv_heads, a->k_norm, a->eps, cs, half, a->rope->style);
    size_t at = ((size_t)s * PITH_BE_MTP_MAX_STEPS + (size_t)a->step) * kv_dim;
    memcpy(c->draft_k + at, k, (size_t)kv_dim * sizeof(float));
    memcpy(c->draft_v + at, row_of(a->v, s), (size_t)kv_dim * sizeof(float));
}

/* One query head of one sequence: softmax attention over the head's K/V of positions 1..p-1 (the KV
 * group, through the block table) and of the draft positions so far, times sigmoid(gate). */
static void mtp_attention_unit(row_job *j, int u, int ith) {
    (void)ith;
    const pith_be_mtp_attn_args *a = j->a;
    const pith_cpu_be *c = j->c;
    const pith_batch *b = c->step;
    int hd = c->shape.head_dim, nh = c->shape.n_heads, s = u / nh, h = u % nh, kvh = h / (nh / c->shape.n_kv_heads);
    int kv_dim = a->k->cols;
    const float *q = row_of(a->q, s) + (size_t)h * hd;
    float *o = row_of(a->out, s) + (size_t)h * hd;
    const pith_kv_cache *kv = &c->kv.groups[a->group];
    const pith_batch_mem *bm = &b->mem[a->group];
    const float scale = 1.0f / sqrtf((float)hd);
    float krow[PITH_BE_MTP_MAX_HEAD_DIM], vrow[PITH_BE_MTP_MAX_HEAD_DIM], mx = -INFINITY, den = 0;
    memset(o, 0, (size_t)hd * sizeof(float));
    /* positions 1..p0-1 from the pool, then the draft positions p0..p0+step from the draft's own K/V */
    for (int p = 1, p0 = b->positions[s]; p <= p0 + a->step; p++) {
        const float *k = krow, *v = vrow;
        if (p < p0) {
            int block = bm->block_tables[(size_t)s * bm->max_blocks + p / kv->block_size];
            size_t off = pith_kv_k_offset(kv, a->layer_index, block) + ((size_t)kvh * kv->block_size + p % kv->block_size) * hd;
            pith_kv_load_f32(c->cpu.k, kv->type, kv->k, off, krow, (size_t)hd);
            pith_kv_load_f32(c->cpu.k, kv->type, kv->v, off, vrow, (size_t)hd);
        } else {
            size_t at = ((size_t)s * PITH_BE_MTP_MAX_STEPS + (size_t)(p - p0)) * kv_dim + (size_t)kvh * hd;
            k = c->draft_k + at, v = c->draft_v + at;
        }
        float d = 0;
        for (int e = 0; e < hd; e++) d += q[e] * k[e];
        d *= scale;
        float nm = d > mx ? d : mx, r = expf(mx - nm), w = expf(d - nm);
        for (int e = 0; e < hd; e++) o[e] = o[e] * r + w * v[e];
        den = den * r + w;
        mx = nm;
    }
    if (a->plain) {
        for (int e = 0; e < hd; e++) o[e] /= den;
        return;
    }
    const float *gate = row_of(a->qg, s) + (size_t)h * 2 * hd + hd;
    for (int e = 0; e < hd; e++) o[e] = o[e] / den * sigmoidf(gate[e]);
}

void pith_cpu_be_mtp_attention(pith_backend *be, const pith_be_mtp_attn_args *a, int n) {
    pith_cpu_be *c = pith_cpu_be_of(be);
    int hd = c->shape.head_dim;
    pith_cpu_be_rows(c, n, mtp_qk_row, a, 4.0 * (a->q->cols + a->k->cols));
    pith_cpu_be_rows(c, n * c->shape.n_heads, mtp_attention_unit, a, 4.0 * hd * (c->step->positions[0] + a->step));
}

int pith_cpu_be_mtp_logits(pith_backend *be, const pith_be_mtp_logits_args *a, int n, pith_err *err) {
    pith_cpu_be *c = pith_cpu_be_of(be);
    int V = c->draft_vocab, steps = c->draft_steps;
    if (a->best) V = a->output->rows; /* tensor parallelism: this rank's share of the vocabulary */
    const cpu_weight *w = a->output->impl;
    if (a->output->cols != a->x->cols || a->output->rows != V || V > c->draft_vocab)
        return pith_errf(err, "mtp_logits: a [%d x %d] weight does not take rows of %d into %d logits", a->output->rows,
                         a->output->cols, a->x->cols, V);
    pith_acts acts;
    pith_acts_bind(&c->cpu, &acts, a->x->host, n, a->x->cols, a->x->cols);
    if (pith_cpu_matmul(&c->cpu, &w->m, &acts, c->draft_logits, V, false, err)) return -1;
    for (int s = 0; s < n; s++) {
        const float *row = c->draft_logits + (size_t)s * V;
        c->draft_tok[s] = a->vocab0 + pith_row_argmax(row, V);
        c->draft_out[s * steps + a->step] = c->draft_tok[s];
        if (a->best) a->best[s] = row[c->draft_tok[s] - a->vocab0];
        if (c->draft_logits_out)
            memcpy(c->draft_logits_out + ((size_t)s * steps + a->step) * V, row, (size_t)V * sizeof(float));
    }
    return 0;
}

void pith_cpu_be_mtp_pick(pith_backend *be, int step, const int32_t *tokens, int n) {
    pith_cpu_be *c = pith_cpu_be_of(be);
    for (int s = 0; s < n; s++) c->draft_tok[s] = c->draft_out[s * c->draft_steps + step] = tokens[s];
}
