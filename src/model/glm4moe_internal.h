/* GLM-4.5's model state, shared by the decoder (glm4moe.c) and its multi-token-prediction head
 * (glm4moe_mtp.c). Not a public interface: the two files are one model, a base decoder (decoder.h) whose
 * weights and buffers live in its backend (backend.h).
 *
 * Invariants: m->d is first (the decoder's impl is m); m->mtp is NULL unless the head was loaded, and
 * then the memory spec is pith_decoder_mtp_memory's (the head's layer n_layers last in the FULL group, a
 * RECURRENT group of no layer holding each sequence's last hidden state). */
#ifndef PITH_MODEL_GLM4MOE_INTERNAL_H
#define PITH_MODEL_GLM4MOE_INTERNAL_H

#include "model/decoder.h"
#include "model/layers.h"
#include "model/rope.h"

typedef struct glm4moe_mtp glm4moe_mtp;

typedef struct glm4moe_layer {
    const pith_weight *attn_norm, *ffn_norm;
    pith_attn_block attn;
    pith_ffn_block ffn;
} glm4moe_layer;

typedef struct glm4moe {
    pith_decoder d; /* first: the base decoder */
    glm4moe_layer *layers;
    const pith_weight *embd, *out_norm, *output;
    pith_rope rope;
    pith_dec_bufs bufs;
    pith_buf *cs;      /* the step's RoPE tables, rope_dim wide */
    glm4moe_mtp *mtp;  /* the MTP head, loaded with pith_model_options.mtp; else NULL */
} glm4moe;

/* Layer l's tensors (blk.{l}.*) into *L: attention, and a dense FFN or the experts. */
int glm4moe_load_layer(glm4moe *m, int l, glm4moe_layer *L, pith_err *err);

/* The MTP head (glm4moe_mtp.c). Loaded before the experts are placed (its layer has experts too). */
int glm4moe_mtp_load(glm4moe *m, pith_err *err);
void glm4moe_mtp_free(glm4moe *m);
/* The memory of a model with the head: every layer and the head's in one FULL group, and a RECURRENT
 * group of no layer whose state is the sequence's last hidden state. */
/* After the decoder: m->bufs.x holds every token's hidden state (batch order). Writes the head's K/V of
 * every token and the sequences' last hidden states; leaves x as it was. */
int glm4moe_mtp_after_decoder(glm4moe *m, const pith_batch *b, pith_err *err);
int glm4moe_mtp_draft(pith_model *base, const pith_batch *b, int n_steps, int32_t *draft, float *logits,
                      pith_err *err);

#endif
