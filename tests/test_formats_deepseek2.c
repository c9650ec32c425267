/* deepseek2 (src/model/deepseek2_arch.c, deepseek2.c) from both formats: the MLA widths, YaRN's score factor
 * and the MoE keys as each format writes them, the KV memory of one latent row per token and layer, and the
 * refusals of malformed keys and MLA tensors (each message names the file and the key or tensor). The files
 * are small synthetic ones (test_formats_util.h) with random bytes as weights: loading binds every tensor,
 * nothing runs. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "model/deepseek2.h"
#include "pith/model.h"
#include "test_formats_expect.h"
#include "test_formats_util.h"

enum { DIM = 64, HEADS = 2, QLORA = 32, RANK = 32, ROPE = 16, NOPE = 16, V = 16, FFN = 64, VOCAB = 64, LAYERS = 2,
       EXPERTS = 4, USED = 2, EFFN = 32 };

/* What a GGUF file leaves out or gets wrong (all zero: a valid V3-style file with llama.cpp's MLA keys and
 * the split attn_k_b / attn_v_b). */
typedef struct variant {
    bool no_q_lora;          /* attn_q, no q_lora_rank */
    bool fused_only;         /* attn_kv_b only, the plain key_length / value_length being the head widths */
    uint32_t kv_b_type;      /* with fused_only: the fused tensor's type */
    const char *skip_key;    /* a key left out (without "deepseek2.") */
    const char *skip_tensor; /* a tensor left out */
    bool no_value_mla;       /* key_length_mla without value_length_mla */
    int rope_dims;           /* rope.dimension_count other than ROPE */
    int shared;              /* expert_shared_count other than 1 */
    int nextn;               /* nextn_predict_layers */
    int k_b_rank;            /* attn_k_b's middle dimension other than RANK */
    bool yarn;
    bool full_head;          /* with nextn 1: a whole MTP layer (test_formats_deepseek2_mtp.c), not a stub */
} variant;

static void add_t(gtensor *ts, int *n, const char *name, uint32_t type, int nd, uint64_t a, uint64_t b, uint64_t c,
                  const variant *v) {
    if (v->skip_tensor && !strcmp(v->skip_tensor, name)) return;
    gtensor *t = &ts[(*n)++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->type = type;
    t->n_dims = (uint32_t)nd;
    t->ne[0] = a, t->ne[1] = b, t->ne[2] = c, t->ne[3] = 1;
    if (nd < 3) t->ne[2] = 1;
    if (nd < 2) t->ne[1] = 1;
}

static const char *write_gguf(const char *file, const variant *v) {
    buf kv = {0};
    uint64_t nkv = 0;
    char key[128];
#define KEY(k) (snprintf(key, sizeof key, "deepseek2.%s", k), v->skip_key && !strcmp(v->skip_key, k))
#define U32(k, x) do { if (!KEY(k)) { gguf_kv_u32(&kv, key, (uint32_t)(x)); nkv++; } } while (0)
#define F32(k, x) do { if (!KEY(k)) { gguf_kv_f32(&kv, key, (float)(x)); nkv++; } } while (0)
    gguf_kv_str(&kv, "general.architecture", "deepseek2"), nkv++;
    U32("context_length", 4096);
    U32("embedding_length", DIM);
    U32("block_count", LAYERS + (v->nextn < 100 ? v->nextn : 0)); /* nextn >= 100: more than the blocks */
    U32("feed_forward_length", FFN);
    U32("attention.head_count", HEADS);
    U32("attention.head_count_kv", v->fused_only ? HEADS : 1);
    if (!v->no_q_lora) U32("attention.q_lora_rank", QLORA);
    U32("attention.kv_lora_rank", RANK);
    if (v->fused_only) {
        U32("attention.key_length", NOPE + ROPE);
        U32("attention.value_length", V);
    } else {
        U32("attention.key_length", RANK + ROPE);
        U32("attention.value_length", RANK);
        U32("attention.key_length_mla", NOPE + ROPE);
        if (!v->no_value_mla) U32("attention.value_length_mla", V);
    }
    U32("rope.dimension_count", v->rope_dims ? v->rope_dims : ROPE);
    F32("attention.layer_norm_rms_epsilon", 1e-6);
    U32("leading_dense_block_count", 1);
    U32("expert_count", EXPERTS);
    U32("expert_used_count", USED);
    U32("expert_feed_forward_length", EFFN);
    U32("expert_shared_count", v->shared ? v->shared : 1);
    F32("expert_weights_scale", 2.5);
    U32("expert_gating_func", 2);
    U32("expert_group_count", 2);
    U32("expert_group_used_count", 1);
    if (v->nextn) U32("nextn_predict_layers", v->nextn);
    if (v->yarn) {
        if (!KEY("rope.scaling.type")) gguf_kv_str(&kv, key, "yarn"), nkv++;
        F32("rope.scaling.factor", 4);
        U32("rope.scaling.original_context_length", 1024);
        F32("rope.scaling.yarn_log_multiplier", 0.0707);
    }
#undef U32
#undef F32
#undef KEY
    gtensor ts[96];
    int n = 0;
    char name[64];
    add_t(ts, &n, "token_embd.weight", 0, 2, DIM, VOCAB, 1, v);
    add_t(ts, &n, "output_norm.weight", 0, 1, DIM, 1, 1, v);
    add_t(ts, &n, "output.weight", 0, 2, DIM, VOCAB, 1, v);
    for (int l = 0; l < LAYERS + (v->full_head ? 1 : 0); l++) {
#define T(suffix, type, nd, a, b, c) (snprintf(name, sizeof name, "blk.%d." suffix, l), add_t(ts, &n, name, type, nd, a, b, c, v))
        if (l == LAYERS) { /* the MTP layer's own tensors (llama.cpp's nextn.* names), then its block */
            T("nextn.eh_proj.weight", 0, 2, 2 * DIM, DIM, 1);
            T("nextn.enorm.weight", 0, 1, DIM, 1, 1);
            T("nextn.hnorm.weight", 0, 1, DIM, 1, 1);
            T("nextn.shared_head_norm.weight", 0, 1, DIM, 1, 1);
        }
        T("attn_norm.weight", 0, 1, DIM, 1, 1);
        T("ffn_norm.weight", 0, 1, DIM, 1, 1);
        if (v->no_q_lora) {
            T("attn_q.weight", 0, 2, DIM, HEADS * (NOPE + ROPE), 1);
        } else {
            T("attn_q_a.weight", 0, 2, DIM, QLORA, 1);
            T("attn_q_a_norm.weight", 0, 1, QLORA, 1, 1);
            T("attn_q_b.weight", 0, 2, QLORA, HEADS * (NOPE + ROPE), 1);
        }
        T("attn_kv_a_mqa.weight", 0, 2, DIM, RANK + ROPE, 1);
        T("attn_kv_a_norm.weight", 0, 1, RANK, 1, 1);
        if (v->fused_only) {
            T("attn_kv_b.weight", v->kv_b_type, 2, RANK, HEADS * (NOPE + V), 1);
        } else {
            T("attn_k_b.weight", 0, 3, NOPE, v->k_b_rank ? (uint64_t)v->k_b_rank : RANK, HEADS);
            T("attn_v_b.weight", 0, 3, RANK, V, HEADS);
        }
        T("attn_output.weight", 0, 2, HEADS * V, DIM, 1);
        if (l == 0) {
            T("ffn_gate.weight", 0, 2, DIM, FFN, 1);
            T("ffn_up.weight", 0, 2, DIM, FFN, 1);
            T("ffn_down.weight", 0, 2, FFN, DIM, 1);
        } else {
            T("ffn_gate_inp.weight", 0, 2, DIM, EXPERTS, 1);
            T("exp_probs_b.bias", 0, 1, EXPERTS, 1, 1);
            T("ffn_gate_exps.weight", 0, 3, DIM, EFFN, EXPERTS);
            T("ffn_up_exps.weight", 0, 3, DIM, EFFN, EXPERTS);
            T("ffn_down_exps.weight", 0, 3, EFFN, DIM, EXPERTS);
            T("ffn_gate_shexp.weight", 0, 2, DIM, EFFN, 1);
            T("ffn_up_shexp.weight", 0, 2, DIM, EFFN, 1);
            T("ffn_down_shexp.weight", 0, 2, EFFN, DIM, 1);
        }
#undef T
    }
    if (v->nextn > 0 && v->nextn < 100 && !v->full_head) { /* a stub MTP layer after the decoder's: unread without the mtp option */
        snprintf(name, sizeof name, "blk.%d.nextn.eh_proj.weight", LAYERS);
        add_t(ts, &n, name, 0, 2, 2 * DIM, DIM, 1, v);
        snprintf(name, sizeof name, "blk.%d.attn_norm.weight", LAYERS);
        add_t(ts, &n, name, 0, 1, DIM, 1, 1, v);
    }
    buf out = {0};
    gguf_build(&out, 3, &kv, nkv, ts, n, 32, 11, NULL);
    const char *path = tmp_path(file);
    CHECKF(write_file(path, out.p, out.n) == 0, "write %s", path);
    buf_free(&out);
    buf_free(&kv);
    return path;
}

/* Refused by the model file (metadata) or by the build (tensors): the message names the file and `needle`. */
static void refused(const char *label, const variant *v, bool at_build, const char *needle) {
    const char *path = write_gguf("ds2-bad.gguf", v);
    if (!at_build) {
        model_fail(label, path, path, needle);
        return;
    }
    pith_model *m = NULL;
    pith_err err = {{0}};
    pith_model_options o = {.n_threads = 1};
    int rc = pith_model_load(path, &o, &m, &err);
    expect_fail_at(path, rc, &err, needle, label);
    if (!rc) pith_model_free(m);
}

static void gguf_cases(void) {
    variant ok = {0};
    const char *path = write_gguf("ds2-ok.gguf", &ok);
    pith_model_file *f = NULL;
    pith_err err = {{0}};
    CHECKF(pith_model_file_open(path, &f, &err) == 0, "%s", err.msg);
    if (f) {
        const pith_hparams *hp = pith_model_file_hparams(f);
        const pith_deepseek2_params *P = pith_deepseek2_params_of(hp);
        CHECK(P->q_lora_rank == QLORA && P->kv_lora_rank == RANK && P->qk_rope == ROPE && P->qk_nope == NOPE &&
              P->v_dim == V);
        CHECK(hp->head_dim == V && hp->n_kv_heads == 1 && hp->rope_style == PITH_ROPE_ADJACENT);
        CHECK(hp->n_experts == EXPERTS && hp->n_experts_used == USED && hp->expert_ffn_dim == EFFN &&
              hp->expert_shared_ffn_dim == EFFN && hp->expert_gating == PITH_GATING_SIGMOID &&
              hp->expert_groups == 2 && hp->expert_groups_used == 1 && hp->expert_weights_scale == 2.5f &&
              hp->expert_dense_leading == 1 && !hp->expert_norm_topk);
        CHECK(P->kq_mscale2 == 1);
        pith_model_file_close(f);
    }
    /* the KV memory: one FULL group of rank + rope per token and layer, no V */
    pith_model *m = NULL;
    pith_model_options o = {.n_threads = 1};
    CHECKF(pith_model_load(path, &o, &m, &err) == 0, "%s", err.msg);
    if (m) {
        CHECK(m->mem.n_groups == 1 && m->mem.groups[0].kind == PITH_MEM_FULL && m->mem.groups[0].n_layers == LAYERS &&
              m->mem.groups[0].k_dim == RANK + ROPE && m->mem.groups[0].v_dim == 0);
        CHECK(pith_mem_unit_bytes(&m->mem.groups[0], PITH_F16, 16) == (size_t)LAYERS * 16 * (RANK + ROPE) * 2);
        pith_model_free(m);
    }
    /* the other forms: no q_lora; an older file with the fused kv_b (F16) only; YaRN; MTP layers */
    variant lite = {.no_q_lora = true}, fused = {.fused_only = true, .kv_b_type = 1}, yarn = {.yarn = true},
            mtp = {.nextn = 1};
    const variant *forms[] = {&lite, &fused, &yarn, &mtp};
    for (int i = 0; i < 4; i++) {
        path = write_gguf("ds2-form.gguf", forms[i]);
        m = NULL;
        CHECKF(pith_model_load(path, &o, &m, &err) == 0, "form %d: %s", i, err.msg);
        if (!m) continue;
        const pith_deepseek2_params *P = pith_deepseek2_params_of(&m->hp);
        CHECK(m->hp.n_layers == LAYERS && P->qk_nope == NOPE && P->v_dim == V);
        if (forms[i] == &lite) CHECK(P->q_lora_rank == 0);
        if (forms[i] == &yarn) { /* (1 + 0.0707 ln 4)^2, and cos/sin unscaled (attn_factor 1) */
            double ms = 1 + 0.0707 * log(4.0);
            CHECKF(fabs(P->kq_mscale2 - ms * ms) < 1e-6 && m->hp.rope_yarn_mscale == 1.0f, "yarn %g", P->kq_mscale2);
        }
        pith_model_free(m);
        if (forms[i] != &mtp) continue;
        /* the MTP layer as a draft source (deepseek2_mtp.c): this file's is a stub (two tensors), refused
         * naming what it lacks (test_formats_deepseek2_mtp.c: a whole head, and each tensor missing) */
        pith_model_options with_head = o;
        with_head.mtp = true;
        m = NULL;
        CHECKF(pith_model_load(path, &with_head, &m, &err) != 0 && strstr(err.msg, "the MTP layer") &&
                   strstr(err.msg, "missing tensor"),
               "deepseek2 with its MTP head: %s", m ? "loaded" : err.msg);
        pith_model_free(m);
    }
    /* refusals */
    refused("no kv_lora_rank", &(variant){.skip_key = "attention.kv_lora_rank"}, false, "kv_lora_rank");
    refused("no rope dims", &(variant){.skip_key = "rope.dimension_count"}, false, "rope.dimension_count");
    refused("key_length_mla alone", &(variant){.no_value_mla = true}, false, "value_length_mla");
    refused("no key_length", &(variant){.fused_only = true, .skip_key = "attention.key_length"}, false, "key_length");
    refused("odd rope", &(variant){.rope_dims = 15}, false, "MLA widths");
    refused("rope past the head", &(variant){.rope_dims = NOPE + ROPE}, false, "MLA widths");
    refused("shared count", &(variant){.shared = 1000}, false, "expert_shared_count");
    refused("nextn", &(variant){.nextn = 100}, false, "nextn_predict_layers");
    refused("no kv_a", &(variant){.skip_tensor = "blk.1.attn_kv_a_mqa.weight"}, true, "blk.1.attn_kv_a_mqa.weight");
    refused("no kv_a_norm", &(variant){.skip_tensor = "blk.0.attn_kv_a_norm.weight"}, true, "blk.0.attn_kv_a_norm.weight");
    refused("no q_b", &(variant){.skip_tensor = "blk.0.attn_q_b.weight"}, true, "blk.0.attn_q_b.weight");
    refused("no q_a_norm", &(variant){.skip_tensor = "blk.1.attn_q_a_norm.weight"}, true, "blk.1.attn_q_a_norm.weight");
    refused("no attn_q", &(variant){.no_q_lora = true, .skip_tensor = "blk.0.attn_q.weight"}, true, "blk.0.attn_q.weight");
    refused("k_b alone", &(variant){.skip_tensor = "blk.0.attn_v_b.weight"}, true, "blk.0.attn_v_b.weight");
    refused("k_b shape", &(variant){.k_b_rank = RANK / 2}, true, "blk.0.attn_k_b.weight");
    refused("no kv_b", &(variant){.fused_only = true, .kv_b_type = 0, .skip_tensor = "blk.1.attn_kv_b.weight"}, true,
            "blk.1.attn_kv_b.weight");
    refused("quantized fused kv_b", &(variant){.fused_only = true, .kv_b_type = 8}, true, "blk.0.attn_kv_b.weight");
    refused("no router", &(variant){.skip_tensor = "blk.1.ffn_gate_inp.weight"}, true, "ffn_gate_inp");
    refused("no dense ffn", &(variant){.skip_tensor = "blk.0.ffn_up.weight"}, false, "blk.0.ffn_up.weight");
}

/* ---- Hugging Face ---- */

/* extra: members put first in config.json (cJSON reads the first of duplicate keys), each ending ", " */

/* A whole MTP layer in write_hf's directories (test_formats_deepseek2_mtp.c), less the tensor hf_skip. */
static bool hf_full_head;
static const char *hf_skip;

static const char *write_hf(const char *dir_name, const char *extra, bool q_lora, bool mtp) {
    const char *dir = tmp_path(dir_name);
    make_dir(dir);
    stensor ts[96];
    int n = 0;
    char name[96]; /* stensor's name width */
    add_st(ts, &n, "model.embed_tokens.weight", "F32", VOCAB, DIM);
    add_st(ts, &n, "model.norm.weight", "F32", DIM, 0);
    add_st(ts, &n, "lm_head.weight", "F32", VOCAB, DIM);
    for (int l = 0; l < LAYERS + (mtp && hf_full_head ? 1 : 0); l++) {
#define H(suffix, a, b)                                                                                               \
    (snprintf(name, sizeof name, "model.layers.%d." suffix, l),                                                      \
     (hf_skip && !strcmp(hf_skip, name)) ? (void)0 : add_st(ts, &n, name, "F32", a, b))
        if (l == LAYERS) {
            H("eh_proj.weight", DIM, 2 * DIM);
            H("enorm.weight", DIM, 0);
            H("hnorm.weight", DIM, 0);
            H("shared_head.norm.weight", DIM, 0);
        }
        H("input_layernorm.weight", DIM, 0);
        H("post_attention_layernorm.weight", DIM, 0);
        if (q_lora) {
            H("self_attn.q_a_proj.weight", QLORA, DIM);
            H("self_attn.q_a_layernorm.weight", QLORA, 0);
            H("self_attn.q_b_proj.weight", HEADS * (NOPE + ROPE), QLORA);
        } else {
            H("self_attn.q_proj.weight", HEADS * (NOPE + ROPE), DIM);
        }
        H("self_attn.kv_a_proj_with_mqa.weight", RANK + ROPE, DIM);
        H("self_attn.kv_a_layernorm.weight", RANK, 0);
        H("self_attn.kv_b_proj.weight", HEADS * (NOPE + V), RANK);
        H("self_attn.o_proj.weight", DIM, HEADS * V);
        if (l == 0) {
            H("mlp.gate_proj.weight", FFN, DIM);
            H("mlp.up_proj.weight", FFN, DIM);
            H("mlp.down_proj.weight", DIM, FFN);
            continue;
        }
        H("mlp.gate.weight", EXPERTS, DIM);
        H("mlp.gate.e_score_correction_bias", EXPERTS, 0);
        for (int e = 0; e < EXPERTS; e++) {
            snprintf(name, sizeof name, "model.layers.%d.mlp.experts.%d.gate_proj.weight", l, e);
            add_st(ts, &n, name, "F32", EFFN, DIM);
            snprintf(name, sizeof name, "model.layers.%d.mlp.experts.%d.up_proj.weight", l, e);
            add_st(ts, &n, name, "F32", EFFN, DIM);
            snprintf(name, sizeof name, "model.layers.%d.mlp.experts.%d.down_proj.weight", l, e);
            add_st(ts, &n, name, "F32", DIM, EFFN);
        }
        H("mlp.shared_experts.gate_proj.weight", 2 * EFFN, DIM);
        H("mlp.shared_experts.up_proj.weight", 2 * EFFN, DIM);
        H("mlp.shared_experts.down_proj.weight", DIM, 2 * EFFN);
#undef H
    }
    if (mtp && !hf_full_head) { /* a stub of DeepSeek-V3's MTP layer (model.layers.{num_hidden_layers}.*): unread without the
                * mtp option, refused with it */
        snprintf(name, sizeof name, "model.layers.%d.eh_proj.weight", LAYERS);
        add_st(ts, &n, name, "F32", DIM, 2 * DIM);
        snprintf(name, sizeof name, "model.layers.%d.self_attn.kv_a_proj_with_mqa.weight", LAYERS);
        add_st(ts, &n, name, "F32", RANK + ROPE, DIM);
    }
    buf out = {0};
    st_build(&out, ts, n, 5, 0, NULL);
    char path[512], cfg[2048];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    CHECKF(write_file(path, out.p, out.n) == 0, "write %s", path);
    buf_free(&out);
    snprintf(cfg, sizeof cfg,
             "{%s\"architectures\": [\"DeepseekV3ForCausalLM\"], \"model_type\": \"deepseek_v3\", \"hidden_size\": %d, "
             "\"intermediate_size\": %d, \"num_hidden_layers\": %d, \"num_attention_heads\": %d, "
             "\"num_key_value_heads\": %d, \"head_dim\": %d, \"q_lora_rank\": %s, \"kv_lora_rank\": %d, "
             "\"qk_nope_head_dim\": %d, \"qk_rope_head_dim\": %d, \"v_head_dim\": %d, \"n_routed_experts\": %d, "
             "\"num_experts_per_tok\": %d, \"moe_intermediate_size\": %d, \"n_shared_experts\": 2, "
             "\"first_k_dense_replace\": 1, \"n_group\": 2, \"topk_group\": 1, \"vocab_size\": %d, "
             "\"rms_norm_eps\": 1e-6, \"max_position_embeddings\": 4096}",
             extra, DIM, FFN, LAYERS, HEADS, HEADS, ROPE, q_lora ? "32" : "null", RANK, NOPE, ROPE, V, EXPERTS, USED, EFFN,
             VOCAB);
    snprintf(path, sizeof path, "%s/config.json", dir);
    CHECKF(write_text(path, cfg) == 0, "write %s", path);
    return dir;
}

static void hf_cases(void) {
    /* the V3 defaults (norm_topk_prob true, routed_scaling_factor 2.5, sigmoid, interleaved RoPE), YaRN */
    const char *dir = write_hf("ds2-hf", "\"rope_scaling\": {\"type\": \"yarn\", \"factor\": 4.0, "
                                         "\"original_max_position_embeddings\": 1024, \"mscale\": 0.707, "
                                         "\"mscale_all_dim\": 0.707}, \"num_nextn_predict_layers\": 1, ", true, true);
    pith_model *m = NULL;
    pith_err err = {{0}};
    pith_model_options o = {.n_threads = 1};
    CHECKF(pith_model_load(dir, &o, &m, &err) == 0, "%s", err.msg);
    if (m) {
        const pith_hparams *hp = &m->hp;
        const pith_deepseek2_params *P = pith_deepseek2_params_of(hp);
        double ms = 0.1 * 0.707 * log(4.0) + 1;
        CHECK(P->q_lora_rank == QLORA && P->kv_lora_rank == RANK && P->qk_nope == NOPE && P->v_dim == V);
        CHECK(hp->head_dim == V && hp->n_kv_heads == 1 && hp->rope_style == PITH_ROPE_ADJACENT);
        CHECK(hp->expert_gating == PITH_GATING_SIGMOID && hp->expert_norm_topk && hp->expert_weights_scale == 2.5f &&
              hp->expert_shared_ffn_dim == 2 * EFFN && hp->expert_groups == 2 && hp->expert_dense_leading == 1);
        CHECKF(fabs(P->kq_mscale2 - ms * ms) < 1e-6 && fabs(hp->rope_yarn_mscale - 1.0f) < 1e-6, "%g %g",
               P->kq_mscale2, hp->rope_yarn_mscale);
        CHECK(m->mem.groups[0].k_dim == RANK + ROPE && m->mem.groups[0].v_dim == 0 && hp->n_mtp_layers == 1);
        pith_model_free(m);
    }
    pith_model_options with_head = {.n_threads = 1, .mtp = true};
    m = NULL;
    CHECKF(pith_model_load(dir, &with_head, &m, &err) != 0 && strstr(err.msg, "the MTP layer") &&
               strstr(err.msg, "missing tensor"),
           "deepseek2 (safetensors) with its MTP head: %s", m ? "loaded" : err.msg);
    pith_model_free(m);
    dir = write_hf("ds2-hf-lite", "\"rope_interleave\": false, \"norm_topk_prob\": false, ", false, false);
    CHECKF(pith_model_load(dir, &o, &m, &err) == 0, "%s", err.msg);
    if (m) {
        CHECK(pith_deepseek2_params_of(&m->hp)->q_lora_rank == 0 && m->hp.rope_style == PITH_ROPE_HALF &&
              !m->hp.expert_norm_topk);
        pith_model_free(m);
    }
    /* GLM-4.7-Flash: V3's attention and router, its own defaults, dense layers from mlp_layer_types */
    dir = write_hf("ds2-hf-glm", "\"architectures\": [\"Glm4MoeLiteForCausalLM\"], \"model_type\": \"glm4_moe_lite\", "
                                 "\"mlp_layer_types\": [\"dense\", \"sparse\"], ", true, false);
    CHECKF(pith_model_load(dir, &o, &m, &err) == 0, "%s", err.msg);
    if (m) {
        CHECK(m->hp.expert_gating == PITH_GATING_SIGMOID && m->hp.expert_weights_scale == 1.8f &&
              m->hp.expert_norm_topk && m->hp.expert_dense_leading == 1 && !strcmp(m->hp.arch, "deepseek2"));
        pith_model_free(m);
    }
    static const struct {
        const char *extra, *needle;
    } bad[] = {
        {"\"architectures\": [\"Glm4MoeLiteForCausalLM\"], \"mlp_layer_types\": [\"sparse\", \"dense\"], ",
         "mlp_layer_types"},
        {"\"architectures\": [\"Glm4MoeLiteForCausalLM\"], \"mlp_layer_types\": [\"dense\"], ", "mlp_layer_types"},
        {"\"moe_layer_freq\": 2, ", "moe_layer_freq"},
        {"\"scoring_func\": \"softmax\", ", "scoring_func"},
        {"\"n_shared_experts\": -1, ", "n_shared_experts"},
        {"\"kv_lora_rank\": \"512\", ", "kv_lora_rank"},
        {"\"qk_rope_head_dim\": 0, ", "MLA widths"},
        {"\"n_group\": 3, ", "expert groups"},
        {"\"rope_interleave\": 1, ", "rope_interleave"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        dir = write_hf("ds2-hf-bad", bad[i].extra, true, false);
        model_fail(bad[i].extra, dir, dir, bad[i].needle); /* config.json, or the directory (the checks) */
    }
}

int main(void) {
    gguf_cases();
    hf_cases();
    return check_summary("test_formats_deepseek2");
}
