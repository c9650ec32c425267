/* The inner loops of the machine probes, one table per instruction set (like backend/cpu/kernels.h).
 *
 * Each loop returns a value derived from all its work, which the caller stores, so the compiler cannot
 * drop any of it. The compute loops run `iters` iterations of `*_ops_per_iter` operations, in enough
 * independent chains to hide instruction latency: they measure throughput, not latency. */
#ifndef PITH_BENCH_PROBE_KERNELS_H
#define PITH_BENCH_PROBE_KERNELS_H

#include <stddef.h>
#include <stdint.h>

typedef struct pith_probe_kernels {
    const char *name;
    /* Sums `bytes` bytes from buf (64-byte aligned; bytes a multiple of 64). */
    uint64_t (*read_sum)(const void *buf, size_t bytes);
    float (*fma_loop)(int64_t iters);
    double fma_ops_per_iter;
    int32_t (*int8_loop)(int64_t iters);
    double int8_ops_per_iter;
} pith_probe_kernels;

const pith_probe_kernels *pith_probe_kernels_scalar(void);
/* NULL unless the kernels' AVX2 table is usable on this processor. */
const pith_probe_kernels *pith_probe_kernels_avx2(void);

#endif
