/* The mixture-of-experts block (src/backend/cpu/moe.h) and its grouped expert product
 * (src/backend/cpu/grouped.h) against a per-expert scalar reference in double, written from the block's
 * definition: router, softmax or sigmoid scores, top-k with selection bias, renormalisation, each chosen
 * expert's gated FFN computed alone, weighted sum, shared expert with its gate, expert biases and the
 * clamped SwiGLU, Gemma 4's options (GELU-tanh experts, per-expert weight scales, and the input norms:
 * the op takes the raw residual, the router reads one RMS norm of it and the experts another). Awkward shapes: an expert no token chooses, every token on one expert, top-k equal to
 * the number of experts, group-limited routing (DeepSeek's and GLM's: groups scored by their best key or
 * their two best, one group open, groups of one) with the weights scaled, widths that are not multiples
 * of the tiles (F32), packed and unpacked weights,
 * the scalar and the best kernel table. Then: the same tokens alone, in a batch, expert by expert and
 * token by token (the baseline loops) give the same bits.
 *
 * Tolerances: F32 weights differ from the double reference by float rounding only (1e-4 of the output's
 * scale). Q8_0 / Q4_0 kernels round activations to 8 bits per block of 32 (steps of max|x|/127), which
 * the reference does too before each product; what is left is float rounding and the odd activation
 * rounded the other way (one step of one element), allowed 2e-3 of the output's RMS (without the
 * simulation the error is about 1e-2 of it). A wrong expert, weight or bias moves outputs by their whole
 * scale. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu.h"
#include "backend/cpu/grouped.h"
#include "check.h"
#include "backend/cpu/moe.h"
#include "quant_ref.h"

typedef struct weights {
    pith_dtype type;
    int rows, cols, n;  /* n matrices */
    uint8_t *data;
    size_t row_bytes;
} weights;

static void make_weights(weights *w, pith_dtype t, int n, int rows, int cols, float scale) {
    w->type = t, w->rows = rows, w->cols = cols, w->n = n;
    w->row_bytes = pith_dtype_row_bytes(t, cols);
    w->data = malloc((size_t)n * rows * w->row_bytes);
    float *row = malloc((size_t)cols * sizeof(float));
    for (int r = 0; r < n * rows; r++) {
        for (int i = 0; i < cols; i++) row[i] = rnd_uniform(-scale, scale);
        if (t == PITH_F32) memcpy(w->data + (size_t)r * w->row_bytes, row, (size_t)cols * 4);
        else ref_quantize(t, row, cols, w->data + (size_t)r * w->row_bytes);
    }
    free(row);
}

static double welem(const weights *w, int m, int r, int i) {
    double mag;
    return ref_elem(w->type, w->data + ((size_t)m * w->rows + r) * w->row_bytes, i, &mag);
}

static pith_matrix *views(const weights *w) {
    pith_matrix *ms = calloc((size_t)w->n, sizeof *ms);
    for (int e = 0; e < w->n; e++) {
        ms[e].type = (pith_wtype)pith_wtype_of(w->type);
        ms[e].rows = w->rows;
        ms[e].cols = w->cols;
        ms[e].row_bytes = w->row_bytes;
        ms[e].data = w->data + (size_t)e * w->rows * w->row_bytes;
    }
    return ms;
}

static float *rvec(int n, float scale) {
    float *v = malloc((size_t)n * sizeof(float));
    for (int i = 0; i < n; i++) v[i] = rnd_uniform(-scale, scale);
    return v;
}

typedef struct spec {
    const char *name;
    pith_dtype type;
    int dim, ffn, E, K, n;
    pith_expert_gating gating;
    bool norm, select_bias, shared, shared_gate, biases, clamp;
    int favour;      /* >= 0: every token's router prefers this expert by far */
    int shun;        /* >= 0: no token chooses this expert */
    int n_group, topk_group; /* group-limited routing, 0: none */
    float scale;             /* routed_scale, 0: none */
    bool gelu, expert_scale, in_norm; /* Gemma 4's options */
} spec;

typedef struct layer {
    weights router, gate, up, down, sg, su, sd;
    pith_moe_layer L;
} layer;

static void build(layer *ly, const spec *s) {
    memset(ly, 0, sizeof *ly);
    pith_moe_config c = {.dim = s->dim, .n_experts = s->E, .top_k = s->K, .ffn = s->ffn,
                         .shared_ffn = s->shared ? s->ffn / 2 : 0, .gating = s->gating, .norm_topk = s->norm,
                         .act = s->clamp ? PITH_MOE_SWIGLU_CLAMP : PITH_MOE_SILU, .clamp_alpha = 1.702f,
                         .clamp_limit = 0.5f, .n_group = s->n_group, .topk_group = s->topk_group,
                         .routed_scale = s->scale, .in_norm_eps = s->in_norm ? 1e-6f : 0.0f};
    if (s->gelu) c.act = PITH_MOE_GELU_TANH;
    /* shared width: a multiple of 32 for the quantized types */
    if (s->shared) c.shared_ffn = s->type == PITH_F32 ? s->ffn / 2 + 1 : 32;
    ly->L.cfg = c;
    make_weights(&ly->router, PITH_F32, 1, s->E, s->dim, 1.0f);
    make_weights(&ly->gate, s->type, s->E, s->ffn, s->dim, 0.3f);
    make_weights(&ly->up, s->type, s->E, s->ffn, s->dim, 0.3f);
    make_weights(&ly->down, s->type, s->E, s->dim, s->ffn, 0.3f);
    pith_matrix *r = views(&ly->router);
    ly->L.router = *r;
    free(r);
    ly->L.gate = views(&ly->gate);
    ly->L.up = views(&ly->up);
    ly->L.down = views(&ly->down);
    if (s->favour >= 0 || s->shun >= 0) {
        ly->L.router_bias = calloc((size_t)s->E, sizeof(float));
        if (s->favour >= 0) ly->L.router_bias[s->favour] = 60.0f;
        if (s->shun >= 0) ly->L.router_bias[s->shun] = -60.0f;
    }
    if (s->select_bias) ly->L.select_bias = rvec(s->E, 0.3f);
    if (s->expert_scale) { /* positive, and far from 1 */
        ly->L.expert_scale = rvec(s->E, 1.0f);
        for (int e = 0; e < s->E; e++) ly->L.expert_scale[e] = 1.5f + ly->L.expert_scale[e];
    }
    if (s->in_norm) {
        ly->L.in_norm = rvec(s->dim, 1.0f);
        ly->L.router_norm = rvec(s->dim, 4.0f);
    }
    if (s->biases) {
        ly->L.gate_bias = rvec(s->E * s->ffn, 0.5f);
        ly->L.up_bias = rvec(s->E * s->ffn, 0.5f);
        ly->L.down_bias = rvec(s->E * s->dim, 0.5f);
    }
    if (s->shared) {
        make_weights(&ly->sg, s->type, 1, c.shared_ffn, s->dim, 0.3f);
        make_weights(&ly->su, s->type, 1, c.shared_ffn, s->dim, 0.3f);
        make_weights(&ly->sd, s->type, 1, s->dim, c.shared_ffn, 0.3f);
        pith_matrix *a = views(&ly->sg), *b = views(&ly->su), *d = views(&ly->sd);
        ly->L.sh_gate = *a, ly->L.sh_up = *b, ly->L.sh_down = *d;
        free(a), free(b), free(d);
        ly->L.has_shared = true;
        if (s->shared_gate) ly->L.sh_gate_inp = rvec(s->dim, 0.5f);
    }
}

static void unbuild(layer *ly) {
    for (int e = 0; e < ly->L.cfg.n_experts; e++) {
        pith_matrix_free(&ly->L.gate[e]);
        pith_matrix_free(&ly->L.up[e]);
        pith_matrix_free(&ly->L.down[e]);
    }
    pith_matrix_free(&ly->L.sh_gate);
    pith_matrix_free(&ly->L.sh_up);
    pith_matrix_free(&ly->L.sh_down);
    free(ly->L.gate), free(ly->L.up), free(ly->L.down);
    free(ly->L.router_bias), free(ly->L.select_bias), free(ly->L.gate_bias), free(ly->L.up_bias);
    free(ly->L.down_bias), free(ly->L.sh_gate_inp), free(ly->L.expert_scale), free(ly->L.in_norm);
    free(ly->L.router_norm);
    weights *ws[] = {&ly->router, &ly->gate, &ly->up, &ly->down, &ly->sg, &ly->su, &ly->sd};
    for (size_t i = 0; i < sizeof ws / sizeof *ws; i++) free(ws[i]->data);
}

static double sigm(double v) { return 1.0 / (1.0 + exp(-v)); }

/* What the integer kernels multiply quantized weights with: each block of 32 rounded to steps of
 * max|x| / 127 (a no-op for F32 weights). */
static void act_q8(pith_dtype t, const double *x, int n, double *out) {
    if (t == PITH_F32) {
        memcpy(out, x, (size_t)n * sizeof(double));
        return;
    }
    for (int b = 0; b < n; b += 32) {
        float mx = 0;
        for (int i = b; i < b + 32; i++) mx = fabsf((float)x[i]) > mx ? fabsf((float)x[i]) : mx;
        float d = mx / 127.0f, id = d > 0 ? 1.0f / d : 0.0f;
        for (int i = b; i < b + 32; i++) out[i] = d * nearbyintf((float)x[i] * id);
    }
}

/* One expert's (or the shared expert's, m = 0) FFN of x, in double. */
static void ref_ffn(const layer *ly, const weights *g, const weights *u, const weights *d, int m, const double *x,
                    double *out, bool experts) {
    const pith_moe_layer *L = &ly->L;
    int dim = g->cols, ffn = g->rows;
    double *h = malloc((size_t)ffn * sizeof(double)), *xq = calloc((size_t)dim, sizeof(double));
    double *hq = malloc((size_t)ffn * sizeof(double));
    for (int k = 0; k < dim; k++) xq[k] = x[k];
    act_q8(g->type, xq, dim, xq);
    for (int i = 0; i < ffn; i++) {
        double gv = 0, uv = 0;
        for (int k = 0; k < dim; k++) gv += welem(g, m, i, k) * xq[k], uv += welem(u, m, i, k) * xq[k];
        if (experts && L->gate_bias) gv += L->gate_bias[m * ffn + i], uv += L->up_bias[m * ffn + i];
        if (experts && L->cfg.act == PITH_MOE_SWIGLU_CLAMP) {
            double lim = L->cfg.clamp_limit;
            gv = gv < lim ? gv : lim;
            uv = uv < -lim ? -lim : uv > lim ? lim : uv;
            h[i] = (uv + 1) * gv * sigm(L->cfg.clamp_alpha * gv);
        } else if (experts && L->cfg.act == PITH_MOE_GELU_TANH) {
            h[i] = 0.5 * gv * (1 + tanh(0.7978845608028654 * /* sqrt(2 / pi) */ (gv + 0.044715 * gv * gv * gv))) * uv;
        } else {
            h[i] = gv * sigm(gv) * uv;
        }
    }
    act_q8(d->type, h, ffn, hq);
    for (int o = 0; o < dim; o++) {
        double v = 0;
        for (int i = 0; i < ffn; i++) v += welem(d, m, o, i) * hq[i];
        if (experts && L->down_bias) v += L->down_bias[m * dim + o];
        out[o] = v;
    }
    free(h), free(xq), free(hq);
}

/* y += moe(x) for one token, by the definition. chosen: its experts, in rank order. */
static void ref_token(const layer *ly, const float *xin, double *y, int *chosen) {
    const pith_moe_layer *L = &ly->L;
    const int E = L->cfg.n_experts, K = L->cfg.top_k, dim = L->cfg.dim;
    double *sc = malloc((size_t)E * sizeof(double)), *o = malloc((size_t)dim * sizeof(double));
    double *x = malloc((size_t)dim * sizeof(double)), *xr = malloc((size_t)dim * sizeof(double));
    double ss = 0;
    for (int k = 0; k < dim; k++) ss += (double)xin[k] * xin[k];
    for (int k = 0; k < dim; k++) { /* Gemma 4: the experts' and the router's norms of the raw input */
        double r = 1 / sqrt(ss / dim + L->cfg.in_norm_eps);
        x[k] = L->in_norm ? xin[k] * r * L->in_norm[k] : xin[k];
        /* quantized weights: the kernels round the float row the op normed, so the reference rounds
         * that row too (a value one float step apart can round to the other 8-bit step) */
        if (L->in_norm && ly->gate.type != PITH_F32) x[k] = xin[k] * (float)r * L->in_norm[k];
        xr[k] = L->in_norm ? xin[k] * r * L->router_norm[k] / sqrt((double)dim) : xin[k];
    }
    double mx = -INFINITY, sum = 0;
    for (int e = 0; e < E; e++) {
        double v = 0;
        for (int k = 0; k < dim; k++) v += welem(&ly->router, 0, e, k) * xr[k];
        sc[e] = v + (L->router_bias ? L->router_bias[e] : 0);
        mx = sc[e] > mx ? sc[e] : mx;
    }
    for (int e = 0; e < E; e++) sum += exp(sc[e] - mx);
    for (int e = 0; e < E; e++) sc[e] = L->cfg.gating == PITH_GATING_SOFTMAX ? exp(sc[e] - mx) / sum : sigm(sc[e]);
    bool *taken = calloc((size_t)E, 1);
    if (L->cfg.n_group > 1) { /* groups outside the topk_group best are taken already: never chosen */
        const int G = L->cfg.n_group, per = E / G;
        double gs[64];
        for (int g = 0; g < G; g++) { /* sort the group's keys, best first; score: best, or best two */
            double keys[64];
            for (int i = 0; i < per; i++)
                keys[i] = sc[g * per + i] + (L->select_bias ? L->select_bias[g * per + i] : 0);
            for (int i = 1; i < per; i++)
                for (int j = i; j > 0 && keys[j] > keys[j - 1]; j--) {
                    double t = keys[j];
                    keys[j] = keys[j - 1], keys[j - 1] = t;
                }
            gs[g] = L->cfg.gating == PITH_GATING_SIGMOID && per > 1 ? keys[0] + keys[1] : keys[0];
        }
        for (int g = 0; g < G; g++) {
            int better = 0; /* groups ranked above g: higher score, or equal with a lower index */
            for (int h = 0; h < G; h++) better += gs[h] > gs[g] || (gs[h] == gs[g] && h < g);
            if (better >= L->cfg.topk_group)
                for (int i = 0; i < per; i++) taken[g * per + i] = true;
        }
    }
    double wsum = 0, *w = malloc((size_t)K * sizeof(double));
    for (int j = 0; j < K; j++) {
        int best = -1;
        for (int e = 0; e < E; e++) {
            double key = sc[e] + (L->select_bias ? L->select_bias[e] : 0);
            if (!taken[e] && (best < 0 || key > sc[best] + (L->select_bias ? L->select_bias[best] : 0))) best = e;
        }
        taken[best] = true;
        chosen[j] = best;
        w[j] = sc[best];
        wsum += w[j];
    }
    for (int j = 0; j < K; j++) {
        ref_ffn(ly, &ly->gate, &ly->up, &ly->down, chosen[j], x, o, true);
        double wj = (L->cfg.norm_topk ? w[j] / wsum : w[j]) * (L->cfg.routed_scale > 0 ? L->cfg.routed_scale : 1) *
                    (L->expert_scale ? L->expert_scale[chosen[j]] : 1);
        for (int i = 0; i < dim; i++) y[i] += wj * o[i];
    }
    if (L->has_shared) {
        ref_ffn(ly, &ly->sg, &ly->su, &ly->sd, 0, x, o, false);
        double g = 1;
        if (L->sh_gate_inp) {
            double d = 0;
            for (int k = 0; k < dim; k++) d += (double)x[k] * L->sh_gate_inp[k];
            g = sigm(d);
        }
        for (int i = 0; i < dim; i++) y[i] += g * o[i];
    }
    free(sc), free(o), free(taken), free(w), free(x), free(xr);
}

static void run_case(pith_cpu *cpu, const spec *s, bool pack) {
    layer ly;
    build(&ly, s);
    pith_err err = {0};
    if (pack) CHECK(pith_moe_pack(cpu, &ly.L, &err) == 0);
    const int dim = s->dim, n = s->n, K = s->K;
    float *x = rvec(n * dim, 1.0f), *y0 = rvec(n * dim, 1.0f);
    float *y = malloc((size_t)n * dim * sizeof(float)), *y1 = malloc((size_t)n * dim * sizeof(float));
    float *y2 = malloc((size_t)n * dim * sizeof(float));
    pith_moe_scratch sc = {0};
    CHECK(pith_moe_reserve(cpu, &ly.L.cfg, &sc, n, &err) == 0);
    memcpy(y, y0, (size_t)n * dim * sizeof(float));
    int rc = pith_moe_forward(cpu, &ly.L, &sc, x, dim, n, y, dim, PITH_MOE_GROUPED, &err);
    CHECKF(rc == 0, "%s: %s", s->name, err.msg);

    /* the reference, and how often each expert was chosen */
    double *ref = malloc((size_t)dim * sizeof(double));
    int *chosen = malloc((size_t)K * sizeof(int)), *count = calloc((size_t)s->E, sizeof(int));
    double worst = 0, ss = 0;
    for (int t = 0; t < n; t++) {
        for (int i = 0; i < dim; i++) ref[i] = y0[t * dim + i];
        ref_token(&ly, x + (size_t)t * dim, ref, chosen);
        for (int j = 0; j < K; j++) count[chosen[j]]++;
        for (int i = 0; i < dim; i++) {
            double d = fabs(y[t * dim + i] - ref[i]);
            worst = d > worst ? d : worst;
            ss += (ref[i] - y0[t * dim + i]) * (ref[i] - y0[t * dim + i]);
        }
    }
    double rms = sqrt(ss / ((double)n * dim));
    double tol = (s->type == PITH_F32 ? 1e-4 : 2e-3) * (rms > 1 ? rms : 1);
    CHECKF(worst <= tol, "%s (%s, %s): max |error| %.3g > %.3g", s->name, cpu->k->name, pack ? "packed" : "file layout",
           worst, tol);
    if (s->shun >= 0) CHECKF(count[s->shun] == 0, "%s: the shunned expert was chosen", s->name);
    if (s->favour >= 0) CHECKF(count[s->favour] == n, "%s: the favoured expert got %d of %d", s->name, count[s->favour], n);
    if (K == s->E)
        for (int e = 0; e < s->E; e++) CHECK(count[e] == n);
    if (s->n_group > 1 && s->topk_group == 1 && s->favour >= 0) { /* only the favoured expert's group is open */
        int per = s->E / s->n_group, outside = 0;
        for (int e = 0; e < s->E; e++) outside += e / per != s->favour / per ? count[e] : 0;
        CHECKF(outside == 0, "%s: %d choices outside the one open group", s->name, outside);
    }

    /* the same bits alone and through both baseline loops */
    memcpy(y1, y0, (size_t)n * dim * sizeof(float));
    for (int t = 0; t < n; t++)
        CHECK(pith_moe_forward(cpu, &ly.L, &sc, x + (size_t)t * dim, dim, 1, y1 + (size_t)t * dim, dim, PITH_MOE_GROUPED, &err) == 0);
    CHECKF(memcmp(y, y1, (size_t)n * dim * sizeof(float)) == 0, "%s: a token alone differs from the batch", s->name);
    const pith_moe_loop loops[] = {PITH_MOE_BY_EXPERT, PITH_MOE_BY_TOKEN};
    for (int l = 0; l < 2; l++) {
        memcpy(y2, y0, (size_t)n * dim * sizeof(float));
        CHECK(pith_moe_forward(cpu, &ly.L, &sc, x, dim, n, y2, dim, loops[l], &err) == 0);
        CHECKF(memcmp(y, y2, (size_t)n * dim * sizeof(float)) == 0, "%s: the loop %s differs", s->name,
               l ? "by token" : "by expert");
    }
    printf("%-34s %-14s %-11s max|err| %.2e (tol %.1e)\n", s->name, cpu->k->name, pack ? "packed" : "file", worst, tol);

    pith_moe_scratch_free(&sc);
    free(x), free(y0), free(y), free(y1), free(y2), free(ref), free(chosen), free(count);
    unbuild(&ly);
}

/* The grouped product alone: empty groups, one group with every row, and bad input refused. */
static void grouped_edges(pith_cpu *cpu) {
    weights w;
    make_weights(&w, PITH_F32, 3, 20, 24, 1.0f);
    pith_matrix *ms = views(&w);
    const int n = 9;
    float *x = rvec(n * 24, 1.0f), *y = calloc((size_t)n * 20, sizeof(float));
    CHECK(pith_cpu_reserve(cpu, n, 24, &(pith_err){0}) == 0);
    int offs[4] = {0, 0, n, n}; /* group 1 holds everything */
    pith_grouped_out o = {ms, y, 20};
    pith_err err = {0};
    CHECK(pith_cpu_matmul_grouped(cpu, x, 24, 24, offs, 3, &o, 1, &err) == 0);
    double worst = 0;
    for (int t = 0; t < n; t++)
        for (int r = 0; r < 20; r++) {
            double v = 0;
            for (int k = 0; k < 24; k++) v += welem(&w, 1, r, k) * x[t * 24 + k];
            worst = fmax(worst, fabs(v - y[t * 20 + r]));
        }
    CHECKF(worst < 1e-4, "grouped product, one group with every row: %g", worst);
    int bad[4] = {0, 5, 3, n};
    CHECK(pith_cpu_matmul_grouped(cpu, x, 24, 24, bad, 3, &o, 1, &err) != 0);
    CHECK(strstr(err.msg, "offsets") != NULL);
    CHECK(pith_cpu_matmul_grouped(cpu, x, 24, 23, offs, 3, &o, 1, &err) != 0);
    int none[4] = {0, 0, 0, 0};
    CHECK(pith_cpu_matmul_grouped(cpu, x, 24, 24, none, 3, &o, 1, &err) == 0);
    /* scattering from source rows needs quantized activations and one slot per gathered row (the
     * scattered path's results: the naive-loop comparisons above, on the quantized specs) */
    int slots[9] = {0, 1, 2, 3, 4, 5, 6, 7, 8};
    CHECK(pith_cpu_matmul_grouped_scatter(cpu, x, 24, 24, 3, slots, 3, offs, 3, &o, 1, &err) != 0);
    CHECK(strstr(err.msg, "float activations") != NULL);
    CHECK(pith_cpu_matmul_grouped_scatter(cpu, x, 24, 24, 0, slots, 3, offs, 3, &o, 1, &err) != 0);
    free(ms), free(w.data), free(x), free(y);
}

/* PITH_MOE_NAIVE's values, and a clear error for any other. */
static void loop_from_env(void) {
    const struct {
        const char *v;
        int ok;
        pith_moe_loop loop;
    } cases[] = {{NULL, 1, PITH_MOE_GROUPED}, {"", 1, PITH_MOE_GROUPED}, {"0", 1, PITH_MOE_GROUPED},
                 {"1", 1, PITH_MOE_BY_EXPERT}, {"expert", 1, PITH_MOE_BY_EXPERT}, {"token", 1, PITH_MOE_BY_TOKEN},
                 {"tokens", 0, PITH_MOE_GROUPED}, {"2", 0, PITH_MOE_GROUPED}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        if (cases[i].v) setenv("PITH_MOE_NAIVE", cases[i].v, 1);
        else unsetenv("PITH_MOE_NAIVE");
        pith_moe_loop loop = (pith_moe_loop)-1;
        pith_err err = {0};
        int rc = pith_moe_loop_from_env(&loop, &err);
        CHECKF((rc == 0) == cases[i].ok, "PITH_MOE_NAIVE=%s: rc %d", cases[i].v ? cases[i].v : "(unset)", rc);
        if (cases[i].ok) CHECK(loop == cases[i].loop);
        else CHECKF(strstr(err.msg, "PITH_MOE_NAIVE") != NULL, "error: %s", err.msg);
    }
    unsetenv("PITH_MOE_NAIVE");
}

/* Group settings that cannot give a token its experts are refused. */
static void group_checks(void) {
    pith_err err = {0};
    pith_moe_config c = {.dim = 8, .n_experts = 16, .top_k = 4, .ffn = 8, .n_group = 4, .topk_group = 2};
    CHECK(pith_moe_config_check(&c, "m", &err) == 0);
    c.n_group = 5; /* does not divide 16 */
    CHECK(pith_moe_config_check(&c, "m", &err) != 0 && strstr(err.msg, "groups"));
    c.n_group = 8, c.topk_group = 1; /* 2 experts open for 4 */
    CHECK(pith_moe_config_check(&c, "m", &err) != 0);
    c.topk_group = 9;
    CHECK(pith_moe_config_check(&c, "m", &err) != 0);
    c.topk_group = 2, c.routed_scale = NAN;
    CHECK(pith_moe_config_check(&c, "m", &err) != 0 && strstr(err.msg, "scale"));
}

int main(void) {
    loop_from_env();
    group_checks();
    const spec specs[] = {
        {"softmax top-2 of 8, renormalised", PITH_F32, 40, 52, 8, 2, 37, PITH_GATING_SOFTMAX, true, .favour = -1, .shun = -1},
        {"an expert no token chooses", PITH_F32, 40, 52, 6, 2, 23, PITH_GATING_SOFTMAX, true, .favour = -1, .shun = 3},
        {"every token on one expert", PITH_F32, 40, 52, 6, 1, 19, PITH_GATING_SOFTMAX, false, .favour = 4, .shun = -1},
        {"top-k = every expert", PITH_F32, 40, 52, 4, 4, 11, PITH_GATING_SOFTMAX, false, .favour = -1, .shun = -1},
        {"sigmoid, selection bias, shared+gate", PITH_F32, 40, 52, 8, 3, 17, PITH_GATING_SIGMOID, true,
         .select_bias = true, .shared = true, .shared_gate = true, .favour = -1, .shun = -1},
        {"expert biases, clamped SwiGLU", PITH_F32, 40, 52, 8, 2, 21, PITH_GATING_SOFTMAX, true, .biases = true,
         .clamp = true, .favour = -1, .shun = -1},
        {"Q8_0 top-2 of 8, shared", PITH_Q8_0, 64, 96, 8, 2, 41, PITH_GATING_SOFTMAX, true, .shared = true,
         .favour = -1, .shun = -1},
        {"Q8_0 every token on one expert", PITH_Q8_0, 64, 96, 8, 1, 40, PITH_GATING_SOFTMAX, true, .favour = 2, .shun = -1},
        {"Q4_0 top-4 of 16, one shunned", PITH_Q4_0, 64, 96, 16, 4, 33, PITH_GATING_SOFTMAX, true, .favour = -1, .shun = 7},
        {"Q4_0 top-k = every expert", PITH_Q4_0, 64, 64, 3, 3, 9, PITH_GATING_SOFTMAX, true, .favour = -1, .shun = -1},
        /* DeepSeek-V3 / GLM-4.5: sigmoid, selection bias, 4 groups of 4 with 2 open, top-3, scaled */
        {"sigmoid, 2 of 4 groups, scaled", PITH_F32, 40, 52, 16, 3, 29, PITH_GATING_SIGMOID, true, .select_bias = true,
         .shared = true, .favour = -1, .shun = -1, .n_group = 4, .topk_group = 2, .scale = 2.5f},
        /* DeepSeek-V2: softmax, group score = its best, no renormalisation, scaled */
        {"softmax, 3 of 8 groups, scaled", PITH_F32, 40, 52, 16, 4, 23, PITH_GATING_SOFTMAX, false, .favour = -1,
         .shun = -1, .n_group = 8, .topk_group = 3, .scale = 16.0f},
        /* one group open (softmax: a group scores its best): every expert comes from the favoured one's group */
        {"one group open, favoured expert", PITH_Q8_0, 64, 96, 8, 2, 17, PITH_GATING_SOFTMAX, true, .favour = 5,
         .shun = -1, .n_group = 4, .topk_group = 1},
        /* groups of one expert: the group score is that expert's key alone */
        {"groups of one", PITH_F32, 40, 52, 6, 2, 13, PITH_GATING_SIGMOID, true, .select_bias = true, .favour = -1,
         .shun = -1, .n_group = 6, .topk_group = 3, .scale = 0.5f},
        /* Gemma 4: GELU-tanh experts, per-expert weight scales, the router and experts on their own norms */
        {"GELU-tanh experts", PITH_F32, 40, 52, 8, 2, 19, PITH_GATING_SOFTMAX, true, .favour = -1, .shun = -1,
         .gelu = true},
        {"per-expert weight scales", PITH_F32, 40, 52, 8, 3, 21, PITH_GATING_SOFTMAX, true, .favour = -1, .shun = -1,
         .expert_scale = true},
        {"input norms (router apart)", PITH_F32, 40, 52, 8, 2, 23, PITH_GATING_SOFTMAX, true, .favour = -1,
         .shun = -1, .in_norm = true},
        {"Gemma 4: all three", PITH_F32, 40, 52, 16, 4, 27, PITH_GATING_SOFTMAX, true, .favour = -1, .shun = -1,
         .gelu = true, .expert_scale = true, .in_norm = true},
        {"Q8_0 Gemma 4: all three", PITH_Q8_0, 64, 96, 8, 2, 31, PITH_GATING_SOFTMAX, true, .favour = -1, .shun = -1,
         .gelu = true, .expert_scale = true, .in_norm = true},
    };
    for (int scalar = 0; scalar < 2; scalar++) {
        pith_cpu cpu;
        pith_err err = {0};
        if (pith_cpu_init(&cpu, 2, scalar == 1, &err)) {
            fprintf(stderr, "%s\n", err.msg);
            return 1;
        }
        for (size_t i = 0; i < sizeof specs / sizeof *specs; i++)
            for (int pack = 0; pack < 2; pack++) run_case(&cpu, &specs[i], pack == 1);
        grouped_edges(&cpu);
        pith_cpu_free(&cpu);
    }
    return check_summary("test_moe");
}
