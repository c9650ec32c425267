/* GGUF accessors: lookups and typed reads of values validated by gguf.c. Values may sit at any byte
 * offset in the mapping, so they are read with memcpy. */
#include <string.h>

#include "format/gguf_internal.h"

uint32_t pith_gguf_version(const pith_gguf *g) { return g->version; }
const char *pith_gguf_path(const pith_gguf *g) { return g->path; }
int64_t pith_gguf_n_kv(const pith_gguf *g) { return g->n_kv; }
int64_t pith_gguf_n_tensors(const pith_gguf *g) { return g->n_tensors; }

const pith_gguf_kv *pith_gguf_kv_at(const pith_gguf *g, int64_t i) {
    return i >= 0 && i < g->n_kv ? &g->kvs[i] : NULL;
}

const pith_gguf_kv *pith_gguf_find(const pith_gguf *g, const char *key) {
    int64_t i = pith_name_index_find(&g->kv_index, key, strlen(key));
    return i < 0 ? NULL : &g->kvs[i];
}

const pith_tensor *pith_gguf_tensor_at(const pith_gguf *g, int64_t i) {
    return i >= 0 && i < g->n_tensors ? &g->tensors[i] : NULL;
}

const pith_tensor *pith_gguf_find_tensor(const pith_gguf *g, const char *name) {
    int64_t i = pith_name_index_find(&g->tensor_index, name, strlen(name));
    return i < 0 ? NULL : &g->tensors[i];
}

/* Integer value of type `type` at p; false for non-integer types and uint64 values above INT64_MAX. */
static bool read_int(uint32_t type, const void *p, int64_t *out) {
    switch (type) {
    case PITH_GGUF_UINT8: { uint8_t v; memcpy(&v, p, 1); *out = v; return true; }
    case PITH_GGUF_INT8: { int8_t v; memcpy(&v, p, 1); *out = v; return true; }
    case PITH_GGUF_UINT16: { uint16_t v; memcpy(&v, p, 2); *out = v; return true; }
    case PITH_GGUF_INT16: { int16_t v; memcpy(&v, p, 2); *out = v; return true; }
    case PITH_GGUF_UINT32: { uint32_t v; memcpy(&v, p, 4); *out = v; return true; }
    case PITH_GGUF_INT32: { int32_t v; memcpy(&v, p, 4); *out = v; return true; }
    case PITH_GGUF_INT64: { int64_t v; memcpy(&v, p, 8); *out = v; return true; }
    case PITH_GGUF_UINT64: {
        uint64_t v;
        memcpy(&v, p, 8);
        if (v > INT64_MAX) return false;
        *out = (int64_t)v;
        return true;
    }
    default: return false;
    }
}

/* Floats as they are; integers only when a double holds them exactly. */
static bool read_float(uint32_t type, const void *p, double *out) {
    if (type == PITH_GGUF_FLOAT32) {
        float v;
        memcpy(&v, p, 4);
        *out = v;
        return true;
    }
    if (type == PITH_GGUF_FLOAT64) {
        memcpy(out, p, 8);
        return true;
    }
    int64_t i;
    if (!read_int(type, p, &i) || i > (INT64_C(1) << 53) || i < -(INT64_C(1) << 53)) return false;
    *out = (double)i;
    return true;
}

bool pith_gguf_get_i64(const pith_gguf *g, const char *key, int64_t *out) {
    const pith_gguf_kv *kv = pith_gguf_find(g, key);
    return kv && read_int(kv->type, kv->data, out);
}

bool pith_gguf_get_f64(const pith_gguf *g, const char *key, double *out) {
    const pith_gguf_kv *kv = pith_gguf_find(g, key);
    return kv && read_float(kv->type, kv->data, out);
}

bool pith_gguf_get_bool(const pith_gguf *g, const char *key, bool *out) {
    const pith_gguf_kv *kv = pith_gguf_find(g, key);
    if (!kv || kv->type != PITH_GGUF_BOOL) return false;
    *out = *(const uint8_t *)kv->data != 0;
    return true;
}

bool pith_gguf_get_str(const pith_gguf *g, const char *key, pith_str *out) {
    const pith_gguf_kv *kv = pith_gguf_find(g, key);
    if (!kv || kv->type != PITH_GGUF_STRING) return false;
    const uint8_t *p = kv->data;
    uint64_t len = 0; /* little-endian, validated at open time */
    for (int b = 7; b >= 0; b--) len = len << 8 | p[b];
    out->ptr = (const char *)p + 8;
    out->len = len;
    return true;
}

static const void *elem(const pith_gguf_kv *kv, uint64_t i) {
    size_t size = pith_gguf_scalar_size(kv->arr_type);
    if (kv->type != PITH_GGUF_ARRAY || !size || i >= kv->arr_n) return NULL;
    return (const uint8_t *)kv->data + i * size;
}

bool pith_gguf_arr_i64(const pith_gguf_kv *kv, uint64_t i, int64_t *out) {
    const void *p = elem(kv, i);
    return p && read_int(kv->arr_type, p, out);
}

bool pith_gguf_arr_f64(const pith_gguf_kv *kv, uint64_t i, double *out) {
    const void *p = elem(kv, i);
    return p && read_float(kv->arr_type, p, out);
}

bool pith_gguf_arr_str(const pith_gguf_kv *kv, uint64_t i, pith_str *out) {
    if (kv->type != PITH_GGUF_ARRAY || kv->arr_type != PITH_GGUF_STRING || i >= kv->arr_n || !kv->arr_strs)
        return false;
    *out = kv->arr_strs[i];
    return true;
}

bool pith_str_eq(pith_str s, const char *cstr) {
    size_t n = strlen(cstr);
    return s.len == n && (n == 0 || memcmp(s.ptr, cstr, n) == 0);
}
