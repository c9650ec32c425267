/* Hugging Face checkpoints: the safetensors parser on its own, then whole model directories (single file
 * and sharded with an index), opened by directory, by .safetensors path and by .json path. */
#include <math.h>
#include <unistd.h>

#include "check.h"
#include "format/mapped_file.h"
#include "format/safetensors.h"
#include "pith/modelfile.h"
#include "test_formats_util.h"

static void test_parser_round_trip(void) {
    stensor ts[6];
    int n = 0;
    add_st(ts, &n, "a.f32", "F32", 3, 5);
    add_st(ts, &n, "b.f16", "F16", 7, 0);
    add_st(ts, &n, "c.bf16", "BF16", 2, 3);
    ts[2].n_dims = 4, ts[2].shape[2] = 4, ts[2].shape[3] = 5;
    add_st(ts, &n, "d.scalar", "F32", 0, 0);
    ts[3].n_dims = 0;
    add_st(ts, &n, "e.empty", "F16", 0, 4); /* [0, 4]: zero elements, zero bytes */
    buf file = {0};
    uint64_t data_start;
    st_build(&file, ts, n, 99, 0, &data_start);
    const char *path = tmp_path("roundtrip.safetensors");
    CHECK(write_file(path, file.p, file.n) == 0);
    pith_mapped_file m;
    pith_err err = {{0}};
    CHECK(pith_map_file(path, &m, &err) == 0);
    pith_tensor *out = NULL;
    int count = 0;
    int rc = pith_safetensors_parse(path, &m, &out, &count, &err);
    CHECKF(rc == 0, "%s", err.msg);
    CHECK(count == n);
    uint64_t off = 0;
    for (int i = 0; i < count && i < n; i++) {
        const pith_tensor *t = &out[i];
        CHECKF(!strcmp(t->name, ts[i].name), "%s", t->name);
        CHECK(t->n_dims == ts[i].n_dims);
        for (int d = 0; d < 4; d++) {
            int64_t want = d < ts[i].n_dims ? (int64_t)ts[i].shape[ts[i].n_dims - 1 - d] : 1;
            CHECKF(t->ne[d] == want, "%s ne[%d] = %lld, want %lld", t->name, d, (long long)t->ne[d], (long long)want);
        }
        CHECK(t->nbytes == st_bytes(&ts[i]));
        CHECK((const uint8_t *)t->data == m.base + data_start + off);
        CHECK(!memcmp(t->data, file.p + data_start + off, t->nbytes));
        off += t->nbytes;
    }
    CHECK(count > 2 && out[0].type == PITH_F32 && out[1].type == PITH_F16 && out[2].type == PITH_BF16);
    pith_safetensors_free(out, count);
    pith_unmap_file(&m);
    buf_free(&file);
}

static const mspec base = {
    .arch = "llama", .dim = 32, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2, .head_dim = 8, .ffn = 48,
    .vocab = 50, .ctx = 512, .wtype = 30, .ntype = 30, .bos = 1, .eos = 2,
};

static const char *model_dir(const char *name) {
    const char *dir = tmp_path(name);
    CHECK(make_dir(dir) == 0);
    static const char *const files[] = {"config.json", "model.safetensors", "model.safetensors.index.json",
                                        "model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                                        "model-00003-of-00003.safetensors"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char p[4200];
        snprintf(p, sizeof p, "%s/%s", dir, files[i]);
        unlink(p);
    }
    return dir;
}

static void write_in(const char *dir, const char *name, const void *data, size_t n) {
    char p[4200];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    CHECK(write_file(p, data, n) == 0);
}

/* Writes dir/config.json and dir/model.safetensors; returns the file bytes and the data start. */
static buf write_single(const char *dir, const mspec *m, const char *hf_arch, const char *extra, uint64_t skew,
                        stensor *ts, int *nt, uint64_t *data_start) {
    char config[2048];
    model_config(m, hf_arch, extra, config, sizeof config);
    write_in(dir, "config.json", config, strlen(config));
    *nt = model_st_list(m, ts);
    buf file = {0};
    st_build(&file, ts, *nt, 5, skew, data_start);
    write_in(dir, "model.safetensors", file.p, file.n);
    return file;
}

/* Each HF tensor appears under its canonical name with reversed shape and the file's bytes (vectors as
 * F32 conversions of those bytes). */
static int check_tensors_match(const pith_model_file *f, const stensor *ts, int nt, const buf *file,
                                uint64_t data_start, uint64_t skew, bool tied_dropped) {
    static const struct { const char *hf, *canon; } names[] = {
        {"model.embed_tokens.weight", "token_embd.weight"}, {"model.norm.weight", "output_norm.weight"},
        {"lm_head.weight", "output.weight"}, {"input_layernorm.weight", "attn_norm.weight"},
        {"self_attn.q_proj.weight", "attn_q.weight"}, {"self_attn.k_proj.weight", "attn_k.weight"},
        {"self_attn.v_proj.weight", "attn_v.weight"}, {"self_attn.o_proj.weight", "attn_output.weight"},
        {"self_attn.q_proj.bias", "attn_q.bias"}, {"self_attn.k_proj.bias", "attn_k.bias"},
        {"self_attn.v_proj.bias", "attn_v.bias"}, {"self_attn.q_norm.weight", "attn_q_norm.weight"},
        {"self_attn.k_norm.weight", "attn_k_norm.weight"}, {"post_attention_layernorm.weight", "ffn_norm.weight"},
        {"mlp.gate_proj.weight", "ffn_gate.weight"}, {"mlp.up_proj.weight", "ffn_up.weight"},
        {"mlp.down_proj.weight", "ffn_down.weight"},
    };
    uint64_t off = skew;
    int matched = 0;
    for (int i = 0; i < nt; i++) {
        char canon[128] = "";
        int layer = -1;
        const char *suffix = ts[i].name;
        if (sscanf(ts[i].name, "model.layers.%d.", &layer) == 1) suffix = strchr(ts[i].name + 13, '.') + 1;
        for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
            if (strcmp(suffix, names[k].hf)) continue;
            if (layer >= 0) snprintf(canon, sizeof canon, "blk.%d.%s", layer, names[k].canon);
            else snprintf(canon, sizeof canon, "%s", names[k].canon);
        }
        const uint8_t *bytes = file->p + data_start + off;
        off += st_bytes(&ts[i]);
        const pith_tensor *t = pith_model_file_tensor(f, canon);
        if (tied_dropped && !strcmp(canon, "output.weight")) {
            CHECK(t == NULL);
            continue;
        }
        CHECKF(t != NULL, "%s -> %s missing", ts[i].name, canon);
        if (!t) continue;
        matched++;
        CHECK(t->ne[0] == (int64_t)(ts[i].n_dims == 2 ? ts[i].shape[1] : ts[i].shape[0]));
        CHECK(t->ne[1] == (int64_t)(ts[i].n_dims == 2 ? ts[i].shape[0] : 1));
        if (ts[i].n_dims == 1) {
            CHECK(t->type == PITH_F32 && t->nbytes == ts[i].shape[0] * 4);
            bool same = true;
            for (uint64_t e = 0; e < ts[i].shape[0] && !strcmp(ts[i].dtype, "F32"); e++)
                if (memcmp((const float *)t->data + e, bytes + 4 * e, 4)) same = false;
            for (uint64_t e = 0; e < ts[i].shape[0] && strcmp(ts[i].dtype, "F32"); e++) {
                uint16_t h = (uint16_t)(bytes[2 * e] | bytes[2 * e + 1] << 8);
                float want = !strcmp(ts[i].dtype, "F16") ? pith_f16_to_f32(h) : pith_bf16_to_f32(h);
                float got = ((const float *)t->data)[e];
                if (!(got == want || (isnan(got) && isnan(want)))) same = false;
            }
            CHECKF(same, "%s values", canon);
        } else {
            CHECK(t->nbytes == st_bytes(&ts[i]));
            CHECKF(!memcmp(t->data, bytes, t->nbytes), "%s bytes", canon);
            CHECK((uintptr_t)t->data % 2 == 0);
        }
    }
    return matched;
}

static void test_llama_single(void) {
    const char *dir = model_dir("hf_llama");
    stensor ts[64];
    int nt;
    uint64_t ds;
    mspec m = base;
    m.tied = true; /* no lm_head, and the config says false: tied because it is absent */
    m.eos = 2;
    char cfg_extra[] = ", \"rope_scaling\": {\"factor\": 8.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, "
                       "\"original_max_position_embeddings\": 8192, \"rope_type\": \"llama3\"}";
    buf file = write_single(dir, &m, "LlamaForCausalLM", cfg_extra, 0, ts, &nt, &ds);
    /* the config claims untied; rewrite it so */
    char config[2048];
    mspec claims = m;
    claims.tied = false;
    model_config(&claims, "LlamaForCausalLM", cfg_extra, config, sizeof config);
    write_in(dir, "config.json", config, strlen(config));
    const char *opens[3];
    char p1[4200], p2[4200];
    snprintf(p1, sizeof p1, "%s/model.safetensors", dir);
    snprintf(p2, sizeof p2, "%s/config.json", dir);
    opens[0] = dir, opens[1] = p1, opens[2] = p2;
    for (int k = 0; k < 3; k++) {
        pith_model_file *f;
        pith_err err = {{0}};
        int rc = pith_model_file_open(opens[k], &f, &err);
        CHECKF(rc == 0, "%s: %s", opens[k], err.msg);
        if (rc) continue;
        const pith_hparams *hp = pith_model_file_hparams(f);
        CHECK(pith_model_file_format(f) == PITH_FORMAT_SAFETENSORS);
        CHECK(!strcmp(hp->arch, "llama") && hp->rope_style == PITH_ROPE_HALF);
        CHECK(hp->dim == 32 && hp->n_layers == 2 && hp->n_heads == 4 && hp->n_kv_heads == 2 && hp->head_dim == 8);
        CHECK(hp->ffn_dim == 48 && hp->n_vocab == 50 && hp->ctx_len == 512);
        CHECK(fabsf(hp->norm_eps - 1e-5f) < 1e-12f && hp->rope_theta == 1e6f);
        CHECK(hp->rope_scale_factor == 8.0f && hp->rope_low_freq_factor == 1.0f && hp->rope_high_freq_factor == 4.0f &&
              hp->rope_orig_ctx == 8192);
        CHECK(hp->tied_embeddings && !hp->has_qkv_bias && !hp->has_qk_norm);
        CHECK(hp->bos_id == 1 && hp->eos_id == 2);
        CHECK(pith_model_file_gguf(f) == NULL);
        CHECKF(pith_model_file_dir(f) && !strcmp(pith_model_file_dir(f), dir), "%s", pith_model_file_dir(f));
        CHECK(check_tensors_match(f, ts, nt, &file, ds, 0, false) == pith_model_file_n_tensors(f));
        pith_model_file_close(f);
    }
    buf_free(&file);
}

/* Misaligned data sections (legal in safetensors) come back as aligned copies of the same bytes. */
static void test_misaligned(void) {
    const char *dir = model_dir("hf_skew");
    stensor ts[64];
    int nt;
    uint64_t ds;
    mspec m = base;
    m.wtype = 0; /* F32 matrices, so a 1-byte skew misaligns them */
    m.ntype = 1;
    buf file = write_single(dir, &m, "MistralForCausalLM", ", \"sliding_window\": 4096", 1, ts, &nt, &ds);
    pith_model_file *f;
    pith_err err = {{0}};
    int rc = pith_model_file_open(dir, &f, &err);
    CHECKF(rc == 0, "%s", err.msg);
    if (!rc) {
        CHECK(!strcmp(pith_model_file_hparams(f)->arch, "llama") && !pith_model_file_hparams(f)->tied_embeddings);
        CHECK(check_tensors_match(f, ts, nt, &file, ds, 1, false) == pith_model_file_n_tensors(f));
        for (int i = 0; i < pith_model_file_n_tensors(f); i++)
            CHECK((uintptr_t)pith_model_file_tensor_at(f, i)->data % 4 == 0);
        pith_model_file_close(f);
    }
    buf_free(&file);
}

/* qwen2, three shards and an index; tie_word_embeddings true although lm_head is stored: it is dropped. */
static void test_qwen2_sharded(void) {
    const char *dir = model_dir("hf_qwen2_sharded");
    mspec m = base;
    m.arch = "qwen2";
    m.bias = true;
    m.tied = true;
    m.ntype = 1;
    char config[2048];
    model_config(&m, "Qwen2ForCausalLM", ", \"rope_scaling\": null, \"sliding_window\": null", config, sizeof config);
    /* eos as a list */
    char *eos = strstr(config, "\"eos_token_id\": 2");
    CHECK(eos != NULL);
    if (eos) {
        char listed[2100];
        snprintf(listed, sizeof listed, "%.*s\"eos_token_id\": [2, 7]%s", (int)(eos - config), config, eos + 17);
        memcpy(config, listed, strlen(listed) < sizeof config ? strlen(listed) + 1 : 0);
    }
    write_in(dir, "config.json", config, strlen(config));
    m.tied = false; /* write lm_head anyway */
    stensor ts[64];
    int nt = model_st_list(&m, ts);
    static const char *const shard_names[3] = {"model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                                               "model-00003-of-00003.safetensors"};
    buf index = {0};
    buf_put(&index, "{\"metadata\": {\"total_size\": 1}, \"weight_map\": {", 47);
    buf files[3] = {{0}};
    uint64_t starts[3];
    stensor per[3][64];
    int nper[3] = {0};
    for (int i = 0; i < nt; i++) {
        int s = i % 3;
        per[s][nper[s]++] = ts[i];
        char e[256];
        int k = snprintf(e, sizeof e, "%s\"%s\": \"%s\"", i ? ", " : "", ts[i].name, shard_names[s]);
        buf_put(&index, e, (size_t)k);
    }
    buf_put(&index, "}}", 2);
    for (int s = 0; s < 3; s++) {
        st_build(&files[s], per[s], nper[s], 11 + (uint64_t)s, 0, &starts[s]);
        write_in(dir, shard_names[s], files[s].p, files[s].n);
    }
    write_in(dir, "model.safetensors.index.json", index.p, index.n);
    char ipath[4200];
    snprintf(ipath, sizeof ipath, "%s/model.safetensors.index.json", dir);
    const char *opens[2] = {dir, ipath};
    for (int k = 0; k < 2; k++) {
        pith_model_file *f;
        pith_err err = {{0}};
        int rc = pith_model_file_open(opens[k], &f, &err);
        CHECKF(rc == 0, "%s", err.msg);
        if (rc) continue;
        const pith_hparams *hp = pith_model_file_hparams(f);
        CHECK(!strcmp(hp->arch, "qwen2") && hp->has_qkv_bias && hp->tied_embeddings && hp->eos_id == 2);
        CHECK(hp->rope_scale_factor == 0);
        int matched = 0;
        for (int s = 0; s < 3; s++) matched += check_tensors_match(f, per[s], nper[s], &files[s], starts[s], 0, true);
        CHECK(matched == pith_model_file_n_tensors(f));
        CHECK(pith_model_file_n_tensors(f) == nt - 1);
        pith_model_file_close(f);
    }
    for (int s = 0; s < 3; s++) buf_free(&files[s]);
    buf_free(&index);
}

static void test_qwen3(void) {
    const char *dir = model_dir("hf_qwen3");
    stensor ts[64];
    int nt;
    uint64_t ds;
    mspec m = base;
    m.arch = "qwen3";
    m.qk_norm = true;
    m.head_dim = 16; /* != 32 / 4 */
    m.ntype = 0;
    buf file = write_single(dir, &m, "Qwen3ForCausalLM", "", 0, ts, &nt, &ds);
    pith_model_file *f;
    pith_err err = {{0}};
    int rc = pith_model_file_open(dir, &f, &err);
    CHECKF(rc == 0, "%s", err.msg);
    if (!rc) {
        const pith_hparams *hp = pith_model_file_hparams(f);
        CHECK(!strcmp(hp->arch, "qwen3") && hp->has_qk_norm && hp->head_dim == 16 && !hp->has_qkv_bias);
        const pith_tensor *q = pith_model_file_tensor(f, "blk.1.attn_q.weight");
        CHECK(q && q->ne[0] == 32 && q->ne[1] == 64);
        CHECK(check_tensors_match(f, ts, nt, &file, ds, 0, false) == pith_model_file_n_tensors(f));
        pith_model_file_close(f);
    }
    buf_free(&file);
}

/* Linear rope scaling, spelt "type" (older configs) or "rope_type": the factor reaches the
 * hyper-parameters, and a factor of 1 is stored as none. (Bad factors: test_safetensors_malformed.) */
static void test_linear_rope(void) {
    static const struct { const char *extra; float want; } cases[] = {
        {", \"rope_scaling\": {\"type\": \"linear\", \"factor\": 2.5}", 2.5f},
        {", \"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": 4}", 4.0f},
        {", \"rope_scaling\": {\"type\": \"linear\", \"factor\": 1.0}", 0.0f},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *dir = model_dir("hf_linear");
        stensor ts[64];
        int nt;
        uint64_t ds;
        buf file = write_single(dir, &base, "LlamaForCausalLM", cases[i].extra, 0, ts, &nt, &ds);
        pith_model_file *f;
        pith_err err = {{0}};
        int rc = pith_model_file_open(dir, &f, &err);
        CHECKF(rc == 0, "%s: %s", cases[i].extra, err.msg);
        if (!rc) {
            const pith_hparams *hp = pith_model_file_hparams(f);
            CHECKF(hp->rope_linear_factor == cases[i].want && hp->rope_scale_factor == 0, "%s: factor %g",
                   cases[i].extra, hp->rope_linear_factor);
            pith_model_file_close(f);
        }
        buf_free(&file);
    }
}

/* ---- architecture descriptors: Mistral's window, SmolLM3's NoPE layers, Gemma 3 ---- */

static bool bits_are(const uint64_t *mask, int n_layers, const char *want) {
    for (int l = 0; l < n_layers; l++)
        if (pith_layer_bit(mask, l) != (want[l] == '1')) return false;
    for (int l = n_layers; l < PITH_MAX_LAYERS; l++)
        if (pith_layer_bit(mask, l)) return false;
    return true;
}

/* Writes m under hf_arch with `extra` config members and opens it. */
static int open_hf(const char *name, const mspec *m, const char *hf_arch, const char *extra, pith_model_file **f,
                   pith_err *err, buf *file_out, uint64_t *ds_out) {
    const char *dir = model_dir(name);
    stensor ts[128];
    int nt;
    uint64_t ds;
    buf file = write_single(dir, m, hf_arch, extra, 0, ts, &nt, &ds);
    if (file_out) *file_out = file, *ds_out = ds;
    else buf_free(&file);
    *f = NULL;
    return pith_model_file_open(dir, f, err);
}

static void test_mistral_window(void) {
    static const struct { const char *extra; int want; } cases[] = {
        {", \"sliding_window\": 64", 64},
        {", \"sliding_window\": null", 0},
        {"", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pith_model_file *f;
        pith_err err = {{0}};
        int rc = open_hf("hf_mistral", &base, "MistralForCausalLM", cases[i].extra, &f, &err, NULL, NULL);
        CHECKF(rc == 0, "%s: %s", cases[i].extra, err.msg);
        if (rc) continue;
        const pith_hparams *hp = pith_model_file_hparams(f);
        CHECK(!strcmp(hp->arch, "llama") && hp->sliding_window == cases[i].want);
        CHECK(bits_are(hp->layer_swa, 2, cases[i].want ? "11" : "00") || !cases[i].want);
        CHECK(pith_hparams_layer_swa(hp, 1) == (cases[i].want > 0));
        pith_model_file_close(f);
    }
}

static void test_smollm3(void) {
    static const struct { const char *extra, *no_rope, *swa; int window; } cases[] = {
        {"", "0001", "0000", 0},
        {", \"no_rope_layers\": [1, 1, 0, 1]", "0010", "0000", 0},
        {", \"no_rope_layer_interval\": 2", "0101", "0000", 0},
        {", \"no_rope_layer_interval\": 2, \"use_sliding_window\": true, \"sliding_window\": 16", "0101", "0101", 16},
        {", \"use_sliding_window\": false, \"sliding_window\": 16", "0001", "0000", 0},
        {", \"use_sliding_window\": true, \"sliding_window\": 16, \"layer_types\": [\"sliding_attention\", "
         "\"full_attention\", \"full_attention\", \"full_attention\"]", "0001", "1000", 16},
    };
    mspec m = base;
    m.n_layers = 4;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pith_model_file *f;
        pith_err err = {{0}};
        int rc = open_hf("hf_smollm3", &m, "SmolLM3ForCausalLM", cases[i].extra, &f, &err, NULL, NULL);
        CHECKF(rc == 0, "%s: %s", cases[i].extra, err.msg);
        if (rc) continue;
        const pith_hparams *hp = pith_model_file_hparams(f);
        CHECK(!strcmp(hp->arch, "smollm3") && hp->rope_style == PITH_ROPE_HALF);
        CHECKF(bits_are(hp->layer_no_rope, 4, cases[i].no_rope), "%s", cases[i].extra);
        CHECKF(hp->sliding_window == cases[i].window && (!hp->sliding_window || bits_are(hp->layer_swa, 4, cases[i].swa)),
               "%s", cases[i].extra);
        pith_model_file_close(f);
    }
}

static const mspec base_gemma = {
    .arch = "gemma3", .dim = 32, .n_layers = 7, .n_heads = 4, .n_kv_heads = 2, .head_dim = 16, .ffn = 48,
    .vocab = 50, .ctx = 512, .tied = true, .gemma = true, .wtype = 30, .ntype = 0, .bos = 2, .eos = 1,
};

/* Layer pattern from layer_types, from sliding_window_pattern, and by default; query scale, local base,
 * soft-caps and rope scaling from the config; every norm of the schema shifted by one. */
static void test_gemma3(void) {
    static const struct { const char *extra, *swa; int window; } cases[] = {
        {", \"sliding_window\": 8, \"layer_types\": [\"sliding_attention\", \"full_attention\", "
         "\"sliding_attention\", \"sliding_attention\", \"full_attention\", \"sliding_attention\", "
         "\"full_attention\"]", "1011010", 8},
        {", \"sliding_window\": 8, \"sliding_window_pattern\": 3", "1101101", 8},
        {", \"sliding_window\": 8", "1111101", 8},
        {"", "1111101", 4096},
        {", \"sliding_window\": null, \"sliding_window_pattern\": 3", "0000000", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pith_model_file *f;
        pith_err err = {{0}};
        int rc = open_hf("hf_gemma3", &base_gemma, "Gemma3ForCausalLM", cases[i].extra, &f, &err, NULL, NULL);
        CHECKF(rc == 0, "%s: %s", cases[i].extra, err.msg);
        if (rc) continue;
        const pith_hparams *hp = pith_model_file_hparams(f);
        CHECK(!strcmp(hp->arch, "gemma3") && hp->rope_style == PITH_ROPE_HALF);
        CHECKF(hp->sliding_window == cases[i].window, "%s: window %d", cases[i].extra, hp->sliding_window);
        CHECKF(!hp->sliding_window || bits_are(hp->layer_swa, 7, cases[i].swa), "%s", cases[i].extra);
        CHECK(hp->rope_theta_swa == 10000.0f && fabsf(hp->query_scale - 1.0f / 16.0f) < 1e-8f);
        CHECK(hp->final_logit_softcap == 0 && hp->attn_logit_softcap == 0 && hp->has_qk_norm);
        pith_model_file_close(f);
    }

    const char *extra = ", \"sliding_window\": 8, \"query_pre_attn_scalar\": 64, \"rope_local_base_freq\": 20000.0, "
                        "\"final_logit_softcapping\": 30.0, \"attn_logit_softcapping\": null, "
                        "\"hidden_activation\": \"gelu_pytorch_tanh\", "
                        "\"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": 8.0}";
    pith_model_file *f;
    pith_err err = {{0}};
    buf file;
    uint64_t ds;
    int rc = open_hf("hf_gemma3", &base_gemma, "Gemma3ForCausalLM", extra, &f, &err, &file, &ds);
    CHECKF(rc == 0, "%s", err.msg);
    if (rc) return;
    const pith_hparams *hp = pith_model_file_hparams(f);
    CHECK(fabsf(hp->query_scale - 0.125f) < 1e-8f && hp->rope_theta_swa == 20000.0f && hp->rope_theta == 1e6f);
    CHECK(hp->final_logit_softcap == 30.0f && hp->attn_logit_softcap == 0 && hp->rope_linear_factor == 8.0f);
    CHECK(hp->tied_embeddings && pith_model_file_tensor(f, "output.weight") == NULL);
    /* every norm is the file's F32 value + 1; matrices are the file's bytes */
    stensor ts[128];
    int nt = model_st_list(&base_gemma, ts);
    uint64_t off = 0;
    int norms = 0;
    for (int i = 0; i < nt; i++) {
        const uint8_t *bytes = file.p + ds + off;
        off += st_bytes(&ts[i]);
        const char *canon = NULL;
        char name[96];
        int l = -1;
        if (!strcmp(ts[i].name, "model.norm.weight")) canon = "output_norm.weight";
        static const struct { const char *hf, *canon; } per_layer[] = {
            {"input_layernorm.weight", "attn_norm.weight"},
            {"self_attn.q_norm.weight", "attn_q_norm.weight"},
            {"self_attn.k_norm.weight", "attn_k_norm.weight"},
            {"post_attention_layernorm.weight", "post_attention_norm.weight"},
            {"pre_feedforward_layernorm.weight", "ffn_norm.weight"},
            {"post_feedforward_layernorm.weight", "post_ffw_norm.weight"},
        };
        if (sscanf(ts[i].name, "model.layers.%d.", &l) == 1) {
            const char *suffix = strchr(ts[i].name + 13, '.') + 1;
            for (size_t k = 0; k < sizeof per_layer / sizeof per_layer[0]; k++)
                if (!strcmp(suffix, per_layer[k].hf)) {
                    snprintf(name, sizeof name, "blk.%d.%s", l, per_layer[k].canon);
                    canon = name;
                }
        }
        if (!canon) continue;
        const pith_tensor *t = pith_model_file_tensor(f, canon);
        CHECKF(t && t->type == PITH_F32, "%s", canon);
        if (!t) continue;
        bool shifted = true;
        for (uint64_t e = 0; e < ts[i].shape[0]; e++) {
            float raw;
            memcpy(&raw, bytes + 4 * e, 4);
            float got = ((const float *)t->data)[e];
            if (!(got == raw + 1.0f || (isnan(got) && isnan(raw)))) shifted = false;
        }
        CHECKF(shifted, "%s is not shifted by one", canon);
        norms++;
    }
    CHECK(norms == 1 + 6 * 7);
    const pith_tensor *q = pith_model_file_tensor(f, "blk.2.attn_q.weight");
    CHECK(q && q->type == PITH_BF16 && q->ne[0] == 32 && q->ne[1] == 64);
    pith_model_file_close(f);
    buf_free(&file);
}

static void test_arch_errors(void) {
    static const struct { const char *label, *hf_arch, *extra, *needle; bool gemma; } cases[] = {
        {"unknown", "GPT2LMHeadModel", "",
         "unsupported architecture 'GPT2LMHeadModel' (supported: LlamaForCausalLM, MistralForCausalLM, "
         "Qwen2ForCausalLM, Qwen3ForCausalLM, SmolLM3ForCausalLM, Gemma3ForCausalLM", false},
        {"multimodal_text_config", "Gemma3ForConditionalGeneration", ", \"text_config\": 3",
         "\"text_config\" is not an object", true},
        {"activation", "Gemma3ForCausalLM", ", \"hidden_activation\": \"relu\"", "activation 'relu'", true},
        {"qpas", "Gemma3ForCausalLM", ", \"query_pre_attn_scalar\": 0", "query_pre_attn_scalar", true},
        {"pattern", "Gemma3ForCausalLM", ", \"sliding_window_pattern\": 0", "\"sliding_window_pattern\" is 0", true},
        {"layer_types_len", "Gemma3ForCausalLM", ", \"layer_types\": [\"full_attention\"]",
         "layer_types has 1 entries, expected one per layer (7)", true},
        {"layer_types_kind", "Gemma3ForCausalLM", ", \"layer_types\": 3", "layer_types is not a list", true},
        {"no_rope_len", "SmolLM3ForCausalLM", ", \"no_rope_layers\": [1, 0, 1]",
         "no_rope_layers has 3 entries, expected one per layer (2)", false},
        {"no_rope_item", "SmolLM3ForCausalLM", ", \"no_rope_layers\": [1, {}]",
         "no_rope_layers entry 1 is not a string", false},
        {"interval", "SmolLM3ForCausalLM", ", \"no_rope_layer_interval\": 0", "no_rope_layer_interval", false},
        {"window_type", "MistralForCausalLM", ", \"sliding_window\": \"big\"", "\"sliding_window\" is not an integer",
         false},
        {"window_range", "MistralForCausalLM", ", \"sliding_window\": 1e12", "\"sliding_window\" is not an integer",
         false},
        {"rope_params", "Gemma3ForCausalLM",
         ", \"rope_parameters\": {\"sliding_attention\": {\"rope_type\": \"yarn\", \"factor\": 4}}",
         "rope_parameters.sliding_attention type 'yarn'", true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pith_model_file *f;
        pith_err err = {{0}};
        int rc = open_hf("hf_arch_err", cases[i].gemma ? &base_gemma : &base, cases[i].hf_arch, cases[i].extra, &f,
                         &err, NULL, NULL);
        CHECKF(rc == -1 && f == NULL, "%s: accepted", cases[i].label);
        CHECKF(strstr(err.msg, cases[i].needle) != NULL, "%s: '%s' lacks '%s'", cases[i].label, err.msg,
               cases[i].needle);
        CHECKF(strstr(err.msg, "config.json") != NULL, "%s: %s", cases[i].label, err.msg);
    }
    { /* a text_config without the sizes takes Gemma3TextConfig's defaults (width 2304, vocabulary 262208),
       * which this model's tensors contradict */
        pith_model_file *f;
        pith_err err = {{0}};
        int rc = open_hf("hf_arch_err", &base_gemma, "Gemma3ForConditionalGeneration",
                         ", \"text_config\": {\"model_type\": \"gemma3_text\"}", &f, &err, NULL, NULL);
        CHECK(rc == -1 && f == NULL);
        CHECKF(strstr(err.msg, "expected [2304, 262208]") != NULL, "%s", err.msg);
    }
    /* a Gemma-only tensor missing: the HF name maps to it, the schema wants it */
    const char *dir = model_dir("hf_gemma_missing");
    char config[2048];
    model_config(&base_gemma, "Gemma3ForCausalLM", "", config, sizeof config);
    write_in(dir, "config.json", config, strlen(config));
    stensor ts[128];
    int nt = model_st_list(&base_gemma, ts);
    for (int i = 0; i < nt; i++)
        if (!strcmp(ts[i].name, "model.layers.3.pre_feedforward_layernorm.weight")) ts[i] = ts[--nt];
    buf file = {0};
    st_build(&file, ts, nt, 5, 0, NULL);
    write_in(dir, "model.safetensors", file.p, file.n);
    buf_free(&file);
    pith_model_file *f;
    pith_err err = {{0}};
    CHECK(pith_model_file_open(dir, &f, &err) == -1);
    CHECKF(strstr(err.msg, "missing tensor 'blk.3.ffn_norm.weight'") != NULL, "%s", err.msg);
}

int main(void) {
    test_parser_round_trip();
    test_llama_single();
    test_misaligned();
    test_qwen2_sharded();
    test_qwen3();
    test_linear_rope();
    test_mistral_window();
    test_smollm3();
    test_gemma3();
    test_arch_errors();
    return check_summary("test_safetensors");
}
