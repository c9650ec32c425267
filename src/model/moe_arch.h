/* Mixture-of-experts metadata shared by the descriptors of MoE architectures (moe_arch.c). */
#ifndef PITH_MODEL_MOE_ARCH_H
#define PITH_MODEL_MOE_ARCH_H

#include "format/arch.h"

/* GGUF {arch}.expert_count, expert_used_count, expert_feed_forward_length (default: the FFN width),
 * expert_shared_feed_forward_length, expert_weights_norm (default norm_default) and expert_gating_func
 * (llama.cpp's numbering: 0 or 1 softmax, 2 sigmoid; others refused). No expert_count: a dense model. */
int pith_moe_read_gguf(const pith_meta *m, pith_hparams *hp, bool norm_default);
/* When the hyper-parameters name experts: 1 <= used <= count <= 1024 and a positive expert width; with
 * `required`, a model without experts is refused too. */
int pith_moe_check_hparams(const pith_hparams *hp, bool required, const char *path, pith_err *err);
/* Is layer l's FFN dense (for the tensor schema's in_layer)? */
bool pith_moe_dense_layer(const pith_hparams *hp, int l);

#endif
