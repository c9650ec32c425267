/* Paged KV cache storage.
 *
 * Owns the K and V memory for every layer, cut into fixed-size blocks of block_size token slots. Slot s
 * is block s / block_size, offset s % block_size. This module only stores: which sequence owns which
 * block is the engine's business (the KV pool / prefix cache); the model reads and writes slots named
 * by the batch.
 *
 * Layout: block b of layer l owns block_size * kv_dim consecutive elements (of `type`) at
 *   k + ((size_t)l * n_blocks + b) * block_size * kv_dim, and the same for V,
 * where kv_dim = n_kv_heads * head_dim. How a block orders its slots and heads is the model's choice
 * (the Llama forward pass: head-major, [kv_head][slot in block][head_dim], so attention reads one
 * head's rows of a block as one contiguous run). */
#ifndef PITH_KV_H
#define PITH_KV_H

#include <stddef.h>

#include "pith/status.h"
#include "pith/tensor.h"

typedef struct pith_kv_cache {
    int n_layers;
    int kv_dim;
    int block_size;
    int n_blocks;
    pith_dtype type; /* PITH_F16 (default) or PITH_F32 */
    void *k;
    void *v;
} pith_kv_cache;

/* Bytes needed for one block across all layers, K and V together. */
size_t pith_kv_block_bytes(int n_layers, int kv_dim, int block_size, pith_dtype type);

int pith_kv_cache_init(pith_kv_cache *kv, int n_layers, int kv_dim, int block_size, int n_blocks,
                       pith_dtype type, pith_err *err);
void pith_kv_cache_free(pith_kv_cache *kv);

#endif
