/* DeepSeek's multi-head latent attention on the CPU (backend.h: pith_be_mla_args), in the
 * weight-absorbed form: per token the cache holds one row of [c_kv | k_pe] (rank + rope elements per
 * layer) instead of per-head K and V, and attention is MQA over that one "head" with the values its own
 * first rank elements.
 *
 * Three phases: a row job (the latent's norm, RoPE of k_pe and of each head's q_pe, the store, q_pe into
 * the absorbed query); per head a product W_UK_h^T q_nope_h into the absorbed query (the matmul engine,
 * strided over the heads of one row); the paged attention of attention.h with the V cache pointing at the
 * K cache; per head a product W_UV_h lat_h into the output. Every phase computes a row as it would alone,
 * so a token's output does not depend on the rest of the batch.
 *
 * The expanded form (a sequence with at least expand_min tokens in the step: a long prefill): the
 * sequence's latents, PITH_BE_MLA_CHUNK positions at a time from position 0, go up through kv_b into per
 * head [k_nope | v] (one product for all heads), and each (query, head) pair of the run updates its
 * online softmax over the chunk's positions it sees. Its cost per query and position is heads x
 * (nope + rope + v) against the absorbed form's heads x (2 rank + rope), plus the expansion, shared by the
 * run's queries; the chunks are fixed from position 0, so a query's bits do not depend on the batch
 * beyond the choice of form. */
#include <math.h>
#include <string.h>

#include "backend/cpu/backend_cpu.h"
#include "backend/cpu/kv_rows.h"

static void mla_row(row_job *j, int t, int ith) {
    (void)ith;
    const pith_be_mla_args *a = j->a;
    pith_cpu_be *c = j->c;
    const int R = a->rank, P = a->rope, D = R + P, hd = a->nope + a->rope;
    float *kv = row_of(a->kv, t), *q = row_of(a->q, t), *qa = row_of(a->qa, t);
    pith_cpu_be_rmsnorm(kv, kv, a->kv_norm->vec, R, a->eps);
    int half = a->rope_cs ? a->rope_cs->cols / 2 : 0;
    const float *cs = a->rope_cs ? row_of(a->rope_cs, t) : NULL, *sn = cs ? cs + half : NULL;
    if (cs) pith_cpu_be_rope(kv + R, cs, sn, half, a->rope_style);
    for (int h = 0; h < a->n_heads; h++) {
        float *qp = q + (size_t)h * hd + a->nope;
        if (cs) pith_cpu_be_rope(qp, cs, sn, half, a->rope_style);
        memcpy(qa + (size_t)h * D + R, qp, (size_t)P * sizeof *qp);
    }
    /* one KV head of D per slot: the slot's row of its block */
    const pith_kv_cache *cache = &c->kv.groups[a->group];
    size_t bs = (size_t)cache->block_size, slot = (size_t)c->step->mem[a->group].slots[t];
    size_t off = pith_kv_k_offset(cache, a->layer_index, (int)(slot / bs)) + (slot % bs) * (size_t)D;
    pith_kv_store_f32(c->cpu.k, cache->type, kv, cache->k, off, (size_t)D);
}

/* y_h = W_h x_h for every head: x_h the k elements at x + h * xs of each row (rows ld_x apart), y_h at
 * y + h * ys (rows ld_y apart). */
static int per_head(pith_cpu_be *c, const pith_weight *const *w, int n_heads, const float *x, int k, size_t xs,
                    size_t ld_x, float *y, size_t ys, size_t ld_y, int n, pith_err *err) {
    for (int h = 0; h < n_heads; h++) {
        const cpu_weight *cw = w[h]->impl;
        pith_acts acts;
        pith_acts_bind(&c->cpu, &acts, x + (size_t)h * xs, n, k, ld_x);
        if (pith_cpu_matmul(&c->cpu, &cw->m, &acts, y + (size_t)h * ys, ld_y, false, err)) return -1;
    }
    return 0;
}

/* ---- the expanded form ---- */

typedef struct exp_args {
    const pith_be_mla_args *a;
    int t0, j0, j1; /* the run's first token; the chunk's positions [j0, j1) */
    float scale;
} exp_args;

/* Query t0 + r / H, head r % H: the chunk's positions it sees into its running max, sum and output. */
static void exp_row(row_job *j, int r, int ith) {
    (void)ith;
    const exp_args *e = j->a;
    const pith_be_mla_args *a = e->a;
    const int H = a->n_heads, N = a->nope, P = a->rope, V = a->v, R = a->rank, W = N + V;
    const int t = e->t0 + r / H, h = r % H;
    const int pos = j->c->step->positions[t];
    const float *q = row_of(a->q, t) + (size_t)h * (N + P);
    float *o = row_of(a->out, t) + (size_t)h * V, *ms = row_of(a->ms, t) + 2 * h;
    if (e->j0 == 0) {
        memset(o, 0, (size_t)V * sizeof *o);
        ms[0] = -INFINITY, ms[1] = 0;
    }
    int end = pos + 1 < e->j1 ? pos + 1 : e->j1;
    for (int jj = e->j0; jj < end; jj++) {
        const float *kv = row_of(a->kvx, jj - e->j0) + (size_t)h * W, *pe = row_of(a->g, jj - e->j0) + R;
        float sc = 0;
        for (int i = 0; i < N; i++) sc += q[i] * kv[i];
        for (int i = 0; i < P; i++) sc += q[N + i] * pe[i];
        sc *= e->scale;
        if (sc > ms[0]) { /* a new max: what was summed so far shrinks by exp(old - new) */
            float f = expf(ms[0] - sc);
            for (int i = 0; i < V; i++) o[i] *= f;
            ms[1] *= f;
            ms[0] = sc;
        }
        float w = expf(sc - ms[0]);
        ms[1] += w;
        for (int i = 0; i < V; i++) o[i] += w * kv[N + i];
    }
}

static void exp_finish(row_job *j, int r, int ith) {
    (void)ith;
    const exp_args *e = j->a;
    const pith_be_mla_args *a = e->a;
    const int H = a->n_heads, V = a->v, t = e->t0 + r / H, h = r % H;
    float *o = row_of(a->out, t) + (size_t)h * V, inv = 1.0f / row_of(a->ms, t)[2 * h + 1];
    for (int i = 0; i < V; i++) o[i] *= inv;
}

/* Sequence run [t0, t0 + n_run) in the expanded form. */
static int mla_expanded(pith_cpu_be *c, const pith_be_mla_args *a, int t0, int n_run, pith_err *err) {
    const pith_batch *b = c->step;
    const pith_kv_cache *kv = &c->kv.groups[a->group];
    const int D = a->rank + a->rope, bs = kv->block_size;
    const int32_t *bt = b->mem[a->group].block_tables + (size_t)b->seq[t0] * b->mem[a->group].max_blocks;
    int L = 0;
    for (int t = t0; t < t0 + n_run; t++) L = b->positions[t] + 1 > L ? b->positions[t] + 1 : L;
    exp_args e = {.a = a, .t0 = t0, .scale = c->shape.scale};
    const cpu_weight *w = a->kv_b->impl;
    for (e.j0 = 0; e.j0 < L; e.j0 += PITH_BE_MLA_CHUNK) {
        e.j1 = e.j0 + PITH_BE_MLA_CHUNK < L ? e.j0 + PITH_BE_MLA_CHUNK : L;
        for (int jj = e.j0; jj < e.j1; jj++) {
            size_t off = pith_kv_k_offset(kv, a->layer_index, bt[jj / bs]) + (size_t)(jj % bs) * D;
            pith_kv_load_f32(c->cpu.k, kv->type, kv->k, off, row_of(a->g, jj - e.j0), (size_t)D);
        }
        pith_acts acts;
        pith_acts_bind(&c->cpu, &acts, a->g->host, e.j1 - e.j0, a->rank, (size_t)a->g->cols);
        if (pith_cpu_matmul(&c->cpu, &w->m, &acts, a->kvx->host, (size_t)a->kvx->cols, false, err)) return -1;
        pith_cpu_be_rows(c, n_run * a->n_heads, exp_row, &e,
                         (double)(e.j1 - e.j0) * (a->nope + a->rope + a->v));
    }
    pith_cpu_be_rows(c, n_run * a->n_heads, exp_finish, &e, a->v);
    return 0;
}

/* Tokens [t0, t1) (whole sequence runs) in the absorbed form. */
static int mla_absorbed(pith_cpu_be *c, const pith_be_mla_args *a, int t0, int t1, pith_err *err) {
    const int H = a->n_heads, R = a->rank, D = a->rank + a->rope, hd = a->nope + a->rope, n = t1 - t0;
    size_t ldq = (size_t)a->q->cols, lda = (size_t)a->qa->cols, ldl = (size_t)a->lat->cols, ldo = (size_t)a->out->cols;
    if (per_head(c, a->k_b, H, a->q->host + t0 * ldq, a->nope, (size_t)hd, ldq, a->qa->host + t0 * lda, (size_t)D, lda,
                 n, err))
        return -1;
    const pith_batch *b = c->step;
    const pith_kv_cache *kv = &c->kv.groups[a->group];
    const uint8_t *layer = (const uint8_t *)kv->k + pith_kv_bytes(kv->type, pith_kv_k_offset(kv, a->layer_index, 0));
    pith_attn_args aa = {
        .n_tokens = n, .positions = b->positions + t0, .seq = b->seq + t0,
        .block_tables = b->mem[a->group].block_tables, .max_blocks = b->mem[a->group].max_blocks,
        .block_size = kv->block_size, .window = 0,
        .k_cache = layer, .v_cache = layer, /* the values are the latents: V is K */
        .kv_type = kv->type, .kv_dim = D, .q = a->qa->host + t0 * lda, .q_ld = lda, .out = a->lat->host + t0 * ldl,
        .out_ld = ldl, .sinks = NULL,
    };
    pith_attention(&c->cpu, &c->attn, &aa);
    return per_head(c, a->v_b, H, a->lat->host + t0 * ldl, R, (size_t)D, ldl, a->out->host + t0 * ldo, (size_t)a->v,
                    ldo, n, err);
}

int pith_cpu_be_mla(pith_backend *be, const pith_be_mla_args *a, int n, pith_err *err) {
    pith_cpu_be *c = pith_cpu_be_of(be);
    const int H = a->n_heads, R = a->rank, D = a->rank + a->rope, hd = a->nope + a->rope;
    if (!c->has_shape || c->shape.head_dim != D || c->shape.n_kv_heads != 1 || c->shape.n_heads != H ||
        a->q->cols != H * hd || a->kv->cols != D || a->qa->cols != H * D || a->lat->cols != H * D ||
        a->out->cols != H * a->v || c->kv.groups[a->group].k_dim != D ||
        (a->kv_b && (a->expand_min < PITH_BE_MLA_CHUNK || !a->g || a->g->cols != D || !a->kvx ||
                     a->kvx->cols != H * (a->nope + a->v) || !a->ms || a->ms->cols != 2 * H ||
                     a->kv_b->rows != H * (a->nope + a->v) || a->kv_b->cols != a->rank)))
        return pith_errf(err, "mla: buffers, cache and attention shape disagree (%d heads of %d + %d)", H, R, a->rope);
    if (n == 0) return 0;
    pith_cpu_be_rows(c, n, mla_row, a, 4.0 * (a->q->cols + 2 * D));
    /* each sequence's run (contiguous: set_step), long ones expanded, the others absorbed together */
    const pith_batch *b = c->step;
    int t0 = 0; /* the first token not yet attended */
    for (int t = 0; t < n;) {
        int s = b->seq[t], end = c->seq_end[s];
        if (end > n) end = n;
        if (a->kv_b && end - t >= a->expand_min) {
            if ((t0 < t && mla_absorbed(c, a, t0, t, err)) || mla_expanded(c, a, t, end - t, err)) return -1;
            t0 = end;
        }
        t = end;
    }
    return t0 < n ? mla_absorbed(c, a, t0, n, err) : 0;
}

/* ---- a draft step of DeepSeek's MTP head (backend.h: pith_be_mtp_mla_args) ----
 * The draft rows live in the draft memory set_draft made (draft_k: one row of rank + rope per sequence
 * and step, the model's attention shape being one KV head of that width); a scalar online softmax per
 * sequence and head, as the other heads' draft attention (backend_cpu_gdn.c: a draft step has one query
 * per sequence), the heads in groups that share each row's load. */

/* Sequence s: the latent normed, k_pe and each q_pe rotated at p + step (angles in double, as the
 * step's tables), the row kept as the draft position's, q_pe into the absorbed query. */
static void mtp_mla_row(row_job *j, int s, int ith) {
    (void)ith;
    const pith_be_mtp_mla_args *m = j->a;
    const pith_be_mla_args *a = m->mla;
    pith_cpu_be *c = j->c;
    const int R = a->rank, P = a->rope, D = R + P, hd = a->nope + a->rope, half = m->rope->half;
    float cs[PITH_BE_MTP_MAX_HEAD_DIM];
    double pos = c->step->positions[s] + m->step, ms = m->rope->mscale;
    for (int i = 0; i < half; i++) {
        double angle = pos * m->rope->inv_freq[i];
        cs[i] = (float)(cos(angle) * ms);
        cs[half + i] = (float)(sin(angle) * ms);
    }
    float *kv = row_of(a->kv, s), *q = row_of(a->q, s), *qa = row_of(a->qa, s);
    pith_cpu_be_rmsnorm(kv, kv, a->kv_norm->vec, R, a->eps);
    pith_cpu_be_rope(kv + R, cs, cs + half, half, m->rope->style);
    for (int h = 0; h < a->n_heads; h++) {
        float *qp = q + (size_t)h * hd + a->nope;
        pith_cpu_be_rope(qp, cs, cs + half, half, m->rope->style);
        memcpy(qa + (size_t)h * D + R, qp, (size_t)P * sizeof *qp);
    }
    memcpy(c->draft_k + ((size_t)s * PITH_BE_MTP_MAX_STEPS + (size_t)m->step) * D, kv, (size_t)D * sizeof *kv);
}

/* Heads per unit of the draft attention: each row of the cache is loaded (and dequantized) once for
 * that many heads. */
enum { MTP_MLA_HEADS = 8 };

/* Sequence u / units, heads MTP_MLA_HEADS x (u % units) on (units = the heads' groups): each absorbed
 * query over positions 1..p-1 of the group's layer and the draft rows p..p+step; the latent outputs
 * (rank each) into lat. */
static void mtp_mla_unit(row_job *j, int u, int ith) {
    (void)ith;
    const pith_be_mtp_mla_args *m = j->a;
    const pith_be_mla_args *a = m->mla;
    const pith_cpu_be *c = j->c;
    const pith_batch *b = c->step;
    const int H = a->n_heads, R = a->rank, D = R + a->rope, units = (H + MTP_MLA_HEADS - 1) / MTP_MLA_HEADS;
    const int s = u / units, h0 = (u % units) * MTP_MLA_HEADS, nh = H - h0 < MTP_MLA_HEADS ? H - h0 : MTP_MLA_HEADS;
    const pith_kv_cache *kv = &c->kv.groups[a->group];
    const pith_batch_mem *bm = &b->mem[a->group];
    const float scale = c->shape.scale;
    float krow[PITH_BE_MTP_MAX_HEAD_DIM], mx[MTP_MLA_HEADS], den[MTP_MLA_HEADS];
    for (int h = 0; h < nh; h++) {
        memset(row_of(a->lat, s) + (size_t)(h0 + h) * D, 0, (size_t)R * sizeof(float));
        mx[h] = -INFINITY, den[h] = 0;
    }
    for (int p = 1, p0 = b->positions[s]; p <= p0 + m->step; p++) {
        const float *k = krow;
        if (p < p0) {
            int block = bm->block_tables[(size_t)s * bm->max_blocks + p / kv->block_size];
            size_t off = pith_kv_k_offset(kv, a->layer_index, block) + (size_t)(p % kv->block_size) * D;
            pith_kv_load_f32(c->cpu.k, kv->type, kv->k, off, krow, (size_t)D);
        } else {
            k = c->draft_k + ((size_t)s * PITH_BE_MTP_MAX_STEPS + (size_t)(p - p0)) * D;
        }
        for (int h = 0; h < nh; h++) {
            const float *q = row_of(a->qa, s) + (size_t)(h0 + h) * D;
            float *o = row_of(a->lat, s) + (size_t)(h0 + h) * D;
            float d = 0;
            for (int e = 0; e < D; e++) d += q[e] * k[e];
            d *= scale;
            float nm = d > mx[h] ? d : mx[h], r = expf(mx[h] - nm), w = expf(d - nm);
            for (int e = 0; e < R; e++) o[e] = o[e] * r + w * k[e];
            den[h] = den[h] * r + w;
            mx[h] = nm;
        }
    }
    for (int h = 0; h < nh; h++) {
        float *o = row_of(a->lat, s) + (size_t)(h0 + h) * D;
        for (int e = 0; e < R; e++) o[e] /= den[h];
    }
}

int pith_cpu_be_mtp_mla(pith_backend *be, const pith_be_mtp_mla_args *m, int n, pith_err *err) {
    pith_cpu_be *c = pith_cpu_be_of(be);
    const pith_be_mla_args *a = m->mla;
    const int H = a->n_heads, R = a->rank, D = a->rank + a->rope, hd = a->nope + a->rope;
    if (!c->has_shape || c->shape.head_dim != D || c->shape.n_kv_heads != 1 || c->shape.n_heads != H ||
        a->q->cols != H * hd || a->kv->cols != D || a->qa->cols != H * D || a->lat->cols != H * D ||
        a->out->cols != H * a->v || c->kv.groups[a->group].k_dim != D || 2 * m->rope->half != a->rope ||
        m->step < 0 || m->step >= c->draft_steps || n > c->draft_cap || !c->draft_k)
        return pith_errf(err, "mtp_mla: buffers, draft, cache and attention shape disagree (%d heads of %d + %d)", H, R,
                         a->rope);
    if (n == 0) return 0;
    size_t ldq = (size_t)a->q->cols, lda = (size_t)a->qa->cols, ldl = (size_t)a->lat->cols, ldo = (size_t)a->out->cols;
    pith_cpu_be_rows(c, n, mtp_mla_row, m, 4.0 * (a->q->cols + 2 * D));
    if (per_head(c, a->k_b, H, a->q->host, a->nope, (size_t)hd, ldq, a->qa->host, (size_t)D, lda, n, err)) return -1;
    int units = (H + MTP_MLA_HEADS - 1) / MTP_MLA_HEADS;
    pith_cpu_be_rows(c, n * units, mtp_mla_unit, m, 4.0 * D * MTP_MLA_HEADS * (c->step->positions[0] + m->step));
    return per_head(c, a->v_b, H, a->lat->host, R, (size_t)D, ldl, a->out->host, (size_t)a->v, ldo, n, err);
}
