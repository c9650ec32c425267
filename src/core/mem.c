#include "core/mem.h"

#include <stdlib.h>
#include <string.h>

static bool is_kv(const mem_group *g) { return g->kind != PITH_MEM_RECURRENT; }

int mem_init(mem *m, const pith_mem_spec *spec, const pith_mem_layout *lay, bool prefix_cache, pith_err *err) {
    memset(m, 0, sizeof *m);
    m->n_groups = spec->n_groups;
    m->block_size = lay->block_size;
    m->prefix_cache = prefix_cache;
    for (int gi = 0; gi < spec->n_groups; gi++) {
        const pith_mem_group *sg = &spec->groups[gi];
        mem_group *g = &m->g[gi];
        g->kind = sg->kind;
        g->window = sg->kind == PITH_MEM_WINDOW ? sg->window : 0;
        g->unit_bytes = pith_mem_unit_bytes(sg, lay->type[gi], lay->block_size);
        if (sg->kind == PITH_MEM_RECURRENT) {
            m->prefix_cache = false;
            g->n_slots = lay->n_blocks[gi];
            if (!(g->free_slots = malloc((size_t)g->n_slots * sizeof *g->free_slots))) {
                mem_free(m);
                return pith_errf(err, "out of memory for %d state slots", g->n_slots);
            }
            for (int i = 0; i < g->n_slots; i++) g->free_slots[i] = g->n_slots - 1 - i;
            g->n_free_slots = g->n_slots;
        } else if (kv_pool_init(&g->pool, lay->block_size, lay->n_blocks[gi], err)) {
            mem_free(m);
            return pith_err_prefix(err, "memory group %d", gi);
        }
    }
    return 0;
}

void mem_free(mem *m) {
    for (int g = 0; g < m->n_groups; g++) {
        kv_pool_free(&m->g[g].pool);
        free(m->g[g].free_slots);
    }
    memset(m, 0, sizeof *m);
}

int mem_first_needed(const mem *m, int g, int p) {
    if (m->g[g].kind != PITH_MEM_WINDOW) return 0;
    int first = p - m->g[g].window + 1;
    return first > 0 ? first / m->block_size : 0;
}

int mem_available(const mem *m, int g) {
    const mem_group *mg = &m->g[g];
    return is_kv(mg) ? kv_pool_available(&mg->pool) : mg->n_free_slots;
}

/* Chain hashes of s's first n full blocks (they depend only on the tokens, so they are computed once). */
static void hash_blocks(const mem *m, seq *s, int n) {
    const int bs = m->block_size;
    for (; s->n_hashed < n; s->n_hashed++) {
        int i = s->n_hashed;
        uint64_t parent = i ? s->names[i - 1] : s->salt;
        s->names[i] = kv_pool_chain_hash(parent, &s->tokens[(size_t)i * bs], bs);
    }
}

static int lookup(const mem *m, const seq *s, int g, int i) {
    uint64_t parent = i ? s->names[i - 1] : s->salt;
    return kv_pool_lookup(&m->g[g].pool, s->names[i], parent, &s->tokens[(size_t)i * m->block_size]);
}

/* The longest hit, in blocks, that every group can serve. */
static int longest_hit(const mem *m, seq *s) {
    if (!m->prefix_cache) return 0;
    int k = (s->n_tokens - 1) / m->block_size;
    hash_blocks(m, s, k);
    for (int g = 0; g < m->n_groups; g++) {
        if (m->g[g].kind != PITH_MEM_FULL) continue;
        int have = 0;
        while (have < k && lookup(m, s, g, have) >= 0) have++;
        k = have;
    }
    for (; k > 0; k--) {
        bool ok = true;
        for (int g = 0; g < m->n_groups && ok; g++) {
            if (m->g[g].kind != PITH_MEM_WINDOW) continue;
            for (int i = mem_first_needed(m, g, k * m->block_size); i < k && ok; i++) ok = lookup(m, s, g, i) >= 0;
        }
        if (ok) break;
    }
    return k;
}

bool mem_admit(mem *m, seq *s, int *hit) {
    const int bs = m->block_size;
    const int k = longest_hit(m, s), H = k * bs;
    const int end_full = (s->n_tokens + bs - 1) / bs;
    /* Check every group first: admission changes nothing unless all of it fits. */
    for (int g = 0; g < m->n_groups; g++) {
        mem_group *mg = &m->g[g];
        if (!is_kv(mg)) {
            if (mg->n_free_slots < 1) return false;
            continue;
        }
        int lo = mem_first_needed(m, g, H), hi = mg->kind == PITH_MEM_FULL ? end_full : k + 1;
        int unreferenced = 0;
        for (int i = lo; i < k; i++) unreferenced += mg->pool.blocks[lookup(m, s, g, i)].ref == 0;
        /* Taking an unreferenced hit removes it from what allocation could evict. */
        if (hi - k > kv_pool_available(&mg->pool) - unreferenced) return false;
    }
    for (int g = 0; g < m->n_groups; g++) {
        mem_group *mg = &m->g[g];
        if (!is_kv(mg)) {
            s->state_slot[g] = mg->free_slots[--mg->n_free_slots];
            continue;
        }
        int lo = mem_first_needed(m, g, H), hi = mg->kind == PITH_MEM_FULL ? end_full : k + 1;
        for (int i = lo; i < k; i++) {
            int b = lookup(m, s, g, i);
            kv_pool_acquire(&mg->pool, b);
            *seq_block(s, g, i) = b;
        }
        for (int i = k; i < hi; i++) *seq_block(s, g, i) = kv_pool_alloc(&mg->pool); /* cannot fail: checked */
        s->lo[g] = lo;
        s->hi[g] = hi;
    }
    s->n_computed = H;
    s->n_named = k;
    *hit = H;
    return true;
}

int mem_grow(mem *m, seq *s, int upto) {
    const int bs = m->block_size;
    int reached = upto;
    for (int g = 0; g < m->n_groups; g++) {
        mem_group *mg = &m->g[g];
        if (!is_kv(mg)) continue;
        int want = (upto + bs - 1) / bs;
        while (s->hi[g] < want) {
            int b = kv_pool_alloc(&mg->pool);
            if (b < 0) break;
            *seq_block(s, g, s->hi[g]++) = b;
        }
        int covered = s->hi[g] * bs;
        if (covered < reached) reached = covered;
    }
    return reached > s->n_computed ? reached : s->n_computed;
}

void mem_commit(mem *m, seq *s) {
    const int bs = m->block_size;
    int complete = s->n_computed / bs;
    if (m->prefix_cache && s->n_named < complete) {
        hash_blocks(m, s, complete);
        for (int i = s->n_named; i < complete; i++) {
            uint64_t parent = i ? s->names[i - 1] : s->salt;
            for (int g = 0; g < m->n_groups; g++) {
                if (!is_kv(&m->g[g]) || i < s->lo[g] || i >= s->hi[g]) continue;
                kv_pool_name(&m->g[g].pool, *seq_block(s, g, i), s->names[i], parent, &s->tokens[(size_t)i * bs]);
            }
        }
        s->n_named = complete;
    }
    for (int g = 0; g < m->n_groups; g++) {
        if (m->g[g].kind != PITH_MEM_WINDOW) continue;
        int lo = mem_first_needed(m, g, s->n_computed);
        /* Oldest first: the LRU then evicts a window's oldest blocks before its newer ones. */
        for (; s->lo[g] < lo && s->lo[g] < s->hi[g]; s->lo[g]++) {
            kv_pool_release(&m->g[g].pool, *seq_block(s, g, s->lo[g]));
            *seq_block(s, g, s->lo[g]) = -1;
        }
    }
}

void mem_release(mem *m, seq *s) {
    for (int g = 0; g < m->n_groups; g++) {
        mem_group *mg = &m->g[g];
        if (!is_kv(mg)) {
            if (s->state_slot[g] >= 0) mg->free_slots[mg->n_free_slots++] = s->state_slot[g];
            s->state_slot[g] = -1;
            continue;
        }
        for (int i = s->hi[g] - 1; i >= s->lo[g]; i--) {
            kv_pool_release(&mg->pool, *seq_block(s, g, i));
            *seq_block(s, g, i) = -1;
        }
        s->lo[g] = s->hi[g] = 0;
    }
    s->n_computed = 0;
    s->n_named = 0;
}

int mem_check(const mem *m, seq *const *running, int n_running, pith_err *err) {
    const int bs = m->block_size;
    for (int g = 0; g < m->n_groups; g++) {
        const mem_group *mg = &m->g[g];
        if (!is_kv(mg)) {
            unsigned char *taken = calloc((size_t)mg->n_slots, 1);
            if (!taken) return pith_errf(err, "memory check: out of memory");
            int rc = 0;
            for (int i = 0; i < mg->n_free_slots && !rc; i++) {
                int slot = mg->free_slots[i];
                if (slot < 0 || slot >= mg->n_slots || taken[slot]++) rc = pith_errf(err, "group %d: free slot %d bad or repeated", g, slot);
            }
            for (int r = 0; r < n_running && !rc; r++) {
                int slot = running[r]->state_slot[g];
                if (slot < 0 || slot >= mg->n_slots || taken[slot]++)
                    rc = pith_errf(err, "group %d: request %llu holds state slot %d (bad or shared)", g,
                                   (unsigned long long)running[r]->id, slot);
            }
            for (int i = 0; i < mg->n_slots && !rc; i++)
                if (!taken[i]) rc = pith_errf(err, "group %d: state slot %d is lost", g, i);
            free(taken);
            if (rc) return -1;
            continue;
        }
        int *refs = calloc((size_t)mg->pool.n_blocks, sizeof *refs);
        if (!refs) return pith_errf(err, "memory check: out of memory");
        int rc = 0;
        for (int r = 0; r < n_running && !rc; r++) {
            seq *s = running[r];
            int want_lo = mem_first_needed(m, g, s->n_computed);
            if (s->lo[g] < 0 || s->lo[g] > s->hi[g] || s->hi[g] > s->cap_blocks || s->hi[g] * bs < s->n_computed ||
                (mg->kind == PITH_MEM_FULL && s->lo[g] != 0) || (mg->kind == PITH_MEM_WINDOW && s->lo[g] != want_lo)) {
                rc = pith_errf(err, "group %d (%s): request %llu holds blocks [%d, %d) with %d tokens computed "
                               "(expected from %d)", g, pith_mem_kind_name(mg->kind), (unsigned long long)s->id,
                               s->lo[g], s->hi[g], s->n_computed, want_lo);
                break;
            }
            for (int i = 0; i < s->cap_blocks && !rc; i++) {
                int b = *seq_block(s, g, i);
                bool held = i >= s->lo[g] && i < s->hi[g];
                if (held ? b < 0 || b >= mg->pool.n_blocks : b != -1)
                    rc = pith_errf(err, "group %d: request %llu has block %d at index %d (holds [%d, %d))", g,
                                   (unsigned long long)s->id, b, i, s->lo[g], s->hi[g]);
                else if (held)
                    refs[b]++;
            }
        }
        if (!rc && kv_pool_check(&mg->pool, refs, err)) rc = pith_err_prefix(err, "group %d", g);
        free(refs);
        if (rc) return -1;
    }
    return 0;
}
