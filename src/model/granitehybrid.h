/* Granite 4.0-H forward pass (granitehybrid.c): builds a pith_model from a granitehybrid model file (see
 * granitehybrid_arch.c for what its hyper-parameters and tensors mean). */
#ifndef PITH_MODEL_GRANITEHYBRID_H
#define PITH_MODEL_GRANITEHYBRID_H

#include "model/mamba2.h"
#include "pith/model.h"

/* Granite 4.0-H's own hyper-parameters (format/arch.h: pith_arch_params). Its multipliers: the
 * embeddings times embedding_scale, each block's output times residual_scale before it joins the
 * residual, the logits divided by logit_scale; 0 means none (1). Its attention multiplier is
 * pith_hparams.query_scale. */
typedef struct pith_granite_params {
    pith_mamba2_params ssm; /* first: model/mamba2.c reads it as the Mamba2 architectures' params */
    float embedding_scale, residual_scale, logit_scale;
} pith_granite_params;

/* Takes ownership of `file` on success (and on failure leaves it to the caller). */
int pith_granitehybrid_build(pith_model_file *file, const pith_model_options *opt, pith_model **out, pith_err *err);

#endif
