/* Qwen3.5 forward pass (qwen35.c): builds a pith_model from a qwen35 model file (see qwen35_arch.c for
 * what its hyper-parameters and tensors mean). */
#ifndef PITH_MODEL_QWEN35_H
#define PITH_MODEL_QWEN35_H

#include "format/arch.h"
#include "pith/model.h"

/* Qwen3.5's own hyper-parameters (format/arch.h: pith_arch_params): the Gated DeltaNet's query/key
 * heads, value heads (a multiple of them) and head widths; the partial rotary (RoPE over the first
 * rope_dim dimensions of each head, 0: all) and its M-RoPE sections (all zero: none; for text every
 * section takes the token's position). qk_grouped: the GGUF file keeps the value heads grouped by key
 * head (value head h reads key head h / (value heads / key heads)), as Hugging Face files do, instead of
 * llama.cpp's tiled qwen35 order (qwen3next's GGUF: its converter does not reorder them). */
typedef struct pith_qwen35_params {
    int gdn_k_heads, gdn_v_heads, gdn_k_dim, gdn_v_dim;
    int rope_dim;
    int rope_sections[4];
    bool qk_grouped;
} pith_qwen35_params;

/* Takes ownership of `file` on success (and on failure leaves it to the caller). */
int pith_qwen35_build(pith_model_file *file, const pith_model_options *opt, pith_model **out, pith_err *err);

/* The qwen35 descriptor's parts, shared with qwen35moe (qwen35moe_arch.c): the same names, schema
 * (the dense FFN only without experts) and hooks. */
extern const pith_name_map pith_qwen35_hf_global[], pith_qwen35_hf_layer[], pith_qwen35_hf_mtp[];
extern const pith_tensor_spec pith_qwen35_global[], pith_qwen35_layer[];
int pith_qwen35_read_gguf(const pith_meta *m, pith_hparams *hp);
int pith_qwen35_read_hf(const pith_meta *m, pith_hparams *hp);
int pith_qwen35_check(const pith_hparams *hp, const char *path, pith_err *err);
int pith_qwen35_finish(pith_model_file *f, pith_hparams *hp, pith_err *err);

#endif
