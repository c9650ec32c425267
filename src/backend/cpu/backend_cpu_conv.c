/* The causal convolution every recurrent mixer of the CPU backend runs (backend_cpu.h:
 * pith_cpu_be_conv_run: a sequence's run through pith_conv1d, recurrent.h, in pieces ending at the
 * tokens whose state is checkpointed, the same arithmetic as one call), and LFM2's gated short
 * convolution on it (backend.h: pith_be_short_conv_args): units of (sequence, block of CONV_CHANNELS
 * channels) on the pool. */
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

float *pith_cpu_be_state(const pith_cpu_be *c, int group, int slot, size_t offset) {
    const pith_kv_cache *kv = &c->kv.groups[group];
    return (float *)(kv->state + (size_t)slot * kv->state_bytes) + offset;
}

int pith_cpu_be_piece_end(const int32_t *ck, int done, int n) {
    int end = done + 1;
    while (end < n && !(ck && ck[end - 1] >= 0)) end++;
    return end;
}

void pith_cpu_be_conv_run(const pith_cpu_be *c, const pith_cpu_be_conv *cv, int s, int c0, int c1) {
    const pith_batch *b = c->step;
    int C = cv->channels, K = cv->kernel, t0 = c->seq_start[s], n = c->seq_end[s] - t0;
    float *state = pith_cpu_be_state(c, cv->group, b->mem[cv->group].state_slots[s], cv->state_offset);
    if (b->positions[t0] == 0)
        for (int r = 0; r < K - 1; r++) memset(state + (size_t)r * C + c0, 0, (size_t)(c1 - c0) * sizeof(float));
    float *x = cv->x + (size_t)t0 * cv->ld;
    const int32_t *ck = b->mem[cv->group].checkpoints ? b->mem[cv->group].checkpoints + t0 : NULL;
    for (int done = 0, end; done < n; done = end) {
        end = pith_cpu_be_piece_end(ck, done, n);
        float *xp = x + (size_t)done * cv->ld;
        pith_conv1d_args ca = {end - done, C, K, xp, cv->ld, cv->w, cv->bias, state, xp, cv->ld, cv->silu, cv->k};
        pith_conv1d(&ca, c0, c1);
        if (ck && ck[end - 1] >= 0) {
            float *dst = pith_cpu_be_state(c, cv->group, ck[end - 1], cv->state_offset);
            for (int r = 0; r < K - 1; r++)
                memcpy(dst + (size_t)r * C + c0, state + (size_t)r * C + c0, (size_t)(c1 - c0) * sizeof(float));
        }
    }
}

/* Unit u: sequence u / blocks, channels of block u % blocks: the convolution over the sequence's run,
 * in place in out, then times C. */
static void conv_unit(row_job *j, int u, int ith) {
    (void)ith;
    const pith_be_short_conv_args *a = j->a;
    const pith_cpu_be *c = j->c;
    int dim = a->out->cols, blocks = (dim + CONV_CHANNELS - 1) / CONV_CHANNELS, s = u / blocks;
    int c0 = (u % blocks) * CONV_CHANNELS, c1 = c0 + CONV_CHANNELS < dim ? c0 + CONV_CHANNELS : dim;
    const pith_cpu_be_conv cv = {a->group, a->state_offset, row_of(a->out, 0), (size_t)dim, dim, a->kernel,
                                 a->w->vec, NULL, false, NULL};
    pith_cpu_be_conv_run(c, &cv, s, c0, c1);
    int t0 = c->seq_start[s], n = c->seq_end[s] - t0;
    for (int t = 0; t < n; t++) {
        const float *C = row_of(a->in, t0 + t) + dim;
        float *y = row_of(a->out, t0 + t);
        for (int i = c0; i < c1; i++) y[i] *= C[i];
    }
}

void pith_cpu_be_short_conv(pith_backend *be, const pith_be_short_conv_args *a, int n) {
    pith_cpu_be *c = pith_cpu_be_of(be);
    int dim = a->out->cols, blocks = (dim + CONV_CHANNELS - 1) / CONV_CHANNELS, n_seqs = c->step->n_seqs;
    pith_cpu_be_rows(c, n, bx_row, a, dim);
    pith_cpu_be_rows(c, n_seqs * blocks, conv_unit, a, (double)n / n_seqs * CONV_CHANNELS * (a->kernel + 1));
}
