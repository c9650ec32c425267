/* The Llama family's shared descriptor parts (llama_arch.c), for descriptors of architectures that are a
 * Llama with a twist (smollm3_arch.c): Hugging Face names, tensor schema and the finish hook. */
#ifndef PITH_MODEL_LLAMA_ARCH_H
#define PITH_MODEL_LLAMA_ARCH_H

#include "format/arch.h"

extern const pith_name_map pith_llama_hf_global[];
extern const pith_name_map pith_llama_hf_layer[];
extern const pith_tensor_spec pith_llama_global[];
extern const pith_tensor_spec pith_llama_layer[];
/* has_qkv_bias / has_qk_norm from layer 0's tensors. */
int pith_llama_finish(pith_model_file *f, pith_hparams *hp, pith_err *err);

#endif
