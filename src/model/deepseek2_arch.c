/* DeepSeek-V2/V3 (`deepseek2`; Hugging Face DeepseekV2ForCausalLM, DeepseekV3ForCausalLM, and the models on
 * their architecture: Kimi K2, Moonlight, DeepSeek-V2-Lite): the descriptor. The forward pass is
 * deepseek2.c.
 *
 * Facts, from transformers' configuration_deepseek_v3.py / modeling_deepseek_v3.py (and _v2) and
 * llama.cpp's llama-model.cpp (LLM_ARCH_DEEPSEEK2), src/models/deepseek2.cpp and convert_hf_to_gguf.py:
 *   - attention is multi-head latent attention: q = q_b(RMSNorm(q_a x)) where q_lora_rank is set, else
 *     q_proj x; kv_a_proj_with_mqa x = [c_kv (kv_lora_rank) | k_pe (qk_rope_head_dim)], c_kv normed by
 *     kv_a_layernorm; kv_b_proj c_kv = per head [k_nope (qk_nope_head_dim) | v (v_head_dim)]. GGUF:
 *     attention.q_lora_rank (absent: no q_lora), attention.kv_lora_rank, rope.dimension_count (the rope
 *     part), attention.key_length / value_length (the head widths nope + rope and v; in files converted
 *     for MLA those are kv_lora_rank + rope and kv_lora_rank, and the head widths are
 *     attention.key_length_mla / value_length_mla); tensors attn_q_a, attn_q_a_norm, attn_q_b or attn_q,
 *     attn_kv_a_mqa, attn_kv_a_norm, and attn_kv_b (older converters) and / or the split attn_k_b
 *     ([nope, rank, heads]: W_UK transposed per head) and attn_v_b ([rank, v, heads]) newer ones write;
 *   - RoPE rotates adjacent pairs of q_pe and k_pe: llama.cpp's DEEPSEEK2 is NORM RoPE on unpermuted
 *     weights; transformers' V2 rotates complex pairs, V3 likewise under rope_interleave (its default),
 *     rotate-half otherwise;
 *   - scores are scaled by 1/sqrt(nope + rope), times yarn_get_mscale(factor, mscale_all_dim)^2 under
 *     YaRN (transformers' V3, DeepSeek's own V2 code and llama.cpp for both; transformers' V2 port leaves
 *     the factor out, which this follows not), which llama.cpp writes as rope.scaling.yarn_log_multiplier = 0.1 *
 *     mscale_all_dim; cos and sin are times HF's attention factor mscale(factor, mscale) /
 *     mscale(factor, mscale_all_dim), in llama.cpp rope.scaling.attn_factor (default 1) alone;
 *   - the mixture of experts (moe_arch.c's keys and the core's routing): V3 scores by sigmoid with the
 *     selection bias e_score_correction_bias (GGUF exp_probs_b.bias) and group-limited top-k (n_group,
 *     topk_group), V2 by softmax (topk_method "group_limited_greedy": groups by their best expert;
 *     "greedy": none); routed_scaling_factor (expert_weights_scale; applied whether or not the weights
 *     are renormalised, as V3, transformers' V2 port and llama.cpp do; DeepSeek's own V2 code skips it
 *     when it renormalises, which no released V2 combines with a factor other than 1), norm_topk_prob
 *     (renormalised weights; transformers' V2 port ignores it; expert_weights_norm, default false as
 *     llama.cpp), n_shared_experts x moe_intermediate_size ungated shared experts (expert_shared_count
 *     x expert_feed_forward_length), first_k_dense_replace dense layers (leading_dense_block_count);
 *     GGUF without expert_gating_func is softmax (llama.cpp's default for old V2 files);
 *   - GLM-4.7-Flash (transformers' modular_glm4_moe_lite.py: Glm4MoeLiteForCausalLM, DeepseekV3Attention with
 *     GLM-4.5's sigmoid router) reads as V3 with its config class's defaults (routed_scaling_factor 1.8,
 *     norm_topk_prob true) and its dense layers from mlp_layer_types ("dense" entries, which must lead);
 *   - the multi-token-prediction layers (num_nextn_predict_layers; GGUF nextn_predict_layers, counted in
 *     block_count; their tensors blk.{n_layers}.* with llama.cpp's nextn.* names, Hugging Face's
 *     model.layers.{num_hidden_layers}.*) are read only when the model loads with the mtp option, as a
 *     speculative draft source (deepseek2_mtp.c, which checks the head's tensors itself: the schema covers
 *     the decoder's layers).
 * Pith's hp.head_dim is v_head_dim and hp.n_kv_heads 1 (the one latent "head"), so that attn_output is
 * PITH_D_Q wide; the MLA widths are in pith_deepseek2_params. */
#include <cjson/cJSON.h>
#include <math.h>
#include <string.h>

#include "model/deepseek2.h"
#include "model/llama_arch.h"
#include "model/moe_arch.h"

static const pith_name_map ds2_hf_layer[] = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"post_attention_layernorm.weight", "ffn_norm.weight"},
    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.q_a_proj.weight", "attn_q_a.weight"},
    {"self_attn.q_a_layernorm.weight", "attn_q_a_norm.weight"},
    {"self_attn.q_b_proj.weight", "attn_q_b.weight"},
    {"self_attn.kv_a_proj_with_mqa.weight", "attn_kv_a_mqa.weight"},
    {"self_attn.kv_a_layernorm.weight", "attn_kv_a_norm.weight"},
    {"self_attn.kv_b_proj.weight", "attn_kv_b.weight"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"mlp.gate_proj.weight", "ffn_gate.weight"},
    {"mlp.up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
    {"mlp.gate.weight", "ffn_gate_inp.weight"},
    {"mlp.gate.e_score_correction_bias", "exp_probs_b.bias"},
    {"mlp.shared_experts.gate_proj.weight", "ffn_gate_shexp.weight"},
    {"mlp.shared_experts.up_proj.weight", "ffn_up_shexp.weight"},
    {"mlp.shared_experts.down_proj.weight", "ffn_down_shexp.weight"},
    /* the MTP layer's own tensors (model.layers.{num_hidden_layers}.*), as llama.cpp's converter names them */
    {"eh_proj.weight", "nextn.eh_proj.weight"},
    {"enorm.weight", "nextn.enorm.weight"},
    {"hnorm.weight", "nextn.hnorm.weight"},
    {"embed_tokens.weight", "nextn.embed_tokens.weight"},
    {"shared_head.head.weight", "nextn.shared_head_head.weight"},
    {"shared_head.norm.weight", "nextn.shared_head_norm.weight"},
    {NULL, NULL},
};

static bool dense_layer(const pith_hparams *hp, int l) { return pith_moe_dense_layer(hp, l); }

/* The MLA tensors' widths (ranks, rope) have no symbol: deepseek2.c checks their shapes as it binds them. */
static const pith_tensor_spec ds2_layer_tensors[] = {
    {"attn_norm.weight", PITH_D_DIM, PITH_D_NONE, PITH_REQUIRED, NULL},
    {"attn_output.weight", PITH_D_Q, PITH_D_DIM, PITH_REQUIRED, NULL},
    {"ffn_norm.weight", PITH_D_DIM, PITH_D_NONE, PITH_REQUIRED, NULL},
    {"ffn_gate.weight", PITH_D_DIM, PITH_D_FFN, PITH_REQUIRED, dense_layer},
    {"ffn_up.weight", PITH_D_DIM, PITH_D_FFN, PITH_REQUIRED, dense_layer},
    {"ffn_down.weight", PITH_D_FFN, PITH_D_DIM, PITH_REQUIRED, dense_layer},
    {NULL, 0, 0, 0, NULL},
};

/* The widths every format ends with: head_dim = v, one KV "head". */
static int ds2_widths(const pith_meta *m, pith_hparams *hp) {
    pith_deepseek2_params *P = pith_arch_params(hp);
    hp->head_dim = P->v_dim;
    hp->n_kv_heads = 1;
    if (P->kv_lora_rank < 1 || P->qk_rope < 2 || P->qk_rope % 2 || P->qk_nope < 1 || P->v_dim < 2 || P->v_dim % 2 ||
        P->q_lora_rank < 0 || P->kv_lora_rank > (1 << 16) || P->q_lora_rank > (1 << 16) || P->qk_nope > (1 << 14) ||
        P->qk_rope > (1 << 14) || P->v_dim > (1 << 14))
        return pith_errf(m->err, "%s: MLA widths out of range (kv_lora_rank %d, q_lora_rank %d, nope %d, rope %d, v %d)",
                         m->path, P->kv_lora_rank, P->q_lora_rank, P->qk_nope, P->qk_rope, P->v_dim);
    return 0;
}

static int ds2_read_gguf(const pith_meta *m, pith_hparams *hp) {
    pith_deepseek2_params *P = pith_arch_params(hp);
    int key = -1, val = -1, key_mla = -1, val_mla = -1, shared = 0, nextn = 0;
    float log_mul = 0, attn = 1;
    if (pith_moe_read_gguf(m, hp, false) || pith_meta_int(m, "attention.q_lora_rank", false, &P->q_lora_rank) ||
        pith_meta_int(m, "attention.kv_lora_rank", true, &P->kv_lora_rank) ||
        pith_meta_int(m, "attention.key_length", false, &key) || pith_meta_int(m, "attention.value_length", false, &val) ||
        pith_meta_int(m, "attention.key_length_mla", false, &key_mla) ||
        pith_meta_int(m, "attention.value_length_mla", false, &val_mla) ||
        pith_meta_int(m, "rope.dimension_count", true, &P->qk_rope) ||
        pith_meta_int(m, "expert_shared_count", false, &shared) ||
        pith_meta_float(m, "rope.scaling.yarn_log_multiplier", false, &log_mul) ||
        pith_meta_float(m, "rope.scaling.attn_factor", false, &attn) ||
        pith_meta_int(m, "nextn_predict_layers", false, &nextn))
        return -1;
    if ((key_mla == -1) != (val_mla == -1))
        return pith_errf(m->err, "%s: %s.attention.key_length_mla and value_length_mla go together", m->path, m->arch);
    if (key_mla != -1) key = key_mla, val = val_mla; /* converted for MLA: the plain keys are the latent's */
    if (key < 0 || val < 0)
        return pith_errf(m->err, "%s: %s.attention.key_length and value_length are required", m->path, m->arch);
    P->qk_nope = key - P->qk_rope;
    P->v_dim = val;
    if (shared < 0 || shared > 64) return pith_errf(m->err, "%s: %s.expert_shared_count %d", m->path, m->arch, shared);
    if (hp->n_experts > 0) hp->expert_shared_ffn_dim = shared * hp->expert_ffn_dim;
    if (nextn < 0 || nextn >= hp->n_layers)
        return pith_errf(m->err, "%s: %s.nextn_predict_layers %d of %d blocks", m->path, m->arch, nextn, hp->n_layers);
    hp->n_layers -= nextn; /* the MTP layers are not run */
    hp->n_mtp_layers = nextn; /* run as a draft source with the mtp option (deepseek2_mtp.c) */
    P->kq_mscale2 = 1;
    if (hp->rope_yarn_factor > 0) {
        if (!(isfinite(log_mul) && isfinite(attn) && attn > 0))
            return pith_errf(m->err, "%s: YaRN attn_factor %g / yarn_log_multiplier %g", m->path, attn, log_mul);
        double ms = attn * (hp->rope_yarn_factor > 1 ? 1 + log_mul * log(hp->rope_yarn_factor) : 1);
        hp->rope_yarn_mscale = attn; /* llama.cpp cancels its own 1 + 0.1 ln factor for deepseek2 */
        P->kq_mscale2 = ms * ms;
    }
    return ds2_widths(m, hp);
}

/* "architectures"[0], else "model_type", is `name` or `type`. */
static bool hf_is(const pith_meta *m, const char *name, const char *type) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(m->json, "architectures");
    const cJSON *first = cJSON_IsArray(a) ? cJSON_GetArrayItem(a, 0) : NULL;
    if (cJSON_IsString(first)) return strcmp(first->valuestring, name) == 0;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(m->json, "model_type");
    return cJSON_IsString(t) && !strcmp(t->valuestring, type);
}

/* GLM-4.7-Flash's mlp_layer_types: its "dense" layers, which must be the leading ones. */
static int glm_dense_layers(const pith_meta *m, pith_hparams *hp) {
    uint64_t dense[PITH_MAX_LAYERS / 64] = {0};
    bool found;
    if (pith_meta_layers(m, "mlp_layer_types", hp->n_layers, "dense", dense, &found)) return -1;
    if (!found) return 0;
    int lead = 0;
    while (lead < hp->n_layers && pith_layer_bit(dense, lead)) lead++;
    for (int l = lead; l < hp->n_layers; l++)
        if (pith_layer_bit(dense, l))
            return pith_errf(m->err, "%s: mlp_layer_types: dense layer %d after sparse ones is not supported", m->path, l);
    hp->expert_dense_leading = lead;
    return 0;
}

static int ds2_read_hf(const pith_meta *m, pith_hparams *hp) {
    pith_deepseek2_params *P = pith_arch_params(hp);
    const bool glm = hf_is(m, "Glm4MoeLiteForCausalLM", "glm4_moe_lite");
    const bool v3 = glm || !hf_is(m, "DeepseekV2ForCausalLM", "deepseek_v2");
    int shared = 0, freq = 1;
    bool interleave = true;
    float mscale_all = 0;
    char scoring[16] = "", method[32] = "";
    hp->expert_norm_topk = v3;              /* the config classes' defaults */
    hp->expert_weights_scale = glm ? 1.8f : v3 ? 2.5f : 1.0f;
    if (glm) hp->expert_dense_leading = 1; /* mlp_layer_types' default: the first layer dense */
    if (pith_meta_int(m, "q_lora_rank", false, &P->q_lora_rank) ||
        pith_meta_int(m, "kv_lora_rank", true, &P->kv_lora_rank) ||
        pith_meta_int(m, "qk_nope_head_dim", true, &P->qk_nope) ||
        pith_meta_int(m, "qk_rope_head_dim", true, &P->qk_rope) || pith_meta_int(m, "v_head_dim", true, &P->v_dim) ||
        pith_meta_int(m, "n_routed_experts", false, &hp->n_experts) ||
        pith_meta_int(m, "num_experts_per_tok", false, &hp->n_experts_used) ||
        pith_meta_int(m, "moe_intermediate_size", false, &hp->expert_ffn_dim) ||
        pith_meta_int(m, "n_shared_experts", false, &shared) ||
        pith_meta_int(m, "first_k_dense_replace", false, &hp->expert_dense_leading) ||
        pith_meta_int(m, "moe_layer_freq", false, &freq) || pith_meta_bool(m, "norm_topk_prob", &hp->expert_norm_topk) ||
        pith_meta_float(m, "routed_scaling_factor", false, &hp->expert_weights_scale) ||
        pith_meta_int(m, "n_group", false, &hp->expert_groups) ||
        pith_meta_int(m, "topk_group", false, &hp->expert_groups_used) ||
        pith_meta_str(m, "scoring_func", scoring, sizeof scoring) ||
        pith_meta_str(m, "topk_method", method, sizeof method) || pith_meta_bool(m, "rope_interleave", &interleave) ||
        pith_meta_int(m, "num_nextn_predict_layers", false, &hp->n_mtp_layers))
        return -1;
    if (hp->n_mtp_layers < 0 || hp->n_mtp_layers > 64)
        return pith_errf(m->err, "%s: \"num_nextn_predict_layers\" is %d, expected 0..64", m->path, hp->n_mtp_layers);
    if (glm && glm_dense_layers(m, hp)) return -1;
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(m->json, "rope_scaling");
    if (cJSON_IsObject(rs)) {
        pith_meta sub = *m;
        sub.json = rs;
        if (pith_meta_float(&sub, "mscale_all_dim", false, &mscale_all)) return -1;
    }
    if (freq != 1) return pith_errf(m->err, "%s: moe_layer_freq %d is not supported (1 only)", m->path, freq);
    if (shared < 0 || shared > 64) return pith_errf(m->err, "%s: n_shared_experts %d", m->path, shared);
    if (hp->n_experts > 0) hp->expert_shared_ffn_dim = shared * hp->expert_ffn_dim;
    if (!v3 && strcmp(method, "group_limited_greedy") != 0) hp->expert_groups = hp->expert_groups_used = 0;
    if (v3 && scoring[0] && strcmp(scoring, "sigmoid") != 0)
        return pith_errf(m->err, "%s: scoring_func \"%s\" is not DeepSeek-V3's sigmoid", m->path, scoring);
    if (!v3 && scoring[0] && strcmp(scoring, "softmax") != 0)
        return pith_errf(m->err, "%s: scoring_func \"%s\" is not supported for DeepSeek-V2 (softmax)", m->path, scoring);
    hp->expert_gating = v3 ? PITH_GATING_SIGMOID : PITH_GATING_SOFTMAX;
    hp->rope_style = interleave ? PITH_ROPE_ADJACENT : PITH_ROPE_HALF;
    P->kq_mscale2 = 1;
    if (hp->rope_yarn_factor > 1 && mscale_all != 0) {
        double ms = 0.1 * mscale_all * log(hp->rope_yarn_factor) + 1;
        P->kq_mscale2 = ms * ms;
    }
    return ds2_widths(m, hp);
}

static int ds2_check(const pith_hparams *hp, const char *path, pith_err *err) {
    if (pith_moe_check_hparams(hp, false, path, err)) return -1;
    if (hp->n_experts > 0 && hp->expert_dense_leading < hp->n_layers && hp->expert_ffn_dim < 1)
        return pith_errf(err, "%s: experts without a width", path);
    return 0;
}

const pith_arch pith_arch_deepseek2 = {
    .name = "deepseek2",
    .hf_archs = (const char *const[]){"DeepseekV3ForCausalLM", "DeepseekV2ForCausalLM", "Glm4MoeLiteForCausalLM", NULL},
    .hf_model_types = (const char *const[]){"deepseek_v3", "deepseek_v2", "kimi_k2", "glm4_moe_lite", NULL},
    .rope_gguf = PITH_ROPE_ADJACENT,
    .rope_hf = PITH_ROPE_ADJACENT, /* rope_interleave false: read_hf makes it HALF */
    .hf_global = pith_llama_hf_global,
    .hf_layer = ds2_hf_layer,
    .global = pith_llama_global,
    .layer = ds2_layer_tensors,
    .read_gguf = ds2_read_gguf,
    .read_hf = ds2_read_hf,
    .check = ds2_check,
    .build = pith_deepseek2_build,
    .params_size = sizeof(pith_deepseek2_params),
    .partial_rotary = true,
    .own_head_widths = true,
};
