/* Memory spec helpers (memory.h): sizes and the checks every spec passes before the engine uses it. */
#include "pith/memory.h"

#include <stdint.h>

#include "pith/kv.h"

const char *pith_mem_kind_name(pith_mem_kind k) {
    switch (k) {
    case PITH_MEM_FULL: return "full";
    case PITH_MEM_WINDOW: return "window";
    case PITH_MEM_RECURRENT: return "recurrent";
    }
    return "?";
}

static bool kv_type_ok(pith_dtype t) { return pith_kv_bytes(t, 32) != 0; }

size_t pith_mem_unit_bytes(const pith_mem_group *g, pith_dtype type, int block_size) {
    if (g->kind == PITH_MEM_RECURRENT) return g->state_bytes; /* a group of no layer has its state too */
    if (g->n_layers <= 0) return 0;
    if (block_size <= 0 || g->k_dim < 0 || g->v_dim < 0 || !kv_type_ok(type)) return 0;
    if (type == PITH_Q8_0 && (g->k_dim % 32 || g->v_dim % 32)) return 0;
    size_t row = pith_kv_bytes(type, (size_t)g->k_dim) + pith_kv_bytes(type, (size_t)g->v_dim);
    return (size_t)g->n_layers * (size_t)block_size * row;
}

int pith_mem_spec_check(const pith_mem_spec *s, int n_layers, pith_err *err) {
    if (s->n_groups < 0 || s->n_groups > PITH_MAX_MEM_GROUPS)
        return pith_errf(err, "memory spec: %d groups (0..%d allowed)", s->n_groups, PITH_MAX_MEM_GROUPS);
    /* owner[l]: group + 1 holding layer l; layers are bounded by the hyper-parameter checks (<= 4096) */
    unsigned char owner[4096] = {0};
    if (n_layers < 0 || n_layers > 4096) return pith_errf(err, "memory spec: %d layers", n_layers);
    for (int gi = 0; gi < s->n_groups; gi++) {
        const pith_mem_group *g = &s->groups[gi];
        if (g->kind != PITH_MEM_FULL && g->kind != PITH_MEM_WINDOW && g->kind != PITH_MEM_RECURRENT)
            return pith_errf(err, "memory group %d: unknown kind %d", gi, (int)g->kind);
        /* a RECURRENT group may name no layer: a state of the sequence alone (glm4moe_mtp.c's last
         * hidden state) that snapshots, checkpoints and forks carry like a layer's */
        int least = g->kind == PITH_MEM_RECURRENT ? 0 : 1;
        if (g->n_layers < least || g->n_layers > n_layers || (g->n_layers > 0 && !g->layers))
            return pith_errf(err, "memory group %d: %d layers (the model has %d)", gi, g->n_layers, n_layers);
        for (int i = 0; i < g->n_layers; i++) {
            int l = g->layers[i];
            if (l < 0 || l >= n_layers || (i > 0 && l <= g->layers[i - 1]))
                return pith_errf(err, "memory group %d: layer list is not increasing within 0..%d", gi, n_layers - 1);
            if (owner[l]) return pith_errf(err, "memory group %d: layer %d is already in group %d", gi, l, owner[l] - 1);
            owner[l] = (unsigned char)(gi + 1);
        }
        if (g->kind == PITH_MEM_RECURRENT) {
            if (g->state_bytes == 0 || g->state_bytes > ((size_t)1 << 34))
                return pith_errf(err, "memory group %d: recurrent state of %zu bytes", gi, g->state_bytes);
            continue;
        }
        if (g->kind == PITH_MEM_WINDOW && g->window < 1)
            return pith_errf(err, "memory group %d: window of %d tokens", gi, g->window);
        if (!kv_type_ok(g->type))
            return pith_errf(err, "memory group %d: KV type must be F32, F16, BF16 or Q8_0, not %s", gi,
                             pith_dtype_name(g->type));
        if (g->k_dim < 0 || g->v_dim < 0 || g->k_dim + g->v_dim < 1 || g->k_dim > (1 << 20) || g->v_dim > (1 << 20))
            return pith_errf(err, "memory group %d: K width %d, V width %d", gi, g->k_dim, g->v_dim);
    }
    return 0;
}
