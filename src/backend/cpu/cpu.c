#include "backend/cpu/cpu.h"

#include "backend/cpu/mxfp4.h"

#include <stdlib.h>
#include <string.h>

int pith_cpu_init(pith_cpu *c, int n_threads, bool force_scalar, pith_err *err) {
    memset(c, 0, sizeof *c);
    if (pith_pool_create(n_threads, &c->pool, err)) return -1;
    c->n_threads = pith_pool_size(c->pool);
    /* the best table, with the MXFP4 tile that lives outside the tables (mxfp4.h) */
    c->k = pith_kernels_with_mxfp4(pith_cpu_kernels_best(force_scalar));
    return 0;
}

void pith_cpu_free(pith_cpu *c) {
    if (!c) return;
    pith_pool_destroy(c->pool);
    for (int f = 0; f < PITH_ACT_N_FORMATS; f++) free(c->act_buf[f]);
    memset(c, 0, sizeof *c);
}

int pith_cpu_reserve(pith_cpu *c, int n, int k, pith_err *err) {
    /* F32 activations are read in place; only the quantized formats need room. Round k up so a
     * caller reserving for a width that is not a block multiple still gets whole blocks. */
    int kq = (k + PITH_QK_K - 1) / PITH_QK_K * PITH_QK_K;
    for (int f = PITH_ACT_Q8A; f < PITH_ACT_N_FORMATS; f++) {
        size_t need = (size_t)n * pith_act_row_bytes((pith_act_format)f, kq);
        if (need <= c->act_cap[f]) continue;
        void *p = realloc(c->act_buf[f], need);
        if (!p) return pith_errf(err, "out of memory growing activation scratch to %zu bytes", need);
        c->act_buf[f] = p;
        c->act_cap[f] = need;
        c->act_owner[f] = 0;
    }
    return 0;
}
