/* The Mamba2 token mixer, written once for the hybrid decoders that have it (granitehybrid.c: Granite
 * 4.0-H; nemotronh.c: Nemotron-H): its tensors, read from a model file, and one layer's forward over a
 * flat batch with the state in a RECURRENT memory group.
 *
 * Per token (H heads of P, G B/C groups of d_state N, inner = H * P, conv channels inner + 2 G N):
 * ssm_in gives [z (inner) | xBC (conv channels) | dt (H)]; xBC through the causal depthwise convolution
 * (ssm_conv1d, width K, its bias, SiLU) whose last K - 1 inputs are the sequence's carried state; the SSD
 * scan per head (backend/cpu/recurrent.h) with ssm_dt.bias, ssm_a = -exp(A_log) and the skip ssm_d, from
 * the carried SSM state; y * silu(z), RMS-normed per group of norm_group elements with ssm_norm (norm_group
 * == inner: one norm over the whole width), times out_scale; ssm_out, added to the residual.
 *
 * Every run goes through the recurrent SSD kernel, a prefill chunk too: its result is then the same bits
 * however the scheduler cuts a prompt into chunks, batches it with others or restores it from a snapshot.
 * State checkpoints (batch.h): a run is cut after every token with a checkpoint, whose conv and SSM state
 * (per unit of work: its channels or its head) is copied into the checkpoint slot.
 *
 * State: per sequence slot, for each Mamba2 layer i of the group in order, its convolution state
 * ([K - 1][conv channels] floats, oldest first) followed by its SSM state ([H][P][N] floats), at float
 * offset i * (conv_floats + ssm_floats) of the slot (pith_hy_declare_memory with that many floats). */
#ifndef PITH_MODEL_MAMBA2_H
#define PITH_MODEL_MAMBA2_H

#include <stdbool.h>

#include "backend/cpu/cpu.h"
#include "backend/cpu/matmul.h"
#include "pith/batch.h"
#include "pith/kv.h"
#include "pith/modelfile.h"

/* The widest Mamba2 convolution accepted (the conv1d kernel's limit). */
#define PITH_MAMBA2_MAX_KERNEL 16

typedef struct pith_mamba2_dims {
    int K, H, G, P, N, inner, conv_dim, proj_dim;
    int norm_group;                 /* elements per RMS group of the gated norm */
    size_t conv_floats, ssm_floats; /* state per layer */
} pith_mamba2_dims;

/* From hp's conv_kernel and ssm_* fields (modelfile.h); grouped: the gated norm per B/C group (inner / G
 * elements), else over the whole inner width. */
void pith_mamba2_dims_of(const pith_hparams *hp, bool grouped, pith_mamba2_dims *d);
/* Checks conv width, head counts and widths and that G divides H; messages name path. */
int pith_mamba2_check_hparams(const pith_hparams *hp, const char *path, pith_err *err);

/* The GGUF keys of a Mamba2 model (llama.cpp's LLM_KV_SSM_*): ssm.conv_kernel, ssm.state_size (d_state),
 * ssm.group_count (B/C groups), ssm.time_step_rank (heads), ssm.inner_size (heads x head width), into
 * hp's conv_kernel and ssm_* fields. */
struct pith_meta;
int pith_mamba2_read_gguf(const struct pith_meta *m, pith_hparams *hp);
/* Hugging Face stores A_log; GGUF (and the forward pass) holds ssm_a = -exp(A_log): converts every
 * recurrent layer's ssm_a of a safetensors file (nothing for GGUF). */
int pith_mamba2_finish_hf(pith_model_file *f, const pith_hparams *hp, pith_err *err);

typedef struct pith_mamba2_layer {
    pith_matrix ssm_in, ssm_out;
    float *conv_w, *conv_b, *dt_bias, *ssm_a, *ssm_d, *ssm_norm;
} pith_mamba2_layer;

/* Layer l's Mamba2 tensors (blk.l.ssm_*; ssm_a already -exp(A_log), every ssm_a < 0). Errors name the
 * tensor; the caller prefixes the layer. */
int pith_mamba2_load(const pith_model_file *f, int l, const pith_mamba2_dims *d, int dim, pith_mamba2_layer *L,
                     pith_err *err);
int pith_mamba2_pack(pith_cpu *c, pith_mamba2_layer *L, pith_err *err);
void pith_mamba2_free(pith_mamba2_layer *L);

/* One layer's run over a batch. proj holds n_tokens rows of proj_dim floats and y n_tokens rows of inner
 * floats (the caller's scratch); seq_start as pith_hy_seq_starts leaves it; group is the RECURRENT
 * group's index (in the batch and in mem), layer_index the layer's index within the group. */
typedef struct pith_mamba2_run {
    pith_cpu *cpu;
    const pith_mamba2_dims *d;
    const pith_mamba2_layer *L;
    const pith_batch *b;
    const pith_kv_host *mem;
    int group, layer_index;
    const int *seq_start;
    float *proj, *y;
    float eps;       /* of the gated norm */
    float out_scale; /* the normed output times this (Granite's residual multiplier; 1: none) */
    bool portable;   /* the portable SSD loops (PITH_FORCE_SCALAR) */
} pith_mamba2_run;

/* x (n_tokens rows of dim) += ssm_out(mixer(xb)). */
int pith_mamba2_forward(const pith_mamba2_run *r, const float *xb, int dim, float *x, pith_err *err);

#endif
