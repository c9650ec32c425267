/* Half-precision weights (F16 or BF16) read as floats, for the AVX2 float tiles of kernels_avx2.c and
 * the packed half tiles of kernels_half.c: one definition of the conversion both must agree on. x86-64
 * with GCC or clang only; include it inside the files' x86 sections. */
#ifndef PITH_CPU_HALF_LOAD_H
#define PITH_CPU_HALF_LOAD_H

#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "pith/tensor.h"

#define PITH_HALF_LOAD_FN static inline __attribute__((always_inline, target("avx2,fma,f16c")))

/* 8 consecutive half weights at p. BF16 is the top half of an F32, so widening and shifting is exact. */
PITH_HALF_LOAD_FN __m256 pith_half8_to_f32(const uint8_t *p, bool bf16) {
    __m128i h = _mm_loadu_si128((const __m128i *)p);
    if (!bf16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* The half weight at p. */
PITH_HALF_LOAD_FN float pith_half1_to_f32(const uint8_t *p, bool bf16) {
    uint16_t h;
    memcpy(&h, p, 2);
    return bf16 ? pith_bf16_to_f32(h) : _cvtsh_ss(h);
}

#endif
