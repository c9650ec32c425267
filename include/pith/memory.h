/* The memory a model declares: what must survive between steps for each sequence, and in what shape.
 *
 * A model describes its per-sequence memory as a list of groups (pith_mem_spec), filled when it is
 * loaded. Each group covers some of its layers and is of one kind:
 *
 *   FULL       K and V of every position from 0 (ordinary attention layers);
 *   WINDOW     K and V of the last `window` positions only: a token at position p attends to
 *              [p - window + 1, p] (sliding-window layers: Mistral, Gemma 3's local layers, GPT-OSS);
 *   RECURRENT  a fixed-size state per sequence (state_bytes), no per-token memory (linear attention,
 *              Mamba, short convolutions).
 *
 * Layers that appear in no group keep nothing between steps. The engine core sizes one pool per group
 * from this spec and never looks at a layer: it admits, schedules, preempts and prefix-caches per group,
 * and tells the model where each token's memory is through the batch (batch.h). The bytes themselves
 * belong to the model (model.h: mem_alloc), so a device backend can keep them in device memory.
 *
 *      layers   0    1    2    3    4    5    6    7    8    9   10   11      (Gemma 3: 5 local : 1 global)
 *      group    W    W    W    W    W    F    W    W    W    W    W    F
 *
 *      group W (window 1024, 10 layers): sequence s holds blocks [lo, hi) of its block table; blocks
 *               below lo fell out of every token's window and went back to the pool (still named in
 *               the prefix cache, so a later hit can reuse them);
 *      group F (full, 2 layers):         sequence s holds blocks [0, hi).
 *
 * A KV group's pool is cut into blocks of block_size token slots (the same block_size for every group);
 * one block of a group holds K and V for block_size tokens in each of the group's layers. Block ids are
 * per group: block 7 of group W and block 7 of group F are unrelated. */
#ifndef PITH_MEMORY_H
#define PITH_MEMORY_H

#include <stddef.h>

#include "pith/api.h"
#include "pith/status.h"
#include "pith/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PITH_MAX_MEM_GROUPS 8

typedef enum pith_mem_kind {
    PITH_MEM_FULL,
    PITH_MEM_WINDOW,
    PITH_MEM_RECURRENT,
} pith_mem_kind;

typedef struct pith_mem_group {
    pith_mem_kind kind;
    int window;            /* WINDOW: positions a token sees, itself included (>= 1) */
    int n_layers;          /* layers whose memory this group holds (>= 1) */
    const int *layers;     /* [n_layers] the model's layer indices, increasing; owned by the model */
    pith_dtype type;       /* FULL, WINDOW: K/V element type the model asks for: PITH_F16, PITH_F32,
                              PITH_BF16 or PITH_Q8_0 (kv.h; the engine may override it: kv_type) */
    int k_dim, v_dim;      /* FULL, WINDOW: K and V elements per token per layer (may differ) */
    size_t state_bytes;    /* RECURRENT: bytes of state per sequence, the group's layers together */
} pith_mem_group;

typedef struct pith_mem_spec {
    int n_groups;          /* 0..PITH_MAX_MEM_GROUPS */
    pith_mem_group groups[PITH_MAX_MEM_GROUPS];
} pith_mem_spec;

/* What the engine decided to allocate, handed to the model's mem_alloc. */
typedef struct pith_mem_layout {
    int block_size;                      /* token slots per block, every KV group */
    int n_groups;                        /* == the spec's */
    int n_blocks[PITH_MAX_MEM_GROUPS];   /* FULL, WINDOW: blocks in the group's pool; RECURRENT: state
                                            slots (one per sequence that can run at once) */
    pith_dtype type[PITH_MAX_MEM_GROUPS];/* KV element type as resolved (the group's, or the engine's
                                            kv_type on request) */
} pith_mem_layout;

/* Bytes of one block of a KV group (K and V, all its layers), or of one state slot of a RECURRENT
 * group; 0 for a bad group. type overrides g->type for KV groups: F32, F16, BF16, or Q8_0 (34 bytes
 * per 32 elements; 0 unless both widths are multiples of 32). */
PITH_API size_t pith_mem_unit_bytes(const pith_mem_group *g, pith_dtype type, int block_size);

/* Checks a spec against a model of n_layers layers: kinds, windows, widths, types, layers in range and
 * increasing, no layer in two groups. 0 or -1 with err. */
PITH_API int pith_mem_spec_check(const pith_mem_spec *s, int n_layers, pith_err *err);

/* "full", "window" or "recurrent". */
PITH_API const char *pith_mem_kind_name(pith_mem_kind k);

#ifdef __cplusplus
}
#endif

#endif
