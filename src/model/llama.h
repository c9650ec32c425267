/* Llama-family forward pass (llama, qwen2, qwen3): builds a pith_model from a model file. */
#ifndef PITH_MODEL_LLAMA_H
#define PITH_MODEL_LLAMA_H

#include "pith/model.h"

/* Takes ownership of `file` on success (and on failure leaves it to the caller). */
int pith_llama_build(pith_model_file *file, const pith_model_options *opt, pith_model **out, pith_err *err);

#endif
