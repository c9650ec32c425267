/* RoPE frequencies for every architecture, computed in one place.
 *
 * pith_rope_for fills the frequencies a file's hyper-parameters ask for: theta^(-2i/n_rot) over the
 * rotated dimensions (all of head_dim, or rope_dim for a partial rotary), divided by rope_freqs.weight
 * when the file has it (llama.cpp's way of storing Llama 3 scaling), else rescaled from the
 * hyper-parameters (Hugging Face's "llama3" rope_type), never both; then multiplied by 1/factor under
 * linear scaling (positions divided by the factor), or blended by YaRN with cos and sin times its
 * attention factor (see pith_hparams). Window layers with their own base (rope_theta_swa) use
 * pith_rope_plain: theta_swa^(-2i/head_dim), unscaled.
 *
 * An architecture whose forward pass cannot apply some scaling says which it can (pith_rope_scalings),
 * and pith_rope_for refuses a file that declares another with a message naming both, rather than
 * running it with plain frequencies (wrong output with no error). */
#ifndef PITH_MODEL_ROPE_H
#define PITH_MODEL_ROPE_H

#include "backend/backend.h"
#include "pith/modelfile.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The scalings an architecture applies (a bit set). */
enum {
    PITH_ROPE_CAN_LLAMA3 = 1, /* rope_freqs.weight or rope_scale_factor */
    PITH_ROPE_CAN_LINEAR = 2,
    PITH_ROPE_CAN_YARN = 4,
    PITH_ROPE_CAN_ALL = 7,
};

/* The file's RoPE for layers of head_dim with n_rot rotated dimensions (0: all), checked against the
 * scalings `can` allows. r->inv_freq is owned (pith_rope_free). */
int pith_rope_for(const pith_hparams *hp, const pith_model_file *f, int n_rot, unsigned can, pith_rope *r,
                  const char *path, pith_err *err);
/* theta^(-2i/n_rot), unscaled, mscale 1. */
int pith_rope_plain(const pith_hparams *hp, double theta, int n_rot, pith_rope *r, pith_err *err);
/* LongRoPE (Phi-3's "longrope", formerly "su"): theta^(-2i/n_rot) / factors[i] for the n_rot / 2 rotated
 * pairs (the short or the long list: the caller picks), cos and sin times attn_factor. */
int pith_rope_longrope(const pith_hparams *hp, int n_rot, const float *factors, double attn_factor, pith_rope *r,
                       pith_err *err);
/* Refuses a file that declares a scaling outside `can` (arch: named in the message). */
int pith_rope_check_scaling(const pith_hparams *hp, const pith_model_file *f, unsigned can, const char *arch,
                            const char *path, pith_err *err);
/* M-RoPE (backend.h: pith_rope.sections): true, with r's sections set, when sec's three sections are
 * given (sec[0] > 0) and cover r's rotated pairs; false, r unchanged, otherwise. */
bool pith_rope_mrope(pith_rope *r, const int sec[3]);
void pith_rope_free(pith_rope *r);

#ifdef __cplusplus
}
#endif

#endif
