/* DeepSeek-V2/V3's model state, shared by the decoder (deepseek2.c) and its multi-token-prediction head
 * (deepseek2_mtp.c). Not a public interface: the two files are one model, a base decoder (decoder.h)
 * whose weights and buffers live in its backend (backend.h).
 *
 * Invariants: m->d is first (the decoder's impl is m); layers, heads and owned have room for the head's
 * layer (index n_layers) too; m->mtp is NULL unless the head was loaded, and then the memory spec is
 * pith_decoder_mtp_memory's (the head's layer n_layers last in the FULL group, a RECURRENT group of no layer
 * holding each sequence's last hidden state). */
#ifndef PITH_MODEL_DEEPSEEK2_INTERNAL_H
#define PITH_MODEL_DEEPSEEK2_INTERNAL_H

#include "model/decoder.h"
#include "model/layers.h"
#include "model/rope.h"

typedef struct ds2_mtp ds2_mtp;

typedef struct ds2_layer {
    const pith_weight *attn_norm, *ffn_norm;
    const pith_weight *wq, *wq_a, *q_a_norm, *wq_b, *wkv_a, *kv_a_norm;
    const pith_weight **k_b, **v_b; /* [n_heads] each */
    const pith_weight *kv_b;        /* the fused kv_b for the expanded form, or NULL */
    pith_attn_block attn;           /* its output projection */
    pith_ffn_block ffn;
} ds2_layer;

typedef struct ds2 {
    pith_decoder d; /* first: the base decoder */
    ds2_layer *layers;
    const pith_weight **heads;      /* the layers' k_b and v_b arrays (n_layers + 1 layers' room) */
    float **owned;                  /* [n_layers + 1] transposed W_UK made at load, or NULL */
    const pith_weight *embd, *out_norm, *output;
    pith_rope rope;
    pith_dec_bufs bufs;
    pith_buf *cs, *qlat, *kv, *qa, *lat;
    pith_buf *g, *kvx, *ms; /* the expanded form's (NULL: none) */
    int expand_min;         /* INT_MAX: never */
    ds2_mtp *mtp;           /* the MTP head, loaded with pith_model_options.mtp; else NULL */
} ds2;

/* Layer l's tensors (blk.{l}.*) into *L: MLA, and a dense FFN or the experts. */
int ds2_load_layer(ds2 *m, int l, ds2_layer *L, pith_err *err);
/* The query (bufs.q) and latent row (m->kv) of the normed rows xb. */
int ds2_attention_qkv(ds2 *m, const ds2_layer *L, const pith_buf *xb, int n, pith_err *err);
/* The mla op's arguments for layer L at memory layer l. */
pith_be_mla_args ds2_mla_args(const ds2 *m, const ds2_layer *L, int l);
/* Layer l's MLA of the normed rows xb into bufs.att (its latent rows into the memory). */
int ds2_attention(ds2 *m, const ds2_layer *L, int l, const pith_buf *xb, int n, pith_err *err);

/* The MTP head (deepseek2_mtp.c). Loaded before the experts are placed (its layer has experts too). */
int ds2_mtp_load(ds2 *m, pith_err *err);
void ds2_mtp_free(ds2 *m);
/* The memory of a model with the head: every layer and the head's in one FULL group of latent rows
 * (kv_dim wide, V read from K), and a RECURRENT group of no layer whose state is the last hidden state. */
/* After the decoder: m->bufs.x holds every token's hidden state (batch order). Writes the head's latent
 * rows of every token and the sequences' last hidden states; leaves x as it was. */
int ds2_mtp_after_decoder(ds2 *m, const pith_batch *b, pith_err *err);
int ds2_mtp_draft(pith_model *base, const pith_batch *b, int n_steps, int32_t *draft, float *logits, pith_err *err);

#endif
