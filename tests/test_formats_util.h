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
 * padding, and seeded random payloads (each padded to `align`, so the file ends with padding).
 * data_start (optional) receives the data section's file offset. */
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

/* ---- a small Llama-family model, for the model-file tests ---- */
typedef struct mspec {
    const char *arch;
    int dim, n_layers, n_heads, n_kv_heads, head_dim, ffn, vocab, ctx;
    bool bias, qk_norm, tied, rope_freqs, tokens;
    bool gemma;            /* Gemma 3's layer tensors (q/k norms, post-attention and post-FFN norms) */
    uint32_t wtype, ntype; /* GGML types of matrices and of vectors */
    int bos, eos;
    const char *rope_type; /* GGUF {arch}.rope.scaling.type, written with rope_factor when set */
    float rope_factor;
} mspec;

static inline void add_gt(gtensor *ts, int *n, const char *name, uint32_t type, uint64_t ne0, uint64_t ne1) {
    gtensor *t = &ts[(*n)++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->type = type;
    t->n_dims = ne1 ? 2 : 1;
    t->ne[0] = ne0;
    t->ne[1] = ne1 ? ne1 : 1;
    t->ne[2] = t->ne[3] = 1;
}

/* Canonical tensors of m (ts needs 4 + 14 * n_layers entries). */
static inline int model_tensor_list(const mspec *m, gtensor *ts) {
    int n = 0;
    uint64_t q = (uint64_t)m->n_heads * m->head_dim, kv = (uint64_t)m->n_kv_heads * m->head_dim;
    add_gt(ts, &n, "token_embd.weight", m->wtype, m->dim, m->vocab);
    add_gt(ts, &n, "output_norm.weight", m->ntype, m->dim, 0);
    if (!m->tied) add_gt(ts, &n, "output.weight", m->wtype, m->dim, m->vocab);
    if (m->rope_freqs) add_gt(ts, &n, "rope_freqs.weight", 0, m->head_dim / 2, 0);
    for (int l = 0; l < m->n_layers; l++) {
        char name[64];
#define LT(suffix, type, a, b) (snprintf(name, sizeof name, "blk.%d." suffix, l), add_gt(ts, &n, name, type, a, b))
        LT("attn_norm.weight", m->ntype, m->dim, 0);
        LT("attn_q.weight", m->wtype, m->dim, q);
        LT("attn_k.weight", m->wtype, m->dim, kv);
        LT("attn_v.weight", m->wtype, m->dim, kv);
        LT("attn_output.weight", m->wtype, q, m->dim);
        if (m->gemma) {
            LT("attn_q_norm.weight", m->ntype, m->head_dim, 0);
            LT("attn_k_norm.weight", m->ntype, m->head_dim, 0);
            LT("post_attention_norm.weight", m->ntype, m->dim, 0);
            LT("ffn_norm.weight", m->ntype, m->dim, 0);
            LT("ffn_gate.weight", m->wtype, m->dim, m->ffn);
            LT("ffn_up.weight", m->wtype, m->dim, m->ffn);
            LT("ffn_down.weight", m->wtype, m->ffn, m->dim);
            LT("post_ffw_norm.weight", m->ntype, m->dim, 0);
            continue;
        }
        if (m->bias) {
            LT("attn_q.bias", m->ntype, q, 0);
            LT("attn_k.bias", m->ntype, kv, 0);
            LT("attn_v.bias", m->ntype, kv, 0);
        }
        if (m->qk_norm) {
            LT("attn_q_norm.weight", m->ntype, m->head_dim, 0);
            LT("attn_k_norm.weight", m->ntype, m->head_dim, 0);
        }
        LT("ffn_norm.weight", m->ntype, m->dim, 0);
        LT("ffn_gate.weight", m->wtype, m->dim, m->ffn);
        LT("ffn_up.weight", m->wtype, m->dim, m->ffn);
        LT("ffn_down.weight", m->wtype, m->ffn, m->dim);
#undef LT
    }
    return n;
}

/* GGUF metadata for m, leaving out `skip` (a key suffix after "{arch}.", or a full key), if given. */
static inline uint64_t model_kvs(const mspec *m, buf *kv, const char *skip) {
    uint64_t n = 0;
    char key[128];
#define SKIP(k) (skip && (!strcmp(skip, k)))
#define AK(suffix) (snprintf(key, sizeof key, "%s.%s", m->arch, suffix), key)
    if (!SKIP("general.architecture")) gguf_kv_str(kv, "general.architecture", m->arch), n++;
    if (!SKIP("context_length")) gguf_kv_u32(kv, AK("context_length"), (uint32_t)m->ctx), n++;
    if (!SKIP("embedding_length")) gguf_kv_u32(kv, AK("embedding_length"), (uint32_t)m->dim), n++;
    if (!SKIP("block_count")) gguf_kv_u32(kv, AK("block_count"), (uint32_t)m->n_layers), n++;
    if (!SKIP("feed_forward_length")) gguf_kv_u32(kv, AK("feed_forward_length"), (uint32_t)m->ffn), n++;
    if (!SKIP("attention.head_count")) gguf_kv_u32(kv, AK("attention.head_count"), (uint32_t)m->n_heads), n++;
    if (!SKIP("attention.head_count_kv") && m->n_kv_heads != m->n_heads)
        gguf_kv_u32(kv, AK("attention.head_count_kv"), (uint32_t)m->n_kv_heads), n++;
    if (!SKIP("attention.key_length") && m->head_dim * m->n_heads != m->dim)
        gguf_kv_u32(kv, AK("attention.key_length"), (uint32_t)m->head_dim), n++;
    if (!SKIP("attention.layer_norm_rms_epsilon")) gguf_kv_f32(kv, AK("attention.layer_norm_rms_epsilon"), 1e-6f), n++;
    if (!SKIP("rope.freq_base")) gguf_kv_f32(kv, AK("rope.freq_base"), 500000.0f), n++;
    if (m->tokens) {
        put_gstr(kv, "tokenizer.ggml.tokens");
        put_u32(kv, 9);
        put_u32(kv, 8);
        put_u64(kv, (uint64_t)m->vocab);
        for (int i = 0; i < m->vocab; i++) {
            char t[32];
            snprintf(t, sizeof t, "tok%d", i);
            put_gstr(kv, t);
        }
        n++;
    }
    if (m->rope_type) {
        gguf_kv_str(kv, AK("rope.scaling.type"), m->rope_type), n++;
        if (!SKIP("rope.scaling.factor")) gguf_kv_f32(kv, AK("rope.scaling.factor"), m->rope_factor), n++;
    }
    if (m->bos >= 0) gguf_kv_u32(kv, "tokenizer.ggml.bos_token_id", (uint32_t)m->bos), n++;
    if (m->eos >= 0) gguf_kv_u32(kv, "tokenizer.ggml.eos_token_id", (uint32_t)m->eos), n++;
#undef SKIP
#undef AK
    return n;
}

/* ---- safetensors writer ---- */
typedef struct stensor {
    char name[96];
    char dtype[16];
    int n_dims;
    uint64_t shape[4]; /* safetensors order: outermost first */
} stensor;

static inline uint64_t st_elem_size(const char *dtype) {
    if (!strcmp(dtype, "F32") || !strcmp(dtype, "I32")) return 4;
    if (!strcmp(dtype, "F16") || !strcmp(dtype, "BF16")) return 2;
    if (!strcmp(dtype, "I64") || !strcmp(dtype, "F64")) return 8;
    return 1;
}

static inline uint64_t st_bytes(const stensor *t) {
    uint64_t n = st_elem_size(t->dtype);
    for (int d = 0; d < t->n_dims; d++) n *= t->shape[d];
    return n;
}

/* Writes a safetensors file; the first tensor's data starts `skew` bytes into the data section (to make
 * misaligned views). data_start (optional) receives the data section's file offset. */
static inline void st_build(buf *out, const stensor *ts, int n, uint64_t seed, uint64_t skew, uint64_t *data_start) {
    buf h = {0};
    buf_put(&h, "{\"__metadata__\":{\"format\":\"pt\"}", strlen("{\"__metadata__\":{\"format\":\"pt\"}"));
    uint64_t off = skew;
    for (int i = 0; i < n; i++) {
        char item[512];
        int k = snprintf(item, sizeof item, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[", ts[i].name, ts[i].dtype);
        for (int d = 0; d < ts[i].n_dims; d++)
            k += snprintf(item + k, sizeof item - (size_t)k, "%s%llu", d ? "," : "", (unsigned long long)ts[i].shape[d]);
        uint64_t nb = st_bytes(&ts[i]);
        k += snprintf(item + k, sizeof item - (size_t)k, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off,
                      (unsigned long long)(off + nb));
        buf_put(&h, item, (size_t)k);
        off += nb;
    }
    put_u8(&h, '}');
    while (h.n % 8) put_u8(&h, ' ');
    put_u64(out, h.n);
    buf_put(out, h.p, h.n);
    if (data_start) *data_start = out->n;
    uint64_t s = seed | 1;
    for (uint64_t i = 0; i < off; i++) put_u8(out, (uint8_t)(test_rng(&s) >> 24));
    buf_free(&h);
}

static inline const char *st_dtype(uint32_t ggml_type) {
    return ggml_type == 0 ? "F32" : ggml_type == 1 ? "F16" : "BF16";
}

static inline void add_st(stensor *ts, int *n, const char *name, const char *dtype, uint64_t out, uint64_t in) {
    stensor *t = &ts[(*n)++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    snprintf(t->dtype, sizeof t->dtype, "%s", dtype);
    t->n_dims = in ? 2 : 1;
    t->shape[0] = out;
    t->shape[1] = in;
}

/* Hugging Face tensors of m (ts needs 4 + 14 * n_layers entries); shapes are [out, in]. */
static inline int model_st_list(const mspec *m, stensor *ts) {
    int n = 0;
    uint64_t q = (uint64_t)m->n_heads * m->head_dim, kv = (uint64_t)m->n_kv_heads * m->head_dim;
    const char *w = st_dtype(m->wtype), *v = st_dtype(m->ntype);
    add_st(ts, &n, "model.embed_tokens.weight", w, m->vocab, m->dim);
    add_st(ts, &n, "model.norm.weight", v, m->dim, 0);
    if (!m->tied) add_st(ts, &n, "lm_head.weight", w, m->vocab, m->dim);
    for (int l = 0; l < m->n_layers; l++) {
        char name[96];
#define HT(suffix, dt, a, b) (snprintf(name, sizeof name, "model.layers.%d." suffix, l), add_st(ts, &n, name, dt, a, b))
        HT("input_layernorm.weight", v, m->dim, 0);
        HT("self_attn.q_proj.weight", w, q, m->dim);
        HT("self_attn.k_proj.weight", w, kv, m->dim);
        HT("self_attn.v_proj.weight", w, kv, m->dim);
        HT("self_attn.o_proj.weight", w, m->dim, q);
        if (m->gemma) {
            HT("self_attn.q_norm.weight", v, m->head_dim, 0);
            HT("self_attn.k_norm.weight", v, m->head_dim, 0);
            HT("post_attention_layernorm.weight", v, m->dim, 0);
            HT("pre_feedforward_layernorm.weight", v, m->dim, 0);
            HT("mlp.gate_proj.weight", w, m->ffn, m->dim);
            HT("mlp.up_proj.weight", w, m->ffn, m->dim);
            HT("mlp.down_proj.weight", w, m->dim, m->ffn);
            HT("post_feedforward_layernorm.weight", v, m->dim, 0);
            continue;
        }
        if (m->bias) {
            HT("self_attn.q_proj.bias", v, q, 0);
            HT("self_attn.k_proj.bias", v, kv, 0);
            HT("self_attn.v_proj.bias", v, kv, 0);
        }
        if (m->qk_norm) {
            HT("self_attn.q_norm.weight", v, m->head_dim, 0);
            HT("self_attn.k_norm.weight", v, m->head_dim, 0);
        }
        HT("post_attention_layernorm.weight", v, m->dim, 0);
        HT("mlp.gate_proj.weight", w, m->ffn, m->dim);
        HT("mlp.up_proj.weight", w, m->ffn, m->dim);
        HT("mlp.down_proj.weight", w, m->dim, m->ffn);
#undef HT
    }
    return n;
}

/* config.json for m; `extra` is spliced in as more members (may be ""). */
static inline void model_config(const mspec *m, const char *hf_arch, const char *extra, char *out, size_t cap) {
    snprintf(out, cap,
             "{\"architectures\": [\"%s\"], \"hidden_size\": %d, \"intermediate_size\": %d, "
             "\"num_hidden_layers\": %d, \"num_attention_heads\": %d, \"num_key_value_heads\": %d, "
             "\"head_dim\": %d, \"rms_norm_eps\": 1e-05, \"rope_theta\": 1000000.0, "
             "\"max_position_embeddings\": %d, \"vocab_size\": %d, \"tie_word_embeddings\": %s, "
             "\"bos_token_id\": %d, \"eos_token_id\": %d%s}",
             hf_arch, m->dim, m->ffn, m->n_layers, m->n_heads, m->n_kv_heads, m->head_dim, m->ctx, m->vocab,
             m->tied ? "true" : "false", m->bos, m->eos, extra);
}

#endif
