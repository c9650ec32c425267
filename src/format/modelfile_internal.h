/* The pith_model_file object and the helpers its per-format loaders share.
 *
 * A loader fills hp and adds tensors (under canonical names) with mf_add_tensor; modelfile.c then builds
 * the name index and runs pith_model_file_validate, which checks the hyper-parameters and every tensor
 * the forward pass needs, so that it can trust them. Everything a model file allocates (names, converted
 * vectors, realigned copies) is recorded in `owned` and freed on close. */
#ifndef PITH_FORMAT_MODELFILE_INTERNAL_H
#define PITH_FORMAT_MODELFILE_INTERNAL_H

#include "format/mapped_file.h"
#include "format/name_index.h"
#include "pith/modelfile.h"

struct pith_arch;
typedef struct pith_arch pith_arch;

/* The most bytes an architecture's private hyper-parameters (arch.h: params_size) may take. */
#define PITH_ARCH_PARAMS_MAX 1024

struct pith_model_file {
    pith_format format;
    char *path;
    char *dir; /* Hugging Face directory, else NULL */
    pith_hparams hp;
    _Alignas(16) unsigned char arch_params[PITH_ARCH_PARAMS_MAX]; /* hp.arch_params, when the descriptor has them */
    pith_gguf *gguf;
    pith_mapped_file *maps;
    int n_maps, cap_maps;
    pith_tensor *tensors;
    int n_tensors, cap_tensors;
    void **owned;
    int n_owned, cap_owned;
    pith_name_index index;
};

/* Points f->hp.arch_params at zeroed storage when the descriptor declares private hyper-parameters
 * (before its metadata hooks run); an error when they do not fit. */
int pith_mf_arch_params(pith_model_file *f, const pith_arch *arch, pith_err *err);

/* Heap memory freed with the model file. */
void *pith_mf_alloc(pith_model_file *f, size_t bytes, pith_err *err);
/* Maps `path` and keeps the mapping for the model file's lifetime. */
int pith_mf_map(pith_model_file *f, const char *path, pith_mapped_file *out, pith_err *err);
/* Appends a tensor view; the name is copied unless it already lives as long as the model file. */
int pith_mf_add_tensor(pith_model_file *f, const pith_tensor *t, int copy_name, pith_err *err);
/* Lookup that also works before the index exists (linear scan), for loaders. */
pith_tensor *pith_mf_find(pith_model_file *f, const char *name);

/* Per-format loaders: fill f->hp and f->tensors. */
int pith_load_gguf_model(pith_model_file *f, pith_err *err);
int pith_load_hf(pith_model_file *f, pith_err *err);
int pith_load_llama2c(pith_model_file *f, pith_err *err);

/* Checks hyper-parameters and tensors of registered architectures against their descriptors, normalises
 * vectors to F32 and runs the descriptor's transforms (validate.c). */
int pith_model_file_validate(pith_model_file *f, pith_err *err);

#endif
