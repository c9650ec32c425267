/* Loading a mixture-of-experts block from a model file (see moe.h): every expert a pith_matrix view of
 * the file's bytes, from a 3-D GGUF tensor (ne = {cols, rows, n_experts}: expert e's rows start
 * e * rows * row_bytes in) or from one 2-D tensor per expert (older GGUF files, Hugging Face
 * checkpoints), so nothing is copied until pith_moe_pack repacks for the kernels. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/quants.h"
#include "model/moe.h"

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

int pith_moe_load(const pith_model_file *f, int l, const pith_moe_config *cfg, const char *const hf_experts[3],
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
        load_experts(f, l, "gate", hf_experts ? hf[0] : NULL, E, ffn, dim, &L->gate, err) ||
        load_experts(f, l, "up", hf_experts ? hf[1] : NULL, E, ffn, dim, &L->up, err) ||
        load_experts(f, l, "down", hf_experts ? hf[2] : NULL, E, dim, ffn, &L->down, err) ||
        load_vec(f, NAME("ffn_gate_exps.bias"), (int64_t)E * ffn, false, &L->gate_bias, err) ||
        load_vec(f, NAME("ffn_up_exps.bias"), (int64_t)E * ffn, false, &L->up_bias, err) ||
        load_vec(f, NAME("ffn_down_exps.bias"), (int64_t)E * dim, false, &L->down_bias, err) ||
        load_mat(f, NAME("ffn_gate_shexp.weight"), sh, dim, sh > 0, &L->sh_gate, &found, err))
        return pith_err_prefix(err, "layer %d", l);
    if (found && sh == 0) return pith_errf(err, "layer %d: a shared expert, but no shared expert width", l);
    L->has_shared = found;
    if (found && (load_mat(f, NAME("ffn_up_shexp.weight"), sh, dim, true, &L->sh_up, NULL, err) ||
                  load_mat(f, NAME("ffn_down_shexp.weight"), dim, sh, true, &L->sh_down, NULL, err) ||
                  load_vec(f, NAME("ffn_gate_inp_shexp.weight"), dim, false, &L->sh_gate_inp, err)))
        return pith_err_prefix(err, "layer %d", l);
#undef NAME
    return 0;
}

int pith_moe_pack(pith_cpu *c, pith_moe_layer *L, pith_err *err) {
    if (pith_matrix_pack(c, &L->router, err)) return -1;
    for (int e = 0; e < L->cfg.n_experts; e++)
        if (pith_matrix_pack(c, &L->gate[e], err) || pith_matrix_pack(c, &L->up[e], err) ||
            pith_matrix_pack(c, &L->down[e], err))
            return -1;
    if (L->has_shared && (pith_matrix_pack(c, &L->sh_gate, err) || pith_matrix_pack(c, &L->sh_up, err) ||
                          pith_matrix_pack(c, &L->sh_down, err)))
        return -1;
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
    memset(L, 0, sizeof *L);
}
