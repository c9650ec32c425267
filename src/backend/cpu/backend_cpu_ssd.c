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

/* The layer's state in state slot `slot` of its group. */
static float *slot_state(const pith_cpu_be *c, const pith_be_mamba2_args *a, int slot) {
    const pith_kv_cache *kv = &c->kv.groups[a->group];
    return (float *)(kv->state + (size_t)slot * kv->state_bytes) + a->state_offset;
}

/* The last token of the piece of a run that starts at t: the next token with a checkpoint, else the
 * run's last. */
static int piece_end(const int32_t *ck, int t, int t1) {
    if (ck)
        while (t < t1 - 1 && ck[t] < 0) t++;
    else
        t = t1 - 1;
    return t;
}

/* Unit u: sequence u / blocks, channels of block u % blocks. */
static void conv_unit(row_job *j, int u, int ith) {
    (void)ith;
    const pith_be_mamba2_args *a = j->a;
    const pith_cpu_be *c = j->c;
    const pith_batch *b = c->step;
    const mamba2_dims d = dims_of(a);
    int C = d.conv, blocks = (C + CONV_CHANNELS - 1) / CONV_CHANNELS, K = a->kernel;
    int s = u / blocks, c0 = (u % blocks) * CONV_CHANNELS, c1 = c0 + CONV_CHANNELS < C ? c0 + CONV_CHANNELS : C;
    int t0 = c->seq_start[s], t1 = c->seq_end[s];
    float *state = slot_state(c, a, b->mem[a->group].state_slots[s]);
    if (b->positions[t0] == 0)
        for (int k = 0; k < K - 1; k++) memset(state + (size_t)k * C + c0, 0, (size_t)(c1 - c0) * sizeof(float));
    const int32_t *ck = b->mem[a->group].checkpoints;
    for (int t = t0; t < t1;) {
        int e = piece_end(ck, t, t1);
        float *x = row_of(a->proj, t) + d.inner;
        pith_conv1d_args ca = {e + 1 - t, C, K, x, (size_t)d.proj, a->conv_w->vec, a->conv_b->vec, state, x,
                               (size_t)d.proj, true, c->cpu.k};
        pith_conv1d(&ca, c0, c1);
        if (ck && ck[e] >= 0) {
            float *dst = slot_state(c, a, ck[e]);
            for (int k = 0; k < K - 1; k++)
                memcpy(dst + (size_t)k * C + c0, state + (size_t)k * C + c0, (size_t)(c1 - c0) * sizeof(float));
        }
        t = e + 1;
    }
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
    const int32_t *ck = b->mem[a->group].checkpoints;
    for (int t = t0; t < t1;) {
        int e = piece_end(ck, t, t1);
        const float *row = row_of(a->proj, t);
        pith_ssd_args sa = {
            .n_tokens = e + 1 - t, .n_heads = H, .n_groups = G, .head_dim = a->head_dim, .d_state = N,
            .x = row + d.inner, .ld_x = (size_t)d.proj, .B = row + 2 * d.inner, .C = row + 2 * d.inner + G * N,
            .ld_bc = (size_t)d.proj, .dt = row + d.inner + d.conv, .ld_dt = (size_t)d.proj, .dt_bias = a->dt_bias->vec,
            .A = a->A->vec, .D = a->D->vec, .state = S, .y = row_of(a->y, t), .ld_y = (size_t)a->y->cols,
            .portable = c->portable, .no_avx512 = strncmp(c->cpu.k->name, "avx512", 6) != 0,
        };
        pith_ssd_recurrent(&sa, h);
        if (ck && ck[e] >= 0)
            memcpy(slot_state(c, a, ck[e]) + d.conv_floats + (size_t)h * per_head, S + (size_t)h * per_head,
                   per_head * sizeof(float));
        t = e + 1;
    }
}

static void gated_norm_row(row_job *j, int t, int ith) {
    (void)ith;
    const pith_be_mamba2_args *a = j->a;
    int inner = a->y->cols;
    float *y = row_of(a->y, t);
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
