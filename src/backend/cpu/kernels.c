#include "backend/cpu/kernels.h"

#include <stdlib.h>
#include <string.h>

const pith_cpu_kernels *pith_cpu_kernels_best(bool force_scalar) {
    if (force_scalar) return pith_cpu_kernels_scalar();
    /* PITH_KERNELS names a table to use instead of the best (measuring the tables this processor would
     * not pick); ignored when unknown or when the processor lacks it */
    const char *want = getenv("PITH_KERNELS");
    if (want && *want) {
        const pith_cpu_kernels *named[] = {pith_cpu_kernels_scalar(), pith_cpu_kernels_avx2(),
                                           pith_cpu_kernels_avx2_vnni(), pith_cpu_kernels_avx512_vnni()};
        for (int i = 0; i < 4; i++)
            if (named[i] && !strcmp(named[i]->name, want)) return named[i];
    }
    const pith_cpu_kernels *k = pith_cpu_kernels_avx512_vnni();
    if (!k) k = pith_cpu_kernels_avx2_vnni();
    if (!k) k = pith_cpu_kernels_avx2();
    return k ? k : pith_cpu_kernels_scalar();
}

int pith_wtype_of(pith_dtype type) {
    switch (type) {
    case PITH_F32: return PITH_W_F32;
    case PITH_F16: return PITH_W_F16;
    case PITH_BF16: return PITH_W_BF16;
    case PITH_Q8_0: return PITH_W_Q8_0;
    case PITH_Q4_0: return PITH_W_Q4_0;
    case PITH_Q4_K: return PITH_W_Q4_K;
    case PITH_Q5_K: return PITH_W_Q5_K;
    case PITH_Q6_K: return PITH_W_Q6_K;
    case PITH_IQ4_NL: return PITH_W_IQ4_NL;
    case PITH_IQ4_XS: return PITH_W_IQ4_XS;
    case PITH_MXFP4: return PITH_W_MXFP4;
    }
    return -1;
}

pith_act_format pith_act_format_of(pith_wtype w) {
    switch (w) {
    case PITH_W_Q8_0: case PITH_W_Q4_0: case PITH_W_IQ4_NL: case PITH_W_MXFP4: return PITH_ACT_Q8A;
    case PITH_W_Q4_K: case PITH_W_Q5_K: case PITH_W_Q6_K: case PITH_W_IQ4_XS: return PITH_ACT_Q8K;
    default: return PITH_ACT_F32;
    }
}

size_t pith_act_row_bytes(pith_act_format f, int k) {
    switch (f) {
    case PITH_ACT_Q8A: return (size_t)(k / PITH_QK) * sizeof(pith_block_q8a);
    case PITH_ACT_Q8K: return (size_t)(k / PITH_QK_K) * sizeof(pith_block_q8k);
    default: return (size_t)k * sizeof(float);
    }
}
