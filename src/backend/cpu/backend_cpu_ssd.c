/* Mamba2's mixer on the CPU (backend.h: pith_be_mamba2_args), three pool jobs over the step:
 *   - units of (sequence, block of CONV_CHANNELS channels): the causal convolution of xBC with SiLU
 *     (pith_conv1d, recurrent.h) over the sequence's run, in place in proj;
 *   - units of (sequence, head): the recurrent SSD scan (pith_ssd_recurrent) over the run into y;
 *   - rows: y * silu(z) RMS-normed per group (pith_gated_rmsnorm_grouped), times out_scale.
 * Every run goes through the recurrent SSD kernel, a prefill chunk too: its result is then the same
 * bits however the scheduler cuts a prompt into chunks, batches it with others or restores it from a
 * snapshot, and with SIMD it is the faster form on a CPU (the chunked form does the same state
 * products, 2 x head_dim x d_state per token and head, plus its intra-chunk terms).
 * Checkpoints (batch.h): a run is cut after every token with a checkpoint, and each unit copies its
 * channels of the convolution state or its head of the SSM state into the checkpoint slot. */
#include <math.h>
#include <string.h>

#include "backend/cpu/backend_cpu.h"
#include "backend/cpu/recurrent.h"

_Static_assert(PITH_BE_MAX_CONV_KERNEL <= PITH_CONV1D_MAX_KERNEL, "the convolution kernel's width limit");

#define CONV_CHANNELS 256

typedef struct mamba2_dims {
    int inner, conv, proj;
    size_t conv_floats; /* the convolution state's floats, before the SSM state */
} mamba2_dims;

static mamba2_dims dims_of(const pith_be_mamba2_args *a) {
    mamba2_dims d;
    d.inner = a->n_heads * a->head_dim;
    d.conv = d.inner + 2 * a->n_groups * a->d_state;
    d.proj = a->proj->cols;
    d.conv_floats = (size_t)(a->kernel > 1 ? a->kernel - 1 : 0) * d.conv;
    return d;
}

static float *slot_state(const pith_cpu_be *c, const pith_be_mamba2_args *a, int slot) {
    return pith_cpu_be_state(c, a->group, slot, a->state_offset);
}

/* Unit u: sequence u / blocks, channels of block u % blocks. */
static void conv_unit(row_job *j, int u, int ith) {
    (void)ith;
    const pith_be_mamba2_args *a = j->a;
    const mamba2_dims d = dims_of(a);
    int C = d.conv, blocks = (C + CONV_CHANNELS - 1) / CONV_CHANNELS;
    int c0 = (u % blocks) * CONV_CHANNELS, c1 = c0 + CONV_CHANNELS < C ? c0 + CONV_CHANNELS : C;
    const pith_cpu_be_conv cv = {a->group, a->state_offset, row_of(a->proj, 0) + d.inner, (size_t)d.proj, C,
                                 a->kernel, a->conv_w->vec, a->conv_b->vec, true, j->c->cpu.k};
    pith_cpu_be_conv_run(j->c, &cv, u / blocks, c0, c1);
}

/* Unit u: sequence u / heads, head u % heads. */
static void ssd_unit(row_job *j, int u, int ith) {
    (void)ith;
    const pith_be_mamba2_args *a = j->a;
    const pith_cpu_be *c = j->c;
    const pith_batch *b = c->step;
    const mamba2_dims d = dims_of(a);
    const int H = a->n_heads, G = a->n_groups, N = a->d_state;
    int s = u / H, h = u % H;
    int t0 = c->seq_start[s], t1 = c->seq_end[s];
    size_t per_head = (size_t)a->head_dim * N;
    float *S = slot_state(c, a, b->mem[a->group].state_slots[s]) + d.conv_floats;
    if (b->positions[t0] == 0) memset(S + (size_t)h * per_head, 0, per_head * sizeof(float));
    const int32_t *ck = b->mem[a->group].checkpoints ? b->mem[a->group].checkpoints + t0 : NULL;
    for (int done = 0, end; done < t1 - t0; done = end) {
        end = pith_cpu_be_piece_end(ck, done, t1 - t0);
        int t = t0 + done;
        const float *row = row_of(a->proj, t);
        pith_ssd_args sa = {
            .n_tokens = end - done, .n_heads = H, .n_groups = G, .head_dim = a->head_dim, .d_state = N,
            .x = row + d.inner, .ld_x = (size_t)d.proj, .B = row + 2 * d.inner, .C = row + 2 * d.inner + G * N,
            .ld_bc = (size_t)d.proj, .dt = row + d.inner + d.conv, .ld_dt = (size_t)d.proj, .dt_bias = a->dt_bias->vec,
            .A = a->A->vec, .D = a->D->vec, .state = S, .y = row_of(a->y, t), .ld_y = (size_t)a->y->cols,
            .portable = c->portable, .no_avx512 = strncmp(c->cpu.k->name, "avx512", 6) != 0,
        };
        pith_ssd_recurrent(&sa, h);
        if (ck && ck[end - 1] >= 0)
            memcpy(slot_state(c, a, ck[end - 1]) + d.conv_floats + (size_t)h * per_head, S + (size_t)h * per_head,
                   per_head * sizeof(float));
    }
}

static void gated_norm_row(row_job *j, int t, int ith) {
    (void)ith;
    const pith_be_mamba2_args *a = j->a;
    int inner = a->y->cols;
    float *y = row_of(a->y, t);
    if (!a->norm) { /* the gate alone: tensor parallelism norms across ranks after (backend.h) */
        const float *z = row_of(a->proj, t);
        for (int i = 0; i < inner; i++) y[i] *= z[i] / (1.0f + expf(-z[i]));
        return;
    }
    pith_gated_rmsnorm_grouped(y, row_of(a->proj, t), a->norm->vec, inner, a->norm_group, a->eps);
    if (a->out_scale != 0 && a->out_scale != 1.0f)
        for (int i = 0; i < inner; i++) y[i] *= a->out_scale;
}

void pith_cpu_be_mamba2(pith_backend *be, const pith_be_mamba2_args *a, int n) {
    pith_cpu_be *c = pith_cpu_be_of(be);
    const mamba2_dims d = dims_of(a);
    int n_seqs = c->step->n_seqs, blocks = (d.conv + CONV_CHANNELS - 1) / CONV_CHANNELS;
    pith_cpu_be_rows(c, n_seqs * blocks, conv_unit, a, (double)n / n_seqs * CONV_CHANNELS * (a->kernel + 4));
    pith_cpu_be_rows(c, n_seqs * a->n_heads, ssd_unit, a, (double)n / n_seqs * 4.0 * a->head_dim * a->d_state);
    pith_cpu_be_rows(c, n, gated_norm_row, a, 8.0 * d.inner);
}
