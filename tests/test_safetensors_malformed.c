/* Malformed Hugging Face checkpoints: every safetensors header prefix, lying headers, unknown dtypes,
 * bad config.json and index files, missing or corrupt shards, and byte flips in a valid header. Each must
 * be refused with a message naming the file (or the model directory for model-level checks), and never
 * crash or leak under ASan/UBSan. */
#include "check.h"
#include "format/mapped_file.h"
#include "format/safetensors.h"
#include "test_formats_expect.h"

static const char *st_dir(const char *name) {
    const char *dir = tmp_path(name);
    CHECK(make_dir(dir) == 0);
    static const char *const files[] = {"config.json", "model.safetensors", "model.safetensors.index.json",
                                        "shard-a.safetensors", "shard-b.safetensors"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char p[4200];
        snprintf(p, sizeof p, "%s/%s", dir, files[i]);
        unlink(p);
    }
    return dir;
}

static void put_in(const char *dir, const char *name, const void *p, size_t n) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    CHECK(write_file(path, p, n) == 0);
}


/* A safetensors file whose header is the given JSON text (padded) and whose data is `data_bytes` zeros. */
static void raw_st(buf *b, const char *json, uint64_t data_bytes) {
    size_t n = strlen(json);
    put_u64(b, n);
    buf_put(b, json, n);
    for (uint64_t i = 0; i < data_bytes; i++) put_u8(b, 0);
}

/* names_file: whether the message names model.safetensors (file-level errors) or the model directory
 * (model-level errors). */
static void st_fail_in(const char *label, const buf *b, const char *needle, bool names_file) {
    const char *dir = st_dir("mal_st");
    char config[2048];
    model_config(&tiny, "LlamaForCausalLM", "", config, sizeof config);
    put_in(dir, "config.json", config, strlen(config));
    put_in(dir, "model.safetensors", b->p, b->n);
    char path[4200];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    model_fail(label, dir, names_file ? path : dir, needle);
}

static void st_fail(const char *label, const buf *b, const char *needle) { st_fail_in(label, b, needle, true); }

static void test_safetensors_errors(void) {
    buf b = {0};
    put_u32(&b, 5);
    st_fail("st_short", &b, "shorter than the 8-byte header length");
    buf_free(&b);
    put_u64(&b, 1000), buf_put(&b, "{}", 2);
    st_fail("st_hlen", &b, "header length 1000 runs past end of file");
    buf_free(&b);
    put_u64(&b, UINT64_C(1) << 40), buf_put(&b, "{}", 2);
    st_fail("st_hlen_huge", &b, "exceeds the 100000000-byte limit");
    buf_free(&b);
    raw_st(&b, "{\"a\": {\"dtype\": \"F32\", \"shape\": [2], ", 8);
    st_fail("st_not_json", &b, "header is not a JSON object");
    buf_free(&b);
    raw_st(&b, "[1, 2]", 0);
    st_fail("st_array", &b, "header is not a JSON object");
    buf_free(&b);
    raw_st(&b, "{\"a\": 5}", 0);
    st_fail("st_item", &b, "tensor 'a' is not a JSON object");
    buf_free(&b);
    raw_st(&b, "{\"a\": {\"dtype\": \"Q9\", \"shape\": [2], \"data_offsets\": [0, 8]}}", 8);
    st_fail("st_dtype", &b, "unknown dtype 'Q9'");
    buf_free(&b);
    raw_st(&b, "{\"a\": {\"dtype\": \"I64\", \"shape\": [1], \"data_offsets\": [0, 8]}}", 8);
    st_fail("st_dtype_i64", &b, "dtype I64, which is not supported");
    buf_free(&b);
    raw_st(&b, "{\"a\": {\"shape\": [2], \"data_offsets\": [0, 8]}}", 8);
    st_fail("st_dtype_missing", &b, "dtype is missing");
    buf_free(&b);
    raw_st(&b, "{\"a\": {\"dtype\": \"F32\", \"shape\": [-2], \"data_offsets\": [0, 8]}}", 8);
    st_fail("st_shape_neg", &b, "shape holds");
    buf_free(&b);
    raw_st(&b, "{\"a\": {\"dtype\": \"F32\", \"shape\": [1.5], \"data_offsets\": [0, 8]}}", 8);
    st_fail("st_shape_frac", &b, "shape holds");
    buf_free(&b);
    raw_st(&b, "{\"a\": {\"dtype\": \"F32\", \"shape\": [1,1,1,1,1,1,2], \"data_offsets\": [0, 8]}}", 8);
    st_fail("st_dims", &b, "has 7 dimensions (at most 6)");
    buf_free(&b);
    /* five or six dimensions fold their outermost into the fourth: the product must not overflow */
    raw_st(&b, "{\"a\": {\"dtype\": \"F32\", \"shape\": [4503599627370496,4503599627370496,1,1,1], "
               "\"data_offsets\": [0, 8]}}", 8);
    st_fail("st_dims_fold_overflow", &b, "dimensions overflow");
    buf_free(&b);
    raw_st(&b, "{\"a\": {\"dtype\": \"F32\", \"shape\": [4503599627370496, 4503599627370496], \"data_offsets\": [0, 8]}}", 8);
    st_fail("st_overflow", &b, "dimensions overflow");
    buf_free(&b);
    raw_st(&b, "{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [8, 0]}}", 8);
    st_fail("st_begin_end", &b, "begin after they end");
    buf_free(&b);
    raw_st(&b, "{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [8, 16]}}", 8);
    st_fail("st_past_end", &b, "extends past the end of the data (8 bytes)");
    buf_free(&b);
    raw_st(&b, "{\"a\": {\"dtype\": \"F32\", \"shape\": [3], \"data_offsets\": [0, 8]}}", 16);
    st_fail("st_size_lie", &b, "has 8 bytes of data but its shape and dtype need 12");
    buf_free(&b);
    raw_st(&b, "{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0]}}", 8);
    st_fail("st_offsets", &b, "data_offsets must be two");
    buf_free(&b);
    raw_st(&b, "{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 1e300]}}", 8);
    st_fail("st_offsets_huge", &b, "data_offsets must be two");
    buf_free(&b);
    /* a valid file missing most of the model: the model-level check reports the first missing tensor */
    raw_st(&b, "{\"model.embed_tokens.weight\": {\"dtype\": \"F16\", \"shape\": [10, 8], \"data_offsets\": [0, 160]}}", 160);
    st_fail_in("st_incomplete", &b, "missing tensor 'output_norm.weight'", false);
    buf_free(&b);
    /* wrong shape for a mapped name */
    raw_st(&b, "{\"model.embed_tokens.weight\": {\"dtype\": \"F16\", \"shape\": [8, 10], \"data_offsets\": [0, 160]}}", 160);
    st_fail_in("st_shape", &b, "token_embd.weight' has shape [10, 8", false);
    buf_free(&b);
}

/* Every prefix of a valid safetensors header is refused by the parser. */
static void test_safetensors_truncations(void) {
    stensor ts[2];
    int n = 0;
    add_st(ts, &n, "x", "F32", 3, 2);
    add_st(ts, &n, "y", "BF16", 5, 0);
    buf file = {0};
    uint64_t data_start;
    st_build(&file, ts, n, 4, 0, &data_start);
    const char *path = tmp_path("mal_st_trunc.safetensors");
    int bad = 0;
    for (size_t len = 1; len < file.n; len++) {
        CHECK(write_file(path, file.p, len) == 0);
        pith_mapped_file m;
        pith_err err = {{0}};
        CHECK(pith_map_file(path, &m, &err) == 0);
        pith_tensor *out = NULL;
        int count = 0;
        int rc = pith_safetensors_parse(path, &m, &out, &count, &err);
        if (rc != -1 || out || !strstr(err.msg, path)) bad++;
        pith_safetensors_free(out, count);
        pith_unmap_file(&m);
    }
    CHECKF(bad == 0, "%d safetensors truncations accepted", bad);
    n_refused += (int)file.n - 1;
    buf_free(&file);
}

static void test_hf_directory_errors(void) {
    const char *dir = st_dir("mal_hf");
    char cpath[4200], ipath[4200];
    snprintf(cpath, sizeof cpath, "%s/config.json", dir);
    snprintf(ipath, sizeof ipath, "%s/model.safetensors.index.json", dir);
    model_fail("hf_empty_dir", dir, dir, "no model.safetensors or model.safetensors.index.json");

    stensor ts[32];
    int nt = model_st_list(&tiny, ts);
    buf st = {0};
    st_build(&st, ts, nt, 8, 0, NULL);
    put_in(dir, "model.safetensors", st.p, st.n);
    model_fail("hf_no_config", dir, cpath, "cannot open");
    const struct { const char *label, *json, *needle; } configs[] = {
        {"cfg_not_json", "{\"hidden_size\": 8,", "not a JSON object"},
        {"cfg_arch", "{\"architectures\": [\"GPT2LMHeadModel\"]}", "unsupported architecture 'GPT2LMHeadModel'"},
        {"cfg_no_arch", "{\"hidden_size\": 8}", "neither \"architectures\" nor \"model_type\""},
        {"cfg_no_hidden", "{\"model_type\": \"llama\"}", "missing \"hidden_size\""},
        {"cfg_bad_int", "{\"model_type\": \"llama\", \"hidden_size\": 8.5}", "\"hidden_size\" is not an integer"},
        {"cfg_bad_heads",
         "{\"model_type\": \"qwen2\", \"hidden_size\": 8, \"intermediate_size\": 16, \"num_hidden_layers\": 1, "
         "\"num_attention_heads\": 3}", "embedding width 8 is not divisible by the head count 3"},
        {"cfg_yarn",
         "{\"model_type\": \"qwen2\", \"hidden_size\": 8, \"intermediate_size\": 16, \"num_hidden_layers\": 1, "
         "\"num_attention_heads\": 2, \"rope_scaling\": {\"type\": \"yarn\", \"factor\": -4}}", "yarn rope_scaling factor -4 is not a positive number"},
        {"cfg_longrope",
         "{\"model_type\": \"llama\", \"hidden_size\": 8, \"intermediate_size\": 16, \"num_hidden_layers\": 1, "
         "\"num_attention_heads\": 2, \"rope_scaling\": {\"rope_type\": \"longrope\", \"factor\": 2}}",
         "'longrope' (factor 2) is not supported"},
        {"cfg_linear_zero",
         "{\"model_type\": \"llama\", \"hidden_size\": 8, \"intermediate_size\": 16, \"num_hidden_layers\": 1, "
         "\"num_attention_heads\": 2, \"rope_scaling\": {\"type\": \"linear\", \"factor\": 0}}",
         "linear rope_scaling factor 0 is not a positive number"},
        {"cfg_linear_negative",
         "{\"model_type\": \"llama\", \"hidden_size\": 8, \"intermediate_size\": 16, \"num_hidden_layers\": 1, "
         "\"num_attention_heads\": 2, \"rope_scaling\": {\"type\": \"linear\", \"factor\": -2}}",
         "linear rope_scaling factor -2 is not a positive number"},
        {"cfg_linear_huge",
         "{\"model_type\": \"llama\", \"hidden_size\": 8, \"intermediate_size\": 16, \"num_hidden_layers\": 1, "
         "\"num_attention_heads\": 2, \"rope_scaling\": {\"type\": \"linear\", \"factor\": 1e300}}",
         "linear rope_scaling factor inf is not a positive number"},
        {"cfg_linear_no_factor",
         "{\"model_type\": \"llama\", \"hidden_size\": 8, \"intermediate_size\": 16, \"num_hidden_layers\": 1, "
         "\"num_attention_heads\": 2, \"rope_scaling\": {\"type\": \"linear\"}}", "missing \"factor\""},
        {"cfg_linear_string",
         "{\"model_type\": \"llama\", \"hidden_size\": 8, \"intermediate_size\": 16, \"num_hidden_layers\": 1, "
         "\"num_attention_heads\": 2, \"rope_scaling\": {\"type\": \"linear\", \"factor\": \"2\"}}",
         "\"factor\" is not a number"},
        {"cfg_llama3_partial",
         "{\"model_type\": \"llama\", \"hidden_size\": 8, \"intermediate_size\": 16, \"num_hidden_layers\": 1, "
         "\"num_attention_heads\": 2, \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8}}",
         "missing \"low_freq_factor\""},
        {"cfg_tie",
         "{\"model_type\": \"llama\", \"hidden_size\": 8, \"intermediate_size\": 16, \"num_hidden_layers\": 1, "
         "\"num_attention_heads\": 2, \"tie_word_embeddings\": \"yes\"}", "not a boolean"},
        {"cfg_eos",
         "{\"model_type\": \"llama\", \"hidden_size\": 8, \"intermediate_size\": 16, \"num_hidden_layers\": 1, "
         "\"num_attention_heads\": 2, \"eos_token_id\": \"x\"}", "\"eos_token_id\" is not a token id"},
        {"cfg_eos_range",
         "{\"model_type\": \"llama\", \"hidden_size\": 8, \"intermediate_size\": 16, \"num_hidden_layers\": 1, "
         "\"num_attention_heads\": 2, \"eos_token_id\": [10]}", "EOS token id 10 is outside the vocabulary (10)"},
        {"cfg_layers",
         "{\"model_type\": \"llama\", \"hidden_size\": 8, \"intermediate_size\": 16, \"num_hidden_layers\": 5000, "
         "\"num_attention_heads\": 2}", "layer count is 5000"},
    };
    for (size_t i = 0; i < sizeof configs / sizeof configs[0]; i++) {
        put_in(dir, "config.json", configs[i].json, strlen(configs[i].json));
        /* config.json problems name config.json; hyper-parameter checks name the model directory */
        bool model_level = strstr(configs[i].needle, "EOS token") || strstr(configs[i].needle, "layer count") ||
                           strstr(configs[i].needle, "embedding width");
        model_fail(configs[i].label, dir, model_level ? dir : cpath, configs[i].needle);
    }
    char config[2048];
    model_config(&tiny, "LlamaForCausalLM", "", config, sizeof config);
    put_in(dir, "config.json", config, strlen(config));
    pith_model_file *f;
    pith_err err = {{0}};
    CHECKF(pith_model_file_open(dir, &f, &err) == 0, "%s", err.msg); /* the single-file model is valid */
    if (f) pith_model_file_close(f);

    /* sharded: index problems */
    const struct { const char *label, *json, *needle; } indexes[] = {
        {"idx_not_json", "{\"weight_map\": ", "not JSON with a \"weight_map\" object"},
        {"idx_empty", "{\"weight_map\": {}}", "\"weight_map\" is empty"},
        {"idx_missing_shard", "{\"weight_map\": {\"model.norm.weight\": \"shard-a.safetensors\"}}", "shard-a.safetensors"},
        {"idx_path", "{\"weight_map\": {\"model.norm.weight\": \"../model.safetensors\"}}",
         "does not name a shard file in the same directory"},
        {"idx_abs", "{\"weight_map\": {\"model.norm.weight\": \"/etc/passwd\"}}", "same directory"},
        {"idx_not_string", "{\"weight_map\": {\"model.norm.weight\": 3}}", "same directory"},
        {"idx_dup", "{\"weight_map\": {\"model.norm.weight\": \"model.safetensors\", \"model.norm.weight\": "
                    "\"model.safetensors\"}}", "lists 'model.norm.weight' twice"},
        {"idx_wrong_shard", "{\"weight_map\": {\"model.norm.weight\": \"model.safetensors\", \"nope.weight\": "
                            "\"model.safetensors\"}}", "puts 'nope.weight' in model.safetensors, which does not contain it"},
    };
    for (size_t i = 0; i < sizeof indexes / sizeof indexes[0]; i++) {
        put_in(dir, "model.safetensors.index.json", indexes[i].json, strlen(indexes[i].json));
        const char *who = i == 2 ? "shard-a.safetensors" : ipath;
        model_fail(indexes[i].label, dir, who, indexes[i].needle);
    }
    /* a shard that exists but is corrupt */
    put_in(dir, "shard-a.safetensors", "garbage!", 8);
    const char *idx = "{\"weight_map\": {\"model.norm.weight\": \"shard-a.safetensors\"}}";
    put_in(dir, "model.safetensors.index.json", idx, strlen(idx));
    model_fail("idx_bad_shard", dir, "shard-a.safetensors", "header length");
    buf_free(&st);
}

/* Byte flips in the safetensors header of a complete Hugging Face model. */
static void test_fuzz_hf_model(void) {
    uint64_t seed = 12345, data_start;
    int opened = 0;
    const char *dir = st_dir("mal_fuzz_hf");
    char config[2048], st_path[4200];
    model_config(&tiny, "LlamaForCausalLM", "", config, sizeof config);
    put_in(dir, "config.json", config, strlen(config));
    stensor sts[32];
    int nst = model_st_list(&tiny, sts);
    buf st = {0};
    st_build(&st, sts, nst, 3, 0, &data_start);
    snprintf(st_path, sizeof st_path, "%s/model.safetensors", dir);
    uint8_t *copy = malloc(st.n);
    for (int it = 0; it < 500; it++) {
        memcpy(copy, st.p, st.n);
        copy[test_rng(&seed) % data_start] = (uint8_t)test_rng(&seed);
        if (write_file(st_path, copy, st.n)) break;
        pith_model_file *f = NULL;
        pith_err err = {{0}};
        if (pith_model_file_open(dir, &f, &err)) {
            if (!strstr(err.msg, dir)) CHECKF(0, "safetensors fuzz %d: %s", it, err.msg);
            continue;
        }
        opened++;
        touch_model(f);
        pith_model_file_close(f);
    }
    printf("model fuzz (safetensors): %d of 500 opened\n", opened);
    free(copy);
    buf_free(&st);
}

int main(void) {
    test_safetensors_errors();
    test_safetensors_truncations();
    test_hf_directory_errors();
    test_fuzz_hf_model();
    printf("%d malformed inputs refused\n", n_refused);
    return check_summary("test_safetensors_malformed");
}
