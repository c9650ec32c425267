/* Qwen3.5 forward pass (qwen35.c): builds a pith_model from a qwen35 model file (see qwen35_arch.c for
 * what its hyper-parameters and tensors mean). */
#ifndef PITH_MODEL_QWEN35_H
#define PITH_MODEL_QWEN35_H

#include "pith/model.h"

/* Takes ownership of `file` on success (and on failure leaves it to the caller). */
int pith_qwen35_build(pith_model_file *file, const pith_model_options *opt, pith_model **out, pith_err *err);

#endif
