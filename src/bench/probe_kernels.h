/* The inner loops of the machine probes, one table per CPU kernel table (backend/cpu/kernels.h): a probe
 * table mirrors the kernel table of the same name, so the peaks time the instructions the matmuls run.
 *
 * Each loop returns a value derived from all its work, which the caller stores, so the compiler cannot
 * drop any of it. The compute loops run `iters` iterations of `ops_per_iter` operations, in enough
 * independent chains to hide instruction latency: they measure throughput, not latency.
 *
 * Every compute loop returns a count of the multiply-adds it did, which is how the tests check that
 * ops_per_iter counts the work the loop really does (2 operations per multiply-add, as pith bench counts
 * a model's matmuls):
 * - the int8 loops multiply byte pairs whose values are all 1 (hidden from the compiler, so nothing is
 *   folded away) and return the sum of all products, modulo 2^32 per accumulator lane: for iterations
 *   that keep every lane below 2^31 that is exactly the number of multiply-adds done;
 * - the FMA loops run x = x * a + c from x = 0 with a = c = 1 (hidden likewise, or x * 1 + 1 would
 *   become an add) and return the sum of all lanes: exactly the number of FMAs per lane while x stays
 *   below 2^24, where x + 1 starts rounding back to x, so x stays finite however long the loop runs. */
#ifndef PITH_BENCH_PROBE_KERNELS_H
#define PITH_BENCH_PROBE_KERNELS_H

#include <stddef.h>
#include <stdint.h>

/* One compute loop and what it does. */
typedef struct pith_probe_loop {
    const char *isa; /* the instructions, for reports: "vpdpbusd zmm (AVX-512 VNNI)" */
    uint64_t (*loop)(int64_t iters);
    double ops_per_iter;
} pith_probe_loop;

typedef struct pith_probe_kernels {
    const char *name; /* the name of the kernel table these loops mirror */
    /* Sums `bytes` bytes from buf (64-byte aligned; bytes a multiple of 64). */
    uint64_t (*read_sum)(const void *buf, size_t bytes);
    /* The float tiles that work on the file layout (F32, rows outside packed groups). */
    pith_probe_loop fma;
    /* The packed float tiles (the float types the kernel table repacks at load time, F16 and BF16). */
    pith_probe_loop fma_packed;
    /* The integer tiles that work on the file layout (K-quants, rows outside packed groups). */
    pith_probe_loop int8;
    /* The packed integer tiles (the integer types the kernel table repacks at load time, Q8_0 and Q4_0). */
    pith_probe_loop int8_packed;
} pith_probe_kernels;

const pith_probe_kernels *pith_probe_kernels_scalar(void);
/* Each NULL exactly when the kernel table of the same name (pith_cpu_kernels_avx2 and friends) is. */
const pith_probe_kernels *pith_probe_kernels_avx2(void);
const pith_probe_kernels *pith_probe_kernels_avx2_vnni(void);
const pith_probe_kernels *pith_probe_kernels_avx512_vnni(void);

#endif
