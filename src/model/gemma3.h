/* Gemma 3 forward pass (text): builds a pith_model from a gemma3 model file (see gemma3_arch.c for what
 * the file's hyper-parameters and tensors mean). */
#ifndef PITH_MODEL_GEMMA3_H
#define PITH_MODEL_GEMMA3_H

#include "pith/model.h"

/* Takes ownership of `file` on success (and on failure leaves it to the caller). */
int pith_gemma3_build(pith_model_file *file, const pith_model_options *opt, pith_model **out, pith_err *err);

#endif
