/* The backend interface: the seam between a model's forward pass (src/model/) and the device that runs
 * it (src/backend/<name>/). A model composes its layers from these ops and never sees a kernel, a thread
 * pool or a device pointer; a backend owns everything with bytes in it:
 *
 *   - weights after load (pith_weight: matrices repacked for its kernels, vectors as float32),
 *   - activation buffers (pith_buf: rows of `cols` floats, grown to the batch by pith_be_reserve),
 *   - the memory groups' pools (KV blocks and recurrent state slots, allocated from the engine's layout),
 *   - the per-step data: tokens, positions, sequence ids, block tables, slots and the rows that want
 *     logits or hidden states, copied into the backend's own step buffers once per step by set_step
 *     (a draft of Qwen3.5's multi-token-prediction head: by set_draft).
 *
 * Invariants:
 *   - ops read per-step data only from the step buffers, never from values in their arguments: an op's
 *     arguments are weights, buffers, layer numbers and shape constants (row counts, widths) that a batch
 *     of the same shape (n_tokens, n_seqs, the rows that want logits) repeats exactly. So two forwards of
 *     the same shape issue the same op sequence with the same arguments, and a device backend may record
 *     a decode step once per batch-size bucket and replay it (tests/test_backend_replay.c checks this for
 *     every architecture through a recording backend).
 *   - ops run in the order they are issued; an op's output buffer may be read by the next op at once
 *     (a device backend orders its queue, the CPU backend runs each op to completion).
 *   - a step ends with pith_be_head, also when no row wants logits or hidden states (n_kept 0): the
 *     logits and hidden rows land in host memory, and a device backend runs the step's recorded work
 *     there (a draft's steps end with pith_be_mtp_logits).
 *   - no op allocates: pith_be_reserve (before a forward, where failing is allowed) sizes every buffer
 *     and scratch for a batch of n rows, from the shapes declared at load (attn_shape, gdn_shape);
 *     set_step and set_draft, which may fail too, grow what a larger step or draft needs.
 *   - buffers and weights belong to the backend that made them and die with it.
 *
 * The model side writes each op through the inline wrappers below (pith_be_*), which call the vtable, so
 * a test double can stand in for a backend by implementing the vtable (the recording backend logs each
 * op and its buffer shapes, then forwards to the backend it wraps). */
#ifndef PITH_BACKEND_H
#define PITH_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pith/batch.h"
#include "pith/memory.h"
#include "pith/modelfile.h"
#include "pith/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pith_backend pith_backend;

/* An activation buffer: rows of cols floats, row t at host + t * cols on a host backend (host is NULL
 * on a device backend). id numbers the backend's buffers in creation order (logs and replays). */
typedef struct pith_buf {
    int id;
    int cols;
    float *host;
} pith_buf;

/* A weight the backend holds: a matrix of rows x cols (a product's W, y = x W^T) or a vector of cols
 * float32 (rows == 1, vector set). impl is the backend's own. */
typedef struct pith_weight {
    int id;
    int rows, cols;
    bool vector;
    pith_dtype type;    /* as the file holds it */
    const float *vec;   /* vectors: the float32 values on the host (a device keeps its copy too) */
    void *impl;
} pith_weight;

/* ---- op arguments ---- */

/* One product of a matmul: out (+)= in W^T over the op's rows. */
typedef struct pith_be_mm {
    const pith_weight *w;
    pith_buf *out;
    bool accumulate;
} pith_be_mm;
#define PITH_BE_MAX_MM 4

/* RoPE of one kind (src/model/rope.h fills it): angles pos * inv_freq[i] (double), cos and sin times
 * mscale, rotating the first n_rot elements of each head (partial rotary) in pairs laid out as style
 * says. The tables are computed per step from the step's positions by pith_be_rope_tables. */
typedef struct pith_rope {
    int half;             /* n_rot / 2 frequencies */
    double *inv_freq;     /* [half], owned by whoever filled it (src/model/rope.c) */
    double mscale;        /* YaRN's attention factor; 1 otherwise */
    pith_rope_style style;
    /* M-RoPE, interleaved as Qwen3-VL and Qwen3.5 lay it out (sections[0] + [1] + [2] == half; all 0: none):
     * in a step with rope_pos (batch.h), frequency i turns with the row component when i % 3 == 1 and
     * i < 3 sections[1], the column one when i % 3 == 2 and i < 3 sections[2], else the temporal one;
     * without rope_pos every component is the token's position, which is plain RoPE. */
    int sections[3];
} pith_rope;

/* What happens to a token's Q, K and V between their projection and the KV store, in this order: the
 * biases added, the QK norm (per head over head_dim, or over the whole projection), RoPE (rope_cs NULL:
 * none, a NoPE layer), then K and V into the token's slot of the layer's KV group. k and v NULL: Q alone
 * (a layer that attends over another layer's K and V: Gemma 4's KV sharing), nothing stored. */
typedef enum pith_qk_norm {
    PITH_QK_NORM_NONE,
    PITH_QK_NORM_HEAD,    /* RMSNorm of each head (qwen3, gemma3): weights of head_dim */
    PITH_QK_NORM_ALL,     /* RMSNorm of the whole projection (olmo2): weights of n_heads * head_dim */
} pith_qk_norm;

typedef struct pith_be_qkv_args {
    pith_buf *q, *k, *v;
    const pith_weight *bq, *bk, *bv;     /* NULL: no bias */
    pith_qk_norm qk_norm;
    const pith_weight *q_norm, *k_norm;
    float eps;
    const pith_buf *rope_cs;             /* tables from pith_be_rope_tables, or NULL */
    pith_rope_style rope_style;
    int group, layer_index;              /* the layer's KV group and its index in the group */
    bool v_norm;                         /* each V head RMS-normed without a weight first (Gemma 4) */
} pith_be_qkv_args;

typedef struct pith_be_attn {
    const pith_buf *q;
    pith_buf *out;
    int group, layer_index;
    int window;                          /* the group's window, 0: full */
    const pith_weight *sinks;            /* [n_heads] GPT-OSS sinks, or NULL */
} pith_be_attn;

typedef enum pith_glu {
    PITH_GLU_SILU,        /* gate = silu(gate) * up */
    PITH_GLU_GELU_TANH,   /* gate = gelu_tanh(gate) * up */
} pith_glu;

/* An ungated MLP's activation, in place. */
typedef enum pith_activation {
    PITH_ACTIVATION_RELU2,     /* relu(x)^2 (Nemotron-H's "relu2") */
    PITH_ACTIVATION_GELU_TANH, /* GELU, tanh approximation (the vision encoders' MLPs: gelu_pytorch_tanh) */
    PITH_ACTIVATION_GELU,      /* GELU with erf, exact (nn.GELU(): Qwen-VL's patch merger) */
} pith_activation;

/* Bidirectional attention inside each span of `span` consecutive rows (one image's patches in a vision
 * encoder's step, whose n rows are n / span whole spans): row t of out is softmax(q_t K^T / sqrt(head_dim))
 * V per head over the rows of t's span, q, k, v and out rows of n_heads * head_dim. No cache: an encoder
 * sees its whole input at once. */
typedef struct pith_be_span_attn {
    const pith_buf *q, *k, *v;
    pith_buf *out;
    int n_heads, head_dim, span;
} pith_be_span_attn;

/* The routed mixture-of-experts FFN (src/backend/cpu/moe.h documents the math): its configuration. */
typedef enum pith_moe_act {
    PITH_MOE_SILU,         /* silu(g) * u */
    PITH_MOE_SWIGLU_CLAMP, /* GPT-OSS: clamped, (u + 1) * g * sigmoid(alpha * g) */
    PITH_MOE_GELU_TANH,    /* Gemma 4: gelu_tanh(g) * u */
} pith_moe_act;

typedef struct pith_moe_config {
    int dim;
    int n_experts;
    int top_k;
    int ffn;        /* each expert's hidden width */
    int shared_ffn; /* 0: no shared expert */
    pith_expert_gating gating;
    bool norm_topk;
    int n_group, topk_group; /* group-limited routing (pith_hparams.expert_groups); 0: none */
    float routed_scale;      /* the chosen weights' factor; 0 means 1 */
    pith_moe_act act;
    float clamp_alpha, clamp_limit; /* PITH_MOE_SWIGLU_CLAMP */
    /* > 0 (Gemma 4): the op's input is the un-normed residual; the experts read it RMS-normed by the
     * layer's pre_ffw_norm_2.weight and the router RMS-normed by ffn_gate_inp.scale and 1 / sqrt(dim),
     * both with this epsilon. 0: experts and router read the input as it is. */
    float in_norm_eps;
    /* Expert parallelism (model/decoder.h): this rank holds and runs experts [expert0, expert0 + n_local)
     * only, adding nothing for a token's other chosen experts (their ranks add theirs; the sum across
     * ranks is the layer's output); the router still scores every expert. n_local 0: every expert.
     * shared_elsewhere: the shared expert is another rank's (rank 0 runs it), so it is not added here. */
    int expert0, n_local;
    bool shared_elsewhere;
    /* Tensor-parallel experts instead (col_parts > 1; the CPU backend): this rank holds columns
     * [col_part F / col_parts, (col_part + 1) F / col_parts) of every expert's hidden width F (its rows
     * of gate and up, its columns of down) and runs every chosen expert on them; the sum across ranks is
     * the layer's output (the down bias is added on part 0 only). ffn stays the file's F. */
    int col_part, col_parts;
    /* Loading only: how Hugging Face's fused experts (model.layers.N.mlp.experts.gate_up_proj, [experts][dim]
     * [2 ffn], and down_proj, [experts][ffn][dim], applied as x @ W) split gate_up_proj's last dimension.
     * false: interleaved, gate the even columns and up the odd ones (GPT-OSS); true: halves, gate the first
     * ffn columns (Qwen3-VL-MoE's Qwen3VLMoeTextExperts: gate_up.chunk(2, -1)). */
    bool fused_halves;
} pith_moe_config;

/* The most experts a layer may have: every backend's MoE op takes this many. */
#define PITH_BE_MAX_EXPERTS 1024

typedef struct pith_moe_weights pith_moe_weights; /* a layer's router and experts, as the backend holds them */

/* LFM2's gated short convolution, one layer of a RECURRENT group: for each token, b and c gates and x
 * from one projection (in: rows of [B | C | x], 3 * dim), y = C * conv(B * x) into out, where conv is
 * the causal depthwise convolution of width kernel (w: [dim][kernel]) over the token's sequence, whose
 * last kernel - 1 inputs are the sequence's state (zero at position 0; backend/cpu/recurrent.h), kept in
 * the sequence's state slot at float offset state_offset; after a token the step names a checkpoint
 * for, the state is copied into that slot too. */
typedef struct pith_be_short_conv_args {
    const pith_buf *in;
    pith_buf *out;
    const pith_weight *w;
    int kernel;
    int group;
    size_t state_offset;
} pith_be_short_conv_args;

/* Mamba2 */

/* The widest causal convolution the convolution ops take. */
#define PITH_BE_MAX_CONV_KERNEL 16

/* Mamba2's mixer between its in- and out-projections (Granite 4.0-H, Nemotron-H), one layer of a
 * RECURRENT group. With H heads of head_dim P, G B/C groups of d_state N, inner = H P and conv = inner +
 * 2 G N channels, each row of proj is the in-projection's [z (inner) | xBC (conv) | dt (H)]:
 *   xBC = silu(conv(xBC) + conv_b): the causal depthwise convolution of width kernel (conv_w:
 *         [conv][kernel]) over the token's sequence, whose last kernel - 1 inputs are the sequence's
 *         state (zero at position 0), written over xBC in proj;
 *   the SSD scan of each head h over the sequence's run (backend/cpu/recurrent.h), reading x, B, C from
 *         xBC: dt = softplus(dt + dt_bias[h]), S = exp(dt A[h]) S + dt x B^T, y = S C + D[h] x, from the
 *         sequence's SSM state S ([H][P][N]);
 *   y = RMSNorm(y * silu(z)) per group of norm_group elements (norm_group == inner: one norm), times
 *         norm, times out_scale (0 or 1: none), into y (rows of inner); with norm NULL (the CPU backend,
 *         under tensor parallelism, whose norm spans ranks) y * silu(z) alone.
 * The layer's state in the sequence's slot, from float state_offset: the convolution's [kernel - 1]
 * [conv] floats, oldest first, then the SSM state. After a token the step names a checkpoint for, both
 * are copied into that slot too. The op runs over every token of the step (n is its n_tokens). */
typedef struct pith_be_mamba2_args {
    pith_buf *proj;
    pith_buf *y;
    const pith_weight *conv_w, *conv_b;  /* [conv][kernel], [conv] */
    const pith_weight *dt_bias, *A, *D;  /* [H] each; A = -exp(A_log) < 0 */
    const pith_weight *norm;             /* [inner] */
    int kernel, n_heads, n_groups, head_dim, d_state;
    int norm_group;
    float eps, out_scale;
    int group;
    size_t state_offset;
} pith_be_mamba2_args;

/* ---- Qwen3.5 (model/qwen35.c, model/qwen35_mtp.c) ---- */

/* The Gated DeltaNet mixer of one layer of a RECURRENT group, over each sequence's run of tokens (the
 * math and the state layouts: backend/cpu/recurrent.h):
 *   - qkv (rows of [q | k | v]: n_k_heads * dk, n_k_heads * dk, n_v_heads * dv) goes in place through
 *     the causal depthwise convolution of width kernel (conv_w: [channels][kernel]) and SiLU, whose last
 *     kernel - 1 inputs are the sequence's convolution state;
 *   - in place, beta = sigmoid(beta) and alpha = ssm_a * softplus(alpha + dt_bias) (the log-decay g),
 *     rows of n_v_heads;
 *   - the delta rule per value head (q and k L2-normed with eps 1e-6, q scaled by 1/sqrt(dk)) from the
 *     sequence's state, its output into out (rows of n_v_heads * dv).
 * The states sit at float offset state_offset of the sequence's slot: the convolution's [kernel - 1]
 * [channels] floats, then the delta rule's [n_v_heads][dk][dv]; both start from zero at position 0, and
 * after a token the step names a checkpoint for, both are copied into that slot too. The backend picks
 * the scan's form (recurrent or chunked); either way the result does not depend on how the step cut a
 * sequence's tokens. dk and dv are those declared by gdn_shape. */
typedef struct pith_be_gdn_args {
    pith_buf *qkv, *beta, *alpha;
    pith_buf *out;
    const pith_weight *conv_w, *dt_bias, *ssm_a;
    int kernel;
    int n_k_heads, n_v_heads, dk, dv;
    bool qk_tiled;       /* value head h reads query/key head h % n_k_heads (GGUF's head order), else
                          * h / (n_v_heads / n_k_heads) (Hugging Face's repeat_interleave) */
    int group;
    size_t state_offset;
} pith_be_gdn_args;

/* The DeltaNet output's gated RMSNorm: per head of w->cols elements, x = rms(x) * w * silu(z), z the
 * same head of the gate rows. */
typedef struct pith_be_gated_norm_args {
    pith_buf *x;
    const pith_buf *z;
    const pith_weight *w;
    float eps;
} pith_be_gated_norm_args;

/* Gated attention's Q, K and V: the query projection gives each head's query and its output gate side
 * by side (qg: rows of n_heads x [query | gate], head_dim each). Per token: each query head of qg
 * RMS-normed by q_norm into q, each K head by k_norm in place (weights of head_dim), both rotated by
 * rope_cs (NULL: none; pith_be_qkv_args), then K and V into the token's slot of the layer's KV group.
 * qg and q NULL: K and V alone. */
typedef struct pith_be_gated_qkv_args {
    const pith_buf *qg;
    pith_buf *q, *k;
    const pith_buf *v;
    const pith_weight *q_norm, *k_norm;
    float eps;
    const pith_buf *rope_cs;
    pith_rope_style rope_style;
    int group, layer_index;
} pith_be_gated_qkv_args;

/* The attention output times sigmoid(gate): att (rows of n_heads * head_dim) by the gate halves of qg. */
typedef struct pith_be_attn_gate_args {
    pith_buf *att;
    const pith_buf *qg;
} pith_be_attn_gate_args;

/* The multi-token-prediction head (model/qwen35_mtp.c documents it). Its memory: its K/V of the
 * positions the forwards computed live in a KV group as one more layer; each sequence's last hidden
 * state sits in its RECURRENT slot at float offset tail_offset; the K/V of the draft positions and the
 * tokens drafted so far are the backend's own, from set_draft to the draft's end.
 *
 * Its input rows, [enorm(embedding of the token) | hnorm(hidden state before it)] (2 * dim), for:
 *   step < 0 (a forward): every token of the step, the hidden state before it being hidden's row of the
 *     token before in its sequence, else the sequence's slot's (zeros at position 0);
 *   step 0 of a draft: the step's token of each sequence, with its slot's hidden state;
 *   step i > 0: the token drafted at step i - 1, with hidden's row of the sequence (the head's output). */
#define PITH_BE_MTP_MAX_STEPS 16
#define PITH_BE_MTP_MAX_HEAD_DIM 1024

typedef struct pith_be_mtp_input_args {
    const pith_weight *embd, *enorm, *hnorm;
    float eps;
    const pith_buf *hidden;
    pith_buf *out;
    int step;
    int group;           /* the RECURRENT group */
    size_t tail_offset;
} pith_be_mtp_input_args;

/* After a forward: hidden's row of each sequence's last token into its slot of group at tail_offset,
 * and the row of each token the step names a checkpoint for into that slot. */
typedef struct pith_be_mtp_save_args {
    const pith_buf *hidden;
    int group;
    size_t tail_offset;
} pith_be_mtp_save_args;

/* A draft step's attention: for each sequence at the step's position p, the draft position p + step;
 * its query heads out of qg (RMS-normed by q_norm into q) and its K heads (normed by k_norm in place),
 * rotated at p + step by rope; K and V kept as the draft position's; then each query head attends over
 * the head's K/V of positions 1..p-1 (layer layer_index of KV group `group`) and of the draft positions
 * p..p+step, times sigmoid(gate), into out. plain (GLM-4.5's head, model/glm4moe_mtp.c): qg holds plain
 * query rows (n_heads x head_dim, no gate; q may be qg), q_norm and k_norm may be NULL (no norm), RoPE
 * covers the first 2 * rope->half dimensions of each head, and the output is not gated. */
typedef struct pith_be_mtp_attn_args {
    const pith_buf *qg;
    pith_buf *q, *k;
    const pith_buf *v;
    pith_buf *out;
    const pith_weight *q_norm, *k_norm;
    float eps;
    const pith_rope *rope;
    int step;
    int group, layer_index;
    bool plain;
} pith_be_mtp_attn_args;

/* A draft step's end: the vocabulary projection of x's rows (one per sequence), each row's argmax the
 * sequence's draft token of this step (into the draft set_draft named, and the next step's input), the
 * rows into the logits set_draft named, when it named any. Tensor parallelism (the CPU backend; best not
 * NULL): output holds this rank's vocabulary rows [vocab0, vocab0 + output->rows) of set_draft's
 * n_vocab, tokens are vocab0 + the row's argmax, and best gets each row's largest logit, for the ranks
 * to settle the draft token (mtp_pick); no logits rows then. */
typedef struct pith_be_mtp_logits_args {
    const pith_buf *x;
    const pith_weight *output;
    int step;
    int vocab0;
    float *best;
} pith_be_mtp_logits_args;

/* ---- DeepSeek's multi-head latent attention (model/deepseek2.c) ---- */

/* One layer of MLA in its weight-absorbed form, over a FULL group whose K rows are each token's
 * [c_kv (rank) | k_pe (rope)] and whose V is K itself (the group declares v_dim 0): per token,
 *   - c_kv = RMSNorm(kv[0, rank)) by kv_norm, k_pe = RoPE(kv[rank, rank + rope)) (both in place), and
 *     [c_kv | k_pe] into the token's slot of the group, layer layer_index;
 *   - per head h, with q_h = [q_nope (nope) | q_pe (rope)] of q: q_pe rotated in place, and the absorbed
 *     query [W_UK_h^T q_nope | q_pe] into qa (rows of n_heads x (rank + rope)), k_b[h] being W_UK_h^T
 *     (rank x nope);
 *   - attention of the absorbed queries over the group's rows (one KV head of rank + rope, the shape's
 *     scale; values: the same rows, of which the first rank elements are the latent output) into lat
 *     (rows of n_heads x (rank + rope));
 *   - o_h = W_UV_h lat_h[0, rank) into out (rows of n_heads x v), v_b[h] being W_UV_h (v x rank).
 * The expanded form, for a sequence whose run in the step has at least expand_min tokens (kv_b not NULL):
 * its context's latents go up through kv_b (W_UKV: n_heads x [nope | v] rows of rank) PITH_BE_MLA_CHUNK
 * positions at a time (into kvx, rows of n_heads x (nope + v), from g, rows of rank + rope), and each
 * query head attends with [q_nope | q_pe] over [k_nope | k_pe] and those values (ms: rows of 2 x n_heads,
 * its running max and sum), as the modeling files compute it. The same function as the absorbed form up
 * to rounding; which form a token took depends on how many tokens of its sequence the step holds.
 * The model declares the attention shape {n_heads, 1, rank + rope, scale}. A backend without this op
 * leaves it NULL and the model refuses to load on it. */
#define PITH_BE_MLA_CHUNK 64
typedef struct pith_be_mla_args {
    pith_buf *q, *kv;
    const pith_weight *kv_norm;
    float eps;
    const pith_buf *rope_cs;
    pith_rope_style rope_style;
    const pith_weight *const *k_b, *const *v_b;
    pith_buf *qa, *lat, *out;
    int n_heads, rank, rope, nope, v;
    int group, layer_index;
    /* the expanded form: kv_b NULL, or expand_min >= PITH_BE_MLA_CHUNK and the buffers */
    const pith_weight *kv_b;
    pith_buf *g, *kvx, *ms;
    int expand_min;
} pith_be_mla_args;

/* A draft step of DeepSeek's MTP head (model/deepseek2_mtp.c; set_draft made the step): the absorbed
 * MLA of `mla` (rope_cs, kv_b and expand_min unused) for each sequence at the step's position p, at the
 * draft position p + step: kv's row normed and its k_pe rotated at p + step by rope, kept as the draft
 * position's row (not stored in the group); each head's q_pe rotated there and its absorbed query made
 * as the mla op makes it; then each head attends over the group's rows of positions 1..p-1 (layer
 * mla->layer_index; position 0 holds a pair the head never reads) and the draft rows p..p+step, and
 * o_h = W_UV_h lat_h into mla->out. The backend's draft memory holds the rows (one KV head of
 * rank + rope: the model's attention shape). */
typedef struct pith_be_mtp_mla_args {
    const pith_be_mla_args *mla;
    const pith_rope *rope;
    int step;
} pith_be_mtp_mla_args;

/* The attention shape every attention op of the model shares. */
typedef struct pith_be_attn_shape {
    int n_heads, n_kv_heads, head_dim;
    float scale;          /* applied to q.k */
    /* A second shape for the layers of one memory group (Gemma 4's global layers: wider heads, other KV
     * heads; the same n_heads and scale): group alt_group has alt_n_kv_heads heads of alt_head_dim.
     * alt_head_dim 0: every group has the shape above. */
    int alt_group, alt_n_kv_heads, alt_head_dim;
} pith_be_attn_shape;

/* The last op of a step: the final norm of the kept rows of x (pith_be_keep_rows) into scratch, the
 * hidden rows into the step's hidden output, the vocabulary projection of the logits rows into the
 * step's logits (divided by logit_scale when it is > 0 and not 1, Granite's logits_scaling; then
 * soft-capped when softcap > 0). Both outputs are host memory named by set_step. */
typedef struct pith_be_head_args {
    pith_buf *x, *scratch;
    const pith_weight *norm;
    float eps;
    const pith_weight *output;
    float softcap;
    float logit_scale;
} pith_be_head_args;

/* ---- the vtable ---- */

typedef struct pith_backend_vt {
    const char *name;
    void (*destroy)(pith_backend *be);

    /* weights: a 2-D tensor viewed or repacked; a vector of float32 the backend takes over (free()d) */
    int (*matrix)(pith_backend *be, const pith_tensor *t, const char *name, pith_weight **out, pith_err *err);
    /* a lookup table (embeddings): rows read by token id, kept in the file's layout */
    int (*table)(pith_backend *be, const pith_tensor *t, const char *name, pith_weight **out, pith_err *err);
    int (*vector)(pith_backend *be, float *data, int n, pith_weight **out, pith_err *err);
    int (*moe_load)(pith_backend *be, const pith_model_file *f, int layer, const pith_moe_config *cfg,
                    const char *const hf_experts[3], pith_moe_weights **out, pith_err *err);
    /* all layers' experts loaded: place and repack them (mapped or repacked, one choice per model) */
    int (*moe_place)(pith_backend *be, char *what, size_t what_size, pith_err *err);
    int (*attn_shape)(pith_backend *be, const pith_be_attn_shape *shape, pith_err *err);

    /* buffers and scratch */
    pith_buf *(*buffer)(pith_backend *be, int cols, pith_err *err);
    int (*reserve)(pith_backend *be, int n_rows, pith_err *err);

    /* the memory groups */
    int (*mem_alloc)(pith_backend *be, const pith_mem_spec *spec, const pith_mem_layout *lay, pith_err *err);
    void (*mem_free)(pith_backend *be);
    bool (*mem_allocated)(const pith_backend *be);
    int (*copy_blocks)(pith_backend *be, int group, const int32_t *src, const int32_t *dst, int n, pith_err *err);

    /* the step: checks the batch against the memory, grows the buffers to it, and copies its per-step
     * data into the step buffers; logits ([rows that want logits][n_vocab]) and b->hidden are where
     * pith_be_head leaves the step's outputs */
    int (*set_step)(pith_backend *be, const pith_batch *b, const pith_mem_spec *spec, int n_vocab, float *logits,
                    pith_err *err);

    /* ops over the first n rows */
    void (*embed)(pith_backend *be, const pith_weight *table, float scale, pith_buf *out, int n);
    void (*rope_tables)(pith_backend *be, const pith_rope *rope, pith_buf *cs, int n);
    void (*rmsnorm)(pith_backend *be, const pith_buf *x, const pith_weight *w, float eps, pith_buf *out, int n);
    int (*matmul)(pith_backend *be, const pith_buf *in, const pith_be_mm *outs, int n_outs, int n, pith_err *err);
    void (*qkv)(pith_backend *be, const pith_be_qkv_args *a, int n);
    void (*attention)(pith_backend *be, const pith_be_attn *a, int n);
    void (*glu)(pith_backend *be, pith_glu kind, pith_buf *gate, const pith_buf *up, int n);
    void (*add_bias)(pith_backend *be, pith_buf *y, const pith_weight *bias, int n);
    /* x += RMSNorm(y) with w (post-norms); y is left normed */
    void (*norm_add)(pith_backend *be, pith_buf *x, pith_buf *y, const pith_weight *w, float eps, int n);
    /* y *= s (a block's output scaled before it joins the residual: Granite's residual multiplier) */
    void (*scale)(pith_backend *be, pith_buf *y, float s, int n);
    /* x += s * y */
    void (*scale_add)(pith_backend *be, pith_buf *x, const pith_buf *y, float s, int n);
    /* Llama 4's attention temperature (Mistral 3's queries): row t of y times 1 + beta * ln(1 + floor(pos_t /
     * length)), pos_t the step's position of token t (a factor of exactly 1 below `length`). NULL in a backend
     * that has no such op: a model that needs it refuses to build there. */
    void (*attn_temp)(pith_backend *be, pith_buf *y, float beta, int length, int n);
    /* y = 0 (the output of an op that accumulates, before it) */
    void (*zero)(pith_backend *be, pith_buf *y, int n);
    /* dst = src's columns [col0, col0 + dst->cols) (Gemma 4: one layer's slice of the per-layer inputs) */
    void (*copy_cols)(pith_backend *be, pith_buf *dst, const pith_buf *src, int col0, int n);
    /* y = kind(y), elementwise (an ungated MLP) */
    void (*activation)(pith_backend *be, pith_activation kind, pith_buf *y, int n);
    int (*moe)(pith_backend *be, const pith_moe_weights *w, const pith_buf *in, pith_buf *out, int n, pith_err *err);
    /* moves the rows of the tokens that want logits or hidden states to the front of each buffer, in
     * batch order (the step's row list) */
    void (*keep_rows)(pith_backend *be, pith_buf *const *bufs, int n_bufs);
    int (*head)(pith_backend *be, const pith_be_head_args *h, int n_kept, int n_logits, int n_vocab, pith_err *err);

    /* recurrent mixers over each sequence's run of tokens */
    void (*short_conv)(pith_backend *be, const pith_be_short_conv_args *a, int n);
    /* Mamba2 */
    void (*mamba2)(pith_backend *be, const pith_be_mamba2_args *a, int n);


    /* Qwen3.5 */
    /* the DeltaNet heads' widths, declared once at load (reserve sizes the scan's scratch by them) */
    int (*gdn_shape)(pith_backend *be, int dk, int dv, pith_err *err);
    void (*gdn)(pith_backend *be, const pith_be_gdn_args *a, int n);
    void (*gated_norm)(pith_backend *be, const pith_be_gated_norm_args *a, int n);
    void (*gated_qkv)(pith_backend *be, const pith_be_gated_qkv_args *a, int n);
    void (*attn_gate)(pith_backend *be, const pith_be_attn_gate_args *a, int n);
    /* The MTP head's draft (model.h: mtp_draft), NULL with the mtp_* ops where the backend has none (the
     * models refuse their heads at load there): checks the batch as mtp_draft takes it against the
     * memory and makes it the step the draft's ops read; draft[s * n_steps + i] and, when logits is not
     * NULL, the rows of logits ([n_seqs * n_steps] x n_vocab) are where mtp_logits leaves its results. */
    int (*set_draft)(pith_backend *be, const pith_batch *b, int n_vocab, int n_steps, int32_t *draft, float *logits,
                     pith_err *err);
    void (*mtp_input)(pith_backend *be, const pith_be_mtp_input_args *a, int n);
    void (*mtp_save)(pith_backend *be, const pith_be_mtp_save_args *a);
    void (*mtp_attention)(pith_backend *be, const pith_be_mtp_attn_args *a, int n);
    int (*mtp_logits)(pith_backend *be, const pith_be_mtp_logits_args *a, int n, pith_err *err);
    /* Sets each sequence's draft token of this step (the draft's entry and the next step's input) to
     * tokens[s]: the ranks' choice under tensor parallelism. NULL where the backend runs unsharded only. */
    void (*mtp_pick)(pith_backend *be, int step, const int32_t *tokens, int n);

    /* DeepSeek's MLA (NULL: not supported by this backend) */
    int (*mla)(pith_backend *be, const pith_be_mla_args *a, int n, pith_err *err);
    /* DeepSeek's MTP head: NULL where the backend has none (the model refuses the head there) */
    int (*mtp_mla)(pith_backend *be, const pith_be_mtp_mla_args *a, int n, pith_err *err);

    /* Vision encoders (model/vision.h); NULL in a backend that has none (the encoder refuses to load
     * there). An encoder's step is n rows, whole spans of one image's patches each: set_rows copies the
     * step's input (the patches' pixels, flattened) into a buffer, as set_step does the tokens, and the
     * ops after it read only buffers and weights. */
    int (*set_rows)(pith_backend *be, pith_buf *dst, const float *rows, int n, pith_err *err);
    /* out = (x - mean) / sqrt(var + eps) * w + b per row (b NULL: none); mean and variance in double */
    void (*layernorm)(pith_backend *be, const pith_buf *x, const pith_weight *w, const pith_weight *b, float eps,
                      pith_buf *out, int n);
    /* x[t] += row t % period of rows, a vector weight of period * x->cols floats (learned position
     * embeddings, one row per patch of an image) */
    void (*add_rows)(pith_backend *be, pith_buf *x, const pith_weight *rows, int n);
    void (*span_attention)(pith_backend *be, const pith_be_span_attn *a, int n);
    /* each span of side * side rows (a row-major grid of patches) averaged over k x k windows into
     * (side / k)^2 rows of out, row-major too; n is the input's rows */
    void (*pool_avg)(pith_backend *be, const pith_buf *in, pith_buf *out, int side, int k, int n);
    /* Rotary embedding of each row by its own angles (a 2-D RoPE whose positions are a patch's row and
     * column): every head of x's row t (heads of 2 * cs->cols / 2 = head_dim elements) rotates its halves,
     * x1' = x1 cos - x2 sin, x2' = x2 cos + x1 sin, with cs's row t = [cos (head_dim / 2) | sin (head_dim / 2)]
     * (rotate-half pairs (i, i + head_dim / 2)). NULL where the backend has no such op. */
    void (*rope_rows)(pith_backend *be, pith_buf *x, const pith_buf *cs, int n);
    /* x[t] += part `part` (hp.dim floats from part * x->cols) of the step's embeds row of each token t
     * with an embed row (batch.h: Qwen3-VL's DeepStack, after layer part - 1); the others unchanged. NULL
     * where the backend has none (such a model refuses to build there). */
    void (*add_embed_part)(pith_backend *be, pith_buf *x, int part, int n);
    /* out's row r = in's rows k r .. k r + k - 1 side by side (out->cols == k * in->cols): k consecutive
     * patches merged into one token's input; n is in's rows, a multiple of k. NULL where absent. */
    void (*group_rows)(pith_backend *be, const pith_buf *in, pith_buf *out, int k, int n);

    /* Tests and debugging, never on a step's path: the first n rows of a buffer in or out (host floats),
     * and sync, which runs what the step has issued so far and waits for it (a device backend records
     * ops and runs them at the head; such a step is then not replayed). */
    int (*buf_write)(pith_backend *be, pith_buf *b, int n, const float *src, pith_err *err);
    int (*buf_read)(pith_backend *be, const pith_buf *b, int n, float *dst, pith_err *err);
    int (*sync)(pith_backend *be, pith_err *err);

    /* Partial offload (src/backend/split/): the weights bound and the ops issued from here on belong to
     * this layer (0..n_layers - 1), to the input (PITH_BE_LAYER_INPUT: embeddings, RoPE tables) or to the
     * output (PITH_BE_LAYER_OUTPUT: the final norm and head). NULL in a single backend, which has one
     * side for everything; an architecture calls it at load and in its forward (pith_be_begin_layer). */
    void (*begin_layer)(pith_backend *be, int layer);
} pith_backend_vt;

#define PITH_BE_LAYER_INPUT (-1)
#define PITH_BE_LAYER_OUTPUT (-2)

struct pith_backend {
    const pith_backend_vt *vt;
    int n_threads;         /* host threads the backend runs on (0 for a device) */
    char kernels[48];      /* what it runs: the CPU kernel table's name, a device's name */
};

/* The CPU backend (src/backend/cpu/backend_cpu.c): today's kernels, tiles and thread pool. n_threads
 * <= 0: one per online CPU; PITH_FORCE_SCALAR (pith_backend_force_scalar, backend/info.h: the one reader) picks the portable kernels. */
int pith_backend_cpu_create(int n_threads, pith_backend **out, pith_err *err);

/* The Vulkan backend (src/backend/vulkan/): device is an index into the Vulkan devices the loader lists
 * (pith_backend_list_devices), or -1 for the first that can run it. A build without Vulkan
 * (src/backend/vulkan_absent.c) answers with an error that says so. */
int pith_backend_vulkan_create(int device, pith_backend **out, pith_err *err);
/* Appends one line per Vulkan device to out (backend/info.h: pith_backend_list_devices). */
int pith_backend_vulkan_list(char *out, size_t cap, pith_err *err);
/* The device's measured copy bandwidth (GB/s, read plus write over two buffers of `bytes`) and float
 * throughput (GFLOP/s, FMA chains), and its name (backend/info.h: pith_backend_device_probe). */
int pith_backend_vulkan_probe(int device, size_t bytes, double *gbs, double *gflops, char *name, size_t name_cap,
                              pith_err *err);

/* One model across a device and the CPU (src/backend/split/split.c says how): the model's n_layers
 * layers split by gpu_layers (parsed by pith_backend_parse_gpu_layers: the last N on the device, or
 * "auto": as many as the device's memory holds, judged by the file's tensors' bytes; NULL or "" with a
 * device: auto, or every layer without a file), and the experts of the first n_cpu_moe MoE layers
 * (< 0: all) kept on the CPU. Creates the
 * plain CPU backend for 0 layers on the device, the plain device backend for all of them without CPU
 * experts. what (may be NULL) gets one line saying what went where. */
int pith_backend_create_split(const char *device, int n_threads, int n_layers, const char *gpu_layers,
                              int n_cpu_moe, const pith_model_file *file, char *what, size_t what_size,
                              pith_backend **out, pith_err *err);
/* A split backend's side (device: the device's, else the CPU's), or NULL for another backend (tests). */
pith_backend *pith_backend_split_side(pith_backend *be, bool device);
/* The device-local bytes a Vulkan backend may still allocate (its heaps, less what it holds, under
 * PITH_VK_MEMORY), for -ngl auto. */
int pith_backend_vulkan_free_memory(pith_backend *be, size_t *bytes, pith_err *err);

/* The backend a device string names: "cpu", "vulkan" (the first usable Vulkan device) or "vulkan:N".
 * NULL or "": the environment's PITH_DEVICE, else "cpu". n_threads is the CPU backend's. */
int pith_backend_create(const char *device, int n_threads, pith_backend **out, pith_err *err);

static inline void pith_backend_free(pith_backend *be) {
    if (be) be->vt->destroy(be);
}

/* ---- the wrappers the layers call ---- */

static inline int pith_be_matrix(pith_backend *be, const pith_tensor *t, const char *name, pith_weight **out,
                                 pith_err *err) {
    return be->vt->matrix(be, t, name, out, err);
}
static inline int pith_be_vector(pith_backend *be, float *data, int n, pith_weight **out, pith_err *err) {
    return be->vt->vector(be, data, n, out, err);
}
static inline int pith_be_table(pith_backend *be, const pith_tensor *t, const char *name, pith_weight **out,
                                pith_err *err) {
    return be->vt->table(be, t, name, out, err);
}
static inline pith_buf *pith_be_buffer(pith_backend *be, int cols, pith_err *err) {
    return be->vt->buffer(be, cols, err);
}
static inline int pith_be_reserve(pith_backend *be, int n, pith_err *err) { return be->vt->reserve(be, n, err); }
static inline void pith_be_embed(pith_backend *be, const pith_weight *table, float scale, pith_buf *out, int n) {
    be->vt->embed(be, table, scale, out, n);
}
static inline void pith_be_rope_tables(pith_backend *be, const pith_rope *r, pith_buf *cs, int n) {
    be->vt->rope_tables(be, r, cs, n);
}
static inline void pith_be_rmsnorm(pith_backend *be, const pith_buf *x, const pith_weight *w, float eps, pith_buf *out,
                                   int n) {
    be->vt->rmsnorm(be, x, w, eps, out, n);
}
static inline int pith_be_matmul(pith_backend *be, const pith_buf *in, const pith_be_mm *outs, int n_outs, int n,
                                 pith_err *err) {
    return be->vt->matmul(be, in, outs, n_outs, n, err);
}
static inline void pith_be_qkv(pith_backend *be, const pith_be_qkv_args *a, int n) { be->vt->qkv(be, a, n); }
static inline void pith_be_attention(pith_backend *be, const pith_be_attn *a, int n) { be->vt->attention(be, a, n); }
static inline void pith_be_glu(pith_backend *be, pith_glu kind, pith_buf *gate, const pith_buf *up, int n) {
    be->vt->glu(be, kind, gate, up, n);
}
static inline void pith_be_add_bias(pith_backend *be, pith_buf *y, const pith_weight *bias, int n) {
    be->vt->add_bias(be, y, bias, n);
}
static inline void pith_be_norm_add(pith_backend *be, pith_buf *x, pith_buf *y, const pith_weight *w, float eps,
                                    int n) {
    be->vt->norm_add(be, x, y, w, eps, n);
}
static inline void pith_be_scale(pith_backend *be, pith_buf *y, float s, int n) { be->vt->scale(be, y, s, n); }
static inline void pith_be_scale_add(pith_backend *be, pith_buf *x, const pith_buf *y, float s, int n) {
    be->vt->scale_add(be, x, y, s, n);
}
static inline void pith_be_zero(pith_backend *be, pith_buf *y, int n) { be->vt->zero(be, y, n); }
static inline void pith_be_attn_temp(pith_backend *be, pith_buf *y, float beta, int length, int n) {
    be->vt->attn_temp(be, y, beta, length, n);
}
static inline void pith_be_copy_cols(pith_backend *be, pith_buf *dst, const pith_buf *src, int col0, int n) {
    be->vt->copy_cols(be, dst, src, col0, n);
}
static inline void pith_be_activation(pith_backend *be, pith_activation kind, pith_buf *y, int n) {
    be->vt->activation(be, kind, y, n);
}
static inline int pith_be_moe(pith_backend *be, const pith_moe_weights *w, const pith_buf *in, pith_buf *out, int n,
                              pith_err *err) {
    return be->vt->moe(be, w, in, out, n, err);
}
static inline int pith_be_head(pith_backend *be, const pith_be_head_args *h, int n_kept, int n_logits, int n_vocab,
                               pith_err *err) {
    return be->vt->head(be, h, n_kept, n_logits, n_vocab, err);
}
static inline void pith_be_short_conv(pith_backend *be, const pith_be_short_conv_args *a, int n) {
    be->vt->short_conv(be, a, n);
}
static inline void pith_be_mamba2(pith_backend *be, const pith_be_mamba2_args *a, int n) {
    be->vt->mamba2(be, a, n);
}
static inline void pith_be_keep_rows(pith_backend *be, pith_buf *const *bufs, int n_bufs) {
    be->vt->keep_rows(be, bufs, n_bufs);
}

static inline void pith_be_begin_layer(pith_backend *be, int layer) {
    if (be->vt->begin_layer) be->vt->begin_layer(be, layer);
}

/* vision encoders */
static inline bool pith_be_has_vision(const pith_backend *be) {
    const pith_backend_vt *v = be->vt;
    return v->set_rows && v->layernorm && v->add_rows && v->span_attention && v->pool_avg;
}
static inline int pith_be_set_rows(pith_backend *be, pith_buf *dst, const float *rows, int n, pith_err *err) {
    return be->vt->set_rows(be, dst, rows, n, err);
}
static inline void pith_be_layernorm(pith_backend *be, const pith_buf *x, const pith_weight *w, const pith_weight *b,
                                     float eps, pith_buf *out, int n) {
    be->vt->layernorm(be, x, w, b, eps, out, n);
}
static inline void pith_be_add_rows(pith_backend *be, pith_buf *x, const pith_weight *rows, int n) {
    be->vt->add_rows(be, x, rows, n);
}
static inline void pith_be_span_attention(pith_backend *be, const pith_be_span_attn *a, int n) {
    be->vt->span_attention(be, a, n);
}
static inline void pith_be_pool_avg(pith_backend *be, const pith_buf *in, pith_buf *out, int side, int k, int n) {
    be->vt->pool_avg(be, in, out, side, k, n);
}
static inline void pith_be_add_embed_part(pith_backend *be, pith_buf *x, int part, int n) {
    be->vt->add_embed_part(be, x, part, n);
}
static inline void pith_be_rope_rows(pith_backend *be, pith_buf *x, const pith_buf *cs, int n) {
    be->vt->rope_rows(be, x, cs, n);
}
static inline void pith_be_group_rows(pith_backend *be, const pith_buf *in, pith_buf *out, int k, int n) {
    be->vt->group_rows(be, in, out, k, n);
}

/* Qwen3.5 */
static inline int pith_be_gdn_shape(pith_backend *be, int dk, int dv, pith_err *err) {
    return be->vt->gdn_shape(be, dk, dv, err);
}
static inline void pith_be_gdn(pith_backend *be, const pith_be_gdn_args *a, int n) { be->vt->gdn(be, a, n); }
static inline void pith_be_gated_norm(pith_backend *be, const pith_be_gated_norm_args *a, int n) {
    be->vt->gated_norm(be, a, n);
}
static inline void pith_be_gated_qkv(pith_backend *be, const pith_be_gated_qkv_args *a, int n) {
    be->vt->gated_qkv(be, a, n);
}
static inline void pith_be_attn_gate(pith_backend *be, const pith_be_attn_gate_args *a, int n) {
    be->vt->attn_gate(be, a, n);
}
static inline int pith_be_set_draft(pith_backend *be, const pith_batch *b, int n_vocab, int n_steps, int32_t *draft,
                                    float *logits, pith_err *err) {
    return be->vt->set_draft(be, b, n_vocab, n_steps, draft, logits, err);
}
static inline void pith_be_mtp_input(pith_backend *be, const pith_be_mtp_input_args *a, int n) {
    be->vt->mtp_input(be, a, n);
}
static inline void pith_be_mtp_save(pith_backend *be, const pith_be_mtp_save_args *a) { be->vt->mtp_save(be, a); }
static inline void pith_be_mtp_attention(pith_backend *be, const pith_be_mtp_attn_args *a, int n) {
    be->vt->mtp_attention(be, a, n);
}
static inline int pith_be_mtp_logits(pith_backend *be, const pith_be_mtp_logits_args *a, int n, pith_err *err) {
    return be->vt->mtp_logits(be, a, n, err);
}

/* DeepSeek */
static inline int pith_be_mla(pith_backend *be, const pith_be_mla_args *a, int n, pith_err *err) {
    return be->vt->mla(be, a, n, err);
}
static inline int pith_be_mtp_mla(pith_backend *be, const pith_be_mtp_mla_args *a, int n, pith_err *err) {
    return be->vt->mtp_mla(be, a, n, err);
}

#ifdef __cplusplus
}
#endif

#endif
