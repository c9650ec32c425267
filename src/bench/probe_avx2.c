/* x86 probe loops for the AVX2, AVX2 + AVX-VNNI and AVX2 + AVX-512 VNNI kernel tables: 256-bit loads,
 * FMA and vpdpbusd on ymm or zmm, maddubs + madd, the instructions those kernels are made of. Every
 * function carries its target attribute, so the file builds without -m flags; each table is offered
 * only when the kernels' own CPUID check for the table of the same name passes. */
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

/* Chain macros: M(i) for each chain index i. */
#define CHAINS8(M) M(0) M(1) M(2) M(3) M(4) M(5) M(6) M(7)
#define CHAINS12(M) CHAINS8(M) M(8) M(9) M(10) M(11)
#define CHAINS16(M) CHAINS12(M) M(12) M(13) M(14) M(15)

/* Sum of the lanes of v, each an integer-valued float in [0, 2^24]. */
TGT static uint64_t lane_sum_ps(__m256 v) {
    float lanes[8];
    _mm256_storeu_ps(lanes, v);
    uint64_t s = 0;
    for (int i = 0; i < 8; i++) s += (uint64_t)lanes[i];
    return s;
}

/* Twelve chains of x = x * a + c: FMA latency 4-5 cycles times 2 units needs at least 10 in flight;
 * 12 plus a, c leaves 2 of the 16 ymm registers spare. The chains start opaque, or the compiler would
 * see identical chains and run one. */
#define FMA_YMM_CHAINS 12
TGT static uint64_t fma_avx2(int64_t iters) {
    __m256 a = _mm256_set1_ps(1.0f), c = a;
    OPAQUE(a);
    OPAQUE(c);
#define DECL(i) __m256 x##i = _mm256_setzero_ps(); OPAQUE(x##i);
#define STEP(i) x##i = _mm256_fmadd_ps(x##i, a, c);
#define SUM(i) +lane_sum_ps(x##i)
    CHAINS12(DECL)
    for (int64_t i = 0; i < iters; i++) {
        CHAINS12(STEP)
    }
    return 0 CHAINS12(SUM);
#undef DECL
#undef STEP
#undef SUM
}

/* Sum of all int32 lanes of v, each taken modulo 2^32. */
TGT static uint64_t lane_sum(__m256i v) {
    uint32_t lanes[8];
    _mm256_storeu_si256((__m256i *)lanes, v);
    uint64_t s = 0;
    for (int i = 0; i < 8; i++) s += lanes[i];
    return s;
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
 * chains made GCC spill accumulators to the stack, which put a store-forwarding delay in every chain).
 * Each chain has its own input: with one shared input the compiler would compute maddubs + madd once
 * and add the result to every accumulator. */
#define INT8_CHAINS 4
TGT static uint64_t int8_avx2(int64_t iters) {
    const __m256i b = _mm256_set1_epi8(1), ones = _mm256_set1_epi16(1);
    __m256i a0 = b, a1 = b, a2 = b, a3 = b;
    __m256i c0 = _mm256_setzero_si256(), c1 = c0, c2 = c0, c3 = c0;
    for (int64_t i = 0; i < iters; i++) {
        INT8_STEP(a0, c0);
        INT8_STEP(a1, c1);
        INT8_STEP(a2, c2);
        INT8_STEP(a3, c3);
    }
    return lane_sum(c0) + lane_sum(c1) + lane_sum(c2) + lane_sum(c3);
}

/* VNNI: one vpdpbusd does the multiply-adds of a maddubs + madd + add step (4 byte pairs summed into
 * each int32 lane) and carries the accumulator through itself, so its latency (about 4-5 cycles) times
 * the two units that run it is the number of chains in flight needed. Every chain reads the same
 * inputs; the accumulators start opaque, or the compiler would see identical chains and run one. */

/* AVX-VNNI (VEX encoding, ymm0-15 only): 12 chains + 2 inputs leave 2 registers spare. */
#define TGTV __attribute__((target("avx2,fma,f16c,avxvnni")))
#define VNNI_YMM_CHAINS 12
TGTV static uint64_t int8_avx_vnni(int64_t iters) {
    const __m256i b = _mm256_set1_epi8(1);
    __m256i a = b;
#define DECL(i) __m256i c##i = _mm256_setzero_si256(); OPAQUE(c##i);
#define STEP(i) c##i = _mm256_dpbusd_avx_epi32(c##i, a, b);
#define SUM(i) +lane_sum(c##i)
    CHAINS12(DECL)
    for (int64_t i = 0; i < iters; i++) {
        OPAQUE(a);
        CHAINS12(STEP)
    }
    return 0 CHAINS12(SUM);
#undef DECL
#undef STEP
#undef SUM
}

/* AVX-512 VNNI on zmm (32 registers): 16 chains, as the AVX-512 packed tile's 16-row groups run. */
#define TGTZ __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))
#define VNNI_ZMM_CHAINS 16
/* "v": any of the 32 vector registers AVX-512 can name. */
#define OPAQUE_Z(v) __asm__ volatile("" : "+v"(v))
TGTZ static uint64_t lane_sum_zmm(__m512i v) {
    uint32_t lanes[16];
    _mm512_storeu_si512((void *)lanes, v);
    uint64_t s = 0;
    for (int i = 0; i < 16; i++) s += lanes[i];
    return s;
}

TGTZ static uint64_t int8_avx512_vnni(int64_t iters) {
    const __m512i b = _mm512_set1_epi8(1);
    __m512i a = b;
#define DECL(i) __m512i c##i = _mm512_setzero_si512(); OPAQUE_Z(c##i);
#define STEP(i) c##i = _mm512_dpbusd_epi32(c##i, a, b);
#define SUM(i) +lane_sum_zmm(c##i)
    CHAINS16(DECL)
    for (int64_t i = 0; i < iters; i++) {
        OPAQUE_Z(a);
        CHAINS16(STEP)
    }
    return 0 CHAINS16(SUM);
#undef DECL
#undef STEP
#undef SUM
}

TGTZ static uint64_t lane_sum_zmm_ps(__m512 v) {
    float lanes[16];
    _mm512_storeu_ps(lanes, v);
    uint64_t s = 0;
    for (int i = 0; i < 16; i++) s += (uint64_t)lanes[i];
    return s;
}

/* The FMA of the AVX-512 packed F16/BF16 tiles (vfmadd231ps zmm), in opaque chains as in the ymm loop.
 * Latency 4 times 2 units asks for 8 in flight; measured on Zen 5 (1 thread): 8 chains 258-264, 12
 * chains 269-274, 16 chains 264-273 GFLOP/s, so 12, which leaves most of the 32 registers unused. */
#define FMA_ZMM_CHAINS 12
TGTZ static uint64_t fma_avx512(int64_t iters) {
    __m512 a = _mm512_set1_ps(1.0f), c = a;
    OPAQUE_Z(a);
    OPAQUE_Z(c);
#define DECL(i) __m512 x##i = _mm512_setzero_ps(); OPAQUE_Z(x##i);
#define STEP(i) x##i = _mm512_fmadd_ps(x##i, a, c);
#define SUM(i) +lane_sum_zmm_ps(x##i)
    CHAINS12(DECL)
    for (int64_t i = 0; i < iters; i++) {
        CHAINS12(STEP)
    }
    return 0 CHAINS12(SUM);
#undef DECL
#undef STEP
#undef SUM
}

/* Every table keeps the AVX2 loads and its file-layout tiles: the float tiles (ymm FMA) and the K-quant
 * tiles (maddubs) are AVX2 in all three; the tables differ in their packed tiles. */
#define FMA_YMM {"vfmadd231ps ymm", fma_avx2, FMA_YMM_CHAINS * 8 * 2}
#define INT8_MADDUBS {"vpmaddubsw+vpmaddwd ymm", int8_avx2, INT8_CHAINS * 32 * 2}
#define AVX2_COMMON .read_sum = read_sum_avx2, .fma = FMA_YMM, .int8 = INT8_MADDUBS

static const pith_probe_kernels avx2_probes = {
    .name = "avx2",
    AVX2_COMMON,
    .fma_packed = FMA_YMM,
    .int8_packed = INT8_MADDUBS,
};

/* The packed F16/BF16 tiles of the AVX-VNNI table are the AVX2 table's (ymm). */
static const pith_probe_kernels avx2_vnni_probes = {
    .name = "avx2-vnni",
    AVX2_COMMON,
    .fma_packed = FMA_YMM,
    .int8_packed = {"vpdpbusd ymm (AVX-VNNI)", int8_avx_vnni, VNNI_YMM_CHAINS * 32 * 2},
};

static const pith_probe_kernels avx512_vnni_probes = {
    .name = "avx512-vnni",
    AVX2_COMMON,
    .fma_packed = {"vfmadd231ps zmm (AVX-512)", fma_avx512, FMA_ZMM_CHAINS * 16 * 2},
    .int8_packed = {"vpdpbusd zmm (AVX-512 VNNI)", int8_avx512_vnni, VNNI_ZMM_CHAINS * 64 * 2},
};

/* The kernels' own CPUID checks decide, so a probe table exists exactly when its kernel table does. */
const pith_probe_kernels *pith_probe_kernels_avx2(void) {
    return pith_cpu_kernels_avx2() ? &avx2_probes : NULL;
}

const pith_probe_kernels *pith_probe_kernels_avx2_vnni(void) {
    return pith_cpu_kernels_avx2_vnni() ? &avx2_vnni_probes : NULL;
}

const pith_probe_kernels *pith_probe_kernels_avx512_vnni(void) {
    return pith_cpu_kernels_avx512_vnni() ? &avx512_vnni_probes : NULL;
}

#else

const pith_probe_kernels *pith_probe_kernels_avx2(void) { return NULL; }
const pith_probe_kernels *pith_probe_kernels_avx2_vnni(void) { return NULL; }
const pith_probe_kernels *pith_probe_kernels_avx512_vnni(void) { return NULL; }

#endif
