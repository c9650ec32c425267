/* GGUF as a model file: hyper-parameters from metadata, canonical tensors, validation of shapes and
 * required tensors, vectors normalised to F32. Small synthetic models written by the test. */
#include <math.h>

#include "check.h"
#include "pith/model.h"
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
    expect_error("rope_yarn", &m, NULL, NULL, "missing metadata key llama.rope.scaling.original_context_length");
    m.rope_type = "longrope";
    expect_error("rope_longrope", &m, NULL, NULL, "RoPE scaling 'longrope' (factor 2) is not supported");
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

/* ---- architecture descriptors: Mistral's window, SmolLM3's NoPE layers, Gemma 3 ---- */

typedef uint64_t (*extra_kvs_fn)(const mspec *m, buf *kv);

/* Like open_model, with more metadata appended by `extra` (may be NULL). */
static int open_extra(const char *name, const mspec *m, extra_kvs_fn extra, mutate_fn mutate, pith_model_file **out,
                      pith_err *err) {
    gtensor ts[4 + 14 * 8];
    int nt = model_tensor_list(m, ts);
    if (mutate) mutate(ts, &nt);
    buf kv = {0}, file = {0};
    uint64_t n_kv = model_kvs(m, &kv, NULL);
    if (extra) n_kv += extra(m, &kv);
    gguf_build(&file, 3, &kv, n_kv, ts, nt, 32, 7, NULL);
    const char *path = tmp_path(name);
    if (write_file(path, file.p, file.n)) abort();
    buf_free(&kv);
    buf_free(&file);
    *out = NULL;
    return pith_model_file_open(path, out, err);
}

static bool bits_are(const uint64_t *mask, int n_layers, const char *want) {
    for (int l = 0; l < n_layers; l++)
        if (pith_layer_bit(mask, l) != (want[l] == '1')) return false;
    for (int l = n_layers; l < PITH_MAX_LAYERS; l++)
        if (pith_layer_bit(mask, l)) return false;
    return true;
}

static uint64_t kv_window32(const mspec *m, buf *kv) {
    char key[96];
    snprintf(key, sizeof key, "%s.attention.sliding_window", m->arch);
    gguf_kv_u32(kv, key, 32);
    return 1;
}

static void test_mistral_window(void) {
    pith_model_file *f;
    pith_err err = {{0}};
    int rc = open_extra("m_mistral.gguf", &base_llama, kv_window32, NULL, &f, &err);
    CHECKF(rc == 0, "%s", err.msg);
    if (!rc) {
        const pith_hparams *hp = pith_model_file_hparams(f);
        CHECK(!strcmp(hp->arch, "llama") && hp->sliding_window == 32);
        CHECK(bits_are(hp->layer_swa, 2, "11") && bits_are(hp->layer_no_rope, 2, "00"));
        CHECK(pith_hparams_layer_swa(hp, 0) && pith_hparams_layer_swa(hp, 1) && !pith_hparams_layer_swa(hp, 2));
        CHECK(hp->rope_theta_swa == 0 && hp->query_scale == 0 && hp->final_logit_softcap == 0);
        pith_model_file_close(f);
    }
    rc = open_extra("m_nowindow.gguf", &base_llama, NULL, NULL, &f, &err);
    CHECKF(rc == 0, "%s", err.msg);
    if (!rc) {
        const pith_hparams *hp = pith_model_file_hparams(f);
        CHECK(hp->sliding_window == 0 && bits_are(hp->layer_swa, 2, "00") && !pith_hparams_layer_swa(hp, 0));
        pith_model_file_close(f);
    }
}

/* llama.cpp has no key for SmolLM3's NoPE layers: every 4th layer (3, 7, ...) skips RoPE. */
static void test_smollm3(void) {
    mspec m = base_llama;
    m.arch = "smollm3";
    m.n_layers = 8;
    pith_model_file *f;
    pith_err err = {{0}};
    int rc = open_extra("m_smollm3.gguf", &m, NULL, NULL, &f, &err);
    CHECKF(rc == 0, "%s", err.msg);
    if (!rc) {
        const pith_hparams *hp = pith_model_file_hparams(f);
        CHECK(!strcmp(hp->arch, "smollm3") && hp->rope_style == PITH_ROPE_ADJACENT && hp->n_layers == 8);
        CHECK(bits_are(hp->layer_no_rope, 8, "00010001") && hp->sliding_window == 0);
        CHECK(pith_hparams_layer_no_rope(hp, 3) && !pith_hparams_layer_no_rope(hp, 4));
        pith_model_file_close(f);
    }
}

static const mspec base_gemma = {
    .arch = "gemma3", .dim = 64, .n_layers = 7, .n_heads = 4, .n_kv_heads = 2, .head_dim = 32, .ffn = 96,
    .vocab = 40, .ctx = 256, .tokens = true, .tied = true, .gemma = true, .wtype = 8, .ntype = 0, .bos = 1, .eos = 2,
};

static uint64_t kv_gemma_period3(const mspec *m, buf *kv) {
    (void)m;
    gguf_kv_u32(kv, "gemma3.attention.sliding_window", 16);
    gguf_kv_u32(kv, "gemma3.attention.sliding_window_pattern", 3);
    gguf_kv_f32(kv, "gemma3.final_logit_softcapping", 30.0f);
    gguf_kv_f32(kv, "gemma3.attn_logit_softcapping", 50.0f);
    gguf_kv_str(kv, "gemma3.rope.scaling.type", "linear");
    gguf_kv_f32(kv, "gemma3.rope.scaling.factor", 8.0f);
    return 6;
}

static uint64_t kv_gemma_bools(const mspec *m, buf *kv) {
    (void)m;
    gguf_kv_u32(kv, "gemma3.attention.sliding_window", 16);
    put_gstr(kv, "gemma3.attention.sliding_window_pattern");
    put_u32(kv, 9);
    put_u32(kv, 7); /* BOOL */
    put_u64(kv, 7);
    static const uint8_t pattern[7] = {1, 0, 1, 0, 1, 1, 0};
    buf_put(kv, pattern, sizeof pattern);
    return 2;
}

static void test_gemma3(void) {
    pith_model_file *f;
    pith_err err = {{0}};
    /* llama.cpp's defaults: pattern 6 (layer 5 global), local base 10000, scale 1/sqrt(head_dim). */
    int rc = open_extra("m_gemma3.gguf", &base_gemma, kv_window32, NULL, &f, &err);
    CHECKF(rc == 0, "%s", err.msg);
    if (!rc) {
        const pith_hparams *hp = pith_model_file_hparams(f);
        CHECK(!strcmp(hp->arch, "gemma3") && hp->rope_style == PITH_ROPE_HALF);
        CHECK(hp->sliding_window == 32 && bits_are(hp->layer_swa, 7, "1111101"));
        CHECK(hp->rope_theta_swa == 10000.0f && hp->rope_theta == 500000.0f && hp->rope_linear_factor == 0);
        CHECKF(fabsf(hp->query_scale - 1.0f / sqrtf(32.0f)) < 1e-7f, "%g", hp->query_scale);
        CHECK(hp->final_logit_softcap == 0 && hp->attn_logit_softcap == 0 && bits_are(hp->layer_no_rope, 7, "0000000"));
        CHECK(hp->tied_embeddings && hp->has_qk_norm && !hp->has_qkv_bias);
        /* GGUF norms already hold w + 1: they are the file's bytes, untouched */
        const pith_tensor *n = pith_model_file_tensor(f, "blk.6.post_ffw_norm.weight");
        const pith_gguf *g = pith_model_file_gguf(f);
        CHECK(n && n->type == PITH_F32 && n->ne[0] == 64 && n->data == pith_gguf_find_tensor(g, n->name)->data);
        CHECK(pith_model_file_tensor(f, "blk.0.attn_q_norm.weight") && pith_model_file_tensor(f, "blk.3.post_attention_norm.weight"));
        pith_model_file_close(f);
    }
    rc = open_extra("m_gemma3_p3.gguf", &base_gemma, kv_gemma_period3, NULL, &f, &err);
    CHECKF(rc == 0, "%s", err.msg);
    if (!rc) {
        const pith_hparams *hp = pith_model_file_hparams(f);
        CHECK(hp->sliding_window == 16 && bits_are(hp->layer_swa, 7, "1101101"));
        CHECK(hp->final_logit_softcap == 30.0f && hp->attn_logit_softcap == 50.0f && hp->rope_linear_factor == 8.0f);
        pith_model_file_close(f);
    }
    rc = open_extra("m_gemma3_bools.gguf", &base_gemma, kv_gemma_bools, NULL, &f, &err);
    CHECKF(rc == 0, "%s", err.msg);
    if (!rc) {
        CHECK(bits_are(pith_model_file_hparams(f)->layer_swa, 7, "1010110"));
        pith_model_file_close(f);
    }
    /* no window key: full attention everywhere */
    rc = open_extra("m_gemma3_full.gguf", &base_gemma, NULL, NULL, &f, &err);
    CHECKF(rc == 0, "%s", err.msg);
    if (!rc) {
        const pith_hparams *hp = pith_model_file_hparams(f);
        CHECK(hp->sliding_window == 0 && !pith_hparams_layer_swa(hp, 0));
        pith_model_file_close(f);
    }
}

static void drop_post_ffw_norm(gtensor *ts, int *n) {
    for (int i = 0; i < *n; i++) {
        if (strcmp(ts[i].name, "blk.4.post_ffw_norm.weight")) continue;
        memmove(&ts[i], &ts[i + 1], (size_t)(*n - i - 1) * sizeof *ts);
        (*n)--;
        return;
    }
}

static void drop_layer2_q_bias(gtensor *ts, int *n) {
    for (int i = 0; i < *n; i++) {
        if (strcmp(ts[i].name, "blk.1.attn_q.bias")) continue;
        memmove(&ts[i], &ts[i + 1], (size_t)(*n - i - 1) * sizeof *ts);
        (*n)--;
        return;
    }
}

static uint64_t kv_bad_pattern(const mspec *m, buf *kv) {
    (void)m;
    gguf_kv_u32(kv, "gemma3.attention.sliding_window", 16);
    gguf_kv_u32(kv, "gemma3.attention.sliding_window_pattern", 0);
    return 2;
}

static uint64_t kv_bad_softcap(const mspec *m, buf *kv) {
    (void)m;
    gguf_kv_f32(kv, "gemma3.final_logit_softcapping", -1.0f);
    return 1;
}

static void test_schema_errors(void) {
    pith_model_file *f;
    pith_err err = {{0}};
    CHECK(open_extra("e_gemma_norm.gguf", &base_gemma, NULL, drop_post_ffw_norm, &f, &err) == -1 && f == NULL);
    CHECKF(strstr(err.msg, "missing tensor 'blk.4.post_ffw_norm.weight'") != NULL, "%s", err.msg);
    /* a llama-shaped file is not a Gemma 3 */
    mspec m = base_llama;
    m.arch = "gemma3";
    CHECK(open_extra("e_gemma_llama.gguf", &m, NULL, NULL, &f, &err) == -1);
    CHECKF(strstr(err.msg, "missing tensor 'blk.0.attn_q_norm.weight'") != NULL, "%s", err.msg);
    /* all-or-none: layer 0's bias makes layer 1's required */
    m = base_llama;
    m.bias = true;
    CHECK(open_extra("e_bias_gap.gguf", &m, NULL, drop_layer2_q_bias, &f, &err) == -1);
    CHECKF(strstr(err.msg, "missing tensor 'blk.1.attn_q.bias' (layer 0 has one") != NULL, "%s", err.msg);
    CHECK(open_extra("e_gemma_pattern.gguf", &base_gemma, kv_bad_pattern, NULL, &f, &err) == -1);
    CHECKF(strstr(err.msg, "sliding_window_pattern is 0") != NULL, "%s", err.msg);
    CHECK(open_extra("e_gemma_softcap.gguf", &base_gemma, kv_bad_softcap, NULL, &f, &err) == -1);
    CHECKF(strstr(err.msg, "final logit soft-cap -1") != NULL, "%s", err.msg);
}

/* The model layer refuses what the registry does not list, and names what it does. */
static void test_unknown_arch_load(void) {
    mspec m = base_llama;
    m.arch = "gpt2";
    pith_model_file *f;
    pith_err err = {{0}};
    CHECK(open_extra("u_gpt2.gguf", &m, NULL, NULL, &f, &err) == 0);
    pith_model_file_close(f);
    pith_model *model = (pith_model *)1;
    CHECK(pith_model_load(tmp_path("u_gpt2.gguf"), NULL, &model, &err) == -1 && model == NULL);
    CHECKF(strstr(err.msg, "unsupported architecture 'gpt2' (supported: llama, qwen2, qwen3, smollm3, gemma3, lfm2, qwen35, qwen35moe, granitehybrid, nemotron_h, qwen3moe, mixtral, gpt-oss, olmo2, qwen3next, phi3, mistral3, glm4moe, gemma4, deepseek2, qwen3vl, qwen3vlmoe)"),
           "%s", err.msg);
    /* gemma3 builds, and declares its memory: a WINDOW group of the local layers, a FULL group of the rest */
    CHECK(open_extra("u_gemma3.gguf", &base_gemma, kv_window32, NULL, &f, &err) == 0);
    pith_model_file_close(f);
    CHECKF(pith_model_load(tmp_path("u_gemma3.gguf"), NULL, &model, &err) == 0, "%s", err.msg);
    if (model) {
        const pith_mem_spec *ms = &model->mem;
        int in_window = 0;
        for (int l = 0; l < model->hp.n_layers; l++) in_window += pith_hparams_layer_swa(&model->hp, l);
        CHECK(ms->n_groups == (in_window == model->hp.n_layers ? 1 : 2));
        for (int g = 0; g < ms->n_groups; g++) {
            const pith_mem_group *mg = &ms->groups[g];
            CHECK(mg->k_dim == model->hp.n_kv_heads * model->hp.head_dim && mg->v_dim == mg->k_dim);
            if (mg->kind == PITH_MEM_WINDOW) CHECK(mg->window == 32 && mg->n_layers == in_window);
            else CHECK(mg->kind == PITH_MEM_FULL && mg->n_layers == model->hp.n_layers - in_window);
            for (int i = 0; i < mg->n_layers; i++)
                CHECK(pith_hparams_layer_swa(&model->hp, mg->layers[i]) == (mg->kind == PITH_MEM_WINDOW));
        }
        pith_model_free(model);
    }
}

int main(void) {
    test_llama();
    test_qwen2_tied_vocab_from_embedding();
    test_qwen3_f16_vectors();
    test_other_arch_opens();
    test_rope_scaling_opens();
    test_errors();
    test_vocab_mismatch();
    test_mistral_window();
    test_smollm3();
    test_gemma3();
    test_schema_errors();
    test_unknown_arch_load();
    return check_summary("test_gguf_model");
}
