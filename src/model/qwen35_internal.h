/* Qwen3.5's model state, shared by the decoder (qwen35.c) and its multi-token-prediction head
 * (qwen35_mtp.c). Not a public interface: the two files are one model. */
#ifndef PITH_MODEL_QWEN35_INTERNAL_H
#define PITH_MODEL_QWEN35_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

#include "backend/cpu/attention.h"
#include "backend/cpu/cpu.h"
#include "backend/cpu/matmul.h"
#include "model/hybrid_common.h"
#include "backend/cpu/moe.h"
#include "model/layers.h"
#include "pith/kv.h"
#include "pith/model.h"

typedef struct q35_mtp q35_mtp;

typedef struct q35_layer {
    bool delta;
    pith_matrix wq, wk, wv, wo;           /* attention (wq: query and gate per head) */
    pith_matrix wqkv, wz, wb, wa, wout;   /* DeltaNet */
    pith_matrix gate, up, down;
    pith_moe_layer *moe;                  /* qwen35moe: the FFN is a mixture of experts, else NULL */
    float *attn_norm, *post_norm, *q_norm, *k_norm;
    float *conv_w, *dt_bias, *ssm_a, *ssm_norm;
} q35_layer;

typedef struct q35 {
    pith_model base;
    pith_cpu cpu;
    pith_attn_scratch attn;
    int q_dim, kv_dim, n_rot, K, key_dim, value_dim, conv_dim;
    size_t conv_floats, state_floats; /* per DeltaNet layer */
    bool qk_tiled, portable;
    pith_kv_host mem;
    int *group_layers, *layer_group, *layer_index;
    const pith_tensor *embd;
    size_t embd_row_bytes;
    float *out_norm;
    pith_matrix output;
    q35_layer *layers;
    int cap;
    float *x, *xb, *q2, *q, *k, *v, *att, *qkv, *z, *bb, *aa, *hb, *hb2, *rope_cos, *rope_sin, *gdn_scratch;
    size_t gdn_scratch_floats;
    int *seq_start;
    pith_moe_config moe_cfg;            /* qwen35moe */
    pith_moe_scratch moe;
    pith_moe_loop moe_loop;             /* PITH_MOE_NAIVE: the benchmarks' baseline loops (moe.h) */
    q35_mtp *mtp;                       /* the MTP head, loaded with pith_model_options.mtp; else NULL */
} q35;

typedef pith_hy_job job;

/* A layer's tensors (blk.{l}.*) into *L: a DeltaNet layer when delta, else an attention layer; its FFN. */
int q35_load_layer(q35 *m, const pith_model_file *f, int l, bool delta, q35_layer *L, pith_err *err);
/* Packs L's matrices for the CPU kernels; frees what L holds. */
int q35_pack_layer(q35 *m, q35_layer *L, pith_err *err);
void q35_free_layer(q35_layer *L);
/* RoPE angles of a text position (every M-RoPE section at it): n_rot / 2 each of cos and sin. */
void q35_rope_angles(const q35 *m, int position, float *cs, float *sn);
/* n_heads heads of head_dim: x[h] = RoPE(rmsnorm(src[h * src_stride]) * norm); x may be src. */
void q35_norm_rope(const q35 *m, float *x, const float *src, size_t src_stride, int n_heads, const float *norm,
                   const float *cs, const float *sn);
/* Row t of the FFN: hb = silu(hb) * hb2 (a pith_hy_job row; the MTP head's FFN runs it too). */
void q35_swiglu_row(job *j, int t, int ith);
/* Weight bytes of a matrix (0 when absent) and of a dense layer's matrices. */
size_t q35_matrix_bytes(const pith_matrix *w);
size_t q35_layer_bytes(const q35_layer *L);

/* The MTP head (qwen35_mtp.c). The head is one full-attention layer after the decoder's, fed with
 * [enorm(embedding of token p) | hnorm(final hidden state of position p - 1)] through eh_proj: its K/V
 * of position p join the FULL group as the group's last layer (every forward writes them, from the
 * hidden states of the batch), and the last position's hidden state is kept at the end of each
 * RECURRENT slot (so snapshots, checkpoints and forks carry it) for the next batch's first token. */
int q35_mtp_load(q35 *m, const pith_model_file *f, pith_err *err);
void q35_mtp_free(q35 *m);
/* Extra floats of a RECURRENT slot (the last hidden state). */
size_t q35_mtp_tail_floats(const q35 *m);
int q35_mtp_reserve(q35 *m, int n, pith_err *err);
/* After the decoder: m->xb holds every token's final-normed hidden state (batch order). Writes the
 * head's K/V of every token and the sequences' last hidden states. */
int q35_mtp_after_decoder(q35 *m, const pith_batch *b, pith_err *err);
int q35_mtp_draft(pith_model *base, const pith_batch *b, int n_steps, int32_t *draft, float *logits, pith_err *err);

#endif
