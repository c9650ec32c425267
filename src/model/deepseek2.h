/* DeepSeek-V2/V3's own hyper-parameters (deepseek2_arch.c reads them, deepseek2.c runs them), reached
 * through pith_arch_params. */
#ifndef PITH_MODEL_DEEPSEEK2_H
#define PITH_MODEL_DEEPSEEK2_H

#include "format/arch.h"

typedef struct pith_deepseek2_params {
    int q_lora_rank;      /* 0: a plain query projection attn_q (DeepSeek-V2-Lite) */
    int kv_lora_rank;     /* the latent c_kv's width */
    int qk_nope, qk_rope; /* each query / key head: [nope | rope] */
    int v_dim;            /* each value head */
    /* the scores' factor beyond 1/sqrt(qk_nope + qk_rope): YaRN's mscale(factor, mscale_all_dim)^2 (times
     * GGUF's attn_factor^2); 1 without YaRN */
    double kq_mscale2;
} pith_deepseek2_params;

static inline const pith_deepseek2_params *pith_deepseek2_params_of(const pith_hparams *hp) {
    return (const pith_deepseek2_params *)pith_arch_params(hp);
}

/* The model (deepseek2.c). */
int pith_deepseek2_build(pith_model_file *file, const pith_model_options *opt, pith_model **out, pith_err *err);

#endif
