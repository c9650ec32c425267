/* Mixture-of-experts layers on the Vulkan backend: backend.h's moe_load and moe ops (the math:
 * backend/cpu/moe.h; the passes: shaders/moe.comp).
 *
 * Load: backend/moe_file.h finds the layer's tensors in the file as the CPU backend does (GGUF's stacked
 * 3-D experts, fused gate and up, per-expert 2-D and Hugging Face names, GPT-OSS's rearranged experts)
 * as views; each kind of expert matrix goes to the device as one weight of n_experts * rows rows in the
 * file's block format (expert e's rows from row e * rows), the router, the shared expert and every vector
 * as the backend's own weights (so they die with it, as every weight does). The views are dropped after
 * the upload.
 *
 * The op is replay-safe: the routing (each token's experts and weights) is written by the device into
 * the route rows and read back only by the device; the host records the same dispatches for every batch
 * of the same size. The route, hidden, expert-output and sort rows are activation buffers of the backend
 * (grown by reserve with the others), shared by every layer: a layer's op uses them only between its own
 * dispatches.
 *
 * The experts' products, in one of two forms that give the same bits (each dot product adds in one order):
 * grouped (the default): the (token, rank) pairs sorted by expert on the device (a counting sort), then
 * each expert's rows multiplied over its gathered tokens, read once per 8 of them, and a pass that sums
 * each token's expert outputs in rank order; or per (token, rank) (PITH_VK_MOE=token): each invocation
 * multiplies one token's input by one row of its chosen expert. The dispatches' sizes are the batch's
 * and the layer's (experts x rows), never the routing's: the grouped passes read each expert's count
 * from the sort rows, so a replayed step routes anew.
 *
 * Gemma 4's input norms (in_norm_eps > 0): the op's input is the residual; the backend's RMSNorm op makes
 * the experts' input (by pre_ffw_norm_2) and the router's (by ffn_gate_inp.scale, 1 / sqrt(dim) folded
 * into that weight at load) into two more shared rows first.
 *
 * Not here (refused at load, naming what): a router of a block type, gate and up
 * (or the shared expert's) of different types, expert types the shaders lack, more than 1024 experts. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/moe_file.h"
#include "backend/vulkan/vk.h"

struct pith_moe_weights {
    pith_moe_config cfg;
    int layer;
    const pith_weight *router, *gate, *up, *down;
    const pith_weight *router_bias, *select_bias, *expert_scale, *gate_bias, *up_bias, *down_bias;
    const pith_weight *sh_gate, *sh_up, *sh_down, *sh_inp; /* sh_inp: NULL when the shared expert is ungated */
    const pith_weight *in_norm, *router_norm;              /* Gemma 4; router_norm times 1 / sqrt(dim) */
};

struct vk_moe {
    pith_moe_weights **layers;
    int n_layers;
    bool by_token;       /* PITH_VK_MOE=token: the per-(token, rank) form, else the grouped one */
    /* [n][2 top_k + 1] route rows; [n][max(top_k ffn, shared_ffn)] hidden rows; the grouped form's
     * [n][top_k dim] expert outputs and its sort rows (offsets [E + 1], list [n top_k], pos [n top_k]) */
    pith_buf *route, *h, *yg, *sort;
    pith_buf *xn, *xr; /* Gemma 4: the experts' and the router's normed inputs [n][dim] */
};

static const vk_weight *vw(const pith_weight *w) { return w->impl; }
static VkDeviceAddress addr(const pith_weight *w) { return w ? vw(w)->mem.addr : 0; }

static bool device_type(pith_dtype t) {
    switch (t) {
    case PITH_F32: case PITH_F16: case PITH_BF16: case PITH_Q8_0: case PITH_Q4_0: case PITH_Q4_K: case PITH_Q5_K:
    case PITH_Q6_K: case PITH_MXFP4: case PITH_IQ4_NL: case PITH_IQ4_XS: return true;
    default: return false;
    }
}

/* E matrices of one kind (views of the file, or of the CPU loader's own copy) as one stacked weight. */
static int upload_stack(pith_vk *c, const pith_moe_mat *ms, int E, const char *what, const pith_weight **out,
                        pith_err *err) {
    pith_dtype dt = ms[0].type;
    if (!device_type(dt))
        return pith_errf(err, "%s of type %s: not on the Vulkan backend (F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, "
                              "Q6_K, MXFP4, IQ4_NL and IQ4_XS are; --device cpu runs every type)", what, pith_dtype_name(dt));
    size_t rb = ms[0].row_bytes, per = rb * (size_t)ms[0].rows;
    if (rb % 2)
        return pith_errf(err, "%s: rows of %zu bytes (%s) are not whole 16-bit words, as the Vulkan shaders read them",
                         what, rb, pith_dtype_name((pith_dtype)dt));
    if ((uint64_t)per * E / 2 >= (1ull << 32))
        return pith_errf(err, "%s: %.1f GiB in one layer, past the 2^32 words the Vulkan shaders index", what,
                         (double)per * E / (1 << 30));
    bool contiguous = true;
    for (int e = 1; e < E; e++)
        if (ms[e].type != ms[0].type || ms[e].row_bytes != rb || ms[e].rows != ms[0].rows || ms[e].cols != ms[0].cols)
            return pith_errf(err, "%s: experts of different types or shapes", what);
        else if (ms[e].data != ms[0].data + (size_t)e * per)
            contiguous = false;
    uint8_t *copy = NULL;
    if (!contiguous) { /* per-expert tensors: gathered into one stack for the upload */
        if (!(copy = malloc(per * (size_t)E))) return pith_errf(err, "out of memory");
        for (int e = 0; e < E; e++) memcpy(copy + (size_t)e * per, ms[e].data, per);
    }
    pith_tensor t = {.name = what, .type = dt, .n_dims = 2,
                     .ne = {ms[0].cols, (int64_t)ms[0].rows * E, 1, 1}, .data = copy ? copy : ms[0].data,
                     .nbytes = per * (size_t)E};
    pith_weight *w = NULL;
    int rc = c->base.vt->matrix(&c->base, &t, what, &w, err);
    free(copy);
    *out = w;
    return rc;
}

/* A vector the CPU loader made (owned floats, or NULL): handed to the backend, which takes it over. */
static int upload_vec(pith_vk *c, float **v, int n, const pith_weight **out, pith_err *err) {
    *out = NULL;
    if (!*v) return 0;
    pith_weight *w = NULL;
    float *data = *v;
    *v = NULL;
    if (c->base.vt->vector(&c->base, data, n, &w, err)) return -1;
    *out = w;
    return 0;
}

/* The route and hidden rows, wide enough for this layer (a wider layer makes new ones; the old stay
 * with the backend's buffers, unused). */
static int scratch(pith_vk *c, const pith_moe_config *cfg, pith_err *err) {
    int rc = 2 * cfg->top_k + 1;
    int hc = cfg->top_k * cfg->ffn > cfg->shared_ffn ? cfg->top_k * cfg->ffn : cfg->shared_ffn;
    if (!c->moe->route || c->moe->route->cols < rc)
        if (!(c->moe->route = c->base.vt->buffer(&c->base, rc, err))) return -1;
    if (!c->moe->h || c->moe->h->cols < hc)
        if (!(c->moe->h = c->base.vt->buffer(&c->base, hc, err))) return -1;
    int yc = cfg->top_k * cfg->dim, sc = 2 * cfg->top_k + cfg->n_experts + 1;
    if (!c->moe->yg || c->moe->yg->cols < yc)
        if (!(c->moe->yg = c->base.vt->buffer(&c->base, yc, err))) return -1;
    if (!c->moe->sort || c->moe->sort->cols < sc)
        if (!(c->moe->sort = c->base.vt->buffer(&c->base, sc, err))) return -1;
    if (cfg->in_norm_eps > 0) { /* exactly dim wide: the norm op reads rows of its buffer's width */
        if (!c->moe->xn || c->moe->xn->cols != cfg->dim)
            if (!(c->moe->xn = c->base.vt->buffer(&c->base, cfg->dim, err))) return -1;
        if (!c->moe->xr || c->moe->xr->cols != cfg->dim)
            if (!(c->moe->xr = c->base.vt->buffer(&c->base, cfg->dim, err))) return -1;
    }
    return 0;
}

static int load_layer(pith_vk *c, pith_moe_file_layer *L, pith_moe_weights *w, pith_err *err) {
    const pith_moe_config *cfg = &L->cfg;
    const int E = cfg->n_experts;
    char what[96];
    int l = w->layer;
    pith_dtype rt = L->router.type;
    if (rt != PITH_F32 && rt != PITH_F16 && rt != PITH_BF16)
        return pith_errf(err, "layer %d: a router of type %s is not on the Vulkan backend (F32, F16 and BF16 are)", l,
                         pith_dtype_name(rt));
    if (L->gate[0].type != L->up[0].type)
        return pith_errf(err, "layer %d: expert gate and up of different types are not on the Vulkan backend", l);
    snprintf(what, sizeof what, "layer %d: router", l);
    if (upload_stack(c, &L->router, 1, what, &w->router, err)) return -1;
    snprintf(what, sizeof what, "layer %d: expert gates", l);
    if (upload_stack(c, L->gate, E, what, &w->gate, err)) return -1;
    snprintf(what, sizeof what, "layer %d: expert ups", l);
    if (upload_stack(c, L->up, E, what, &w->up, err)) return -1;
    snprintf(what, sizeof what, "layer %d: expert downs", l);
    if (upload_stack(c, L->down, E, what, &w->down, err)) return -1;
    if (upload_vec(c, &L->router_bias, E, &w->router_bias, err) || upload_vec(c, &L->select_bias, E, &w->select_bias, err) ||
        upload_vec(c, &L->expert_scale, E, &w->expert_scale, err) ||
        upload_vec(c, &L->gate_bias, E * cfg->ffn, &w->gate_bias, err) ||
        upload_vec(c, &L->up_bias, E * cfg->ffn, &w->up_bias, err) ||
        upload_vec(c, &L->down_bias, E * cfg->dim, &w->down_bias, err))
        return -1;
    if (cfg->in_norm_eps > 0) {
        if (!L->in_norm || !L->router_norm) return pith_errf(err, "layer %d: the experts' input norms are missing", l);
        const float root = (float)(1.0 / sqrt((double)cfg->dim));
        for (int i = 0; i < cfg->dim; i++) L->router_norm[i] *= root;
        if (upload_vec(c, &L->in_norm, cfg->dim, &w->in_norm, err) ||
            upload_vec(c, &L->router_norm, cfg->dim, &w->router_norm, err))
            return -1;
    }
    if (L->has_shared) {
        if (L->sh_gate.type != L->sh_up.type)
            return pith_errf(err, "layer %d: a shared expert's gate and up of different types are not on the Vulkan "
                                  "backend", l);
        snprintf(what, sizeof what, "layer %d: shared expert gate", l);
        if (upload_stack(c, &L->sh_gate, 1, what, &w->sh_gate, err)) return -1;
        snprintf(what, sizeof what, "layer %d: shared expert up", l);
        if (upload_stack(c, &L->sh_up, 1, what, &w->sh_up, err)) return -1;
        snprintf(what, sizeof what, "layer %d: shared expert down", l);
        if (upload_stack(c, &L->sh_down, 1, what, &w->sh_down, err)) return -1;
        if (L->sh_gate_inp && cfg->in_norm_eps > 0) /* its gate would read the router's norm, not the experts' */
            return pith_errf(err, "layer %d: a gated shared expert with input norms is not on the Vulkan backend", l);
        if (upload_vec(c, &L->sh_gate_inp, cfg->dim, &w->sh_inp, err)) return -1;
    }
    return 0;
}

int pith_vk_moe_load(pith_backend *be, const pith_model_file *f, int layer, const pith_moe_config *cfg,
                     const char *const hf_experts[3], pith_moe_weights **out, pith_err *err) {
    pith_vk *c = pith_vk_of(be);
    *out = NULL;
    if (cfg->n_experts > 1024 || cfg->n_group > 1024) /* moe.comp's shared arrays */
        return pith_errf(err, "Vulkan: %d experts in %d groups (the backend takes up to 1024)", cfg->n_experts,
                         cfg->n_group);
    if (!c->moe) {
        const char *form = getenv("PITH_VK_MOE");
        if (form && *form && strcmp(form, "token") && strcmp(form, "grouped"))
            return pith_errf(err, "PITH_VK_MOE=%s: expected grouped or token", form);
        if (!(c->moe = calloc(1, sizeof *c->moe))) return pith_errf(err, "out of memory");
        c->moe->by_token = form && !strcmp(form, "token");
    }
    pith_moe_weights **grown = realloc(c->moe->layers, (size_t)(c->moe->n_layers + 1) * sizeof *grown);
    if (!grown) return pith_errf(err, "out of memory");
    c->moe->layers = grown;
    pith_moe_weights *w = calloc(1, sizeof *w);
    if (!w) return pith_errf(err, "out of memory");
    c->moe->layers[c->moe->n_layers++] = w;
    w->cfg = *cfg;
    w->layer = layer;
    pith_moe_file_layer L;
    int rc = pith_moe_file_load(f, layer, cfg, hf_experts, &L, err);
    if (!rc) rc = load_layer(c, &L, w, err);
    pith_moe_file_free(&L);
    if (!rc) rc = scratch(c, cfg, err);
    if (rc) return -1;
    *out = w;
    return 0;
}

void pith_vk_moe_free(pith_vk *c) {
    if (!c->moe) return;
    for (int i = 0; i < c->moe->n_layers; i++) free(c->moe->layers[i]);
    free(c->moe->layers);
    free(c->moe);
    c->moe = NULL;
}

/* moe.comp's push constants */
typedef struct {
    uint64_t w, v, x, o, r, a1, a2, a3;
    uint32_t row_words, rows, cols, x_ld, o_ld, r_ld, n, E, K, flags, groups;
    float routed_scale, alpha, limit;
} moe_push;

enum { F_SIGMOID = 4, F_NORM_TOPK = 8, F_SHARED = 16, F_SHARED_GATED = 32 };

static int dispatch(pith_vk *c, pith_vk_shader base, const pith_weight *w, moe_push *p, uint32_t groups,
                    pith_err *err) {
    p->row_words = vw(w)->row_words;
    return pith_vk_dispatch(c, c->cmd, (pith_vk_shader)(base + vw(w)->wtype), p, sizeof *p, groups, 1, err);
}

int pith_vk_moe(pith_backend *be, const pith_moe_weights *w, const pith_buf *in, pith_buf *out, int n, pith_err *err) {
    pith_vk *c = pith_vk_of(be);
    const pith_moe_config *cfg = &w->cfg;
    if (in->cols < cfg->dim || out->cols < cfg->dim)
        return pith_errf(err, "moe: rows of %d and %d for experts of width %d", in->cols, out->cols, cfg->dim);
    if (n <= 0 || c->replaying) return 0;
    if (!c->recording) return pith_errf(err, "Vulkan: an op outside a step");
    if (c->op_failed) return 0; /* the head reports the first failure */
    if (n > c->cap) return pith_errf(err, "moe: %d rows, the buffers hold %d", n, c->cap);
    if (w->in_norm) { /* Gemma 4: the router and the experts each read their norm of the residual */
        if (in->cols != cfg->dim) return pith_errf(err, "moe: input norms over rows of %d, experts of %d", in->cols, cfg->dim);
        be->vt->rmsnorm(be, in, w->router_norm, cfg->in_norm_eps, c->moe->xr, n);
        be->vt->rmsnorm(be, in, w->in_norm, cfg->in_norm_eps, c->moe->xn, n);
    }
    const pith_buf *route = c->moe->route, *h = c->moe->h, *rin = w->in_norm ? c->moe->xr : in;
    if (w->in_norm) in = c->moe->xn;
    VkDeviceAddress ra = ((const vk_buf *)route)->mem.addr, ha = ((const vk_buf *)h)->mem.addr;
    VkDeviceAddress xa = ((const vk_buf *)in)->mem.addr, oa = ((const vk_buf *)out)->mem.addr;
    const uint32_t N = (uint32_t)n, K = (uint32_t)cfg->top_k, dim = (uint32_t)cfg->dim, ffn = (uint32_t)cfg->ffn;
    uint32_t act = cfg->act == PITH_MOE_SWIGLU_CLAMP ? 1u : cfg->act == PITH_MOE_GELU_TANH ? 2u : 0u;
    uint32_t flags = act | (cfg->gating == PITH_GATING_SIGMOID ? F_SIGMOID : 0) | (cfg->norm_topk ? F_NORM_TOPK : 0);
    moe_push base = {.r = ra, .r_ld = (uint32_t)route->cols, .n = N, .E = (uint32_t)cfg->n_experts, .K = K,
                     .flags = flags,
                     .groups = cfg->n_group > 1 ? (uint32_t)cfg->n_group | (uint32_t)cfg->topk_group << 16 : 0,
                     .routed_scale = cfg->routed_scale, .alpha = cfg->clamp_alpha, .limit = cfg->clamp_limit};
    moe_push p = base;
    p.w = addr(w->router), p.v = addr(w->sh_inp), p.x = ((const vk_buf *)rin)->mem.addr, p.a1 = addr(w->router_bias);
    p.a2 = addr(w->select_bias), p.a3 = addr(w->expert_scale), p.rows = (uint32_t)cfg->n_experts, p.cols = dim;
    p.x_ld = (uint32_t)rin->cols;
    if (dispatch(c, PITH_VK_SH_moe_route_f32, w->router, &p, N, err)) return -1;
    if (c->moe->by_token) {
        p = base;
        p.w = addr(w->gate), p.v = addr(w->up), p.x = xa, p.o = ha, p.a1 = addr(w->gate_bias), p.a2 = addr(w->up_bias);
        p.rows = ffn, p.cols = dim, p.x_ld = (uint32_t)in->cols, p.o_ld = (uint32_t)h->cols;
        if (dispatch(c, PITH_VK_SH_moe_up_f32, w->gate, &p, N * K * ((ffn + 63) / 64), err)) return -1;
        p = base;
        p.w = addr(w->down), p.x = ha, p.o = oa, p.a1 = addr(w->down_bias), p.rows = dim, p.cols = ffn;
        p.x_ld = (uint32_t)h->cols, p.o_ld = (uint32_t)out->cols;
        if (dispatch(c, PITH_VK_SH_moe_down_f32, w->down, &p, N * ((dim + 63) / 64), err)) return -1;
    } else { /* sorted by expert on the device; each expert's rows read once per 8 of its tokens */
        const uint32_t E = (uint32_t)cfg->n_experts;
        VkDeviceAddress sa = ((const vk_buf *)c->moe->sort)->mem.addr, ya = ((const vk_buf *)c->moe->yg)->mem.addr;
        p = base;
        p.a3 = sa;
        if (pith_vk_dispatch(c, c->cmd, PITH_VK_SH_moe_sort, &p, sizeof p, 1, 1, err)) return -1;
        p = base;
        p.w = addr(w->gate), p.v = addr(w->up), p.x = xa, p.o = ha, p.a1 = addr(w->gate_bias), p.a2 = addr(w->up_bias);
        p.a3 = sa, p.rows = ffn, p.cols = dim, p.x_ld = (uint32_t)in->cols, p.o_ld = ffn;
        if (dispatch(c, PITH_VK_SH_moe_gup_f32, w->gate, &p, E * ((ffn + 63) / 64), err)) return -1;
        p = base;
        p.w = addr(w->down), p.x = ha, p.o = ya, p.a3 = sa, p.rows = dim, p.cols = ffn, p.x_ld = ffn, p.o_ld = dim;
        if (dispatch(c, PITH_VK_SH_moe_gdown_f32, w->down, &p, E * ((dim + 63) / 64), err)) return -1;
        p = base;
        p.x = ya, p.o = oa, p.a1 = addr(w->down_bias), p.a3 = sa, p.rows = dim, p.x_ld = dim;
        p.o_ld = (uint32_t)out->cols;
        if (pith_vk_dispatch(c, c->cmd, PITH_VK_SH_moe_combine, &p, sizeof p, N * ((dim + 63) / 64), 1, err)) return -1;
    }
    if (w->sh_gate) {
        const uint32_t sh = (uint32_t)cfg->shared_ffn;
        p = base;
        p.flags = F_SHARED | (w->sh_inp ? F_SHARED_GATED : 0);
        p.w = addr(w->sh_gate), p.v = addr(w->sh_up), p.x = xa, p.o = ha, p.rows = sh, p.cols = dim;
        p.x_ld = (uint32_t)in->cols, p.o_ld = (uint32_t)h->cols;
        if (dispatch(c, PITH_VK_SH_moe_up_f32, w->sh_gate, &p, N * ((sh + 63) / 64), err)) return -1;
        p = base;
        p.flags = F_SHARED;
        p.w = addr(w->sh_down), p.x = ha, p.o = oa, p.rows = dim, p.cols = sh;
        p.x_ld = (uint32_t)h->cols, p.o_ld = (uint32_t)out->cols;
        if (dispatch(c, PITH_VK_SH_moe_down_f32, w->sh_down, &p, N * ((dim + 63) / 64), err)) return -1;
    }
    return 0;
}
