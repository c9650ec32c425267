/* AVX2 and AVX-VNNI packed tiles for Q4_K, Q5_K, Q6_K and IQ4_XS: 8 rows (one group, layout in
 * pack_kquant.c with R = 8) against up to 4 tokens of q8k activations per pass, every weight vector
 * loaded and unpacked once per pass. The tiles are written once (kernels_kquant_ymm_body.h) and built
 * twice here: with AVX-VNNI's vpdpbusd / vpdpwssd, and with plain AVX2's vpmaddubsw + vpmaddwd. Each
 * runs only once its table's constructor (kernels_avx2.c) has checked the processor. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

#include <immintrin.h>
#include <string.h>

#include "backend/cpu/prefetch.h"
#include "backend/cpu/kernels_kquant.h"
#include "backend/cpu/unroll.h"

#define YMM_MAX_RN 4
/* Software prefetch distance of the group stream (the Q4_0 / Q8_0 8-row tiles' 6 KiB; the hint:
 * prefetch.h). */
#define YMM_PREFETCH_BYTES 6144

static inline __attribute__((always_inline)) void prefetch_lines(const uint8_t *p, const int lines) {
    UNROLL for (int l = 0; l < lines; l++) pith_prefetch_stream((const char *)p + 64 * l);
}

#define YMM_VNNI 0
#define YMM_TGT __attribute__((target("avx2,fma,f16c")))
#define YMM_SUFFIX _avx2
#include "backend/cpu/kernels_kquant_ymm_body.h"
#undef YMM_VNNI
#undef YMM_TGT
#undef YMM_SUFFIX

#define YMM_VNNI 1
#define YMM_TGT __attribute__((target("avx2,fma,f16c,avxvnni")))
#define YMM_SUFFIX _vnni
#include "backend/cpu/kernels_kquant_ymm_body.h"
#undef YMM_VNNI
#undef YMM_TGT
#undef YMM_SUFFIX

#else
/* ISO C forbids an empty translation unit. */
typedef int pith_kernels_kquant_ymm_unused;
#endif
