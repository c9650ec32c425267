#include "core/mem.h"

#include <stdlib.h>
#include <string.h>

static bool is_kv(const mem_group *g) { return g->kind != PITH_MEM_RECURRENT; }

int mem_init(mem *m, const pith_mem_spec *spec, const pith_mem_layout *lay, const mem_config *cfg, pith_err *err) {
    memset(m, 0, sizeof *m);
    m->n_groups = spec->n_groups;
    m->block_size = lay->block_size;
    m->prefix_cache = cfg->prefix_cache;
    m->snapshot_interval = cfg->snapshot_interval;
    bool all_snaps = true;
    for (int gi = 0; gi < spec->n_groups; gi++) {
        const pith_mem_group *sg = &spec->groups[gi];
        mem_group *g = &m->g[gi];
        g->kind = sg->kind;
        g->window = sg->kind == PITH_MEM_WINDOW ? sg->window : 0;
        g->unit_bytes = pith_mem_unit_bytes(sg, lay->type[gi], lay->block_size);
        if (sg->kind == PITH_MEM_RECURRENT) {
            m->has_recurrent = true;
            g->n_slots = cfg->n_state_slots < lay->n_blocks[gi] ? cfg->n_state_slots : lay->n_blocks[gi];
            g->n_snaps = lay->n_blocks[gi] - g->n_slots;
            if (!(g->free_slots = malloc((size_t)(g->n_slots > 0 ? g->n_slots : 1) * sizeof *g->free_slots))) {
                mem_free(m);
                return pith_errf(err, "out of memory for %d state slots", g->n_slots);
            }
            for (int i = 0; i < g->n_slots; i++) g->free_slots[i] = g->n_slots - 1 - i;
            g->n_free_slots = g->n_slots;
            if (g->n_snaps > 0 && kv_pool_init(&g->snaps, lay->block_size, g->n_snaps, err)) {
                mem_free(m);
                return pith_err_prefix(err, "memory group %d snapshots", gi);
            }
            all_snaps &= g->n_snaps > 0;
        } else if (kv_pool_init(&g->pool, lay->block_size, lay->n_blocks[gi], err)) {
            mem_free(m);
            return pith_err_prefix(err, "memory group %d", gi);
        }
        /* The copy queue: dst ids are distinct, so a RECURRENT group queues at most its slots; a KV group
         * queues only a fork's partial block, and the engine runs each fork's copies at once. */
        g->cap_q = sg->kind == PITH_MEM_RECURRENT ? lay->n_blocks[gi] : 1;
        g->q_src = malloc((size_t)g->cap_q * sizeof *g->q_src);
        g->q_dst = malloc((size_t)g->cap_q * sizeof *g->q_dst);
        if (!g->q_src || !g->q_dst) {
            mem_free(m);
            return pith_errf(err, "memory group %d: out of memory for its copy queue", gi);
        }
    }
    if (m->has_recurrent) {
        m->prefix_cache = m->prefix_cache && all_snaps;
        m->snapshots = m->prefix_cache;
    }
    return 0;
}

void mem_free(mem *m) {
    for (int g = 0; g < m->n_groups; g++) {
        kv_pool_free(&m->g[g].pool);
        kv_pool_free(&m->g[g].snaps);
        free(m->g[g].free_slots);
        free(m->g[g].q_src);
        free(m->g[g].q_dst);
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

/* Chain hashes of s's first n full blocks (they depend only on the tokens and the media spans, so they
 * are computed once). A block overlapping a media span also hashes the span's content (media.h): its
 * placeholder tokens are the same for every image. */
static void hash_blocks(const mem *m, seq *s, int n) {
    const int bs = m->block_size;
    for (; s->n_hashed < n; s->n_hashed++) {
        int i = s->n_hashed;
        uint64_t parent = i ? s->names[i - 1] : s->salt;
        uint64_t h = kv_pool_chain_hash(parent, &s->tokens[(size_t)i * bs], bs);
        uint64_t media = media_block_key(s->media, i * bs, (i + 1) * bs);
        if (media) h = kv_pool_chain_hash(h ^ media, &s->tokens[(size_t)i * bs], 0);
        s->names[i] = h;
    }
}

static uint64_t parent_of(const seq *s, int i) { return i ? s->names[i - 1] : s->salt; }

static int lookup(const mem *m, const seq *s, int g, int i) {
    return kv_pool_lookup(&m->g[g].pool, s->names[i], parent_of(s, i), &s->tokens[(size_t)i * m->block_size]);
}

/* The snapshot of RECURRENT group g after the first k blocks of s (k >= 1), or -1. */
static int snap_lookup(const mem *m, const seq *s, int g, int k) {
    return kv_pool_lookup(&m->g[g].snaps, s->names[k - 1], parent_of(s, k - 1), &s->tokens[(size_t)(k - 1) * m->block_size]);
}

/* Queues a copy of slot src into slot dst in group g. A later copy into the same dst replaces the
 * earlier one (its content would be overwritten anyway), which keeps the dst ids distinct and the queue
 * within the group's slot count (allocated at init). */
static void queue_copy(mem *m, int g, int src, int dst) {
    mem_group *mg = &m->g[g];
    for (int i = 0; i < mg->n_q; i++) {
        if (mg->q_dst[i] == dst) {
            mg->q_src[i] = src;
            return;
        }
    }
    mg->q_src[mg->n_q] = src;
    mg->q_dst[mg->n_q++] = dst;
}

/* Drops queued copies into dst (its sequence is gone: nothing will read it). */
static void unqueue(mem *m, int g, int dst) {
    mem_group *mg = &m->g[g];
    for (int i = 0; i < mg->n_q; i++) {
        if (mg->q_dst[i] == dst) {
            mg->q_src[i] = mg->q_src[mg->n_q - 1];
            mg->q_dst[i] = mg->q_dst[--mg->n_q];
            return;
        }
    }
}

int mem_take_copies(mem *m, int g, const int32_t **src, const int32_t **dst) {
    mem_group *mg = &m->g[g];
    int n = mg->n_q;
    *src = mg->q_src;
    *dst = mg->q_dst;
    mg->n_q = 0;
    return n;
}

/* The longest hit, in blocks, that every group can serve; sets s->snap_div. */
static int longest_hit(const mem *m, seq *s) {
    s->snap_div = 0;
    if (!m->prefix_cache) return 0;
    int k = (s->n_tokens - 1) / m->block_size;
    hash_blocks(m, s, k);
    bool has_full = false;
    for (int g = 0; g < m->n_groups; g++) {
        if (m->g[g].kind != PITH_MEM_FULL) continue;
        has_full = true;
        int have = 0;
        while (have < k && lookup(m, s, g, have) >= 0) have++;
        k = have;
    }
    const int k_full = k;
    for (; k > 0; k--) {
        bool ok = true;
        for (int g = 0; g < m->n_groups && ok; g++) {
            if (m->g[g].kind == PITH_MEM_RECURRENT) ok = snap_lookup(m, s, g, k) >= 0;
            if (m->g[g].kind != PITH_MEM_WINDOW) continue;
            for (int i = mem_first_needed(m, g, k * m->block_size); i < k && ok; i++) ok = lookup(m, s, g, i) >= 0;
        }
        if (ok) break;
    }
    /* The FULL groups know where this prompt leaves the cached ones; a state there is worth keeping. */
    if (m->snapshots && has_full && k_full > k) s->snap_div = k_full * m->block_size;
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
            if (k > 0) {
                int b = snap_lookup(m, s, g, k);
                kv_pool_acquire(&mg->snaps, b); /* and release: the snapshot becomes the newest in the LRU */
                kv_pool_release(&mg->snaps, b);
                queue_copy(m, g, mg->n_slots + b, s->state_slot[g]);
                m->snaps_restored++;
            }
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

bool mem_fork(mem *m, seq *parent, seq *child) {
    const int bs = m->block_size, c = parent->n_computed, full = c / bs;
    const bool partial = c % bs != 0;
    for (int g = 0; g < m->n_groups; g++) {
        mem_group *mg = &m->g[g];
        if (!is_kv(mg) ? mg->n_free_slots < 1 : partial && kv_pool_available(&mg->pool) < 1) return false;
    }
    for (int g = 0; g < m->n_groups; g++) {
        mem_group *mg = &m->g[g];
        if (!is_kv(mg)) {
            child->state_slot[g] = mg->free_slots[--mg->n_free_slots];
            queue_copy(m, g, parent->state_slot[g], child->state_slot[g]);
            continue;
        }
        int lo = parent->lo[g];
        for (int i = lo; i < full; i++) {
            int b = *seq_block(parent, g, i);
            kv_pool_acquire(&mg->pool, b);
            *seq_block(child, g, i) = b;
        }
        if (partial) {
            int b = kv_pool_alloc(&mg->pool); /* cannot fail: checked */
            queue_copy(m, g, *seq_block(parent, g, full), b);
            *seq_block(child, g, full) = b;
        }
        child->lo[g] = lo;
        child->hi[g] = full + partial;
    }
    memcpy(child->names, parent->names, (size_t)parent->n_hashed * sizeof *child->names);
    child->n_hashed = parent->n_hashed;
    child->n_named = parent->n_named;
    child->n_computed = c;
    child->snap_div = parent->snap_div;
    return true;
}

bool mem_take_checkpoints(mem *m, seq *s, int k) {
    if (k <= 0 || k > 16 || s->n_ckpt) return false;
    for (int g = 0; g < m->n_groups; g++)
        if (m->g[g].kind == PITH_MEM_RECURRENT && m->g[g].n_free_slots < k) return false;
    for (int g = 0; g < m->n_groups; g++) {
        mem_group *mg = &m->g[g];
        if (mg->kind != PITH_MEM_RECURRENT) continue;
        for (int j = 0; j < k; j++) s->ckpt[g][j] = mg->free_slots[--mg->n_free_slots];
    }
    s->n_ckpt = k;
    return true;
}

void mem_trim_checkpoints(mem *m, seq *s, int keep) {
    if (keep < 0) keep = 0;
    for (int g = 0; g < m->n_groups; g++) {
        mem_group *mg = &m->g[g];
        if (mg->kind != PITH_MEM_RECURRENT) continue;
        for (int j = s->n_ckpt - 1; j >= keep; j--) mg->free_slots[mg->n_free_slots++] = s->ckpt[g][j];
    }
    if (keep < s->n_ckpt) s->n_ckpt = keep;
}

void mem_rollback(mem *m, seq *s, int accepted) {
    if (accepted < s->n_ckpt) {
        for (int g = 0; g < m->n_groups; g++) {
            mem_group *mg = &m->g[g];
            if (mg->kind != PITH_MEM_RECURRENT) continue;
            int keep = s->ckpt[g][accepted];
            s->ckpt[g][accepted] = s->state_slot[g];
            s->state_slot[g] = keep;
        }
    }
    mem_trim_checkpoints(m, s, 0);
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

/* The last block boundary before the prompt's last token: the same prompt again (n > 1, a retry) can
 * resume there, and so can a chat's next turn when its reply left no decode snapshot. */
static int prompt_point(const mem *m, const seq *s) { return (s->n_prompt - 1) / m->block_size * m->block_size; }

static bool is_cached_point(const mem *m, const seq *s, int x) {
    return x == prompt_point(m, s) || x == s->snap_div || (m->snapshot_interval && x % m->snapshot_interval == 0);
}

int mem_chunk_end(const mem *m, const seq *s) {
    int c = s->n_computed, end = s->n_tokens;
    if (!m->snapshots) return end;
    int p = prompt_point(m, s);
    if (p > c && p < end) end = p;
    if (s->snap_div > c && s->snap_div < end) end = s->snap_div;
    if (m->snapshot_interval) {
        int next = (c / m->snapshot_interval + 1) * m->snapshot_interval;
        if (next < end) end = next;
    }
    return end;
}

/* After a step: the snapshots the policy (mem.h) wants at n_computed, in every RECURRENT group. */
static void take_snapshots(mem *m, seq *s) {
    const int bs = m->block_size, x = s->n_computed, k = x / bs;
    if (x == 0 || x % bs) return;
    bool cached = is_cached_point(m, s, x);
    bool rolling = !cached && x > s->n_prompt && x == s->n_tokens; /* decoding */
    if (!cached && !rolling) return;
    hash_blocks(m, s, k);
    const int32_t *toks = &s->tokens[(size_t)(k - 1) * bs];
    for (int g = 0; g < m->n_groups; g++) {
        mem_group *mg = &m->g[g];
        if (mg->kind != PITH_MEM_RECURRENT) continue;
        kv_pool *p = &mg->snaps;
        if (snap_lookup(m, s, g, k) >= 0) continue; /* cached once */
        int b;
        if (rolling && s->snap_held[g] >= 0) {
            b = s->snap_held[g];
            kv_pool_unname(p, b);
        } else if ((b = kv_pool_alloc(p)) < 0) {
            continue; /* every snapshot slot is held by a decoding sequence */
        }
        queue_copy(m, g, s->state_slot[g], mg->n_slots + b);
        kv_pool_name(p, b, s->names[k - 1], parent_of(s, k - 1), k == 1, toks);
        m->snaps_taken++;
        if (rolling) s->snap_held[g] = b;
        else kv_pool_release(p, b);
    }
}

void mem_commit(mem *m, seq *s) {
    const int bs = m->block_size;
    int complete = s->n_computed / bs;
    if (m->prefix_cache && s->n_named < complete) {
        hash_blocks(m, s, complete);
        for (int i = s->n_named; i < complete; i++) {
            uint64_t parent = parent_of(s, i);
            for (int g = 0; g < m->n_groups; g++) {
                if (!is_kv(&m->g[g]) || i < s->lo[g] || i >= s->hi[g]) continue;
                kv_pool_name(&m->g[g].pool, *seq_block(s, g, i), s->names[i], parent, i == 0, &s->tokens[(size_t)i * bs]);
            }
        }
        s->n_named = complete;
    }
    if (m->snapshots) take_snapshots(m, s);
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
            if (s->state_slot[g] >= 0) {
                unqueue(m, g, s->state_slot[g]); /* a restore for a sequence preempted before it ran */
                mg->free_slots[mg->n_free_slots++] = s->state_slot[g];
            }
            if (s->snap_held[g] >= 0) kv_pool_release(&mg->snaps, s->snap_held[g]);
            for (int j = 0; j < s->n_ckpt; j++) mg->free_slots[mg->n_free_slots++] = s->ckpt[g][j];
            s->state_slot[g] = s->snap_held[g] = -1;
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
    s->n_ckpt = 0;
}

/* Group g's snapshot pool: its own invariants, and each held snapshot is held by one running sequence. */
static int check_snaps(const mem *m, int g, seq *const *running, int n_running, pith_err *err) {
    const mem_group *mg = &m->g[g];
    int *refs = calloc((size_t)mg->n_snaps, sizeof *refs);
    if (!refs) return pith_errf(err, "memory check: out of memory");
    int rc = 0;
    for (int r = 0; r < n_running && !rc; r++) {
        int b = running[r]->snap_held[g];
        if (b >= mg->n_snaps || b < -1)
            rc = pith_errf(err, "group %d: request %llu holds snapshot %d of %d", g, (unsigned long long)running[r]->id, b, mg->n_snaps);
        else if (b >= 0)
            refs[b]++;
    }
    if (!rc && kv_pool_check(&mg->snaps, refs, err)) rc = pith_err_prefix(err, "group %d snapshots", g);
    for (int i = 0; i < mg->n_q && !rc; i++) {
        int32_t src = mg->q_src[i], dst = mg->q_dst[i], n = mg->n_slots + mg->n_snaps;
        if (src < 0 || src >= n || dst < 0 || dst >= n || src == dst)
            rc = pith_errf(err, "group %d: queued copy %d -> %d", g, src, dst);
    }
    free(refs);
    return rc;
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
                else if (running[r]->n_ckpt)
                    rc = pith_errf(err, "group %d: request %llu holds %d checkpoints between steps", g,
                                   (unsigned long long)running[r]->id, running[r]->n_ckpt);
            }
            for (int i = 0; i < mg->n_slots && !rc; i++)
                if (!taken[i]) rc = pith_errf(err, "group %d: state slot %d is lost", g, i);
            free(taken);
            if (!rc && mg->n_snaps > 0) rc = check_snaps(m, g, running, n_running, err);
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
