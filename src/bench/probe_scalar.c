/* Portable probe loops: what plain C reaches on any processor (the compiler may auto-vectorize them
 * for the build's baseline instruction set, exactly as it may the scalar kernels). */
#include "bench/probe_kernels.h"

/* An empty asm statement that claims to change v: keeps the compiler from hoisting work on loop
 * invariants out of the loop, at no run-time cost. */
#define OPAQUE(v) __asm__ volatile("" : "+r"(v))

static uint64_t read_sum_scalar(const void *buf, size_t bytes) {
    const uint64_t *p = buf;
    size_t n = bytes / sizeof *p;
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (size_t i = 0; i + 4 <= n; i += 4) {
        s0 += p[i];
        s1 += p[i + 1];
        s2 += p[i + 2];
        s3 += p[i + 3];
    }
    return s0 + s1 + s2 + s3;
}

/* Eight chains of x = x * a + c. The constants and starting points are read through volatile, so the
 * compiler neither turns x * 1 + 1 into an add nor merges chains it would know to be equal. */
static uint64_t fma_scalar(int64_t iters) {
    volatile float one = 1.0f, zero = 0.0f;
    const float a = one, c = one;
    float x0 = zero, x1 = zero, x2 = zero, x3 = zero, x4 = zero, x5 = zero, x6 = zero, x7 = zero;
    for (int64_t i = 0; i < iters; i++) {
        x0 = x0 * a + c;
        x1 = x1 * a + c;
        x2 = x2 * a + c;
        x3 = x3 * a + c;
        x4 = x4 * a + c;
        x5 = x5 * a + c;
        x6 = x6 * a + c;
        x7 = x7 * a + c;
    }
    /* each x an integer in [0, 2^24] */
    return (uint64_t)x0 + (uint64_t)x1 + (uint64_t)x2 + (uint64_t)x3 + (uint64_t)x4 + (uint64_t)x5 +
           (uint64_t)x6 + (uint64_t)x7;
}

/* Four chains, each a pair of u8 x s8 products summed and accumulated, as maddubs + madd do per lane.
 * The inputs are all 1 but opaque, so every multiply is really done. Unsigned accumulators: wrapping is
 * intended and defined. */
static uint64_t int8_scalar(int64_t iters) {
    uint32_t acc0 = 0, acc1 = 0, acc2 = 0, acc3 = 0;
    int32_t a0 = 1, a1 = 1, a2 = 1, a3 = 1, b0 = 1, b1 = 1;
    for (int64_t i = 0; i < iters; i++) {
        OPAQUE(a0);
        OPAQUE(a1);
        OPAQUE(a2);
        OPAQUE(a3);
        OPAQUE(b0);
        OPAQUE(b1);
        acc0 += (uint32_t)(a0 * b0 + a1 * b1);
        acc1 += (uint32_t)(a1 * b0 + a2 * b1);
        acc2 += (uint32_t)(a2 * b0 + a3 * b1);
        acc3 += (uint32_t)(a3 * b0 + a0 * b1);
    }
    return (uint64_t)acc0 + acc1 + acc2 + acc3;
}

#define FMA_SCALAR {"scalar C", fma_scalar, 8 * 2}
#define INT8_SCALAR {"scalar C", int8_scalar, 4 * 2 * 2}

/* The scalar table packs nothing; its packed entries are there for completeness. */
static const pith_probe_kernels scalar_probes = {
    .name = "scalar",
    .read_sum = read_sum_scalar,
    .fma = FMA_SCALAR,
    .fma_packed = FMA_SCALAR,
    .int8 = INT8_SCALAR,
    .int8_packed = INT8_SCALAR,
};

const pith_probe_kernels *pith_probe_kernels_scalar(void) { return &scalar_probes; }
