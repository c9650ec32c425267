/* GGUF reader: the shared fixture, and synthetic v2/v3 files with every metadata type (including nested
 * arrays), alignments 32 and 64 and every supported tensor type, read back exactly. */
#include <math.h>

#include "check.h"
#include "pith/gguf.h"
#include "test_formats_util.h"

static bool str_is(pith_str s, const char *c) { return s.len == strlen(c) && !memcmp(s.ptr, c, s.len); }

static void test_fixture(const char *shared) {
    char path[4096];
    snprintf(path, sizeof path, "%s/models/fixtures/llama-2-tiny-random.gguf", shared);
    pith_gguf *g = NULL;
    pith_err err = {{0}};
    int rc = pith_gguf_open(path, &g, &err);
    CHECKF(rc == 0, "%s", err.msg);
    if (rc) return;
    CHECK(pith_gguf_version(g) == 3);
    CHECK(!strcmp(pith_gguf_path(g), path));
    pith_str arch;
    CHECK(pith_gguf_get_str(g, "general.architecture", &arch) && str_is(arch, "llama"));
    const pith_gguf_kv *tok = pith_gguf_find(g, "tokenizer.ggml.tokens");
    CHECK(tok && tok->type == PITH_GGUF_ARRAY && tok->arr_type == PITH_GGUF_STRING && tok->arr_n == 32000);
    if (tok && tok->arr_strs && tok->arr_n == 32000) {
        CHECK(str_is(tok->arr_strs[0], "<unk>"));
        CHECK(str_is(tok->arr_strs[1], "<s>"));
        CHECK(str_is(tok->arr_strs[2], "</s>"));
        pith_str s;
        CHECK(pith_gguf_arr_str(tok, 1, &s) && str_is(s, "<s>"));
        CHECK(!pith_gguf_arr_str(tok, 32000, &s));
        /* Every view must lie inside the token table's run of the file, contiguous and in order. */
        bool contiguous = true;
        for (uint64_t i = 1; i < tok->arr_n; i++)
            if (tok->arr_strs[i].ptr != tok->arr_strs[i - 1].ptr + tok->arr_strs[i - 1].len + 8) contiguous = false;
        CHECK(contiguous);
    }
    const pith_gguf_kv *scores = pith_gguf_find(g, "tokenizer.ggml.scores");
    CHECK(scores && scores->arr_type == PITH_GGUF_FLOAT32 && scores->arr_n == 32000);
    int64_t v;
    CHECK(pith_gguf_get_i64(g, "llama.embedding_length", &v) && v == 8);
    CHECK(pith_gguf_get_i64(g, "llama.block_count", &v) && v == 1);
    CHECK(pith_gguf_get_i64(g, "tokenizer.ggml.bos_token_id", &v) && v == 1);
    double eps;
    CHECK(pith_gguf_get_f64(g, "llama.attention.layer_norm_rms_epsilon", &eps) && fabs(eps - 1e-5) < 1e-9);
    CHECK(pith_gguf_n_kv(g) == 18);
    CHECK(pith_gguf_n_tensors(g) == 12);
    int n_f16 = 0, n_f32 = 0;
    for (int64_t i = 0; i < pith_gguf_n_tensors(g); i++) {
        const pith_tensor *t = pith_gguf_tensor_at(g, i);
        n_f16 += t->type == PITH_F16;
        n_f32 += t->type == PITH_F32;
        CHECK(pith_gguf_find_tensor(g, t->name) == t);
    }
    CHECK(n_f16 == 9 && n_f32 == 3); /* 2-D weights in F16, the three norms in F32 */
    const pith_tensor *e = pith_gguf_find_tensor(g, "token_embd.weight");
    CHECK(e && e->type == PITH_F16 && e->n_dims == 2 && e->ne[0] == 8 && e->ne[1] == 32000 &&
          e->nbytes == 8 * 32000 * 2);
    const pith_tensor *n = pith_gguf_find_tensor(g, "blk.0.attn_norm.weight");
    CHECK(n && n->type == PITH_F32 && n->n_dims == 1 && n->ne[0] == 8 && n->ne[1] == 1);
    CHECK(pith_gguf_find_tensor(g, "blk.1.attn_norm.weight") == NULL);
    CHECK(pith_gguf_tensor_at(g, 12) == NULL && pith_gguf_tensor_at(g, -1) == NULL);
    CHECK(pith_gguf_kv_at(g, 18) == NULL && pith_gguf_kv_at(g, 0) != NULL);
    /* Data sits in the file: compare against an independent read at the offset the fixture's
     * maintainers' dump gives (data section at 724416, token_embd at its start). */
    FILE *fp = fopen(path, "rb");
    if (fp && e) {
        uint8_t head[64];
        CHECK(fseek(fp, 724416, SEEK_SET) == 0 && fread(head, 1, 64, fp) == 64);
        CHECK(!memcmp(head, e->data, 64));
    }
    if (fp) fclose(fp);
    pith_gguf_close(g);
}

/* Vocabulary-only GGUFs written by llama.cpp itself (no tensors): an independent writer's output. */
static void test_llamacpp_vocabs(const char *shared) {
    static const char *const names[] = {"llama-spm", "gpt-2", "falcon", "phi-3", "starcoder", "deepseek-llm",
                                        "deepseek-coder"};
    int opened = 0;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/tokenizers/llamacpp/ggml-vocab-%s.gguf", shared, names[i]);
        FILE *probe = fopen(path, "rb");
        if (!probe) continue;
        fclose(probe);
        pith_gguf *g = NULL;
        pith_err err = {{0}};
        int rc = pith_gguf_open(path, &g, &err);
        CHECKF(rc == 0, "%s", err.msg);
        if (rc) continue;
        opened++;
        CHECK(pith_gguf_version(g) == 2 || pith_gguf_version(g) == 3);
        CHECK(pith_gguf_n_tensors(g) == 0);
        pith_str model;
        CHECK(pith_gguf_get_str(g, "tokenizer.ggml.model", &model) && model.len > 0);
        const pith_gguf_kv *tok = pith_gguf_find(g, "tokenizer.ggml.tokens");
        CHECK(tok && tok->arr_type == PITH_GGUF_STRING && tok->arr_n > 1000 && tok->arr_strs);
        const pith_gguf_kv *types = pith_gguf_find(g, "tokenizer.ggml.token_type");
        CHECK(!types || types->arr_n == tok->arr_n);
        pith_gguf_close(g);
    }
    CHECKF(opened > 0, "no llama.cpp vocabulary files under %s/tokenizers/llamacpp", shared);
}

/* ---- synthetic files ---- */

static void kv_header(buf *b, const char *key, uint32_t type) { put_gstr(b, key); put_u32(b, type); }
static void arr_header(buf *b, uint32_t type, uint64_t n) { put_u32(b, type); put_u64(b, n); }

static uint64_t write_all_types(buf *kv, bool with_alignment, uint32_t alignment) {
    uint64_t n = 0;
    kv_header(kv, "t.u8", 0), put_u8(kv, 200), n++;
    kv_header(kv, "t.i8", 1), put_u8(kv, (uint8_t)-5), n++;
    kv_header(kv, "t.u16", 2), put_u16(kv, 60000), n++;
    kv_header(kv, "t.i16", 3), put_u16(kv, (uint16_t)-30000), n++;
    kv_header(kv, "t.u32", 4), put_u32(kv, 4000000000u), n++;
    kv_header(kv, "t.i32", 5), put_u32(kv, (uint32_t)-2000000000), n++;
    kv_header(kv, "t.f32", 6), put_f32(kv, 1.5f), n++;
    kv_header(kv, "t.bool", 7), put_u8(kv, 1), n++;
    kv_header(kv, "t.str", 8), put_gstr(kv, "h\xc3\xa9llo"), n++;
    kv_header(kv, "t.u64", 10), put_u64(kv, (UINT64_C(1) << 63) + 5), n++;
    kv_header(kv, "t.i64", 11), put_u64(kv, (uint64_t)-(INT64_C(1) << 40)), n++;
    kv_header(kv, "t.f64", 12), put_f64(kv, 3.25), n++;
    kv_header(kv, "t.empty_str", 8), put_gstr(kv, ""), n++;
    /* arrays of every scalar type, three elements each: 1, 2, 3 (or true,false,true) */
    static const uint32_t scalar_types[] = {0, 1, 2, 3, 4, 5, 6, 7, 10, 11, 12};
    for (size_t i = 0; i < sizeof scalar_types / sizeof scalar_types[0]; i++) {
        char key[32];
        uint32_t t = scalar_types[i];
        snprintf(key, sizeof key, "a.type%u", t);
        kv_header(kv, key, 9), arr_header(kv, t, 3), n++;
        for (int k = 1; k <= 3; k++) {
            switch (t) {
            case 0: case 1: put_u8(kv, (uint8_t)k); break;
            case 7: put_u8(kv, k != 2); break;
            case 2: case 3: put_u16(kv, (uint16_t)(k * 1000)); break;
            case 4: case 5: put_u32(kv, (uint32_t)(k * 100000)); break;
            case 6: put_f32(kv, (float)k + 0.5f); break;
            case 10: case 11: put_u64(kv, (uint64_t)k << 40); break;
            case 12: put_f64(kv, k + 0.25); break;
            }
        }
    }
    kv_header(kv, "a.strs", 9), arr_header(kv, 8, 3), put_gstr(kv, "one"), put_gstr(kv, ""), put_gstr(kv, "three"), n++;
    kv_header(kv, "a.empty", 9), arr_header(kv, 4, 0), n++;
    /* [[1, 2], [3]] as int32 */
    kv_header(kv, "n.ints", 9), arr_header(kv, 9, 2), n++;
    arr_header(kv, 5, 2), put_u32(kv, 1), put_u32(kv, 2);
    arr_header(kv, 5, 1), put_u32(kv, 3);
    /* [["a", "bc"], []] */
    kv_header(kv, "n.strs", 9), arr_header(kv, 9, 2), n++;
    arr_header(kv, 8, 2), put_gstr(kv, "a"), put_gstr(kv, "bc");
    arr_header(kv, 8, 0);
    /* three levels: [[[7.0]], [[], [8.0, 9.0]]] as f64 */
    kv_header(kv, "n.deep", 9), arr_header(kv, 9, 2), n++;
    arr_header(kv, 9, 1), arr_header(kv, 12, 1), put_f64(kv, 7.0);
    arr_header(kv, 9, 2), arr_header(kv, 12, 0), arr_header(kv, 12, 2), put_f64(kv, 8.0), put_f64(kv, 9.0);
    kv_header(kv, "n.empties", 9), arr_header(kv, 9, 3), n++;
    arr_header(kv, 7, 0), arr_header(kv, 0, 0), arr_header(kv, 9, 0);
    if (with_alignment) kv_header(kv, "general.alignment", 4), put_u32(kv, alignment), n++;
    return n;
}

static void check_all_types(const pith_gguf *g) {
    int64_t i;
    double d;
    bool b;
    pith_str s;
    CHECK(pith_gguf_get_i64(g, "t.u8", &i) && i == 200);
    CHECK(pith_gguf_get_i64(g, "t.i8", &i) && i == -5);
    CHECK(pith_gguf_get_i64(g, "t.u16", &i) && i == 60000);
    CHECK(pith_gguf_get_i64(g, "t.i16", &i) && i == -30000);
    CHECK(pith_gguf_get_i64(g, "t.u32", &i) && i == 4000000000LL);
    CHECK(pith_gguf_get_i64(g, "t.i32", &i) && i == -2000000000LL);
    CHECK(pith_gguf_get_f64(g, "t.f32", &d) && d == 1.5);
    CHECK(pith_gguf_get_bool(g, "t.bool", &b) && b);
    CHECK(pith_gguf_get_str(g, "t.str", &s) && str_is(s, "h\xc3\xa9llo"));
    CHECK(!pith_gguf_get_i64(g, "t.u64", &i)); /* above INT64_MAX: does not convert */
    CHECK(pith_gguf_find(g, "t.u64")->type == PITH_GGUF_UINT64);
    CHECK(pith_gguf_get_i64(g, "t.i64", &i) && i == -(INT64_C(1) << 40));
    CHECK(pith_gguf_get_f64(g, "t.f64", &d) && d == 3.25);
    CHECK(pith_gguf_get_f64(g, "t.i32", &d) && d == -2000000000.0); /* integers that a double holds exactly */
    CHECK(pith_gguf_get_str(g, "t.empty_str", &s) && s.len == 0);
    /* type mismatches and absent keys */
    CHECK(!pith_gguf_get_i64(g, "t.f32", &i));
    CHECK(!pith_gguf_get_i64(g, "t.bool", &i));
    CHECK(!pith_gguf_get_bool(g, "t.u8", &b));
    CHECK(!pith_gguf_get_str(g, "t.u8", &s));
    CHECK(!pith_gguf_get_f64(g, "t.str", &d));
    CHECK(!pith_gguf_get_i64(g, "no.such.key", &i));
    CHECK(pith_gguf_find(g, "t.u") == NULL && pith_gguf_find(g, "t.u80") == NULL);

    static const uint32_t scalar_types[] = {0, 1, 2, 3, 4, 5, 6, 7, 10, 11, 12};
    for (size_t k = 0; k < sizeof scalar_types / sizeof scalar_types[0]; k++) {
        char key[32];
        uint32_t t = scalar_types[k];
        snprintf(key, sizeof key, "a.type%u", t);
        const pith_gguf_kv *kv = pith_gguf_find(g, key);
        CHECKF(kv && kv->type == PITH_GGUF_ARRAY && kv->arr_type == (pith_gguf_type)t && kv->arr_n == 3, "%s", key);
        if (!kv) continue;
        for (uint64_t e = 0; e < 3; e++) {
            int k1 = (int)e + 1;
            switch (t) {
            case 0: case 1: CHECK(pith_gguf_arr_i64(kv, e, &i) && i == k1); break;
            case 2: case 3: CHECK(pith_gguf_arr_i64(kv, e, &i) && i == k1 * 1000); break;
            case 4: case 5: CHECK(pith_gguf_arr_i64(kv, e, &i) && i == k1 * 100000); break;
            case 10: case 11: CHECK(pith_gguf_arr_i64(kv, e, &i) && i == (int64_t)k1 << 40); break;
            case 6: CHECK(pith_gguf_arr_f64(kv, e, &d) && d == k1 + 0.5); break;
            case 12: CHECK(pith_gguf_arr_f64(kv, e, &d) && d == k1 + 0.25); break;
            case 7: CHECK(((const uint8_t *)kv->data)[e] == (k1 != 2)); CHECK(!pith_gguf_arr_i64(kv, e, &i)); break;
            }
        }
        CHECK(!pith_gguf_arr_i64(kv, 3, &i) && !pith_gguf_arr_f64(kv, 3, &d));
        CHECK(kv->arr_strs == NULL);
    }
    const pith_gguf_kv *strs = pith_gguf_find(g, "a.strs");
    CHECK(strs && strs->arr_n == 3 && strs->arr_strs);
    if (strs && strs->arr_strs) {
        CHECK(str_is(strs->arr_strs[0], "one") && strs->arr_strs[1].len == 0 && str_is(strs->arr_strs[2], "three"));
        CHECK(!pith_gguf_arr_i64(strs, 0, &i));
    }
    const pith_gguf_kv *empty = pith_gguf_find(g, "a.empty");
    CHECK(empty && empty->arr_n == 0 && empty->arr_type == PITH_GGUF_UINT32 && !pith_gguf_arr_i64(empty, 0, &i));
    const pith_gguf_kv *ni = pith_gguf_find(g, "n.ints");
    CHECK(ni && ni->type == PITH_GGUF_ARRAY && ni->arr_type == PITH_GGUF_ARRAY && ni->arr_n == 2);
    if (ni) {
        /* data points at the first inner array's header: type INT32, count 2, then 1 and 2 */
        const uint8_t *p = ni->data;
        CHECK(p[0] == 5 && p[4] == 2 && p[12] == 1 && p[16] == 2);
        CHECK(!pith_gguf_arr_i64(ni, 0, &i));
    }
    const pith_gguf_kv *deep = pith_gguf_find(g, "n.deep");
    CHECK(deep && deep->arr_type == PITH_GGUF_ARRAY && deep->arr_n == 2);
    const pith_gguf_kv *ns = pith_gguf_find(g, "n.strs");
    CHECK(ns && ns->arr_type == PITH_GGUF_ARRAY && ns->arr_n == 2 && ns->arr_strs == NULL);
    const pith_gguf_kv *ne = pith_gguf_find(g, "n.empties");
    CHECK(ne && ne->arr_n == 3);
    /* the key after all the nested arrays parsed at the right place */
    CHECK(pith_gguf_find(g, "t.u8") == pith_gguf_kv_at(g, 0));
}

static void test_synthetic(uint32_t version, bool explicit_alignment, uint32_t alignment) {
    buf kv = {0}, file = {0};
    uint64_t n_kv = write_all_types(&kv, explicit_alignment, alignment);
    gtensor ts[] = {
        {"f32.3d", 0, 3, {5, 3, 2, 1}},
        {"f16", 1, 2, {7, 3, 1, 1}},
        {"bf16", 30, 1, {9, 1, 1, 1}},
        {"q8_0", 8, 2, {64, 3, 1, 1}},
        {"q4_0", 2, 2, {32, 5, 1, 1}},
        {"q4_k", 12, 2, {256, 2, 1, 1}},
        {"q6_k", 14, 4, {512, 1, 2, 1}},
        {"scalar.f32", 0, 0, {0, 0, 0, 0}},
    };
    int nt = (int)(sizeof ts / sizeof ts[0]);
    uint64_t data_start;
    gguf_build(&file, version, &kv, n_kv, ts, nt, alignment, 42 + version + alignment, &data_start);
    char name[64];
    snprintf(name, sizeof name, "synthetic_v%u_a%u_%d.gguf", version, alignment, explicit_alignment);
    const char *path = tmp_path(name);
    CHECK(write_file(path, file.p, file.n) == 0);
    pith_gguf *g = NULL;
    pith_err err = {{0}};
    int rc = pith_gguf_open(path, &g, &err);
    CHECKF(rc == 0, "%s", err.msg);
    if (!rc) {
        CHECK(pith_gguf_version(g) == version);
        CHECK(pith_gguf_n_kv(g) == (int64_t)n_kv);
        check_all_types(g);
        CHECK(pith_gguf_n_tensors(g) == nt);
        uint64_t off = 0;
        for (int i = 0; i < nt && i < pith_gguf_n_tensors(g); i++) {
            const pith_tensor *t = pith_gguf_tensor_at(g, i);
            uint64_t nbytes = gtensor_bytes(&ts[i]);
            CHECKF(!strcmp(t->name, ts[i].name), "%s vs %s", t->name, ts[i].name);
            CHECK(t->type == (pith_dtype)ts[i].type && t->n_dims == (int)ts[i].n_dims);
            for (uint32_t d = 0; d < 4; d++) CHECK(t->ne[d] == (int64_t)(d < ts[i].n_dims ? ts[i].ne[d] : 1));
            CHECKF(t->nbytes == nbytes, "%s: %zu vs %llu", t->name, t->nbytes, (unsigned long long)nbytes);
            CHECK(!memcmp(t->data, file.p + data_start + off, nbytes));
            CHECK((uintptr_t)t->data % alignment == 0); /* the mapping is page-aligned */
            CHECK(pith_gguf_find_tensor(g, ts[i].name) == t);
            off = (off + nbytes + alignment - 1) / alignment * alignment;
        }
        pith_gguf_close(g);
    }
    buf_free(&kv);
    buf_free(&file);
}

int main(void) {
    const char *shared = check_shared_dir();
    if (shared) test_fixture(shared);
    if (shared) test_llamacpp_vocabs(shared);
    test_synthetic(2, false, 32);
    test_synthetic(3, false, 32);
    test_synthetic(2, true, 64);
    test_synthetic(3, true, 64);
    test_synthetic(3, true, 32);
    test_synthetic(3, true, 4096);
    pith_gguf_close(NULL);
    return check_summary("test_gguf");
}
