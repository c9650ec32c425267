/* Qwen3-Next (Qwen3-Next-80B-A3B; transformers' Qwen3NextForCausalLM, model_type "qwen3_next"; llama.cpp's
 * LLM_ARCH_QWEN3NEXT, "qwen3next"): the hybrid that preceded Qwen3.5. Three Gated DeltaNet layers, then
 * one gated attention layer (full_attention_interval 4), every FFN a mixture of experts with a shared
 * expert gated by sigmoid(shared_expert_gate x). The math is Qwen3.5-MoE's, and so is the forward pass
 * (qwen35.c, through the qwen35 descriptor's hooks): written from transformers' modeling_qwen3_next.py
 * (Qwen3NextGatedDeltaNet, Qwen3NextAttention, Qwen3NextSparseMoeBlock, Qwen3NextTopKRouter) and
 * llama.cpp's src/models/qwen3next.cpp and convert_hf_to_gguf.py (Qwen3NextModel).
 *
 * What differs from Qwen3.5(-MoE):
 *   - the DeltaNet's input projections are fused, their rows grouped per key head: Hugging Face
 *     linear_attn.in_proj_qkvz holds, for each key head g, [q_g (dk) | k_g (dk) | v (r dv) | z (r dv)]
 *     (r = value heads / key heads; value heads g r .. g r + r - 1), and in_proj_ba [b (r) | a (r)] per key
 *     head (fix_query_key_value_ordering). llama.cpp's converter splits in_proj_qkvz into attn_qkv ([all
 *     q | all k | all v]) and attn_gate (all z), keeping the value heads grouped; its older files carry
 *     the fused tensor as ssm_in (the "legacy" path of qwen3next.cpp); in_proj_ba is ssm_ba, grouped, in
 *     every file. At load (finish) the fused tensors' rows are reordered into [q | k | v | z] and
 *     [beta | alpha], whose parts qwen35.c binds as Qwen3.5's attn_qkv, attn_gate, ssm_beta, ssm_alpha.
 *   - the value heads stay grouped in GGUF too (no tiled reorder: qwen3next.cpp repeats the key heads by
 *     interleaving), so q/k head h / r feeds value head h in both formats (pith_qwen35_params.qk_grouped).
 *   - plain partial RoPE (rotate-half over the first partial_rotary_factor of each head; config default
 *     0.25, Qwen3NextConfig), no M-RoPE sections.
 *   - the router's renormalisation follows "norm_topk_prob" (default true); GGUF always renormalises
 *     (llama.cpp hard-codes norm_w for qwen3next), unless expert_weights_norm says otherwise.
 *   - no dense layers: "decoder_sparse_step" and "mlp_only_layers" must leave every layer sparse (as in
 *     every released checkpoint; llama.cpp refuses a qwen3next without experts); others are refused.
 *   - the MTP layer ("mtp.*", mtp_num_hidden_layers) is not read: transformers ignores it
 *     (_keys_to_ignore_on_load_unexpected) and llama.cpp's converter drops it; its layer is a mixture of
 *     experts, which Pith's MTP head (qwen35_mtp.c) does not run.
 * Norms are (1 + w) (Qwen3NextRMSNorm; GGUF stores w + 1), the DeltaNet's gated norm plain w, A_log
 * stored (GGUF: -exp(A_log)): pith_qwen35_finish makes Hugging Face files GGUF's way.
 *
 * GGUF keys (qwen3next.*): qwen35's ssm.conv_kernel, ssm.state_size, ssm.group_count, ssm.time_step_rank,
 * ssm.inner_size, full_attention_interval (default 4), rope.dimension_count, plus
 * attention.recurrent_layers (a per-layer bool list, preferred over the interval as llama.cpp does) and
 * the expert keys (moe_arch.h). config.json: qwen35's linear_* keys, num_experts (512),
 * num_experts_per_tok (10), moe_intermediate_size (512), shared_expert_intermediate_size (512),
 * norm_topk_prob, decoder_sparse_step, mlp_only_layers (defaults: Qwen3NextConfig's); attention_bias true is
 * refused. Without expert_shared_feed_forward_length a GGUF's shared expert is feed_forward_length wide
 * (llama.cpp's fallback). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "format/arch.h"
#include "model/moe_arch.h"
#include "model/qwen35.h"

/* qwen35's names (the router and shared expert included) with the fused projections as llama.cpp names
 * them */
static const pith_name_map hf_layer[] = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"post_attention_layernorm.weight", "post_attention_norm.weight"},
    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.k_proj.weight", "attn_k.weight"},
    {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"self_attn.q_norm.weight", "attn_q_norm.weight"},
    {"self_attn.k_norm.weight", "attn_k_norm.weight"},
    {"linear_attn.in_proj_qkvz.weight", "ssm_in.weight"},
    {"linear_attn.in_proj_ba.weight", "ssm_ba.weight"},
    {"linear_attn.conv1d.weight", "ssm_conv1d.weight"},
    {"linear_attn.dt_bias", "ssm_dt.bias"},
    {"linear_attn.A_log", "ssm_a"},
    {"linear_attn.norm.weight", "ssm_norm.weight"},
    {"linear_attn.out_proj.weight", "ssm_out.weight"},
    {"mlp.gate.weight", "ffn_gate_inp.weight"},
    {"mlp.shared_expert.gate_proj.weight", "ffn_gate_shexp.weight"},
    {"mlp.shared_expert.up_proj.weight", "ffn_up_shexp.weight"},
    {"mlp.shared_expert.down_proj.weight", "ffn_down_shexp.weight"},
    {"mlp.shared_expert_gate.weight", "ffn_gate_inp_shexp.weight"},
    {NULL, NULL},
};

/* No dense FFN: its width is the experts' (the hyper-parameter checks want one). */
static void expert_width(pith_hparams *hp) {
    if (hp->ffn_dim <= 0) hp->ffn_dim = hp->expert_ffn_dim;
}

/* What the qwen35 readers set that Qwen3-Next does not have: the MTP head (not read) and the tiled
 * value-head order. */
static void next_only(pith_hparams *hp) {
    pith_qwen35_params *P = pith_arch_params(hp);
    P->qk_grouped = true;
    hp->n_mtp_layers = 0;
}

static int qwen3next_read_gguf(const pith_meta *m, pith_hparams *hp) {
    if (pith_qwen35_read_gguf(m, hp) || pith_moe_read_gguf(m, hp, true)) return -1;
    /* llama.cpp: without expert_shared_feed_forward_length the shared expert is feed_forward_length wide */
    if (!pith_meta_has(m, "expert_shared_feed_forward_length") && hp->ffn_dim > 0)
        hp->expert_shared_ffn_dim = hp->ffn_dim;
    uint64_t rec[PITH_MAX_LAYERS / 64] = {0};
    bool found;
    if (pith_meta_layers(m, "attention.recurrent_layers", hp->n_layers, "true", rec, &found)) return -1;
    if (found) memcpy(hp->layer_recurrent, rec, sizeof rec);
    expert_width(hp);
    next_only(hp);
    return 0;
}

static bool has_key(const pith_meta *m, const char *obj, const char *key) {
    const cJSON *j = (const cJSON *)m->json;
    if (obj) j = cJSON_GetObjectItemCaseSensitive(j, obj);
    const cJSON *v = cJSON_IsObject(j) ? cJSON_GetObjectItemCaseSensitive(j, key) : NULL;
    return v && !cJSON_IsNull(v);
}

static int qwen3next_read_hf(const pith_meta *m, pith_hparams *hp) {
    pith_qwen35_params *P = pith_arch_params(hp);
    hp->n_experts = 512, hp->n_experts_used = 10, hp->expert_ffn_dim = 512, hp->expert_shared_ffn_dim = 512;
    hp->expert_norm_topk = true;
    int sparse_step = 1;
    bool bias = false;
    if (pith_qwen35_read_hf(m, hp) || pith_meta_int(m, "num_experts", false, &hp->n_experts) ||
        pith_meta_int(m, "num_experts_per_tok", false, &hp->n_experts_used) ||
        pith_meta_int(m, "moe_intermediate_size", false, &hp->expert_ffn_dim) ||
        pith_meta_int(m, "shared_expert_intermediate_size", false, &hp->expert_shared_ffn_dim) ||
        pith_meta_bool(m, "norm_topk_prob", &hp->expert_norm_topk) ||
        pith_meta_int(m, "decoder_sparse_step", false, &sparse_step) || pith_meta_bool(m, "attention_bias", &bias))
        return -1;
    if (bias)
        return pith_errf(m->err, "%s: \"attention_bias\" true is not supported (no released model has biases)",
                         m->path);
    hp->expert_gating = PITH_GATING_SOFTMAX;
    /* Qwen3NextConfig: partial_rotary_factor defaults to 0.25 (qwen35's reader: 1) */
    if (!has_key(m, NULL, "partial_rotary_factor") && !has_key(m, "rope_parameters", "partial_rotary_factor")) {
        int hd = hp->head_dim > 0 ? hp->head_dim : hp->n_heads > 0 ? hp->dim / hp->n_heads : 0;
        P->rope_dim = (int)(hd * 0.25);
    }
    /* Qwen3NextDecoderLayer: sparse unless listed in mlp_only_layers or (l + 1) % decoder_sparse_step */
    if (sparse_step != 1)
        return pith_errf(m->err, "%s: \"decoder_sparse_step\" %d leaves dense layers, which are not supported",
                         m->path, sparse_step);
    const cJSON *only = cJSON_GetObjectItemCaseSensitive((const cJSON *)m->json, "mlp_only_layers");
    if (only && !cJSON_IsNull(only) && !(cJSON_IsArray(only) && cJSON_GetArraySize(only) == 0))
        return pith_errf(m->err, "%s: \"mlp_only_layers\" names dense layers, which are not supported", m->path);
    expert_width(hp);
    next_only(hp);
    return 0;
}

static int qwen3next_check(const pith_hparams *hp, const char *path, pith_err *err) {
    return pith_qwen35_check(hp, path, err) || pith_moe_check_hparams(hp, true, path, err) ? -1 : 0;
}

/* Reorders the rows of a tensor of n_groups groups, each made of parts of widths w[0..n_parts) rows, so
 * that part p of every group comes before part p + 1 of any: [a0 b0 a1 b1 ...] -> [a0 a1 ... b0 b1 ...]. */
static int ungroup(pith_model_file *f, const char *name, int n_groups, const int *w, int n_parts, pith_err *err) {
    void *data;
    const pith_tensor *t;
    if (pith_mf_own_bytes(f, name, &data, &t, err)) return -1;
    if (!data) return 0;
    int64_t group = 0;
    for (int p = 0; p < n_parts; p++) group += w[p];
    size_t rb = pith_dtype_row_bytes(t->type, t->ne[0]);
    if (!rb || t->ne[1] != group * n_groups || t->ne[2] != 1 || t->ne[3] != 1 || t->nbytes != rb * (size_t)t->ne[1])
        return pith_errf(err, "tensor %s: shape [%lld, %lld], expected [%lld, %lld]", name, (long long)t->ne[0],
                         (long long)t->ne[1], (long long)t->ne[0], (long long)(group * n_groups));
    unsigned char *src = malloc(t->nbytes);
    if (!src) return pith_errf(err, "out of memory");
    memcpy(src, data, t->nbytes);
    unsigned char *dst = data;
    for (int p = 0, at = 0; p < n_parts; at += w[p], p++)
        for (int g = 0; g < n_groups; g++, dst += (size_t)w[p] * rb)
            memcpy(dst, src + ((size_t)g * (size_t)group + (size_t)at) * rb, (size_t)w[p] * rb);
    free(src);
    return 0;
}

/* Hugging Face norms and A_log made GGUF's way (qwen35's finish), then the fused projections' rows
 * ungrouped in either format: ssm_in [q | k | v | z], ssm_ba [beta | alpha] (see the header comment). */
static int qwen3next_finish(pith_model_file *f, pith_hparams *hp, pith_err *err) {
    if (pith_qwen35_finish(f, hp, err)) return -1;
    const pith_qwen35_params *P = pith_arch_params(hp);
    int nk = P->gdn_k_heads, r = P->gdn_v_heads / P->gdn_k_heads;
    const int qkvz[4] = {P->gdn_k_dim, P->gdn_k_dim, r * P->gdn_v_dim, r * P->gdn_v_dim}, ba[2] = {r, r};
    char name[96];
    for (int l = 0; l < hp->n_layers; l++) {
        if (!pith_layer_bit(hp->layer_recurrent, l)) continue;
        /* the DeltaNet's projections, named as the file names them (qwen35.c would ask for Qwen3.5's) */
        char qkv[64];
        snprintf(name, sizeof name, "blk.%d.ssm_in.weight", l);
        snprintf(qkv, sizeof qkv, "blk.%d.attn_qkv.weight", l);
        if (!pith_model_file_tensor(f, name) && !pith_model_file_tensor(f, qkv))
            return pith_errf(err,
                             "missing tensor %s (Hugging Face model.layers.%d.linear_attn.in_proj_qkvz.weight) or %s",
                             name, l, qkv);
        if (ungroup(f, name, nk, qkvz, 4, err)) return -1;
        snprintf(name, sizeof name, "blk.%d.ssm_ba.weight", l);
        if (!pith_model_file_tensor(f, name))
            return pith_errf(err, "missing tensor %s (Hugging Face model.layers.%d.linear_attn.in_proj_ba.weight)",
                             name, l);
        if (ungroup(f, name, nk, ba, 2, err)) return -1;
    }
    return 0;
}

const pith_arch pith_arch_qwen3next = {
    .name = "qwen3next",
    .hf_archs = (const char *const[]){"Qwen3NextForCausalLM", NULL},
    .hf_model_types = (const char *const[]){"qwen3_next", NULL},
    .rope_gguf = PITH_ROPE_HALF,
    .rope_hf = PITH_ROPE_HALF,
    .hf_global = pith_qwen35_hf_global,
    .hf_layer = hf_layer,
    .global = pith_qwen35_global,
    .layer = pith_qwen35_layer,
    .read_gguf = qwen3next_read_gguf,
    .read_hf = qwen3next_read_hf,
    .check = qwen3next_check,
    .finish = qwen3next_finish,
    .build = pith_qwen35_build,
    .params_size = sizeof(pith_qwen35_params),
    .partial_rotary = true,
};
