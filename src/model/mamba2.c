/* The shared Mamba2 token mixer (mamba2.h). */
#include "model/mamba2.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <math.h>

#include "backend/cpu/recurrent.h"
#include "model/arch.h"
#include "model/hybrid_common.h"

void pith_mamba2_dims_of(const pith_hparams *hp, bool grouped, pith_mamba2_dims *d) {
    memset(d, 0, sizeof *d);
    d->K = hp->conv_kernel;
    d->H = hp->ssm_n_v_heads, d->G = hp->ssm_n_k_heads, d->P = hp->ssm_head_v_dim, d->N = hp->ssm_head_k_dim;
    d->inner = d->H * d->P;
    d->conv_dim = d->inner + 2 * d->G * d->N;
    d->proj_dim = d->inner + d->conv_dim + d->H;
    d->norm_group = grouped && d->G > 0 ? d->inner / d->G : d->inner;
    d->conv_floats = (size_t)(d->K > 1 ? d->K - 1 : 0) * d->conv_dim;
    d->ssm_floats = (size_t)d->H * d->P * d->N;
}

int pith_mamba2_check_hparams(const pith_hparams *hp, const char *path, pith_err *err) {
    if (hp->conv_kernel < 1 || hp->conv_kernel > PITH_MAMBA2_MAX_KERNEL)
        return pith_errf(err, "%s: Mamba2 convolution width %d is not in 1..%d", path, hp->conv_kernel,
                         PITH_MAMBA2_MAX_KERNEL);
    const int w[] = {hp->ssm_n_k_heads, hp->ssm_n_v_heads, hp->ssm_head_k_dim, hp->ssm_head_v_dim};
    for (int i = 0; i < 4; i++)
        if (w[i] < 1 || w[i] > 1 << 14) return pith_errf(err, "%s: Mamba2 head count or width %d out of range", path, w[i]);
    if (hp->ssm_n_v_heads % hp->ssm_n_k_heads)
        return pith_errf(err, "%s: %d Mamba2 heads are not a multiple of %d groups", path, hp->ssm_n_v_heads,
                         hp->ssm_n_k_heads);
    return 0;
}

int pith_mamba2_read_gguf(const pith_meta *m, pith_hparams *hp) {
    int inner = 0;
    if (pith_meta_int(m, "ssm.conv_kernel", true, &hp->conv_kernel) ||
        pith_meta_int(m, "ssm.state_size", true, &hp->ssm_head_k_dim) ||
        pith_meta_int(m, "ssm.group_count", true, &hp->ssm_n_k_heads) ||
        pith_meta_int(m, "ssm.time_step_rank", true, &hp->ssm_n_v_heads) ||
        pith_meta_int(m, "ssm.inner_size", true, &inner))
        return -1;
    if (hp->ssm_n_v_heads < 1 || inner % hp->ssm_n_v_heads)
        return pith_errf(m->err, "%s: ssm.inner_size %d is not a multiple of %d heads", m->path, inner, hp->ssm_n_v_heads);
    hp->ssm_head_v_dim = inner / hp->ssm_n_v_heads;
    return 0;
}

int pith_mamba2_finish_hf(pith_model_file *f, const pith_hparams *hp, pith_err *err) {
    if (pith_model_file_format(f) != PITH_FORMAT_SAFETENSORS) return 0;
    char name[96];
    float *v;
    int64_t n;
    for (int l = 0; l < hp->n_layers; l++) {
        if (!pith_layer_bit(hp->layer_recurrent, l)) continue;
        snprintf(name, sizeof name, "blk.%d.ssm_a", l);
        if (pith_mf_own_vector(f, name, &v, &n, err)) return -1;
        for (int64_t i = 0; v && i < n; i++) v[i] = -expf(v[i]);
    }
    return 0;
}

int pith_mamba2_load(const pith_model_file *f, int l, const pith_mamba2_dims *d, int dim, pith_mamba2_layer *L,
                     pith_err *err) {
    char n[96];
#define NAME(s) (snprintf(n, sizeof n, "blk.%d.%s", l, s), n)
    const pith_tensor *c = pith_model_file_tensor(f, NAME("ssm_conv1d.weight"));
    if (c && c->ne[0] != d->K) return pith_errf(err, "tensor %s: width %lld, expected %d", n, (long long)c->ne[0], d->K);
    if (pith_hy_load_mat(f, NAME("ssm_in.weight"), d->proj_dim, dim, &L->ssm_in, err) ||
        pith_hy_load_mat(f, NAME("ssm_out.weight"), dim, d->inner, &L->ssm_out, err) ||
        pith_hy_load_vec(f, NAME("ssm_conv1d.weight"), (int64_t)d->conv_dim * d->K, &L->conv_w, err) ||
        pith_hy_load_vec(f, NAME("ssm_conv1d.bias"), d->conv_dim, &L->conv_b, err) ||
        pith_hy_load_vec(f, NAME("ssm_dt.bias"), d->H, &L->dt_bias, err) ||
        pith_hy_load_vec(f, NAME("ssm_a"), d->H, &L->ssm_a, err) || pith_hy_load_vec(f, NAME("ssm_d"), d->H, &L->ssm_d, err) ||
        pith_hy_load_vec(f, NAME("ssm_norm.weight"), d->inner, &L->ssm_norm, err))
        return -1;
#undef NAME
    for (int h = 0; h < d->H; h++)
        if (!(L->ssm_a[h] < 0)) return pith_errf(err, "ssm_a[%d] is %g; Mamba2 needs A = -exp(A_log) < 0", h, L->ssm_a[h]);
    return 0;
}

int pith_mamba2_pack(pith_cpu *c, pith_mamba2_layer *L, pith_err *err) {
    if (L->ssm_in.data && pith_matrix_pack(c, &L->ssm_in, err)) return -1;
    return L->ssm_out.data ? pith_matrix_pack(c, &L->ssm_out, err) : 0;
}

void pith_mamba2_free(pith_mamba2_layer *L) {
    pith_matrix_free(&L->ssm_in);
    pith_matrix_free(&L->ssm_out);
    float *vs[] = {L->conv_w, L->conv_b, L->dt_bias, L->ssm_a, L->ssm_d, L->ssm_norm};
    for (size_t i = 0; i < sizeof vs / sizeof *vs; i++) free(vs[i]);
    memset(L, 0, sizeof *L);
}

/* This layer's state in state slot `slot` of the RECURRENT group. */
static float *slot_state(const pith_mamba2_run *r, int slot) {
    const pith_kv_cache *c = &r->mem->groups[r->group];
    return (float *)(c->state + (size_t)slot * c->state_bytes) +
           (size_t)r->layer_index * (r->d->conv_floats + r->d->ssm_floats);
}

/* The last token of the piece of s's run that starts at t: the next token with a checkpoint, else the
 * run's last. */
static int piece_end(const int32_t *ck, int t, int t1) {
    if (ck)
        while (t < t1 - 1 && ck[t] < 0) t++;
    else
        t = t1 - 1;
    return t;
}

#define CONV_CHANNELS 256

/* Unit u: sequence u / blocks, channels of block u % blocks: the convolution of xBC (in place in proj). */
static void conv_unit(pith_hy_job *j, int u, int ith) {
    (void)ith;
    const pith_mamba2_run *r = j->m;
    const pith_mamba2_dims *d = r->d;
    const pith_batch *b = r->b;
    int C = d->conv_dim, blocks = (C + CONV_CHANNELS - 1) / CONV_CHANNELS, K = d->K;
    int s = u / blocks, c0 = (u % blocks) * CONV_CHANNELS, c1 = c0 + CONV_CHANNELS < C ? c0 + CONV_CHANNELS : C;
    int t0 = r->seq_start[s], t1 = r->seq_start[s + 1];
    float *state = slot_state(r, b->mem[r->group].state_slots[s]);
    if (b->positions[t0] == 0)
        for (int k = 0; k < K - 1; k++) memset(state + (size_t)k * C + c0, 0, (size_t)(c1 - c0) * sizeof(float));
    const int32_t *ck = b->mem[r->group].checkpoints;
    for (int t = t0; t < t1;) {
        int e = piece_end(ck, t, t1);
        float *x = r->proj + (size_t)t * d->proj_dim + d->inner;
        pith_conv1d_args a = {e + 1 - t, C, K, x, (size_t)d->proj_dim, r->L->conv_w, r->L->conv_b, state, x,
                              (size_t)d->proj_dim, true, r->cpu->k};
        pith_conv1d(&a, c0, c1);
        if (ck && ck[e] >= 0) {
            float *dst = slot_state(r, ck[e]);
            for (int k = 0; k < K - 1; k++)
                memcpy(dst + (size_t)k * C + c0, state + (size_t)k * C + c0, (size_t)(c1 - c0) * sizeof(float));
        }
        t = e + 1;
    }
}

/* Unit u: sequence u / heads, head u % heads: the SSD scan over the sequence's run into y. */
static void ssd_unit(pith_hy_job *j, int u, int ith) {
    (void)ith;
    const pith_mamba2_run *r = j->m;
    const pith_mamba2_dims *d = r->d;
    const pith_batch *b = r->b;
    int s = u / d->H, h = u % d->H;
    int t0 = r->seq_start[s], t1 = r->seq_start[s + 1];
    size_t per_head = (size_t)d->P * d->N;
    float *S = slot_state(r, b->mem[r->group].state_slots[s]) + d->conv_floats;
    if (b->positions[t0] == 0) memset(S + (size_t)h * per_head, 0, per_head * sizeof(float));
    const int32_t *ck = b->mem[r->group].checkpoints;
    for (int t = t0; t < t1;) {
        int e = piece_end(ck, t, t1);
        const float *row = r->proj + (size_t)t * d->proj_dim;
        pith_ssd_args a = {
            .n_tokens = e + 1 - t, .n_heads = d->H, .n_groups = d->G, .head_dim = d->P, .d_state = d->N,
            .x = row + d->inner, .ld_x = (size_t)d->proj_dim, .B = row + 2 * d->inner,
            .C = row + 2 * d->inner + d->G * d->N, .ld_bc = (size_t)d->proj_dim, .dt = row + d->inner + d->conv_dim,
            .ld_dt = (size_t)d->proj_dim, .dt_bias = r->L->dt_bias, .A = r->L->ssm_a, .D = r->L->ssm_d, .state = S,
            .y = r->y + (size_t)t * d->inner, .ld_y = (size_t)d->inner, .portable = r->portable,
            .no_avx512 = strncmp(r->cpu->k->name, "avx512", 6) != 0,
        };
        pith_ssd_recurrent(&a, h);
        if (ck && ck[e] >= 0)
            memcpy(slot_state(r, ck[e]) + d->conv_floats + (size_t)h * per_head, S + (size_t)h * per_head,
                   per_head * sizeof(float));
        t = e + 1;
    }
}

/* y * silu(z), RMS-normed per group, times out_scale (ssm_out's input). */
static void gated_norm_row(pith_hy_job *j, int t, int ith) {
    (void)ith;
    const pith_mamba2_run *r = j->m;
    const pith_mamba2_dims *d = r->d;
    float *y = r->y + (size_t)t * d->inner;
    pith_gated_rmsnorm_grouped(y, r->proj + (size_t)t * d->proj_dim, r->L->ssm_norm, d->inner, d->norm_group, r->eps);
    if (r->out_scale != 1.0f)
        for (int i = 0; i < d->inner; i++) y[i] *= r->out_scale;
}

int pith_mamba2_forward(const pith_mamba2_run *r, const float *xb, int dim, float *x, pith_err *err) {
    const pith_mamba2_dims *d = r->d;
    const pith_batch *b = r->b;
    int n = b->n_tokens;
    pith_acts a;
    pith_acts_bind(r->cpu, &a, xb, n, dim, dim);
    if (pith_cpu_matmul(r->cpu, &r->L->ssm_in, &a, r->proj, (size_t)d->proj_dim, false, err)) return -1;
    pith_hy_job j = {.m = (void *)r, .b = b};
    int blocks = (d->conv_dim + CONV_CHANNELS - 1) / CONV_CHANNELS;
    pith_hy_run(r->cpu, &j, conv_unit, b->n_seqs * blocks, (double)n / b->n_seqs * CONV_CHANNELS * (d->K + 4));
    pith_hy_run(r->cpu, &j, ssd_unit, b->n_seqs * d->H, (double)n / b->n_seqs * 4.0 * d->P * d->N);
    pith_hy_run(r->cpu, &j, gated_norm_row, n, 8.0 * d->inner);
    pith_acts_bind(r->cpu, &a, r->y, n, d->inner, d->inner);
    return pith_cpu_matmul(r->cpu, &r->L->ssm_out, &a, x, dim, true, err);
}
