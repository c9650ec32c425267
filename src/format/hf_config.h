/* Hugging Face config.json -> pith_hparams: the architecture from "architectures" (or "model_type")
 * through the registry, the keys every architecture shares, then the descriptor's own (model/arch.h). */
#ifndef PITH_FORMAT_HF_CONFIG_H
#define PITH_FORMAT_HF_CONFIG_H

#include <stdbool.h>

#include "format/arch.h"
#include "pith/modelfile.h"

/* Fills *hp (n_vocab stays 0 when config.json omits vocab_size; head_dim 0 when it omits head_dim;
 * tied_embeddings from tie_word_embeddings) and *arch. Errors name config_path; an unregistered
 * architecture's error lists the registered ones. */
int pith_hf_parse_config(const char *config_path, pith_hparams *hp, const pith_arch **arch, pith_err *err);

#endif
