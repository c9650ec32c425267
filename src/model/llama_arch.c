/* Descriptors of the Llama family: llama (also Mistral), qwen2 and qwen3 (see model/arch.h).
 *
 * One tensor schema serves all three: biases on Q/K/V (qwen2) and RMS norms on each Q and K head
 * (qwen3) are in every layer or in none, whatever the architecture says. GGUF llama files store Q and K
 * permuted for adjacent-pair RoPE (convert_hf_to_gguf.py permutes them); GGUF qwen2/qwen3 and every
 * Hugging Face checkpoint rotate halves.
 *
 * Sliding window: Mistral's config.json "sliding_window" (null/absent: none) applies to every layer,
 * as does GGUF llama.attention.sliding_window where present. Qwen2/Qwen3 have a window only under
 * "use_sliding_window": true, on the layers "layer_types" marks "sliding_attention" (else layers from
 * "max_window_layers" on, as transformers derives it). */
#include "model/llama_arch.h"

#include "model/llama.h"
#include "model/moe_arch.h"

const pith_name_map pith_llama_hf_global[] = {
    {"model.embed_tokens.weight", "token_embd.weight"},
    {"model.norm.weight", "output_norm.weight"},
    {"lm_head.weight", "output.weight"},
    {NULL, NULL},
};

const pith_name_map pith_llama_hf_layer[] = {
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
    {"post_attention_layernorm.weight", "ffn_norm.weight"},
    {"mlp.gate_proj.weight", "ffn_gate.weight"},
    {"mlp.up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
    {"mlp.gate.weight", "ffn_gate_inp.weight"},              /* the router: Qwen-MoE, */
    {"block_sparse_moe.gate.weight", "ffn_gate_inp.weight"}, /* Mixtral */
    {NULL, NULL},
};

const pith_tensor_spec pith_llama_global[] = {
    {"token_embd.weight", PITH_D_DIM, PITH_D_VOCAB, PITH_REQUIRED, NULL},
    {"output_norm.weight", PITH_D_DIM, PITH_D_NONE, PITH_REQUIRED, NULL},
    {"output.weight", PITH_D_DIM, PITH_D_VOCAB, PITH_OPTIONAL, NULL},    /* absent: tied to token_embd */
    {"rope_freqs.weight", PITH_D_HALF_HEAD, PITH_D_NONE, PITH_OPTIONAL, NULL}, /* GGUF Llama 3 divisors */
    {NULL, 0, 0, 0, NULL},
};

const pith_tensor_spec pith_llama_layer[] = {
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
    {"ffn_norm.weight", PITH_D_DIM, PITH_D_NONE, PITH_REQUIRED, NULL},
    /* with experts (Mixtral, Qwen-MoE) the FFN's tensors are checked by model/moe_load.c */
    {"ffn_gate.weight", PITH_D_DIM, PITH_D_FFN, PITH_REQUIRED, pith_moe_dense_layer},
    {"ffn_up.weight", PITH_D_DIM, PITH_D_FFN, PITH_REQUIRED, pith_moe_dense_layer},
    {"ffn_down.weight", PITH_D_FFN, PITH_D_DIM, PITH_REQUIRED, pith_moe_dense_layer},
    {NULL, 0, 0, 0, NULL},
};

int pith_llama_finish(pith_model_file *f, pith_hparams *hp, pith_err *err) {
    (void)err;
    /* The schema made these all-or-none, so layer 0 speaks for every layer. */
    hp->has_qkv_bias = pith_model_file_tensor(f, "blk.0.attn_q.bias") != NULL;
    hp->has_qk_norm = pith_model_file_tensor(f, "blk.0.attn_q_norm.weight") != NULL;
    return 0;
}

static void every_layer(pith_hparams *hp) {
    for (int l = 0; l < hp->n_layers && l < PITH_MAX_LAYERS; l++) pith_layer_set(hp->layer_swa, l, true);
}

/* A window on the layers config.json's "layer_types" marks, or else on layers first_layer and up. */
static int hf_window(const pith_meta *m, pith_hparams *hp, int first_layer) {
    if (pith_meta_int(m, "sliding_window", false, &hp->sliding_window)) return -1;
    if (hp->sliding_window <= 0) {
        hp->sliding_window = 0;
        return 0;
    }
    bool found;
    if (pith_meta_layers(m, "layer_types", hp->n_layers, "sliding_attention", hp->layer_swa, &found)) return -1;
    for (int l = 0; !found && l < hp->n_layers && l < PITH_MAX_LAYERS; l++)
        pith_layer_set(hp->layer_swa, l, l >= first_layer);
    return 0;
}

/* GGUF llama with llama.expert_count is Mixtral (llama.cpp converts it as llama; weights renormalised). */
static int llama_read_gguf(const pith_meta *m, pith_hparams *hp) {
    if (pith_meta_int(m, "attention.sliding_window", false, &hp->sliding_window) ||
        pith_moe_read_gguf(m, hp, true))
        return -1;
    if (hp->sliding_window > 0) every_layer(hp);
    else hp->sliding_window = 0;
    return 0;
}

static int llama_read_hf(const pith_meta *m, pith_hparams *hp) { return hf_window(m, hp, 0); }

static int llama_check(const pith_hparams *hp, const char *path, pith_err *err) {
    return pith_moe_check_hparams(hp, false, path, err);
}

static int qwen_read_hf(const pith_meta *m, pith_hparams *hp) {
    bool use = false;
    int first = 0;
    if (pith_meta_bool(m, "use_sliding_window", &use)) return -1;
    if (!use) return 0;
    if (pith_meta_int(m, "max_window_layers", false, &first)) return -1;
    return hf_window(m, hp, first);
}


const pith_arch pith_arch_llama = {
    .name = "llama",
    .hf_archs = (const char *const[]){"LlamaForCausalLM", "MistralForCausalLM", NULL},
    .hf_model_types = (const char *const[]){"llama", "mistral", NULL},
    .rope_gguf = PITH_ROPE_ADJACENT,
    .rope_hf = PITH_ROPE_HALF,
    .hf_global = pith_llama_hf_global,
    .hf_layer = pith_llama_hf_layer,
    .global = pith_llama_global,
    .layer = pith_llama_layer,
    .read_gguf = llama_read_gguf,
    .read_hf = llama_read_hf,
    .check = llama_check,
    .finish = pith_llama_finish,
    .build = pith_llama_build,
};

const pith_arch pith_arch_qwen2 = {
    .name = "qwen2",
    .hf_archs = (const char *const[]){"Qwen2ForCausalLM", NULL},
    .hf_model_types = (const char *const[]){"qwen2", NULL},
    .rope_gguf = PITH_ROPE_HALF,
    .rope_hf = PITH_ROPE_HALF,
    .hf_global = pith_llama_hf_global,
    .hf_layer = pith_llama_hf_layer,
    .global = pith_llama_global,
    .layer = pith_llama_layer,
    .read_hf = qwen_read_hf,
    .finish = pith_llama_finish,
    .build = pith_llama_build,
};

const pith_arch pith_arch_qwen3 = {
    .name = "qwen3",
    .hf_archs = (const char *const[]){"Qwen3ForCausalLM", NULL},
    .hf_model_types = (const char *const[]){"qwen3", NULL},
    .rope_gguf = PITH_ROPE_HALF,
    .rope_hf = PITH_ROPE_HALF,
    .hf_global = pith_llama_hf_global,
    .hf_layer = pith_llama_hf_layer,
    .global = pith_llama_global,
    .layer = pith_llama_layer,
    .read_hf = qwen_read_hf,
    .finish = pith_llama_finish,
    .build = pith_llama_build,
};
