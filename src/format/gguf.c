/* GGUF parsing: reads and validates the whole header at open time (see pith/gguf.h). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/gguf_internal.h"
#include "format/printable.h"

#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_ALIGNMENT (1u << 30)
#define GGUF_MAX_ARRAY_DEPTH 16
#define GGUF_MAX_TENSOR_NAME 4096
/* Smallest possible encodings, used to reject counts that the file cannot hold before allocating. */
#define GGUF_HEADER_BYTES 24   /* magic, version, tensor count, kv count */
#define GGUF_MIN_KV_BYTES 13   /* key length, type, one value byte */
#define GGUF_MIN_TENSOR_BYTES 25 /* name length + 1 byte, n_dims, type, offset */

typedef struct reader {
    const char *path;
    const uint8_t *base;
    size_t size;
    size_t pos;
    pith_err *err;
} reader;

size_t pith_gguf_scalar_size(uint32_t type) {
    switch (type) {
    case PITH_GGUF_UINT8: case PITH_GGUF_INT8: case PITH_GGUF_BOOL: return 1;
    case PITH_GGUF_UINT16: case PITH_GGUF_INT16: return 2;
    case PITH_GGUF_UINT32: case PITH_GGUF_INT32: case PITH_GGUF_FLOAT32: return 4;
    case PITH_GGUF_UINT64: case PITH_GGUF_INT64: case PITH_GGUF_FLOAT64: return 8;
    default: return 0;
    }
}

static size_t remaining(const reader *r) { return r->size - r->pos; }

static int need(reader *r, uint64_t n, const char *what) {
    if (n <= remaining(r)) return 0;
    return pith_errf(r->err, "%s: truncated: %s needs %llu bytes at offset %zu, but the file has %zu bytes",
                     r->path, what, (unsigned long long)n, r->pos, r->size);
}

static uint32_t le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t le64(const uint8_t *p) { return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32; }

static int read_u32(reader *r, uint32_t *v, const char *what) {
    if (need(r, 4, what)) return -1;
    *v = le32(r->base + r->pos);
    r->pos += 4;
    return 0;
}

static int read_u64(reader *r, uint64_t *v, const char *what) {
    if (need(r, 8, what)) return -1;
    *v = le64(r->base + r->pos);
    r->pos += 8;
    return 0;
}

static int read_str(reader *r, pith_str *s, const char *what) {
    uint64_t len;
    if (read_u64(r, &len, what)) return -1;
    if (len > remaining(r))
        return pith_errf(r->err, "%s: %s: string length %llu at offset %zu runs past end of file (%zu bytes)",
                         r->path, what, (unsigned long long)len, r->pos - 8, r->size);
    s->ptr = (const char *)r->base + r->pos;
    s->len = len;
    r->pos += (size_t)len;
    return 0;
}

static int check_type(reader *r, uint32_t type, const char *what) {
    if (type <= PITH_GGUF_FLOAT64) return 0;
    return pith_errf(r->err, "%s: %s has unknown value type %u", r->path, what, type);
}

/* Validates `n` elements of `type` at the cursor and moves past them; fills strs[0..n) for strings when
 * strs is not NULL. Nested arrays are walked (never trusted) up to a fixed depth. */
static int parse_elems(reader *r, uint32_t type, uint64_t n, int depth, const char *what, pith_str *strs) {
    size_t esize = pith_gguf_scalar_size(type);
    if (esize) {
        if (n > remaining(r) / esize)
            return pith_errf(r->err, "%s: %s: array of %llu elements of %zu bytes runs past end of file "
                             "(offset %zu, file %zu bytes)", r->path, what, (unsigned long long)n, esize,
                             r->pos, r->size);
        if (type == PITH_GGUF_BOOL) {
            for (uint64_t i = 0; i < n; i++) {
                uint8_t b = r->base[r->pos + i];
                if (b > 1)
                    return pith_errf(r->err, "%s: %s: boolean at offset %zu has value %u (not 0 or 1)", r->path,
                                     what, r->pos + (size_t)i, b);
            }
        }
        r->pos += (size_t)(n * esize);
        return 0;
    }
    if (type == PITH_GGUF_STRING) {
        if (n > remaining(r) / 8)
            return pith_errf(r->err, "%s: %s: array of %llu strings cannot fit in the %zu bytes left", r->path,
                             what, (unsigned long long)n, remaining(r));
        for (uint64_t i = 0; i < n; i++) {
            pith_str s;
            if (read_str(r, &s, what)) return -1;
            if (strs) strs[i] = s;
        }
        return 0;
    }
    /* Arrays of arrays: each inner array has a 12-byte header. */
    if (depth >= GGUF_MAX_ARRAY_DEPTH)
        return pith_errf(r->err, "%s: %s: arrays nested more than %d deep", r->path, what, GGUF_MAX_ARRAY_DEPTH);
    if (n > remaining(r) / 12)
        return pith_errf(r->err, "%s: %s: array of %llu arrays cannot fit in the %zu bytes left", r->path, what,
                         (unsigned long long)n, remaining(r));
    for (uint64_t i = 0; i < n; i++) {
        uint32_t inner_type;
        uint64_t inner_n;
        if (read_u32(r, &inner_type, what) || check_type(r, inner_type, what) ||
            read_u64(r, &inner_n, what) || parse_elems(r, inner_type, inner_n, depth + 1, what, NULL))
            return -1;
    }
    return 0;
}

static int parse_kv(reader *r, int64_t i, pith_gguf_kv *kv) {
    char what[PITH_PRINTABLE_CAP + 32], name[PITH_PRINTABLE_CAP];
    snprintf(what, sizeof what, "metadata key #%lld", (long long)i);
    uint32_t type;
    if (read_str(r, &kv->key, what)) return -1;
    snprintf(what, sizeof what, "metadata key '%s'", pith_printable(name, sizeof name, kv->key.ptr, kv->key.len));
    if (read_u32(r, &type, what) || check_type(r, type, what)) return -1;
    kv->type = (pith_gguf_type)type;
    if (type != PITH_GGUF_ARRAY) {
        kv->data = r->base + r->pos;
        return parse_elems(r, type, 1, 0, what, NULL);
    }
    uint32_t arr_type;
    if (read_u32(r, &arr_type, what) || check_type(r, arr_type, what) || read_u64(r, &kv->arr_n, what))
        return -1;
    kv->arr_type = (pith_gguf_type)arr_type;
    kv->data = r->base + r->pos;
    pith_str *strs = NULL;
    if (arr_type == PITH_GGUF_STRING) {
        if (kv->arr_n > remaining(r) / 8)
            return pith_errf(r->err, "%s: %s: array of %llu strings cannot fit in the %zu bytes left", r->path,
                             what, (unsigned long long)kv->arr_n, remaining(r));
        strs = malloc((size_t)(kv->arr_n ? kv->arr_n : 1) * sizeof *strs);
        if (!strs) return pith_errf(r->err, "%s: out of memory", r->path);
        kv->arr_strs = strs;
    }
    return parse_elems(r, arr_type, kv->arr_n, 1, what, strs);
}

static const char *ggml_type_name(uint32_t type) {
    static const char *const names[] = {
        "F32", "F16", "Q4_0", "Q4_1", "Q4_2", "Q4_3", "Q5_0", "Q5_1", "Q8_0", "Q8_1", "Q2_K", "Q3_K",
        "Q4_K", "Q5_K", "Q6_K", "Q8_K", "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S",
        "IQ2_S", "IQ4_XS", "I8", "I16", "I32", "I64", "F64", "IQ1_M", "BF16",
    };
    return type < sizeof names / sizeof names[0] ? names[type] : "unknown";
}

/* Reads one tensor info; the name is left as a view in *name and copied later. */
static int parse_tensor_info(reader *r, int64_t i, pith_tensor *t, pith_str *name, uint64_t *offset) {
    char what[PITH_PRINTABLE_CAP + 32], pname[PITH_PRINTABLE_CAP];
    snprintf(what, sizeof what, "tensor info #%lld", (long long)i);
    if (read_str(r, name, what)) return -1;
    const char *shown = pith_printable(pname, sizeof pname, name->ptr, name->len);
    if (name->len == 0) return pith_errf(r->err, "%s: tensor #%lld has an empty name", r->path, (long long)i);
    if (name->len > GGUF_MAX_TENSOR_NAME)
        return pith_errf(r->err, "%s: tensor #%lld name is %llu bytes long (at most %d)", r->path, (long long)i,
                         (unsigned long long)name->len, GGUF_MAX_TENSOR_NAME);
    if (memchr(name->ptr, '\0', (size_t)name->len))
        return pith_errf(r->err, "%s: tensor '%s' name contains a NUL byte", r->path, shown);
    snprintf(what, sizeof what, "tensor '%s'", shown);
    uint32_t n_dims, type;
    if (read_u32(r, &n_dims, what)) return -1;
    if (n_dims > PITH_MAX_DIMS)
        return pith_errf(r->err, "%s: tensor '%s' has %u dimensions (at most %d)", r->path, shown, n_dims,
                         PITH_MAX_DIMS);
    t->n_dims = (int)n_dims;
    for (int d = 0; d < PITH_MAX_DIMS; d++) t->ne[d] = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
        uint64_t ne;
        if (read_u64(r, &ne, what)) return -1;
        if (ne > INT64_MAX)
            return pith_errf(r->err, "%s: tensor '%s' dimension %u is %llu (negative as int64)", r->path, shown,
                             d, (unsigned long long)ne);
        t->ne[d] = (int64_t)ne;
    }
    if (read_u32(r, &type, what) || read_u64(r, offset, what)) return -1;
    if (!pith_dtype_valid(type))
        return pith_errf(r->err, "%s: tensor '%s' has unsupported type %u (%s); supported: F32, F16, BF16, Q8_0, "
                         "Q4_0, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS", r->path, shown, type, ggml_type_name(type));
    t->type = (pith_dtype)type;
    int64_t nel = pith_tensor_nelems(t);
    if (nel < 0)
        return pith_errf(r->err, "%s: tensor '%s' dimensions [%lld, %lld, %lld, %lld] overflow", r->path, shown,
                         (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3]);
    int64_t block = pith_dtype_block_elems(t->type);
    if (t->ne[0] % block)
        return pith_errf(r->err, "%s: tensor '%s' first dimension %lld is not a multiple of %s's block size %lld",
                         r->path, shown, (long long)t->ne[0], pith_dtype_name(t->type), (long long)block);
    uint64_t blocks = (uint64_t)(nel / block), bsize = pith_dtype_block_bytes(t->type);
    if (blocks > SIZE_MAX / bsize)
        return pith_errf(r->err, "%s: tensor '%s' size overflows", r->path, shown);
    t->nbytes = (size_t)(blocks * bsize);
    return 0;
}

static int read_alignment(pith_gguf *g, pith_err *err) {
    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    if (!pith_gguf_find(g, "general.alignment")) return 0;
    int64_t a;
    if (!pith_gguf_get_i64(g, "general.alignment", &a))
        return pith_errf(err, "%s: general.alignment is not an integer", g->path);
    if (a <= 0 || (a & (a - 1)) || a > GGUF_MAX_ALIGNMENT)
        return pith_errf(err, "%s: general.alignment %lld is not a power of two in [1, 2^30]", g->path,
                         (long long)a);
    g->alignment = (uint64_t)a;
    return 0;
}

static int parse_header(pith_gguf *g, reader *r) {
    pith_err *err = r->err;
    if (r->size < 4 || memcmp(r->base, "GGUF", 4))
        return pith_errf(err, "%s: not a GGUF file (bad magic)", g->path);
    r->pos = 4;
    if (read_u32(r, &g->version, "version")) return -1;
    if (g->version == 1)
        return pith_errf(err, "%s: unsupported GGUF version 1 (only versions 2 and 3 are supported)", g->path);
    if (g->version != 2 && g->version != 3) {
        if ((g->version & 0xffff) == 0)
            return pith_errf(err, "%s: unsupported GGUF version %u (a big-endian file?)", g->path, g->version);
        return pith_errf(err, "%s: unsupported GGUF version %u (only versions 2 and 3 are supported)", g->path,
                         g->version);
    }
    uint64_t n_tensors, n_kv;
    if (read_u64(r, &n_tensors, "tensor count") || read_u64(r, &n_kv, "metadata key count")) return -1;
    if (n_kv > remaining(r) / GGUF_MIN_KV_BYTES)
        return pith_errf(err, "%s: metadata key count %llu is impossible for a file of %zu bytes", g->path,
                         (unsigned long long)n_kv, r->size);
    if (n_tensors > remaining(r) / GGUF_MIN_TENSOR_BYTES)
        return pith_errf(err, "%s: tensor count %llu is impossible for a file of %zu bytes", g->path,
                         (unsigned long long)n_tensors, r->size);

    g->kvs = calloc(n_kv ? (size_t)n_kv : 1, sizeof *g->kvs);
    if (!g->kvs) return pith_errf(err, "%s: out of memory", g->path);
    for (uint64_t i = 0; i < n_kv; i++) {
        g->n_kv = (int64_t)i + 1; /* so close() frees what this entry allocated */
        if (parse_kv(r, (int64_t)i, &g->kvs[i])) return -1;
    }
    g->n_kv = (int64_t)n_kv;
    pith_name_entry *ke = malloc((n_kv ? (size_t)n_kv : 1) * sizeof *ke);
    if (!ke) return pith_errf(err, "%s: out of memory", g->path);
    for (uint64_t i = 0; i < n_kv; i++) ke[i] = (pith_name_entry){g->kvs[i].key, (int64_t)i};
    int64_t dup = 0;
    if (pith_name_index_build(&g->kv_index, ke, (int64_t)n_kv, &dup)) {
        char name[PITH_PRINTABLE_CAP];
        const pith_str *k = &g->kvs[dup].key;
        return pith_errf(err, "%s: duplicate metadata key '%s'", g->path, pith_printable(name, sizeof name, k->ptr, k->len));
    }
    if (read_alignment(g, err)) return -1;

    if (n_tensors > remaining(r) / GGUF_MIN_TENSOR_BYTES)
        return pith_errf(err, "%s: tensor count %llu is impossible for the %zu bytes after the metadata", g->path,
                         (unsigned long long)n_tensors, remaining(r));
    size_t nt = n_tensors ? (size_t)n_tensors : 1;
    g->tensors = calloc(nt, sizeof *g->tensors);
    pith_str *names = malloc(nt * sizeof *names);
    uint64_t *offsets = malloc(nt * sizeof *offsets);
    int rc = -1;
    if (!g->tensors || !names || !offsets) {
        pith_errf(err, "%s: out of memory", g->path);
        goto done;
    }
    size_t names_bytes = 0;
    for (uint64_t i = 0; i < n_tensors; i++) {
        if (parse_tensor_info(r, (int64_t)i, &g->tensors[i], &names[i], &offsets[i])) goto done;
        names_bytes += (size_t)names[i].len + 1; /* bounded by the file size plus the tensor count */
    }
    g->n_tensors = (int64_t)n_tensors;

    uint64_t align = g->alignment;
    if (r->pos > SIZE_MAX - (align - 1)) {
        pith_errf(err, "%s: data section offset overflows", g->path);
        goto done;
    }
    g->data_offset = ((uint64_t)r->pos + align - 1) / align * align;
    g->names = malloc(names_bytes ? names_bytes : 1);
    pith_name_entry *te = malloc(nt * sizeof *te);
    if (!g->names || !te) {
        free(te);
        pith_errf(err, "%s: out of memory", g->path);
        goto done;
    }
    char *dst = g->names;
    for (uint64_t i = 0; i < n_tensors; i++) {
        memcpy(dst, names[i].ptr, (size_t)names[i].len);
        dst[names[i].len] = '\0';
        g->tensors[i].name = dst;
        te[i] = (pith_name_entry){{dst, names[i].len}, (int64_t)i};
        dst += names[i].len + 1;
    }
    if (pith_name_index_build(&g->tensor_index, te, g->n_tensors, &dup)) {
        char name[PITH_PRINTABLE_CAP];
        const char *n = g->tensors[dup].name;
        pith_errf(err, "%s: duplicate tensor name '%s'", g->path, pith_printable(name, sizeof name, n, strlen(n)));
        goto done;
    }
    for (uint64_t i = 0; i < n_tensors; i++) {
        pith_tensor *t = &g->tensors[i];
        char name[PITH_PRINTABLE_CAP];
        const char *shown = pith_printable(name, sizeof name, t->name, strlen(t->name));
        uint64_t off = offsets[i];
        if (off % align) {
            pith_errf(err, "%s: tensor '%s' data offset %llu is not a multiple of the alignment %llu", g->path,
                      shown, (unsigned long long)off, (unsigned long long)align);
            goto done;
        }
        uint64_t size = r->size, start = g->data_offset;
        if (start > size || off > size - start || t->nbytes > size - start - off) {
            if (off <= UINT64_MAX - start)
                pith_errf(err, "%s: tensor '%s' data [offset %llu, %zu bytes] extends past end of file (%zu bytes)",
                          g->path, shown, (unsigned long long)(start + off), t->nbytes, r->size);
            else
                pith_errf(err, "%s: tensor '%s' data offset %llu is absurd (file %zu bytes)", g->path, shown,
                          (unsigned long long)off, r->size);
            goto done;
        }
        t->data = r->base + start + off;
    }
    rc = 0;
done:
    free(names);
    free(offsets);
    return rc;
}

int pith_gguf_open(const char *path, pith_gguf **out, pith_err *err) {
    *out = NULL;
    pith_gguf *g = calloc(1, sizeof *g);
    if (!g || !(g->path = strdup(path))) {
        free(g);
        return pith_errf(err, "%s: out of memory", path);
    }
    if (pith_map_file(path, &g->map, err)) {
        pith_gguf_close(g);
        return -1;
    }
    reader r = {g->path, g->map.base, g->map.size, 0, err};
    if (parse_header(g, &r)) {
        pith_gguf_close(g);
        return -1;
    }
    *out = g;
    return 0;
}

void pith_gguf_close(pith_gguf *g) {
    if (!g) return;
    for (int64_t i = 0; i < g->n_kv; i++) free((void *)g->kvs[i].arr_strs);
    free(g->kvs);
    pith_name_index_free(&g->kv_index);
    pith_name_index_free(&g->tensor_index);
    free(g->tensors);
    free(g->names);
    pith_unmap_file(&g->map);
    free(g->path);
    free(g);
}
