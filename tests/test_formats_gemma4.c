/* Gemma 4 as a model file, from GGUF and from a Hugging Face directory: the hyper-parameters the
 * descriptor reads (the window layers' and the global layers' shapes, the window pattern, RoPE bases,
 * soft-cap), a model built from each, and every new key and tensor refused with a message naming it when
 * malformed. Small synthetic models written by the test (F32: three layers, the last global). */
#include <math.h>

#include "check.h"
#include "model/gemma4.h"
#include "pith/model.h"
#include "pith/modelfile.h"
#include "pith/tokenizer.h"
#include "test_formats_util.h"

/* dim 64, 4 heads; window layers 0 and 1: heads of 32, 2 KV heads; global layer 2: heads of 64, 1 KV
 * head, no attn_v (K = V). */
enum { DIM = 64, LAYERS = 3, HEADS = 4, KV = 2, HD = 32, KV_G = 1, HD_G = 64, FFN = 96, VOCAB = 40 };

/* A variant of the base file: a tensor left out or reshaped, a key left out, keys added. */
typedef struct variant {
    const char *drop_tensor;
    const char *reshape_tensor;        /* its ne0 becomes reshape_ne0 */
    uint64_t reshape_ne0;
    const char *skip_key;              /* full key */
    uint64_t (*extra)(buf *kv);        /* more keys (returns how many) */
    const char *add_tensor;            /* a vector of add_ne0 F32 elements */
    uint64_t add_ne0;
    bool ple;                          /* per-layer embeddings of PLE per layer (tensors and key) */
    bool moe;                          /* experts in every layer (tensors and keys) */
} variant;

enum { PLE = 16 };
/* the experts: EXPERTS of EFF, EXPERTS_USED per token */
enum { EXPERTS = 4, EXPERTS_USED = 2, EFF = 32 };

static void add_gt3(gtensor *ts, int *n, const char *name, uint64_t ne0, uint64_t ne1, uint64_t ne2) {
    add_gt(ts, n, name, 0, ne0, ne1);
    ts[*n - 1].n_dims = 3;
    ts[*n - 1].ne[2] = ne2;
}

static bool global_layer(int l) { return l == LAYERS - 1; }

static int tensor_list(const variant *v, gtensor *ts) {
    int n = 0;
    add_gt(ts, &n, "rope_freqs.weight", 0, HD_G / 2, 0); /* first: its payload is patched (write_gguf) */
    add_gt(ts, &n, "token_embd.weight", 0, DIM, VOCAB);
    add_gt(ts, &n, "output_norm.weight", 0, DIM, 0);
    for (int l = 0; l < LAYERS; l++) {
        char name[64];
        int hd = global_layer(l) ? HD_G : HD, kv = (global_layer(l) ? KV_G : KV) * hd, q = HEADS * hd;
#define LT(suffix, a, b) (snprintf(name, sizeof name, "blk.%d." suffix, l), add_gt(ts, &n, name, 0, a, b))
        LT("attn_norm.weight", DIM, 0);
        LT("attn_q.weight", DIM, q);
        LT("attn_k.weight", DIM, kv);
        if (!global_layer(l)) LT("attn_v.weight", DIM, kv);
        LT("attn_output.weight", q, DIM);
        LT("attn_q_norm.weight", hd, 0);
        LT("attn_k_norm.weight", hd, 0);
        LT("post_attention_norm.weight", DIM, 0);
        LT("ffn_norm.weight", DIM, 0);
        LT("ffn_gate.weight", DIM, FFN);
        LT("ffn_up.weight", DIM, FFN);
        LT("ffn_down.weight", FFN, DIM);
        LT("post_ffw_norm.weight", DIM, 0);
        if (v && v->moe) { /* llama.cpp's names: the router, its scale, the per-expert scales, the norms */
            LT("ffn_gate_inp.weight", DIM, EXPERTS);
            LT("ffn_gate_inp.scale", DIM, 0);
            LT("ffn_down_exps.scale", EXPERTS, 0);
            LT("pre_ffw_norm_2.weight", DIM, 0);
            LT("post_ffw_norm_1.weight", DIM, 0);
            LT("post_ffw_norm_2.weight", DIM, 0);
            snprintf(name, sizeof name, "blk.%d.ffn_gate_up_exps.weight", l), add_gt3(ts, &n, name, DIM, 2 * EFF, EXPERTS);
            snprintf(name, sizeof name, "blk.%d.ffn_down_exps.weight", l), add_gt3(ts, &n, name, EFF, DIM, EXPERTS);
        }
#undef LT
    }
    if (v && v->add_tensor) add_gt(ts, &n, v->add_tensor, 0, v->add_ne0, 0);
    if (v && v->ple) {
        add_gt(ts, &n, "per_layer_token_embd.weight", 0, LAYERS * PLE, VOCAB);
        add_gt(ts, &n, "per_layer_model_proj.weight", 0, DIM, LAYERS * PLE);
        add_gt(ts, &n, "per_layer_proj_norm.weight", 0, PLE, 0);
        for (int l = 0; l < LAYERS; l++) {
            char name[64];
            snprintf(name, sizeof name, "blk.%d.inp_gate.weight", l), add_gt(ts, &n, name, 0, DIM, PLE);
            snprintf(name, sizeof name, "blk.%d.proj.weight", l), add_gt(ts, &n, name, 0, PLE, DIM);
            snprintf(name, sizeof name, "blk.%d.post_norm.weight", l), add_gt(ts, &n, name, 0, DIM, 0);
        }
    }
    int kept = 0;
    for (int i = 0; i < n; i++) {
        if (v && v->drop_tensor && !strcmp(ts[i].name, v->drop_tensor)) continue;
        if (v && v->reshape_tensor && !strcmp(ts[i].name, v->reshape_tensor)) ts[i].ne[0] = v->reshape_ne0;
        ts[kept++] = ts[i];
    }
    return kept;
}

static void kv_array_u32(buf *kv, const char *key, const uint32_t *v, int n) {
    put_gstr(kv, key);
    put_u32(kv, 9);
    put_u32(kv, 4); /* UINT32 */
    put_u64(kv, (uint64_t)n);
    for (int i = 0; i < n; i++) put_u32(kv, v[i]);
}

static uint64_t base_kvs(const variant *v, buf *kv) {
    uint64_t n = 0;
#define KEEP(k) (!v || !v->skip_key || strcmp(v->skip_key, k))
    if (KEEP("general.architecture")) gguf_kv_str(kv, "general.architecture", "gemma4"), n++;
    if (KEEP("gemma4.context_length")) gguf_kv_u32(kv, "gemma4.context_length", 256), n++;
    if (KEEP("gemma4.embedding_length")) gguf_kv_u32(kv, "gemma4.embedding_length", DIM), n++;
    if (KEEP("gemma4.block_count")) gguf_kv_u32(kv, "gemma4.block_count", LAYERS), n++;
    if (KEEP("gemma4.feed_forward_length")) gguf_kv_u32(kv, "gemma4.feed_forward_length", FFN), n++;
    if (KEEP("gemma4.attention.head_count")) gguf_kv_u32(kv, "gemma4.attention.head_count", HEADS), n++;
    if (KEEP("gemma4.attention.head_count_kv")) {
        static const uint32_t heads[LAYERS] = {KV, KV, KV_G};
        kv_array_u32(kv, "gemma4.attention.head_count_kv", heads, LAYERS), n++;
    }
    if (KEEP("gemma4.attention.key_length")) gguf_kv_u32(kv, "gemma4.attention.key_length", HD_G), n++;
    if (KEEP("gemma4.attention.value_length")) gguf_kv_u32(kv, "gemma4.attention.value_length", HD_G), n++;
    if (KEEP("gemma4.attention.key_length_swa")) gguf_kv_u32(kv, "gemma4.attention.key_length_swa", HD), n++;
    if (KEEP("gemma4.attention.value_length_swa")) gguf_kv_u32(kv, "gemma4.attention.value_length_swa", HD), n++;
    if (KEEP("gemma4.rope.dimension_count")) gguf_kv_u32(kv, "gemma4.rope.dimension_count", HD_G), n++;
    if (KEEP("gemma4.attention.layer_norm_rms_epsilon"))
        gguf_kv_f32(kv, "gemma4.attention.layer_norm_rms_epsilon", 1e-6f), n++;
    if (KEEP("gemma4.rope.freq_base")) gguf_kv_f32(kv, "gemma4.rope.freq_base", 1e6f), n++;
    if (KEEP("gemma4.rope.freq_base_swa")) gguf_kv_f32(kv, "gemma4.rope.freq_base_swa", 1e4f), n++;
    if (KEEP("gemma4.attention.sliding_window")) gguf_kv_u32(kv, "gemma4.attention.sliding_window", 16), n++;
    if (KEEP("gemma4.attention.sliding_window_pattern")) {
        put_gstr(kv, "gemma4.attention.sliding_window_pattern");
        put_u32(kv, 9);
        put_u32(kv, 7); /* BOOL */
        put_u64(kv, LAYERS);
        static const uint8_t pattern[LAYERS] = {1, 1, 0};
        buf_put(kv, pattern, sizeof pattern);
        n++;
    }
    if (KEEP("gemma4.final_logit_softcapping")) gguf_kv_f32(kv, "gemma4.final_logit_softcapping", 30.0f), n++;
    if (KEEP("gemma4.attention.shared_kv_layers")) gguf_kv_u32(kv, "gemma4.attention.shared_kv_layers", 0), n++;
    if (KEEP("gemma4.embedding_length_per_layer_input"))
        gguf_kv_u32(kv, "gemma4.embedding_length_per_layer_input", v && v->ple ? PLE : 0), n++;
    if (v && v->moe) {
        if (KEEP("gemma4.expert_count")) gguf_kv_u32(kv, "gemma4.expert_count", EXPERTS), n++;
        if (KEEP("gemma4.expert_used_count")) gguf_kv_u32(kv, "gemma4.expert_used_count", EXPERTS_USED), n++;
        if (KEEP("gemma4.expert_feed_forward_length")) gguf_kv_u32(kv, "gemma4.expert_feed_forward_length", EFF), n++;
    }
    gguf_kv_u32(kv, "tokenizer.ggml.bos_token_id", 2), n++;
    gguf_kv_u32(kv, "tokenizer.ggml.eos_token_id", 1), n++;
#undef KEEP
    if (v && v->extra) n += v->extra(kv);
    return n;
}

/* Writes the variant; rope_freqs.weight holds 1 for the first quarter of the pairs and 1e30 for the rest
 * (convert_hf_to_gguf.py's values), the rest random bytes. */
static const char *write_gguf(const char *name, const variant *v) {
    gtensor ts[96];
    int nt = tensor_list(v, ts);
    buf kv = {0}, file = {0};
    uint64_t n_kv = base_kvs(v, &kv), data = 0;
    gguf_build(&file, 3, &kv, n_kv, ts, nt, 32, 11, &data);
    if (!strcmp(ts[0].name, "rope_freqs.weight"))
        for (uint64_t i = 0; i < ts[0].ne[0]; i++) {
            float f = i < ts[0].ne[0] / 4 ? 1.0f : 1e30f;
            memcpy(file.p + data + 4 * i, &f, 4);
        }
    const char *path = tmp_path(name);
    if (write_file(path, file.p, file.n)) abort();
    buf_free(&kv);
    buf_free(&file);
    return path;
}

static void expect_refused(const char *what, const char *path, const char *needle) {
    pith_model *m = NULL;
    pith_err err = {{0}};
    int rc = pith_model_load(path, NULL, &m, &err);
    CHECKF(rc == -1 && m == NULL, "%s: loaded", what);
    CHECKF(strstr(err.msg, needle) != NULL, "%s: '%s' lacks '%s'", what, err.msg, needle);
    if (!rc) pith_model_free(m);
}

static void expect_loads(const char *what, const char *path) {
    pith_model *m = NULL;
    pith_err err = {{0}};
    int rc = pith_model_load(path, NULL, &m, &err);
    CHECKF(rc == 0, "%s: %s", what, err.msg);
    if (!rc) pith_model_free(m);
}

/* The hyper-parameters both formats must agree on. */
static void check_hparams(const char *what, const pith_hparams *hp) {
    const pith_gemma4_params *P = pith_gemma4_params_of(hp);
    CHECKF(!strcmp(hp->arch, "gemma4") && hp->rope_style == PITH_ROPE_HALF, "%s: arch %s", what, hp->arch);
    CHECKF(hp->dim == DIM && hp->n_layers == LAYERS && hp->n_heads == HEADS && hp->ffn_dim == FFN, "%s: widths", what);
    CHECKF(hp->head_dim == HD && hp->n_kv_heads == KV, "%s: window shape %d x %d", what, hp->n_kv_heads, hp->head_dim);
    CHECKF(P->head_dim_full == HD_G && P->n_kv_heads_full == KV_G, "%s: global shape %d x %d", what,
           P->n_kv_heads_full, P->head_dim_full);
    CHECKF(hp->sliding_window == 16 && pith_layer_bit(hp->layer_swa, 0) && pith_layer_bit(hp->layer_swa, 1) &&
               !pith_layer_bit(hp->layer_swa, 2),
           "%s: window %d", what, hp->sliding_window);
    CHECKF(hp->rope_theta == 1e6f && hp->rope_theta_swa == 1e4f, "%s: bases %g %g", what, hp->rope_theta,
           hp->rope_theta_swa);
    CHECKF(hp->final_logit_softcap == 30.0f && hp->query_scale == 1.0f && hp->has_qk_norm, "%s: softcap %g scale %g",
           what, hp->final_logit_softcap, hp->query_scale);
    CHECKF(P->ple_dim == 0 && P->kv_shared_layers == 0, "%s: PLE %d, shared %d", what, P->ple_dim, P->kv_shared_layers);
}

static uint64_t kv_ple(buf *kv) { return gguf_kv_u32(kv, "gemma4.embedding_length_per_layer_input", 256), 1; }
static uint64_t kv_shared(buf *kv) { return gguf_kv_u32(kv, "gemma4.attention.shared_kv_layers", 2), 1; }
static uint64_t kv_experts(buf *kv) { return gguf_kv_u32(kv, "gemma4.expert_count", 8), 1; }
static uint64_t kv_value_swa(buf *kv) { return gguf_kv_u32(kv, "gemma4.attention.value_length_swa", 16), 1; }
static uint64_t kv_rot_swa(buf *kv) { return gguf_kv_u32(kv, "gemma4.rope.dimension_count_swa", 16), 1; }
static uint64_t kv_period0(buf *kv) { return gguf_kv_u32(kv, "gemma4.attention.sliding_window_pattern", 0), 1; }
static uint64_t kv_heads_short(buf *kv) {
    static const uint32_t heads[2] = {KV, KV_G};
    return kv_array_u32(kv, "gemma4.attention.head_count_kv", heads, 2), 1;
}
static uint64_t kv_heads_zero(buf *kv) {
    static const uint32_t heads[LAYERS] = {KV, 0, KV_G};
    return kv_array_u32(kv, "gemma4.attention.head_count_kv", heads, LAYERS), 1;
}
static uint64_t kv_heads_mixed(buf *kv) {
    static const uint32_t heads[LAYERS] = {KV, 1, KV_G};
    return kv_array_u32(kv, "gemma4.attention.head_count_kv", heads, LAYERS), 1;
}
static uint64_t kv_heads_odd(buf *kv) {
    static const uint32_t heads[LAYERS] = {KV, KV, 3};
    return kv_array_u32(kv, "gemma4.attention.head_count_kv", heads, LAYERS), 1;
}
static uint64_t kv_ff_wide(buf *kv) {
    static const uint32_t ff[LAYERS] = {FFN, FFN, 2 * FFN};
    return kv_array_u32(kv, "gemma4.feed_forward_length", ff, LAYERS), 1;
}
static uint64_t kv_heads_scalar(buf *kv) { return gguf_kv_u32(kv, "gemma4.attention.head_count_kv", KV), 1; }
static uint64_t kv_shared_all(buf *kv) { return gguf_kv_u32(kv, "gemma4.attention.shared_kv_layers", 3), 1; }
static uint64_t kv_ff_short(buf *kv) {
    static const uint32_t ff[2] = {FFN, FFN};
    return kv_array_u32(kv, "gemma4.feed_forward_length", ff, 2), 1;
}
static uint64_t kv_used_9(buf *kv) { return gguf_kv_u32(kv, "gemma4.expert_used_count", 9), 1; }
static uint64_t kv_experts_2000(buf *kv) { return gguf_kv_u32(kv, "gemma4.expert_count", 2000), 1; }
static uint64_t kv_ple_str(buf *kv) { return gguf_kv_str(kv, "gemma4.embedding_length_per_layer_input", "x"), 1; }

static void test_gguf(void) {
    pith_model_file *f = NULL;
    pith_err err = {{0}};
    const char *path = write_gguf("g4.gguf", NULL);
    int rc = pith_model_file_open(path, &f, &err);
    CHECKF(rc == 0, "%s", err.msg);
    if (!rc) {
        check_hparams("gguf", pith_model_file_hparams(f));
        pith_model_file_close(f);
    }
    expect_loads("gguf", path);
    /* the global layer's tensors, which the schema leaves to the build */
    variant v[] = {
        {.drop_tensor = "blk.2.attn_q.weight"},
        {.reshape_tensor = "blk.2.attn_k.weight", .reshape_ne0 = 32},
        {.drop_tensor = "blk.2.attn_q_norm.weight"},
        {.reshape_tensor = "blk.2.attn_k_norm.weight", .reshape_ne0 = 32},
        {.drop_tensor = "blk.2.attn_output.weight"},
        {.drop_tensor = "rope_freqs.weight"},
        {.reshape_tensor = "rope_freqs.weight", .reshape_ne0 = 16},
        {.add_tensor = "blk.1.layer_output_scale.weight", .add_ne0 = 2},
        {.drop_tensor = "blk.0.attn_q_norm.weight"},
        {.reshape_tensor = "blk.1.attn_v.weight", .reshape_ne0 = 32},
        {.skip_key = "gemma4.attention.key_length_swa"},
    };
    const char *needle[] = {
        "blk.2.attn_q.weight", "blk.2.attn_k.weight", "blk.2.attn_q_norm.weight", "blk.2.attn_k_norm.weight",
        "blk.2.attn_output.weight", "rope_freqs.weight", "rope_freqs.weight", "blk.1.layer_output_scale.weight",
        "blk.0.attn_q_norm.weight", "blk.1.attn_v.weight", "key_length_swa",
    };
    for (size_t i = 0; i < sizeof v / sizeof *v; i++) {
        char name[32];
        snprintf(name, sizeof name, "g4-t%zu.gguf", i);
        expect_refused(needle[i], write_gguf(name, &v[i]), needle[i]);
    }
    /* the new keys */
    struct {
        uint64_t (*extra)(buf *kv);
        const char *skip, *needle;
    } k[] = {
        {kv_ple, "gemma4.embedding_length_per_layer_input", "per_layer_token_embd.weight"},
        {kv_ple_str, "gemma4.embedding_length_per_layer_input", "embedding_length_per_layer_input"},
        {kv_shared, "gemma4.attention.shared_kv_layers", "earlier global layer, and there is none"},
        {kv_shared_all, "gemma4.attention.shared_kv_layers", "attention.shared_kv_layers is 3"},
        {kv_experts, NULL, "expert_used_count"}, /* expert_count alone: llama.cpp reads both the others */
        {kv_value_swa, "gemma4.attention.value_length_swa", "value_length_swa"},
        {kv_rot_swa, NULL, "rope.dimension_count_swa"},
        {kv_period0, "gemma4.attention.sliding_window_pattern", "sliding_window_pattern"},
        {kv_heads_short, "gemma4.attention.head_count_kv", "head_count_kv has 2 entries"},
        {kv_heads_zero, "gemma4.attention.head_count_kv", "head_count_kv entry 1"},
        {kv_heads_mixed, "gemma4.attention.head_count_kv", "different KV head counts"},
        {kv_heads_odd, "gemma4.attention.head_count_kv", "KV heads do not divide"},
        {kv_ff_wide, "gemma4.feed_forward_length", "double-wide"},
        {kv_ff_short, "gemma4.feed_forward_length", "feed_forward_length has 2 entries"},
    };
    for (size_t i = 0; i < sizeof k / sizeof *k; i++) {
        char name[32];
        snprintf(name, sizeof name, "g4-k%zu.gguf", i);
        variant vk = {.skip_key = k[i].skip, .extra = k[i].extra};
        expect_refused(k[i].needle, write_gguf(name, &vk), k[i].needle);
    }
    /* per-layer embeddings: they load, and each of their tensors is checked */
    variant ple = {.ple = true};
    path = write_gguf("g4-ple.gguf", &ple);
    rc = pith_model_file_open(path, &f, &err);
    CHECKF(rc == 0, "%s", err.msg);
    if (!rc) {
        CHECK(pith_gemma4_params_of(pith_model_file_hparams(f))->ple_dim == PLE);
        pith_model_file_close(f);
    }
    expect_loads("per-layer embeddings", path);
    variant pv[] = {
        {.ple = true, .drop_tensor = "per_layer_token_embd.weight"},
        {.ple = true, .reshape_tensor = "per_layer_token_embd.weight", .reshape_ne0 = PLE},
        {.ple = true, .drop_tensor = "per_layer_model_proj.weight"},
        {.ple = true, .reshape_tensor = "per_layer_proj_norm.weight", .reshape_ne0 = 8},
        {.ple = true, .drop_tensor = "blk.1.inp_gate.weight"},
        {.ple = true, .reshape_tensor = "blk.2.proj.weight", .reshape_ne0 = 8},
        {.ple = true, .drop_tensor = "blk.0.post_norm.weight"},
    };
    for (size_t i = 0; i < sizeof pv / sizeof *pv; i++) {
        char name[32];
        snprintf(name, sizeof name, "g4-p%zu.gguf", i);
        const char *what = pv[i].drop_tensor ? pv[i].drop_tensor : pv[i].reshape_tensor;
        expect_refused(what, write_gguf(name, &pv[i]), what);
    }
    /* experts: they load, and each of their tensors and keys is checked */
    variant moe = {.moe = true};
    path = write_gguf("g4-moe.gguf", &moe);
    rc = pith_model_file_open(path, &f, &err);
    CHECKF(rc == 0, "%s", err.msg);
    if (!rc) {
        const pith_hparams *hp = pith_model_file_hparams(f);
        CHECKF(hp->n_experts == EXPERTS && hp->n_experts_used == EXPERTS_USED && hp->expert_ffn_dim == EFF &&
                   hp->expert_norm_topk && hp->expert_gating == PITH_GATING_SOFTMAX && hp->ffn_dim == FFN,
               "gguf experts: %d, %d used, width %d", hp->n_experts, hp->n_experts_used, hp->expert_ffn_dim);
        pith_model_file_close(f);
    }
    expect_loads("experts", path);
    variant mv[] = {
        {.moe = true, .drop_tensor = "blk.1.ffn_gate_inp.weight"},
        {.moe = true, .reshape_tensor = "blk.2.ffn_gate_inp.weight", .reshape_ne0 = 32},
        {.moe = true, .drop_tensor = "blk.0.ffn_gate_inp.scale"},
        {.moe = true, .reshape_tensor = "blk.1.ffn_gate_inp.scale", .reshape_ne0 = 32},
        {.moe = true, .reshape_tensor = "blk.0.ffn_down_exps.scale", .reshape_ne0 = 3},
        {.moe = true, .drop_tensor = "blk.2.pre_ffw_norm_2.weight"},
        {.moe = true, .drop_tensor = "blk.1.post_ffw_norm_1.weight"},
        {.moe = true, .reshape_tensor = "blk.0.post_ffw_norm_2.weight", .reshape_ne0 = 32},
        {.moe = true, .drop_tensor = "blk.2.post_ffw_norm_2.weight"},
        {.moe = true, .reshape_tensor = "blk.1.ffn_gate_up_exps.weight", .reshape_ne0 = 32},
        {.moe = true, .drop_tensor = "blk.2.ffn_down_exps.weight"},
        {.moe = true, .reshape_tensor = "blk.0.ffn_down_exps.weight", .reshape_ne0 = 16},
        {.moe = true, .skip_key = "gemma4.expert_used_count"},
        {.moe = true, .skip_key = "gemma4.expert_feed_forward_length"},
        {.moe = true, .skip_key = "gemma4.expert_used_count", .extra = kv_used_9},
        {.moe = true, .skip_key = "gemma4.expert_count", .extra = kv_experts_2000},
    };
    const char *mneedle[] = {
        "blk.1.ffn_gate_inp.weight", "blk.2.ffn_gate_inp.weight", "blk.0.ffn_gate_inp.scale",
        "blk.1.ffn_gate_inp.scale", "blk.0.ffn_down_exps.scale", "blk.2.pre_ffw_norm_2.weight",
        "blk.1.post_ffw_norm_1.weight", "blk.0.post_ffw_norm_2.weight", "blk.2.post_ffw_norm_2.weight",
        "blk.1.ffn_gate_up_exps.weight", "blk.2.ffn_down_exps.weight", "blk.0.ffn_down_exps.weight",
        "expert_used_count", "expert_feed_forward_length", "expert_used_count is 9", "expert_count is 2000",
    };
    for (size_t i = 0; i < sizeof mv / sizeof *mv; i++) {
        char name[32];
        snprintf(name, sizeof name, "g4-m%zu.gguf", i);
        expect_refused(mneedle[i], write_gguf(name, &mv[i]), mneedle[i]);
    }
    /* a scalar head_count_kv: both kinds of layer take it, so the global layer's K (1 head) is refused */
    variant one = {.skip_key = "gemma4.attention.head_count_kv", .extra = kv_heads_scalar};
    path = write_gguf("g4-kv1.gguf", &one);
    rc = pith_model_file_open(path, &f, &err);
    CHECKF(rc == 0, "%s", err.msg);
    if (!rc) {
        const pith_hparams *hp = pith_model_file_hparams(f);
        CHECK(hp->n_kv_heads == KV && pith_gemma4_params_of(hp)->n_kv_heads_full == KV);
        pith_model_file_close(f);
    }
    expect_refused("scalar head_count_kv", path, "blk.2.attn_k.weight");
}

/* ---- Hugging Face ---- */

static void add_st3(stensor *ts, int *n, const char *name, uint64_t a, uint64_t b, uint64_t c) {
    add_st(ts, n, name, "F32", a, b);
    ts[*n - 1].n_dims = 3;
    ts[*n - 1].shape[2] = c;
}

static int st_list(const char *prefix, bool k_eq_v, bool moe, const char *drop, stensor *ts) {
    int n = 0;
    char name[96]; /* stensor's name width */
    snprintf(name, sizeof name, "%.40sembed_tokens.weight", prefix);
    add_st(ts, &n, name, "F32", VOCAB, DIM);
    snprintf(name, sizeof name, "%.40snorm.weight", prefix);
    add_st(ts, &n, name, "F32", DIM, 0);
    for (int l = 0; l < LAYERS; l++) {
        int hd = global_layer(l) ? HD_G : HD, kv = (global_layer(l) && k_eq_v ? KV_G : KV) * hd, q = HEADS * hd;
#define HT(suffix, a, b)                                                                                           \
    (snprintf(name, sizeof name, "%.21slayers.%d." suffix, prefix, l), add_st(ts, &n, name, "F32", a, b))
        HT("input_layernorm.weight", DIM, 0);
        HT("self_attn.q_proj.weight", q, DIM);
        HT("self_attn.k_proj.weight", kv, DIM);
        if (!(global_layer(l) && k_eq_v)) HT("self_attn.v_proj.weight", kv, DIM);
        HT("self_attn.o_proj.weight", DIM, q);
        HT("self_attn.q_norm.weight", hd, 0);
        HT("self_attn.k_norm.weight", hd, 0);
        HT("post_attention_layernorm.weight", DIM, 0);
        HT("pre_feedforward_layernorm.weight", DIM, 0);
        HT("mlp.gate_proj.weight", FFN, DIM);
        HT("mlp.up_proj.weight", FFN, DIM);
        HT("mlp.down_proj.weight", DIM, FFN);
        HT("post_feedforward_layernorm.weight", DIM, 0);
        if (moe) { /* Gemma4TextRouter, Gemma4TextExperts and the norms around them */
            HT("router.proj.weight", EXPERTS, DIM);
            HT("router.scale", DIM, 0);
            HT("router.per_expert_scale", EXPERTS, 0);
            HT("pre_feedforward_layernorm_2.weight", DIM, 0);
            HT("post_feedforward_layernorm_1.weight", DIM, 0);
            HT("post_feedforward_layernorm_2.weight", DIM, 0);
            snprintf(name, sizeof name, "%.21slayers.%d.experts.gate_up_proj", prefix, l);
            add_st3(ts, &n, name, EXPERTS, 2 * EFF, DIM);
            snprintf(name, sizeof name, "%.21slayers.%d.experts.down_proj", prefix, l);
            add_st3(ts, &n, name, EXPERTS, DIM, EFF);
        }
#undef HT
    }
    int kept = 0;
    for (int i = 0; i < n; i++)
        if (!drop || strcmp(ts[i].name, drop)) ts[kept++] = ts[i];
    return kept;
}

#define TEXT_CONFIG                                                                                                 \
    "\"hidden_size\": 64, \"intermediate_size\": 96, \"num_hidden_layers\": 3, \"num_attention_heads\": 4, "        \
    "\"num_key_value_heads\": 2, \"num_global_key_value_heads\": 1, \"head_dim\": 32, \"global_head_dim\": 64, "    \
    "\"attention_k_eq_v\": true, \"rms_norm_eps\": 1e-06, \"vocab_size\": 40, \"max_position_embeddings\": 256, "   \
    "\"sliding_window\": 16, \"layer_types\": [\"sliding_attention\", \"sliding_attention\", \"full_attention\"], " \
    "\"final_logit_softcapping\": 30.0, \"hidden_size_per_layer_input\": 0, \"num_kv_shared_layers\": 0, "          \
    "\"enable_moe_block\": false, \"hidden_activation\": \"gelu_pytorch_tanh\", \"bos_token_id\": 2, "             \
    "\"eos_token_id\": 1, \"rope_parameters\": {\"sliding_attention\": {\"rope_type\": \"default\", "              \
    "\"rope_theta\": 10000.0}, \"full_attention\": {\"rope_type\": \"proportional\", "                              \
    "\"partial_rotary_factor\": 0.25, \"rope_theta\": 1000000.0}}"

/* A directory with config.json (TEXT_CONFIG after `extra` members, which win: cJSON reads a key's first
 * occurrence; as Gemma4ForCausalLM, or nested
 * under text_config as Gemma4ForConditionalGeneration) and model.safetensors. */
static const char *write_dir(const char *name, bool nested, const char *extra, const char *drop) {
    static char dir[4096];
    snprintf(dir, sizeof dir, "%s", tmp_path(name));
    make_dir(dir);
    char config[4096], path[4200];
    if (nested)
        snprintf(config, sizeof config,
                 "{\"architectures\": [\"Gemma4ForConditionalGeneration\"], \"model_type\": \"gemma4\", "
                 "\"text_config\": {\"model_type\": \"gemma4_text\"%s, " TEXT_CONFIG "}, \"vision_config\": {}}",
                 extra);
    else
        snprintf(config, sizeof config, "{\"architectures\": [\"Gemma4ForCausalLM\"]%s, " TEXT_CONFIG "}", extra);
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (write_text(path, config)) abort();
    stensor ts[96];
    int n = st_list(nested ? "model.language_model." : "model.", true, strstr(extra, "\"enable_moe_block\": true") != NULL,
                    drop, ts);
    buf file = {0};
    st_build(&file, ts, n, 5, 0, NULL);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (write_file(path, file.p, file.n)) abort();
    buf_free(&file);
    return dir;
}

#define MOE ", \"enable_moe_block\": true, \"num_experts\": 4, \"top_k_experts\": 2, \"moe_intermediate_size\": 32"

static void test_hf(void) {
    for (int nested = 0; nested < 2; nested++) {
        pith_model_file *f = NULL;
        pith_err err = {{0}};
        const char *dir = write_dir(nested ? "g4-mm" : "g4-st", nested, "", NULL);
        int rc = pith_model_file_open(dir, &f, &err);
        CHECKF(rc == 0, "%s", err.msg);
        if (!rc) {
            check_hparams(nested ? "text_config" : "config.json", pith_model_file_hparams(f));
            const pith_gemma4_params *P = pith_gemma4_params_of(pith_model_file_hparams(f));
            CHECK(P->rope_pairs_full == HD_G / 8 && P->rope_factor_full == 1.0f);
            CHECK(pith_model_file_tensor(f, "blk.2.attn_q.weight") &&
                  !pith_model_file_tensor(f, "blk.2.attn_v.weight"));
            pith_model_file_close(f);
        }
        expect_loads(nested ? "text_config" : "config.json", dir);
    }
    /* experts: the same hyper-parameters as GGUF's, and a model built */
    {
        pith_model_file *f = NULL;
        pith_err err = {{0}};
        const char *dir = write_dir("g4-st-moe", false, MOE, NULL);
        int rc = pith_model_file_open(dir, &f, &err);
        CHECKF(rc == 0, "%s", err.msg);
        if (!rc) {
            const pith_hparams *hp = pith_model_file_hparams(f);
            CHECKF(hp->n_experts == EXPERTS && hp->n_experts_used == EXPERTS_USED && hp->expert_ffn_dim == EFF &&
                       hp->expert_norm_topk && hp->ffn_dim == FFN,
                   "config.json experts: %d, %d used, width %d", hp->n_experts, hp->n_experts_used, hp->expert_ffn_dim);
            CHECK(pith_model_file_tensor(f, "blk.0.ffn_gate_up_exps.weight") &&
                  pith_model_file_tensor(f, "blk.2.ffn_down_exps.scale"));
            pith_model_file_close(f);
        }
        expect_loads("config.json experts", dir);
        expect_loads("text_config experts", write_dir("g4-mm-moe", true, MOE, NULL));
    }
    /* hidden_size_per_layer_input null: none (transformers tests it for truth) */
    expect_loads("null PLE", write_dir("g4-nullple", false, ", \"hidden_size_per_layer_input\": null", NULL));
    struct {
        const char *extra, *drop, *needle;
    } c[] = {
        {", \"hidden_size_per_layer_input\": 256", NULL, "per_layer_token_embd.weight"},
        {", \"hidden_size_per_layer_input\": 16, \"vocab_size_per_layer_input\": 30", NULL,
         "vocab_size_per_layer_input"},
        {", \"num_kv_shared_layers\": 1", NULL, "earlier global layer, and there is none"},
        {", \"num_kv_shared_layers\": -1", NULL, "num_kv_shared_layers"},
        {", \"enable_moe_block\": true", NULL, "num_experts"},
        {", \"attention_bias\": true", NULL, "attention_bias"},
        {", \"use_bidirectional_attention\": \"all\"", NULL, "use_bidirectional_attention"},
        {", \"hidden_activation\": \"silu\"", NULL, "activation 'silu'"},
        {", \"global_head_dim\": 63", NULL, "global_head_dim"},
        {", \"global_head_dim\": \"x\"", NULL, "global_head_dim"},
        {", \"attention_k_eq_v\": 3", NULL, "attention_k_eq_v"},
        {", \"rope_parameters\": {\"full_attention\": {\"rope_type\": \"yarn\", \"factor\": 4.0}}", NULL,
         "rope_parameters.full_attention type 'yarn'"},
        {", \"rope_parameters\": {\"sliding_attention\": {\"rope_type\": \"default\", \"partial_rotary_factor\": 0.5}}",
         NULL, "rope_parameters.sliding_attention"},
        {", \"rope_parameters\": {\"full_attention\": {\"rope_type\": \"proportional\", \"partial_rotary_factor\": 2}}",
         NULL, "partial_rotary_factor 2"},
        {", \"rope_parameters\": 5", NULL, "\"rope_parameters\" is not an object"},
        {"", "model.layers.2.self_attn.q_proj.weight", "blk.2.attn_q.weight"},
        {"", "model.layers.2.self_attn.k_norm.weight", "blk.2.attn_k_norm.weight"},
        {"", "model.layers.1.self_attn.k_proj.weight", "blk.1.attn_k.weight"},
        /* experts: their keys (before MOE's: the first wins), and each new tensor missing or misshapen */
        {", \"top_k_experts\": 5" MOE, NULL, "\"top_k_experts\" is 5"},
        {", \"num_experts\": 0" MOE, NULL, "\"num_experts\" 0"},
        {", \"enable_moe_block\": true, \"num_experts\": 4, \"top_k_experts\": 2", NULL, "moe_intermediate_size"},
        {MOE, "model.layers.1.router.proj.weight", "blk.1.ffn_gate_inp.weight"},
        {MOE, "model.layers.0.router.scale", "blk.0.ffn_gate_inp.scale"},
        {MOE, "model.layers.2.pre_feedforward_layernorm_2.weight", "blk.2.pre_ffw_norm_2.weight"},
        {MOE, "model.layers.1.post_feedforward_layernorm_1.weight", "blk.1.post_ffw_norm_1.weight"},
        {MOE, "model.layers.0.post_feedforward_layernorm_2.weight", "blk.0.post_ffw_norm_2.weight"},
        {MOE, "model.layers.2.experts.gate_up_proj", "blk.2.ffn_gate_exps.weight"},
        {MOE, "model.layers.1.experts.down_proj", "blk.1.ffn_down_exps.weight"},
        {", \"moe_intermediate_size\": 64" MOE, NULL, "ffn_gate_up_exps.weight"},
    };
    for (size_t i = 0; i < sizeof c / sizeof *c; i++) {
        char name[32];
        snprintf(name, sizeof name, "g4-c%zu", i);
        expect_refused(c[i].needle, write_dir(name, false, c[i].extra, c[i].drop), c[i].needle);
    }
}

/* ---- the GGUF "gemma4" tokenizer ---- */

/* A vocabulary with llama.cpp's Gemma 4 layout (<pad> <eos> <bos> <unk>, the 256 byte tokens, then
 * pieces with U+2581 for spaces) and merges; "\n\n" is a token no merge makes. */
#define SP "\xe2\x96\x81"
static const char *const PIECES[] = {"<|turn>", "<turn|>", SP, "h", "e", "l", "o", "he", "ll", "hell", "hello",
                                     SP "hello", "\n", "\n\n",
                                     "w", "r", "d", SP "w", "or", SP "wor", "ld", SP "world"};
static const char *const MERGES[] = {"h e", "l l", "he ll", "hell o", SP " hello", "o r", SP " w", SP "w or", "l d",
                                     SP "wor ld"};
enum { N_PIECES = sizeof PIECES / sizeof *PIECES, N_TOK = 4 + 256 + N_PIECES, FIRST_PIECE = 260 };

static int piece_id(const char *text) {
    for (int i = 0; i < N_PIECES; i++)
        if (!strcmp(PIECES[i], text)) return FIRST_PIECE + i;
    return -1;
}

static const char *write_vocab(const char *name, const char *model, bool merges) {
    static char texts[N_TOK][16];
    const char *tokens[N_TOK];
    static const char *const special[4] = {"<pad>", "<eos>", "<bos>", "<unk>"};
    buf kv = {0};
    uint64_t n = 0;
    for (int i = 0; i < N_TOK; i++) {
        if (i < 4) snprintf(texts[i], sizeof texts[i], "%s", special[i]);
        else if (i < FIRST_PIECE) snprintf(texts[i], sizeof texts[i], "<0x%02X>", i - 4);
        else snprintf(texts[i], sizeof texts[i], "%s", PIECES[i - FIRST_PIECE]);
        tokens[i] = texts[i];
    }
    gguf_kv_str(&kv, "general.architecture", "gemma4"), n++;
    gguf_kv_str(&kv, "tokenizer.ggml.model", model), n++;
    gguf_kv_strs(&kv, "tokenizer.ggml.tokens", tokens, N_TOK), n++;
    put_gstr(&kv, "tokenizer.ggml.token_type");
    put_u32(&kv, 9);
    put_u32(&kv, 5); /* INT32 */
    put_u64(&kv, N_TOK);
    for (int i = 0; i < N_TOK; i++) /* control, byte, normal (the two turn markers: control) */
        put_u32(&kv, i < 4 || i == FIRST_PIECE || i == FIRST_PIECE + 1 ? 3 : i < FIRST_PIECE ? 6 : 1);
    n++;
    if (merges) gguf_kv_strs(&kv, "tokenizer.ggml.merges", MERGES, sizeof MERGES / sizeof *MERGES), n++;
    gguf_kv_u32(&kv, "tokenizer.ggml.bos_token_id", 2), n++;
    gguf_kv_u32(&kv, "tokenizer.ggml.eos_token_id", 1), n++;
    gguf_kv_u32(&kv, "tokenizer.ggml.unknown_token_id", 3), n++;
    buf file = {0};
    gguf_build(&file, 3, &kv, n, NULL, 0, 32, 1, NULL);
    const char *path = tmp_path(name);
    if (write_file(path, file.p, file.n)) abort();
    buf_free(&kv);
    buf_free(&file);
    return path;
}

static void expect_ids(const pith_tokenizer *t, const char *text, const int32_t *want, int n_want) {
    int32_t *ids = NULL;
    int n = 0;
    pith_err err = {{0}};
    int rc = pith_tokenizer_encode(t, text, strlen(text), PITH_TOK_ADD_BOS, &ids, &n, &err);
    CHECKF(rc == 0, "encode '%s': %s", text, err.msg);
    bool same = rc == 0 && n == n_want;
    for (int i = 0; same && i < n; i++) same = ids[i] == want[i];
    CHECKF(same, "encode '%s': %d ids, first %d", text, n, n > 1 ? ids[1] : -1);
    /* and back: the text itself (U+2581 as spaces, <0xNN> as bytes) */
    char out[256];
    size_t k = 0;
    pith_detok d;
    pith_detok_init(&d, t, false);
    for (int i = 0; rc == 0 && i < n; i++) k += pith_detok_push(&d, ids[i], out + k, sizeof out - k);
    k += pith_detok_flush(&d, out + k, sizeof out - k);
    CHECKF(k == strlen(text) && !memcmp(out, text, k), "decode '%s': '%.*s'", text, (int)k, out);
    free(ids);
}

static void test_tokenizer(void) {
    pith_tokenizer *t = NULL;
    pith_err err = {{0}};
    int rc = pith_tokenizer_load(write_vocab("g4-tok.gguf", "gemma4", true), 0, &t, &err);
    CHECKF(rc == 0, "%s", err.msg);
    if (rc) return;
    CHECK(pith_tokenizer_bos(t) == 2 && pith_tokenizer_eos(t) == 1 && pith_tokenizer_n_vocab(t) == N_TOK);
    /* a chat turn ends generation at <turn|>, as llama.cpp's Gemma 4 vocabulary says */
    CHECK(pith_tokenizer_is_eog(t, piece_id("<turn|>")) && !pith_tokenizer_is_eog(t, piece_id("<|turn>")));
    CHECK(pith_tokenizer_is_eog(t, 1));
    int32_t *ids = NULL;
    int n = 0;
    rc = pith_tokenizer_encode(t, "<|turn>hello<turn|>", 19, PITH_TOK_PARSE_SPECIAL, &ids, &n, &err);
    CHECKF(rc == 0 && n == 3 && ids[0] == piece_id("<|turn>") && ids[1] == piece_id("hello") &&
               ids[2] == piece_id("<turn|>"),
           "special markers: %d ids", n);
    free(ids);
    const int32_t hello_world[] = {2, piece_id("hello"), piece_id(SP "world")};
    expect_ids(t, "hello world", hello_world, 3);
    const int32_t space_hello[] = {2, piece_id(SP "hello")}; /* no space prefix: the space is the text's */
    expect_ids(t, " hello", space_hello, 2);
    /* a run of newlines that is a token stays whole though no merge makes it; 'a' falls back to its byte */
    const int32_t newlines[] = {2, 4 + 'a', piece_id("\n\n"), piece_id("he"), piece_id("\n"), 4 + 0xC3, 4 + 0xA9};
    expect_ids(t, "a\n\nhe\n\xc3\xa9", newlines, 7);
    pith_tokenizer_free(t);
    rc = pith_tokenizer_load(write_vocab("g4-tok-nomerges.gguf", "gemma4", false), 0, &t, &err);
    CHECKF(rc == -1 && strstr(err.msg, "tokenizer.ggml.merges"), "no merges: %s", rc ? err.msg : "loaded");
    if (!rc) pith_tokenizer_free(t);
    rc = pith_tokenizer_load(write_vocab("g4-tok-model.gguf", "gemma5", true), 0, &t, &err);
    CHECKF(rc == -1 && strstr(err.msg, "supported: llama, gpt2, gemma4"), "unknown model: %s", rc ? err.msg : "loaded");
    if (!rc) pith_tokenizer_free(t);
}

int main(void) {
    test_gguf();
    test_hf();
    test_tokenizer();
    return check_summary("test_formats_gemma4");
}
