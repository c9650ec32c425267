/* Mistral 3's loaders (model/mistral3_arch.c): the hyper-parameters its descriptor reads from GGUF
 * (arch "mistral3": attention.temperature_scale, rope.scaling.original_context_length as the temperature's
 * length, else context_length; rope.scaling.yarn_log_multiplier in the YaRN attention factor) and from
 * config.json (Ministral3ForCausalLM; Mistral3ForConditionalGeneration with the text model under
 * "text_config" and its tensors under model.language_model. or, older, language_model.model.; the RoPE and
 * llama_4_scaling_beta in "rope_parameters" or "rope_scaling"), and the refusals of malformed values of
 * each key and of a missing tensor, each message naming what is wrong. Files are written byte by byte
 * (test_formats_util.h), the models tiny; a Mistral 3 model is then built and run one step on the CPU. */
#include <math.h>
#include <unistd.h>

#include "check.h"
#include "model/mistral3.h"
#include "pith/model.h"
#include "pith/modelfile.h"
#include "test_formats_util.h"

static const mspec base = {
    .arch = "mistral3", .dim = 64, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2, .head_dim = 16, .ffn = 96,
    .vocab = 48, .ctx = 512, .wtype = 0, .ntype = 0, .bos = 1, .eos = 2,
};

/* ---- GGUF ---- */

typedef struct gguf_case {
    bool yarn;            /* rope.scaling.{type,factor,original_context_length,yarn_beta_*} */
    int orig;             /* original_context_length (with yarn, or alone when not 0) */
    bool zero_orig;       /* original_context_length written as 0 */
    const char *log_mul;  /* yarn_log_multiplier: NULL absent, "str" a string, else a float */
    const char *temp;     /* attention.temperature_scale: NULL absent, "str" a string, "nan", else a float */
    const char *drop;     /* a tensor left out */
} gguf_case;

static int open_gguf(const char *name, const gguf_case *c, pith_model_file **f, pith_err *err) {
    mspec m = base;
    if (c->yarn) m.rope_type = "yarn", m.rope_factor = 16.0f;
    gtensor ts[4 + 14 * 8], keep[4 + 14 * 8];
    int nt = model_tensor_list(&m, ts), nk = 0;
    for (int i = 0; i < nt; i++)
        if (!c->drop || strcmp(ts[i].name, c->drop)) keep[nk++] = ts[i];
    buf kv = {0}, file = {0};
    uint64_t n = model_kvs(&m, &kv, NULL);
    if (c->yarn || c->orig > 0 || c->zero_orig) gguf_kv_u32(&kv, "mistral3.rope.scaling.original_context_length", (uint32_t)c->orig), n++;
    if (c->yarn) {
        gguf_kv_f32(&kv, "mistral3.rope.scaling.yarn_beta_fast", 32.0f), n++;
        gguf_kv_f32(&kv, "mistral3.rope.scaling.yarn_beta_slow", 1.0f), n++;
    }
    if (c->log_mul && !strcmp(c->log_mul, "str")) gguf_kv_str(&kv, "mistral3.rope.scaling.yarn_log_multiplier", "one"), n++;
    else if (c->log_mul) gguf_kv_f32(&kv, "mistral3.rope.scaling.yarn_log_multiplier", strtof(c->log_mul, NULL)), n++;
    if (c->temp && !strcmp(c->temp, "str")) gguf_kv_str(&kv, "mistral3.attention.temperature_scale", "0.1"), n++;
    else if (c->temp) gguf_kv_f32(&kv, "mistral3.attention.temperature_scale", strtof(c->temp, NULL)), n++;
    gguf_build(&file, 3, &kv, n, keep, nk, 32, 7, NULL);
    const char *path = tmp_path(name);
    if (write_file(path, file.p, file.n)) abort();
    buf_free(&kv);
    buf_free(&file);
    *f = NULL;
    return pith_model_file_open(path, f, err);
}

static void test_gguf(void) {
    static const struct { gguf_case c; float beta, mscale, yarn; int length; } ok[] = {
        {{.yarn = true, .orig = 32, .log_mul = "1", .temp = "0.1"}, 0.1f, 1.0f, 16.0f, 32},
        {{.yarn = true, .orig = 32, .temp = "0.1"}, 0.1f, 1.0f, 16.0f, 32}, /* no log multiplier: 1 */
        /* mscale_all_dim 0 (the converter's apply_scale): get_mscale(16, 1) / 1 */
        {{.yarn = true, .orig = 32, .log_mul = "0"}, 0.0f, 1.2772588722239781f /* 1 + 0.1 ln 16 */, 16.0f, 32},
        {{.temp = "0.25"}, 0.25f, 0, 0, 512},             /* no YaRN: the length is context_length */
        {{.orig = 100, .temp = "0.1"}, 0.1f, 0, 0, 100},
        {{0}, 0, 0, 0, 512},                             /* no temperature: a Llama */
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        pith_model_file *f;
        pith_err err = {{0}};
        int rc = open_gguf("m3_ok.gguf", &ok[i].c, &f, &err);
        CHECKF(rc == 0, "case %zu: %s", i, err.msg);
        if (rc) continue;
        const pith_hparams *hp = pith_model_file_hparams(f);
        const pith_mistral3_params *p = pith_mistral3_params_of(hp);
        CHECK(!strcmp(hp->arch, "mistral3") && hp->rope_style == PITH_ROPE_ADJACENT && !hp->has_qkv_bias);
        CHECKF(p->attn_temp_beta == ok[i].beta && p->attn_temp_length == ok[i].length, "case %zu: beta %g length %d", i,
               p->attn_temp_beta, p->attn_temp_length);
        CHECKF(hp->rope_yarn_factor == ok[i].yarn, "case %zu: yarn factor %g", i, hp->rope_yarn_factor);
        CHECKF(!ok[i].yarn || (fabsf(hp->rope_yarn_mscale - ok[i].mscale) < 1e-6f && hp->rope_orig_ctx == 32),
               "case %zu: mscale %g", i, hp->rope_yarn_mscale);
        pith_model_file_close(f);
    }
    static const struct { gguf_case c; const char *want; } bad[] = {
        {{.temp = "str"}, "attention.temperature_scale"},
        {{.temp = "nan"}, "temperature"},
        {{.yarn = true, .orig = 32, .log_mul = "str"}, "yarn_log_multiplier"},
        {{.yarn = true, .orig = 32, .log_mul = "1", .temp = "0.1", .drop = "blk.1.ffn_up.weight"}, "blk.1.ffn_up.weight"},
        {{.yarn = true, .orig = 32, .temp = "0.1", .drop = "output_norm.weight"}, "output_norm.weight"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        pith_model_file *f;
        pith_err err = {{0}};
        int rc = open_gguf("m3_bad.gguf", &bad[i].c, &f, &err);
        CHECKF(rc != 0 && strstr(err.msg, bad[i].want), "case %zu: rc %d, message '%s' (want '%s')", i, rc, err.msg,
               bad[i].want);
        if (!rc) pith_model_file_close(f);
    }
    /* a zero original context with a temperature: llama.cpp throws ("invalid n_ctx_orig_yarn"), so do we */
    pith_model_file *f;
    pith_err err = {{0}};
    gguf_case zero = {.zero_orig = true, .temp = "0.1"};
    int rc = open_gguf("m3_zero.gguf", &zero, &f, &err);
    CHECKF(rc != 0 && strstr(err.msg, "original context"), "rc %d: %s", rc, err.msg);
    if (!rc) pith_model_file_close(f);
}

/* ---- Hugging Face ---- */

enum layout { TEXT_ONLY, NESTED, LEGACY };

static const char *model_dir(const char *name) {
    const char *dir = tmp_path(name);
    CHECK(make_dir(dir) == 0);
    char p[4200];
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    unlink(p);
    return dir;
}

/* Writes a directory of base's tensors in the layout and config.json (text: the text model's members
 * after the common ones; outer: members of the outer config, NESTED and LEGACY only), and opens it. */
static int open_hf(const char *name, enum layout lay, const char *text, const char *outer, pith_model_file **f,
                   pith_err *err) {
    const char *dir = model_dir(name);
    char common[1024], config[4096], path[4200];
    snprintf(common, sizeof common,
             "\"hidden_size\": %d, \"intermediate_size\": %d, \"num_hidden_layers\": %d, \"num_attention_heads\": %d, "
             "\"num_key_value_heads\": %d, \"head_dim\": %d, \"rms_norm_eps\": 1e-05, \"max_position_embeddings\": %d, "
             "\"vocab_size\": %d, \"bos_token_id\": 1, \"eos_token_id\": 2",
             base.dim, base.ffn, base.n_layers, base.n_heads, base.n_kv_heads, base.head_dim, base.ctx, base.vocab);
    if (lay == TEXT_ONLY)
        snprintf(config, sizeof config, "{\"architectures\": [\"Ministral3ForCausalLM\"], \"model_type\": \"ministral3\", "
                 "%s%s}", common, text);
    else
        snprintf(config, sizeof config, "{\"architectures\": [\"Mistral3ForConditionalGeneration\"], "
                 "\"model_type\": \"mistral3\", \"text_config\": {\"model_type\": \"ministral3\", %s%s}, "
                 "\"vision_config\": {\"model_type\": \"pixtral\"}%s}", common, text, outer);
    snprintf(path, sizeof path, "%s/config.json", dir);
    CHECK(write_text(path, config) == 0);
    stensor ts[4 + 14 * 8 + 1];
    int nt = model_st_list(&base, ts);
    for (int i = 0; i < nt && lay != TEXT_ONLY; i++) {
        char renamed[96];
        if (!strncmp(ts[i].name, "model.", 6))
            snprintf(renamed, sizeof renamed, lay == NESTED ? "model.language_model.%s" : "language_model.model.%s",
                     ts[i].name + 6);
        else
            snprintf(renamed, sizeof renamed, lay == NESTED ? "%s" : "language_model.%s", ts[i].name);
        memcpy(ts[i].name, renamed, sizeof ts[i].name);
    }
    if (lay != TEXT_ONLY) /* a vision tensor the text model ignores */
        add_st(ts, &nt, lay == NESTED ? "model.vision_tower.patch_conv.weight" : "vision_tower.patch_conv.weight", "F32",
               8, 12);
    buf file = {0};
    st_build(&file, ts, nt, 9, 0, NULL);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    CHECK(write_file(path, file.p, file.n) == 0);
    buf_free(&file);
    *f = NULL;
    return pith_model_file_open(dir, f, err);
}

#define YARN_PARAMS                                                                                              \
    "\"rope_type\": \"yarn\", \"rope_theta\": 1000000.0, \"factor\": 16.0, \"original_max_position_embeddings\": " \
    "32, \"beta_fast\": 32.0, \"beta_slow\": 1.0, \"mscale\": 1.0, \"mscale_all_dim\": 1.0"

static void test_hf(void) {
    static const struct { enum layout lay; const char *text; float beta, yarn, mscale, theta; int length, window; } ok[] = {
        {NESTED, ", \"rope_parameters\": {" YARN_PARAMS ", \"llama_4_scaling_beta\": 0.1}", 0.1f, 16, 1, 1e6f, 32, 0},
        {LEGACY, ", \"rope_parameters\": {" YARN_PARAMS ", \"llama_4_scaling_beta\": 0.1}", 0.1f, 16, 1, 1e6f, 32, 0},
        {TEXT_ONLY, ", \"sliding_window\": null, \"rope_parameters\": {" YARN_PARAMS ", \"llama_4_scaling_beta\": 0.2}",
         0.2f, 16, 1, 1e6f, 32, 0},
        /* "type" alone, no mscale keys: the attention factor is 1 + 0.1 ln 16 */
        {NESTED, ", \"rope_parameters\": {\"type\": \"yarn\", \"rope_theta\": 5e5, \"factor\": 16.0, "
                 "\"original_max_position_embeddings\": 32}", 0, 16, 1.2772588722239781f /* 1 + 0.1 ln 16 */, 5e5f, 32, 0},
        /* older configs: the scaling in rope_scaling, the beta with it */
        {NESTED, ", \"rope_theta\": 1e6, \"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 16.0, "
                 "\"original_max_position_embeddings\": 32, \"mscale\": 1.0, \"mscale_all_dim\": 1.0, "
                 "\"llama_4_scaling_beta\": 0.1}", 0.1f, 16, 1, 1e6f, 32, 0},
        /* Mistral Small 3.1's text model: a plain Mistral (rope_theta at the top, a null window) */
        {LEGACY, ", \"rope_theta\": 1000000000.0, \"sliding_window\": null", 0, 0, 0, 1e9f, 0, 0},
        {NESTED, ", \"sliding_window\": 16, \"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 1e6}", 0, 0,
         0, 1e6f, 0, 16},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        pith_model_file *f;
        pith_err err = {{0}};
        int rc = open_hf("hf_m3_ok", ok[i].lay, ok[i].text, "", &f, &err);
        CHECKF(rc == 0, "case %zu: %s", i, err.msg);
        if (rc) continue;
        const pith_hparams *hp = pith_model_file_hparams(f);
        const pith_mistral3_params *p = pith_mistral3_params_of(hp);
        CHECK(!strcmp(hp->arch, "mistral3") && hp->rope_style == PITH_ROPE_HALF);
        CHECKF(p->attn_temp_beta == ok[i].beta && (!ok[i].beta || p->attn_temp_length == ok[i].length),
               "case %zu: beta %g length %d", i, p->attn_temp_beta, p->attn_temp_length);
        CHECKF(hp->rope_yarn_factor == ok[i].yarn && hp->rope_theta == ok[i].theta, "case %zu: yarn %g theta %g", i,
               hp->rope_yarn_factor, hp->rope_theta);
        CHECKF(!ok[i].yarn || (fabsf(hp->rope_yarn_mscale - ok[i].mscale) < 1e-6f && hp->rope_orig_ctx == 32 &&
                               hp->rope_yarn_truncate),
               "case %zu: mscale %g orig %d", i, hp->rope_yarn_mscale, hp->rope_orig_ctx);
        CHECKF(hp->sliding_window == ok[i].window && pith_hparams_layer_swa(hp, 1) == (ok[i].window > 0),
               "case %zu: window %d", i, hp->sliding_window);
        const pith_tensor *q = pith_model_file_tensor(f, "blk.1.attn_q.weight");
        CHECKF(q && q->ne[0] == base.dim && q->ne[1] == base.n_heads * base.head_dim, "case %zu: blk.1.attn_q", i);
        CHECKF(pith_model_file_tensor(f, "output.weight") && pith_model_file_tensor(f, "token_embd.weight"),
               "case %zu: output.weight / token_embd.weight", i);
        pith_model_file_close(f);
    }
    static const struct { enum layout lay; const char *text; const char *want; } bad[] = {
        {NESTED, ", \"rope_parameters\": 7", "rope_parameters"},
        {NESTED, ", \"rope_parameters\": {" YARN_PARAMS ", \"llama_4_scaling_beta\": \"0.1\"}", "llama_4_scaling_beta"},
        {NESTED, ", \"rope_parameters\": {\"rope_type\": \"default\", \"llama_4_scaling_beta\": 0.1}",
         "original_max_position_embeddings"},
        {NESTED, ", \"rope_parameters\": {\"rope_type\": \"linear\", \"factor\": 2.0}", "linear"},
        {NESTED, ", \"rope_parameters\": {\"rope_type\": \"yarn\", \"factor\": -1.0, "
                 "\"original_max_position_embeddings\": 32}", "factor"},
        {NESTED, ", \"rope_parameters\": {\"rope_type\": \"yarn\", \"factor\": 16.0, "
                 "\"original_max_position_embeddings\": \"32\"}", "original_max_position_embeddings"},
        {NESTED, ", \"rope_parameters\": {\"rope_type\": \"yarn\", \"factor\": 16.0, \"beta_fast\": []}", "beta_fast"},
        {NESTED, ", \"rope_parameters\": {" YARN_PARAMS ", \"llama_4_scaling_beta\": 1e999}", "llama_4_scaling_beta"},
        {NESTED, ", \"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 16.0, "
                 "\"original_max_position_embeddings\": 32, \"llama_4_scaling_beta\": true}", "llama_4_scaling_beta"},
        {TEXT_ONLY, ", \"sliding_window\": \"none\"", "sliding_window"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        pith_model_file *f;
        pith_err err = {{0}};
        int rc = open_hf("hf_m3_bad", bad[i].lay, bad[i].text, "", &f, &err);
        CHECKF(rc != 0 && strstr(err.msg, bad[i].want), "case %zu: rc %d, message '%s' (want '%s')", i, rc, err.msg,
               bad[i].want);
        if (!rc) pith_model_file_close(f);
    }
    /* text_config that is not an object */
    pith_model_file *f;
    pith_err err = {{0}};
    const char *dir = model_dir("hf_m3_tc");
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    CHECK(write_text(path, "{\"architectures\": [\"Mistral3ForConditionalGeneration\"], \"text_config\": 3}") == 0);
    buf st = {0};
    st_build(&st, NULL, 0, 1, 0, NULL);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    CHECK(write_file(path, st.p, st.n) == 0);
    buf_free(&st);
    int rc = pith_model_file_open(dir, &f, &err);
    CHECKF(rc != 0 && strstr(err.msg, "text_config"), "rc %d: %s", rc, err.msg);
    if (!rc) pith_model_file_close(f);
}

/* A model builds from both formats and runs a step past the temperature's length. */
static void test_build(void) {
    for (int fmt = 0; fmt < 2; fmt++) {
        pith_model_file *f;
        pith_err err = {{0}};
        gguf_case c = {.yarn = true, .orig = 32, .log_mul = "1", .temp = "0.1"};
        int rc = fmt ? open_hf("hf_m3_build", NESTED, ", \"rope_parameters\": {" YARN_PARAMS ", \"llama_4_scaling_beta\": 0.1}",
                               "", &f, &err)
                     : open_gguf("m3_build.gguf", &c, &f, &err);
        CHECKF(rc == 0, "%s", err.msg);
        if (rc) continue;
        const char *path = pith_model_file_path(f);
        char p[4200];
        snprintf(p, sizeof p, "%s", path);
        pith_model_file_close(f);
        pith_model *m;
        pith_model_options mo = {.n_threads = 1};
        rc = pith_model_load(p, &mo, &m, &err);
        CHECKF(rc == 0, "%s: %s", p, err.msg);
        if (!rc) {
            CHECK(!strcmp(m->hp.arch, "mistral3"));
            pith_model_free(m);
        }
    }
}

int main(void) {
    test_gguf();
    test_hf();
    test_build();
    return check_summary("test_formats_mistral3");
}
