/* The Mamba2 token mixer, written once for the hybrid decoders that have it (granitehybrid.c: Granite
 * 4.0-H; nemotronh.c: Nemotron-H): its hyper-parameters and GGUF keys (for the descriptors), its tensors
 * bound on the base decoder (model/decoder.h), and one layer's forward over the backend interface: the
 * in-projection, the backend's mamba2 op (convolution, SSD scan and gated norm: backend.h), the
 * out-projection into the residual.
 *
 * Per token (H heads of P, G B/C groups of d_state N, inner = H * P, conv channels inner + 2 G N):
 * ssm_in gives [z (inner) | xBC (conv channels) | dt (H)]; xBC through the causal depthwise convolution
 * (ssm_conv1d, width K, its bias, SiLU) whose last K - 1 inputs are the sequence's carried state; the SSD
 * scan per head with ssm_dt.bias, ssm_a = -exp(A_log) and the skip ssm_d, from the carried SSM state;
 * y * silu(z), RMS-normed per group of norm_group elements with ssm_norm (norm_group == inner: one norm
 * over the whole width), times out_scale; ssm_out, added to the residual.
 *
 * State: per sequence slot, for each Mamba2 layer i of the group in order, its convolution state
 * ([K - 1][conv channels] floats, oldest first) followed by its SSM state ([H][P][N] floats), at float
 * offset i * (conv_floats + ssm_floats) of the slot (pith_decoder_hybrid_memory with that many floats).
 * State checkpoints (batch.h) are the op's: the state after each named token is copied to its slot. */
#ifndef PITH_MODEL_MAMBA2_H
#define PITH_MODEL_MAMBA2_H

#include <stdbool.h>

#include "model/decoder.h"
#include "pith/modelfile.h"

/* The widest Mamba2 convolution accepted (the backend's limit). */
#define PITH_MAMBA2_MAX_KERNEL PITH_BE_MAX_CONV_KERNEL

/* The hyper-parameters of a Mamba2 mixer, the first member of a Mamba2 architecture's own struct
 * (format/arch.h: pith_arch_params): nemotron_h's whole struct, granitehybrid's first member. */
typedef struct pith_mamba2_params {
    int heads;      /* H */
    int groups;     /* G: B/C groups */
    int head_dim;   /* P */
    int d_state;    /* N */
} pith_mamba2_params;

/* This rank's widths: the whole mixer's, or under --tp (pith_mamba2_shard) its share. */
typedef struct pith_mamba2_dims {
    int K, H, G, P, N, inner, conv_dim, proj_dim;
    int norm_group;                 /* elements per RMS group of the gated norm */
    size_t conv_floats, ssm_floats; /* state per layer */
    int ranks;                      /* 1, or the tensor-parallel ranks sharing the mixer */
    bool bc_whole;                  /* sharded with one B/C group: every rank holds B and C whole */
    bool norm_across;               /* sharded, the gated norm spans ranks (one group over the whole width) */
} pith_mamba2_dims;

/* From hp's conv_kernel and the architecture's pith_mamba2_params; grouped: the gated norm per B/C group (inner / G
 * elements), else over the whole inner width. */
void pith_mamba2_dims_of(const pith_hparams *hp, bool grouped, pith_mamba2_dims *d);
/* Under --tp (d's shard, after pith_decoder_shard_begin): md becomes this rank's share, Megatron's split
 * of the heads: H / ranks heads with their channels of z, x and dt, their A, D, dt bias and norm
 * weights, their SSM state, and the out-projection's matching columns (summed across ranks). B and C go by
 * group (G / ranks each, the heads' own) when G divides, or whole on every rank when G is 1 (Granite
 * 4.0-H); other group counts are refused. A gated norm per group stays on its rank; one over the whole
 * width sums each row's squares across ranks. Without a shard it does nothing. */
int pith_mamba2_shard(const pith_decoder *d, pith_mamba2_dims *md, pith_err *err);
/* Checks conv width, head counts and widths and that G divides H; messages name path. */
int pith_mamba2_check_hparams(const pith_hparams *hp, const char *path, pith_err *err);

/* The GGUF keys of a Mamba2 model (llama.cpp's LLM_KV_SSM_*): ssm.conv_kernel, ssm.state_size (d_state),
 * ssm.group_count (B/C groups), ssm.time_step_rank (heads), ssm.inner_size (heads x head width), into
 * hp's conv_kernel and the architecture's pith_mamba2_params. */
struct pith_meta;
int pith_mamba2_read_gguf(const struct pith_meta *m, pith_hparams *hp);
/* Hugging Face stores A_log; GGUF (and the forward pass) holds ssm_a = -exp(A_log): converts every
 * recurrent layer's ssm_a of a safetensors file (nothing for GGUF). */
int pith_mamba2_finish_hf(pith_model_file *f, const pith_hparams *hp, pith_err *err);

typedef struct pith_mamba2_layer {
    const pith_weight *ssm_in, *ssm_out;
    const pith_weight *conv_w, *conv_b, *dt_bias, *ssm_a, *ssm_d, *ssm_norm;
} pith_mamba2_layer;

/* Layer l's Mamba2 tensors (blk.l.ssm_*, shapes checked; ssm_a already -exp(A_log), every ssm_a < 0).
 * Errors name the tensor; the caller prefixes the layer. */
int pith_mamba2_load(pith_decoder *d, int l, const pith_mamba2_dims *md, pith_mamba2_layer *L, pith_err *err);

/* The mixer's buffers: proj (proj_dim: ssm_in's output) and y (inner: ssm_out's input). */
typedef struct pith_mamba2_bufs {
    pith_buf *proj, *y;
    pith_buf *part, *sumsq;   /* sharded: the out-projection's partial sum (dim), the norm's sums of squares */
} pith_mamba2_bufs;
int pith_mamba2_bufs_make(pith_decoder *d, const pith_mamba2_dims *md, pith_mamba2_bufs *b, pith_err *err);

/* x (n rows: every token of the step) += ssm_out(mixer(in)) for layer l of the decoder's RECURRENT
 * group; eps is the gated norm's, out_scale multiplies its output (0 or 1: none). */
int pith_mamba2_forward(pith_decoder *d, const pith_mamba2_layer *L, const pith_mamba2_dims *md, int l,
                        const pith_mamba2_bufs *b, const pith_buf *in, pith_buf *x, float eps, float out_scale, int n,
                        pith_err *err);

#endif
