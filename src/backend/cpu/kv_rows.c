/* KV cache rows to and from float (kv_rows.h). */
#include "backend/cpu/kv_rows.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "backend/cpu/quants.h"

static void bf16_load_scalar(const uint16_t *src, float *dst, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = pith_bf16_to_f32(src[i]);
}

static void q8_0_load_scalar(const uint8_t *src, float *dst, size_t n) {
    for (size_t b = 0; b < n / PITH_QK; b++, src += PITH_Q8_0_BYTES) {
        float d = pith_load_f16(src);
        const int8_t *q = (const int8_t *)(src + 2);
        for (int i = 0; i < PITH_QK; i++) dst[b * PITH_QK + (size_t)i] = d * (float)q[i];
    }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define TZ __attribute__((target("avx512f,avx512bw,avx512vl,f16c")))

static bool has_avx512(const pith_cpu_kernels *k) { return strcmp(k->name, "avx512-vnni") == 0; }

static TZ void bf16_load_avx512(const uint16_t *src, float *dst, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512i h = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(src + i)));
        _mm512_storeu_ps(dst + i, _mm512_castsi512_ps(_mm512_slli_epi32(h, 16)));
    }
    bf16_load_scalar(src + i, dst + i, n - i);
}

/* The block scale converts in registers (F16C): a call to the portable converter per 32 values was
 * what made a Q8_0 cache decode slower than an F16 one at depth. */
static TZ void q8_0_load_avx512(const uint8_t *src, float *dst, size_t n) {
    for (size_t b = 0; b < n / PITH_QK; b++, src += PITH_Q8_0_BYTES) {
        uint16_t h;
        memcpy(&h, src, 2);
        __m512 d = _mm512_broadcastss_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(h)));
        __m128i q0 = _mm_loadu_si128((const __m128i *)(src + 2)), q1 = _mm_loadu_si128((const __m128i *)(src + 18));
        _mm512_storeu_ps(dst + b * PITH_QK, _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q0))));
        _mm512_storeu_ps(dst + b * PITH_QK + 16, _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q1))));
    }
}

#define T2 __attribute__((target("avx2,fma,f16c")))

static bool has_avx2(const pith_cpu_kernels *k) { return strcmp(k->name, "scalar") != 0; }

static T2 void bf16_load_avx2(const uint16_t *src, float *dst, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(src + i)));
        _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(h, 16)));
    }
    bf16_load_scalar(src + i, dst + i, n - i);
}

static T2 void q8_0_load_avx2(const uint8_t *src, float *dst, size_t n) {
    for (size_t b = 0; b < n / PITH_QK; b++, src += PITH_Q8_0_BYTES) {
        uint16_t h;
        memcpy(&h, src, 2);
        __m256 d = _mm256_broadcastss_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(h)));
        for (int i = 0; i < PITH_QK; i += 8) {
            __m128i q = _mm_loadl_epi64((const __m128i *)(src + 2 + i));
            _mm256_storeu_ps(dst + b * PITH_QK + (size_t)i, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q))));
        }
    }
}
#else
static bool has_avx512(const pith_cpu_kernels *k) {
    (void)k;
    return false;
}
static bool has_avx2(const pith_cpu_kernels *k) {
    (void)k;
    return false;
}
#define bf16_load_avx512 bf16_load_scalar
#define q8_0_load_avx512 q8_0_load_scalar
#define bf16_load_avx2 bf16_load_scalar
#define q8_0_load_avx2 q8_0_load_scalar
#endif

void pith_kv_load_f32(const pith_cpu_kernels *k, pith_dtype t, const void *base, size_t off, float *dst, size_t n) {
    const uint8_t *p = (const uint8_t *)base + pith_kv_bytes(t, off);
    switch (t) {
    case PITH_F16: k->f16_to_f32((const uint16_t *)p, dst, (int)n); return;
    case PITH_BF16:
        if (has_avx512(k)) bf16_load_avx512((const uint16_t *)p, dst, n);
        else if (has_avx2(k)) bf16_load_avx2((const uint16_t *)p, dst, n);
        else bf16_load_scalar((const uint16_t *)p, dst, n);
        return;
    case PITH_Q8_0:
        if (has_avx512(k)) q8_0_load_avx512(p, dst, n);
        else if (has_avx2(k)) q8_0_load_avx2(p, dst, n);
        else q8_0_load_scalar(p, dst, n);
        return;
    default: memcpy(dst, p, n * sizeof(float)); return;
    }
}

static void q8_0_store(const float *x, uint8_t *dst, size_t n) {
    for (size_t b = 0; b < n / PITH_QK; b++, x += PITH_QK, dst += PITH_Q8_0_BYTES) {
        float amax = 0;
        bool finite = true;
        for (int i = 0; i < PITH_QK; i++) {
            finite &= isfinite(x[i]) != 0;
            amax = fmaxf(amax, fabsf(x[i]));
        }
        float d = finite ? amax / 127.0f : NAN, id = finite && d != 0 ? 1.0f / d : 0.0f; /* NaN: a NaN block */
        uint16_t h = pith_f32_to_f16(d);
        memcpy(dst, &h, 2);
        int8_t *q = (int8_t *)(dst + 2);
        for (int i = 0; i < PITH_QK; i++) q[i] = (int8_t)roundf(x[i] * id);
    }
}

void pith_kv_store_f32(const pith_cpu_kernels *k, pith_dtype t, const float *src, void *base, size_t off, size_t n) {
    uint8_t *p = (uint8_t *)base + pith_kv_bytes(t, off);
    switch (t) {
    case PITH_F16: k->f32_to_f16(src, (uint16_t *)p, (int)n); return;
    case PITH_BF16:
        for (size_t i = 0; i < n; i++) {
            uint16_t h = pith_f32_to_bf16(src[i]);
            memcpy(p + 2 * i, &h, 2);
        }
        return;
    case PITH_Q8_0: q8_0_store(src, p, n); return;
    default: memcpy(p, src, n * sizeof(float)); return;
    }
}
