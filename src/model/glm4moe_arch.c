/* GLM-4.5 / 4.6 / 4.7 (`glm4moe`, Hugging Face Glm4MoeForCausalLM, model_type "glm4_moe"): the descriptor.
 * The forward pass is glm4moe.c; the math follows transformers' models/glm4_moe/modeling_glm4_moe.py.
 *
 * What the architecture has (and where each fact comes from):
 *   - attention with optional Q/K/V biases ("attention_bias"; GGUF: the tensors decide, as llama.cpp's
 *     create_tensor_qkv) and optional per-head QK RMSNorm ("use_qk_norm"; llama.cpp loads
 *     attn_{q,k}_norm as TENSOR_NOT_REQUIRED);
 *   - partial RoPE over the first rope_dim = int(head_dim * partial_rotary_factor) dimensions of each head,
 *     rotating halves of that part (modeling_glm4_moe.py's apply_rotary_pos_emb: rotate_half of
 *     q[..., :rotary_dim]); GGUF {arch}.rope.dimension_count, and llama.cpp's converter does not permute
 *     Q/K ("GLM4V_MOE uses Neox ordering already"), so both formats rotate halves. config.json's
 *     partial_rotary_factor defaults to 0.5 (configuration_glm4_moe.py), also read from
 *     "rope_parameters" where newer configs put it;
 *   - the FFN pre-norm is post_attention_layernorm, GGUF blk.N.post_attention_norm.weight (llama.cpp's
 *     LLM_TENSOR_ATTN_POST_NORM, used as the FFN input norm in src/models/glm4-moe.cpp);
 *   - the first first_k_dense_replace layers (GGUF leading_dense_block_count) have a dense SwiGLU FFN of
 *     intermediate_size; the others route: sigmoid scores, the choice by score + e_score_correction_bias
 *     (GGUF blk.N.exp_probs_b.bias, required in every expert layer as llama.cpp requires it), within the
 *     topk_group best of n_group groups (GGUF expert_group_count / _used_count; llama.cpp's glm4moe reads
 *     neither, real models have 1 group; transformers scores a closed group's experts 0 where the backend
 *     leaves them out, the same choice while keys are positive), the chosen scores renormalised when
 *     norm_topk_prob (GGUF expert_weights_norm; llama.cpp's default false) and times
 *     routed_scaling_factor (GGUF
 *     expert_weights_scale), plus n_shared_experts ungated shared experts of moe_intermediate_size each
 *     (GGUF expert_shared_count, required as llama.cpp's get_key requires it; the shared width is
 *     count x expert_feed_forward_length, llama.cpp's n_ff_exp * n_expert_shared);
 *   - GGUF expert_gating_func absent or 0: sigmoid (llama.cpp's glm4moe default); config.json: always
 *     sigmoid (route_tokens_to_experts);
 *   - the next-token-prediction (MTP) layers: GGUF block_count counts them (convert_hf_to_gguf.py's
 *     Glm4MoeModel adds num_nextn_predict_layers) and {arch}.nextn_predict_layers says how many, so the
 *     decoder has block_count - nextn layers; config.json's num_hidden_layers does not count them and
 *     their tensors are model.layers.{num_hidden_layers}.* (transformers ignores them). Either way they
 *     land in blk.{n_layers}.* (eh_proj, enorm, hnorm, shared_head.* as llama.cpp's nextn.* names). They
 *     are read only when the model loads with the mtp option, as a speculative draft source
 *     (glm4moe_mtp.c, which checks the head's tensors itself: the schema covers the decoder's layers). */
#include "model/glm4moe.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

#include "format/arch.h"
#include "model/llama_arch.h"
#include "model/moe_arch.h"

static const pith_name_map glm4moe_hf_layer[] = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.k_proj.weight", "attn_k.weight"},
    {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"self_attn.q_proj.bias", "attn_q.bias"},
    {"self_attn.k_proj.bias", "attn_k.bias"},
    {"self_attn.v_proj.bias", "attn_v.bias"},
    {"self_attn.q_norm.weight", "attn_q_norm.weight"},
    {"self_attn.k_norm.weight", "attn_k_norm.weight"},
    {"post_attention_layernorm.weight", "post_attention_norm.weight"},
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

static const pith_tensor_spec glm4moe_global[] = {
    {"token_embd.weight", PITH_D_DIM, PITH_D_VOCAB, PITH_REQUIRED, NULL},
    {"output_norm.weight", PITH_D_DIM, PITH_D_NONE, PITH_REQUIRED, NULL},
    {"output.weight", PITH_D_DIM, PITH_D_VOCAB, PITH_OPTIONAL, NULL}, /* absent: tied to token_embd */
    {NULL, 0, 0, 0, NULL},
};

static const pith_tensor_spec glm4moe_layer[] = {
    {"attn_norm.weight", PITH_D_DIM, PITH_D_NONE, PITH_REQUIRED, NULL},
    {"attn_q.weight", PITH_D_DIM, PITH_D_Q, PITH_REQUIRED, NULL},
    {"attn_k.weight", PITH_D_DIM, PITH_D_KV, PITH_REQUIRED, NULL},
    {"attn_v.weight", PITH_D_DIM, PITH_D_KV, PITH_REQUIRED, NULL},
    {"attn_output.weight", PITH_D_Q, PITH_D_DIM, PITH_REQUIRED, NULL},
    {"attn_q.bias", PITH_D_Q, PITH_D_NONE, PITH_ALL_OR_NONE, NULL},
    {"attn_k.bias", PITH_D_KV, PITH_D_NONE, PITH_ALL_OR_NONE, NULL},
    {"attn_v.bias", PITH_D_KV, PITH_D_NONE, PITH_ALL_OR_NONE, NULL},
    {"attn_q_norm.weight", PITH_D_HEAD, PITH_D_NONE, PITH_ALL_OR_NONE, NULL},
    {"attn_k_norm.weight", PITH_D_HEAD, PITH_D_NONE, PITH_ALL_OR_NONE, NULL},
    {"post_attention_norm.weight", PITH_D_DIM, PITH_D_NONE, PITH_REQUIRED, NULL}, /* the FFN's pre-norm */
    /* the leading dense layers; the experts' tensors are checked by moe_load.c and glm4moe_finish */
    {"ffn_gate.weight", PITH_D_DIM, PITH_D_FFN, PITH_REQUIRED, pith_moe_dense_layer},
    {"ffn_up.weight", PITH_D_DIM, PITH_D_FFN, PITH_REQUIRED, pith_moe_dense_layer},
    {"ffn_down.weight", PITH_D_FFN, PITH_D_DIM, PITH_REQUIRED, pith_moe_dense_layer},
    {NULL, 0, 0, 0, NULL},
};

static int glm4moe_read_gguf(const pith_meta *m, pith_hparams *hp) {
    pith_glm4moe_params *P = pith_arch_params(hp);
    int shared = -1, gating = 0;
    P->hf_attention_bias = P->hf_qk_norm = -1;
    /* llama.cpp's glm4moe requires expert_count and expert_used_count (get_key without a default) */
    if (pith_moe_read_gguf(m, hp, false) || pith_meta_int(m, "expert_count", true, &hp->n_experts) ||
        pith_meta_int(m, "expert_used_count", true, &hp->n_experts_used) ||
        pith_meta_int(m, "expert_gating_func", false, &gating) ||
        pith_meta_int(m, "expert_shared_count", true, &shared) ||
        pith_meta_int(m, "rope.dimension_count", false, &P->rope_dim) ||
        pith_meta_int(m, "nextn_predict_layers", false, &hp->n_mtp_layers))
        return -1;
    /* llama.cpp: no gating function (0) is sigmoid for glm4moe; 1 softmax and 2 sigmoid as written */
    if (gating == 0) hp->expert_gating = PITH_GATING_SIGMOID;
    if (shared < 0 || shared > 64)
        return pith_errf(m->err, "%s: %s.expert_shared_count %d, expected 0..64", m->path, m->arch, shared);
    hp->expert_shared_ffn_dim = shared * hp->expert_ffn_dim;
    /* block_count counts the MTP layers, which follow the decoder's */
    if (hp->n_mtp_layers < 0 || hp->n_mtp_layers >= hp->n_layers)
        return pith_errf(m->err, "%s: %s.nextn_predict_layers %d of %d blocks", m->path, m->arch, hp->n_mtp_layers,
                         hp->n_layers);
    hp->n_layers -= hp->n_mtp_layers;
    return 0;
}

static int glm4moe_read_hf(const pith_meta *m, pith_hparams *hp) {
    pith_glm4moe_params *P = pith_arch_params(hp);
    int shared = 1, groups = 1, groups_used = 1;
    float partial = 0.5f, scale = 1.0f;
    bool bias = false, qk_norm = false;
    /* configuration_glm4_moe.py's defaults */
    hp->expert_norm_topk = true;
    hp->expert_dense_leading = 1;
    if (pith_meta_int(m, "n_routed_experts", true, &hp->n_experts) ||
        pith_meta_int(m, "num_experts_per_tok", true, &hp->n_experts_used) ||
        pith_meta_int(m, "moe_intermediate_size", true, &hp->expert_ffn_dim) ||
        pith_meta_int(m, "n_shared_experts", false, &shared) ||
        pith_meta_int(m, "first_k_dense_replace", false, &hp->expert_dense_leading) ||
        pith_meta_int(m, "n_group", false, &groups) || pith_meta_int(m, "topk_group", false, &groups_used) ||
        pith_meta_float(m, "routed_scaling_factor", false, &scale) ||
        pith_meta_bool(m, "norm_topk_prob", &hp->expert_norm_topk) ||
        pith_meta_bool(m, "attention_bias", &bias) || pith_meta_bool(m, "use_qk_norm", &qk_norm) ||
        pith_meta_float(m, "partial_rotary_factor", false, &partial) ||
        pith_meta_int(m, "num_nextn_predict_layers", false, &hp->n_mtp_layers))
        return -1;
    const cJSON *rp = cJSON_GetObjectItemCaseSensitive((const cJSON *)m->json, "rope_parameters");
    if (rp && !cJSON_IsNull(rp)) {
        if (!cJSON_IsObject(rp)) return pith_errf(m->err, "%s: \"rope_parameters\" is not an object", m->path);
        pith_meta r = *m;
        r.json = rp;
        if (pith_meta_float(&r, "rope_theta", false, &hp->rope_theta) ||
            pith_meta_float(&r, "partial_rotary_factor", false, &partial))
            return -1;
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(rp, "rope_type");
        if (type && !(cJSON_IsString(type) && !strcmp(type->valuestring, "default")))
            return pith_errf(m->err, "%s: rope_parameters.rope_type other than \"default\" is not supported", m->path);
    }
    if (shared < 0 || shared > 64)
        return pith_errf(m->err, "%s: \"n_shared_experts\" is %d, expected 0..64", m->path, shared);
    if (hp->n_mtp_layers < 0 || hp->n_mtp_layers > 64)
        return pith_errf(m->err, "%s: \"num_nextn_predict_layers\" is %d, expected 0..64", m->path, hp->n_mtp_layers);
    if (!(partial > 0 && partial <= 1))
        return pith_errf(m->err, "%s: \"partial_rotary_factor\" %g is not in (0, 1]", m->path, (double)partial);
    if (!(scale > 0)) /* 0 would read as "none" below */
        return pith_errf(m->err, "%s: \"routed_scaling_factor\" %g is not positive", m->path, (double)scale);
    hp->expert_gating = PITH_GATING_SIGMOID;
    hp->expert_shared_ffn_dim = shared * hp->expert_ffn_dim;
    hp->expert_groups = groups;
    hp->expert_groups_used = groups_used;
    hp->expert_weights_scale = scale;
    P->hf_attention_bias = bias, P->hf_qk_norm = qk_norm;
    /* transformers: int(head_dim * partial_rotary_factor), head_dim defaulting to hidden / heads */
    int hd = hp->head_dim > 0 ? hp->head_dim : hp->n_heads > 0 ? hp->dim / hp->n_heads : 0;
    P->rope_dim = (int)(hd * (double)partial);
    return 0;
}

static int glm4moe_check(const pith_hparams *hp, const char *path, pith_err *err) {
    const pith_glm4moe_params *P = pith_arch_params(hp);
    if (pith_moe_check_hparams(hp, true, path, err)) return -1;
    if (P->rope_dim < 0 || P->rope_dim > hp->head_dim || P->rope_dim % 2)
        return pith_errf(err, "%s: RoPE over %d of %d head dimensions (expected an even count up to the head)", path,
                         P->rope_dim, hp->head_dim);
    if (hp->expert_dense_leading > 0 && hp->ffn_dim < 1)
        return pith_errf(err, "%s: %d leading dense layers but no dense feed-forward width", path,
                         hp->expert_dense_leading);
    return 0;
}

/* After the schema: the QKV biases and QK norms (all-or-none) from layer 0, against config.json's claims;
 * in every expert layer the selection bias (the router and the experts are checked when they load,
 * moe_load.c). */
static int glm4moe_finish(pith_model_file *f, pith_hparams *hp, pith_err *err) {
    const pith_glm4moe_params *P = pith_arch_params(hp);
    const char *path = pith_model_file_path(f);
    if (pith_llama_finish(f, hp, err)) return -1;
    if (P->hf_attention_bias >= 0 && P->hf_attention_bias != hp->has_qkv_bias)
        return pith_errf(err, "%s: config.json says \"attention_bias\": %s, but the checkpoint has %s Q/K/V "
                              "biases (blk.0.attn_q.bias)", path, P->hf_attention_bias ? "true" : "false",
                         hp->has_qkv_bias ? "them" : "no");
    if (P->hf_qk_norm >= 0 && P->hf_qk_norm != hp->has_qk_norm)
        return pith_errf(err, "%s: config.json says \"use_qk_norm\": %s, but the checkpoint has %s Q/K norms "
                              "(blk.0.attn_q_norm.weight)", path, P->hf_qk_norm ? "true" : "false",
                         hp->has_qk_norm ? "them" : "no");
    for (int l = 0; l < hp->n_layers; l++) {
        if (pith_moe_dense_layer(hp, l)) continue;
        char name[64];
        snprintf(name, sizeof name, "blk.%d.exp_probs_b.bias", l);
        const pith_tensor *t = pith_model_file_tensor(f, name);
        if (!t) return pith_errf(err, "%s: missing tensor %s (the experts' selection bias)", path, name);
        if (pith_tensor_nelems(t) != hp->n_experts || t->ne[0] != hp->n_experts)
            return pith_errf(err, "%s: tensor %s: %lld elements, expected %d (one per expert)", path, name,
                             (long long)pith_tensor_nelems(t), hp->n_experts);
    }
    return 0;
}

const pith_arch pith_arch_glm4moe = {
    .name = "glm4moe",
    .hf_archs = (const char *const[]){"Glm4MoeForCausalLM", NULL},
    .hf_model_types = (const char *const[]){"glm4_moe", NULL},
    .rope_gguf = PITH_ROPE_HALF,
    .rope_hf = PITH_ROPE_HALF,
    .hf_global = pith_llama_hf_global,
    .hf_layer = glm4moe_hf_layer,
    .global = glm4moe_global,
    .layer = glm4moe_layer,
    .read_gguf = glm4moe_read_gguf,
    .read_hf = glm4moe_read_hf,
    .check = glm4moe_check,
    .finish = glm4moe_finish,
    .build = pith_glm4moe_build,
    .params_size = sizeof(pith_glm4moe_params),
    .partial_rotary = true,
};
