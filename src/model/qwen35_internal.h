/* Qwen3.5's model state, shared by the decoder (qwen35.c) and its multi-token-prediction head
 * (qwen35_mtp.c). Not a public interface: the two files are one model, a base decoder (decoder.h) whose
 * weights and buffers live in its backend (backend.h).
 *
 * Invariants: m->d is first (the decoder's impl is m); a layer holds either the attention block's
 * weights or the DeltaNet's (delta says which) and an FFN block (dense, or experts in qwen35moe); the
 * buffers are the backend's, made at load; m->mtp is NULL unless the head was loaded, and then the
 * memory spec has the head's layer (n_layers) in the FULL group and each RECURRENT slot ends with its
 * hidden state (tail_offset floats in). */
#ifndef PITH_MODEL_QWEN35_INTERNAL_H
#define PITH_MODEL_QWEN35_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

#include "model/decoder.h"
#include "model/layers.h"
#include "model/rope.h"

typedef struct q35_mtp q35_mtp;

typedef struct q35_layer {
    bool delta;
    const pith_weight *attn_norm, *post_norm;
    pith_attn_block attn;                            /* attention (wq: query and gate per head) */
    const pith_weight *wqkv, *wz, *wb, *wa, *wout;   /* DeltaNet */
    const pith_weight *conv_w, *dt_bias, *ssm_a, *ssm_norm;
    pith_ffn_block ffn;                              /* dense, or qwen35moe's experts */
} q35_layer;

typedef struct q35 {
    pith_decoder d; /* first: the base decoder */
    int q_dim, kv_dim, n_rot, K, key_dim, value_dim, conv_dim;   /* this rank's (decoder.h: shard) */
    int n_k_heads, n_v_heads;         /* the DeltaNet's key and value heads on this rank */
    size_t conv_floats, state_floats; /* per DeltaNet layer */
    bool qk_tiled;
    q35_layer *layers;
    const pith_weight *embd, *out_norm, *output;
    pith_rope rope;
    pith_dec_bufs bufs;
    /* the step's RoPE tables; the attention's [query | gate] rows; the DeltaNet's projections (q/k/v,
     * the output gate z, beta and alpha) and its output */
    pith_buf *cs, *qg, *qkv, *z, *beta, *alpha, *dn;
    q35_mtp *mtp;   /* the MTP head, loaded with pith_model_options.mtp; else NULL */
} q35;

/* Layer l's tensors (blk.{l}.*) into *L: a DeltaNet layer when delta, else an attention layer; its FFN. */
int q35_load_layer(q35 *m, int l, bool delta, q35_layer *L, pith_err *err);
/* Weight bytes of a matrix (0 when absent) and of a layer's dense matrices (experts left out). */
size_t q35_weight_bytes(const pith_weight *w);
size_t q35_layer_bytes(const q35_layer *L);
/* Gated attention's Q (from m->qg; q NULL: none), K and V of layer l (KV group and index: group,
 * layer_index) normed, rotated and stored, over n rows. */
void q35_gated_qkv(q35 *m, const q35_layer *L, pith_buf *q, int group, int layer_index, int n);

/* The MTP head (qwen35_mtp.c). The head is one full-attention layer after the decoder's, fed with
 * [enorm(embedding of token p) | hnorm(final hidden state of position p - 1)] through eh_proj: its K/V
 * of position p join the FULL group as the group's last layer (every forward writes them, from the
 * hidden states of the batch), and the last position's hidden state is kept at the end of each
 * RECURRENT slot (so snapshots, checkpoints and forks carry it) for the next batch's first token. */
int q35_mtp_load(q35 *m, pith_err *err);
void q35_mtp_free(q35 *m);
/* Extra floats of a RECURRENT slot (the last hidden state). */
size_t q35_mtp_tail_floats(const q35 *m);
/* After the decoder: m->bufs.x holds every token's hidden state (batch order). Writes the head's K/V
 * of every token and the sequences' last hidden states; leaves x as it was. */
int q35_mtp_after_decoder(q35 *m, const pith_batch *b, pith_err *err);
int q35_mtp_draft(pith_model *base, const pith_batch *b, int n_steps, int32_t *draft, float *logits, pith_err *err);

#endif
