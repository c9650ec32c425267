/* A model: something that turns a flat batch (batch.h) into logits, reading and writing a paged KV
 * cache (kv.h). This is the plug-in interface: a new architecture provides a builder that fills a
 * pith_model with its ops; the engine core only ever calls pith_model_forward.
 *
 * pith_model_load picks the builder from the file's architecture (llama, qwen2, qwen3 today). A model
 * owns its pith_model_file (mapped weights) and its worker threads. Forward is not reentrant: one
 * caller at a time per model. */
#ifndef PITH_MODEL_H
#define PITH_MODEL_H

#include "pith/batch.h"
#include "pith/kv.h"
#include "pith/modelfile.h"
#include "pith/status.h"

typedef struct pith_model pith_model;

typedef struct pith_model_ops {
    /* Fill logits ([pith_batch_n_logits(b)] x n_vocab, row-major) for the batch. */
    int (*forward)(pith_model *m, pith_kv_cache *kv, const pith_batch *b, float *logits, pith_err *err);
    void (*destroy)(pith_model *m);
} pith_model_ops;

struct pith_model {
    const pith_model_ops *ops;
    pith_hparams hp;        /* copied from the file; n_vocab etc. */
    int kv_dim;             /* n_kv_heads * head_dim: what the KV cache must hold per layer */
    pith_model_file *file;  /* owned; NULL for models not backed by a file (tests) */
    void *impl;             /* architecture-specific state */
};

typedef struct pith_model_options {
    int n_threads;          /* 0: one per online CPU */
} pith_model_options;

int pith_model_load(const char *path, const pith_model_options *opt, pith_model **out, pith_err *err);
int pith_model_forward(pith_model *m, pith_kv_cache *kv, const pith_batch *b, float *logits, pith_err *err);
void pith_model_free(pith_model *m);

#endif
