/* The CPU backend's own state, shared by the files that implement its ops (backend_cpu.c: weights,
 * buffers, memory, the step and the decoder ops; backend_cpu_conv.c: the short convolution;
 * backend_cpu_ssd.c: Mamba2's mixer; backend_cpu_gdn.c: Qwen3.5's Gated DeltaNet, gated attention
 * and MTP head; further mixers in their own files). Nothing outside src/backend/cpu/ includes it: models
 * see backend.h.
 *
 * Invariants: every buffer holds cap rows; step is the batch set_step (or set_draft) checked, and
 * sequence s's tokens are [seq_start[s], seq_end[s]) of it (contiguous, the sequences in any order); ops
 * read per-step data only from step, seq_start and seq_end (and a draft's tokens from draft_tok); an op
 * runs to completion before it returns. */
#ifndef PITH_CPU_BACKEND_CPU_H
#define PITH_CPU_BACKEND_CPU_H

#include "backend/backend.h"
#include "backend/cpu/attention.h"
#include "backend/cpu/cpu.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/moe.h"
#include "pith/kv.h"

struct pith_moe_weights {
    pith_moe_layer layer;
};

typedef struct cpu_weight {
    pith_weight w;
    pith_matrix m;
    const pith_tensor *table; /* lookup tables: the file's rows */
    float *owned;             /* vectors */
} cpu_weight;

typedef struct pith_cpu_be {
    pith_backend base;
    pith_cpu cpu;
    pith_attn_scratch attn;
    pith_attn_scratch attn_alt; /* shape.alt_group's (shape.alt_head_dim > 0) */
    /* span attention (backend_cpu_vision.c) through the attention kernels: its scratch for the shape it
     * was made for, the spans' K/V laid out as cache blocks, and the index arrays of its one batch */
    pith_attn_scratch span_attn;
    bool has_span_attn;
    float *span_k, *span_v;
    int32_t *span_idx;          /* positions, sequences, last, block tables: 4 * span_cap */
    size_t span_cap;            /* rows */
    pith_be_attn_shape shape;
    bool has_shape;
    pith_kv_host kv;
    /* everything made, freed with the backend */
    pith_buf **bufs;
    int n_bufs;
    cpu_weight **weights;
    int n_weights;
    pith_moe_weights **moes;
    int n_moes;
    pith_moe_config moe_cfg;
    pith_moe_scratch moe_scratch;
    pith_moe_loop moe_loop;
    int cap;                 /* rows every buffer holds */
    const pith_batch *step;  /* the step's data (host memory: the batch itself) */
    int *seq_start, *seq_end; /* [cap] each sequence's first token and one past its last */
    float *logits;           /* the step's logits rows: host memory, the caller's */
    bool portable;           /* PITH_FORCE_SCALAR: the recurrent kernels take their portable loops too */
    /* Mamba2's ops: the recurrent SSD scan they run needs no scratch (its chunked form, unused, would) */
    /* Qwen3.5's ops */
    size_t gdn_scratch_floats;  /* per thread, from gdn_shape (0: not declared) */
    float *gdn_scratch;         /* [n_threads][gdn_scratch_floats], made by reserve */
    int draft_cap, draft_vocab; /* the draft's memory: sequences it holds, the vocabulary of its logits */
    float *draft_k, *draft_v;   /* [draft_cap][PITH_BE_MTP_MAX_STEPS][kv dim]: the draft positions' K/V */
    float *draft_logits;        /* [draft_cap][draft_vocab]: the step's rows */
    int32_t *draft_tok;         /* [draft_cap]: each sequence's token drafted last */
    int draft_steps;            /* set_draft: the draft's steps and where its results go */
    int32_t *draft_out;
    float *draft_logits_out;
} pith_cpu_be;

static inline pith_cpu_be *pith_cpu_be_of(pith_backend *be) { return (pith_cpu_be *)be; }
/* KV group g's heads: the model's shape, or the second one where g is shape.alt_group. */
static inline bool pith_cpu_be_alt(const pith_cpu_be *c, int g) {
    return c->shape.alt_head_dim > 0 && g == c->shape.alt_group;
}
static inline int pith_cpu_be_head_dim(const pith_cpu_be *c, int g) {
    return pith_cpu_be_alt(c, g) ? c->shape.alt_head_dim : c->shape.head_dim;
}
static inline int pith_cpu_be_kv_heads(const pith_cpu_be *c, int g) {
    return pith_cpu_be_alt(c, g) ? c->shape.alt_n_kv_heads : c->shape.n_kv_heads;
}
static inline float *row_of(const pith_buf *b, int t) { return b->host + (size_t)t * b->cols; }

/* Row jobs: row(j, t, ith) for t in [0, n), claimed in chunks by the pool's threads (ith: the thread);
 * width is the elements one row touches, the measure of its work for the pool's sizing. */
typedef struct row_job {
    pith_cpu_be *c;
    int n, chunk;
    _Atomic int next;
    void (*row)(struct row_job *j, int t, int ith);
    const void *a;           /* the op's arguments */
} row_job;
void pith_cpu_be_rows(pith_cpu_be *c, int n, void (*row)(row_job *j, int t, int ith), const void *args, double width);

/* RMSNorm in double, as every forward pass has computed it. */
void pith_cpu_be_rmsnorm(float *out, const float *x, const float *w, int n, float eps);
/* Rotates the first 2 * half elements of a head (all of it, or a partial rotary's share) by cs and sn. */
void pith_cpu_be_rope(float *v, const float *cs, const float *sn, int half, pith_rope_style style);
/* Token t's K and V (n_kv_heads heads of head_dim) into its slot of KV group g, layer layer_index. */
void pith_cpu_be_store_kv(const pith_cpu_be *c, int g, int layer_index, int t, const float *k, const float *v);

/* ---- the recurrent mixers' shared pieces (backend_cpu_conv.c) ---- */

/* A layer's state in state slot `slot` of RECURRENT group `group`, from float offset `offset`. */
float *pith_cpu_be_state(const pith_cpu_be *c, int group, int slot, size_t offset);
/* A sequence's run of n tokens is scanned in pieces that end right after each token the step names a
 * checkpoint for (ck: the run's checkpoints, or NULL for none): the end of the piece starting at done. */
int pith_cpu_be_piece_end(const int32_t *ck, int done, int n);

/* A causal depthwise convolution with carried state (recurrent.h: pith_conv1d) over the runs of the
 * step's sequences: x is token 0's row of `channels` inputs (rows ld apart, convolved in place), w
 * [channels][kernel] and bias (or NULL), SiLU after it when silu (through k's silu_mul; NULL: expf). The
 * state, [kernel - 1][channels] floats at state_offset of the layer's slot in `group`, starts from zero
 * at position 0, and after a checkpointed token its channels are copied into that slot too. */
typedef struct pith_cpu_be_conv {
    int group;
    size_t state_offset;
    float *x;
    size_t ld;
    int channels, kernel;
    const float *w, *bias;
    bool silu;
    const pith_cpu_kernels *k;
} pith_cpu_be_conv;
/* Channels [c0, c1) of sequence s's run. */
void pith_cpu_be_conv_run(const pith_cpu_be *c, const pith_cpu_be_conv *cv, int s, int c0, int c1);

/* Ops in their own files. */
void pith_cpu_be_short_conv(pith_backend *be, const pith_be_short_conv_args *a, int n);
void pith_cpu_be_mamba2(pith_backend *be, const pith_be_mamba2_args *a, int n);
int pith_cpu_be_gdn_shape(pith_backend *be, int dk, int dv, pith_err *err);
void pith_cpu_be_gdn(pith_backend *be, const pith_be_gdn_args *a, int n);
void pith_cpu_be_gated_norm(pith_backend *be, const pith_be_gated_norm_args *a, int n);
void pith_cpu_be_gated_qkv(pith_backend *be, const pith_be_gated_qkv_args *a, int n);
void pith_cpu_be_attn_gate(pith_backend *be, const pith_be_attn_gate_args *a, int n);
int pith_cpu_be_set_draft(pith_backend *be, const pith_batch *b, int n_vocab, int n_steps, int32_t *draft,
                          float *logits, pith_err *err);
void pith_cpu_be_mtp_input(pith_backend *be, const pith_be_mtp_input_args *a, int n);
void pith_cpu_be_mtp_save(pith_backend *be, const pith_be_mtp_save_args *a);
void pith_cpu_be_mtp_attention(pith_backend *be, const pith_be_mtp_attn_args *a, int n);
int pith_cpu_be_mtp_logits(pith_backend *be, const pith_be_mtp_logits_args *a, int n, pith_err *err);
void pith_cpu_be_mtp_pick(pith_backend *be, int step, const int32_t *tokens, int n);
/* DeepSeek's multi-head latent attention (backend_cpu_mla.c). */
int pith_cpu_be_mla(pith_backend *be, const pith_be_mla_args *a, int n, pith_err *err);
/* The vision encoders' ops (backend_cpu_vision.c). */
int pith_cpu_be_set_rows(pith_backend *be, pith_buf *dst, const float *rows, int n, pith_err *err);
void pith_cpu_be_layernorm(pith_backend *be, const pith_buf *x, const pith_weight *w, const pith_weight *b, float eps,
                           pith_buf *out, int n);
void pith_cpu_be_add_rows(pith_backend *be, pith_buf *x, const pith_weight *rows, int n);
void pith_cpu_be_span_attention(pith_backend *be, const pith_be_span_attn *a, int n);
void pith_cpu_be_pool_avg(pith_backend *be, const pith_buf *in, pith_buf *out, int side, int k, int n);
void pith_cpu_be_rope_rows(pith_backend *be, pith_buf *x, const pith_buf *cs, int n);
void pith_cpu_be_group_rows(pith_backend *be, const pith_buf *in, pith_buf *out, int k, int n);
int pith_cpu_be_mtp_mla(pith_backend *be, const pith_be_mtp_mla_args *a, int n, pith_err *err);
/* Qwen3.5's scratch and draft memory (cpu_destroy). */
void pith_cpu_be_qwen35_free(pith_cpu_be *c);

#endif
