/* Mixture-of-experts metadata shared by the descriptors of MoE architectures (moe_arch.c). */
#ifndef PITH_MODEL_MOE_ARCH_H
#define PITH_MODEL_MOE_ARCH_H

#include "format/arch.h"

/* GGUF {arch}.expert_count, expert_used_count, expert_feed_forward_length (default: the FFN width),
 * expert_shared_feed_forward_length, expert_weights_norm (default norm_default), expert_gating_func
 * (llama.cpp's numbering: 0 or 1 softmax, 2 sigmoid; others refused), expert_group_count,
 * expert_group_used_count, expert_weights_scale and leading_dense_block_count. No expert_count: a
 * dense model. */
int pith_moe_read_gguf(const pith_meta *m, pith_hparams *hp, bool norm_default);
/* config.json's keys of Qwen's MoE classes (Qwen3-MoE, Qwen3-VL-MoE): num_experts, num_experts_per_tok,
 * moe_intermediate_size (all three required), norm_topk_prob (absent: hp->expert_norm_topk as the caller
 * set it); dense layers among the expert ones (decoder_sparse_step other than 1, a non-empty
 * mlp_only_layers) are refused: no released model has them. */
int pith_moe_read_hf_qwen(const pith_meta *m, pith_hparams *hp);
/* When the hyper-parameters name experts: 1 <= used <= count <= 1024, a positive expert width, groups
 * that divide the experts and leave at least `used` of them, a finite non-negative weights scale and at
 * most n_layers leading dense layers; with `required`, a model without experts is refused too. */
int pith_moe_check_hparams(const pith_hparams *hp, bool required, const char *path, pith_err *err);
/* Is layer l's FFN dense (for the tensor schema's in_layer)? Every layer without experts, else the
 * leading dense layers. */
bool pith_moe_dense_layer(const pith_hparams *hp, int l);

#endif
