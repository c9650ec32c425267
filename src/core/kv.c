#include "pith/kv.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

size_t pith_kv_block_bytes(int n_layers, int kv_dim, int block_size, pith_dtype type) {
    return (size_t)2 * n_layers * block_size * kv_dim * pith_dtype_block_bytes(type);
}

int pith_kv_cache_init(pith_kv_cache *kv, int n_layers, int kv_dim, int block_size, int n_blocks,
                       pith_dtype type, pith_err *err) {
    memset(kv, 0, sizeof *kv);
    if (type != PITH_F16 && type != PITH_F32)
        return pith_errf(err, "KV cache type must be F16 or F32, not %s", pith_dtype_name(type));
    if (n_layers <= 0 || kv_dim <= 0 || block_size <= 0 || n_blocks <= 0)
        return pith_errf(err, "KV cache dimensions must be positive (layers %d, kv_dim %d, block size %d, blocks %d)",
                         n_layers, kv_dim, block_size, n_blocks);
    size_t elem = pith_dtype_block_bytes(type);
    size_t per_layer = (size_t)n_blocks * (size_t)block_size * (size_t)kv_dim;
    if (per_layer / (size_t)n_blocks / (size_t)block_size != (size_t)kv_dim ||
        per_layer > SIZE_MAX / elem / (size_t)n_layers)
        return pith_errf(err, "KV cache of %d blocks is too large", n_blocks);
    size_t bytes = per_layer * elem * (size_t)n_layers;
    kv->k = calloc(1, bytes);
    kv->v = calloc(1, bytes);
    if (!kv->k || !kv->v) {
        free(kv->k);
        free(kv->v);
        kv->k = kv->v = NULL;
        return pith_errf(err, "out of memory allocating a %zu MiB KV cache", 2 * bytes >> 20);
    }
    kv->n_layers = n_layers;
    kv->kv_dim = kv_dim;
    kv->block_size = block_size;
    kv->n_blocks = n_blocks;
    kv->type = type;
    return 0;
}

void pith_kv_cache_free(pith_kv_cache *kv) {
    if (!kv) return;
    free(kv->k);
    free(kv->v);
    memset(kv, 0, sizeof *kv);
}
