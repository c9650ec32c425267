/* Loading GLM-4.5 MoE (glm4moe) from GGUF and from Hugging Face directories, both written here byte by
 * byte (tests/test_formats_util.h) with llama.cpp's and transformers' names: the hyper-parameters the
 * descriptor reads agree across the formats (the experts, the shared experts' width as count x expert
 * width, the leading dense layers, sigmoid gating, the routed scale, renormalisation, expert groups,
 * partial RoPE, Q/K/V biases, the MTP layers that GGUF's block_count counts and config.json's
 * num_hidden_layers does not), both build a model, with the MTP layer too; and every new key and
 * tensor, missing or malformed, is refused with a message naming it. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "model/glm4moe.h"
#include "pith/model.h"
#include "pith/modelfile.h"
#include "test_formats_util.h"

enum { DIM = 64, HEADS = 2, KV = 1, HD = 32, FFN = 64, VOCAB = 64, EXPERTS = 4, EFF = 32 };

/* One model and what to break in it. */
typedef struct gspec {
    int layers, nextn, dense, used, shared, groups, groups_used, rope_dim;
    bool bias, qk_norm, gating; /* gating: write expert_gating_func */
    int gating_func;
    const char *skip_key;  /* GGUF: a key after "glm4moe." left out */
    const char *ovr_key;   /* GGUF: a u32 key after "glm4moe." written as ovr_val */
    uint32_t ovr_val;
    const char *str_key;   /* GGUF: a key after "glm4moe." written as a string */
    const char *drop;      /* a canonical tensor left out (safetensors: its Hugging Face name) */
    const char *qk_only0;  /* QK norms in layer 0 only (any non-NULL) */
    int bias_len;          /* exp_probs_b.bias elements (0: EXPERTS) */
} gspec;

static gspec base(void) {
    return (gspec){.layers = 3, .nextn = 1, .dense = 1, .used = 2, .shared = 1, .groups = 2, .groups_used = 1,
                   .rope_dim = HD / 2, .bias = true, .gating = true, .gating_func = 2};
}

static const char *P(const char *suffix) {
    static char k[8][128];
    static int i;
    char *p = k[i++ % 8];
    snprintf(p, 128, "glm4moe.%s", suffix);
    return p;
}

static void kv_u32(buf *b, uint64_t *n, const gspec *s, const char *suffix, uint32_t v) {
    if (s->skip_key && !strcmp(s->skip_key, suffix)) return;
    if (s->str_key && !strcmp(s->str_key, suffix)) gguf_kv_str(b, P(suffix), "x");
    else gguf_kv_u32(b, P(suffix), s->ovr_key && !strcmp(s->ovr_key, suffix) ? s->ovr_val : v);
    (*n)++;
}

static void kv_f32(buf *b, uint64_t *n, const gspec *s, const char *suffix, float v) {
    if (s->skip_key && !strcmp(s->skip_key, suffix)) return;
    if (s->str_key && !strcmp(s->str_key, suffix)) gguf_kv_str(b, P(suffix), "x");
    else gguf_kv_f32(b, P(suffix), v);
    (*n)++;
}

static void add3(gtensor *ts, int *n, const char *name, uint64_t a, uint64_t b, uint64_t c) {
    add_gt(ts, n, name, 0, a, b);
    ts[*n - 1].n_dims = 3;
    ts[*n - 1].ne[2] = c;
}

/* GGUF as llama.cpp's converter writes glm4moe (every tensor F32). */
static const char *write_gguf(const char *name, const gspec *s) {
    buf kv = {0}, out = {0};
    uint64_t n = 0;
    gguf_kv_str(&kv, "general.architecture", "glm4moe"), n++;
    kv_u32(&kv, &n, s, "context_length", 256);
    kv_u32(&kv, &n, s, "embedding_length", DIM);
    kv_u32(&kv, &n, s, "block_count", (uint32_t)(s->layers + s->nextn));
    kv_u32(&kv, &n, s, "feed_forward_length", FFN);
    kv_u32(&kv, &n, s, "attention.head_count", HEADS);
    kv_u32(&kv, &n, s, "attention.head_count_kv", KV);
    kv_u32(&kv, &n, s, "attention.key_length", HD);
    kv_u32(&kv, &n, s, "attention.value_length", HD);
    kv_f32(&kv, &n, s, "attention.layer_norm_rms_epsilon", 1e-5f);
    kv_f32(&kv, &n, s, "rope.freq_base", 1e6f);
    kv_u32(&kv, &n, s, "rope.dimension_count", (uint32_t)s->rope_dim);
    kv_u32(&kv, &n, s, "expert_count", EXPERTS);
    kv_u32(&kv, &n, s, "expert_used_count", (uint32_t)s->used);
    kv_u32(&kv, &n, s, "expert_feed_forward_length", EFF);
    kv_u32(&kv, &n, s, "expert_shared_count", (uint32_t)s->shared);
    kv_u32(&kv, &n, s, "leading_dense_block_count", (uint32_t)s->dense);
    if (s->gating) kv_u32(&kv, &n, s, "expert_gating_func", (uint32_t)s->gating_func);
    kv_f32(&kv, &n, s, "expert_weights_scale", 2.5f);
    put_gstr(&kv, P("expert_weights_norm")), put_u32(&kv, 7), put_u8(&kv, 1), n++;
    if (s->groups > 1) {
        kv_u32(&kv, &n, s, "expert_group_count", (uint32_t)s->groups);
        kv_u32(&kv, &n, s, "expert_group_used_count", (uint32_t)s->groups_used);
    }
    kv_u32(&kv, &n, s, "nextn_predict_layers", (uint32_t)s->nextn);
    gguf_kv_u32(&kv, "tokenizer.ggml.bos_token_id", 1), n++;
    gguf_kv_u32(&kv, "tokenizer.ggml.eos_token_id", 2), n++;

    static gtensor ts[512];
    int nt = 0;
    const uint64_t q = HEADS * HD, kvd = KV * HD, sh = (uint64_t)s->shared * EFF;
    add_gt(ts, &nt, "token_embd.weight", 0, DIM, VOCAB);
    add_gt(ts, &nt, "output_norm.weight", 0, DIM, 0);
    add_gt(ts, &nt, "output.weight", 0, DIM, VOCAB);
    for (int l = 0; l < s->layers + s->nextn; l++) {
        char t[64];
#define T(suffix, a, b) (snprintf(t, sizeof t, "blk.%d." suffix, l), add_gt(ts, &nt, t, 0, a, b))
#define T3(suffix, a, b, c) (snprintf(t, sizeof t, "blk.%d." suffix, l), add3(ts, &nt, t, a, b, c))
        T("attn_norm.weight", DIM, 0);
        T("attn_q.weight", DIM, q);
        T("attn_k.weight", DIM, kvd);
        T("attn_v.weight", DIM, kvd);
        if (s->bias) T("attn_q.bias", q, 0), T("attn_k.bias", kvd, 0), T("attn_v.bias", kvd, 0);
        if (s->qk_norm || (s->qk_only0 && l == 0)) T("attn_q_norm.weight", HD, 0), T("attn_k_norm.weight", HD, 0);
        T("attn_output.weight", q, DIM);
        T("post_attention_norm.weight", DIM, 0);
        if (l < s->dense) {
            T("ffn_gate.weight", DIM, FFN), T("ffn_up.weight", DIM, FFN), T("ffn_down.weight", FFN, DIM);
        } else {
            T("ffn_gate_inp.weight", DIM, EXPERTS);
            T("exp_probs_b.bias", s->bias_len ? (uint64_t)s->bias_len : EXPERTS, 0);
            T3("ffn_gate_exps.weight", DIM, EFF, EXPERTS);
            T3("ffn_up_exps.weight", DIM, EFF, EXPERTS);
            T3("ffn_down_exps.weight", EFF, DIM, EXPERTS);
            if (sh) T("ffn_gate_shexp.weight", DIM, sh), T("ffn_up_shexp.weight", DIM, sh), T("ffn_down_shexp.weight", sh, DIM);
        }
        if (l >= s->layers) {
            T("nextn.eh_proj.weight", 2 * DIM, DIM);
            T("nextn.enorm.weight", DIM, 0), T("nextn.hnorm.weight", DIM, 0), T("nextn.shared_head_norm.weight", DIM, 0);
        }
#undef T
#undef T3
    }
    if (s->drop) {
        int k = 0;
        for (int i = 0; i < nt; i++)
            if (strcmp(ts[i].name, s->drop)) ts[k++] = ts[i];
        CHECKF(k == nt - 1, "no tensor %s to drop", s->drop);
        nt = k;
    }
    gguf_build(&out, 3, &kv, n, ts, nt, 32, 17, NULL);
    const char *path = tmp_path(name);
    CHECKF(write_file(path, out.p, out.n) == 0, "write %s", path);
    buf_free(&kv);
    buf_free(&out);
    return path;
}

/* A Hugging Face directory as the released checkpoints hold it (one tensor per expert, the MTP layer as
 * model.layers.{num_hidden_layers}.*), with config.json members given by `cfg` (a JSON object body). */
static const char *write_hf(const char *name, const gspec *s, const char *cfg) {
    static stensor ts[1024];
    int nt = 0;
    const uint64_t q = HEADS * HD, kvd = KV * HD, sh = (uint64_t)s->shared * EFF;
    add_st(ts, &nt, "model.embed_tokens.weight", "F32", VOCAB, DIM);
    add_st(ts, &nt, "model.norm.weight", "F32", DIM, 0);
    add_st(ts, &nt, "lm_head.weight", "F32", VOCAB, DIM);
    for (int l = 0; l < s->layers + s->nextn; l++) {
        char t[96];
#define H(suffix, a, b) (snprintf(t, sizeof t, "model.layers.%d." suffix, l), add_st(ts, &nt, t, "F32", a, b))
        H("input_layernorm.weight", DIM, 0);
        H("self_attn.q_proj.weight", q, DIM);
        H("self_attn.k_proj.weight", kvd, DIM);
        H("self_attn.v_proj.weight", kvd, DIM);
        if (s->bias) H("self_attn.q_proj.bias", q, 0), H("self_attn.k_proj.bias", kvd, 0), H("self_attn.v_proj.bias", kvd, 0);
        if (s->qk_norm) H("self_attn.q_norm.weight", HD, 0), H("self_attn.k_norm.weight", HD, 0);
        H("self_attn.o_proj.weight", DIM, q);
        H("post_attention_layernorm.weight", DIM, 0);
        if (l < s->dense) {
            H("mlp.gate_proj.weight", FFN, DIM), H("mlp.up_proj.weight", FFN, DIM), H("mlp.down_proj.weight", DIM, FFN);
        } else {
            H("mlp.gate.weight", EXPERTS, DIM);
            H("mlp.gate.e_score_correction_bias", EXPERTS, 0);
            for (int e = 0; e < EXPERTS; e++) {
                snprintf(t, sizeof t, "model.layers.%d.mlp.experts.%d.gate_proj.weight", l, e);
                add_st(ts, &nt, t, "F32", EFF, DIM);
                snprintf(t, sizeof t, "model.layers.%d.mlp.experts.%d.up_proj.weight", l, e);
                add_st(ts, &nt, t, "F32", EFF, DIM);
                snprintf(t, sizeof t, "model.layers.%d.mlp.experts.%d.down_proj.weight", l, e);
                add_st(ts, &nt, t, "F32", DIM, EFF);
            }
            if (sh)
                H("mlp.shared_experts.gate_proj.weight", sh, DIM), H("mlp.shared_experts.up_proj.weight", sh, DIM),
                    H("mlp.shared_experts.down_proj.weight", DIM, sh);
        }
        if (l >= s->layers) {
            H("eh_proj.weight", DIM, 2 * DIM);
            H("enorm.weight", DIM, 0), H("hnorm.weight", DIM, 0), H("shared_head.norm.weight", DIM, 0);
        }
#undef H
    }
    if (s->drop) {
        int k = 0;
        for (int i = 0; i < nt; i++)
            if (strcmp(ts[i].name, s->drop)) ts[k++] = ts[i];
        CHECKF(k == nt - 1, "no tensor %s to drop", s->drop);
        nt = k;
    }
    const char *dir = tmp_path(name);
    char p[4200], json[4096];
    CHECK(make_dir(dir) == 0);
    buf out = {0};
    st_build(&out, ts, nt, 23, 0, NULL);
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    CHECKF(write_file(p, out.p, out.n) == 0, "write %s", p);
    buf_free(&out);
    snprintf(json, sizeof json,
             "{\"architectures\": [\"Glm4MoeForCausalLM\"], \"model_type\": \"glm4_moe\", \"hidden_size\": %d, "
             "\"intermediate_size\": %d, \"num_hidden_layers\": %d, \"num_attention_heads\": %d, "
             "\"num_key_value_heads\": %d, \"head_dim\": %d, \"rms_norm_eps\": 1e-05, \"rope_theta\": 1000000.0, "
             "\"max_position_embeddings\": 256, \"vocab_size\": %d, \"tie_word_embeddings\": false, "
             "\"bos_token_id\": 1, \"eos_token_id\": 2, \"moe_intermediate_size\": %d, \"n_routed_experts\": %d, "
             "\"num_experts_per_tok\": %d, %s}",
             DIM, FFN, s->layers, HEADS, KV, HD, VOCAB, EFF, EXPERTS, s->used, cfg);
    snprintf(p, sizeof p, "%s/config.json", dir);
    CHECKF(write_text(p, json) == 0, "write %s", p);
    return dir;
}

/* The config.json members of base() */
#define HF_BASE                                                                                                \
    "\"n_shared_experts\": 1, \"first_k_dense_replace\": 1, \"n_group\": 2, \"topk_group\": 1, "               \
    "\"routed_scaling_factor\": 2.5, \"norm_topk_prob\": true, \"attention_bias\": true, \"use_qk_norm\": false, " \
    "\"partial_rotary_factor\": 0.5, \"num_nextn_predict_layers\": 1"

static void refused(const char *path, const char *want, const char *label) {
    pith_model_file *f = (pith_model_file *)1;
    pith_err err = {{0}};
    int rc = pith_model_file_open(path, &f, &err);
    CHECKF(rc != 0 && f == NULL, "%s: accepted", label);
    CHECKF(rc != 0 && strstr(err.msg, want), "%s: want an error with '%s', got '%s'", label, want, err.msg);
    CHECKF(strstr(err.msg, path) != NULL, "%s: the message does not name %s: %s", label, path, err.msg);
    if (!rc) pith_model_file_close(f);
}

static void load_refused(const char *path, const char *want, const char *label) {
    pith_model *m = NULL;
    pith_err err = {{0}};
    int rc = pith_model_load(path, NULL, &m, &err);
    CHECKF(rc != 0 && m == NULL, "%s: loaded", label);
    CHECKF(rc != 0 && strstr(err.msg, want), "%s: want an error with '%s', got '%s'", label, want, err.msg);
    if (!rc) pith_model_free(m);
}

static const pith_glm4moe_params *GP(const pith_hparams *hp) { return hp->arch_params; }

/* The hyper-parameters of base() (either format) */
static void check_base(const pith_hparams *hp, const char *what) {
    CHECKF(!strcmp(hp->arch, "glm4moe") && hp->n_layers == 3 && hp->n_mtp_layers == 1 && hp->dim == DIM &&
               hp->head_dim == HD && hp->n_kv_heads == KV && hp->ffn_dim == FFN,
           "%s: arch %s layers %d mtp %d dim %d hd %d kv %d ffn %d", what, hp->arch, hp->n_layers, hp->n_mtp_layers,
           hp->dim, hp->head_dim, hp->n_kv_heads, hp->ffn_dim);
    CHECKF(hp->n_experts == EXPERTS && hp->n_experts_used == 2 && hp->expert_ffn_dim == EFF &&
               hp->expert_shared_ffn_dim == EFF && hp->expert_dense_leading == 1 &&
               hp->expert_gating == PITH_GATING_SIGMOID && hp->expert_norm_topk && hp->expert_weights_scale == 2.5f &&
               hp->expert_groups == 2 && hp->expert_groups_used == 1,
           "%s: experts %d/%d/%d shared %d dense %d gating %d norm %d scale %g groups %d/%d", what, hp->n_experts,
           hp->n_experts_used, hp->expert_ffn_dim, hp->expert_shared_ffn_dim, hp->expert_dense_leading,
           hp->expert_gating, hp->expert_norm_topk, (double)hp->expert_weights_scale, hp->expert_groups,
           hp->expert_groups_used);
    CHECKF(hp->has_qkv_bias && !hp->has_qk_norm && GP(hp)->rope_dim == HD / 2, "%s: bias %d qk %d rope %d", what,
           hp->has_qkv_bias, hp->has_qk_norm, GP(hp)->rope_dim);
}

static void opens_and_loads(const char *path, const char *what) {
    pith_model_file *f = NULL;
    pith_err err = {{0}};
    CHECKF(pith_model_file_open(path, &f, &err) == 0, "%s: %s", what, err.msg);
    if (!f) return;
    check_base(pith_model_file_hparams(f), what);
    pith_model_file_close(f);
    pith_model *m = NULL;
    CHECKF(pith_model_load(path, NULL, &m, &err) == 0, "%s: load: %s", what, err.msg);
    if (m) pith_model_free(m);
    /* the MTP layer loads as a draft source (test_formats_glm4moe_mtp.c checks its tensors) */
    pith_model_options opt = {.mtp = true};
    m = NULL;
    CHECKF(pith_model_load(path, &opt, &m, &err) == 0 && m->has_mtp, "%s: mtp: %s", what, m ? "no head" : err.msg);
    if (m) pith_model_free(m);
}

static void test_gguf(void) {
    gspec s = base();
    opens_and_loads(write_gguf("glm-base.gguf", &s), "gguf");

    /* without expert_gating_func: sigmoid, as llama.cpp's glm4moe; 1: softmax as written */
    s = base(), s.gating = false;
    pith_model_file *f = NULL;
    pith_err err = {{0}};
    CHECKF(pith_model_file_open(write_gguf("glm-nogating.gguf", &s), &f, &err) == 0, "%s", err.msg);
    if (f) {
        CHECK(pith_model_file_hparams(f)->expert_gating == PITH_GATING_SIGMOID);
        pith_model_file_close(f);
    }
    s = base(), s.gating_func = 1;
    f = NULL;
    CHECKF(pith_model_file_open(write_gguf("glm-softmax.gguf", &s), &f, &err) == 0, "%s", err.msg);
    if (f) {
        CHECK(pith_model_file_hparams(f)->expert_gating == PITH_GATING_SOFTMAX);
        pith_model_file_close(f);
    }
    /* no shared experts: none loaded, no width */
    s = base(), s.shared = 0;
    f = NULL;
    CHECKF(pith_model_file_open(write_gguf("glm-noshared.gguf", &s), &f, &err) == 0, "%s", err.msg);
    if (f) {
        CHECK(pith_model_file_hparams(f)->expert_shared_ffn_dim == 0);
        pith_model_file_close(f);
    }
    /* the MTP layer's own tensors are not required */
    s = base(), s.drop = "blk.3.nextn.eh_proj.weight";
    f = NULL;
    CHECKF(pith_model_file_open(write_gguf("glm-noeh.gguf", &s), &f, &err) == 0, "%s", err.msg);
    if (f) pith_model_file_close(f);

    /* keys */
    s = base(), s.skip_key = "expert_shared_count";
    refused(write_gguf("glm-k1.gguf", &s), "expert_shared_count", "no expert_shared_count");
    s = base(), s.str_key = "expert_shared_count";
    refused(write_gguf("glm-k2.gguf", &s), "expert_shared_count", "expert_shared_count a string");
    s = base(), s.ovr_key = "expert_shared_count", s.ovr_val = 1000;
    refused(write_gguf("glm-k3.gguf", &s), "expert_shared_count", "expert_shared_count 1000");
    s = base(), s.ovr_key = "nextn_predict_layers", s.ovr_val = 4;
    refused(write_gguf("glm-k4.gguf", &s), "nextn_predict_layers", "nextn_predict_layers 4 of 4 blocks");
    s = base(), s.str_key = "nextn_predict_layers";
    refused(write_gguf("glm-k5.gguf", &s), "nextn_predict_layers", "nextn_predict_layers a string");
    s = base(), s.ovr_key = "rope.dimension_count", s.ovr_val = 15;
    refused(write_gguf("glm-k6.gguf", &s), "RoPE over 15 of 32", "odd rope.dimension_count");
    s = base(), s.ovr_key = "rope.dimension_count", s.ovr_val = 40;
    refused(write_gguf("glm-k7.gguf", &s), "RoPE over 40 of 32", "rope.dimension_count over the head");
    s = base(), s.str_key = "rope.dimension_count";
    refused(write_gguf("glm-k8.gguf", &s), "rope.dimension_count", "rope.dimension_count a string");
    s = base(), s.ovr_key = "leading_dense_block_count", s.ovr_val = 5;
    refused(write_gguf("glm-k9.gguf", &s), "leading dense layers", "leading_dense_block_count 5 of 3 layers");
    s = base(), s.str_key = "leading_dense_block_count";
    refused(write_gguf("glm-k10.gguf", &s), "leading_dense_block_count", "leading_dense_block_count a string");
    s = base(), s.ovr_key = "expert_group_count", s.ovr_val = 3;
    refused(write_gguf("glm-k11.gguf", &s), "expert groups", "expert_group_count 3 of 4 experts");
    s = base(), s.ovr_key = "expert_group_used_count", s.ovr_val = 3;
    refused(write_gguf("glm-k12.gguf", &s), "expert groups", "expert_group_used_count 3 of 2 groups");
    s = base(), s.ovr_key = "expert_gating_func", s.ovr_val = 7;
    refused(write_gguf("glm-k13.gguf", &s), "expert_gating_func", "expert_gating_func 7");
    s = base(), s.str_key = "expert_weights_scale";
    refused(write_gguf("glm-k14.gguf", &s), "expert_weights_scale", "expert_weights_scale a string");
    s = base(), s.skip_key = "expert_count";
    refused(write_gguf("glm-k15.gguf", &s), "glm4moe.expert_count", "no expert_count");
    s = base(), s.skip_key = "expert_used_count";
    refused(write_gguf("glm-k16.gguf", &s), "glm4moe.expert_used_count", "no expert_used_count");

    /* tensors */
    s = base(), s.drop = "blk.2.exp_probs_b.bias";
    refused(write_gguf("glm-t1.gguf", &s), "blk.2.exp_probs_b.bias", "no selection bias");
    s = base(), s.bias_len = EXPERTS + 1;
    refused(write_gguf("glm-t2.gguf", &s), "blk.1.exp_probs_b.bias", "selection bias of 5");
    s = base(), s.drop = "blk.0.ffn_up.weight";
    refused(write_gguf("glm-t3.gguf", &s), "blk.0.ffn_up.weight", "no dense ffn_up");
    s = base(), s.drop = "blk.1.post_attention_norm.weight";
    refused(write_gguf("glm-t4.gguf", &s), "blk.1.post_attention_norm.weight", "no FFN pre-norm");
    s = base(), s.drop = "blk.2.attn_v.bias";
    refused(write_gguf("glm-t5.gguf", &s), "blk.2.attn_v.bias", "a bias missing in one layer");
    s = base(), s.qk_only0 = "yes";
    refused(write_gguf("glm-t6.gguf", &s), "attn_q_norm.weight", "QK norms in layer 0 only");
    s = base(), s.drop = "blk.1.ffn_gate_shexp.weight";
    load_refused(write_gguf("glm-t7.gguf", &s), "blk.1.ffn_gate_shexp.weight", "no shared expert gate");
    s = base(), s.drop = "blk.2.ffn_down_exps.weight";
    load_refused(write_gguf("glm-t8.gguf", &s), "blk.2.ffn_down_exps.weight", "no experts' down");
    s = base(), s.drop = "blk.1.ffn_gate_inp.weight";
    load_refused(write_gguf("glm-t9.gguf", &s), "blk.1.ffn_gate_inp.weight", "no router");
}

static void test_hf(void) {
    gspec s = base();
    const char *good = write_hf("glm-hf", &s, HF_BASE);
    opens_and_loads(good, "safetensors");

    /* the same hyper-parameters as the GGUF of base() */
    pith_model_file *a = NULL, *b = NULL;
    pith_err err = {{0}};
    if (pith_model_file_open(tmp_path("glm-base.gguf"), &a, &err) == 0 && pith_model_file_open(good, &b, &err) == 0) {
        const pith_hparams *x = pith_model_file_hparams(a), *y = pith_model_file_hparams(b);
        CHECK(x->expert_groups == y->expert_groups && x->expert_weights_scale == y->expert_weights_scale &&
              x->expert_shared_ffn_dim == y->expert_shared_ffn_dim && GP(x)->rope_dim == GP(y)->rope_dim &&
              x->n_layers == y->n_layers && x->n_mtp_layers == y->n_mtp_layers);
    }
    if (a) pith_model_file_close(a);
    if (b) pith_model_file_close(b);

    /* defaults (configuration_glm4_moe.py) and rope_parameters */
    pith_model_file *f = NULL;
    const char *dir = write_hf("glm-hf-defaults", &s,
                               "\"attention_bias\": true, \"num_nextn_predict_layers\": 1, "
                               "\"rope_parameters\": {\"rope_theta\": 5e5, \"partial_rotary_factor\": 0.25, "
                               "\"rope_type\": \"default\"}");
    CHECKF(pith_model_file_open(dir, &f, &err) == 0, "defaults: %s", err.msg);
    if (f) {
        const pith_hparams *hp = pith_model_file_hparams(f);
        CHECKF(hp->expert_shared_ffn_dim == EFF && hp->expert_dense_leading == 1 && hp->expert_norm_topk &&
                   hp->expert_weights_scale == 1.0f && hp->expert_groups == 1 && GP(hp)->rope_dim == HD / 4 &&
                   hp->rope_theta == 5e5f,
               "defaults: shared %d dense %d norm %d scale %g groups %d rope %d theta %g", hp->expert_shared_ffn_dim,
               hp->expert_dense_leading, hp->expert_norm_topk, (double)hp->expert_weights_scale, hp->expert_groups,
               GP(hp)->rope_dim, (double)hp->rope_theta);
        pith_model_file_close(f);
    }

    /* keys */
    gspec nb = base();
    nb.bias = false;
    refused(write_hf("glm-hf-k2", &nb, HF_BASE), "attention_bias", "attention_bias true without biases");
    refused(write_hf("glm-hf-k3", &s,
                     "\"use_qk_norm\": true, \"attention_bias\": true, \"n_group\": 2, \"num_nextn_predict_layers\": 1"),
            "use_qk_norm", "use_qk_norm true without norms");
    refused(write_hf("glm-hf-k4", &s, "\"partial_rotary_factor\": 1.5, \"attention_bias\": true"),
            "partial_rotary_factor", "partial_rotary_factor 1.5");
    refused(write_hf("glm-hf-k5", &s, "\"n_shared_experts\": -1, \"attention_bias\": true"), "n_shared_experts",
            "n_shared_experts -1");
    refused(write_hf("glm-hf-k6", &s, "\"n_shared_experts\": \"one\", \"attention_bias\": true"), "n_shared_experts",
            "n_shared_experts a string");
    refused(write_hf("glm-hf-k7", &s, "\"routed_scaling_factor\": 0, \"attention_bias\": true"),
            "routed_scaling_factor", "routed_scaling_factor 0");
    refused(write_hf("glm-hf-k8", &s, "\"n_group\": 3, \"attention_bias\": true"), "expert groups", "n_group 3");
    refused(write_hf("glm-hf-k9", &s, "\"first_k_dense_replace\": 9, \"attention_bias\": true"), "leading dense",
            "first_k_dense_replace 9");
    refused(write_hf("glm-hf-k10", &s, "\"num_nextn_predict_layers\": -1, \"attention_bias\": true"),
            "num_nextn_predict_layers", "num_nextn_predict_layers -1");
    refused(write_hf("glm-hf-k11", &s, "\"norm_topk_prob\": 1, \"attention_bias\": true"), "norm_topk_prob",
            "norm_topk_prob a number");
    refused(write_hf("glm-hf-k12", &s, "\"rope_parameters\": {\"rope_type\": \"yarn\"}, \"attention_bias\": true"),
            "rope_type", "rope_parameters yarn");

    /* tensors */
    s = base(), s.drop = "model.layers.1.mlp.gate.e_score_correction_bias";
    refused(write_hf("glm-hf-t1", &s, HF_BASE), "blk.1.exp_probs_b.bias", "no e_score_correction_bias");
    s = base(), s.drop = "model.layers.2.mlp.experts.3.up_proj.weight";
    load_refused(write_hf("glm-hf-t2", &s, HF_BASE), "ffn_up", "no expert 3 up");
    s = base(), s.drop = "model.layers.0.mlp.down_proj.weight";
    refused(write_hf("glm-hf-t3", &s, HF_BASE), "blk.0.ffn_down.weight", "no dense down");
    s = base(), s.drop = "model.layers.1.mlp.shared_experts.down_proj.weight";
    load_refused(write_hf("glm-hf-t4", &s, HF_BASE), "blk.1.ffn_down_shexp.weight", "no shared down");
}

int main(void) {
    test_gguf();
    test_hf();
    return check_summary("test_formats_glm4moe");
}
