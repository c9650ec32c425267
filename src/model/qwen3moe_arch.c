/* Qwen3-MoE: Qwen3's attention (QK norms, rotate-half RoPE) with a mixture-of-experts FFN in every
 * layer (model/moe.h; transformers' modeling_qwen3_moe.py Qwen3MoeSparseMoeBlock: softmax over the
 * experts, top-k, renormalised when norm_topk_prob). See model/arch.h.
 *
 * GGUF (llama.cpp src/models/qwen3moe.cpp): qwen3moe.expert_count, expert_used_count,
 * expert_feed_forward_length; blk.N.ffn_gate_inp.weight and the 3-D ffn_{gate,up,down}_exps.weight;
 * llama.cpp always renormalises (norm_w true, no key), so GGUF does here unless expert_weights_norm says
 * otherwise.
 * config.json: num_experts, num_experts_per_tok, moe_intermediate_size, norm_topk_prob (default false);
 * tensors mlp.gate.weight and mlp.experts.E.{gate,up,down}_proj.weight. Dense layers (mlp_only_layers,
 * decoder_sparse_step > 1) and sliding windows are refused: no released model uses them. */
#include "model/llama.h"
#include "model/llama_arch.h"
#include "model/moe_arch.h"

static int qwen3moe_read_gguf(const pith_meta *m, pith_hparams *hp) { return pith_moe_read_gguf(m, hp, true); }

static int qwen3moe_read_hf(const pith_meta *m, pith_hparams *hp) {
    bool window = false;
    hp->expert_norm_topk = false;
    if (pith_moe_read_hf_qwen(m, hp) || pith_meta_bool(m, "use_sliding_window", &window)) return -1;
    if (window) return pith_errf(m->err, "%s: \"use_sliding_window\" is not supported for qwen3_moe", m->path);
    return 0;
}

static int qwen3moe_check(const pith_hparams *hp, const char *path, pith_err *err) {
    return pith_moe_check_hparams(hp, true, path, err);
}

static int qwen3moe_build(pith_model_file *file, const pith_model_options *opt, pith_model **out, pith_err *err) {
    const pith_decoder_variant v = {
        .hf_experts = {"mlp.experts.%d.gate_proj.weight", "mlp.experts.%d.up_proj.weight",
                       "mlp.experts.%d.down_proj.weight"},
    };
    return pith_decoder_build(file, opt, &v, out, err);
}

const pith_arch pith_arch_qwen3moe = {
    .name = "qwen3moe",
    .hf_archs = (const char *const[]){"Qwen3MoeForCausalLM", NULL},
    .hf_model_types = (const char *const[]){"qwen3_moe", NULL},
    .rope_gguf = PITH_ROPE_HALF,
    .rope_hf = PITH_ROPE_HALF,
    .hf_global = pith_llama_hf_global,
    .hf_layer = pith_llama_hf_layer,
    .global = pith_llama_global,
    .layer = pith_llama_layer,
    .read_gguf = qwen3moe_read_gguf,
    .read_hf = qwen3moe_read_hf,
    .check = qwen3moe_check,
    .finish = pith_llama_finish,
    .build = qwen3moe_build,
};
