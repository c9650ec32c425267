/* The base decoder (decoder.h). */
#include "model/decoder.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pith/dist.h"

pith_decoder *pith_decoder_new(size_t size, pith_model_file *file, const pith_model_options *opt,
                               const pith_model_ops *ops, void (*free_arch)(pith_decoder *d), pith_err *err) {
    pith_decoder *d = size >= sizeof *d ? calloc(1, size) : NULL;
    if (!d) {
        pith_errf(err, "out of memory");
        return NULL;
    }
    d->base.ops = ops;
    d->base.has_hidden = true; /* pith_head_forward hands out the final-normed rows */
    d->free_arch = free_arch;
    d->base.hp = *pith_model_file_hparams(file);
    d->base.impl = d;
    d->file = file;
    d->opt = opt;
    if (pith_backend_create_split(opt ? opt->device : NULL, opt ? opt->n_threads : 0, d->base.hp.n_layers,
                                  opt ? opt->gpu_layers : NULL, opt ? opt->n_cpu_moe : 0, file, d->base.placement,
                                  sizeof d->base.placement, &d->be, err)) {
        free(d);
        return NULL;
    }
    return d;
}

int pith_decoder_end(pith_decoder *d, int rc, pith_model **out, pith_err *err) {
    *out = NULL;
    if (!rc && d->opt && d->opt->comm && (d->opt->tp > 1 || d->opt->pp > 1) && !d->tp.begun)
        rc = pith_errf(err, "architecture '%s' does not run tensor-parallel yet (--tp, --pp)", d->base.hp.arch);
    if (rc) {
        pith_err_prefix(err, "%s", pith_model_file_path(d->file));
        pith_decoder_destroy(&d->base);
        return rc;
    }
    d->base.file = d->file;
    *out = &d->base;
    return 0;
}

void pith_decoder_progress(const pith_decoder *d, double done, double total) {
    if (d->opt && d->opt->progress) d->opt->progress(d->opt->progress_user, done / total);
}

static const pith_tensor *find(const pith_decoder *d, int layer, const char *name, char *full, size_t cap) {
    if (layer < 0) snprintf(full, cap, "%s", name);
    else snprintf(full, cap, "blk.%d.%s", layer, name);
    return pith_model_file_tensor(d->file, full);
}

/* A block of bytes the decoder keeps until it is destroyed (a shard copied out of the file: the backend
 * may keep pointers into it); NULL with err set. */
static uint8_t *owned_block(pith_decoder *d, size_t bytes, pith_err *err) {
    void **grown = realloc(d->tp.owned, (size_t)(d->tp.n_owned + 1) * sizeof *grown);
    uint8_t *block = grown ? malloc(bytes ? bytes : 1) : NULL;
    if (grown) d->tp.owned = grown;
    if (!block) return pith_errf(err, "out of memory"), NULL;
    d->tp.owned[d->tp.n_owned++] = block;
    return block;
}

int pith_decoder_bind_part(pith_decoder *d, const pith_tensor *t, const char *full, int row0, int rows, int col0,
                           int cols, const pith_weight **out, pith_err *err) {
    *out = NULL;
    int64_t C = t->ne[0], R = t->ne[1];
    size_t rb = pith_dtype_row_bytes(t->type, C);
    if (t->ne[2] != 1 || t->ne[3] != 1 || !rb || t->nbytes / rb < (size_t)R || row0 < 0 || rows < 1 ||
        row0 + rows > R || col0 < 0 || cols < 1 || col0 + cols > C)
        return pith_errf(err, "tensor %s: bad type or size", full);
    /* the part as a tensor of its own: the backend reads its bytes while binding, not the struct later */
    pith_tensor part = *t;
    part.ne[1] = rows;
    part.data = (const uint8_t *)t->data + (size_t)row0 * rb;
    part.nbytes = rb * (size_t)rows;
    if (col0 != 0 || cols != C) {
        int64_t blk = pith_dtype_block_elems(t->type);
        if (col0 % blk || cols % blk)
            return pith_errf(err, "tensor %s: a shard boundary at column %d falls inside a %s block of %lld "
                                  "elements", full, col0 % blk ? col0 : col0 + cols, pith_dtype_name(t->type),
                             (long long)blk);
        size_t prb = pith_dtype_row_bytes(t->type, cols), off = pith_dtype_row_bytes(t->type, col0);
        uint8_t *copy = owned_block(d, prb * (size_t)rows, err);
        if (!copy) return -1;
        for (int r = 0; r < rows; r++) memcpy(copy + (size_t)r * prb, (const uint8_t *)part.data + (size_t)r * rb + off, prb);
        part.ne[0] = cols;
        part.data = copy;
        part.nbytes = prb * (size_t)rows;
    }
    pith_weight *w;
    if (pith_be_matrix(d->be, &part, full, &w, err)) return -1;
    *out = w;
    return 0;
}

int pith_decoder_matrix(pith_decoder *d, int layer, const char *name, const pith_weight **out, pith_err *err) {
    char full[128];
    const pith_tensor *t = find(d, layer, name, full, sizeof full);
    *out = NULL;
    if (!t) return pith_errf(err, "missing tensor %s", full);
    if (d->tp.comm) {
        int C = (int)t->ne[0], R = (int)t->ne[1], N = d->tp.size, r = d->tp.rank;
        if (pith_decoder_kv_copied(d, name)) { /* the one KV head this rank's query heads read, whole */
            int kv = d->tp.kv_file, h = r * kv / N;
            if (R % kv) return pith_errf(err, "tensor %s: %d rows do not divide by %d KV heads", full, R, kv);
            return pith_decoder_bind_part(d, t, full, h * (R / kv), R / kv, 0, C, out, err);
        }
        switch (pith_decoder_shard_kind(name)) {
        case PITH_SHARD_ROWS:
            if (R % N) return pith_errf(err, "tensor %s: %d rows do not divide by %d ranks", full, R, N);
            return pith_decoder_bind_part(d, t, full, r * (R / N), R / N, 0, C, out, err);
        case PITH_SHARD_COLS:
            if (C % N) return pith_errf(err, "tensor %s: %d columns do not divide by %d ranks", full, C, N);
            return pith_decoder_bind_part(d, t, full, 0, R, r * (C / N), C / N, out, err);
        default: break;
        }
    }
    pith_weight *w;
    if (pith_be_matrix(d->be, t, full, &w, err)) return -1;
    *out = w;
    return 0;
}

/* Sharded, the caller's shape is this rank's: a row-sharded tensor of `total` rows here is one of size *
 * total rows in the file, each part (a fused [gate | up], Phi-3's [Q | K | V]) sharded on its own, so the
 * part at row0 here starts at row size * row0 there; a column-sharded one has size * cols columns. */
int pith_decoder_matrix_rows(pith_decoder *d, int layer, const char *name, int cols, int total, int row0, int rows,
                             const pith_weight **out, pith_err *err) {
    char full[128];
    const pith_tensor *t = find(d, layer, name, full, sizeof full);
    *out = NULL;
    if (!t) return pith_errf(err, "missing tensor %s", full);
    int col0 = 0, file_cols = cols, file_total = total;
    pith_shard_kind kind = d->tp.comm ? pith_decoder_shard_kind(name) : PITH_SHARD_NONE;
    if (d->tp.kv_copy && !strcmp(name, "attn_qkv.weight"))
        return pith_errf(err, "tensor %s: --tp %d with %d KV heads: a fused QKV projection cannot copy a KV head",
                         full, d->tp.size, d->tp.kv_file);
    if (pith_decoder_kv_copied(d, name) && row0 == 0 && rows == total) { /* one KV head, whole */
        file_total = total * d->tp.kv_file;
        row0 = d->tp.rank * d->tp.kv_file / d->tp.size * rows;
    } else if (kind == PITH_SHARD_ROWS && rows > 0 && row0 >= 0 && row0 + rows <= total) {
        /* every part before this one is sharded too, so it starts at size times its offset here */
        file_total = total * d->tp.size;
        row0 = row0 * d->tp.size + d->tp.rank * rows;
    } else if (kind == PITH_SHARD_COLS) {
        file_cols = cols * d->tp.size;
        col0 = d->tp.rank * cols;
    } else if (kind != PITH_SHARD_NONE) {
        return pith_errf(err, "tensor %s: rows [%d, %d) of %d cannot be sharded", full, row0, row0 + rows, total);
    }
    if (t->ne[0] != file_cols || t->ne[1] != file_total || t->ne[2] != 1 || t->ne[3] != 1)
        return pith_errf(err, "tensor %s: shape [%lld, %lld], expected [%d, %d]", full, (long long)t->ne[0],
                         (long long)t->ne[1], file_cols, file_total);
    return pith_decoder_bind_part(d, t, full, row0, rows, col0, cols, out, err); /* it checks the range */
}

/* Sizes of the parts this rank binds (sharded: each SPLIT part's share; SKIP parts none) and of the
 * whole in the file; an error when a split part does not divide. */
static int parts_sizes(const pith_decoder *d, const char *full, const char *what, int n_parts, const int *size,
                       const unsigned char *mode, int64_t *file_total, int64_t *bound, pith_err *err) {
    const int N = d->tp.comm ? d->tp.size : 1;
    *file_total = *bound = 0;
    for (int k = 0; k < n_parts; k++) {
        int how = mode ? mode[k] : PITH_PART_SPLIT;
        if (how == PITH_PART_SPLIT && size[k] % N)
            return pith_errf(err, "tensor %s: part %d's %d %s do not divide by %d ranks", full, k, size[k], what, N);
        *file_total += size[k];
        *bound += how == PITH_PART_SKIP ? 0 : how == PITH_PART_WHOLE ? size[k] : size[k] / N;
    }
    return 0;
}

/* Part k's [first, first + count) in the file's units (rows, elements) for this rank. */
static void part_range(const pith_decoder *d, int at, int size, int how, int *first, int *count) {
    const int N = d->tp.comm ? d->tp.size : 1, r = d->tp.comm ? d->tp.rank : 0;
    *count = how == PITH_PART_SKIP ? 0 : how == PITH_PART_WHOLE ? size : size / N;
    *first = at + (how == PITH_PART_SPLIT ? r * *count : 0);
}

int pith_decoder_matrix_parts(pith_decoder *d, int layer, const char *name, int cols, int n_parts,
                              const int *part_rows, const unsigned char *mode, const pith_weight **out,
                              pith_err *err) {
    char full[128];
    const pith_tensor *t = find(d, layer, name, full, sizeof full);
    *out = NULL;
    if (!t) return pith_errf(err, "missing tensor %s", full);
    int64_t file_rows, rows;
    if (parts_sizes(d, full, "rows", n_parts, part_rows, mode, &file_rows, &rows, err)) return -1;
    if (t->ne[0] != cols || t->ne[1] != file_rows || t->ne[2] != 1 || t->ne[3] != 1)
        return pith_errf(err, "tensor %s: shape [%lld, %lld], expected [%d, %lld]", full, (long long)t->ne[0],
                         (long long)t->ne[1], cols, (long long)file_rows);
    if (rows < 1) return pith_errf(err, "tensor %s: no rows bound", full);
    /* one run of rows: a view of the file; several: this rank's rows of each part, copied into one */
    int runs = 0, first0 = 0;
    for (int k = 0, at = 0, end = -1; k < n_parts; at += part_rows[k++]) {
        int first, count;
        part_range(d, at, part_rows[k], mode ? mode[k] : PITH_PART_SPLIT, &first, &count);
        if (!count) continue;
        if (first != end) runs++, first0 = runs == 1 ? first : first0;
        end = first + count;
    }
    if (runs == 1) return pith_decoder_bind_part(d, t, full, first0, (int)rows, 0, cols, out, err);
    size_t rb = pith_dtype_row_bytes(t->type, cols);
    if (!rb || t->nbytes < rb * (size_t)file_rows) return pith_errf(err, "tensor %s: bad type or size", full);
    uint8_t *copy = owned_block(d, rb * (size_t)rows, err), *w = copy;
    if (!copy) return -1;
    for (int k = 0, at = 0; k < n_parts; at += part_rows[k++]) {
        int first, count;
        part_range(d, at, part_rows[k], mode ? mode[k] : PITH_PART_SPLIT, &first, &count);
        memcpy(w, (const uint8_t *)t->data + (size_t)first * rb, (size_t)count * rb);
        w += (size_t)count * rb;
    }
    pith_tensor part = *t;
    part.ne[1] = rows;
    part.data = copy;
    part.nbytes = rb * (size_t)rows;
    pith_weight *bound;
    if (pith_be_matrix(d->be, &part, full, &bound, err)) return -1;
    *out = bound;
    return 0;
}

int pith_decoder_matrix_col_parts(pith_decoder *d, int layer, const char *name, int rows, int n_parts,
                                  const int *part_cols, const pith_weight **out, pith_err *err) {
    char full[128];
    const pith_tensor *t = find(d, layer, name, full, sizeof full);
    *out = NULL;
    if (!t) return pith_errf(err, "missing tensor %s", full);
    int64_t file_cols, cols;
    if (parts_sizes(d, full, "columns", n_parts, part_cols, NULL, &file_cols, &cols, err)) return -1;
    if (t->ne[0] != file_cols || t->ne[1] != rows || t->ne[2] != 1 || t->ne[3] != 1)
        return pith_errf(err, "tensor %s: shape [%lld, %lld], expected [%lld, %d]", full, (long long)t->ne[0],
                         (long long)t->ne[1], (long long)file_cols, rows);
    if (n_parts == 1 || !d->tp.comm) {
        int first, count;
        part_range(d, 0, (int)file_cols, n_parts == 1 ? PITH_PART_SPLIT : PITH_PART_WHOLE, &first, &count);
        return pith_decoder_bind_part(d, t, full, 0, rows, first, count, out, err);
    }
    const int64_t blk = pith_dtype_block_elems(t->type);
    size_t rb = pith_dtype_row_bytes(t->type, file_cols), crb = pith_dtype_row_bytes(t->type, cols);
    if (!rb || !crb || t->nbytes < rb * (size_t)rows) return pith_errf(err, "tensor %s: bad type or size", full);
    for (int k = 0, at = 0; k < n_parts; at += part_cols[k++]) {
        int first, count;
        part_range(d, at, part_cols[k], PITH_PART_SPLIT, &first, &count);
        if (first % blk || count % blk)
            return pith_errf(err, "tensor %s: a shard boundary at column %d falls inside a %s block of %lld "
                                  "elements", full, first % blk ? first : first + count, pith_dtype_name(t->type),
                             (long long)blk);
    }
    uint8_t *copy = owned_block(d, crb * (size_t)rows, err);
    if (!copy) return -1;
    for (int r = 0; r < rows; r++) {
        uint8_t *w = copy + (size_t)r * crb;
        const uint8_t *src = (const uint8_t *)t->data + (size_t)r * rb;
        for (int k = 0, at = 0; k < n_parts; at += part_cols[k++]) {
            int first, count;
            part_range(d, at, part_cols[k], PITH_PART_SPLIT, &first, &count);
            size_t off = pith_dtype_row_bytes(t->type, first), len = pith_dtype_row_bytes(t->type, count);
            memcpy(w, src + off, len);
            w += len;
        }
    }
    pith_tensor part = *t;
    part.ne[0] = cols;
    part.data = copy;
    part.nbytes = crb * (size_t)rows;
    pith_weight *bound;
    if (pith_be_matrix(d->be, &part, full, &bound, err)) return -1;
    *out = bound;
    return 0;
}

int pith_decoder_vector_parts(pith_decoder *d, int layer, const char *name, int n_parts, const int *part_elems,
                              const unsigned char *mode, const pith_weight **out, pith_err *err) {
    char full[128];
    const pith_tensor *t = find(d, layer, name, full, sizeof full);
    *out = NULL;
    if (!t) return pith_errf(err, "missing tensor %s", full);
    int64_t file_n, n;
    if (parts_sizes(d, full, "elements", n_parts, part_elems, mode, &file_n, &n, err)) return -1;
    int width = t->type == PITH_F32 ? 4 : t->type == PITH_F16 || t->type == PITH_BF16 ? 2 : 0;
    if (pith_tensor_nelems(t) != file_n) return pith_errf(err, "tensor %s: expected %lld elements", full, (long long)file_n);
    if (!width || (size_t)t->nbytes < (size_t)file_n * (size_t)width) return pith_errf(err, "tensor %s: bad type or size", full);
    float *v = malloc((size_t)(n > 0 ? n : 1) * sizeof *v);
    if (!v) return pith_errf(err, "out of memory");
    float *o = v;
    for (int k = 0, at = 0; k < n_parts; at += part_elems[k++]) {
        int first, count;
        part_range(d, at, part_elems[k], mode ? mode[k] : PITH_PART_SPLIT, &first, &count);
        for (int i = 0; i < count; i++) {
            const uint8_t *src = (const uint8_t *)t->data + (size_t)(first + i) * (size_t)width;
            uint16_t h = 0;
            if (width == 2) memcpy(&h, src, 2);
            if (t->type == PITH_F32) memcpy(o++, src, 4);
            else *o++ = t->type == PITH_F16 ? pith_f16_to_f32(h) : pith_bf16_to_f32(h);
        }
    }
    pith_weight *w;
    if (pith_be_vector(d->be, v, (int)n, &w, err)) return -1;
    *out = w;
    return 0;
}

int pith_decoder_matrix_of(pith_decoder *d, int layer, const char *name, int rows, int cols, const pith_weight **out,
                           pith_err *err) {
    if (pith_decoder_matrix(d, layer, name, out, err)) return -1;
    if ((*out)->rows == rows && (*out)->cols == cols) return 0;
    char full[128];
    if (layer < 0) snprintf(full, sizeof full, "%s", name);
    else snprintf(full, sizeof full, "blk.%d.%s", layer, name);
    return pith_errf(err, "tensor %s: shape [%d, %d], expected [%d, %d]", full, (*out)->cols, (*out)->rows, cols, rows);
}

int pith_decoder_table(pith_decoder *d, const char *name, const pith_weight **out, pith_err *err) {
    const pith_tensor *t = pith_model_file_tensor(d->file, name);
    *out = NULL;
    if (!t) return pith_errf(err, "missing tensor %s", name);
    pith_weight *w;
    if (pith_be_table(d->be, t, name, &w, err)) return -1;
    *out = w;
    return 0;
}

/* Vectors are F32 once the file is validated; F16 and BF16 are converted all the same. n: the width the
 * ops will read, checked here so that no tensor the schema does not list can be short. */
int pith_decoder_vector(pith_decoder *d, int layer, const char *name, int n, bool required, const pith_weight **out,
                        pith_err *err) {
    char full[128];
    const pith_tensor *t = find(d, layer, name, full, sizeof full);
    *out = NULL;
    if (!t) return required ? pith_errf(err, "missing tensor %s", full) : 0;
    /* sharded: a per-head vector (biases, sinks, a whole-projection QK norm) of size * n is this rank's n */
    int64_t first = 0;
    if (pith_decoder_kv_copied(d, name) && pith_tensor_nelems(t) == (int64_t)n * d->tp.kv_file)
        first = (int64_t)(d->tp.rank * d->tp.kv_file / d->tp.size) * n; /* the copied KV head's */
    else if (d->tp.comm && pith_decoder_shard_kind(name) == PITH_SHARD_VECTOR &&
             pith_tensor_nelems(t) == (int64_t)n * d->tp.size)
        first = (int64_t)d->tp.rank * n;
    else if (pith_tensor_nelems(t) != n)
        return pith_errf(err, "tensor %s: expected %d elements", full, n);
    float *v = malloc((size_t)n * sizeof *v);
    if (!v) return pith_errf(err, "out of memory");
    if (!pith_tensor_floats(t, first, n, v)) {
        free(v);
        return pith_errf(err, "tensor %s: bad type or size", full);
    }
    pith_weight *w;
    if (pith_be_vector(d->be, v, n, &w, err)) return -1;
    *out = w;
    return 0;
}

int pith_decoder_output_named(pith_decoder *d, int layer, const char *name, const pith_weight **out, pith_err *err) {
    char full[128];
    const pith_tensor *t = find(d, layer, name, full, sizeof full);
    *out = NULL;
    if (!t) return pith_errf(err, "missing tensor %s", full);
    if (t->ne[1] != d->base.hp.n_vocab || t->ne[0] != d->base.hp.dim || t->ne[2] != 1 || t->ne[3] != 1)
        return pith_errf(err, "tensor %s: shape [%lld, %lld], expected [%d, %d]", full, (long long)t->ne[0],
                         (long long)t->ne[1], d->base.hp.dim, d->base.hp.n_vocab);
    if (!d->tp.comm) return pith_decoder_bind_part(d, t, full, 0, d->base.hp.n_vocab, 0, (int)t->ne[0], out, err);
    return pith_decoder_bind_part(d, t, full, d->tp.vocab0, d->tp.n_vocab, 0, (int)t->ne[0], out, err);
}

int pith_decoder_output(pith_decoder *d, const pith_weight **out, pith_err *err) {
    const char *name = pith_model_file_tensor(d->file, "output.weight") ? "output.weight" : "token_embd.weight";
    if (!d->tp.comm) return pith_decoder_matrix(d, -1, name, out, err);
    /* vocabulary-parallel: this rank's rows of the head */
    const pith_tensor *t = pith_model_file_tensor(d->file, name);
    *out = NULL;
    if (!t) return pith_errf(err, "missing tensor %s", name);
    if (t->ne[1] != d->base.hp.n_vocab)
        return pith_errf(err, "tensor %s: %lld rows for a vocabulary of %d", name, (long long)t->ne[1], d->base.hp.n_vocab);
    return pith_decoder_bind_part(d, t, name, d->tp.vocab0, d->tp.n_vocab, 0, (int)t->ne[0], out, err);
}

int pith_decoder_attn_shape(pith_decoder *d, pith_err *err) {
    const pith_hparams *hp = &d->base.hp;
    float scale = hp->query_scale > 0 ? hp->query_scale : (float)(1.0 / sqrt(hp->head_dim));
    pith_be_attn_shape s = {.n_heads = hp->n_heads, .n_kv_heads = hp->n_kv_heads, .head_dim = hp->head_dim,
                            .scale = scale};
    return d->be->vt->attn_shape(d->be, &s, err);
}

int pith_decoder_kv_memory(pith_decoder *d, int kv_dim, int (*window_of)(const pith_hparams *hp, int l),
                           pith_err *err) {
    const pith_hparams *hp = &d->base.hp;
    int L = hp->n_layers;
    d->group_layers = malloc((size_t)L * sizeof *d->group_layers);
    d->layer_group = malloc((size_t)L * sizeof *d->layer_group);
    d->layer_index = malloc((size_t)L * sizeof *d->layer_index);
    if (!d->group_layers || !d->layer_group || !d->layer_index) return pith_errf(err, "out of memory");
    pith_mem_spec *spec = &d->base.mem;
    memset(spec, 0, sizeof *spec);
    int n = 0;
    for (int windowed = 0; windowed < 2; windowed++) {
        int first = n;
        /* a pipeline stage lists its own layers only, and every stage must have the same groups (the
         * engine's layout is rank 0's) */
        bool any = false;
        for (int l = 0; l < L; l++) {
            if ((window_of(hp, l) > 0) != (windowed == 1)) continue;
            any = true;
            if (!pith_decoder_has_layer(d, l)) continue;
            d->layer_group[l] = spec->n_groups;
            d->layer_index[l] = n - first;
            d->group_layers[n++] = l;
        }
        if (!any) continue;
        if (n == first)
            return pith_errf(err, "--pp %d: stage %d (layers %d..%d) holds none of the model's %s layers; every "
                                  "stage needs some of each kind (fewer stages)", d->tp.n_stages, d->tp.stage,
                             d->tp.l0, d->tp.l1 - 1, windowed ? "sliding-window" : "full-attention");
        pith_mem_group *g = &spec->groups[spec->n_groups++];
        g->kind = windowed ? PITH_MEM_WINDOW : PITH_MEM_FULL;
        g->window = windowed ? window_of(hp, d->group_layers[first]) : 0;
        g->n_layers = n - first;
        g->layers = &d->group_layers[first];
        g->type = PITH_F16;
        g->k_dim = g->v_dim = kv_dim;
    }
    return pith_mem_spec_check(spec, L, err);
}

int pith_decoder_hybrid_memory(pith_decoder *d, int kv_dim, size_t state_floats, int spare, pith_err *err) {
    const pith_hparams *hp = &d->base.hp;
    const int L = hp->n_layers;
    size_t cap = (size_t)L + (size_t)(spare > 0 ? spare : 0);
    d->group_layers = malloc(cap * sizeof *d->group_layers);
    d->layer_group = malloc(cap * sizeof *d->layer_group);
    d->layer_index = malloc(cap * sizeof *d->layer_index);
    if (!d->group_layers || !d->layer_group || !d->layer_index) return pith_errf(err, "out of memory");
    pith_mem_spec *spec = &d->base.mem;
    memset(spec, 0, sizeof *spec);
    for (int rec = 0, n = 0; rec < 2; rec++) {
        int first = n;
        bool any = false; /* a pipeline stage lists its own layers, and must have some of each kind */
        for (int l = 0; l < L; l++) {
            if (pith_layer_bit(hp->layer_mlp, l) || pith_layer_bit(hp->layer_recurrent, l) != (rec == 1)) continue;
            any = true;
            if (!pith_decoder_has_layer(d, l)) continue;
            d->layer_group[l] = spec->n_groups;
            d->layer_index[l] = n - first;
            d->group_layers[n++] = l;
        }
        if (!any) continue;
        if (n == first)
            return pith_errf(err, "--pp %d: stage %d (layers %d..%d) holds none of the model's %s layers; every "
                                  "stage needs some of each kind (fewer stages)", d->tp.n_stages, d->tp.stage,
                             d->tp.l0, d->tp.l1 - 1, rec ? "recurrent" : "attention");
        pith_mem_group *g = &spec->groups[spec->n_groups++];
        g->n_layers = n - first;
        g->layers = &d->group_layers[first];
        if (rec) {
            g->kind = PITH_MEM_RECURRENT;
            g->state_bytes = (size_t)g->n_layers * state_floats * sizeof(float);
        } else {
            g->kind = PITH_MEM_FULL;
            g->type = PITH_F16;
            g->k_dim = g->v_dim = kv_dim;
        }
    }
    return pith_mem_spec_check(spec, L, err);
}

int pith_decoder_step(pith_decoder *d, const pith_batch *b, float *logits, pith_err *err) {
    pith_be_begin_layer(d->be, PITH_BE_LAYER_INPUT); /* the step's first ops: embeddings, RoPE tables */
    return d->be->vt->set_step(d->be, b, &d->base.mem, d->base.hp.n_vocab, logits, err);
}

int pith_decoder_n_kept(const pith_batch *b) {
    int n = 0;
    for (int t = 0; t < b->n_tokens; t++) n += b->want_logits[t] || (b->want_hidden && b->want_hidden[t]);
    return n;
}

int pith_decoder_prepare(pith_model *m, const pith_model_limits *lim, pith_err *err) {
    pith_decoder *d = m->impl;
    return pith_be_reserve(d->be, lim->max_batch_tokens, err);
}

int pith_decoder_mem_alloc(pith_model *m, const pith_mem_layout *lay, pith_err *err) {
    pith_decoder *d = m->impl;
    return d->be->vt->mem_alloc(d->be, &m->mem, lay, err);
}

void pith_decoder_mem_free(pith_model *m) {
    pith_decoder *d = m->impl;
    d->be->vt->mem_free(d->be);
}

int pith_decoder_copy_blocks(pith_model *m, int g, const int32_t *src, const int32_t *dst, int n, pith_err *err) {
    pith_decoder *d = m->impl;
    return d->be->vt->copy_blocks(d->be, g, src, dst, n, err);
}

void pith_decoder_destroy(pith_model *m) {
    pith_decoder *d = m->impl;
    if (d->free_arch) d->free_arch(d);
    pith_backend_free(d->be);
    for (int i = 0; i < d->tp.n_owned; i++) free(d->tp.owned[i]);
    free(d->tp.owned);
    pith_comm_free(d->tp.comm); /* the stage's part of the world (its own is the caller's) */
    free(d->group_layers);
    free(d->layer_group);
    free(d->layer_index);
    free(d);
}

int pith_decoder_mtp_memory(pith_decoder *d, int k_dim, int v_dim, pith_err *err) {
    const pith_hparams *hp = &d->base.hp;
    const int L = hp->n_layers;
    d->group_layers = malloc((size_t)(L + 1) * sizeof *d->group_layers);
    d->layer_group = malloc((size_t)(L + 1) * sizeof *d->layer_group);
    d->layer_index = malloc((size_t)(L + 1) * sizeof *d->layer_index);
    if (!d->group_layers || !d->layer_group || !d->layer_index) return pith_errf(err, "out of memory");
    for (int l = 0; l <= L; l++)
        d->group_layers[l] = l, d->layer_group[l] = PITH_DECODER_MTP_FULL, d->layer_index[l] = l;
    pith_mem_spec *spec = &d->base.mem;
    memset(spec, 0, sizeof *spec);
    spec->n_groups = 2;
    pith_mem_group *full = &spec->groups[PITH_DECODER_MTP_FULL], *rec = &spec->groups[PITH_DECODER_MTP_RECURRENT];
    full->kind = PITH_MEM_FULL;
    full->n_layers = L + 1;
    full->layers = d->group_layers;
    full->type = PITH_F16;
    full->k_dim = k_dim;
    full->v_dim = v_dim;
    rec->kind = PITH_MEM_RECURRENT;
    rec->n_layers = 0;
    rec->layers = d->group_layers + L + 1;
    rec->state_bytes = (size_t)hp->dim * sizeof(float);
    return pith_mem_spec_check(spec, L + 1, err);
}
