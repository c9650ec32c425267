/* A model: something that turns a flat batch (batch.h) into logits, keeping its per-sequence memory in
 * the groups it declared (memory.h). This is the plug-in interface: an architecture provides a builder
 * (src/model/, listed in the registry) that fills a pith_model with its hyper-parameters, its memory
 * spec and its ops. The engine core calls only these ops and never touches memory bytes itself.
 *
 * Life cycle, driven by one engine at a time:
 *   load -> prepare(limits) -> mem_alloc(layout) -> forward / copy_blocks ... -> mem_free -> ...
 * prepare may be called again with other limits after mem_free (a new engine on the same model).
 * mem_alloc fails while memory is allocated: one engine owns a model's memory at a time.
 *
 * pith_model_load picks the builder from the file's architecture. A model owns its pith_model_file
 * (mapped weights) and its worker threads. No op is reentrant: one caller at a time per model. */
#ifndef PITH_MODEL_H
#define PITH_MODEL_H

#include <stdbool.h>

#include "pith/api.h"
#include "pith/batch.h"
#include "pith/memory.h"
#include "pith/modelfile.h"
#include "pith/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pith_model pith_model;

/* The engine's limits, fixed for the engine's lifetime: no batch exceeds them. */
typedef struct pith_model_limits {
    int max_batch_tokens;   /* tokens in one batch */
    int max_num_seqs;       /* sequences in one batch */
    int max_seq_len;        /* positions of one sequence: 0..max_seq_len-1 */
    int max_logits;         /* logits rows one batch may ask for */
} pith_model_limits;

typedef struct pith_model_ops {
    /* Optional: size scratch buffers (or capture device graphs) for these limits. */
    int (*prepare)(pith_model *m, const pith_model_limits *lim, pith_err *err);
    /* Allocate the memory of every group in the layout (zeroed is not required). */
    int (*mem_alloc)(pith_model *m, const pith_mem_layout *layout, pith_err *err);
    /* Release it; safe when nothing is allocated. */
    void (*mem_free)(pith_model *m);
    /* KV group `group`: copy block src[i] to block dst[i] in every layer of the group (forking a
     * sequence). RECURRENT group: copy state slot src[i] to slot dst[i] (every layer's state: taking or
     * restoring a snapshot, forking). dst ids are distinct and none is also a src (a src may repeat:
     * one snapshot restored into several sequences). */
    int (*copy_blocks)(pith_model *m, int group, const int32_t *src, const int32_t *dst, int n, pith_err *err);
    /* Fill logits ([pith_batch_n_logits(b)] x n_vocab, row-major) for the batch, and b->hidden when
     * b->want_hidden is set (batch.h; only called so when has_hidden is set). */
    int (*forward)(pith_model *m, const pith_batch *b, float *logits, pith_err *err);
    /* Optional (has_mtp): greedy drafts from the model's multi-token-prediction head, for speculative
     * decoding. The batch holds one token per sequence (seq[t] == t): its last sampled token, at
     * position p == the positions it has computed (p >= 1), with the block tables and state slots of
     * every group as forward would see them (no slots: nothing is written to the groups' memory, the
     * head keeps its draft positions' K/V to itself). Writes n_steps draft tokens per sequence to
     * draft[s * n_steps + i] (1 <= n_steps <= 16), each the argmax of the head's logits after the one
     * before; logits, when not NULL, gets those rows ([n_seqs * n_steps] x n_vocab, tests). */
    int (*mtp_draft)(pith_model *m, const pith_batch *b, int n_steps, int32_t *draft, float *logits, pith_err *err);
    void (*destroy)(pith_model *m); /* frees memory still allocated too */
} pith_model_ops;

struct pith_model {
    const pith_model_ops *ops;
    pith_hparams hp;        /* copied from the file; n_vocab etc. */
    pith_mem_spec mem;      /* declared by the builder; groups' layer lists point into impl */
    pith_model_file *file;  /* owned; NULL for models not backed by a file (tests) */
    void *impl;             /* architecture-specific state */
    bool has_hidden;        /* forward honours want_hidden (batch.h): the model can serve embeddings */
    bool has_embeds;        /* forward honours embed_rows (batch.h): rows from a vision encoder in place of
                               embeddings (image inputs) */
    bool bidirectional_spans; /* forward honours attend_last (batch.h): Gemma 3's image tokens see their
                               whole image */
    int embed_parts;        /* 0 or 1: an embeds row is one input row; k > 1: k parts of hp.dim, the input
                               and one for each of the first k - 1 layers' outputs (batch.h; Qwen3-VL's
                               DeepStack), so an encoder makes rows of k * hp.dim */
    bool has_mrope;         /* forward honours rope_pos (batch.h): M-RoPE, image tokens placed on their
                               image's grid (Qwen3.5); the engine then sets rope_pos for every token of a
                               sequence with images, from its spans' grids (engine.h: pith_media) */
    bool state_checkpoints; /* forward honours RECURRENT checkpoints (batch.h): speculative decoding
                               can roll its state back */
    bool has_mtp;           /* loaded with its MTP head (pith_model_options.mtp): mtp_draft works. Its
                               memory then covers the head too: its layers, numbered from hp.n_layers
                               on, may appear in the memory spec's groups, and every forward keeps
                               what the head needs of each position (the head's K/V, the last hidden
                               state in a RECURRENT group's slot) */
    float mtp_cost;         /* has_mtp: the weight bytes a draft step reads over those of a decode step
                               (the speculation policy's break-even acceptance: core/spec.h) */
    char experts[160];      /* mixture of experts: how the experts are held, one line ("repacked (auto:
                               ...)", "mapped from the file (...)"; PITH_MOE_EXPERTS, README); "" otherwise */
    char placement[160];    /* partial offload (pith_model_options.gpu_layers): which layers run where,
                               one line; "" otherwise */
    int tp, pp;             /* the parallel layout it was loaded in (pith_model_options.tp, .pp); 1, 1
                               in one process */
};

typedef struct pith_model_options {
    int n_threads;          /* 0: one per online CPU */
    /* Called on the loading thread as the build reads and repacks the weights, with the share of that
     * work done so far (non-decreasing, ending at 1); NULL: none. For progress bars: nothing in the
     * library prints. */
    void (*progress)(void *user, double done);
    void *progress_user;
    /* Load the file's multi-token-prediction head too (hp.n_mtp_layers; speculative decoding with
     * PITH_SPEC_MTP): an error when the file has none or the architecture cannot run it. */
    bool mtp;
    /* Where the model runs: "cpu", "vulkan" (the first usable Vulkan device) or "vulkan:N" (`pith
     * devices` lists them); NULL or "": the environment's PITH_DEVICE, else the CPU. */
    const char *device;
    /* Partial offload (llama.cpp's -ngl, --n-cpu-moe) with a device: gpu_layers "N" puts the last N
     * layers on the device and the rest on the CPU ("0": the CPU alone), "auto" as many as its memory
     * holds (NULL or "": auto too; every layer where the loader has no file to judge by). n_cpu_moe > 0 keeps the experts of layers
     * [0, n_cpu_moe) on the CPU, < 0 every layer's; 0: none. pith_model.placement says what went where. */
    const char *gpu_layers;
    int n_cpu_moe;
    /* Tensor parallelism over the ranks of comm (pith/dist.h; NULL: none), tp of them (the communicator's
     * size: a check). On rank 0 the model runs every op on all ranks; elsewhere it is the rank's shard,
     * for pith_dist_worker. */
    struct pith_comm *comm;
    int tp;
    /* Pipeline parallelism: pp stages of consecutive layers (pith/dist.h), each of tp ranks; the
     * communicator holds tp x pp ranks, stage s being ranks [s tp, (s + 1) tp). 0 or 1: one stage. */
    int pp;
    /* With tp > 1, a mixture of experts' layers split by expert (expert parallelism: each rank 1/tp of the
     * experts, whole; the default), or, no_ep, by column (tensor-parallel experts: each rank 1/tp of every
     * expert's hidden width: even work per rank whatever the routing, on widths that split on blocks). */
    bool no_ep;
} pith_model_options;

PITH_API int pith_model_load(const char *path, const pith_model_options *opt, pith_model **out,
                             pith_err *err);
PITH_API void pith_model_free(pith_model *m);

/* The ops, checked: a NULL op where one is needed is an error, not a crash. */
PITH_API int pith_model_prepare(pith_model *m, const pith_model_limits *lim, pith_err *err);
PITH_API int pith_model_mem_alloc(pith_model *m, const pith_mem_layout *layout, pith_err *err);
PITH_API void pith_model_mem_free(pith_model *m);
PITH_API int pith_model_copy_blocks(pith_model *m, int group, const int32_t *src, const int32_t *dst, int n,
                                    pith_err *err);
/* Refuses a batch with want_hidden for a model without has_hidden, or without a hidden buffer; with
 * embed_rows for a model without has_embeds (or without embeds), with attend_last for one without
 * bidirectional_spans. */
PITH_API int pith_model_forward(pith_model *m, const pith_batch *b, float *logits, pith_err *err);
/* Refuses a model without has_mtp, or n_steps out of 1..16. */
PITH_API int pith_model_mtp_draft(pith_model *m, const pith_batch *b, int n_steps, int32_t *draft,
                                  float *logits, pith_err *err);
/* Layers a memory spec may name: hp.n_layers, plus hp.n_mtp_layers when has_mtp. */
PITH_API int pith_model_mem_layers(const pith_model *m);

#ifdef __cplusplus
}
#endif

#endif
