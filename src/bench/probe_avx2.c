/* AVX2 probe loops: 256-bit loads, FMA and maddubs + madd, the instructions the AVX2 kernels are made
 * of. Every function carries the target attribute, so the file builds without -m flags; the table is
 * offered only when the kernels' own CPUID check (pith_cpu_kernels_avx2) passes. */
#include "bench/probe_kernels.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

#include <immintrin.h>

#include "backend/cpu/kernels.h"

#define TGT __attribute__((target("avx2,fma,f16c")))

/* An empty asm statement that claims to change the vector v (held in a ymm register): the compiler
 * cannot hoist the multiplies on it out of the loop, and nothing is executed for it. */
#define OPAQUE(v) __asm__ volatile("" : "+x"(v))

/* Four independent integer adds per 128 bytes: one-cycle adds are far faster than memory, so the loop
 * is bound by the loads alone. */
TGT static uint64_t read_sum_avx2(const void *buf, size_t bytes) {
    const __m256i *p = buf;
    size_t n = bytes / sizeof *p;
    __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0;
    for (size_t i = 0; i + 4 <= n; i += 4) {
        s0 = _mm256_add_epi64(s0, _mm256_load_si256(p + i));
        s1 = _mm256_add_epi64(s1, _mm256_load_si256(p + i + 1));
        s2 = _mm256_add_epi64(s2, _mm256_load_si256(p + i + 2));
        s3 = _mm256_add_epi64(s3, _mm256_load_si256(p + i + 3));
    }
    __m256i s = _mm256_add_epi64(_mm256_add_epi64(s0, s1), _mm256_add_epi64(s2, s3));
    uint64_t lanes[4];
    _mm256_storeu_si256((__m256i *)lanes, s);
    return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}

/* Twelve chains of x = x * a + c (converging to 1): FMA latency 4-5 cycles times 2 units needs at
 * least 10 in flight; 12 plus a, c leaves 2 of the 16 ymm registers spare. */
#define FMA_CHAINS 12
TGT static float fma_avx2(int64_t iters) {
    const __m256 a = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(0.000001f);
    __m256 x0 = _mm256_set1_ps(0.10f), x1 = _mm256_set1_ps(0.15f), x2 = _mm256_set1_ps(0.20f);
    __m256 x3 = _mm256_set1_ps(0.25f), x4 = _mm256_set1_ps(0.30f), x5 = _mm256_set1_ps(0.35f);
    __m256 x6 = _mm256_set1_ps(0.40f), x7 = _mm256_set1_ps(0.45f), x8 = _mm256_set1_ps(0.50f);
    __m256 x9 = _mm256_set1_ps(0.55f), x10 = _mm256_set1_ps(0.60f), x11 = _mm256_set1_ps(0.65f);
    for (int64_t i = 0; i < iters; i++) {
        x0 = _mm256_fmadd_ps(x0, a, c);
        x1 = _mm256_fmadd_ps(x1, a, c);
        x2 = _mm256_fmadd_ps(x2, a, c);
        x3 = _mm256_fmadd_ps(x3, a, c);
        x4 = _mm256_fmadd_ps(x4, a, c);
        x5 = _mm256_fmadd_ps(x5, a, c);
        x6 = _mm256_fmadd_ps(x6, a, c);
        x7 = _mm256_fmadd_ps(x7, a, c);
        x8 = _mm256_fmadd_ps(x8, a, c);
        x9 = _mm256_fmadd_ps(x9, a, c);
        x10 = _mm256_fmadd_ps(x10, a, c);
        x11 = _mm256_fmadd_ps(x11, a, c);
    }
    __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(x0, x1), _mm256_add_ps(x2, x3)),
                             _mm256_add_ps(_mm256_add_ps(x4, x5), _mm256_add_ps(x6, x7)));
    s = _mm256_add_ps(s, _mm256_add_ps(_mm256_add_ps(x8, x9), _mm256_add_ps(x10, x11)));
    float lanes[8];
    _mm256_storeu_ps(lanes, s);
    return lanes[0] + lanes[1] + lanes[2] + lanes[3] + lanes[4] + lanes[5] + lanes[6] + lanes[7];
}

/* One step of a quantized dot product on 32 byte pairs: maddubs (u8 x s8, adjacent pairs summed to
 * int16), madd with ones (pairs summed to int32), add to the accumulator. */
#define INT8_STEP(a, acc)                                                                    \
    do {                                                                                     \
        OPAQUE(a);                                                                           \
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), ones));   \
    } while (0)

/* Four chains: the loop-carried add has a one-cycle latency, so four keep two multiply units busy, and
 * 4 inputs + 4 accumulators + 2 constants fit the 16 ymm registers with room for temporaries (six
 * chains made GCC spill accumulators to the stack, which put a store-forwarding delay in every chain). */
#define INT8_CHAINS 4
TGT static int32_t int8_avx2(int64_t iters) {
    const __m256i b = _mm256_set1_epi8(-3), ones = _mm256_set1_epi16(1);
    __m256i a0 = _mm256_set1_epi8(1), a1 = _mm256_set1_epi8(2), a2 = _mm256_set1_epi8(3);
    __m256i a3 = _mm256_set1_epi8(4);
    __m256i c0 = _mm256_setzero_si256(), c1 = c0, c2 = c0, c3 = c0;
    for (int64_t i = 0; i < iters; i++) {
        INT8_STEP(a0, c0);
        INT8_STEP(a1, c1);
        INT8_STEP(a2, c2);
        INT8_STEP(a3, c3);
    }
    __m256i s = _mm256_xor_si256(_mm256_xor_si256(c0, c1), _mm256_xor_si256(c2, c3));
    int32_t lanes[8];
    _mm256_storeu_si256((__m256i *)lanes, s);
    return lanes[0] ^ lanes[1] ^ lanes[2] ^ lanes[3] ^ lanes[4] ^ lanes[5] ^ lanes[6] ^ lanes[7];
}

static const pith_probe_kernels avx2_probes = {
    .name = "avx2",
    .read_sum = read_sum_avx2,
    .fma_loop = fma_avx2,
    .fma_ops_per_iter = FMA_CHAINS * 8 * 2,
    .int8_loop = int8_avx2,
    .int8_ops_per_iter = INT8_CHAINS * 32 * 2,
};

const pith_probe_kernels *pith_probe_kernels_avx2(void) {
    return pith_cpu_kernels_avx2() ? &avx2_probes : NULL;
}

#else

const pith_probe_kernels *pith_probe_kernels_avx2(void) { return NULL; }

#endif
