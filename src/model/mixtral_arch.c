/* Mixtral: a Llama (Mistral) whose every FFN is a mixture of experts (model/moe.h; transformers'
 * modeling_mixtral.py MixtralSparseMoeBlock: softmax over the experts, top-k, always renormalised).
 * See model/arch.h.
 *
 * GGUF: llama.cpp converts Mixtral as arch "llama" with llama.expert_count (llama_arch.c reads it);
 * this descriptor serves the Hugging Face side and a GGUF file that says "mixtral".
 * config.json: num_local_experts, num_experts_per_tok, intermediate_size (each expert's width),
 * sliding_window as Mistral's; tensors block_sparse_moe.gate.weight and
 * block_sparse_moe.experts.E.w1 (gate), w3 (up), w2 (down). */
#include "model/llama.h"
#include "model/llama_arch.h"
#include "model/moe_arch.h"

static int mixtral_read_gguf(const pith_meta *m, pith_hparams *hp) {
    if (pith_meta_int(m, "attention.sliding_window", false, &hp->sliding_window) ||
        pith_moe_read_gguf(m, hp, true))
        return -1;
    if (hp->sliding_window <= 0) hp->sliding_window = 0;
    for (int l = 0; hp->sliding_window && l < hp->n_layers && l < PITH_MAX_LAYERS; l++)
        pith_layer_set(hp->layer_swa, l, true);
    return 0;
}

static int mixtral_read_hf(const pith_meta *m, pith_hparams *hp) {
    hp->expert_norm_topk = true;
    if (pith_meta_int(m, "num_local_experts", true, &hp->n_experts) ||
        pith_meta_int(m, "num_experts_per_tok", true, &hp->n_experts_used) ||
        pith_meta_int(m, "sliding_window", false, &hp->sliding_window))
        return -1;
    hp->expert_ffn_dim = hp->ffn_dim;
    if (hp->sliding_window <= 0) hp->sliding_window = 0;
    for (int l = 0; hp->sliding_window && l < hp->n_layers && l < PITH_MAX_LAYERS; l++)
        pith_layer_set(hp->layer_swa, l, true);
    return 0;
}

static int mixtral_check(const pith_hparams *hp, const char *path, pith_err *err) {
    return pith_moe_check_hparams(hp, true, path, err);
}

static int mixtral_build(pith_model_file *file, const pith_model_options *opt, pith_model **out, pith_err *err) {
    const pith_decoder_variant v = {
        .hf_experts = {"block_sparse_moe.experts.%d.w1.weight", "block_sparse_moe.experts.%d.w3.weight",
                       "block_sparse_moe.experts.%d.w2.weight"},
    };
    return pith_decoder_build(file, opt, &v, out, err);
}

const pith_arch pith_arch_mixtral = {
    .name = "mixtral",
    .hf_archs = (const char *const[]){"MixtralForCausalLM", NULL},
    .hf_model_types = (const char *const[]){"mixtral", NULL},
    .rope_gguf = PITH_ROPE_ADJACENT,
    .rope_hf = PITH_ROPE_HALF,
    .hf_global = pith_llama_hf_global,
    .hf_layer = pith_llama_hf_layer,
    .global = pith_llama_global,
    .layer = pith_llama_layer,
    .read_gguf = mixtral_read_gguf,
    .read_hf = mixtral_read_hf,
    .check = mixtral_check,
    .finish = pith_llama_finish,
    .build = mixtral_build,
};
