/* Loading a mixture-of-experts block from a model file (see moe.h): every expert a pith_matrix view of
 * the file's bytes, from a 3-D GGUF tensor (ne = {cols, rows, n_experts}: expert e's rows start
 * e * rows * row_bytes in; a fused gate and up: 2 * rows per expert), or from one 2-D tensor per expert
 * (older GGUF files, Hugging Face checkpoints), so nothing is copied until pith_moe_pack repacks for the kernels, or, with the experts
 * mapped, ever. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "backend/cpu/quants.h"
#include "backend/cpu/moe.h"
#include "backend/moe_file.h"
#include "util/meminfo.h"

static pith_dtype file_type(pith_wtype t, bool *ok);
static int moe_load_whole(const pith_model_file *f, int l, const pith_moe_config *cfg, const char *const hf_experts[3],
                               pith_moe_layer *L, pith_err *err);

/* A vector of n elements (ne[0] == n, any element type), as owned floats; absent is NULL. */
static int load_vec(const pith_model_file *f, const char *name, int64_t n, bool required, float **out, pith_err *err) {
    *out = NULL;
    const pith_tensor *t = pith_model_file_tensor(f, name);
    if (!t) return required ? pith_errf(err, "missing tensor %s", name) : 0;
    if (pith_tensor_nelems(t) != n || !pith_dtype_valid(t->type))
        return pith_errf(err, "tensor %s: expected %lld elements", name, (long long)n);
    int64_t row = t->ne[0];
    size_t rb = pith_dtype_row_bytes(t->type, row);
    if (!rb || t->nbytes / rb < (size_t)(n / row)) return pith_errf(err, "tensor %s: bad type or size", name);
    if (!(*out = malloc((size_t)n * sizeof(float)))) return pith_errf(err, "out of memory");
    for (int64_t r = 0; r < n / row; r++)
        pith_dequantize_row(t->type, (const uint8_t *)t->data + (size_t)r * rb, *out + r * row, row);
    return 0;
}

static int load_mat(const pith_model_file *f, const char *name, int rows, int cols, bool required, pith_matrix *m,
                    bool *found, pith_err *err) {
    const pith_tensor *t = pith_model_file_tensor(f, name);
    if (found) *found = t != NULL;
    if (!t) return required ? pith_errf(err, "missing tensor %s", name) : 0;
    if (pith_matrix_from_tensor(m, t, err)) return -1;
    if (m->rows != rows || m->cols != cols)
        return pith_errf(err, "tensor %s: shape [%d, %d], expected [%d, %d]", name, m->cols, m->rows, cols, rows);
    return 0;
}

/* The n_experts matrices of one kind: the 3-D tensor, else per-expert 2-D tensors named by gguf_fmt or
 * hf_fmt (layer and expert numbers). */
static int load_experts(const pith_model_file *f, int l, const char *kind, const char *hf_fmt, int E, int rows,
                        int cols, pith_matrix **out, pith_err *err) {
    char name[160];
    pith_matrix *ms = calloc((size_t)E, sizeof *ms);
    if (!(*out = ms)) return pith_errf(err, "out of memory");
    snprintf(name, sizeof name, "blk.%d.ffn_%s_exps.weight", l, kind);
    const pith_tensor *t = pith_model_file_tensor(f, name);
    if (t) {
        if (t->ne[0] != cols || t->ne[1] != rows || t->ne[2] != E || t->ne[3] != 1)
            return pith_errf(err, "tensor %s: shape [%lld, %lld, %lld, %lld], expected [%d, %d, %d]", name,
                             (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3], cols,
                             rows, E);
        /* view expert 0 as a 2-D matrix to check type and size, then step through the others */
        pith_tensor first = *t;
        first.ne[2] = 1;
        if (pith_matrix_from_tensor(&ms[0], &first, err)) return -1;
        size_t stride = (size_t)rows * ms[0].row_bytes;
        if (t->nbytes / stride < (size_t)E) return pith_errf(err, "tensor %s: data is shorter than its shape", name);
        for (int e = 1; e < E; e++) {
            ms[e] = ms[0];
            ms[e].data = ms[0].data + (size_t)e * stride;
        }
        return 0;
    }
    for (int e = 0; e < E; e++) {
        snprintf(name, sizeof name, "blk.%d.ffn_%s.%d.weight", l, kind, e);
        if (!pith_model_file_tensor(f, name) && hf_fmt) snprintf(name, sizeof name, hf_fmt, l, e);
        if (!pith_model_file_tensor(f, name)) {
            snprintf(name, sizeof name, "blk.%d.ffn_%s_exps.weight", l, kind);
            return pith_errf(err, "missing tensor %s (or one tensor per expert)", name);
        }
        if (load_mat(f, name, rows, cols, true, &ms[e], NULL, err)) return -1;
        if (ms[e].type != ms[0].type) return pith_errf(err, "tensor %s: experts of different types", name);
    }
    return 0;
}

/* Gate and up of every expert from one 3-D blk.l.ffn_gate_up_exps.weight, ne = {dim, 2 ffn, n_experts}:
 * expert e's gate rows, then its up rows (Hugging Face's Granite input_linear), viewed in place. */
static int load_fused_experts(const pith_model_file *f, const char *name, int E, int rows, int cols,
                              pith_matrix **gate, pith_matrix **up, pith_err *err) {
    const pith_tensor *t = pith_model_file_tensor(f, name);
    if (!(*gate = calloc((size_t)E, sizeof **gate)) || !(*up = calloc((size_t)E, sizeof **up)))
        return pith_errf(err, "out of memory");
    if (t->ne[0] != cols || t->ne[1] != 2 * (int64_t)rows || t->ne[2] != E || t->ne[3] != 1)
        return pith_errf(err, "tensor %s: shape [%lld, %lld, %lld], expected [%d, %d, %d]", name, (long long)t->ne[0],
                         (long long)t->ne[1], (long long)t->ne[2], cols, 2 * rows, E);
    size_t rb = pith_dtype_row_bytes(t->type, cols);
    if (!rb || t->nbytes / rb / 2 / (size_t)rows < (size_t)E) return pith_errf(err, "tensor %s: bad type or size", name);
    for (int e = 0; e < E; e++)
        for (int part = 0; part < 2; part++) {
            pith_tensor v = *t;
            v.n_dims = 2;
            v.ne[1] = rows, v.ne[2] = 1;
            v.data = (const uint8_t *)t->data + ((size_t)e * 2 + part) * rows * rb;
            v.nbytes = rb * (size_t)rows;
            if (pith_matrix_from_tensor(part ? &(*up)[e] : &(*gate)[e], &v, err)) return -1;
        }
    return 0;
}

/* Rows [row0, row0 + rows) of a 2-D tensor of `total` rows (the halves of a fused [gate | up]). */
static int load_rows(const pith_model_file *f, const char *name, int total, int row0, int rows, int cols,
                     pith_matrix *m, pith_err *err) {
    const pith_tensor *t = pith_model_file_tensor(f, name);
    if (!t) return pith_errf(err, "missing tensor %s", name);
    if (t->ne[0] != cols || t->ne[1] != total || t->ne[2] != 1 || t->ne[3] != 1)
        return pith_errf(err, "tensor %s: shape [%lld, %lld], expected [%d, %d]", name, (long long)t->ne[0],
                         (long long)t->ne[1], cols, total);
    size_t rb = pith_dtype_row_bytes(t->type, cols);
    if (!rb || t->nbytes / rb < (size_t)total) return pith_errf(err, "tensor %s: bad type or size", name);
    pith_tensor v = *t;
    v.ne[1] = rows;
    v.data = (const uint8_t *)t->data + (size_t)row0 * rb;
    v.nbytes = rb * (size_t)rows;
    return pith_matrix_from_tensor(m, &v, err);
}

/* A shared expert stored as the layer's dense FFN (Granite's Hugging Face shared_mlp: a fused
 * ffn_gate_up.weight, [gate | up] rows, or ffn_gate.weight and ffn_up.weight; then ffn_down.weight).
 * Nothing of the kind: *found false. */
static int load_dense_shared(const pith_model_file *f, int l, int sh, int dim, pith_moe_layer *L, bool *found,
                             pith_err *err) {
    char g[96], u[96], d[96];
    snprintf(g, sizeof g, "blk.%d.ffn_gate_up.weight", l);
    snprintf(d, sizeof d, "blk.%d.ffn_down.weight", l);
    *found = true;
    if (pith_model_file_tensor(f, g))
        return load_rows(f, g, 2 * sh, 0, sh, dim, &L->sh_gate, err) || load_rows(f, g, 2 * sh, sh, sh, dim, &L->sh_up, err) ||
                       load_mat(f, d, dim, sh, true, &L->sh_down, NULL, err)
                   ? -1
                   : 0;
    snprintf(g, sizeof g, "blk.%d.ffn_gate.weight", l);
    snprintf(u, sizeof u, "blk.%d.ffn_up.weight", l);
    if (!(*found = pith_model_file_tensor(f, g) != NULL)) return 0;
    return load_mat(f, g, sh, dim, true, &L->sh_gate, NULL, err) || load_mat(f, u, sh, dim, true, &L->sh_up, NULL, err) ||
                   load_mat(f, d, dim, sh, true, &L->sh_down, NULL, err)
               ? -1
               : 0;
}

/* dst[c][r] = src[r][col0 + c * step] for r < rows, c < cols (src rows ld elements apart), elements of es
 * bytes (2 or 4), in 32 x 32 tiles: a column of src is read 32 at a time, not one element per row. */
static void transpose_cols(uint8_t *dst, const uint8_t *src, int rows, size_t ld, int col0, int step, int cols,
                           size_t es) {
    enum { T = 32 };
    for (int r0 = 0; r0 < rows; r0 += T)
        for (int c0 = 0; c0 < cols; c0 += T) {
            const int r1 = r0 + T < rows ? r0 + T : rows, c1 = c0 + T < cols ? c0 + T : cols;
            for (int r = r0; r < r1; r++) {
                const size_t from = (size_t)r * ld + (size_t)col0;
                if (es == 2) {
                    const uint16_t *in = (const uint16_t *)src + from;
                    for (int c = c0; c < c1; c++) ((uint16_t *)dst)[(size_t)c * rows + r] = in[(size_t)c * step];
                } else {
                    const uint32_t *in = (const uint32_t *)src + from;
                    for (int c = c0; c < c1; c++) ((uint32_t *)dst)[(size_t)c * rows + r] = in[(size_t)c * step];
                }
            }
        }
}

/* Hugging Face's fused experts (see moe.h): element (e, k, j) of gate_up_proj is W_e[k][j], applied as
 * x @ W_e, so gate row i is a column of W_e: column 2i interleaved (GPT-OSS; up row i column 2i + 1),
 * column i as halves (cfg.fused_halves, Qwen3-VL-MoE; up row i column F + i). Down row o is column o of
 * down_proj[e]. Copied as stored (F32, F16 or BF16), one buffer for the layer; the gate_up bias, where
 * there is one, splits as the columns do. */
static bool fused_hf_present(const pith_model_file *f, int l) {
    char name[96];
    snprintf(name, sizeof name, "model.layers.%d.mlp.experts.gate_up_proj", l);
    return pith_model_file_tensor(f, name) != NULL;
}

static int load_fused_hf(const pith_model_file *f, int l, pith_moe_layer *L, pith_err *err) {
    const int E = L->cfg.n_experts, dim = L->cfg.dim, F = L->cfg.ffn;
    const bool halves = L->cfg.fused_halves;
    char gu_name[96], d_name[96], n[112];
    snprintf(gu_name, sizeof gu_name, "model.layers.%d.mlp.experts.gate_up_proj", l);
    snprintf(d_name, sizeof d_name, "model.layers.%d.mlp.experts.down_proj", l);
    const pith_tensor *gu = pith_model_file_tensor(f, gu_name), *d = pith_model_file_tensor(f, d_name);
    if (!d) return pith_errf(err, "missing tensor %s", d_name);
    if (gu->ne[0] != 2 * F || gu->ne[1] != dim || gu->ne[2] != E || gu->ne[3] != 1)
        return pith_errf(err, "tensor %s: expected [%d, %d, %d] (experts, dim, 2 x ffn)", gu_name, E, dim, 2 * F);
    if (d->ne[0] != dim || d->ne[1] != F || d->ne[2] != E || d->ne[3] != 1)
        return pith_errf(err, "tensor %s: expected [%d, %d, %d] (experts, ffn, dim)", d_name, E, F, dim);
    if (gu->type != d->type || (gu->type != PITH_F32 && gu->type != PITH_F16 && gu->type != PITH_BF16))
        return pith_errf(err, "tensor %s: type %s (F32, F16 or BF16 expected)", gu_name, pith_dtype_name(gu->type));
    size_t es = gu->type == PITH_F32 ? 4 : 2, per = (size_t)F * dim; /* elements of one expert matrix */
    if (gu->nbytes < 2 * per * E * es || d->nbytes < per * E * es)
        return pith_errf(err, "tensor %s: data is shorter than its shape", gu_name);
    uint8_t *buf = malloc(3 * per * E * es);
    if (!(L->owned = buf)) return pith_errf(err, "out of memory rearranging the experts of layer %d", l);
    L->rearranged = true;
    pith_matrix *kinds[3] = {L->gate, L->up, L->down};
    for (int e = 0; e < E; e++) {
        const uint8_t *w = (const uint8_t *)gu->data + (size_t)e * 2 * per * es;
        const uint8_t *wd = (const uint8_t *)d->data + (size_t)e * per * es;
        uint8_t *g = buf + (size_t)(3 * e) * per * es, *u = g + per * es, *dn = u + per * es;
        transpose_cols(g, w, dim, 2 * (size_t)F, 0, halves ? 1 : 2, F, es);
        transpose_cols(u, w, dim, 2 * (size_t)F, halves ? F : 1, halves ? 1 : 2, F, es);
        transpose_cols(dn, wd, F, (size_t)dim, 0, 1, dim, es);
        const uint8_t *srcs[3] = {g, u, dn};
        for (int k = 0; k < 3; k++) {
            pith_tensor t = {.name = gu_name, .type = gu->type, .n_dims = 2,
                             .ne = {k == 2 ? F : dim, k == 2 ? dim : F, 1, 1}, .data = srcs[k], .nbytes = per * es};
            if (pith_matrix_from_tensor(&kinds[k][e], &t, err)) return -1;
        }
    }
    /* biases: gate_up_proj_bias [experts][2 ffn] (its columns as the weights'), down_proj_bias [experts][dim] */
    snprintf(n, sizeof n, "model.layers.%d.mlp.experts.gate_up_proj_bias", l);
    float *gub;
    if (load_vec(f, n, (int64_t)E * 2 * F, false, &gub, err)) return -1;
    if (gub) {
        L->gate_bias = malloc((size_t)E * F * sizeof(float));
        L->up_bias = malloc((size_t)E * F * sizeof(float));
        if (!L->gate_bias || !L->up_bias) {
            free(gub);
            return pith_errf(err, "out of memory");
        }
        for (int e = 0; e < E; e++) {
            const float *b = gub + (size_t)e * 2 * F;
            for (int i = 0; i < F; i++) {
                L->gate_bias[(size_t)e * F + i] = halves ? b[i] : b[2 * i];
                L->up_bias[(size_t)e * F + i] = halves ? b[F + i] : b[2 * i + 1];
            }
        }
        free(gub);
    }
    snprintf(n, sizeof n, "model.layers.%d.mlp.experts.down_proj_bias", l);
    return load_vec(f, n, (int64_t)E * dim, false, &L->down_bias, err);
}

/* Tensor-parallel experts (pith_moe_config.col_parts > 1): this rank's share of every expert's hidden
 * width, [f0, f0 + f): its rows of gate and up (views, moved), its columns of down (copied, on the type's
 * block boundaries, into L->split), its share of the gate and up biases; the down bias on part 0 only.
 * The layer then runs as one whose experts are f wide (cfg.ffn), and its output is this rank's part of
 * the sum. */
static int split_columns(pith_moe_layer *L, pith_err *err) {
    const int P = L->cfg.col_parts, E = L->cfg.n_experts, F = L->cfg.ffn, dim = L->cfg.dim;
    if (F % P) return pith_errf(err, "the experts' width %d does not divide by %d ranks (--no-ep)", F, P);
    const int f = F / P, f0 = L->cfg.col_part * f;
    bool ok;
    const pith_dtype dt = file_type(L->down[0].type, &ok);
    const int64_t blk = pith_dtype_block_elems(dt);
    if (!ok || f % blk)
        return pith_errf(err, "the experts' width %d over %d ranks: a share of %d columns falls inside a %s block of "
                              "%lld (--no-ep; expert parallelism splits whole experts)", F, P, f, pith_dtype_name(dt),
                         (long long)blk);
    const size_t rb = pith_dtype_row_bytes(dt, f), off = pith_dtype_row_bytes(dt, f0);
    uint8_t *buf = malloc((size_t)E * (size_t)dim * rb);
    if (!(L->split = buf)) return pith_errf(err, "out of memory");
    for (int e = 0; e < E; e++) {
        for (int k = 0; k < 2; k++) { /* gate and up: rows f0.. of each */
            pith_matrix *m = k ? &L->up[e] : &L->gate[e];
            m->data += (size_t)f0 * m->row_bytes;
            m->rows = f;
        }
        pith_matrix *d = &L->down[e];
        uint8_t *to = buf + (size_t)e * dim * rb;
        for (int r = 0; r < dim; r++) memcpy(to + (size_t)r * rb, d->data + (size_t)r * d->row_bytes + off, rb);
        d->data = to;
        d->cols = f;
        d->row_bytes = rb;
    }
    float *const biases[2] = {L->gate_bias, L->up_bias};
    for (int k = 0; k < 2; k++)
        if (biases[k])
            for (int e = 0; e < E; e++) memmove(biases[k] + (size_t)e * f, biases[k] + (size_t)e * F + f0, (size_t)f * sizeof(float));
    if (L->down_bias && L->cfg.col_part != 0) {
        free(L->down_bias);
        L->down_bias = NULL;
    }
    L->cfg.ffn = f;
    return 0;
}

int pith_moe_load(const pith_model_file *f, int l, const pith_moe_config *cfg, const char *const hf_experts[3],
                  pith_moe_layer *L, pith_err *err) {
    if (cfg->col_parts > 1 && cfg->n_local > 0)
        return pith_errf(err, "layer %d: experts split both by expert and by column", l);
    if (moe_load_whole(f, l, cfg, hf_experts, L, err)) return -1;
    if (cfg->col_parts > 1 && split_columns(L, err)) return pith_err_prefix(err, "layer %d", l);
    return 0;
}

static int moe_load_whole(const pith_model_file *f, int l, const pith_moe_config *cfg, const char *const hf_experts[3],
                               pith_moe_layer *L, pith_err *err) {
    memset(L, 0, sizeof *L);
    L->cfg = *cfg;
    const int E = cfg->n_experts, dim = cfg->dim, ffn = cfg->ffn, sh = cfg->shared_ffn;
    char n[96];
    char hf[3][160];
    for (int i = 0; i < 3; i++)
        if (hf_experts) snprintf(hf[i], sizeof hf[i], "model.layers.%%d.%s", hf_experts[i]);
#define NAME(s) (snprintf(n, sizeof n, "blk.%d.%s", l, s), n)
    bool found = false;
    if (load_mat(f, NAME("ffn_gate_inp.weight"), E, dim, true, &L->router, NULL, err) ||
        load_vec(f, NAME("ffn_gate_inp.bias"), E, false, &L->router_bias, err) ||
        load_vec(f, NAME("exp_probs_b.bias"), E, false, &L->select_bias, err) ||
        load_vec(f, NAME("ffn_down_exps.scale"), E, false, &L->expert_scale, err) ||
        (cfg->in_norm_eps > 0 && (load_vec(f, NAME("pre_ffw_norm_2.weight"), dim, true, &L->in_norm, err) ||
                                  load_vec(f, NAME("ffn_gate_inp.scale"), dim, true, &L->router_norm, err))))
        return pith_err_prefix(err, "layer %d", l);
    if (!pith_model_file_tensor(f, NAME("ffn_gate_exps.weight")) && fused_hf_present(f, l)) {
        L->gate = calloc((size_t)E, sizeof *L->gate);
        L->up = calloc((size_t)E, sizeof *L->up);
        L->down = calloc((size_t)E, sizeof *L->down);
        if (!L->gate || !L->up || !L->down) return pith_errf(err, "out of memory");
        return load_fused_hf(f, l, L, err) ? pith_err_prefix(err, "layer %d", l) : 0;
    }
    char fused[96];
    snprintf(fused, sizeof fused, "blk.%d.ffn_gate_up_exps.weight", l);
    const bool is_fused = !pith_model_file_tensor(f, NAME("ffn_gate_exps.weight")) && pith_model_file_tensor(f, fused);
    /* a shared expert under the dense FFN's names, where the file has no _shexp ones */
    const bool dense_shared = sh > 0 && !pith_model_file_tensor(f, NAME("ffn_gate_shexp.weight")) &&
                              (pith_model_file_tensor(f, NAME("ffn_gate_up.weight")) ||
                               pith_model_file_tensor(f, NAME("ffn_gate.weight")));
    if ((is_fused ? load_fused_experts(f, fused, E, ffn, dim, &L->gate, &L->up, err)
               : load_experts(f, l, "gate", hf_experts ? hf[0] : NULL, E, ffn, dim, &L->gate, err) ||
                     load_experts(f, l, "up", hf_experts ? hf[1] : NULL, E, ffn, dim, &L->up, err)) ||
        load_experts(f, l, "down", hf_experts ? hf[2] : NULL, E, dim, ffn, &L->down, err) ||
        load_vec(f, NAME("ffn_gate_exps.bias"), (int64_t)E * ffn, false, &L->gate_bias, err) ||
        load_vec(f, NAME("ffn_up_exps.bias"), (int64_t)E * ffn, false, &L->up_bias, err) ||
        load_vec(f, NAME("ffn_down_exps.bias"), (int64_t)E * dim, false, &L->down_bias, err) ||
        load_mat(f, NAME("ffn_gate_shexp.weight"), sh, dim, sh > 0 && !dense_shared, &L->sh_gate, &found, err))
        return pith_err_prefix(err, "layer %d", l);
    if (found && sh == 0) return pith_errf(err, "layer %d: a shared expert, but no shared expert width", l);
    if (found && (load_mat(f, NAME("ffn_up_shexp.weight"), sh, dim, true, &L->sh_up, NULL, err) ||
                  load_mat(f, NAME("ffn_down_shexp.weight"), dim, sh, true, &L->sh_down, NULL, err) ||
                  load_vec(f, NAME("ffn_gate_inp_shexp.weight"), dim, false, &L->sh_gate_inp, err)))
        return pith_err_prefix(err, "layer %d", l);
#undef NAME
    if (dense_shared && load_dense_shared(f, l, sh, dim, L, &found, err)) return pith_err_prefix(err, "layer %d", l);
    L->has_shared = found;
    return 0;
}

/* Whether this rank holds expert e (pith_moe_config.n_local). */
static bool local(const pith_moe_config *c, int e) {
    return c->n_local == 0 || (e >= c->expert0 && e < c->expert0 + c->n_local);
}

uint64_t pith_moe_mappable_bytes(const pith_moe_layer *L) {
    if (L->rearranged || L->split || !L->gate) return 0;
    uint64_t n = 0;
    const pith_matrix *kinds[] = {L->gate, L->up, L->down};
    for (int k = 0; k < 3; k++)
        for (int e = 0; e < L->cfg.n_experts; e++)
            if (local(&L->cfg, e)) n += (uint64_t)kinds[k][e].rows * kinds[k][e].row_bytes;
    return n;
}

int pith_moe_choose_mapped(const pith_cpu *c, pith_wtype type, uint64_t expert_bytes, bool *mapped, char *what,
                           size_t what_size, pith_err *err) {
    const char *v = getenv("PITH_MOE_EXPERTS");
    const double gib = 1024.0 * 1024 * 1024;
    const bool packs = c->k->pack[type] != NULL && c->k->pack_rows > 0;
    if (v && *v && strcmp(v, "auto") != 0) {
        if (strcmp(v, "mapped") != 0 && strcmp(v, "repacked") != 0)
            return pith_errf(err, "PITH_MOE_EXPERTS=%s: expected mapped, repacked or auto", v);
        *mapped = strcmp(v, "mapped") == 0;
        snprintf(what, what_size, "%s (PITH_MOE_EXPERTS=%s; %.2f GiB of experts%s)",
                 *mapped ? "mapped from the file" : packs ? "repacked" : "left in the file", v, expert_bytes / gib,
                 !*mapped && !packs ? ": the kernels read this type as stored" : "");
        return 0;
    }
    uint64_t avail = pith_mem_available();
    *mapped = avail && expert_bytes > avail / 2;
    snprintf(what, what_size, "%s (auto: %.2f GiB of experts, %s half of the %.2f GiB available%s)",
             *mapped ? "mapped from the file" : packs ? "repacked" : "left in the file", expert_bytes / gib,
             *mapped ? "more than" : "at most", avail / gib,
             !*mapped && !packs ? "; the kernels read this type as stored" : "");
    return 0;
}

/* Drops the pages of the whole 4 KiB pages inside m's bytes from this process (see pith_moe_pack). */
static void drop_pages(const pith_matrix *m) {
#ifdef MADV_DONTNEED
    uintptr_t page = 4096, lo = ((uintptr_t)m->data + page - 1) / page * page;
    uintptr_t hi = ((uintptr_t)m->data + (size_t)m->rows * m->row_bytes) / page * page;
    if (hi > lo) madvise((void *)lo, hi - lo, MADV_DONTNEED);
#else
    (void)m;
#endif
}

int pith_moe_pack(pith_cpu *c, pith_moe_layer *L, pith_err *err) {
    if (pith_matrix_pack(c, &L->router, err)) return -1;
    if (L->mapped && !L->rearranged && !L->split) {
        const pith_matrix *kinds[] = {L->gate, L->up, L->down};
        for (int k = 0; k < 3; k++)
            for (int e = 0; e < L->cfg.n_experts; e++)
                if (local(&L->cfg, e)) drop_pages(&kinds[k][e]);
    }
    /* another rank's experts stay unread views of the file (expert parallelism) */
    for (int e = 0; e < L->cfg.n_experts && !(L->mapped && !L->rearranged && !L->split); e++)
        if (local(&L->cfg, e) && (pith_matrix_pack(c, &L->gate[e], err) || pith_matrix_pack(c, &L->up[e], err) ||
                                  pith_matrix_pack(c, &L->down[e], err)))
            return -1;
    if (L->has_shared && !L->cfg.shared_elsewhere && (pith_matrix_pack(c, &L->sh_gate, err) || pith_matrix_pack(c, &L->sh_up, err) ||
                          pith_matrix_pack(c, &L->sh_down, err)))
        return -1;
    /* Experts rearranged at load, now all packed (every row of every local expert): the kernels read only
     * the packed copies, so the rearranged one would hold the layer's experts in memory twice. */
    bool all = L->owned != NULL;
    const pith_matrix *kinds[] = {L->gate, L->up, L->down};
    for (int k = 0; k < 3 && all; k++)
        for (int e = 0; e < L->cfg.n_experts && all; e++)
            all = !local(&L->cfg, e) || (kinds[k][e].packed && kinds[k][e].packed_rows == kinds[k][e].rows);
    if (all) {
        for (int e = 0; e < L->cfg.n_experts; e++) /* no pointer into the freed copy (another rank's experts too) */
            L->gate[e].data = L->up[e].data = L->down[e].data = NULL;
        free(L->owned);
        L->owned = NULL;
    }
    return 0;
}

void pith_moe_free(pith_moe_layer *L) {
    pith_matrix_free(&L->router);
    pith_matrix *kinds[] = {L->gate, L->up, L->down};
    for (int k = 0; k < 3; k++) {
        for (int e = 0; kinds[k] && e < L->cfg.n_experts; e++) pith_matrix_free(&kinds[k][e]);
        free(kinds[k]);
    }
    pith_matrix_free(&L->sh_gate);
    pith_matrix_free(&L->sh_up);
    pith_matrix_free(&L->sh_down);
    free(L->router_bias);
    free(L->select_bias);
    free(L->gate_bias);
    free(L->up_bias);
    free(L->down_bias);
    free(L->sh_gate_inp);
    free(L->expert_scale);
    free(L->in_norm);
    free(L->router_norm);
    free(L->owned);
    free(L->split);
    memset(L, 0, sizeof *L);
}

/* ---- backend/moe_file.h: the same tensors for another backend ---- */

/* The file type of a weight type, or PITH_F32 with *ok false. */
static pith_dtype file_type(pith_wtype t, bool *ok) {
    static const pith_dtype all[] = {PITH_F32, PITH_F16, PITH_BF16, PITH_Q8_0, PITH_Q4_0, PITH_Q4_K,
                                     PITH_Q5_K, PITH_Q6_K, PITH_IQ4_NL, PITH_IQ4_XS, PITH_MXFP4};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        if (pith_wtype_of(all[i]) == (int)t) return *ok = true, all[i];
    return *ok = false, PITH_F32;
}

static int mat_view(const pith_matrix *m, pith_moe_mat *v, pith_err *err) {
    bool ok;
    *v = (pith_moe_mat){.type = file_type(m->type, &ok), .rows = m->rows, .cols = m->cols, .row_bytes = m->row_bytes,
                        .data = m->data};
    return ok ? 0 : pith_errf(err, "an expert weight of a type with no file type");
}

int pith_moe_file_load(const pith_model_file *f, int l, const pith_moe_config *cfg, const char *const hf_experts[3],
                       pith_moe_file_layer *out, pith_err *err) {
    memset(out, 0, sizeof *out);
    if (pith_moe_config_check(cfg, "experts", err)) return -1;
    pith_moe_layer *L = calloc(1, sizeof *L);
    if (!(out->impl = L)) return pith_errf(err, "out of memory");
    if (pith_moe_load(f, l, cfg, hf_experts, L, err)) return -1;
    const int E = cfg->n_experts;
    out->cfg = *cfg;
    out->gate = calloc((size_t)E, sizeof *out->gate);
    out->up = calloc((size_t)E, sizeof *out->up);
    out->down = calloc((size_t)E, sizeof *out->down);
    if (!out->gate || !out->up || !out->down) return pith_errf(err, "out of memory");
    if (mat_view(&L->router, &out->router, err)) return -1;
    for (int e = 0; e < E; e++)
        if (mat_view(&L->gate[e], &out->gate[e], err) || mat_view(&L->up[e], &out->up[e], err) ||
            mat_view(&L->down[e], &out->down[e], err))
            return -1;
    out->has_shared = L->has_shared;
    if (L->has_shared && (mat_view(&L->sh_gate, &out->sh_gate, err) || mat_view(&L->sh_up, &out->sh_up, err) ||
                          mat_view(&L->sh_down, &out->sh_down, err)))
        return -1;
    /* the vectors move to the view (pith_moe_free then leaves them alone) */
    float **from[] = {&L->router_bias, &L->select_bias, &L->expert_scale, &L->gate_bias, &L->up_bias, &L->down_bias,
                      &L->in_norm, &L->router_norm, &L->sh_gate_inp};
    float **to[] = {&out->router_bias, &out->select_bias, &out->expert_scale, &out->gate_bias, &out->up_bias,
                    &out->down_bias, &out->in_norm, &out->router_norm, &out->sh_gate_inp};
    for (size_t i = 0; i < sizeof from / sizeof *from; i++) *to[i] = *from[i], *from[i] = NULL;
    return 0;
}

void pith_moe_file_free(pith_moe_file_layer *L) {
    if (L->impl) pith_moe_free(L->impl);
    free(L->impl);
    free(L->gate), free(L->up), free(L->down);
    float *vs[] = {L->router_bias, L->select_bias, L->expert_scale, L->gate_bias, L->up_bias, L->down_bias,
                   L->in_norm, L->router_norm, L->sh_gate_inp};
    for (size_t i = 0; i < sizeof vs / sizeof *vs; i++) free(vs[i]);
    memset(L, 0, sizeof *L);
}
