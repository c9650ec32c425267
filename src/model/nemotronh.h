/* Nemotron-H forward pass (nemotronh.c): builds a pith_model from a nemotron_h model file (see
 * nemotronh_arch.c for what its hyper-parameters and tensors mean). */
#ifndef PITH_MODEL_NEMOTRONH_H
#define PITH_MODEL_NEMOTRONH_H

#include "pith/model.h"

/* Takes ownership of `file` on success (and on failure leaves it to the caller). */
int pith_nemotronh_build(pith_model_file *file, const pith_model_options *opt, pith_model **out, pith_err *err);

#endif
