/* The Vulkan backend's ops, one at a time, against the CPU backend and a float64 reference, on awkward
 * shapes: widths that are not multiples of 32 (the device pads float rows), one row and many (matrix-
 * vector and tiled products), several products in one call with one accumulating, every weight type the
 * device multiplies (F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS) as raw random GGUF blocks. Both
 * backends run the same step (one sequence of n tokens over a small KV pool); inputs go in with
 * buf_write and results come back with buf_read. The ops that read the KV pool and the step's
 * positions (qkv, attention, rope tables, head) are checked end to end instead: every dense
 * architecture against its float64 reference on this backend (tests/test_vulkan_models.py).
 *
 * Tolerances (u = 2^-24, float32's unit roundoff):
 *   - products: |y - y64| <= (cols + 8) u sum_k |x_k w_k| + 1e-30, the bound of float32 summation in any
 *     order (plus the dequantization's own rounding, a few u) against the float64 product of the
 *     weights as the CPU's dequantizer reads them. The CPU backend's float kernels meet the same bound;
 *     its quantized kernels round the activations to 8 bits first (quants.h), so they are held to
 *     sum_k |w_k| max|x| / 254 more, the rounding of one 8-bit activation block.
 *   - RMSNorm (alone and with the residual): a sum of squares of `cols` terms in another order, then a
 *     reciprocal square root: |a - b| <= (cols + 16) u |b| + 1e-6 |w|.
 *   - SiLU and GELU(tanh) gates: exp and tanh on the device are within a few ulp, amplified at most 4x
 *     by the gate: |a - b| <= 1e-5 (|b| + 1e-3).
 *   - embedding rows, relu^2, bias, scale, x += s y, zero and moving rows: 2 ulp (one rounding each
 *     side, an FMA contracted or not).
 *   - copy_cols: exact.
 * Out of device memory: a KV pool larger than the device holds is refused with its size, and the same
 * backend then allocates a pool that fits. Skips (77) when no Vulkan device can run pith here. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/quants.h"
#include "backend/info.h"
#include "check.h"
#include "quant_ref.h"

enum { NMAX = 40, BS = 16, NBLK = 8, VOCAB = 50, KV_DIM = 64 };

static uint8_t *parked[256]; /* weight data the backends may view, freed after them */
static int n_parked;

static float *randv(size_t n, float lo, float hi) {
    float *v = malloc(n * sizeof *v);
    for (size_t i = 0; v && i < n; i++) v[i] = rnd_uniform(lo, hi);
    return v;
}

/* rows x cols of random weights of `type` in the file's layout (malloc'd): float types rounded from
 * uniform values, block types as random blocks with finite scales (quant_ref.h) */
static uint8_t *random_weights(pith_dtype type, int rows, int cols, size_t *nbytes) {
    int64_t n = (int64_t)rows * cols;
    *nbytes = pith_dtype_row_bytes(type, n);
    uint8_t *d = malloc(*nbytes);
    if (!d) return NULL;
    if (type == PITH_F32 || type == PITH_F16 || type == PITH_BF16) {
        float *x = randv((size_t)n, -1, 1);
        if (!x) return free(d), NULL;
        ref_quantize(type, x, (int)n, d);
        free(x);
    } else {
        random_blocks(type, (int)n, d);
    }
    return d;
}

/* Both backends, with the same buffers (by index) and weights. */
typedef struct side {
    const char *name;
    pith_backend *be;
} side;

enum { MAX_BUFS = 24, MAX_W = 64 };
static const int widths[] = {1, 7, 33, 70, 96, 100, 256, 512, 768};
enum { N_WIDTHS = sizeof widths / sizeof widths[0] };

typedef struct rig {
    side s[2];
    pith_buf *buf[2][N_WIDTHS][3]; /* three buffers of each width */
    int32_t tok[NMAX], pos[NMAX], seq[NMAX], slot[NMAX], table[NBLK];
    uint8_t want[NMAX];
    pith_batch_mem bm;
    pith_batch b;
    pith_mem_spec spec;
    int layer0;
    float logits[NMAX * VOCAB];
} rig;

static int width_index(int cols) {
    for (int i = 0; i < N_WIDTHS; i++)
        if (widths[i] == cols) return i;
    return -1;
}
static pith_buf *B(rig *r, int side, int cols, int which) { return r->buf[side][width_index(cols)][which]; }

static int rig_open(rig *r, pith_err *err) {
    memset(r, 0, sizeof *r);
    r->s[0].name = "cpu", r->s[1].name = "vulkan";
    if (pith_backend_create("cpu", 1, &r->s[0].be, err) || pith_backend_create("vulkan", 0, &r->s[1].be, err))
        return -1;
    r->spec.n_groups = 1;
    r->spec.groups[0] = (pith_mem_group){.kind = PITH_MEM_FULL, .n_layers = 1, .layers = &r->layer0,
                                         .type = PITH_F16, .k_dim = KV_DIM, .v_dim = KV_DIM};
    pith_mem_layout lay = {.block_size = BS, .n_groups = 1, .n_blocks = {NBLK}, .type = {PITH_F16}};
    pith_be_attn_shape shape = {.n_heads = 4, .n_kv_heads = 2, .head_dim = 32, .scale = 0.125f};
    for (int s = 0; s < 2; s++) {
        pith_backend *be = r->s[s].be;
        if (be->vt->attn_shape(be, &shape, err)) return -1;
        for (int w = 0; w < N_WIDTHS; w++)
            for (int k = 0; k < 3; k++)
                if (!(r->buf[s][w][k] = pith_be_buffer(be, widths[w], err))) return -1;
        if (pith_be_reserve(be, NMAX, err) || be->vt->mem_alloc(be, &r->spec, &lay, err)) return -1;
    }
    for (int i = 0; i < NBLK; i++) r->table[i] = i;
    return 0;
}

static void rig_close(rig *r) {
    for (int s = 0; s < 2; s++) pith_backend_free(r->s[s].be);
}

/* A step of one sequence of n tokens (positions 0..n-1); rows 1, n/2 and n-1 want logits. */
static int step(rig *r, int n, pith_err *err) {
    for (int t = 0; t < n; t++) {
        r->tok[t] = (int32_t)(rnd_u64() % VOCAB), r->pos[t] = t, r->seq[t] = 0, r->slot[t] = t;
        r->want[t] = t == 1 || t == n / 2 || t == n - 1;
    }
    r->bm = (pith_batch_mem){.slots = r->slot, .block_tables = r->table, .max_blocks = NBLK};
    r->b = (pith_batch){.n_tokens = n, .tokens = r->tok, .positions = r->pos, .seq = r->seq,
                        .want_logits = r->want, .n_seqs = 1, .n_groups = 1, .mem = &r->bm};
    for (int s = 0; s < 2; s++)
        if (r->s[s].be->vt->set_step(r->s[s].be, &r->b, &r->spec, VOCAB, r->logits, err)) return -1;
    return 0;
}

/* the same rows into buffer `which` of width cols on both sides */
static int put(rig *r, int cols, int which, int n, const float *x, pith_err *err) {
    for (int s = 0; s < 2; s++)
        if (r->s[s].be->vt->buf_write(r->s[s].be, B(r, s, cols, which), n, x, err)) return -1;
    return 0;
}
static int get(rig *r, int s, int cols, int which, int n, float *y, pith_err *err) {
    pith_backend *be = r->s[s].be;
    return be->vt->sync(be, err) || be->vt->buf_read(be, B(r, s, cols, which), n, y, err) ? -1 : 0;
}


static bool within_ulps(float a, float b, int ulps) {
    return fabsf(a - b) <= (float)ulps * ldexpf(fabsf(b), -23) + 1e-30f;
}

/* ---- products ---- */

typedef struct mm_case {
    pith_dtype type;
    int rows, cols;
} mm_case;

/* The Vulkan products of the first kernel kind, by case and row count: every kind must give the same
 * bits (they add in one order: matmul.comp). */
enum { MAX_MM_CASES = 32, N_NS = 5 };
static float *first_kind[MAX_MM_CASES][N_NS][2];

static void check_matmul(rig *r, const mm_case *mc, int case_index, const char *kind) {
    pith_err err;
    const char *tn = pith_dtype_name(mc->type);
    size_t nbytes[2];
    uint8_t *raw[2] = {random_weights(mc->type, mc->rows, mc->cols, &nbytes[0]),
                       random_weights(mc->type, mc->rows, mc->cols, &nbytes[1])};
    float *deq = malloc(2 * (size_t)mc->rows * mc->cols * sizeof *deq);
    pith_weight *w[2][2] = {{0}};
    bool ok = raw[0] && raw[1] && deq;
    for (int k = 0; ok && k < 2; k++) {
        pith_tensor t = {.name = "w", .type = mc->type, .n_dims = 2, .ne = {mc->cols, mc->rows, 1, 1},
                         .data = raw[k], .nbytes = nbytes[k]};
        for (int s = 0; s < 2 && ok; s++) {
            ok = r->s[s].be->vt->matrix(r->s[s].be, &t, "w", &w[s][k], &err) == 0;
            CHECKF(ok, "%s %dx%d on %s: %s", tn, mc->rows, mc->cols, r->s[s].name, err.msg);
        }
        pith_dequantize_row(mc->type, raw[k], deq + (size_t)k * mc->rows * mc->cols, (int64_t)mc->rows * mc->cols);
    }
    static const int ns[N_NS] = {1, 2, 5, 17, NMAX};
    for (int ni = 0; ok && ni < (int)(sizeof ns / sizeof *ns); ni++) {
        int n = ns[ni];
        float *x = randv((size_t)n * mc->cols, -1, 1), *acc = randv((size_t)n * mc->rows, -1, 1);
        float *y[2][2] = {{malloc((size_t)n * mc->rows * 4), malloc((size_t)n * mc->rows * 4)},
                          {malloc((size_t)n * mc->rows * 4), malloc((size_t)n * mc->rows * 4)}};
        if (step(r, n, &err) || put(r, mc->cols, 0, n, x, &err) || put(r, mc->rows, 1, n, acc, &err)) {
            CHECKF(0, "%s: setting up: %s", tn, err.msg);
            ok = false;
        }
        for (int s = 0; ok && s < 2; s++) {
            pith_be_mm outs[2] = {{w[s][0], B(r, s, mc->rows, 2), false}, {w[s][1], B(r, s, mc->rows, 1), true}};
            int rc = pith_be_matmul(r->s[s].be, B(r, s, mc->cols, 0), outs, 2, n, &err);
            if (!rc) rc = get(r, s, mc->rows, 2, n, y[s][0], &err) || get(r, s, mc->rows, 1, n, y[s][1], &err);
            CHECKF(rc == 0, "%s matmul on %s: %s", tn, r->s[s].name, err.msg);
            ok = rc == 0;
        }
        bool quantized = mc->type != PITH_F32 && mc->type != PITH_F16 && mc->type != PITH_BF16;
        double worst[2] = {0, 0};
        for (int t = 0; ok && t < n; t++) {
            float xmax = 0;
            for (int c = 0; c < mc->cols; c++) xmax = fmaxf(xmax, fabsf(x[(size_t)t * mc->cols + c]));
            for (int k = 0; k < 2; k++)
                for (int o = 0; o < mc->rows; o++) {
                    const float *wr = deq + ((size_t)k * mc->rows + o) * mc->cols, *xr = x + (size_t)t * mc->cols;
                    double ref = k ? acc[(size_t)t * mc->rows + o] : 0, mag = 0, wabs = 0;
                    for (int c = 0; c < mc->cols; c++) {
                        ref += (double)xr[c] * wr[c];
                        mag += fabs((double)xr[c] * wr[c]);
                        wabs += fabs(wr[c]);
                    }
                    double tol = (mc->cols + 8) * ldexp(1, -24) * (mag + (k ? fabs(acc[(size_t)t * mc->rows + o]) : 0)) + 1e-30;
                    for (int s = 0; s < 2; s++) {
                        double stol = tol + (s == 0 && quantized ? wabs * xmax / 254 : 0);
                        double e = fabs(y[s][k][(size_t)t * mc->rows + o] - ref);
                        if (e / stol > worst[s]) worst[s] = e / stol;
                    }
                }
        }
        CHECKF(!ok || worst[1] <= 1, "%s %dx%d, %d rows, %s kernels: the Vulkan product is off by %.2f of its bound",
               tn, mc->rows, mc->cols, n, kind, worst[1]);
        for (int k = 0; ok && k < 2; k++) {
            size_t bytes = (size_t)n * mc->rows * sizeof(float);
            float **first = &first_kind[case_index][ni][k];
            if (!*first) {
                if ((*first = malloc(bytes))) memcpy(*first, y[1][k], bytes);
            } else {
                CHECKF(memcmp(*first, y[1][k], bytes) == 0, "%s %dx%d, %d rows: the %s kernels' bits differ from the "
                       "first kind's", tn, mc->rows, mc->cols, n, kind);
            }
        }
        CHECKF(!ok || worst[0] <= 1, "%s %dx%d, %d rows: the CPU product is off by %.2f of its bound", tn, mc->rows,
               mc->cols, n, worst[0]);
        free(x), free(acc);
        for (int s = 0; s < 2; s++) free(y[s][0]), free(y[s][1]);
    }
    free(deq);
    /* the CPU backend may view the raw blocks until it is destroyed: freed after the rig */
    parked[n_parked++] = raw[0], parked[n_parked++] = raw[1];
}

/* ---- elementwise and rows ---- */

static int both_vec(rig *r, int n, float lo, float hi, pith_weight **w, pith_err *err) {
    float *v = randv((size_t)n, lo, hi);
    if (!v) return pith_errf(err, "out of memory");
    for (int s = 0; s < 2; s++) {
        float *copy = malloc((size_t)n * sizeof *copy);
        if (!copy) return free(v), pith_errf(err, "out of memory");
        memcpy(copy, v, (size_t)n * sizeof *copy);
        if (r->s[s].be->vt->vector(r->s[s].be, copy, n, &w[s], err)) return free(v), -1;
    }
    free(v);
    return 0;
}

typedef enum op_kind { OP_RMSNORM, OP_NORM_ADD, OP_GLU_SILU, OP_GLU_GELU, OP_RELU2, OP_BIAS, OP_SCALE, OP_SCALE_ADD,
                       OP_ZERO, OP_KEEP, OP_EMBED } op_kind;
static const char *op_names[] = {"rmsnorm", "norm_add", "glu silu", "glu gelu_tanh", "relu2", "add_bias", "scale",
                                 "scale_add", "zero", "keep_rows", "embed"};

/* Runs op on both sides over n rows of width cols and compares buffer `out` (and for norm_add the
 * normed y too). */
static void check_elementwise(rig *r, op_kind op, int cols, int n, const pith_weight *const wv[2],
                              const pith_weight *const table[2], const char *what) {
    pith_err err;
    size_t sz = (size_t)n * cols;
    float *in0 = randv(sz, -3, 3), *in1 = randv(sz, -3, 3);
    float *out[2][2] = {{malloc(sz * 4), malloc(sz * 4)}, {malloc(sz * 4), malloc(sz * 4)}};
    if (step(r, n, &err) || put(r, cols, 0, n, in0, &err) || put(r, cols, 1, n, in1, &err)) {
        CHECKF(0, "%s: setting up: %s", op_names[op], err.msg);
        goto done;
    }
    for (int s = 0; s < 2; s++) {
        pith_backend *be = r->s[s].be;
        pith_buf *x = B(r, s, cols, 0), *y = B(r, s, cols, 1), *o = B(r, s, cols, 2);
        int res = 0; /* which buffer holds the result */
        switch (op) {
        case OP_RMSNORM: pith_be_rmsnorm(be, x, wv[s], 1e-5f, o, n), res = 2; break;
        case OP_NORM_ADD: be->vt->norm_add(be, x, y, wv[s], 1e-6f, n); break;
        case OP_GLU_SILU: pith_be_glu(be, PITH_GLU_SILU, x, y, n); break;
        case OP_GLU_GELU: pith_be_glu(be, PITH_GLU_GELU_TANH, x, y, n); break;
        case OP_RELU2: be->vt->activation(be, PITH_ACTIVATION_RELU2, x, n); break;
        case OP_BIAS: be->vt->add_bias(be, x, wv[s], n); break;
        case OP_SCALE: be->vt->scale(be, x, 0.377f, n); break;
        case OP_SCALE_ADD: be->vt->scale_add(be, x, y, -1.618f, n); break;
        case OP_ZERO: be->vt->zero(be, x, n); break;
        case OP_KEEP: {
            pith_buf *bufs[2] = {x, y};
            be->vt->keep_rows(be, bufs, 2);
            break;
        }
        case OP_EMBED: pith_be_embed(be, table[s], 0.75f, o, n), res = 2; break;
        }
        int rc = get(r, s, cols, res, n, out[s][0], &err) || get(r, s, cols, 1, n, out[s][1], &err);
        CHECKF(rc == 0, "%s on %s: %s", op_names[op], r->s[s].name, err.msg);
        if (rc) goto done;
    }
    double worst = 0, worst_cpu = 0;
    int n_cmp = op == OP_NORM_ADD || op == OP_KEEP ? 2 : 1;
    for (int k = 0; k < n_cmp; k++)
        for (size_t i = 0; i < sz; i++) {
            float a = out[1][k][i], b = out[0][k][i];
            double tol;
            switch (op) {
            case OP_RMSNORM:
            case OP_NORM_ADD: {
                const float *wvv = wv[0]->vec;
                tol = (cols + 16) * ldexp(1, -24) * fabs(b) + 1e-6 * fabs(wvv[i % (size_t)cols]);
                if (op == OP_NORM_ADD && k == 0) tol += (cols + 16) * ldexp(1, -24) * fabs(b) + 1e-6;
                break;
            }
            case OP_GLU_SILU:
            case OP_GLU_GELU: {
                /* against float64: the exponent's argument rounded (a few ulp of |arg|) moves exp by
                 * that much, plus a few ulp of exp and the division; the CPU's 1 + tanh(u) also loses
                 * tanh's absolute error (an ulp of 1) where tanh(u) is near -1 */
                double g = in0[i], up = in1[i], arg, ref;
                if (op == OP_GLU_SILU) {
                    arg = g;
                    ref = g / (1 + exp(-g)) * up;
                } else {
                    arg = 2 * 0.7978845608028654 * (g + 0.044715 * g * g * g);
                    ref = 0.5 * g * (1 + tanh(arg / 2)) * up;
                }
                double tol_vk = 1e-6 * (1 + fabs(arg)) * fabs(ref) + 1e-30;
                double tol_cpu = tol_vk + (op == OP_GLU_GELU ? 2 * ldexp(1, -24) * fabs(g * up) : 0);
                double ecpu = fabs(b - ref);
                if (!(ecpu <= tol_cpu)) worst_cpu = fmax(worst_cpu, ecpu / tol_cpu);
                b = (float)ref;
                tol = tol_vk;
                break;
            }
            default: tol = within_ulps(a, b, 2) ? INFINITY : 0; break;
            }
            double e = fabs((double)a - b);
            if (!(e <= tol)) worst = fmax(worst, tol > 0 ? e / tol : INFINITY);
        }
    CHECKF(worst <= 1, "%s, %d rows of %d%s: the Vulkan result is off by %.3g of its tolerance", op_names[op], n,
           cols, what, worst);
    CHECKF(worst_cpu <= 1, "%s, %d rows of %d%s: the CPU result is off by %.3g of its tolerance", op_names[op], n,
           cols, what, worst_cpu);
    if (op == OP_KEEP) { /* the rows that want logits, in order, at the front */
        int kept = 0;
        for (int t = 0; t < n; t++)
            if (r->want[t]) {
                CHECKF(memcmp(out[0][0] + (size_t)kept * cols, in0 + (size_t)t * cols, (size_t)cols * 4) == 0,
                       "keep_rows: row %d is not token %d's", kept, t);
                kept++;
            }
    }
done:
    free(in0), free(in1);
    for (int s = 0; s < 2; s++) free(out[s][0]), free(out[s][1]);
}

/* copy_cols (Gemma 4's per-layer slices): dst = columns [col0, col0 + dst->cols) of src, exactly, on
 * both backends. */
static void check_copy_cols(rig *r, int src_cols, int dst_cols, int col0, int n) {
    pith_err err;
    float *in = randv((size_t)n * src_cols, -3, 3), *out = malloc((size_t)n * dst_cols * sizeof *out);
    int rc = !in || !out || step(r, n, &err) || put(r, src_cols, 0, n, in, &err);
    CHECKF(!rc, "copy_cols: setting up: %s", in && out ? err.msg : "out of memory");
    for (int s = 0; !rc && s < 2; s++) {
        r->s[s].be->vt->copy_cols(r->s[s].be, B(r, s, dst_cols, 2), B(r, s, src_cols, 0), col0, n);
        rc = get(r, s, dst_cols, 2, n, out, &err);
        CHECKF(!rc, "copy_cols on %s: %s", r->s[s].name, err.msg);
        bool same = true;
        for (int t = 0; !rc && t < n; t++)
            same &= memcmp(out + (size_t)t * dst_cols, in + (size_t)t * src_cols + col0, (size_t)dst_cols * 4) == 0;
        CHECKF(rc || same, "copy_cols of columns %d..%d of %d, %d rows on %s: not the source's values", col0,
               col0 + dst_cols, src_cols, n, r->s[s].name);
    }
    free(in), free(out);
}

/* ---- out of device memory ---- */

static void check_oom(void) {
    pith_err err;
    pith_backend *be = NULL;
    if (pith_backend_create("vulkan", 0, &be, &err)) {
        CHECKF(0, "vulkan: %s", err.msg);
        return;
    }
    int layer0 = 0;
    pith_mem_spec spec = {.n_groups = 1};
    /* 2^21 blocks of 64 tokens x 8192 F16 elements: 2 TiB for K alone, past any device */
    spec.groups[0] = (pith_mem_group){.kind = PITH_MEM_FULL, .n_layers = 1, .layers = &layer0, .type = PITH_F16,
                                      .k_dim = 8192, .v_dim = 8192};
    pith_mem_layout huge = {.block_size = 64, .n_groups = 1, .n_blocks = {1 << 21}, .type = {PITH_F16}};
    int rc = be->vt->mem_alloc(be, &spec, &huge, &err);
    CHECKF(rc != 0, "a 2 TiB KV pool was accepted");
    CHECKF(rc == 0 || (strstr(err.msg, "MiB") && strstr(err.msg, "KV pool")),
           "the refusal does not give the sizes: %s", err.msg);
    if (rc) printf("refused as it should be: %s\n", err.msg);
    CHECK(!be->vt->mem_allocated(be));
    pith_mem_layout small = {.block_size = 16, .n_groups = 1, .n_blocks = {4}, .type = {PITH_F16}};
    spec.groups[0].k_dim = spec.groups[0].v_dim = 64;
    rc = be->vt->mem_alloc(be, &spec, &small, &err);
    CHECKF(rc == 0, "after the refusal a small pool failed: %s", err.msg);
    pith_backend_free(be);
}

int main(void) {
    char devs[8192];
    pith_err err;
    pith_backend_list_devices(devs, sizeof devs, &err);
    bool usable = false;
    for (const char *l = devs; (l = strstr(l, "vulkan:")); l++) {
        const char *eol = strchr(l, '\n');
        size_t len = eol ? (size_t)(eol - l) : strlen(l);
        char line[1024];
        snprintf(line, sizeof line, "%.*s", (int)(len < sizeof line ? len : sizeof line - 1), l);
        if (!strstr(line, "cannot run")) usable = true;
    }
    if (!usable) {
        printf("skip: no Vulkan device can run pith here:\n%s", devs);
        return CHECK_SKIP;
    }
    static const mm_case mm[] = {
        {PITH_F32, 1, 7},    {PITH_F32, 33, 100},  {PITH_F32, 70, 256},  {PITH_F16, 1, 7},    {PITH_F16, 33, 100},
        {PITH_F16, 70, 256}, {PITH_BF16, 33, 100}, {PITH_BF16, 70, 256}, {PITH_Q8_0, 1, 96},  {PITH_Q8_0, 70, 512},
        {PITH_Q4_0, 33, 96}, {PITH_Q4_0, 70, 512}, {PITH_Q4_K, 1, 256},  {PITH_Q4_K, 70, 768}, {PITH_Q5_K, 33, 512},
        {PITH_Q5_K, 7, 768}, {PITH_Q6_K, 33, 256}, {PITH_Q6_K, 70, 768}, {PITH_MXFP4, 1, 256}, {PITH_MXFP4, 70, 512},
        {PITH_IQ4_NL, 1, 96}, {PITH_IQ4_NL, 70, 512}, {PITH_IQ4_XS, 33, 256}, {PITH_IQ4_XS, 7, 768},
    };
    /* each product kernel (PITH_VK_MATMUL), on the same weights and inputs */
    static const char *kinds[] = {"rows", "tiles"};
    rig r;
    for (int k = 0; k < 2; k++) {
        setenv("PITH_VK_MATMUL", kinds[k], 1);
        rng_state = 0x9e3779b97f4a7c15ull;
        if (rig_open(&r, &err)) {
            CHECKF(0, "opening the backends: %s", err.msg);
            rig_close(&r);
            return check_summary("test_vulkan_ops");
        }
        for (int i = 0; i < (int)(sizeof mm / sizeof *mm); i++) check_matmul(&r, &mm[i], i, kinds[k]);
        if (k == 0) {
            rig_close(&r);
            for (int i = 0; i < n_parked; i++) free(parked[i]);
            n_parked = 0;
        }
    }
    unsetenv("PITH_VK_MATMUL");

    static const int ecols[] = {7, 33, 256};
    static const int ens[] = {1, 5, NMAX};
    for (int ci = 0; ci < 3; ci++) {
        int cols = ecols[ci];
        pith_weight *wv[2], *bias[2];
        if (both_vec(&r, cols, 0.5f, 1.5f, wv, &err) || both_vec(&r, cols, -1, 1, bias, &err)) {
            CHECKF(0, "vectors: %s", err.msg);
            break;
        }
        for (int ni = 0; ni < 3; ni++) {
            int n = ens[ni];
            const pith_weight *const w2[2] = {wv[0], wv[1]}, *const b2[2] = {bias[0], bias[1]};
            check_elementwise(&r, OP_RMSNORM, cols, n, w2, NULL, "");
            check_elementwise(&r, OP_NORM_ADD, cols, n, w2, NULL, "");
            check_elementwise(&r, OP_GLU_SILU, cols, n, NULL, NULL, "");
            check_elementwise(&r, OP_GLU_GELU, cols, n, NULL, NULL, "");
            check_elementwise(&r, OP_RELU2, cols, n, NULL, NULL, "");
            check_elementwise(&r, OP_BIAS, cols, n, b2, NULL, "");
            check_elementwise(&r, OP_SCALE, cols, n, NULL, NULL, "");
            check_elementwise(&r, OP_SCALE_ADD, cols, n, NULL, NULL, "");
            check_elementwise(&r, OP_ZERO, cols, n, NULL, NULL, "");
            if (n > 2) check_elementwise(&r, OP_KEEP, cols, n, NULL, NULL, "");
        }
    }
    static const pith_dtype ttypes[] = {PITH_F32,  PITH_F16,  PITH_BF16, PITH_Q8_0,  PITH_Q4_0,   PITH_Q4_K,
                                        PITH_Q5_K, PITH_Q6_K, PITH_MXFP4, PITH_IQ4_NL, PITH_IQ4_XS};
    for (int i = 0; i < (int)(sizeof ttypes / sizeof *ttypes); i++) {
        size_t nb;
        uint8_t *raw = random_weights(ttypes[i], VOCAB, 256, &nb);
        pith_weight *tw[2];
        pith_tensor t = {.name = "token_embd.weight", .type = ttypes[i], .n_dims = 2, .ne = {256, VOCAB, 1, 1},
                         .data = raw, .nbytes = nb};
        int rc = 0;
        for (int s = 0; s < 2 && !rc; s++) rc = r.s[s].be->vt->table(r.s[s].be, &t, t.name, &tw[s], &err);
        CHECKF(rc == 0, "%s table: %s", pith_dtype_name(ttypes[i]), err.msg);
        if (!rc) {
            const pith_weight *const t2[2] = {tw[0], tw[1]};
            char what[32];
            snprintf(what, sizeof what, " (%s)", pith_dtype_name(ttypes[i]));
            check_elementwise(&r, OP_EMBED, 256, 17, NULL, t2, what);
        }
        parked[n_parked++] = raw;
    }
    check_copy_cols(&r, 768, 100, 512, 5);
    check_copy_cols(&r, 256, 33, 0, NMAX);
    check_copy_cols(&r, 256, 256, 0, 1);
    rig_close(&r);
    for (int i = 0; i < n_parked; i++) free(parked[i]);
    for (int i = 0; i < MAX_MM_CASES; i++)
        for (int j = 0; j < N_NS; j++) free(first_kind[i][j][0]), free(first_kind[i][j][1]);
    check_oom();
    return check_summary("test_vulkan_ops");
}
