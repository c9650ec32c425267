/* Granite 4.0-H forward pass (granitehybrid.c): builds a pith_model from a granitehybrid model file (see
 * granitehybrid_arch.c for what its hyper-parameters and tensors mean). */
#ifndef PITH_MODEL_GRANITEHYBRID_H
#define PITH_MODEL_GRANITEHYBRID_H

#include "pith/model.h"

/* Takes ownership of `file` on success (and on failure leaves it to the caller). */
int pith_granitehybrid_build(pith_model_file *file, const pith_model_options *opt, pith_model **out, pith_err *err);

#endif
