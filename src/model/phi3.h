/* Phi-3 / Phi-4 (`phi3`): the architecture's own hyper-parameters and its build (phi3.c); what they mean
 * and where they come from is in phi3_arch.c. */
#ifndef PITH_MODEL_PHI3_H
#define PITH_MODEL_PHI3_H

#include "format/arch.h"
#include "pith/model.h"

/* The most LongRoPE factors per list: rotated head widths up to 192 (every released Phi model has 48 or 64
 * factors). Bounded so that the lists fit the model file's private hyper-parameters (arch.h: params_size). */
#define PITH_PHI3_MAX_FACTORS 96

/* Phi-3's own hyper-parameters (format/arch.h: pith_arch_params):
 *   rope_dim   the rotated width of each head (partial rotary: Phi-4-mini's 0.75; 0 until checked, then
 *              head_dim when the whole head rotates);
 *   n_factors  LongRoPE: rope_dim / 2 short and long factors (0: no LongRoPE, plain RoPE or a generic
 *              scaling of pith_hparams);
 *   orig_ctx   LongRoPE: the original context (original_max_position_embeddings): a context longer than
 *              this takes the long factors;
 *   attn_factor LongRoPE: cos and sin times this (every attention score times its square). */
typedef struct pith_phi3_params {
    int rope_dim;
    int n_factors;
    int orig_ctx;
    float attn_factor;
    float short_factor[PITH_PHI3_MAX_FACTORS];
    float long_factor[PITH_PHI3_MAX_FACTORS];
} pith_phi3_params;

/* Takes ownership of `file` on success (and on failure leaves it to the caller). */
int pith_phi3_build(pith_model_file *file, const pith_model_options *opt, pith_model **out, pith_err *err);

#endif
