/* The CPU backend's own state, shared by the files that implement its ops (backend_cpu.c: weights,
 * buffers, memory, the step and the decoder ops; backend_cpu_conv.c: the short convolution;
 * backend_cpu_ssd.c: Mamba2's mixer; further mixers in their own files). Nothing outside src/backend/cpu/ includes it: models see backend.h.
 *
 * Invariants: every buffer holds cap rows; step is the batch set_step checked, and sequence s's tokens
 * are [seq_start[s], seq_end[s]) of it (contiguous, the sequences in any order); ops read per-step data
 * only from step, seq_start and seq_end; an op runs to completion before it returns. */
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
    /* Mamba2's ops: the recurrent SSD scan they run needs no scratch (its chunked form, unused, would) */
    bool ssd_portable;       /* PITH_FORCE_SCALAR: the scan's portable loops too */
} pith_cpu_be;

static inline pith_cpu_be *pith_cpu_be_of(pith_backend *be) { return (pith_cpu_be *)be; }
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

/* Ops in their own files. */
void pith_cpu_be_short_conv(pith_backend *be, const pith_be_short_conv_args *a, int n);
void pith_cpu_be_mamba2(pith_backend *be, const pith_be_mamba2_args *a, int n);

#endif
