/* GGUF as a model file: hyper-parameters from metadata, canonical tensors, validation of shapes and
 * required tensors, vectors normalised to F32. Small synthetic models written by the test. */
#include <math.h>

#include "check.h"
#include "pith/modelfile.h"
#include "test_formats_util.h"

static const mspec base_llama = {
    .arch = "llama", .dim = 64, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2, .head_dim = 16, .ffn = 96,
    .vocab = 40, .ctx = 256, .tokens = true, .wtype = 8 /* Q8_0 */, .ntype = 0, .bos = 1, .eos = 2,
};

typedef void (*mutate_fn)(gtensor *ts, int *n);

/* Writes m (optionally mutated / without a key) and opens it; returns the open result. */
static int open_model(const char *name, const mspec *m, const char *skip_key, mutate_fn mutate,
                      pith_model_file **out, pith_err *err, buf *file_out) {
    gtensor ts[4 + 14 * 8];
    int nt = model_tensor_list(m, ts);
    if (mutate) mutate(ts, &nt);
    buf kv = {0}, file = {0};
    uint64_t n_kv = model_kvs(m, &kv, skip_key);
    gguf_build(&file, 3, &kv, n_kv, ts, nt, 32, 7, NULL);
    const char *path = tmp_path(name);
    if (write_file(path, file.p, file.n)) abort();
    buf_free(&kv);
    if (file_out) *file_out = file;
    else buf_free(&file);
    *out = NULL;
    return pith_model_file_open(path, out, err);
}

static void test_llama(void) {
    pith_model_file *f;
    pith_err err = {{0}};
    int rc = open_model("m_llama.gguf", &base_llama, NULL, NULL, &f, &err, NULL);
    CHECKF(rc == 0, "%s", err.msg);
    if (rc) return;
    const pith_hparams *hp = pith_model_file_hparams(f);
    CHECK(pith_model_file_format(f) == PITH_FORMAT_GGUF);
    CHECK(!strcmp(hp->arch, "llama"));
    CHECK(hp->dim == 64 && hp->n_layers == 2 && hp->n_heads == 4 && hp->n_kv_heads == 2 && hp->head_dim == 16);
    CHECK(hp->ffn_dim == 96 && hp->n_vocab == 40 && hp->ctx_len == 256);
    CHECK(fabsf(hp->norm_eps - 1e-6f) < 1e-12f && hp->rope_theta == 500000.0f);
    CHECK(hp->rope_style == PITH_ROPE_ADJACENT && !hp->has_qkv_bias && !hp->has_qk_norm && !hp->tied_embeddings);
    CHECK(hp->bos_id == 1 && hp->eos_id == 2 && hp->rope_scale_factor == 0);
    CHECK(pith_model_file_gguf(f) != NULL && pith_model_file_dir(f) == NULL);
    CHECK(pith_model_file_n_tensors(f) == 3 + 9 * 2);
    const pith_tensor *q = pith_model_file_tensor(f, "blk.1.attn_q.weight");
    CHECK(q && q->type == PITH_Q8_0 && q->ne[0] == 64 && q->ne[1] == 64 && q->nbytes == 64 * 64 / 32 * 34);
    const pith_tensor *k = pith_model_file_tensor(f, "blk.0.attn_k.weight");
    CHECK(k && k->ne[0] == 64 && k->ne[1] == 32);
    CHECK(pith_model_file_tensor(f, "blk.2.attn_q.weight") == NULL);
    for (int i = 0; i < pith_model_file_n_tensors(f); i++) {
        const pith_tensor *t = pith_model_file_tensor_at(f, i);
        CHECK(pith_model_file_tensor(f, t->name) == t);
    }
    CHECK(pith_model_file_tensor_at(f, -1) == NULL && pith_model_file_tensor_at(f, 21) == NULL);
    pith_model_file_close(f);
}

static void test_qwen2_tied_vocab_from_embedding(void) {
    mspec m = base_llama;
    m.arch = "qwen2";
    m.bias = true;
    m.tied = true;
    m.tokens = false;
    m.bos = m.eos = -1;
    m.n_kv_heads = 4;
    pith_model_file *f;
    pith_err err = {{0}};
    int rc = open_model("m_qwen2.gguf", &m, NULL, NULL, &f, &err, NULL);
    CHECKF(rc == 0, "%s", err.msg);
    if (rc) return;
    const pith_hparams *hp = pith_model_file_hparams(f);
    CHECK(!strcmp(hp->arch, "qwen2") && hp->rope_style == PITH_ROPE_HALF);
    CHECK(hp->has_qkv_bias && hp->tied_embeddings && !hp->has_qk_norm);
    CHECK(hp->n_vocab == 40 && hp->n_kv_heads == 4); /* vocab from token_embd; kv heads default to heads */
    CHECK(hp->bos_id == -1 && hp->eos_id == -1);
    CHECK(pith_model_file_tensor(f, "output.weight") == NULL);
    const pith_tensor *b = pith_model_file_tensor(f, "blk.1.attn_v.bias");
    CHECK(b && b->type == PITH_F32 && b->ne[0] == 64);
    pith_model_file_close(f);
}

/* qwen3: head_dim (key_length) differs from dim / heads; F16 vectors come back as F32 copies. */
static void test_qwen3_f16_vectors(void) {
    mspec m = base_llama;
    m.arch = "qwen3";
    m.qk_norm = true;
    m.head_dim = 32;
    m.ntype = 1;
    m.wtype = 30; /* BF16 matrices */
    m.rope_freqs = true;
    pith_model_file *f;
    pith_err err = {{0}};
    buf file = {0};
    int rc = open_model("m_qwen3.gguf", &m, NULL, NULL, &f, &err, &file);
    CHECKF(rc == 0, "%s", err.msg);
    if (!rc) {
        const pith_hparams *hp = pith_model_file_hparams(f);
        CHECK(hp->head_dim == 32 && hp->has_qk_norm && !hp->has_qkv_bias && hp->rope_style == PITH_ROPE_HALF);
        const pith_tensor *qn = pith_model_file_tensor(f, "blk.0.attn_q_norm.weight");
        const pith_tensor *raw = pith_gguf_find_tensor(pith_model_file_gguf(f), "blk.0.attn_q_norm.weight");
        CHECK(qn && raw && qn->type == PITH_F32 && raw->type == PITH_F16 && qn->ne[0] == 32 && qn->nbytes == 128);
        if (qn && raw) {
            int same = 1;
            for (int i = 0; i < 32; i++) {
                const uint8_t *p = (const uint8_t *)raw->data + 2 * i;
                float want = pith_f16_to_f32((uint16_t)(p[0] | p[1] << 8));
                float got = ((const float *)qn->data)[i];
                if (!(got == want || (isnan(got) && isnan(want)))) same = 0;
            }
            CHECK(same);
        }
        const pith_tensor *q = pith_model_file_tensor(f, "blk.1.attn_q.weight");
        CHECK(q && q->type == PITH_BF16 && q->ne[0] == 64 && q->ne[1] == 128);
        const pith_tensor *o = pith_model_file_tensor(f, "blk.1.attn_output.weight");
        CHECK(o && o->ne[0] == 128 && o->ne[1] == 64);
        const pith_tensor *rf = pith_model_file_tensor(f, "rope_freqs.weight");
        CHECK(rf && rf->type == PITH_F32 && rf->ne[0] == 16);
        pith_model_file_close(f);
    }
    buf_free(&file);
}

/* Scaling kinds with factor 1 are the identity and open; linear scaling stores its factor (1 as none, and
 * an absent factor means 1, as in llama.cpp). */
static void test_rope_scaling_opens(void) {
    static const struct { const char *type; float factor; const char *skip; float want; } cases[] = {
        {"yarn", 1.0f, NULL, 0.0f},   {"none", 4.0f, NULL, 0.0f},   {"linear", 1.0f, NULL, 0.0f},
        {"linear", 2.5f, NULL, 2.5f}, {"linear", 0.25f, NULL, 0.25f}, {"linear", 3.0f, "rope.scaling.factor", 0.0f},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        mspec m = base_llama;
        m.rope_type = cases[i].type;
        m.rope_factor = cases[i].factor;
        pith_model_file *f;
        pith_err err = {{0}};
        int rc = open_model("m_rope.gguf", &m, cases[i].skip, NULL, &f, &err, NULL);
        CHECKF(rc == 0, "%s %g: %s", cases[i].type, cases[i].factor, err.msg);
        if (rc) continue;
        const pith_hparams *hp = pith_model_file_hparams(f);
        CHECKF(hp->rope_linear_factor == cases[i].want && hp->rope_scale_factor == 0, "%s %g: linear factor %g",
               cases[i].type, cases[i].factor, hp->rope_linear_factor);
        pith_model_file_close(f);
    }
}

static void test_other_arch_opens(void) {
    mspec m = base_llama;
    m.arch = "gpt2";
    pith_model_file *f;
    pith_err err = {{0}};
    int rc = open_model("m_gpt2.gguf", &m, "block_count", NULL, &f, &err, NULL);
    CHECKF(rc == 0, "%s", err.msg);
    if (rc) return;
    CHECK(!strcmp(pith_model_file_hparams(f)->arch, "gpt2"));
    CHECK(pith_model_file_n_tensors(f) == 21);
    pith_model_file_close(f);
}

/* ---- semantic errors: each must fail with a message naming the file and the problem ---- */

static void expect_error(const char *label, const mspec *m, const char *skip, mutate_fn mutate, const char *needle) {
    pith_model_file *f;
    pith_err err = {{0}};
    char name[64];
    snprintf(name, sizeof name, "bad_%s.gguf", label);
    int rc = open_model(name, m, skip, mutate, &f, &err, NULL);
    CHECKF(rc == -1 && f == NULL, "%s: opened", label);
    CHECKF(strstr(err.msg, name) != NULL, "%s: message does not name the file: %s", label, err.msg);
    CHECKF(strstr(err.msg, needle) != NULL, "%s: message '%s' lacks '%s'", label, err.msg, needle);
    if (!rc) pith_model_file_close(f);
}

static void drop_ffn_up(gtensor *ts, int *n) {
    for (int i = 0; i < *n; i++)
        if (!strcmp(ts[i].name, "blk.1.ffn_up.weight")) ts[i] = ts[--*n];
}
static void reshape_k(gtensor *ts, int *n) {
    for (int i = 0; i < *n; i++)
        if (!strcmp(ts[i].name, "blk.0.attn_k.weight")) ts[i].ne[1] = 64;
}
static void quantized_norm(gtensor *ts, int *n) {
    for (int i = 0; i < *n; i++)
        if (!strcmp(ts[i].name, "blk.0.ffn_norm.weight")) ts[i].type = 8, ts[i].ne[0] = 64;
}
static void drop_one_bias(gtensor *ts, int *n) {
    for (int i = 0; i < *n; i++)
        if (!strcmp(ts[i].name, "blk.1.attn_k.bias")) ts[i] = ts[--*n];
}
static void three_d_norm(gtensor *ts, int *n) {
    for (int i = 0; i < *n; i++)
        if (!strcmp(ts[i].name, "output_norm.weight")) ts[i].n_dims = 2, ts[i].ne[0] = 32, ts[i].ne[1] = 2;
}

static void test_errors(void) {
    expect_error("missing_tensor", &base_llama, NULL, drop_ffn_up, "missing tensor 'blk.1.ffn_up.weight'");
    expect_error("bad_shape", &base_llama, NULL, reshape_k, "blk.0.attn_k.weight' has shape [64, 64");
    expect_error("quant_norm", &base_llama, NULL, quantized_norm, "vector must be F32, F16 or BF16");
    expect_error("norm_shape", &base_llama, NULL, three_d_norm, "output_norm.weight' has shape");
    mspec m = base_llama;
    m.bias = true;
    expect_error("missing_bias", &m, NULL, drop_one_bias, "missing tensor 'blk.1.attn_k.bias'");
    expect_error("missing_key", &base_llama, "block_count", NULL, "llama.block_count");
    expect_error("missing_arch", &base_llama, "general.architecture", NULL, "general.architecture");
    m = base_llama;
    m.bos = 40;
    expect_error("bos_range", &m, NULL, NULL, "BOS token id 40");
    m = base_llama;
    m.n_kv_heads = 3;
    m.head_dim = 16;
    expect_error("kv_heads", &m, NULL, NULL, "not a multiple of the KV head count");
    m = base_llama;
    m.n_layers = 0;
    expect_error("zero_layers", &m, NULL, NULL, "layer count is 0");
    m = base_llama;
    m.rope_type = "yarn";
    m.rope_factor = 2.0f;
    expect_error("rope_yarn", &m, NULL, NULL, "RoPE scaling 'yarn' (factor 2) is not supported");
    m.rope_type = "linear";
    m.rope_factor = 0.0f;
    expect_error("rope_linear_zero", &m, NULL, NULL, "linear RoPE scaling factor 0 is not a positive number");
    m.rope_factor = -2.0f;
    expect_error("rope_linear_negative", &m, NULL, NULL, "linear RoPE scaling factor -2 is not a positive number");
    m.rope_factor = INFINITY;
    expect_error("rope_linear_inf", &m, NULL, NULL, "linear RoPE scaling factor inf is not a positive number");
    m.rope_factor = NAN;
    expect_error("rope_linear_nan", &m, NULL, NULL, "is not a positive number");
    m = base_llama;
    m.ffn = 1 << 21;
    m.n_layers = 0;
    expect_error("huge_ffn", &m, NULL, NULL, "feed-forward width is 2097152");
}

/* The tokenizer's vocabulary must match the embedding rows (the forward pass indexes one by the other). */
static void test_vocab_mismatch(void) {
    mspec m = base_llama;
    pith_model_file *f;
    pith_err err = {{0}};
    gtensor ts[4 + 14 * 8];
    int nt = model_tensor_list(&m, ts);
    ts[0].ne[1] = 48; /* token_embd rows != 40 tokens */
    buf kv = {0}, file = {0};
    uint64_t n_kv = model_kvs(&m, &kv, NULL);
    gguf_build(&file, 3, &kv, n_kv, ts, nt, 32, 7, NULL);
    const char *path = tmp_path("bad_vocab.gguf");
    CHECK(write_file(path, file.p, file.n) == 0);
    CHECK(pith_model_file_open(path, &f, &err) == -1);
    CHECKF(strstr(err.msg, "token_embd.weight' has shape [64, 48") != NULL, "%s", err.msg);
    buf_free(&kv);
    buf_free(&file);
}

int main(void) {
    test_llama();
    test_qwen2_tied_vocab_from_embedding();
    test_qwen3_f16_vectors();
    test_other_arch_opens();
    test_rope_scaling_opens();
    test_errors();
    test_vocab_mismatch();
    return check_summary("test_gguf_model");
}
