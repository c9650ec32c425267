/* GLM-4.5 / 4.6 / 4.7 mixtures of experts (`glm4moe`; glm4moe_arch.c the descriptor, glm4moe.c the forward
 * pass): the hyper-parameters only this architecture reads, reached through pith_arch_params. */
#ifndef PITH_MODEL_GLM4MOE_H
#define PITH_MODEL_GLM4MOE_H

#include "pith/model.h"

typedef struct pith_glm4moe_params {
    int rope_dim;   /* rotated dimensions at the front of each head (partial rotary); 0: all of head_dim */
    /* What config.json claims about tensors the file must then have (-1: no claim; GGUF: the tensors
     * decide): "attention_bias" (attn_{q,k,v}.bias), "use_qk_norm" (attn_{q,k}_norm.weight). */
    int hf_attention_bias, hf_qk_norm;
} pith_glm4moe_params;

int pith_glm4moe_build(pith_model_file *file, const pith_model_options *opt, pith_model **out, pith_err *err);

#endif
