/* LFM2's gated short convolution on the CPU (backend.h: pith_be_short_conv_args). Units of (sequence,
 * block of CONV_CHANNELS channels) run on the pool; each scans its sequence's run through pith_conv1d
 * (recurrent.h), in pieces ending at the tokens whose state is checkpointed (the same arithmetic as
 * one call). */
#include <string.h>

#include "backend/cpu/backend_cpu.h"
#include "backend/cpu/recurrent.h"

#define CONV_CHANNELS 256

static void bx_row(row_job *j, int t, int ith) {
    (void)ith;
    const pith_be_short_conv_args *a = j->a;
    int dim = a->out->cols;
    const float *bcx = row_of(a->in, t);
    float *bx = row_of(a->out, t);
    for (int c = 0; c < dim; c++) bx[c] = bcx[c] * bcx[2 * dim + c];
}

/* Unit u: sequence u / blocks, channels of block u % blocks: the convolution over the sequence's run,
 * in place in out, then times C. */
static void conv_unit(row_job *j, int u, int ith) {
    (void)ith;
    const pith_be_short_conv_args *a = j->a;
    const pith_cpu_be *c = j->c;
    const pith_batch *b = c->step;
    int dim = a->out->cols, blocks = (dim + CONV_CHANNELS - 1) / CONV_CHANNELS, K = a->kernel, g = a->group;
    int s = u / blocks, c0 = (u % blocks) * CONV_CHANNELS, c1 = c0 + CONV_CHANNELS < dim ? c0 + CONV_CHANNELS : dim;
    int t0 = c->seq_start[s], n = c->seq_end[s] - t0;
    const pith_kv_cache *kv = &c->kv.groups[g];
    float *state = (float *)(kv->state + (size_t)b->mem[g].state_slots[s] * kv->state_bytes) + a->state_offset;
    if (b->positions[t0] == 0)
        for (int r = 0; r < K - 1; r++) memset(state + (size_t)r * dim + c0, 0, (size_t)(c1 - c0) * sizeof(float));
    float *x = row_of(a->out, t0);
    const int32_t *ck = b->mem[g].checkpoints ? b->mem[g].checkpoints + t0 : NULL;
    for (int done = 0, end; done < n; done = end) {
        end = done + 1;
        while (end < n && !(ck && ck[end - 1] >= 0)) end++;
        pith_conv1d_args ca = {end - done, dim, K, x + (size_t)done * dim, (size_t)dim, a->w->vec,
                               NULL, state, x + (size_t)done * dim, (size_t)dim, false, NULL};
        pith_conv1d(&ca, c0, c1);
        if (ck && ck[end - 1] >= 0) {
            float *dst = (float *)(kv->state + (size_t)ck[end - 1] * kv->state_bytes) + a->state_offset;
            for (int r = 0; r < K - 1; r++)
                memcpy(dst + (size_t)r * dim + c0, state + (size_t)r * dim + c0, (size_t)(c1 - c0) * sizeof(float));
        }
    }
    for (int t = 0; t < n; t++) {
        const float *C = row_of(a->in, t0 + t) + dim;
        float *y = x + (size_t)t * dim;
        for (int i = c0; i < c1; i++) y[i] *= C[i];
    }
}

void pith_cpu_be_short_conv(pith_backend *be, const pith_be_short_conv_args *a, int n) {
    pith_cpu_be *c = pith_cpu_be_of(be);
    int dim = a->out->cols, blocks = (dim + CONV_CHANNELS - 1) / CONV_CHANNELS, n_seqs = c->step->n_seqs;
    pith_cpu_be_rows(c, n, bx_row, a, dim);
    pith_cpu_be_rows(c, n_seqs * blocks, conv_unit, a, (double)n / n_seqs * CONV_CHANNELS * (a->kernel + 1));
}
