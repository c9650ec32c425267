/* The mixture-of-experts feed-forward block: routing, grouping by expert, grouped products, combine
 * (see moe.h). */
#include "backend/cpu/moe.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/grouped.h"

int pith_moe_config_check(const pith_moe_config *c, const char *path, pith_err *err) {
    if (c->n_experts < 1 || c->n_experts > PITH_GROUPED_MAX_GROUPS)
        return pith_errf(err, "%s: expert count %d, expected 1..%d", path, c->n_experts, PITH_GROUPED_MAX_GROUPS);
    if (c->top_k < 1 || c->top_k > c->n_experts)
        return pith_errf(err, "%s: %d experts used per token, expected 1..%d", path, c->top_k, c->n_experts);
    if (c->ffn < 1 || c->ffn > (1 << 20) || c->shared_ffn < 0 || c->shared_ffn > (1 << 20))
        return pith_errf(err, "%s: expert feed-forward width %d (shared %d) out of range", path, c->ffn, c->shared_ffn);
    if (c->n_group > 1 && (c->n_experts % c->n_group != 0 || c->topk_group < 1 || c->topk_group > c->n_group ||
                           c->topk_group * (c->n_experts / c->n_group) < c->top_k))
        return pith_errf(err, "%s: %d of %d expert groups over %d experts cannot give %d experts a token", path,
                         c->topk_group, c->n_group, c->n_experts, c->top_k);
    if (!(c->routed_scale >= 0 && c->routed_scale <= 1e6f))
        return pith_errf(err, "%s: expert weights scale %g out of range", path, (double)c->routed_scale);
    if (!(c->in_norm_eps >= 0 && c->in_norm_eps < 1))
        return pith_errf(err, "%s: expert input norm epsilon %g out of range", path, (double)c->in_norm_eps);
    if (c->n_local < 0 || c->expert0 < 0 || c->expert0 + c->n_local > c->n_experts)
        return pith_errf(err, "%s: experts [%d, %d) of %d held here", path, c->expert0, c->expert0 + c->n_local,
                         c->n_experts);
    return 0;
}

int pith_moe_reserve(pith_cpu *c, const pith_moe_config *cfg, pith_moe_scratch *s, int n, pith_err *err) {
    if (n <= s->cap) return 0;
    pith_moe_scratch_free(s);
    size_t N = (size_t)n, K = (size_t)cfg->top_k, E = (size_t)cfg->n_experts, sh = (size_t)cfg->shared_ffn;
    s->logits = malloc(N * E * sizeof(float));
    s->sel = malloc(N * K * sizeof(int));
    s->wt = malloc(N * K * sizeof(float));
    s->pos = malloc(N * K * sizeof(int));
    s->offsets = malloc((E + 1) * sizeof(int));
    s->cursor = malloc((E + 1) * sizeof(int));
    s->xg = malloc(N * K * cfg->dim * sizeof(float));
    s->yg = malloc(N * K * cfg->dim * sizeof(float));
    s->hg = malloc(N * K * cfg->ffn * sizeof(float));
    s->hu = malloc(N * K * cfg->ffn * sizeof(float));
    if (sh) {
        s->sg = malloc(N * sh * sizeof(float));
        s->su = malloc(N * sh * sizeof(float));
        s->sgate = malloc(N * sizeof(float));
    }
    const bool normed = cfg->in_norm_eps > 0;
    if (normed) {
        s->xn = malloc(N * cfg->dim * sizeof(float));
        s->xr = malloc(N * cfg->dim * sizeof(float));
    }
    if (!s->logits || !s->sel || !s->wt || !s->pos || !s->offsets || !s->cursor || !s->xg || !s->yg || !s->hg ||
        !s->hu || (sh && (!s->sg || !s->su || !s->sgate)) || (normed && (!s->xn || !s->xr))) {
        pith_moe_scratch_free(s);
        return pith_errf(err, "out of memory for the experts of a batch of %d tokens", n);
    }
    int widest = cfg->dim > cfg->ffn ? cfg->dim : cfg->ffn;
    widest = widest > cfg->shared_ffn ? widest : cfg->shared_ffn;
    if (pith_cpu_reserve(c, n * cfg->top_k, widest, err)) {
        pith_moe_scratch_free(s);
        return -1;
    }
    s->cap = n;
    return 0;
}

void pith_moe_scratch_free(pith_moe_scratch *s) {
    free(s->logits);
    free(s->sel);
    free(s->wt);
    free(s->pos);
    free(s->offsets);
    free(s->cursor);
    free(s->xg);
    free(s->yg);
    free(s->hg);
    free(s->hu);
    free(s->sg);
    free(s->su);
    free(s->sgate);
    free(s->xn);
    free(s->xr);
    memset(s, 0, sizeof *s);
}

/* ---- routing ---- */

static float selection_key(const pith_moe_layer *L, const float *sc, int e) {
    return sc[e] + (L->select_bias ? L->select_bias[e] : 0.0f);
}

/* Group-limited routing: the experts a token may choose from. A group's score is its best selection key
 * (softmax gating: DeepSeek-V2's group_limited_greedy), or with sigmoid gating the sum of its two best
 * (DeepSeek-V3's and GLM-4.5's noaux_tc); the topk_group best groups stay open, ties to the lower index. */
static void allowed_experts(const pith_moe_layer *L, const float *sc, bool *allowed) {
    const pith_moe_config *c = &L->cfg;
    const int E = c->n_experts, G = c->n_group;
    if (G <= 1) {
        for (int e = 0; e < E; e++) allowed[e] = true;
        return;
    }
    const int per = E / G;
    float score[PITH_BE_MAX_EXPERTS];
    for (int g = 0; g < G; g++) {
        float first = -INFINITY, second = -INFINITY;
        for (int e = g * per; e < (g + 1) * per; e++) {
            float k = selection_key(L, sc, e);
            if (k > first) second = first, first = k;
            else if (k > second) second = k;
        }
        score[g] = c->gating == PITH_GATING_SIGMOID && per > 1 ? first + second : first;
    }
    bool open[PITH_BE_MAX_EXPERTS] = {false};
    for (int j = 0; j < c->topk_group; j++) {
        int best = -1;
        for (int g = 0; g < G; g++)
            if (!open[g] && (best < 0 || score[g] > score[best])) best = g;
        open[best] = true;
    }
    for (int e = 0; e < E; e++) allowed[e] = open[e / per];
}

void pith_moe_route(const pith_moe_layer *L, float *logits, int n, int *sel, float *wt) {
    const pith_moe_config *c = &L->cfg;
    const int E = c->n_experts, K = c->top_k;
    for (int t = 0; t < n; t++) {
        float *sc = logits + (size_t)t * E; /* becomes the scores */
        int *s = sel + (size_t)t * K;
        float *w = wt + (size_t)t * K;
        if (L->router_bias)
            for (int e = 0; e < E; e++) sc[e] += L->router_bias[e];
        if (c->gating == PITH_GATING_SOFTMAX) {
            float mx = sc[0];
            for (int e = 1; e < E; e++) mx = sc[e] > mx ? sc[e] : mx;
            double sum = 0;
            for (int e = 0; e < E; e++) sum += exp((double)sc[e] - mx);
            for (int e = 0; e < E; e++) sc[e] = (float)(exp((double)sc[e] - mx) / sum);
        } else {
            for (int e = 0; e < E; e++) sc[e] = (float)(1.0 / (1.0 + exp(-(double)sc[e])));
        }
        bool allowed[PITH_BE_MAX_EXPERTS];
        allowed_experts(L, sc, allowed);
        double chosen = 0;
        for (int j = 0; j < K; j++) {
            int best = -1;
            float best_key = 0;
            for (int e = 0; e < E; e++) {
                if (!allowed[e]) continue;
                bool taken = false;
                for (int i = 0; i < j && !taken; i++) taken = s[i] == e;
                if (taken) continue;
                float key = selection_key(L, sc, e);
                if (best < 0 || key > best_key) best = e, best_key = key;
            }
            s[j] = best;
            w[j] = sc[best];
            chosen += sc[best];
        }
        if (c->norm_topk && chosen > 0)
            for (int j = 0; j < K; j++) w[j] = (float)(w[j] / chosen);
        if (L->expert_scale)
            for (int j = 0; j < K; j++) w[j] *= L->expert_scale[s[j]];
        if (c->routed_scale > 0 && c->routed_scale != 1)
            for (int j = 0; j < K; j++) w[j] *= c->routed_scale;
    }
}

/* Whether this rank runs expert e (expert parallelism: pith_moe_config.n_local). */
static inline bool local_expert(const pith_moe_config *c, int e) {
    return c->n_local == 0 || (e >= c->expert0 && e < c->expert0 + c->n_local);
}

/* Counting sort of the (token, rank) pairs by expert: pos gives each pair's gathered row (-1: another
 * rank's expert); with gather, the input rows are copied into xg in that order. */
static void group_rows(const pith_moe_layer *L, pith_moe_scratch *s, const float *x, size_t ldx, int n,
                       bool gather) {
    const int E = L->cfg.n_experts, K = L->cfg.top_k, dim = L->cfg.dim;
    memset(s->cursor, 0, (size_t)(E + 1) * sizeof(int));
    for (int i = 0; i < n * K; i++) s->cursor[s->sel[i]] += local_expert(&L->cfg, s->sel[i]);
    s->offsets[0] = 0;
    for (int e = 0; e < E; e++) s->offsets[e + 1] = s->offsets[e] + s->cursor[e];
    memcpy(s->cursor, s->offsets, (size_t)E * sizeof(int));
    for (int t = 0; t < n; t++)
        for (int j = 0; j < K; j++) {
            if (!local_expert(&L->cfg, s->sel[t * K + j])) {
                s->pos[t * K + j] = -1;
                continue;
            }
            int r = s->cursor[s->sel[t * K + j]]++;
            s->pos[t * K + j] = r;
            if (gather) memcpy(s->xg + (size_t)r * dim, x + (size_t)t * ldx, (size_t)dim * sizeof(float));
        }
}

/* ---- per-row work across the pool ---- */

typedef struct moe_rows {
    const pith_moe_layer *L;
    pith_moe_scratch *s;
    float *y;
    size_t ldy;
    int n;
    int chunk;
    void (*row)(struct moe_rows *j, int r);
    _Atomic int next;
} moe_rows;

static void rows_worker(void *arg, int ith, int nth) {
    (void)ith, (void)nth;
    moe_rows *j = arg;
    for (;;) {
        int r0 = atomic_fetch_add_explicit(&j->next, j->chunk, memory_order_relaxed);
        if (r0 >= j->n) break;
        int r1 = r0 + j->chunk < j->n ? r0 + j->chunk : j->n;
        for (int r = r0; r < r1; r++) j->row(j, r);
    }
}

static void run_rows(pith_cpu *c, moe_rows *j, void (*row)(moe_rows *j, int r), int n, int width) {
    j->row = row;
    j->n = n;
    j->chunk = n / (4 * c->n_threads);
    if (j->chunk < 1) j->chunk = 1;
    atomic_store_explicit(&j->next, 0, memory_order_relaxed);
    pith_pool_run_sized(c->pool, rows_worker, j, (double)n * width);
}

/* The expert of gathered row r (offsets are sorted). */
static int expert_of(const pith_moe_scratch *s, int E, int r) {
    int lo = 0, hi = E - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (s->offsets[mid] <= r) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

static void act_row(moe_rows *j, int r) {
    const pith_moe_layer *L = j->L;
    const int ffn = L->cfg.ffn;
    float *g = j->s->hg + (size_t)r * ffn, *u = j->s->hu + (size_t)r * ffn;
    if (L->gate_bias || L->up_bias) {
        int e = expert_of(j->s, L->cfg.n_experts, r);
        const float *bg = L->gate_bias ? L->gate_bias + (size_t)e * ffn : NULL;
        const float *bu = L->up_bias ? L->up_bias + (size_t)e * ffn : NULL;
        for (int i = 0; i < ffn; i++) {
            if (bg) g[i] += bg[i];
            if (bu) u[i] += bu[i];
        }
    }
    if (L->cfg.act == PITH_MOE_SILU) {
        for (int i = 0; i < ffn; i++) g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
        return;
    }
    if (L->cfg.act == PITH_MOE_GELU_TANH) { /* as the dense GeGLU (PyTorch's gelu(approximate="tanh")) */
        for (int i = 0; i < ffn; i++) g[i] = pith_gelu_tanh(g[i]) * u[i];
        return;
    }
    const float lim = L->cfg.clamp_limit, alpha = L->cfg.clamp_alpha;
    for (int i = 0; i < ffn; i++) {
        float gv = g[i] < lim ? g[i] : lim;
        float uv = u[i] < -lim ? -lim : u[i] > lim ? lim : u[i];
        g[i] = (uv + 1.0f) * gv / (1.0f + expf(-alpha * gv));
    }
}

/* y[t] += sum over ranks j of w_j * (expert row + down bias), in rank order. */
static void combine_row(moe_rows *j, int t) {
    const pith_moe_layer *L = j->L;
    const pith_moe_scratch *s = j->s;
    const int K = L->cfg.top_k, dim = L->cfg.dim;
    float *y = j->y + (size_t)t * j->ldy;
    for (int k = 0; k < K; k++) {
        if (s->pos[t * K + k] < 0) continue; /* another rank's expert */
        float w = s->wt[t * K + k];
        const float *row = s->yg + (size_t)s->pos[t * K + k] * dim;
        const float *bd = L->down_bias ? L->down_bias + (size_t)s->sel[t * K + k] * dim : NULL;
        if (bd)
            for (int i = 0; i < dim; i++) y[i] += w * (row[i] + bd[i]);
        else
            for (int i = 0; i < dim; i++) y[i] += w * row[i];
    }
}

/* The shared expert's hidden row: silu(g) * u, times its gate's sigmoid. */
static void shared_row(moe_rows *j, int t) {
    const pith_moe_layer *L = j->L;
    const int sh = L->cfg.shared_ffn;
    float *g = j->s->sg + (size_t)t * sh, *u = j->s->su + (size_t)t * sh;
    float gate = L->sh_gate_inp ? 1.0f / (1.0f + expf(-j->s->sgate[t])) : 1.0f;
    for (int i = 0; i < sh; i++) g[i] = g[i] / (1.0f + expf(-g[i])) * u[i] * gate;
}

static int experts_by_expert(pith_cpu *c, const pith_moe_layer *L, pith_moe_scratch *s, pith_err *err) {
    const int dim = L->cfg.dim, ffn = L->cfg.ffn;
    for (int e = 0; e < L->cfg.n_experts; e++) {
        int r0 = s->offsets[e], cnt = s->offsets[e + 1] - r0;
        if (!cnt) continue;
        pith_acts a;
        pith_acts_bind(c, &a, s->xg + (size_t)r0 * dim, cnt, dim, dim);
        const pith_matmul_out gu[] = {{&L->gate[e], s->hg + (size_t)r0 * ffn, ffn, false},
                                      {&L->up[e], s->hu + (size_t)r0 * ffn, ffn, false}};
        if (pith_cpu_matmul_many(c, &a, gu, 2, err)) return -1;
        moe_rows j = {.L = L, .s = s};
        /* rows r0.. of this expert: act_row finds the expert from the row index */
        for (int r = r0; r < r0 + cnt; r++) act_row(&j, r);
        pith_acts_bind(c, &a, s->hg + (size_t)r0 * ffn, cnt, ffn, ffn);
        if (pith_cpu_matmul(c, &L->down[e], &a, s->yg + (size_t)r0 * dim, dim, false, err)) return -1;
    }
    return 0;
}

/* Each routed (token, rank) pair on its own: gate and up of one row, its activation, its down. */
static int experts_by_token(pith_cpu *c, const pith_moe_layer *L, pith_moe_scratch *s, int n, pith_err *err) {
    const int dim = L->cfg.dim, ffn = L->cfg.ffn, K = L->cfg.top_k;
    moe_rows j = {.L = L, .s = s};
    for (int t = 0; t < n; t++)
        for (int k = 0; k < K; k++) {
            const int e = s->sel[t * K + k], r = s->pos[t * K + k];
            if (r < 0) continue; /* another rank's expert */
            pith_acts a;
            pith_acts_bind(c, &a, s->xg + (size_t)r * dim, 1, dim, dim);
            const pith_matmul_out gu[] = {{&L->gate[e], s->hg + (size_t)r * ffn, ffn, false},
                                          {&L->up[e], s->hu + (size_t)r * ffn, ffn, false}};
            if (pith_cpu_matmul_many(c, &a, gu, 2, err)) return -1;
            act_row(&j, r);
            pith_acts_bind(c, &a, s->hg + (size_t)r * ffn, 1, ffn, ffn);
            if (pith_cpu_matmul(c, &L->down[e], &a, s->yg + (size_t)r * dim, dim, false, err)) return -1;
        }
    return 0;
}

int pith_moe_loop_from_env(pith_moe_loop *loop, pith_err *err) {
    const char *v = getenv("PITH_MOE_NAIVE");
    if (!v || !*v || !strcmp(v, "0")) *loop = PITH_MOE_GROUPED;
    else if (!strcmp(v, "1") || !strcmp(v, "expert")) *loop = PITH_MOE_BY_EXPERT;
    else if (!strcmp(v, "token")) *loop = PITH_MOE_BY_TOKEN;
    else return pith_errf(err, "PITH_MOE_NAIVE=%s: expected 0, 1, expert or token", v);
    return 0;
}

/* RMSNorm of each row in double, scaled as pith_cpu_be_rmsnorm does (x * r * w); the router's input then
 * times 1 / sqrt(dim), as Gemma4TextRouter's scalar_root_size after its scale. */
static void input_norms(const pith_moe_layer *L, const float *x, size_t ldx, int n, float *xn, float *xr) {
    const int dim = L->cfg.dim;
    const float root = (float)(1.0 / sqrt((double)dim));
    for (int t = 0; t < n; t++) {
        const float *xt = x + (size_t)t * ldx;
        float *en = xn + (size_t)t * dim, *rn = xr + (size_t)t * dim;
        double ss = 0;
        for (int i = 0; i < dim; i++) ss += (double)xt[i] * xt[i];
        const float r = (float)(1.0 / sqrt(ss / dim + L->cfg.in_norm_eps));
        for (int i = 0; i < dim; i++) {
            en[i] = xt[i] * r * L->in_norm[i];
            rn[i] = xt[i] * r * L->router_norm[i] * root;
        }
    }
}

int pith_moe_forward(pith_cpu *c, const pith_moe_layer *L, pith_moe_scratch *s, const float *x, size_t ldx, int n,
                     float *y, size_t ldy, pith_moe_loop loop, pith_err *err) {
    const pith_moe_config *cfg = &L->cfg;
    if (n <= 0) return 0;
    if (n > s->cap) return pith_errf(err, "moe: scratch holds %d tokens, the batch has %d", s->cap, n);
    const int dim = cfg->dim, ffn = cfg->ffn, K = cfg->top_k, E = cfg->n_experts;
    pith_acts a;
    if (cfg->in_norm_eps > 0) { /* Gemma 4: the router's and the experts' inputs, each its norm of x */
        if (!L->in_norm || !L->router_norm) return pith_errf(err, "moe: the layer has no input norms");
        input_norms(L, x, ldx, n, s->xn, s->xr);
        pith_acts_bind(c, &a, s->xr, n, dim, dim);
        if (pith_cpu_matmul(c, &L->router, &a, s->logits, E, false, err)) return -1;
        x = s->xn, ldx = (size_t)dim;
        pith_acts_bind(c, &a, x, n, dim, ldx);
    } else {
        pith_acts_bind(c, &a, x, n, dim, ldx);
        if (pith_cpu_matmul(c, &L->router, &a, s->logits, E, false, err)) return -1;
    }
    const bool shared = L->has_shared && !cfg->shared_elsewhere;
    if (shared) {
        const int sh = cfg->shared_ffn;
        const pith_matmul_out gu[] = {{&L->sh_gate, s->sg, sh, false}, {&L->sh_up, s->su, sh, false}};
        if (pith_cpu_matmul_many(c, &a, gu, 2, err)) return -1;
        for (int t = 0; t < n && L->sh_gate_inp; t++) {
            double d = 0;
            const float *xt = x + (size_t)t * ldx;
            for (int i = 0; i < dim; i++) d += (double)xt[i] * L->sh_gate_inp[i];
            s->sgate[t] = (float)d;
        }
    }
    pith_moe_route(L, s->logits, n, s->sel, s->wt);
    /* Quantized activations are scattered from x straight into the grouped product's scratch, each
     * token quantized once for its top_k rows; float ones (and the baseline loops) read gathered rows. */
    const bool gather = loop != PITH_MOE_GROUPED || pith_act_format_of(L->gate[0].type) == PITH_ACT_F32 ||
                        cfg->n_local > 0; /* the scatter fills every pair's row: here only the local ones */
    group_rows(L, s, x, ldx, n, gather);
    moe_rows j = {.L = L, .s = s, .y = y, .ldy = ldy};
    if (loop == PITH_MOE_BY_EXPERT) {
        if (experts_by_expert(c, L, s, err)) return -1;
    } else if (loop == PITH_MOE_BY_TOKEN) {
        if (experts_by_token(c, L, s, n, err)) return -1;
    } else {
        const pith_grouped_out gu[] = {{L->gate, s->hg, ffn}, {L->up, s->hu, ffn}};
        if (gather ? pith_cpu_matmul_grouped(c, s->xg, dim, dim, s->offsets, E, gu, 2, err)
                   : pith_cpu_matmul_grouped_scatter(c, x, ldx, dim, n, s->pos, K, s->offsets, E, gu, 2, err))
            return -1;
        run_rows(c, &j, act_row, s->offsets[E], 8 * ffn);
        const pith_grouped_out d = {L->down, s->yg, dim};
        if (pith_cpu_matmul_grouped(c, s->hg, ffn, ffn, s->offsets, E, &d, 1, err)) return -1;
    }
    run_rows(c, &j, combine_row, n, 2 * K * dim);
    if (shared) {
        run_rows(c, &j, shared_row, n, 8 * cfg->shared_ffn);
        pith_acts_bind(c, &a, s->sg, n, cfg->shared_ffn, cfg->shared_ffn);
        if (pith_cpu_matmul(c, &L->sh_down, &a, y, ldy, true, err)) return -1;
    }
    return 0;
}
