/* The Vulkan backend's mixture-of-experts op (src/backend/vulkan/vk_moe.c, shaders/moe.comp) against the
 * CPU backend's, on the same random layers loaded from an in-memory model file through each backend's
 * moe_load, and the same inputs: out += moe(in), for every gating and activation the supported models
 * use (softmax, and sigmoid with a selection bias, group-limited routing and a routed scale: DeepSeek-V3
 * and GLM-4.5; norm_topk; SiLU, GPT-OSS's clamped SwiGLU with expert biases, GELU-tanh with per-expert
 * scales; a shared expert with and without its gate), every expert type the device reads (F32 with
 * widths that are not multiples of 32, F16, BF16, Q8_0, Q4_0, Q4_K with Q6_K downs, Q5_K, MXFP4, IQ4_NL,
 * IQ4_XS with Q4_K downs), stacked
 * 3-D and per-expert tensors, and the awkward routings: an expert no token picks, every token on one
 * expert, top_k == n_experts, one token, 7, and a batch of 40. Each case runs the device's grouped form
 * (the default: tokens sorted by expert on the device) and its per-(token, rank) form (PITH_VK_MOE=token),
 * which must give the same bits.
 *
 * The reference is the CPU backend on the F32 path: a second file holds the same layer with every expert
 * dequantized to F32 (the CPU's quantized kernels round the activations to 8 bits first, the shaders do
 * not), so only float32 arithmetic in another order separates the two, and the routing is the same
 * (router and input identical; random scores are far from ties). Tolerance: 1e-5 of the output's largest
 * magnitude (sums of at most a few hundred products, each side within (terms) u of the exact; measured
 * ~1e-7), where a wrong expert, weight or bias moves outputs by their whole scale. Gemma 4's input norms
 * (the router and the experts each reading their RMS norm of the input) in F32 and Q4_K; a gated shared
 * expert with them (no model has one) is refused at load, naming what.
 * Skips (77) when no Vulkan device can run pith here. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/quants.h"
#include "backend/info.h"
#include "check.h"
#include "format/modelfile_internal.h"
#include "quant_ref.h"

typedef struct spec {
    const char *name;
    pith_dtype type, down_type; /* down_type 0 (F32): as type, unless type is F32 */
    int dim, ffn, E, K;
    pith_expert_gating gating;
    bool norm, select_bias, shared, shared_gate, biases, split, escale;
    pith_moe_act act;
    int favour, shun;           /* -1: none */
    int n_group, topk_group;
    float scale;
    bool in_norm;               /* Gemma 4: the router and the experts read their norms of the input */
} spec;

/* the data of the model files, freed with the case */
typedef struct files {
    pith_model_file *dev, *ref;
    void *owned[64];
    int n_owned;
} files;

static void *keep(files *fs, void *p) {
    fs->owned[fs->n_owned++] = p;
    return p;
}

static float *randv(files *fs, size_t n, float lo, float hi) {
    float *v = keep(fs, malloc(n * sizeof *v));
    for (size_t i = 0; i < n; i++) v[i] = rnd_uniform(lo, hi);
    return v;
}

/* n values of type t: floats rounded, random blocks of sane scales; MXFP4 scales 2^-8..2^-3 */
static uint8_t *random_data(files *fs, pith_dtype t, int64_t n) {
    size_t bytes = pith_dtype_row_bytes(t, n);
    uint8_t *d = keep(fs, malloc(bytes));
    if (t == PITH_F32 || t == PITH_F16 || t == PITH_BF16) {
        float *x = malloc((size_t)n * sizeof *x);
        for (int64_t i = 0; i < n; i++) x[i] = rnd_uniform(-0.3f, 0.3f);
        ref_quantize(t, x, (int)n, d);
        free(x);
    } else if (t == PITH_MXFP4) {
        for (size_t i = 0; i < bytes; i++) d[i] = (uint8_t)rnd_u64();
        for (int64_t b = 0; b < n / 32; b++) d[b * 17] = (uint8_t)(120 + rnd_u64() % 6);
    } else {
        random_blocks(t, (int)n, d);
    }
    return d;
}

static void add(files *fs, pith_model_file *f, const char *name, pith_dtype t, int64_t ne0, int64_t ne1, int64_t ne2,
                const void *data) {
    pith_tensor tt = {.name = name, .type = t, .n_dims = ne2 > 1 ? 3 : ne1 > 1 ? 2 : 1, .ne = {ne0, ne1, ne2, 1},
                      .data = data, .nbytes = pith_dtype_row_bytes(t, ne0 * ne1 * ne2)};
    pith_err err;
    CHECKF(pith_mf_add_tensor(f, &tt, 1, &err) == 0, "%s", err.msg);
    (void)fs;
}

/* A matrix kind of the experts (E x rows x cols of type t) into both files: the device's in t, the
 * reference's in F32, stacked or one tensor per expert. */
static void add_experts(files *fs, const spec *s, const char *kind, pith_dtype t, int rows, int cols) {
    int64_t per = (int64_t)rows * cols;
    uint8_t *q = random_data(fs, t, per * s->E);
    float *f = keep(fs, malloc((size_t)(per * s->E) * sizeof *f));
    pith_dequantize_row(t, q, f, per * s->E);
    char name[96];
    if (!s->split) {
        snprintf(name, sizeof name, "blk.0.ffn_%s_exps.weight", kind);
        add(fs, fs->dev, name, t, cols, rows, s->E, q);
        add(fs, fs->ref, name, PITH_F32, cols, rows, s->E, f);
        return;
    }
    size_t qb = pith_dtype_row_bytes(t, per);
    for (int e = 0; e < s->E; e++) {
        snprintf(name, sizeof name, "blk.0.ffn_%s.%d.weight", kind, e);
        add(fs, fs->dev, name, t, cols, rows, 1, q + (size_t)e * qb);
        add(fs, fs->ref, name, PITH_F32, cols, rows, 1, f + (size_t)e * per);
    }
}

static void add_both(files *fs, const char *name, int64_t ne0, int64_t ne1, const float *v) {
    add(fs, fs->dev, name, PITH_F32, ne0, ne1, 1, v);
    add(fs, fs->ref, name, PITH_F32, ne0, ne1, 1, v);
}

static pith_moe_config config_of(const spec *s) {
    return (pith_moe_config){.dim = s->dim, .n_experts = s->E, .top_k = s->K, .ffn = s->ffn,
                             .shared_ffn = s->shared ? (s->type == PITH_F32 ? 45 : 64) : 0, .gating = s->gating,
                             .norm_topk = s->norm, .n_group = s->n_group, .topk_group = s->topk_group,
                             .routed_scale = s->scale, .act = s->act, .clamp_alpha = 1.702f, .clamp_limit = 7.0f,
                             .in_norm_eps = s->in_norm ? 1e-6f : 0};
}

static void build(files *fs, const spec *s) {
    memset(fs, 0, sizeof *fs);
    fs->dev = calloc(1, sizeof *fs->dev);
    fs->ref = calloc(1, sizeof *fs->ref);
    pith_moe_config c = config_of(s);
    add_both(fs, "blk.0.ffn_gate_inp.weight", s->dim, s->E, randv(fs, (size_t)s->dim * s->E, -1, 1));
    if (s->favour >= 0 || s->shun >= 0) {
        float *b = keep(fs, calloc((size_t)s->E, sizeof(float)));
        if (s->favour >= 0) b[s->favour] = 60.0f;
        if (s->shun >= 0) b[s->shun] = -60.0f;
        add_both(fs, "blk.0.ffn_gate_inp.bias", s->E, 1, b);
    }
    if (s->in_norm) {
        add_both(fs, "blk.0.pre_ffw_norm_2.weight", s->dim, 1, randv(fs, (size_t)s->dim, 0.5f, 1.5f));
        add_both(fs, "blk.0.ffn_gate_inp.scale", s->dim, 1, randv(fs, (size_t)s->dim, 0.5f, 1.5f));
    }
    if (s->select_bias) add_both(fs, "blk.0.exp_probs_b.bias", s->E, 1, randv(fs, (size_t)s->E, -0.3f, 0.3f));
    if (s->escale) add_both(fs, "blk.0.ffn_down_exps.scale", s->E, 1, randv(fs, (size_t)s->E, 0.5f, 2.5f));
    pith_dtype dt = s->down_type != PITH_F32 ? s->down_type : s->type;
    add_experts(fs, s, "gate", s->type, s->ffn, s->dim);
    add_experts(fs, s, "up", s->type, s->ffn, s->dim);
    add_experts(fs, s, "down", dt, s->dim, s->ffn);
    if (s->biases) {
        add_both(fs, "blk.0.ffn_gate_exps.bias", s->ffn, s->E, randv(fs, (size_t)s->ffn * s->E, -0.5f, 0.5f));
        add_both(fs, "blk.0.ffn_up_exps.bias", s->ffn, s->E, randv(fs, (size_t)s->ffn * s->E, -0.5f, 0.5f));
        add_both(fs, "blk.0.ffn_down_exps.bias", s->dim, s->E, randv(fs, (size_t)s->dim * s->E, -0.5f, 0.5f));
    }
    if (s->shared) {
        const int sh = c.shared_ffn;
        const char *names[3] = {"blk.0.ffn_gate_shexp.weight", "blk.0.ffn_up_shexp.weight", "blk.0.ffn_down_shexp.weight"};
        for (int k = 0; k < 3; k++) {
            int rows = k == 2 ? s->dim : sh, cols = k == 2 ? sh : s->dim;
            uint8_t *q = random_data(fs, s->type, (int64_t)rows * cols);
            float *f = keep(fs, malloc((size_t)rows * cols * sizeof *f));
            pith_dequantize_row(s->type, q, f, (int64_t)rows * cols);
            add(fs, fs->dev, names[k], s->type, cols, rows, 1, q);
            add(fs, fs->ref, names[k], PITH_F32, cols, rows, 1, f);
        }
        if (s->shared_gate) add_both(fs, "blk.0.ffn_gate_inp_shexp.weight", s->dim, 1, randv(fs, (size_t)s->dim, -0.5f, 0.5f));
    }
}

static void unbuild(files *fs) {
    pith_model_file_close(fs->dev);
    pith_model_file_close(fs->ref);
    for (int i = 0; i < fs->n_owned; i++) free(fs->owned[i]);
}

enum { NMAX = 40 };

/* One backend: the layer loaded, buffers in and out, a step of n tokens, the op, the output rows. */
static int run(const char *device, pith_model_file *f, const pith_moe_config *cfg, const float *x, const float *y0,
               int n, float *y, pith_err *err) {
    pith_backend *be = NULL;
    pith_moe_weights *w = NULL;
    char what[256];
    int rc = pith_backend_create(device, 1, &be, err);
    if (!rc) rc = be->vt->moe_load(be, f, 0, cfg, NULL, &w, err);
    if (!rc) rc = be->vt->moe_place(be, what, sizeof what, err);
    pith_buf *in = rc ? NULL : pith_be_buffer(be, cfg->dim, err), *out = rc || !in ? NULL : pith_be_buffer(be, cfg->dim, err);
    if (!rc && (!in || !out)) rc = -1;
    if (!rc) rc = pith_be_reserve(be, NMAX, err);
    int32_t tok[NMAX], pos[NMAX], seq[NMAX];
    uint8_t want[NMAX] = {0};
    for (int t = 0; t < n; t++) tok[t] = 0, pos[t] = t, seq[t] = 0;
    pith_batch b = {.n_tokens = n, .tokens = tok, .positions = pos, .seq = seq, .want_logits = want, .n_seqs = 1};
    pith_mem_spec spec = {.n_groups = 0};
    float logits[1];
    if (!rc) rc = be->vt->set_step(be, &b, &spec, 1, logits, err);
    if (!rc) rc = be->vt->buf_write(be, in, n, x, err) || be->vt->buf_write(be, out, n, y0, err);
    if (!rc) rc = pith_be_moe(be, w, in, out, n, err);
    if (!rc) rc = be->vt->sync(be, err) || be->vt->buf_read(be, out, n, y, err);
    pith_backend_free(be);
    return rc ? -1 : 0;
}

static double worst_case;

static void check_case(const spec *s) {
    files fs;
    build(&fs, s);
    pith_moe_config cfg = config_of(s);
    static const int ns[] = {1, 7, NMAX};
    for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++) {
        int n = ns[ni];
        size_t m = (size_t)n * s->dim;
        float *x = malloc(m * 4), *y0 = malloc(m * 4), *ya = malloc(m * 4), *yb = malloc(m * 4);
        for (size_t i = 0; i < m; i++) x[i] = rnd_uniform(-1, 1), y0[i] = rnd_uniform(-1, 1);
        pith_err err;
        int ra = run("cpu", fs.ref, &cfg, x, y0, n, ya, &err);
        CHECKF(ra == 0, "%s n=%d on the CPU: %s", s->name, n, err.msg);
        int rb = run("vulkan", fs.dev, &cfg, x, y0, n, yb, &err);
        CHECKF(rb == 0, "%s n=%d on Vulkan: %s", s->name, n, err.msg);
        /* the per-(token, rank) form: the same sums in the same order, so the same bits */
        float *yt = malloc(m * 4);
        setenv("PITH_VK_MOE", "token", 1);
        int rt = run("vulkan", fs.dev, &cfg, x, y0, n, yt, &err);
        unsetenv("PITH_VK_MOE");
        CHECKF(rt == 0, "%s n=%d on Vulkan by token: %s", s->name, n, err.msg);
        if (!rb && !rt) CHECKF(!memcmp(yb, yt, m * 4), "%s n=%d: the grouped and per-token forms differ", s->name, n);
        free(yt);
        if (!ra && !rb) {
            double mx = 0, d = 0;
            for (size_t i = 0; i < m; i++) {
                mx = fmax(mx, fabs(ya[i]));
                d = fmax(d, fabs((double)ya[i] - yb[i]));
            }
            double rel = d / fmax(mx, 1e-30);
            worst_case = fmax(worst_case, rel);
            printf("%-34s n=%2d: max |vulkan - cpu| %.2e (of max |y| %.3g: %.1e)\n", s->name, n, d, mx, rel);
            CHECKF(rel <= 1e-5, "%s n=%d: Vulkan differs from the CPU by %.3e of the output's scale", s->name, n, rel);
        }
        free(x), free(y0), free(ya), free(yb);
    }
    unbuild(&fs);
}

static void check_refusal(const spec *s, pith_moe_config cfg, const char *want) {
    files fs;
    build(&fs, s);
    pith_backend *be = NULL;
    pith_moe_weights *w = NULL;
    pith_err err;
    CHECK(pith_backend_create("vulkan", 0, &be, &err) == 0);
    int rc = be ? be->vt->moe_load(be, fs.dev, 0, &cfg, NULL, &w, &err) : 0;
    printf("%s: refused: %s\n", s->name, rc ? err.msg : "(loaded)");
    CHECKF(rc != 0 && strstr(err.msg, want), "%s: expected a refusal naming %s", s->name, want);
    pith_backend_free(be);
    unbuild(&fs);
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
    const pith_expert_gating SM = PITH_GATING_SOFTMAX, SG = PITH_GATING_SIGMOID;
    static spec cases[22];
    int nc = 0;
    /* name, type, down, dim, ffn, E, K, gating, norm, sbias, shared, sgate, biases, split, escale, act, favour, shun, groups */
    cases[nc++] = (spec){"F32 softmax (Mixtral)", PITH_F32, PITH_F32, 40, 70, 8, 2, SM, true, 0, 0, 0, 0, 0, 0, PITH_MOE_SILU, -1, -1, 0, 0, 0, false};
    cases[nc++] = (spec){"F32 softmax, no norm_topk (Qwen2-MoE)", PITH_F32, PITH_F32, 64, 32, 8, 3, SM, false, 0, 1, 1, 0, 0, 0, PITH_MOE_SILU, -1, -1, 0, 0, 0, false};
    cases[nc++] = (spec){"F32 sigmoid, groups, scale (DeepSeek-V3)", PITH_F32, PITH_F32, 64, 40, 16, 4, SG, true, 1, 1, 0, 0, 0, 0, PITH_MOE_SILU, -1, -1, 4, 2, 2.5f, false};
    cases[nc++] = (spec){"F32 softmax groups (DeepSeek-V2)", PITH_F32, PITH_F32, 32, 32, 16, 3, SM, false, 0, 0, 0, 0, 0, 0, PITH_MOE_SILU, -1, -1, 8, 3, 16.0f, false};
    cases[nc++] = (spec){"F32 top_k == n_experts", PITH_F32, PITH_F32, 32, 64, 4, 4, SM, true, 0, 0, 0, 0, 0, 0, PITH_MOE_SILU, -1, -1, 0, 0, 0, false};
    cases[nc++] = (spec){"F32 all on one, one shunned", PITH_F32, PITH_F32, 32, 64, 8, 2, SM, true, 0, 0, 0, 0, 0, 0, PITH_MOE_SILU, 3, 5, 0, 0, 0, false};
    cases[nc++] = (spec){"F32 clamped SwiGLU, biases (GPT-OSS)", PITH_F32, PITH_F32, 64, 64, 8, 2, SM, true, 0, 0, 0, 1, 0, 0, PITH_MOE_SWIGLU_CLAMP, -1, -1, 0, 0, 0, false};
    cases[nc++] = (spec){"F32 GELU-tanh, expert scales", PITH_F32, PITH_F32, 64, 32, 8, 2, SM, true, 0, 0, 0, 0, 0, 1, PITH_MOE_GELU_TANH, -1, -1, 0, 0, 0, false};
    cases[nc++] = (spec){"F16 per-expert tensors", PITH_F16, PITH_F32, 64, 64, 4, 2, SM, true, 0, 0, 0, 0, 1, 0, PITH_MOE_SILU, -1, -1, 0, 0, 0, false};
    cases[nc++] = (spec){"BF16 shared expert gated", PITH_BF16, PITH_F32, 64, 64, 4, 2, SM, true, 0, 1, 1, 0, 0, 0, PITH_MOE_SILU, -1, -1, 0, 0, 0, false};
    cases[nc++] = (spec){"Q8_0 shared (ungated)", PITH_Q8_0, PITH_F32, 64, 64, 8, 2, SM, true, 0, 1, 0, 0, 0, 0, PITH_MOE_SILU, -1, -1, 0, 0, 0, false};
    cases[nc++] = (spec){"Q4_0 per-expert tensors", PITH_Q4_0, PITH_F32, 64, 96, 8, 2, SM, false, 0, 0, 0, 0, 1, 0, PITH_MOE_SILU, -1, -1, 0, 0, 0, false};
    cases[nc++] = (spec){"Q4_K gate/up, Q6_K down", PITH_Q4_K, PITH_Q6_K, 256, 256, 4, 2, SM, true, 0, 0, 0, 0, 0, 0, PITH_MOE_SILU, -1, -1, 0, 0, 0, false};
    cases[nc++] = (spec){"Q5_K", PITH_Q5_K, PITH_F32, 256, 256, 4, 2, SG, true, 1, 0, 0, 0, 0, 0, PITH_MOE_SILU, -1, -1, 0, 0, 0, false};
    cases[nc++] = (spec){"MXFP4 clamped SwiGLU (GPT-OSS)", PITH_MXFP4, PITH_F32, 64, 128, 8, 2, SM, true, 0, 0, 0, 1, 0, 0, PITH_MOE_SWIGLU_CLAMP, -1, -1, 0, 0, 0, false};
    cases[nc++] = (spec){"IQ4_NL", PITH_IQ4_NL, PITH_F32, 64, 64, 4, 2, SM, true, 0, 0, 0, 0, 0, 0, PITH_MOE_SILU, -1, -1, 0, 0, 0, false};
    cases[nc++] = (spec){"IQ4_XS gate/up, Q4_K down", PITH_IQ4_XS, PITH_Q4_K, 256, 256, 4, 2, SM, true, 0, 0, 0, 0, 0, 0, PITH_MOE_SILU, -1, -1, 0, 0, 0, false};
    cases[nc++] = (spec){"F32 input norms, scales (Gemma 4)", PITH_F32, PITH_F32, 64, 32, 8, 2, SM, true, 0, 0, 0, 0, 0, 1, PITH_MOE_GELU_TANH, -1, -1, 0, 0, 0, true};
    cases[nc++] = (spec){"Q4_K input norms (Gemma 4)", PITH_Q4_K, PITH_F32, 256, 256, 8, 2, SM, true, 0, 0, 0, 0, 0, 1, PITH_MOE_GELU_TANH, -1, -1, 0, 0, 0, true};
    for (int i = 0; i < nc; i++) check_case(&cases[i]);
    printf("worst: %.2e of the output's scale\n", worst_case);

    spec g4 = {"gated shared expert with input norms", PITH_F32, PITH_F32, 32, 32, 4, 2, SM, true, 0, 1, 1, 0, 0, 0, PITH_MOE_GELU_TANH, -1, -1, 0, 0, 0, true};
    check_refusal(&g4, config_of(&g4), "gated shared expert with input norms");
    return check_summary("test_vulkan_moe");
}
