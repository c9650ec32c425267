/* A mixture-of-experts layer's tensors as the model file holds them, for a backend other than the CPU's:
 * the CPU backend's loader (backend/cpu/moe_load.c, pith_moe_load) finds them (GGUF's stacked 3-D
 * experts, a fused gate and up, per-expert 2-D and Hugging Face names, GPT-OSS's fused experts
 * rearranged, a shared expert under its own or the dense FFN's names) and this view hands them over
 * without a CPU header (tests/test_layering.py: only src/backend/cpu/ includes those).
 *
 * Invariants: every matrix is rows of row_bytes bytes in the file's block format (type); an expert kind's
 * matrices all have one type and shape; the data stay valid while the model file is open and the layer
 * is not freed. The float vectors are the layer's (malloc'd): a backend may take one over (setting the
 * pointer NULL); pith_moe_file_free frees the rest. */
#ifndef PITH_BACKEND_MOE_FILE_H
#define PITH_BACKEND_MOE_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"

typedef struct pith_moe_mat {
    pith_dtype type;
    int rows, cols;
    size_t row_bytes;
    const uint8_t *data;
} pith_moe_mat;

typedef struct pith_moe_file_layer {
    pith_moe_config cfg;
    pith_moe_mat router;                 /* n_experts x dim */
    pith_moe_mat *gate, *up, *down;      /* [n_experts] each: ffn x dim, ffn x dim, dim x ffn */
    float *router_bias, *select_bias, *expert_scale;   /* [n_experts], or NULL */
    float *gate_bias, *up_bias;          /* [n_experts * ffn], or NULL */
    float *down_bias;                    /* [n_experts * dim], or NULL */
    float *in_norm, *router_norm;        /* [dim] each, with cfg.in_norm_eps > 0 */
    int has_shared;
    pith_moe_mat sh_gate, sh_up, sh_down;
    float *sh_gate_inp;                  /* [dim], or NULL (an ungated shared expert) */
    void *impl;                          /* the loader's own */
} pith_moe_file_layer;

/* Checks the configuration (as the CPU backend does) and finds layer l's tensors (pith_moe_load's rules). */
int pith_moe_file_load(const pith_model_file *f, int l, const pith_moe_config *cfg, const char *const hf_experts[3],
                       pith_moe_file_layer *out, pith_err *err);
void pith_moe_file_free(pith_moe_file_layer *L);

#endif
