/* Mistral 3 (`mistral3`: Ministral 3, and the text model of Mistral3ForConditionalGeneration): a Llama
 * whose queries are scaled by Llama 4's attention temperature. See mistral3_arch.c for what the files say
 * and mistral3.c for the forward pass. */
#ifndef PITH_MODEL_MISTRAL3_H
#define PITH_MODEL_MISTRAL3_H

#include "pith/model.h"

/* The architecture's own hyper-parameters (pith_arch_params). */
typedef struct pith_mistral3_params {
    /* Queries at position p are multiplied by 1 + attn_temp_beta * ln(1 + floor(p / attn_temp_length));
     * beta 0: no temperature (Mistral Small 3.x's text model). */
    float attn_temp_beta;
    int attn_temp_length;
} pith_mistral3_params;

static inline const pith_mistral3_params *pith_mistral3_params_of(const pith_hparams *hp) {
    return (const pith_mistral3_params *)hp->arch_params;
}

/* Takes ownership of `file` on success (and on failure leaves it to the caller). */
int pith_mistral3_build(pith_model_file *file, const pith_model_options *opt, pith_model **out, pith_err *err);

#endif
