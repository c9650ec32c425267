/* Host memory for a model's declared memory groups (memory.h): what a CPU model's mem_alloc allocates.
 *
 * One pith_kv_cache per group. A KV group (FULL, WINDOW) owns K and V for each of its layers, cut into
 * n_blocks blocks of block_size token slots; slot s is block s / block_size, offset s % block_size.
 * Layout: block b of the group's layer i (i indexes the group's layer list, not the model's layers) owns
 * block_size * k_dim consecutive K elements (of `type`) at element offset
 *   ((size_t)i * n_blocks + b) * block_size * k_dim          (pith_kv_k_offset)
 * of k, and block_size * v_dim V elements at the same place in v with v_dim; an element offset is
 * pith_kv_bytes(type, offset) bytes. Types: F32, F16, BF16, or Q8_0 (GGML's blocks of 32: an F16 scale
 * and 32 int8, 34 bytes; the widths, and every run of elements a model stores or reads, whole blocks). How a block orders its slots and
 * heads inside is the model's choice (the Llama forward pass: head-major, [kv_head][slot in
 * block][head_dim], so attention reads one head's rows of a block as one contiguous run). A RECURRENT
 * group owns n_slots states of state_bytes each, state slot j at state + j * state_bytes.
 *
 * This module only stores: which sequence owns which block or slot is the engine's business. */
#ifndef PITH_KV_H
#define PITH_KV_H

#include <stddef.h>
#include <stdint.h>

#include "pith/api.h"
#include "pith/memory.h"
#include "pith/status.h"
#include "pith/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pith_kv_cache {
    pith_mem_kind kind;
    int n_layers;
    int k_dim, v_dim;
    int block_size;
    int n_blocks;      /* KV groups */
    pith_dtype type;   /* PITH_F32, PITH_F16, PITH_BF16 or PITH_Q8_0 */
    void *k;
    void *v;
    int n_slots;       /* RECURRENT */
    size_t state_bytes;
    uint8_t *state;
} pith_kv_cache;

typedef struct pith_kv_host {
    int n_groups;
    pith_kv_cache groups[PITH_MAX_MEM_GROUPS];
} pith_kv_host;

/* Allocates every group of spec as the layout says (contents zeroed). On failure nothing is left
 * allocated. */
PITH_API int pith_kv_host_alloc(pith_kv_host *h, const pith_mem_spec *spec, const pith_mem_layout *layout,
                                pith_err *err);
PITH_API void pith_kv_host_free(pith_kv_host *h);
PITH_API bool pith_kv_host_allocated(const pith_kv_host *h);
/* Copies block src[i] to dst[i] in every layer of KV group g, or state slot src[i] to dst[i] of RECURRENT
 * group g (model.h: copy_blocks); ids are checked against the pool. */
PITH_API int pith_kv_host_copy_blocks(pith_kv_host *h, int g, const int32_t *src, const int32_t *dst, int n,
                                      pith_err *err);

/* Bytes of n elements of a KV type (n a multiple of 32 for Q8_0); 0 for a type a cache cannot hold. */
static inline size_t pith_kv_bytes(pith_dtype type, size_t n) {
    switch (type) {
    case PITH_F32: return 4 * n;
    case PITH_F16:
    case PITH_BF16: return 2 * n;
    case PITH_Q8_0: return n / 32 * 34;
    default: return 0;
    }
}

/* Element offsets of layer i (within the group), block b, for K and V. */
static inline size_t pith_kv_k_offset(const pith_kv_cache *c, int i, int b) {
    return ((size_t)i * (size_t)c->n_blocks + (size_t)b) * (size_t)c->block_size * (size_t)c->k_dim;
}
static inline size_t pith_kv_v_offset(const pith_kv_cache *c, int i, int b) {
    return ((size_t)i * (size_t)c->n_blocks + (size_t)b) * (size_t)c->block_size * (size_t)c->v_dim;
}

#ifdef __cplusplus
}
#endif

#endif
