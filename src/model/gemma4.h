/* Gemma 4 (text): the hyper-parameters only Gemma 4 has (read by gemma4_arch.c, used by gemma4.c).
 *
 * pith_hparams holds the window (local) layers' shape: head_dim, n_kv_heads, rope_theta_swa; and the
 * global layers' RoPE base (rope_theta). The global layers' own shape is here. */
#ifndef PITH_MODEL_GEMMA4_H
#define PITH_MODEL_GEMMA4_H

#include "pith/model.h"

typedef struct pith_gemma4_params {
    int head_dim_full;     /* global layers' head width (config.json global_head_dim; GGUF key_length) */
    int n_kv_heads_full;   /* global layers' KV heads (num_global_key_value_heads under attention_k_eq_v;
                            * GGUF: head_count_kv's entry for a global layer) */
    /* Proportional RoPE of the global layers: the first rope_pairs_full of the head_dim_full / 2 pairs
     * (x[i], x[i + head_dim_full / 2]) rotate at theta^(-2i / head_dim_full) / rope_factor_full, the rest
     * not at all. config.json: partial_rotary_factor * head_dim_full / 2; GGUF: rope_freqs.weight. */
    int rope_pairs_full;
    float rope_factor_full;
    int ple_dim;           /* hidden_size_per_layer_input: each layer's per-layer input width (0: none) */
    int kv_shared_layers;  /* num_kv_shared_layers: the last ones attend over an earlier layer's K and V */
    bool double_wide;      /* use_double_wide_mlp: the KV-shared layers' FFN is twice ffn_dim wide */
    bool k_eq_v;           /* attention_k_eq_v: a global layer's V is its K projection, even where the
                            * checkpoint holds a v_proj (transformers builds none); GGUF: by attn_v's absence */
} pith_gemma4_params;

/* The first layer that reads another layer's K and V (n_layers when none does). */
static inline int pith_gemma4_first_shared(const pith_hparams *hp) {
    const pith_gemma4_params *P = (const pith_gemma4_params *)hp->arch_params;
    return hp->n_layers - P->kv_shared_layers;
}

static inline const pith_gemma4_params *pith_gemma4_params_of(const pith_hparams *hp) {
    return (const pith_gemma4_params *)hp->arch_params;
}

/* Takes ownership of `file` on success (and on failure leaves it to the caller). */
int pith_gemma4_build(pith_model_file *file, const pith_model_options *opt, pith_model **out, pith_err *err);

#endif
