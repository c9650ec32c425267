/* Qwen3.5-MoE: Qwen3.5 (qwen35_arch.c: Gated DeltaNet layers with a gated attention layer every
 * full_attention_interval-th) whose every FFN is a mixture of experts with a shared expert (model/moe.h):
 * softmax over the experts, the top k renormalised, plus the shared expert's SwiGLU times
 * sigmoid(shared_expert_gate x). See model/arch.h; the forward pass is qwen35.c (its MoE FFN through
 * moe.c), written from transformers' modular_qwen3_5_moe.py (Qwen3NextSparseMoeBlock,
 * Qwen3VLMoeTextTopKRouter) and llama.cpp's src/models/qwen35moe.cpp.
 *
 * GGUF (arch "qwen35moe"): qwen35's keys plus expert_count, expert_used_count,
 * expert_feed_forward_length, expert_shared_feed_forward_length (feed_forward_length may be absent:
 * there is no dense FFN); blk.N.ffn_gate_inp.weight, ffn_{gate,up,down}_exps.weight,
 * ffn_{gate,up,down}_shexp.weight and ffn_gate_inp_shexp.weight ({dim}). The weights are always
 * renormalised (llama.cpp's norm_w), unless expert_weights_norm says otherwise.
 * config.json (Qwen3_5MoeForCausalLM, or Qwen3_5MoeForConditionalGeneration with the text model under
 * "text_config" and "model.language_model."): qwen35's keys plus num_experts, num_experts_per_tok,
 * moe_intermediate_size, shared_expert_intermediate_size (no intermediate_size); tensors mlp.gate.weight,
 * mlp.experts.E.{gate,up,down}_proj.weight, mlp.shared_expert.{gate,up,down}_proj.weight,
 * mlp.shared_expert_gate.weight ([1, dim]); the released checkpoints fuse each layer's experts instead
 * (transformers 5's layout): mlp.experts.gate_up_proj [experts, 2 x ffn, dim] (gate rows, then up rows)
 * and mlp.experts.down_proj [experts, dim, ffn], read in place as GGUF's 3-D tensors. */
#include "model/moe_arch.h"
#include "model/qwen35.h"

/* No dense FFN: its width is the experts' (the hyper-parameter checks want one). */
static void expert_width(pith_hparams *hp) {
    if (hp->ffn_dim <= 0) hp->ffn_dim = hp->expert_ffn_dim;
}

static int qwen35moe_read_gguf(const pith_meta *m, pith_hparams *hp) {
    if (pith_qwen35_read_gguf(m, hp) || pith_moe_read_gguf(m, hp, true)) return -1;
    expert_width(hp);
    return 0;
}

static int qwen35moe_read_hf(const pith_meta *m, pith_hparams *hp) {
    if (pith_qwen35_read_hf(m, hp) || pith_meta_int(m, "num_experts", true, &hp->n_experts) ||
        pith_meta_int(m, "num_experts_per_tok", true, &hp->n_experts_used) ||
        pith_meta_int(m, "moe_intermediate_size", true, &hp->expert_ffn_dim) ||
        pith_meta_int(m, "shared_expert_intermediate_size", false, &hp->expert_shared_ffn_dim))
        return -1;
    hp->expert_gating = PITH_GATING_SOFTMAX;
    hp->expert_norm_topk = true; /* Qwen3VLMoeTextTopKRouter always renormalises */
    expert_width(hp);
    return 0;
}

static int qwen35moe_check(const pith_hparams *hp, const char *path, pith_err *err) {
    return pith_qwen35_check(hp, path, err) || pith_moe_check_hparams(hp, true, path, err) ? -1 : 0;
}

const pith_arch pith_arch_qwen35moe = {
    .name = "qwen35moe",
    .hf_archs = (const char *const[]){"Qwen3_5MoeForCausalLM", "Qwen3_5MoeForConditionalGeneration", NULL},
    .hf_model_types = (const char *const[]){"qwen3_5_moe_text", "qwen3_5_moe", NULL},
    .hf_text_config = true,
    .rope_gguf = PITH_ROPE_HALF,
    .rope_hf = PITH_ROPE_HALF,
    .hf_global = pith_qwen35_hf_global,
    .hf_layer = pith_qwen35_hf_layer,
    .hf_mtp = pith_qwen35_hf_mtp,
    .global = pith_qwen35_global,
    .layer = pith_qwen35_layer,
    .read_gguf = qwen35moe_read_gguf,
    .read_hf = qwen35moe_read_hf,
    .check = qwen35moe_check,
    .finish = pith_qwen35_finish,
    .build = pith_qwen35_build,
    .params_size = sizeof(pith_qwen35_params),
    .partial_rotary = true,
};
