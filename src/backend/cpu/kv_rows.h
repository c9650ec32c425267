/* Rows of the KV cache in its element type (kv.h: F32, F16, BF16 or Q8_0) to and from float: what the
 * forward pass writes and attention reads. Offsets and counts are in elements; for Q8_0 both are
 * multiples of 32 (a head's row is whole blocks of 32 along the head dimension). */
#ifndef PITH_CPU_KV_ROWS_H
#define PITH_CPU_KV_ROWS_H

#include <stddef.h>

#include "backend/cpu/kernels.h"
#include "pith/kv.h"

/* dst[0..n) = the n elements of type t at element offset off of base. */
void pith_kv_load_f32(const pith_cpu_kernels *k, pith_dtype t, const void *base, size_t off, float *dst, size_t n);
/* Stores src[0..n) at element offset off of base in type t: F16 and BF16 rounded to nearest even, Q8_0
 * as GGML quantizes it (d = max|x| / 127 stored as F16, q = round(x / d)). */
void pith_kv_store_f32(const pith_cpu_kernels *k, pith_dtype t, const float *src, void *base, size_t off, size_t n);

#endif
