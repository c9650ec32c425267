/* Helpers shared by the format tests: a growable byte buffer, writers for small GGUF and safetensors
 * files (written independently of the library's readers, byte by byte from the format specs), and
 * scratch paths under PITH_TEST_TMP. */
#ifndef PITH_TEST_FORMATS_UTIL_H
#define PITH_TEST_FORMATS_UTIL_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct buf {
    uint8_t *p;
    size_t n, cap;
} buf;

static inline void buf_put(buf *b, const void *src, size_t n) {
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n) cap *= 2;
        b->p = realloc(b->p, cap);
        if (!b->p) abort();
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, src, n);
    b->n += n;
}

static inline void put_u8(buf *b, uint8_t v) { buf_put(b, &v, 1); }
static inline void put_u16(buf *b, uint16_t v) { uint8_t x[2] = {(uint8_t)v, (uint8_t)(v >> 8)}; buf_put(b, x, 2); }
static inline void put_u32(buf *b, uint32_t v) {
    uint8_t x[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    buf_put(b, x, 4);
}
static inline void put_u64(buf *b, uint64_t v) { put_u32(b, (uint32_t)v); put_u32(b, (uint32_t)(v >> 32)); }
static inline void put_f32(buf *b, float f) { uint32_t u; memcpy(&u, &f, 4); put_u32(b, u); }
static inline void put_f64(buf *b, double d) { uint64_t u; memcpy(&u, &d, 8); put_u64(b, u); }
static inline void put_gstr(buf *b, const char *s) { put_u64(b, strlen(s)); buf_put(b, s, strlen(s)); }
static inline void put_pad(buf *b, size_t align) { while (b->n % align) put_u8(b, 0); }

static inline void buf_free(buf *b) { free(b->p); b->p = NULL; b->n = b->cap = 0; }

static inline const char *tmp_dir(void) {
    const char *d = getenv("PITH_TEST_TMP");
    return d && *d ? d : "/tmp";
}

/* A path under the scratch directory; returns a static buffer from a small ring. */
static inline const char *tmp_path(const char *name) {
    static char ring[8][4096];
    static int k;
    char *p = ring[k++ % 8];
    snprintf(p, 4096, "%s/%s", tmp_dir(), name);
    return p;
}

static inline int write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = n ? fwrite(data, 1, n, f) : 0;
    return fclose(f) == 0 && w == n ? 0 : -1;
}

static inline int write_text(const char *path, const char *text) { return write_file(path, text, strlen(text)); }

static inline int make_dir(const char *path) {
    return mkdir(path, 0755) == 0 || errno == EEXIST ? 0 : -1;
}

/* Deterministic bytes for tensor payloads. */
static inline uint64_t test_rng(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* ---- GGUF writer: the caller emits header, kvs, tensor infos, then data through these. ---- */
static inline void gguf_header(buf *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    buf_put(b, "GGUF", 4);
    put_u32(b, version);
    put_u64(b, n_tensors);
    put_u64(b, n_kv);
}

static inline void gguf_kv_u32(buf *b, const char *key, uint32_t v) { put_gstr(b, key); put_u32(b, 4); put_u32(b, v); }
static inline void gguf_kv_i32(buf *b, const char *key, int32_t v) { put_gstr(b, key); put_u32(b, 5); put_u32(b, (uint32_t)v); }
static inline void gguf_kv_f32(buf *b, const char *key, float v) { put_gstr(b, key); put_u32(b, 6); put_f32(b, v); }
static inline void gguf_kv_str(buf *b, const char *key, const char *v) { put_gstr(b, key); put_u32(b, 8); put_gstr(b, v); }
static inline void gguf_kv_strs(buf *b, const char *key, const char *const *v, size_t n) {
    put_gstr(b, key);
    put_u32(b, 9);
    put_u32(b, 8);
    put_u64(b, n);
    for (size_t i = 0; i < n; i++) put_gstr(b, v[i]);
}

static inline void gguf_tensor_info(buf *b, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type,
                                    uint64_t offset) {
    put_gstr(b, name);
    put_u32(b, n_dims);
    for (uint32_t i = 0; i < n_dims; i++) put_u64(b, ne[i]);
    put_u32(b, type);
    put_u64(b, offset);
}

/* A tensor to write: GGML type id and shape; the payload is generated from a seed. */
typedef struct gtensor {
    char name[64];
    uint32_t type;
    uint32_t n_dims;
    uint64_t ne[4];
} gtensor;

/* Block geometry per GGML type id, from the GGML docs (independent of pith_dtype_*). */
static inline uint64_t gtype_bytes(uint32_t type, uint64_t nel) {
    switch (type) {
    case 0: return nel * 4;                /* F32 */
    case 1: case 30: return nel * 2;       /* F16, BF16 */
    case 2: return nel / 32 * 18;          /* Q4_0 */
    case 8: return nel / 32 * 34;          /* Q8_0 */
    case 12: return nel / 256 * 144;       /* Q4_K */
    case 14: return nel / 256 * 210;       /* Q6_K */
    default: return 0;
    }
}

static inline uint64_t gtensor_bytes(const gtensor *t) {
    uint64_t nel = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) nel *= t->ne[d];
    return gtype_bytes(t->type, nel);
}

/* Writes a whole GGUF: header, the pre-serialised kvs, tensor infos with offsets laid out at `align`,
 * padding, and seeded random payloads. data_start (optional) receives the data section's file offset. */
static inline void gguf_build(buf *out, uint32_t version, const buf *kvs, uint64_t n_kv, const gtensor *ts, int nt,
                              uint64_t align, uint64_t seed, uint64_t *data_start) {
    gguf_header(out, version, (uint64_t)nt, n_kv);
    buf_put(out, kvs->p, kvs->n);
    uint64_t off = 0;
    for (int i = 0; i < nt; i++) {
        gguf_tensor_info(out, ts[i].name, ts[i].n_dims, ts[i].ne, ts[i].type, off);
        off += gtensor_bytes(&ts[i]);
        off = (off + align - 1) / align * align;
    }
    put_pad(out, align);
    if (data_start) *data_start = out->n;
    uint64_t s = seed | 1;
    for (int i = 0; i < nt; i++) {
        uint64_t n = gtensor_bytes(&ts[i]);
        for (uint64_t k = 0; k < n; k++) put_u8(out, (uint8_t)(test_rng(&s) >> 24));
        put_pad(out, align);
    }
}

#endif
