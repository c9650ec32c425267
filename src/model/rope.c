/* RoPE frequencies (rope.h). */
#include "model/rope.h"

#include <math.h>
#include <stdlib.h>

#include <string.h>

static int alloc_freq(pith_rope *r, int n_rot, pith_err *err) {
    r->half = n_rot / 2;
    r->mscale = 1.0;
    r->inv_freq = malloc((size_t)(r->half > 0 ? r->half : 1) * sizeof *r->inv_freq);
    return r->inv_freq ? 0 : pith_errf(err, "out of memory");
}

/* YaRN (see pith_hparams): the dimension whose frequency turns `rotations` times over the original
 * context, then the blend of extrapolated and interpolated frequencies across the ramp. */
static double yarn_dim(const pith_hparams *hp, int n_rot, double rotations) {
    return n_rot * log(hp->rope_orig_ctx / (rotations * 2 * M_PI)) / (2 * log((double)hp->rope_theta));
}

static void yarn_frequencies(const pith_hparams *hp, int n_rot, double *inv_freq) {
    double lo = yarn_dim(hp, n_rot, hp->rope_yarn_beta_fast), hi = yarn_dim(hp, n_rot, hp->rope_yarn_beta_slow);
    if (hp->rope_yarn_truncate) lo = floor(lo), hi = ceil(hi);
    lo = lo > 0 ? lo : 0;
    hi = hi < n_rot - 1 ? hi : n_rot - 1;
    if (hi == lo) hi += 0.001;
    for (int i = 0; i < n_rot / 2; i++) {
        double extra = pow((double)hp->rope_theta, -2.0 * i / n_rot), inter = extra / hp->rope_yarn_factor;
        double ramp = (i - lo) / (hi - lo);
        ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp; /* 0: extrapolate, 1: interpolate */
        inv_freq[i] = inter * ramp + extra * (1 - ramp);
    }
}

int pith_rope_check_scaling(const pith_hparams *hp, const pith_model_file *f, unsigned can, const char *arch,
                            const char *path, pith_err *err) {
    const char *kind = NULL;
    if ((hp->rope_scale_factor > 0 || pith_model_file_tensor(f, "rope_freqs.weight")) && !(can & PITH_ROPE_CAN_LLAMA3))
        kind = "Llama 3 (rope_freqs / rope_type llama3)";
    else if (hp->rope_linear_factor > 0 && !(can & PITH_ROPE_CAN_LINEAR))
        kind = "linear";
    else if (hp->rope_yarn_factor > 0 && !(can & PITH_ROPE_CAN_YARN))
        kind = "YaRN";
    if (kind) return pith_errf(err, "%s: RoPE scaling %s is not supported for architecture %s", path, kind, arch);
    return 0;
}

int pith_rope_for(const pith_hparams *hp, const pith_model_file *f, int n_rot, unsigned can, pith_rope *r,
                  const char *path, pith_err *err) {
    r->inv_freq = NULL;
    r->style = hp->rope_style;
    if (n_rot <= 0) n_rot = hp->head_dim;
    if (pith_rope_check_scaling(hp, f, can, hp->arch, path, err) || alloc_freq(r, n_rot, err)) return -1;
    int half = n_rot / 2;
    const pith_tensor *ft = pith_model_file_tensor(f, "rope_freqs.weight");
    float *factors = NULL;
    if (ft) { /* a vector: F32 once the file was validated */
        if (ft->ne[0] != half || ft->type != PITH_F32 || !(factors = malloc((size_t)half * sizeof *factors))) {
            pith_rope_free(r);
            return pith_errf(err, ft->ne[0] != half || ft->type != PITH_F32
                                      ? "tensor rope_freqs.weight: expected %d F32 elements" : "out of memory", half);
        }
        memcpy(factors, ft->data, (size_t)half * sizeof *factors);
    }
    for (int i = 0; i < half; i++) {
        double freq = pow((double)hp->rope_theta, -2.0 * i / n_rot);
        if (factors) {
            freq /= factors[i];
        } else if (hp->rope_scale_factor > 0) {
            double low_wavelen = hp->rope_orig_ctx / hp->rope_low_freq_factor;
            double high_wavelen = hp->rope_orig_ctx / hp->rope_high_freq_factor;
            double wavelen = 2 * M_PI / freq;
            if (wavelen > low_wavelen) {
                freq /= hp->rope_scale_factor;
            } else if (wavelen >= high_wavelen) {
                double smooth = (hp->rope_orig_ctx / wavelen - hp->rope_low_freq_factor) /
                                (hp->rope_high_freq_factor - hp->rope_low_freq_factor);
                freq = (1 - smooth) * freq / hp->rope_scale_factor + smooth * freq;
            }
        }
        if (hp->rope_linear_factor > 0) freq /= hp->rope_linear_factor;
        r->inv_freq[i] = freq;
    }
    free(factors);
    if (hp->rope_yarn_factor > 0) yarn_frequencies(hp, n_rot, r->inv_freq), r->mscale = hp->rope_yarn_mscale;
    return 0;
}

int pith_rope_plain(const pith_hparams *hp, double theta, int n_rot, pith_rope *r, pith_err *err) {
    r->style = hp->rope_style;
    if (alloc_freq(r, n_rot, err)) return -1;
    for (int i = 0; i < r->half; i++) r->inv_freq[i] = pow(theta, -2.0 * i / n_rot);
    return 0;
}

int pith_rope_longrope(const pith_hparams *hp, int n_rot, const float *factors, double attn_factor, pith_rope *r,
                       pith_err *err) {
    r->style = hp->rope_style;
    if (alloc_freq(r, n_rot, err)) return -1;
    for (int i = 0; i < r->half; i++) r->inv_freq[i] = pow((double)hp->rope_theta, -2.0 * i / n_rot) / factors[i];
    r->mscale = attn_factor;
    return 0;
}

bool pith_rope_mrope(pith_rope *r, const int sec[3]) {
    if (sec[0] < 1 || sec[1] < 0 || sec[2] < 0 || sec[0] + sec[1] + sec[2] != r->half) return false;
    for (int i = 0; i < 3; i++) r->sections[i] = sec[i];
    return true;
}

void pith_rope_free(pith_rope *r) {
    free(r->inv_freq);
    r->inv_freq = NULL;
}
