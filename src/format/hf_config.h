/* Hugging Face config.json -> pith_hparams, for the Llama family (Llama, Mistral, Qwen2, Qwen3). */
#ifndef PITH_FORMAT_HF_CONFIG_H
#define PITH_FORMAT_HF_CONFIG_H

#include <stdbool.h>

#include "pith/modelfile.h"

/* Fills *hp (n_vocab stays 0 when config.json omits vocab_size; head_dim 0 when it omits head_dim) and
 * *tie (tie_word_embeddings). Errors name config_path. */
int pith_hf_parse_config(const char *config_path, pith_hparams *hp, bool *tie, pith_err *err);

#endif
