/* Host memory for memory groups (kv.h). */
#include "pith/kv.h"

#include <stdlib.h>
#include <string.h>

bool pith_kv_host_allocated(const pith_kv_host *h) { return h->n_groups > 0; }

void pith_kv_host_free(pith_kv_host *h) {
    for (int g = 0; g < h->n_groups; g++) {
        free(h->groups[g].k);
        free(h->groups[g].v);
        free(h->groups[g].state);
    }
    memset(h, 0, sizeof *h);
}

static void *alloc_zeroed(size_t a, size_t b, size_t c, size_t d, bool *overflow) {
    size_t n = a;
    size_t f[3] = {b, c, d};
    for (int i = 0; i < 3; i++) {
        if (f[i] && n > SIZE_MAX / f[i]) {
            *overflow = true;
            return NULL;
        }
        n *= f[i];
    }
    return calloc(1, n ? n : 1);
}

int pith_kv_host_alloc(pith_kv_host *h, const pith_mem_spec *spec, const pith_mem_layout *lay, pith_err *err) {
    memset(h, 0, sizeof *h);
    if (lay->n_groups != spec->n_groups || lay->block_size < 1)
        return pith_errf(err, "memory layout does not match the spec (%d groups for %d, block size %d)",
                         lay->n_groups, spec->n_groups, lay->block_size);
    for (int g = 0; g < spec->n_groups; g++) {
        const pith_mem_group *mg = &spec->groups[g];
        pith_kv_cache *c = &h->groups[g];
        h->n_groups = g + 1; /* so a failure frees what was taken */
        c->kind = mg->kind;
        c->n_layers = mg->n_layers;
        bool overflow = false;
        if (lay->n_blocks[g] < 1) return pith_kv_host_free(h), pith_errf(err, "memory group %d: no blocks", g);
        if (mg->kind == PITH_MEM_RECURRENT) {
            c->n_slots = lay->n_blocks[g];
            c->state_bytes = mg->state_bytes;
            c->state = alloc_zeroed((size_t)c->n_slots, c->state_bytes, 1, 1, &overflow);
            if (!c->state) goto oom;
            continue;
        }
        c->k_dim = mg->k_dim;
        c->v_dim = mg->v_dim;
        c->block_size = lay->block_size;
        c->n_blocks = lay->n_blocks[g];
        c->type = lay->type[g];
        if (!pith_kv_bytes(c->type, 32)) {
            pith_kv_host_free(h);
            return pith_errf(err, "KV cache type must be F32, F16, BF16 or Q8_0, not %s", pith_dtype_name(lay->type[g]));
        }
        if (c->type == PITH_Q8_0 && (c->k_dim % 32 || c->v_dim % 32)) {
            pith_kv_host_free(h);
            return pith_errf(err, "memory group %d: a Q8_0 KV cache needs K and V widths that are multiples of 32, "
                             "not %d and %d", g, c->k_dim, c->v_dim);
        }
        size_t slots = (size_t)c->n_blocks * (size_t)c->block_size;
        /* a width of 0 (MLA's V, read from K) takes no bytes: alloc_zeroed still returns a pointer */
        size_t krow = pith_kv_bytes(c->type, (size_t)c->k_dim);
        size_t vrow = pith_kv_bytes(c->type, (size_t)c->v_dim);
        c->k = alloc_zeroed(slots, (size_t)c->n_layers, krow, 1, &overflow);
        c->v = alloc_zeroed(slots, (size_t)c->n_layers, vrow, 1, &overflow);
        if (!c->k || !c->v) goto oom;
        continue;
    oom:
        pith_kv_host_free(h);
        return pith_errf(err, "memory group %d: %s", g, overflow ? "too large" : "out of memory");
    }
    return 0;
}

int pith_kv_host_copy_blocks(pith_kv_host *h, int g, const int32_t *src, const int32_t *dst, int n, pith_err *err) {
    if (g < 0 || g >= h->n_groups) return pith_errf(err, "copy_blocks: no memory group %d", g);
    pith_kv_cache *c = &h->groups[g];
    if (c->kind == PITH_MEM_RECURRENT) {
        for (int i = 0; i < n; i++)
            if (src[i] < 0 || src[i] >= c->n_slots || dst[i] < 0 || dst[i] >= c->n_slots)
                return pith_errf(err, "copy_blocks: state slot %d -> %d outside the %d slots", src[i], dst[i], c->n_slots);
        for (int i = 0; i < n; i++)
            if (src[i] != dst[i]) memcpy(c->state + (size_t)dst[i] * c->state_bytes, c->state + (size_t)src[i] * c->state_bytes, c->state_bytes);
        return 0;
    }
    for (int i = 0; i < n; i++) {
        if (src[i] < 0 || src[i] >= c->n_blocks || dst[i] < 0 || dst[i] >= c->n_blocks)
            return pith_errf(err, "copy_blocks: block %d -> %d outside the pool of %d", src[i], dst[i], c->n_blocks);
    }
    for (int i = 0; i < n; i++) {
        for (int l = 0; l < c->n_layers; l++) {
            size_t kb = pith_kv_bytes(c->type, (size_t)c->block_size * c->k_dim);
            size_t vb = pith_kv_bytes(c->type, (size_t)c->block_size * c->v_dim);
            memcpy((uint8_t *)c->k + pith_kv_bytes(c->type, pith_kv_k_offset(c, l, dst[i])),
                   (uint8_t *)c->k + pith_kv_bytes(c->type, pith_kv_k_offset(c, l, src[i])), kb);
            memcpy((uint8_t *)c->v + pith_kv_bytes(c->type, pith_kv_v_offset(c, l, dst[i])),
                   (uint8_t *)c->v + pith_kv_bytes(c->type, pith_kv_v_offset(c, l, src[i])), vb);
        }
    }
    return 0;
}
