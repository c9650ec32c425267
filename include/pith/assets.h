/* A model with everything needed to talk to it: its tokenizer and its chat template, loaded together
 * from one model path. The CLI and the server both start here.
 *
 * Where each part comes from:
 *   - tokenizer: tokenizer_path if given, else the GGUF's tokenizer.ggml.* metadata, else the Hugging
 *     Face directory's tokenizer.json; llama2.c checkpoints carry none and need tokenizer_path;
 *   - chat template: chat_template_path if given (an error if it does not compile), else the GGUF's
 *     tokenizer.chat_template, else the directory's chat_template.jinja or tokenizer_config.json
 *     chat_template; ChatML (PITH_CHAT_TEMPLATE_CHATML) when the model has none or when the model's own
 *     template cannot be compiled (reported through the log callback).
 * The tokenizer may not have more tokens than the model's vocabulary. */
#ifndef PITH_ASSETS_H
#define PITH_ASSETS_H

#include "pith/api.h"
#include "pith/chat.h"
#include "pith/model.h"
#include "pith/status.h"
#include "pith/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pith_assets {
    pith_model *model;
    pith_tokenizer *tok;
    pith_chat_template *chat;
    char *bos_text, *eos_text; /* the BOS / EOS tokens' text, for templates; NULL when none */
} pith_assets;

typedef struct pith_assets_options {
    const char *model_path;
    const char *tokenizer_path;      /* NULL: the model's own */
    const char *chat_template_path;  /* NULL: the model's own */
    int n_threads;                   /* for the model; 0: all online CPUs */
    const char *device;              /* where the model runs (pith_model_options.device); NULL: default */
    bool mtp;                        /* load the model's MTP head too (pith_model_options.mtp) */
    /* Notices worth a log line (the model has no usable chat template, ...); may be NULL. */
    void (*log)(void *ctx, const char *msg);
    void *log_ctx;
    /* Model loading progress (see pith_model_options); may be NULL. */
    void (*progress)(void *user, double done);
    void *progress_user;
    const char *gpu_layers;          /* partial offload (pith_model_options.gpu_layers); NULL: none */
    int n_cpu_moe;                   /* experts kept on the CPU (pith_model_options.n_cpu_moe) */
    struct pith_comm *comm;          /* tensor parallelism (pith_model_options.comm, .tp; pith/dist.h) */
    int tp, pp;
    bool no_ep;
} pith_assets_options;

PITH_API int pith_assets_load(const pith_assets_options *o, pith_assets *a, pith_err *err);
PITH_API void pith_assets_free(pith_assets *a);

#ifdef __cplusplus
}
#endif

#endif
