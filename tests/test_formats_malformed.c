/* Malformed GGUF and llama2.c files, and format detection: every one must be refused with a message naming
 * the file and the problem, and never crash or leak (run under ASan/UBSan): truncations at every header
 * byte, lying counts, offsets and sizes, bad types, implausible llama2.c headers, and random byte flips.
 * (Hugging Face checkpoints: test_safetensors_malformed.c.) */
#include "check.h"
#include "pith/gguf.h"
#include "test_formats_expect.h"

static void gguf_fail(const char *label, const buf *b, const char *needle) {
    char name[128];
    snprintf(name, sizeof name, "mal_%s.gguf", label);
    const char *path = tmp_path(name);
    CHECK(write_file(path, b->p, b->n) == 0);
    pith_gguf *g = (pith_gguf *)1;
    pith_err err = {{0}};
    int rc = pith_gguf_open(path, &g, &err);
    CHECK(g == NULL);
    expect_fail_at(path, rc, &err, needle, label);
    if (!rc) pith_gguf_close(g);
    /* the model-file layer reports the same failure */
    pith_model_file *f = (pith_model_file *)1;
    pith_err err2 = {{0}};
    rc = pith_model_file_open(path, &f, &err2);
    CHECK(f == NULL);
    expect_fail_at(path, rc, &err2, needle, label);
    if (!rc) pith_model_file_close(f);
}

/* A GGUF with one key and the given tensor info, followed by enough data for a 4x4 F32 tensor. */
static void one_tensor(buf *b, uint32_t version, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type,
                       uint64_t offset) {
    gguf_header(b, version, 1, 1);
    gguf_kv_str(b, "general.architecture", "llama");
    gguf_tensor_info(b, name, n_dims, ne, type, offset);
    put_pad(b, 32);
    for (int i = 0; i < 64; i++) put_u8(b, (uint8_t)i);
}

static void test_gguf_header_errors(void) {
    buf b = {0};
    buf_put(&b, "GGUX", 4), put_u32(&b, 3), put_u64(&b, 0), put_u64(&b, 0);
    gguf_fail("magic", &b, "bad magic");
    buf_free(&b);
    gguf_header(&b, 1, 0, 0);
    gguf_fail("v1", &b, "unsupported GGUF version 1");
    buf_free(&b);
    gguf_header(&b, 4, 0, 0);
    gguf_fail("v4", &b, "unsupported GGUF version 4");
    buf_free(&b);
    gguf_header(&b, 0x03000000u, 0, 0);
    gguf_fail("bigendian", &b, "big-endian");
    buf_free(&b);
    gguf_header(&b, 3, UINT64_C(1) << 60, 0);
    gguf_fail("tensor_count", &b, "tensor count 1152921504606846976 is impossible");
    buf_free(&b);
    gguf_header(&b, 3, 0, UINT64_C(1) << 60);
    gguf_fail("kv_count", &b, "metadata key count 1152921504606846976 is impossible");
    buf_free(&b);
    gguf_header(&b, 2, 0, 3); /* claims 3 keys, holds 1 */
    gguf_kv_u32(&b, "a", 1);
    gguf_fail("kv_count_lie", &b, "impossible");
    buf_free(&b);
    gguf_header(&b, 3, 0, 1);
    put_u64(&b, UINT64_C(1) << 62), buf_put(&b, "abc", 3), put_u32(&b, 4), put_u32(&b, 0);
    gguf_fail("key_len", &b, "string length 4611686018427387904");
    buf_free(&b);
    gguf_header(&b, 3, 0, 1);
    put_gstr(&b, "k"), put_u32(&b, 8), put_u64(&b, 1000), buf_put(&b, "short", 5);
    gguf_fail("str_len", &b, "runs past end of file");
    buf_free(&b);
    gguf_header(&b, 3, 0, 1);
    put_gstr(&b, "k"), put_u32(&b, 13), put_u32(&b, 0);
    gguf_fail("kv_type", &b, "unknown value type 13");
    buf_free(&b);
    gguf_header(&b, 3, 0, 1);
    put_gstr(&b, "k"), put_u32(&b, 9), put_u32(&b, 99), put_u64(&b, 0);
    gguf_fail("arr_type", &b, "unknown value type 99");
    buf_free(&b);
    gguf_header(&b, 3, 0, 1);
    put_gstr(&b, "k"), put_u32(&b, 9), put_u32(&b, 4), put_u64(&b, UINT64_C(1) << 61), put_u32(&b, 0);
    gguf_fail("arr_count", &b, "array of 2305843009213693952 elements");
    buf_free(&b);
    gguf_header(&b, 3, 0, 1);
    put_gstr(&b, "k"), put_u32(&b, 9), put_u32(&b, 8), put_u64(&b, UINT64_C(1) << 60), put_u64(&b, 0);
    gguf_fail("arr_strings", &b, "array of 1152921504606846976 strings");
    buf_free(&b);
    gguf_header(&b, 3, 0, 1);
    put_gstr(&b, "k"), put_u32(&b, 9), put_u32(&b, 9), put_u64(&b, 1), put_u32(&b, 9), put_u64(&b, UINT64_C(1) << 59);
    gguf_fail("nested_count", &b, "array of 576460752303423488 arrays");
    buf_free(&b);
    gguf_header(&b, 3, 0, 1);
    put_gstr(&b, "k"), put_u32(&b, 9);
    for (int i = 0; i < 40; i++) put_u32(&b, 9), put_u64(&b, 1);
    put_u32(&b, 4), put_u64(&b, 0);
    gguf_fail("nested_deep", &b, "nested more than");
    buf_free(&b);
    gguf_header(&b, 3, 0, 1);
    put_gstr(&b, "k"), put_u32(&b, 7), put_u8(&b, 2);
    gguf_fail("bool", &b, "not 0 or 1");
    buf_free(&b);
    gguf_header(&b, 3, 0, 2);
    gguf_kv_u32(&b, "same", 1), gguf_kv_u32(&b, "same", 2);
    gguf_fail("dup_key", &b, "duplicate metadata key 'same'");
    buf_free(&b);
    const uint32_t bad_alignments[] = {0, 3, 48};
    for (int i = 0; i < 3; i++) {
        gguf_header(&b, 3, 0, 1);
        gguf_kv_u32(&b, "general.alignment", bad_alignments[i]);
        gguf_fail("alignment", &b, "general.alignment");
        buf_free(&b);
    }
    gguf_header(&b, 3, 0, 1);
    gguf_kv_str(&b, "general.alignment", "32");
    gguf_fail("alignment_type", &b, "general.alignment is not an integer");
    buf_free(&b);
}

static void test_gguf_tensor_errors(void) {
    buf b = {0};
    const uint64_t ne44[2] = {4, 4};
    one_tensor(&b, 3, "w", 2, ne44, 0, 32);
    char needle[160];
    snprintf(needle, sizeof needle, "tensor 'w' data [offset %zu, 64 bytes] extends past end of file (%zu bytes)",
             b.n - 64 + 32, b.n);
    gguf_fail("tensor_past_end", &b, needle);
    buf_free(&b);
    one_tensor(&b, 3, "w", 2, ne44, 0, 16);
    gguf_fail("tensor_unaligned", &b, "data offset 16 is not a multiple of the alignment 32");
    buf_free(&b);
    one_tensor(&b, 3, "w", 2, ne44, 0, UINT64_MAX - 31);
    gguf_fail("tensor_offset_huge", &b, "tensor 'w'");
    buf_free(&b);
    const uint64_t big[2] = {8, UINT64_C(1) << 40};
    one_tensor(&b, 3, "w", 2, big, 0, 0);
    gguf_fail("tensor_size", &b, "extends past end of file");
    buf_free(&b);
    const uint64_t overflow[3] = {UINT64_C(1) << 40, UINT64_C(1) << 40, 2};
    one_tensor(&b, 3, "w", 3, overflow, 0, 0);
    gguf_fail("tensor_overflow", &b, "overflow");
    buf_free(&b);
    const uint64_t bytes_overflow[1] = {UINT64_C(1) << 62};
    one_tensor(&b, 3, "w", 1, bytes_overflow, 0, 0);
    gguf_fail("tensor_bytes_overflow", &b, "size overflows");
    buf_free(&b);
    const uint64_t negative[2] = {4, UINT64_MAX};
    one_tensor(&b, 3, "w", 2, negative, 0, 0);
    gguf_fail("tensor_negative", &b, "negative");
    buf_free(&b);
    one_tensor(&b, 3, "w", 2, ne44, 3, 0);
    gguf_fail("tensor_type_q4_1", &b, "unsupported type 3 (Q4_1)");
    buf_free(&b);
    one_tensor(&b, 3, "w", 2, ne44, 1000, 0);
    gguf_fail("tensor_type_unknown", &b, "unsupported type 1000 (unknown)");
    buf_free(&b);
    const uint64_t five[5] = {1, 1, 1, 1, 1};
    one_tensor(&b, 3, "w", 5, five, 0, 0);
    gguf_fail("tensor_dims", &b, "has 5 dimensions");
    buf_free(&b);
    const uint64_t q33[2] = {33, 1};
    one_tensor(&b, 3, "w", 2, q33, 8, 0);
    gguf_fail("tensor_block", &b, "first dimension 33 is not a multiple of Q8_0's block size 32");
    buf_free(&b);
    one_tensor(&b, 3, "", 2, ne44, 0, 0);
    gguf_fail("tensor_empty_name", &b, "empty name");
    buf_free(&b);
    gguf_header(&b, 3, 1, 0);
    put_u64(&b, 3), buf_put(&b, "a\0b", 3), put_u32(&b, 1), put_u64(&b, 1), put_u32(&b, 0), put_u64(&b, 0);
    put_pad(&b, 32), put_u32(&b, 0);
    gguf_fail("tensor_nul_name", &b, "NUL");
    buf_free(&b);
    char longname[5000];
    memset(longname, 'x', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    one_tensor(&b, 3, longname, 2, ne44, 0, 0);
    gguf_fail("tensor_long_name", &b, "name is 4999 bytes long (at most 4096)");
    buf_free(&b);
    gguf_header(&b, 3, 2, 0);
    gguf_tensor_info(&b, "w", 2, ne44, 0, 0), gguf_tensor_info(&b, "w", 2, ne44, 0, 64);
    put_pad(&b, 32);
    for (int i = 0; i < 128; i++) put_u8(&b, 0);
    gguf_fail("tensor_dup", &b, "duplicate tensor name 'w'");
    buf_free(&b);
    gguf_header(&b, 3, 3, 0); /* claims 3 tensors, describes 1 */
    gguf_tensor_info(&b, "w", 2, ne44, 0, 0);
    put_pad(&b, 32);
    for (int i = 0; i < 64; i++) put_u8(&b, 0);
    gguf_fail("tensor_count_lie", &b, NULL);
    buf_free(&b);
}

/* The all-types file from a valid layout, truncated at every header byte and at a few data points. */
/* data_end: where the last tensor's bytes end (the file has padding after it). */
static void build_rich_gguf(buf *file, uint64_t *data_start, uint64_t *data_end) {
    buf kv = {0};
    uint64_t n = 0;
    gguf_kv_str(&kv, "general.architecture", "llama"), n++;
    gguf_kv_u32(&kv, "general.alignment", 64), n++;
    const char *toks[] = {"<unk>", "<s>", "</s>", "a", "b"};
    gguf_kv_strs(&kv, "tokenizer.ggml.tokens", toks, 5), n++;
    put_gstr(&kv, "nested"), put_u32(&kv, 9), put_u32(&kv, 9), put_u64(&kv, 2), n++;
    put_u32(&kv, 5), put_u64(&kv, 2), put_u32(&kv, 1), put_u32(&kv, 2);
    put_u32(&kv, 8), put_u64(&kv, 1), put_gstr(&kv, "x");
    put_gstr(&kv, "f64"), put_u32(&kv, 12), put_f64(&kv, 2.5), n++;
    put_gstr(&kv, "bools"), put_u32(&kv, 9), put_u32(&kv, 7), put_u64(&kv, 3), put_u8(&kv, 1), put_u8(&kv, 0),
        put_u8(&kv, 1), n++;
    gtensor ts[] = {{"a", 0, 2, {4, 3, 1, 1}}, {"b", 8, 2, {32, 2, 1, 1}}, {"c", 14, 1, {256, 1, 1, 1}}};
    gguf_build(file, 3, &kv, n, ts, 3, 64, 1, data_start);
    /* offsets 0, 64, 192 at alignment 64 */
    *data_end = *data_start + 192 + gtensor_bytes(&ts[2]);
    buf_free(&kv);
}

static void test_truncations(void) {
    buf file = {0};
    uint64_t data_start, data_end;
    build_rich_gguf(&file, &data_start, &data_end);
    const char *path = tmp_path("mal_trunc.gguf");
    CHECK(write_file(path, file.p, file.n) == 0);
    pith_gguf *g;
    pith_err err = {{0}};
    CHECKF(pith_gguf_open(path, &g, &err) == 0, "%s", err.msg); /* the untruncated file is valid */
    if (g) pith_gguf_close(g);
    int bad = 0;
    size_t cuts[4096];
    size_t n_cuts = 0;
    for (size_t len = 0; len <= data_start && n_cuts < 4000; len++) cuts[n_cuts++] = len;
    cuts[n_cuts++] = data_start + 1;
    cuts[n_cuts++] = (data_start + data_end) / 2;
    cuts[n_cuts++] = data_end - 1;
    for (size_t i = 0; i < n_cuts; i++) {
        CHECK(write_file(path, file.p, cuts[i]) == 0);
        g = NULL;
        memset(&err, 0, sizeof err);
        int rc = pith_gguf_open(path, &g, &err);
        if (rc != -1 || g || !strstr(err.msg, path)) {
            bad++;
            fprintf(stderr, "truncated at %zu: rc %d: %s\n", cuts[i], rc, err.msg);
        }
        if (g) pith_gguf_close(g);
    }
    CHECKF(bad == 0, "%d truncations accepted or badly reported", bad);
    CHECK(n_cuts > 200);
    n_refused += (int)n_cuts;
    buf_free(&file);
}

/* Random byte flips in the header must never crash; whatever opens must be safe to read in full. */
static void test_fuzz(void) {
    buf file = {0};
    uint64_t data_start, data_end;
    build_rich_gguf(&file, &data_start, &data_end);
    const char *path = tmp_path("mal_fuzz.gguf");
    uint64_t seed = 0x9e3779b97f4a7c15u;
    int opened = 0, refused = 0;
    uint8_t *copy = malloc(file.n);
    for (int it = 0; it < 3000; it++) {
        memcpy(copy, file.p, file.n);
        int flips = 1 + (int)(test_rng(&seed) % 4);
        for (int k = 0; k < flips; k++) {
            size_t at = (size_t)(test_rng(&seed) % data_start);
            uint64_t r = test_rng(&seed);
            copy[at] = (r & 1) ? (uint8_t)(r >> 8) : (uint8_t)(copy[at] ^ (1u << ((r >> 8) % 8)));
        }
        if (write_file(path, copy, file.n)) break;
        pith_gguf *g = NULL;
        pith_err err = {{0}};
        if (pith_gguf_open(path, &g, &err)) {
            refused++;
            if (!strstr(err.msg, path)) CHECKF(0, "fuzz %d: %s", it, err.msg);
            continue;
        }
        opened++;
        unsigned sum = 0;
        for (int64_t i = 0; i < pith_gguf_n_tensors(g); i++) {
            const pith_tensor *t = pith_gguf_tensor_at(g, i);
            for (size_t k = 0; k < t->nbytes; k++) sum += ((const uint8_t *)t->data)[k];
            sum += (unsigned)strlen(t->name);
        }
        for (int64_t i = 0; i < pith_gguf_n_kv(g); i++) {
            const pith_gguf_kv *kv = pith_gguf_kv_at(g, i);
            for (uint64_t k = 0; k < kv->key.len; k++) sum += (uint8_t)kv->key.ptr[k];
            for (uint64_t e = 0; kv->arr_strs && e < kv->arr_n; e++)
                for (uint64_t k = 0; k < kv->arr_strs[e].len; k++) sum += (uint8_t)kv->arr_strs[e].ptr[k];
            int64_t v;
            double d;
            for (uint64_t e = 0; e < kv->arr_n && e < 16; e++) pith_gguf_arr_i64(kv, e, &v), pith_gguf_arr_f64(kv, e, &d);
        }
        (void)sum;
        pith_gguf_close(g);
    }
    free(copy);
    printf("fuzz: %d opened, %d refused\n", opened, refused);
    CHECK(opened + refused == 3000);
    CHECK(refused > 100); /* flips in counts and lengths are caught */
    buf_free(&file);
}

/* Byte flips in the header of a complete GGUF model, opened through the model-file layer. */
static void test_fuzz_model(void) {
    mspec m = tiny;
    m.tokens = true;
    gtensor ts[32];
    int nt = model_tensor_list(&m, ts);
    buf kv = {0}, file = {0};
    uint64_t n_kv = model_kvs(&m, &kv, NULL), data_start;
    gguf_build(&file, 3, &kv, n_kv, ts, nt, 32, 9, &data_start);
    const char *path = tmp_path("mal_fuzz_model.gguf");
    uint64_t seed = 12345;
    int opened = 0;
    uint8_t *copy = malloc(file.n);
    for (int it = 0; it < 1000; it++) {
        memcpy(copy, file.p, file.n);
        for (int k = 0; k < 2; k++) copy[test_rng(&seed) % data_start] ^= (uint8_t)(1u << (test_rng(&seed) % 8));
        if (write_file(path, copy, file.n)) break;
        pith_model_file *f = NULL;
        pith_err err = {{0}};
        if (pith_model_file_open(path, &f, &err)) {
            if (!strstr(err.msg, path)) CHECKF(0, "model fuzz %d: %s", it, err.msg);
            continue;
        }
        opened++;
        touch_model(f);
        pith_model_file_close(f);
    }
    printf("model fuzz (GGUF): %d of 1000 opened\n", opened);
    free(copy);
    buf_free(&kv);
    buf_free(&file);
}

/* ---- architecture metadata: the descriptors' keys, malformed ---- */

static const mspec tiny_gemma = {
    .arch = "gemma3", .dim = 8, .n_layers = 3, .n_heads = 2, .n_kv_heads = 1, .head_dim = 4, .ffn = 16,
    .vocab = 10, .ctx = 64, .tokens = true, .tied = true, .gemma = true, .wtype = 1, .ntype = 0, .bos = 1, .eos = 2,
};

/* tiny_gemma with its metadata plus `extra` (n_extra keys), written to mal_<label>.gguf. */
static const char *gemma_file(const char *label, const buf *extra, uint64_t n_extra, buf *file) {
    gtensor ts[64];
    int nt = model_tensor_list(&tiny_gemma, ts);
    buf kv = {0};
    uint64_t n_kv = model_kvs(&tiny_gemma, &kv, NULL);
    buf_put(&kv, extra->p, extra->n);
    gguf_build(file, 3, &kv, n_kv + n_extra, ts, nt, 32, 9, NULL);
    buf_free(&kv);
    char name[128];
    snprintf(name, sizeof name, "mal_%s.gguf", label);
    const char *path = tmp_path(name);
    CHECK(write_file(path, file->p, file->n) == 0);
    return path;
}

static void put_bool_array(buf *kv, const char *key, const uint8_t *v, uint64_t n) {
    put_gstr(kv, key);
    put_u32(kv, 9);
    put_u32(kv, 7);
    put_u64(kv, n);
    buf_put(kv, v, n);
}

static void test_arch_metadata_errors(void) {
    static const uint8_t two[2] = {1, 0}, three[3] = {1, 1, 0};
    for (int c = 0; c < 6; c++) {
        buf kv = {0}, file = {0};
        uint64_t n = 1;
        const char *needle = NULL, *label = NULL;
        switch (c) {
        case 0:
            gguf_kv_str(&kv, "gemma3.attention.sliding_window", "wide");
            label = "gemma_window_type", needle = "metadata key gemma3.attention.sliding_window is not an integer";
            break;
        case 1:
            gguf_kv_u32(&kv, "gemma3.attention.sliding_window", 16);
            put_bool_array(&kv, "gemma3.attention.sliding_window_pattern", two, 2);
            n = 2, label = "gemma_pattern_len", needle = "has 2 entries, expected one per layer (3)";
            break;
        case 2: {
            gguf_kv_u32(&kv, "gemma3.attention.sliding_window", 16);
            put_gstr(&kv, "gemma3.attention.sliding_window_pattern");
            put_u32(&kv, 9);
            put_u32(&kv, 6); /* F32 items */
            put_u64(&kv, 3);
            for (int i = 0; i < 3; i++) put_f32(&kv, 1.0f);
            n = 2, label = "gemma_pattern_items", needle = "entry 0 is not a string, number or boolean";
            break;
        }
        case 3:
            gguf_kv_str(&kv, "gemma3.final_logit_softcapping", "30");
            label = "gemma_softcap_type", needle = "final_logit_softcapping is not a number";
            break;
        case 4:
            gguf_kv_f32(&kv, "gemma3.rope.freq_base_swa", -5.0f);
            gguf_kv_u32(&kv, "gemma3.attention.sliding_window", 16);
            n = 2, label = "gemma_local_base", needle = "sliding-window RoPE theta -5";
            break;
        default:
            gguf_kv_u32(&kv, "gemma3.attention.sliding_window", -3 & 0x7fffffff);
            put_bool_array(&kv, "gemma3.attention.sliding_window_pattern", three, 3);
            n = 2, label = "gemma_window_range", needle = "sliding window is 2147483645";
            break;
        }
        const char *path = gemma_file(label, &kv, n, &file);
        model_fail(label, path, path, needle);
        buf_free(&kv);
        buf_free(&file);
    }
}

/* Byte flips in the header of a Gemma 3 GGUF with every optional descriptor key present. */
static void test_fuzz_gemma3(void) {
    static const uint8_t pattern[3] = {1, 1, 0};
    buf kv = {0}, file = {0};
    gguf_kv_u32(&kv, "gemma3.attention.sliding_window", 16);
    put_bool_array(&kv, "gemma3.attention.sliding_window_pattern", pattern, 3);
    gguf_kv_f32(&kv, "gemma3.final_logit_softcapping", 30.0f);
    gguf_kv_f32(&kv, "gemma3.rope.freq_base_swa", 10000.0f);
    const char *path = gemma_file("fuzz_gemma3", &kv, 4, &file);
    pith_model_file *f;
    pith_err err = {{0}};
    CHECKF(pith_model_file_open(path, &f, &err) == 0, "%s", err.msg);
    if (f) {
        CHECK(pith_layer_bit(pith_model_file_hparams(f)->layer_swa, 1) && pith_model_file_hparams(f)->sliding_window == 16);
        pith_model_file_close(f);
    }
    uint64_t seed = 777, header = file.n / 2;
    int opened = 0;
    uint8_t *copy = malloc(file.n);
    for (int it = 0; it < 600; it++) {
        memcpy(copy, file.p, file.n);
        for (int k = 0; k < 2; k++) copy[test_rng(&seed) % header] ^= (uint8_t)(1u << (test_rng(&seed) % 8));
        if (write_file(path, copy, file.n)) break;
        f = NULL;
        if (pith_model_file_open(path, &f, &err)) {
            if (!strstr(err.msg, path)) CHECKF(0, "gemma3 fuzz %d: %s", it, err.msg);
            continue;
        }
        opened++;
        touch_model(f);
        pith_model_file_close(f);
    }
    printf("model fuzz (GGUF gemma3): %d of 600 opened\n", opened);
    free(copy);
    buf_free(&kv);
    buf_free(&file);
}

/* ---- llama2.c and format detection ---- */

static void l2c_fail(const char *label, const int32_t h[7], size_t extra_floats, const char *needle) {
    buf b = {0};
    for (int i = 0; i < 7; i++) put_u32(&b, (uint32_t)h[i]);
    for (size_t i = 0; i < extra_floats; i++) put_f32(&b, 0.5f);
    char name[96];
    snprintf(name, sizeof name, "mal_%s.bin", label);
    const char *path = tmp_path(name);
    CHECK(write_file(path, b.p, b.n) == 0);
    model_fail(label, path, path, needle);
    buf_free(&b);
}

static void test_llama2c_errors(void) {
    const int32_t ok[7] = {8, 12, 1, 2, 2, 10, 4};
    /* 80 + 8 + 64 + 64 + 64 + 64 + 8 + 96*3 + 8 + 4*2*2 floats */
    size_t exact = 80 + 8 + 64 * 4 + 8 + 96 * 3 + 8 + 16;
    l2c_fail("l2c_short", ok, exact - 1, "implies");
    l2c_fail("l2c_long", ok, exact + 3, "but the file has");
    l2c_fail("l2c_header_only", ok, 0, "implies");
    const int32_t absurd[][7] = {
        {-8, 12, 1, 2, 2, 10, 4}, {8, 12, 1000000, 2, 2, 10, 4}, {8, 12, 1, 3, 3, 10, 4}, {8, 12, 1, 2, 4, 10, 4},
        {8, 12, 1, 2, 2, 0, 4},   {8, 12, 1, 2, 2, 10, 0},       {1 << 21, 12, 1, 2, 2, 10, 4},
        {8, 12, 1, 8, 8, 10, 4}, /* head size 1: odd */
    };
    const char *fields[] = {"dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "seq_len", "dim", "odd head size"};
    for (size_t i = 0; i < sizeof absurd / sizeof absurd[0]; i++) {
        char label[32], needle[64];
        snprintf(label, sizeof label, "l2c_absurd%zu", i);
        snprintf(needle, sizeof needle, "%s", fields[i]);
        l2c_fail(label, absurd[i], exact, needle);
    }
    /* the largest plausible header over a tiny file: sizes computed without overflow, then refused */
    const int32_t huge[7] = {1 << 20, 1 << 20, 4096, 1 << 10, 1 << 10, -(1 << 24), 1 << 24};
    l2c_fail("l2c_huge", huge, 16, "implies");
    buf b = {0};
    put_u32(&b, 8);
    const char *path = tmp_path("mal_tiny.bin");
    CHECK(write_file(path, b.p, b.n) == 0);
    model_fail("l2c_tiny", path, path, "too short for a llama2.c header");
    buf_free(&b);

    path = tmp_path("mal_unknown.txt");
    CHECK(write_text(path, "hello") == 0);
    model_fail("unrecognised", path, path, "unrecognised model format");
    path = tmp_path("mal_empty.gguf");
    CHECK(write_file(path, "", 0) == 0);
    model_fail("empty_gguf", path, path, "file is empty");
    path = tmp_path("does-not-exist.gguf");
    model_fail("missing_file", path, path, "cannot open");
    pith_model_file *f = (pith_model_file *)1;
    pith_err err = {{0}};
    CHECK(pith_model_file_open("", &f, &err) == -1 && f == NULL && err.msg[0]);
    CHECK(pith_model_file_open(tmp_dir(), &f, &err) == -1 && f == NULL);
    pith_gguf *g = (pith_gguf *)1;
    CHECK(pith_gguf_open(tmp_dir(), &g, &err) == -1 && g == NULL && strstr(err.msg, "not a regular file"));
    /* a .gguf name without the magic is refused as GGUF, not guessed at */
    path = tmp_path("mal_nomagic.gguf");
    CHECK(write_text(path, "GGML and other things") == 0);
    model_fail("nomagic", path, path, "bad magic");
}

int main(void) {
    test_gguf_header_errors();
    test_gguf_tensor_errors();
    test_truncations();
    test_fuzz();
    test_fuzz_model();
    test_arch_metadata_errors();
    test_fuzz_gemma3();
    test_llama2c_errors();
    printf("%d malformed inputs refused\n", n_refused);
    return check_summary("test_formats_malformed");
}
