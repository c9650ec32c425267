/* The layer library: the blocks decoders are composed of, written once over the backend interface
 * (backend.h). A block binds its tensors by canonical name ("blk.N." + the names below) and issues
 * its ops; an architecture's forward pass is a sequence of blocks (model/llama.c, model/olmo2.c).
 *
 *   - the step's buffers (pith_dec_bufs): the residual x, the normed input xb, Q, K, V, the attention
 *     output and the FFN's two hidden rows;
 *   - the attention block: Q/K/V projections of one input (one matmul op of three products), optional
 *     biases, QK-norm per head or over the whole projection, RoPE from the step's tables (none in NoPE
 *     layers), K/V into the layer's KV group, paged attention (window, sinks), the output projection
 *     with an optional bias;
 *   - the dense FFN block: gate and up of one input (two matrices, or the halves of a fused [gate | up]),
 *     a gated activation (SwiGLU, GeGLU), down; or an ungated MLP: up, an activation (relu^2), down;
 *   - the routed MoE block: the backend's MoE op over the layer's experts (pith_moe_config_of);
 *   - the output head: the final norm, hidden rows and logits (pith_be_head), the logits divided by
 *     hp.logit_scale and soft-capped where the hyper-parameters say.
 *
 * Blocks leave the residual add to the architecture only where it differs: pith_block_out adds a
 * product into x directly, or normalizes it first (post-norm architectures). A block whose out_scale is
 * set joins the residual times out_scale (Granite's residual multiplier): the attention and dense FFN
 * blocks scale the input of their last product (skipped when out_scale is exactly 1: the same bits);
 * experts run into b->y, which joins x times out_scale (even when 1: a sum rounded apart from x). */
#ifndef PITH_MODEL_LAYERS_H
#define PITH_MODEL_LAYERS_H

#include "backend/backend.h"
#include "model/decoder.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pith_dec_bufs {
    pith_buf *x, *xb;         /* dim */
    pith_buf *q, *att;        /* n_heads * head_dim */
    pith_buf *k, *v;          /* n_kv_heads * head_dim */
    pith_buf *hb, *hb2;       /* ffn (NULL when ffn is 0: experts only) */
    pith_buf *y;              /* dim: experts' output before it joins x times out_scale; made by the
                               * architecture that needs it (pith_dec_bufs_make leaves it NULL) */
} pith_dec_bufs;

int pith_dec_bufs_make(pith_decoder *d, int ffn, pith_dec_bufs *b, pith_err *err);

typedef struct pith_attn_block {
    const pith_weight *wq, *wk, *wv, *wo;
    const pith_weight *bq, *bk, *bv, *bo;   /* NULL: none */
    const pith_weight *sinks;               /* GPT-OSS, or NULL */
    pith_qk_norm qk_norm;
    const pith_weight *q_norm, *k_norm;
    float out_scale;                        /* 0: none (see above); set by the architecture after load */
    pith_buf *tp_sumsq;                     /* tensor parallelism with a QK norm over the whole projection:
                                               each row's sum of squares, summed across ranks */
} pith_attn_block;

/* attn_{q,k,v,output}.weight; attn_{q,k,v}.bias (required when hp.has_qkv_bias), attn_output.bias and
 * attn_sinks.weight where the file has them; attn_{q,k}_norm.weight of the width qk says (required when
 * hp.has_qk_norm; used wherever the file has them). */
int pith_attn_block_load(pith_decoder *d, int l, pith_qk_norm qk, pith_attn_block *a, pith_err *err);
/* Q, K, V of `in`, then biases, QK-norm, RoPE (rope_cs NULL: none) and the KV store. */
int pith_attn_block_qkv(pith_decoder *d, const pith_attn_block *a, int l, const pith_dec_bufs *b, const pith_buf *in,
                        const pith_buf *rope_cs, int n, pith_err *err);
/* Attention of b->q over layer l's KV group into b->att. */
void pith_attn_block_attend(pith_decoder *d, const pith_attn_block *a, int l, const pith_dec_bufs *b, int n);
/* The output projection of b->att (+ bias), b->att scaled first by a->out_scale: added to b->x when
 * post_norm is NULL, else normed by it first (through b->xb). */
int pith_attn_block_out(pith_decoder *d, const pith_attn_block *a, const pith_dec_bufs *b,
                        const pith_weight *post_norm, int n, pith_err *err);

typedef struct pith_ffn_block {
    const pith_weight *gate, *up, *down;    /* gate NULL: an ungated MLP */
    pith_moe_weights *moe;                  /* experts instead of gate/up/down, or NULL */
    pith_glu act;
    pith_activation up_act;                 /* an ungated MLP's: down(up_act(up x)) */
    float out_scale;                        /* 0: none (see above); set by the architecture after load */
} pith_ffn_block;

/* ffn_{gate,up,down}.weight, or gate and up as the halves of a fused ffn_gate_up.weight ([gate | up]
 * rows: Hugging Face's Granite) where the file has no ffn_gate.weight; shapes checked against hp.dim
 * and hp.ffn_dim. */
int pith_ffn_block_load(pith_decoder *d, int l, pith_glu act, pith_ffn_block *f, pith_err *err);
/* An ungated MLP: ffn_{up,down}.weight (shapes checked), down(act(up x)). */
int pith_ffn_block_load_mlp(pith_decoder *d, int l, pith_activation act, pith_ffn_block *f, pith_err *err);
/* The layer's experts (hf_experts: model/llama.h's Hugging Face names, or NULL), gated by silu(g) * u, or
 * by GPT-OSS's clamped SwiGLU when swiglu_limit > 0; fused_halves: pith_moe_config's (a checkpoint's fused
 * gate_up_proj holds gate and up as halves, not interleaved). */
int pith_ffn_block_load_moe(pith_decoder *d, int l, const char *const hf_experts[3], float swiglu_limit,
                            bool fused_halves, pith_ffn_block *f, pith_err *err);
/* FFN of `in` (b->xb after a pre-norm; b->x itself in post-norm blocks) added to b->x (post_norm NULL),
 * or normed by post_norm first (through b->xb); times f->out_scale where set (experts: through b->y). */
int pith_ffn_block_forward(pith_decoder *d, const pith_ffn_block *f, const pith_dec_bufs *b, const pith_buf *in,
                           const pith_weight *post_norm, int n, pith_err *err);

/* A block's last product (a recurrent mixer's out-projection) of `in` added to b->x: sharded, this rank's
 * partial product summed across ranks first (through b->xb). */
int pith_block_out_proj(pith_decoder *d, const pith_weight *w, const pith_buf *in, const pith_dec_bufs *b, int n,
                        pith_err *err);

/* Tensor parallelism: the RMSNorm of each of x's n rows over a width split across ranks (x and w hold
 * this rank's columns): each row's sum of squares (into sumsq, a 1-column buffer) summed across ranks
 * first. On the CPU backend's host buffers, the one that runs sharded. */
int pith_tp_rmsnorm(pith_decoder *d, pith_buf *x, const pith_weight *w, pith_buf *sumsq, int n, float eps,
                    pith_err *err);

/* The MoE configuration from the hyper-parameters (softmax or sigmoid gating, top-k, widths; silu(g) * u). */
void pith_moe_config_of(const pith_hparams *hp, pith_moe_config *cfg);

/* The last step: rows that want logits or hidden states (already kept at the front of b->x) through the
 * final norm, the hidden rows out, the logits rows through the output projection. */
int pith_head_forward(pith_decoder *d, const pith_dec_bufs *b, const pith_weight *norm, const pith_weight *output,
                      const pith_batch *batch, pith_err *err);
/* The same with the logits divided by logit_scale (0 or 1: none; Granite's logits_scaling). */
int pith_head_forward_scaled(pith_decoder *d, const pith_dec_bufs *b, const pith_weight *norm,
                             const pith_weight *output, float logit_scale, const pith_batch *batch, pith_err *err);

#ifdef __cplusplus
}
#endif

#endif
