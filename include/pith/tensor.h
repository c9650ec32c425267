/* Tensor views and element types.
 *
 * A pith_tensor never owns its data: it points into a memory-mapped model file (or into memory owned by
 * whoever built it) that outlives the view. Shapes follow GGUF: ne[0] is the contiguous (innermost)
 * dimension, so a weight matrix with `rows` output features of `cols` inputs has ne = {cols, rows} and
 * each row is stored as ne[0] elements (for block-quantized types, ne[0] / block_size blocks).
 *
 * The numeric values of pith_dtype equal GGML's type ids, so a GGUF tensor type converts by a range
 * check alone. */
#ifndef PITH_TENSOR_H
#define PITH_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pith/api.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum pith_dtype {
    PITH_F32 = 0,
    PITH_F16 = 1,
    PITH_Q4_0 = 2,
    PITH_Q8_0 = 8,
    PITH_Q4_K = 12,
    PITH_Q5_K = 13,
    PITH_Q6_K = 14,
    PITH_IQ4_NL = 20,
    PITH_IQ4_XS = 23,
    PITH_BF16 = 30,
    PITH_MXFP4 = 39, /* blocks of 32 E2M1 values with one E8M0 scale (backend/cpu/mxfp4.h) */
} pith_dtype;

#define PITH_MAX_DIMS 4

typedef struct pith_tensor {
    const char *name;     /* canonical (GGUF-style) name, e.g. "blk.0.attn_q.weight" */
    pith_dtype type;
    int n_dims;
    int64_t ne[PITH_MAX_DIMS]; /* unused dimensions are 1 */
    const void *data;
    size_t nbytes;
} pith_tensor;

/* True when `type` is one of the element types above (and thus supported somewhere). */
PITH_API bool pith_dtype_valid(uint32_t type);
PITH_API const char *pith_dtype_name(pith_dtype type);
/* Elements per block (1 for F32/F16/BF16, 32 for Q8_0/Q4_0/IQ4_NL/MXFP4, 256 for Q4_K, Q5_K, Q6_K, IQ4_XS). */
PITH_API int64_t pith_dtype_block_elems(pith_dtype type);
/* Bytes per block. */
PITH_API size_t pith_dtype_block_bytes(pith_dtype type);
/* Bytes of a row of n elements; 0 when n is not a multiple of the block size. */
PITH_API size_t pith_dtype_row_bytes(pith_dtype type, int64_t n);
/* Number of elements (product of ne), or -1 on overflow. */
PITH_API int64_t pith_tensor_nelems(const pith_tensor *t);

/* Elements [first, first + n) of a float tensor (F32, F16 or BF16) as float32 into out; false for another
 * type or a range outside the tensor's bytes. */
PITH_API bool pith_tensor_floats(const pith_tensor *t, int64_t first, int64_t n, float *out);

/* Scalar conversions (portable; used by reference paths and loaders). */
PITH_API float pith_f16_to_f32(uint16_t h);
PITH_API uint16_t pith_f32_to_f16(float f);
PITH_API float pith_bf16_to_f32(uint16_t h);
PITH_API uint16_t pith_f32_to_bf16(float f);

#ifdef __cplusplus
}
#endif

#endif
