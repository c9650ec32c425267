/* The shared Mamba2 token mixer (mamba2.h). */
#include "model/mamba2.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <math.h>

#include "format/arch.h"

void pith_mamba2_dims_of(const pith_hparams *hp, bool grouped, pith_mamba2_dims *d) {
    const pith_mamba2_params *P = pith_arch_params(hp);
    memset(d, 0, sizeof *d);
    d->K = hp->conv_kernel;
    d->H = P->heads, d->G = P->groups, d->P = P->head_dim, d->N = P->d_state;
    d->inner = d->H * d->P;
    d->conv_dim = d->inner + 2 * d->G * d->N;
    d->proj_dim = d->inner + d->conv_dim + d->H;
    d->norm_group = grouped && d->G > 0 ? d->inner / d->G : d->inner;
    d->conv_floats = (size_t)(d->K > 1 ? d->K - 1 : 0) * d->conv_dim;
    d->ssm_floats = (size_t)d->H * d->P * d->N;
}

int pith_mamba2_check_hparams(const pith_hparams *hp, const char *path, pith_err *err) {
    const pith_mamba2_params *P = pith_arch_params(hp);
    if (hp->conv_kernel < 1 || hp->conv_kernel > PITH_MAMBA2_MAX_KERNEL)
        return pith_errf(err, "%s: Mamba2 convolution width %d is not in 1..%d", path, hp->conv_kernel,
                         PITH_MAMBA2_MAX_KERNEL);
    const int w[] = {P->groups, P->heads, P->d_state, P->head_dim};
    for (int i = 0; i < 4; i++)
        if (w[i] < 1 || w[i] > 1 << 14) return pith_errf(err, "%s: Mamba2 head count or width %d out of range", path, w[i]);
    if (P->heads % P->groups)
        return pith_errf(err, "%s: %d Mamba2 heads are not a multiple of %d groups", path, P->heads,
                         P->groups);
    return 0;
}

int pith_mamba2_read_gguf(const pith_meta *m, pith_hparams *hp) {
    pith_mamba2_params *P = pith_arch_params(hp);
    int inner = 0;
    if (pith_meta_int(m, "ssm.conv_kernel", true, &hp->conv_kernel) ||
        pith_meta_int(m, "ssm.state_size", true, &P->d_state) ||
        pith_meta_int(m, "ssm.group_count", true, &P->groups) ||
        pith_meta_int(m, "ssm.time_step_rank", true, &P->heads) ||
        pith_meta_int(m, "ssm.inner_size", true, &inner))
        return -1;
    if (P->heads < 1 || inner % P->heads)
        return pith_errf(m->err, "%s: ssm.inner_size %d is not a multiple of %d heads", m->path, inner, P->heads);
    P->head_dim = inner / P->heads;
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

int pith_mamba2_load(pith_decoder *d, int l, const pith_mamba2_dims *md, pith_mamba2_layer *L, pith_err *err) {
    const int dim = d->base.hp.dim;
    char n[96];
    snprintf(n, sizeof n, "blk.%d.ssm_conv1d.weight", l);
    const pith_tensor *c = pith_model_file_tensor(d->file, n);
    if (c && c->ne[0] != md->K) return pith_errf(err, "tensor %s: width %lld, expected %d", n, (long long)c->ne[0], md->K);
    if (pith_decoder_matrix_rows(d, l, "ssm_in.weight", dim, md->proj_dim, 0, md->proj_dim, &L->ssm_in, err) ||
        pith_decoder_matrix_rows(d, l, "ssm_out.weight", md->inner, dim, 0, dim, &L->ssm_out, err) ||
        pith_decoder_vector(d, l, "ssm_conv1d.weight", md->conv_dim * md->K, true, &L->conv_w, err) ||
        pith_decoder_vector(d, l, "ssm_conv1d.bias", md->conv_dim, true, &L->conv_b, err) ||
        pith_decoder_vector(d, l, "ssm_dt.bias", md->H, true, &L->dt_bias, err) ||
        pith_decoder_vector(d, l, "ssm_a", md->H, true, &L->ssm_a, err) ||
        pith_decoder_vector(d, l, "ssm_d", md->H, true, &L->ssm_d, err) ||
        pith_decoder_vector(d, l, "ssm_norm.weight", md->inner, true, &L->ssm_norm, err))
        return -1;
    for (int h = 0; h < md->H; h++)
        if (!(L->ssm_a->vec[h] < 0))
            return pith_errf(err, "ssm_a[%d] is %g; Mamba2 needs A = -exp(A_log) < 0", h, L->ssm_a->vec[h]);
    return 0;
}

int pith_mamba2_bufs_make(pith_decoder *d, const pith_mamba2_dims *md, pith_mamba2_bufs *b, pith_err *err) {
    return !(b->proj = pith_be_buffer(d->be, md->proj_dim, err)) || !(b->y = pith_be_buffer(d->be, md->inner, err)) ? -1
                                                                                                                   : 0;
}

int pith_mamba2_forward(pith_decoder *d, const pith_mamba2_layer *L, const pith_mamba2_dims *md, int l,
                        const pith_mamba2_bufs *b, const pith_buf *in, pith_buf *x, float eps, float out_scale, int n,
                        pith_err *err) {
    const pith_be_mm proj = {L->ssm_in, b->proj, false}, out = {L->ssm_out, x, true};
    const pith_be_mamba2_args op = {
        .proj = b->proj, .y = b->y, .conv_w = L->conv_w, .conv_b = L->conv_b, .dt_bias = L->dt_bias, .A = L->ssm_a,
        .D = L->ssm_d, .norm = L->ssm_norm, .kernel = md->K, .n_heads = md->H, .n_groups = md->G, .head_dim = md->P,
        .d_state = md->N, .norm_group = md->norm_group, .eps = eps, .out_scale = out_scale,
        .group = d->layer_group[l], .state_offset = (size_t)d->layer_index[l] * (md->conv_floats + md->ssm_floats),
    };
    if (pith_be_matmul(d->be, in, &proj, 1, n, err)) return -1;
    pith_be_mamba2(d->be, &op, n);
    return pith_be_matmul(d->be, b->y, &out, 1, n, err);
}
