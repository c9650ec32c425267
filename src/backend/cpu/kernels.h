/* The CPU kernel table: every inner loop that has a SIMD version, behind one set of function pointers.
 *
 * Four tables exist: scalar (portable C, any machine), AVX2 (x86-64 with AVX2, FMA and F16C, compiled
 * with per-function target attributes so the build never needs -march flags), and AVX2 with AVX-VNNI or
 * with AVX-512 VNNI for the packed integer tiles. pith_cpu_kernels_best() picks the best the processor
 * has at run time.
 *
 * Matmul tiles. A tile computes an rm x rn block of y = W x^T:
 *   y[t * ldy + r] (+)= sum_k W[r][k] * x[t][k]     for r < rm <= PITH_TILE_MAX_RM, t < rn <= tile_rn
 * W rows are `w_stride` bytes apart in the weight's own format. x rows are `x_stride` bytes apart in the
 * activation format the weight type asks for (pith_act_format): floats for F32/F16/BF16 weights,
 * q8a blocks for Q8_0/Q4_0/IQ4_NL, q8k blocks for Q4_K/Q5_K/Q6_K/IQ4_XS. K is the row length in elements (a multiple of
 * the weight's block size). With `accumulate` the tile adds to y instead of overwriting it.
 *
 * Packed weights. A table may repack a weight type at load time into groups of pack_rows rows
 * (pack[type] != NULL; pack_rows divides PITH_PACK_ROWS_MAX); a group takes exactly pack_rows row
 * strides of bytes, laid out as the table's packed tile wants (see pack.c). The packed tile then
 * computes all pack_rows rows of the group for rn <= tile_rn tokens. Rows past the last whole group
 * stay with the ordinary tile. A table may also have tile_packed2[type], two adjacent groups in one
 * pass with the bits of two tile_packed calls; callers use it where each pass is compute-bound (the
 * matmuls pair groups for 8 tokens or more) and keep one group at a time for streaming passes. */
#ifndef PITH_CPU_KERNELS_H
#define PITH_CPU_KERNELS_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/cpu/quants.h"
#include "pith/tensor.h"

#define PITH_TILE_MAX_RM 4
#define PITH_TILE_MAX_RN 8
#define PITH_PACK_ROWS_MAX 16

typedef enum pith_act_format {
    PITH_ACT_F32,
    PITH_ACT_Q8A,
    PITH_ACT_Q8K,
    PITH_ACT_N_FORMATS,
} pith_act_format;

typedef void (*pith_tile_fn)(int K, const uint8_t *w, size_t w_stride, int rm, const void *x,
                             size_t x_stride, int rn, float *y, size_t ldy, bool accumulate);

/* Rearranges pack_rows rows of K elements (w_stride bytes apart) into one packed group at dst. */
typedef void (*pith_pack_fn)(int K, const uint8_t *w, size_t w_stride, uint8_t *dst);
typedef void (*pith_packed_tile_fn)(int K, const uint8_t *group, const void *x, size_t x_stride, int rn, float *y,
                                    size_t ldy, bool accumulate);
/* Two adjacent groups, at group and group + group_bytes (one group's bytes), into y columns 0 ..
 * 2 pack_rows - 1: the same bits as two pith_packed_tile_fn calls, in one pass that shares each
 * activation load between them. */
typedef void (*pith_packed_tile2_fn)(int K, const uint8_t *group, size_t group_bytes, const void *x, size_t x_stride,
                                     int rn, float *y, size_t ldy, bool accumulate);

/* Dense weight types the kernels handle, in table order. */
typedef enum pith_wtype {
    PITH_W_F32,
    PITH_W_F16,
    PITH_W_BF16,
    PITH_W_Q8_0,
    PITH_W_Q4_0,
    PITH_W_Q4_K,
    PITH_W_Q6_K,
    PITH_W_Q5_K,
    PITH_W_IQ4_NL,
    PITH_W_IQ4_XS,
    PITH_W_MXFP4, /* its tiles live in mxfp4.c; pith_cpu_init adds them to its table (pith_kernels_with_mxfp4) */
    PITH_W_N_TYPES,
} pith_wtype;

typedef struct pith_cpu_kernels {
    const char *name;
    pith_tile_fn tile[PITH_W_N_TYPES];
    int tile_rn[PITH_W_N_TYPES]; /* largest rn the tile takes efficiently (<= PITH_TILE_MAX_RN) */
    int pack_rows;                                   /* rows per packed group */
    pith_pack_fn pack[PITH_W_N_TYPES];               /* NULL: the type stays in its file layout */
    pith_packed_tile_fn tile_packed[PITH_W_N_TYPES];
    pith_packed_tile2_fn tile_packed2[PITH_W_N_TYPES]; /* NULL: groups one at a time */

    void (*quantize_q8a)(const float *x, pith_block_q8a *out, int n);
    void (*quantize_q8k)(const float *x, pith_block_q8k *out, int n);

    /* Vector helpers for attention and the small ops. */
    void (*scale)(float *y, float a, int n);                      /* y *= a */
    void (*f16_to_f32)(const uint16_t *src, float *dst, int n);
    void (*f32_to_f16)(const float *src, uint16_t *dst, int n);   /* round to nearest even */
    /* s[i] = exp(s[i] - m) for scores s[i] <= m; returns their sum. Never slower on underflow. */
    float (*exp_shifted)(float *s, float m, int n);
    /* Attention's P V: acc[i * acc_ld + d] += sum_j p[i * p_ld + j] * v[j * v_ld + d] for i < nq, d < hd,
     * j < jn, summing over j in order (so trailing zero probabilities change nothing). */
    void (*pv_accumulate)(float *acc, int acc_ld, const float *p, int p_ld, int nq, const float *v, int v_ld,
                          int jn, int hd);
    /* g[i] = silu(g[i]) * u[i], silu(v) = v / (1 + exp(-v)) */
    void (*silu_mul)(float *g, const float *u, int n);
} pith_cpu_kernels;

const pith_cpu_kernels *pith_cpu_kernels_scalar(void);
/* NULL when the processor lacks AVX2, FMA or F16C (or the build is not for x86-64). */
const pith_cpu_kernels *pith_cpu_kernels_avx2(void);
/* The AVX2 table with AVX-VNNI packed integer tiles; NULL without AVX-VNNI. */
const pith_cpu_kernels *pith_cpu_kernels_avx2_vnni(void);
/* The AVX2 table with AVX-512 VNNI packed integer tiles (16-row groups); NULL without AVX-512 F, BW, VL
 * and VNNI enabled by the OS. */
const pith_cpu_kernels *pith_cpu_kernels_avx512_vnni(void);
/* The first the processor has of AVX-512 VNNI, AVX-VNNI, AVX2 and scalar; scalar whenever force_scalar
 * is set. The environment variable PITH_KERNELS=scalar|avx2|avx2-vnni|avx512-vnni picks that table
 * instead where the processor has it (for measurements; ignored otherwise). */
const pith_cpu_kernels *pith_cpu_kernels_best(bool force_scalar);

/* Portable packers for the layouts the AVX2 and AVX-VNNI (x8, x8_lanes) and AVX-512 VNNI (x16_lanes)
 * packed tiles read (pack.c). */
void pith_pack_q4_0_x8(int K, const uint8_t *w, size_t w_stride, uint8_t *dst);
void pith_pack_q4_0_x8_lanes(int K, const uint8_t *w, size_t w_stride, uint8_t *dst);
void pith_pack_q8_0_x8_lanes(int K, const uint8_t *w, size_t w_stride, uint8_t *dst);
void pith_pack_q4_0_x16_lanes(int K, const uint8_t *w, size_t w_stride, uint8_t *dst);
void pith_pack_mxfp4_x16_lanes(int K, const uint8_t *w, size_t w_stride, uint8_t *dst);
void pith_pack_mxfp4_x8_lanes(int K, const uint8_t *w, size_t w_stride, uint8_t *dst);
void pith_pack_q8_0_x16_lanes(int K, const uint8_t *w, size_t w_stride, uint8_t *dst);
void pith_pack_q8_0_x8(int K, const uint8_t *w, size_t w_stride, uint8_t *dst);

/* -1 when the weight type has no kernel. */
int pith_wtype_of(pith_dtype type);
pith_act_format pith_act_format_of(pith_wtype w);
/* Bytes of one activation row of k elements in format f (k a multiple of the block size). */
size_t pith_act_row_bytes(pith_act_format f, int k);

/* GELU with the tanh approximation (PyTorch's gelu(approximate="tanh")): the dense GeGLU, the experts'
 * and the vision encoders' MLPs share this one expression, so they round alike. */
static inline float pith_gelu_tanh(float x) {
    return 0.5f * x * (1.0f + tanhf(0.7978845608028654f /* sqrt(2 / pi) */ * (x + 0.044715f * x * x * x)));
}

#endif
