/* The shared Mamba2 token mixer (mamba2.h). */
#include "model/mamba2.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <math.h>

#include "format/arch.h"
#include "model/layers.h"

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
    d->ranks = 1;
}

int pith_mamba2_shard(const pith_decoder *d, pith_mamba2_dims *md, pith_err *err) {
    if (!d->tp.comm) return 0;
    const int R = d->tp.size;
    if (md->H % R) return pith_errf(err, "--tp %d: the %d Mamba2 heads do not divide by %d", R, md->H, R);
    if (md->G % R && md->G != 1)
        return pith_errf(err, "--tp %d: %d Mamba2 B/C groups neither divide by %d nor are one group", R, md->G, R);
    md->ranks = R;
    md->bc_whole = md->G % R != 0;
    md->norm_across = md->norm_group > md->inner / R;
    md->H /= R;
    if (!md->bc_whole) md->G /= R;
    md->inner = md->H * md->P;
    md->conv_dim = md->inner + 2 * md->G * md->N;
    md->proj_dim = md->inner + md->conv_dim + md->H;
    if (!md->norm_across) md->norm_group = md->inner < md->norm_group ? md->inner : md->norm_group;
    md->conv_floats = (size_t)(md->K > 1 ? md->K - 1 : 0) * md->conv_dim;
    md->ssm_floats = (size_t)md->H * md->P * md->N;
    return 0;
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
    const int dim = d->base.hp.dim, R = md->ranks;
    char n[96];
    snprintf(n, sizeof n, "blk.%d.ssm_conv1d.weight", l);
    const pith_tensor *c = pith_model_file_tensor(d->file, n);
    if (c && c->ne[0] != md->K) return pith_errf(err, "tensor %s: width %lld, expected %d", n, (long long)c->ne[0], md->K);
    /* the file's widths, in parts: [z | x | B | C | dt] rows of ssm_in, [x | B | C] channels of the
     * convolution; sharded, each part splits over the ranks except B and C held whole */
    const int inner = md->inner * R, bc = md->G * md->N * (md->bc_whole ? 1 : R), H = md->H * R, K = md->K;
    const unsigned char bc_mode = md->bc_whole ? PITH_PART_WHOLE : PITH_PART_SPLIT;
    const unsigned char in_whole[5] = {PITH_PART_SPLIT, PITH_PART_SPLIT, bc_mode, bc_mode, PITH_PART_SPLIT};
    const unsigned char *conv_whole = in_whole + 1;
    const int in_rows[5] = {inner, inner, bc, bc, H}, conv_w[3] = {inner * K, bc * K, bc * K},
              conv_b[3] = {inner, bc, bc};
    if (pith_decoder_matrix_parts(d, l, "ssm_in.weight", dim, 5, in_rows, in_whole, &L->ssm_in, err) ||
        pith_decoder_matrix_rows(d, l, "ssm_out.weight", md->inner, dim, 0, dim, &L->ssm_out, err) ||
        pith_decoder_vector_parts(d, l, "ssm_conv1d.weight", 3, conv_w, conv_whole, &L->conv_w, err) ||
        pith_decoder_vector_parts(d, l, "ssm_conv1d.bias", 3, conv_b, conv_whole, &L->conv_b, err) ||
        pith_decoder_vector_parts(d, l, "ssm_dt.bias", 1, &H, NULL, &L->dt_bias, err) ||
        pith_decoder_vector_parts(d, l, "ssm_a", 1, &H, NULL, &L->ssm_a, err) ||
        pith_decoder_vector_parts(d, l, "ssm_d", 1, &H, NULL, &L->ssm_d, err) ||
        pith_decoder_vector_parts(d, l, "ssm_norm.weight", 1, &inner, NULL, &L->ssm_norm, err))
        return -1;
    for (int h = 0; h < md->H; h++)
        if (!(L->ssm_a->vec[h] < 0))
            return pith_errf(err, "ssm_a[%d] is %g; Mamba2 needs A = -exp(A_log) < 0", h, L->ssm_a->vec[h]);
    return 0;
}

int pith_mamba2_bufs_make(pith_decoder *d, const pith_mamba2_dims *md, pith_mamba2_bufs *b, pith_err *err) {
    if (!(b->proj = pith_be_buffer(d->be, md->proj_dim, err)) || !(b->y = pith_be_buffer(d->be, md->inner, err)))
        return -1;
    if (md->ranks > 1 && !(b->part = pith_be_buffer(d->be, d->base.hp.dim, err))) return -1;
    if (md->norm_across && !(b->sumsq = pith_be_buffer(d->be, 1, err))) return -1;
    return 0;
}

int pith_mamba2_forward(pith_decoder *d, const pith_mamba2_layer *L, const pith_mamba2_dims *md, int l,
                        const pith_mamba2_bufs *b, const pith_buf *in, pith_buf *x, float eps, float out_scale, int n,
                        pith_err *err) {
    const pith_be_mm proj = {L->ssm_in, b->proj, false};
    const pith_be_mamba2_args op = {
        .proj = b->proj, .y = b->y, .conv_w = L->conv_w, .conv_b = L->conv_b, .dt_bias = L->dt_bias, .A = L->ssm_a,
        .D = L->ssm_d, .norm = md->norm_across ? NULL : L->ssm_norm, .kernel = md->K, .n_heads = md->H,
        .n_groups = md->G, .head_dim = md->P, .d_state = md->N, .norm_group = md->norm_group, .eps = eps,
        .out_scale = out_scale, .group = d->layer_group[l],
        .state_offset = (size_t)d->layer_index[l] * (md->conv_floats + md->ssm_floats),
    };
    if (pith_be_matmul(d->be, in, &proj, 1, n, err)) return -1;
    pith_be_mamba2(d->be, &op, n);
    if (md->ranks == 1) {
        const pith_be_mm out = {L->ssm_out, x, true};
        return pith_be_matmul(d->be, b->y, &out, 1, n, err);
    }
    /* sharded: the norm over the whole width across ranks (the op only gated), then this rank's partial
     * out-projection summed across ranks */
    if (md->norm_across) {
        if (pith_tp_rmsnorm(d, b->y, L->ssm_norm, b->sumsq, n, eps, err)) return -1;
        if (out_scale != 0 && out_scale != 1.0f) pith_be_scale(d->be, b->y, out_scale, n);
    }
    const pith_be_mm out = {L->ssm_out, b->part, false};
    if (pith_be_matmul(d->be, b->y, &out, 1, n, err) || pith_decoder_allreduce(d, b->part, n, err)) return -1;
    pith_be_scale_add(d->be, x, b->part, 1.0f, n);
    return 0;
}
