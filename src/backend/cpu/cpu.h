/* The CPU backend's context: a thread pool, the kernel table chosen for this processor, and the scratch
 * buffers the matmul driver quantizes activations into. One per model; no global state.
 *
 * Scratch grows only in pith_cpu_reserve (called before a forward pass, where failing is allowed), so
 * the kernels themselves never allocate. */
#ifndef PITH_CPU_CPU_H
#define PITH_CPU_CPU_H

#include <stdbool.h>
#include <stdint.h>

#include "backend/cpu/kernels.h"
#include "backend/cpu/threadpool.h"
#include "pith/status.h"

typedef struct pith_cpu {
    pith_pool *pool;
    int n_threads;
    const pith_cpu_kernels *k;
    /* Quantized copies of the current activations, one buffer per format. act_owner says which
     * pith_acts binding the contents belong to (0: none), so several matmuls reading the same input
     * quantize it once. */
    void *act_buf[PITH_ACT_N_FORMATS];
    size_t act_cap[PITH_ACT_N_FORMATS];
    uint64_t act_owner[PITH_ACT_N_FORMATS];
    uint64_t act_serial;
} pith_cpu;

/* n_threads <= 0: one per online CPU. force_scalar selects the portable kernels. */
int pith_cpu_init(pith_cpu *c, int n_threads, bool force_scalar, pith_err *err);
void pith_cpu_free(pith_cpu *c);

/* Makes the activation scratch hold n rows of k elements in every format. */
int pith_cpu_reserve(pith_cpu *c, int n, int k, pith_err *err);

#endif
