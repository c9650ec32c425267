/* LFM2 forward pass (lfm2.c): builds a pith_model from an lfm2 model file (see lfm2_arch.c for what
 * its hyper-parameters and tensors mean). */
#ifndef PITH_MODEL_LFM2_H
#define PITH_MODEL_LFM2_H

#include "pith/model.h"

/* The widest short convolution accepted (LFM2 uses 3). */
#define PITH_LFM2_MAX_CONV 16

/* Takes ownership of `file` on success (and on failure leaves it to the caller). */
int pith_lfm2_build(pith_model_file *file, const pith_model_options *opt, pith_model **out, pith_err *err);

#endif
