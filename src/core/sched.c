#include "core/sched.h"

#include <stdlib.h>
#include <string.h>

int sched_init(sched *sc, kv_pool *pool, int max_num_seqs, int max_batch_tokens, bool prefix_cache, pith_err *err) {
    memset(sc, 0, sizeof *sc);
    sc->pool = pool;
    sc->prefix_cache = prefix_cache;
    sc->max_num_seqs = max_num_seqs;
    sc->max_batch_tokens = max_batch_tokens;
    sc->running = calloc((size_t)max_num_seqs, sizeof *sc->running);
    sc->batch = calloc((size_t)max_num_seqs, sizeof *sc->batch);
    if (!sc->running || !sc->batch) {
        sched_free(sc);
        return pith_errf(err, "out of memory");
    }
    return 0;
}

void sched_free(sched *sc) {
    free(sc->waiting);
    free(sc->running);
    free(sc->batch);
    memset(sc, 0, sizeof *sc);
}

/* Scheduling order: higher priority first, then earlier arrival. */
static bool goes_before(const seq *a, const seq *b) {
    return a->priority != b->priority ? a->priority > b->priority : a->arrival < b->arrival;
}

static void insert_ordered(seq **list, int *n, seq *s) {
    int i = *n;
    while (i > 0 && goes_before(s, list[i - 1])) i--;
    memmove(&list[i + 1], &list[i], (size_t)(*n - i) * sizeof *list);
    list[i] = s;
    (*n)++;
}

static bool remove_from(seq **list, int *n, const seq *s) {
    for (int i = 0; i < *n; i++) {
        if (list[i] == s) {
            memmove(&list[i], &list[i + 1], (size_t)(*n - i - 1) * sizeof *list);
            (*n)--;
            return true;
        }
    }
    return false;
}

int sched_add(sched *sc, seq *s) {
    /* Room for this one plus every running sequence, so preemption never needs to allocate. */
    int need = sc->n_waiting + 1 + sc->max_num_seqs;
    if (need > sc->cap_waiting) {
        int cap = sc->cap_waiting ? sc->cap_waiting * 2 : 64;
        if (cap < need) cap = need;
        seq **w = realloc(sc->waiting, (size_t)cap * sizeof *w);
        if (!w) return -1;
        sc->waiting = w;
        sc->cap_waiting = cap;
    }
    s->state = SEQ_WAITING;
    insert_ordered(sc->waiting, &sc->n_waiting, s);
    return 0;
}

/* Tail first, so the prefix cache evicts a sequence's tail before its head. */
static void release_blocks(sched *sc, seq *s) {
    for (int i = s->n_blocks - 1; i >= 0; i--) kv_pool_release(sc->pool, s->blocks[i]);
    s->n_blocks = 0;
    s->n_computed = 0;
    s->n_named = 0;
    s->last_name = s->salt;
}

static void unschedule(sched *sc, seq *s) {
    if (remove_from(sc->batch, &sc->n_batch, s)) sc->n_batch_tokens -= s->n_sched;
    s->n_sched = 0;
}

void sched_remove(sched *sc, seq *s) {
    unschedule(sc, s);
    if (s->state == SEQ_RUNNING) remove_from(sc->running, &sc->n_running, s);
    else if (s->state == SEQ_WAITING) remove_from(sc->waiting, &sc->n_waiting, s);
    release_blocks(sc, s);
    s->state = SEQ_DONE;
}

static void preempt(sched *sc, seq *s) {
    unschedule(sc, s);
    remove_from(sc->running, &sc->n_running, s);
    release_blocks(sc, s);
    s->state = SEQ_WAITING;
    s->preempted_step = sc->step;
    insert_ordered(sc->waiting, &sc->n_waiting, s);
    sc->preemptions++;
}

static int blocks_for(const sched *sc, int n_tokens) {
    return (n_tokens + sc->pool->block_size - 1) / sc->pool->block_size;
}

/* Reserves blocks for all of s's tokens, reusing cached full blocks of its prefix (never the block
 * holding the last token: that token must run to produce logits). Changes nothing when it fails. */
static bool try_admit(sched *sc, seq *s) {
    kv_pool *pool = sc->pool;
    const int bs = pool->block_size;
    const int need = blocks_for(sc, s->n_tokens);
    int hits = 0, hits_unreferenced = 0;
    uint64_t name = s->salt;
    if (sc->prefix_cache) {
        for (int i = 0; i < (s->n_tokens - 1) / bs; i++) {
            const int32_t *toks = &s->tokens[(size_t)i * bs];
            uint64_t next = kv_pool_chain_hash(name, toks, bs);
            int b = kv_pool_lookup(pool, next, name, toks);
            if (b < 0) break;
            s->blocks[hits++] = b;
            hits_unreferenced += pool->blocks[b].ref == 0;
            name = next;
        }
    }
    /* Taking an unreferenced hit removes it from what allocation could evict. */
    if (need - hits > kv_pool_available(pool) - hits_unreferenced) return false;
    for (int i = 0; i < hits; i++) kv_pool_acquire(pool, s->blocks[i]);
    for (int i = hits; i < need; i++) {
        int b = kv_pool_alloc(pool);
        if (b < 0) { /* cannot happen after the check above; unwind exactly what was taken */
            for (int j = i - 1; j >= 0; j--) kv_pool_release(pool, s->blocks[j]);
            return false;
        }
        s->blocks[i] = b;
    }
    s->n_blocks = need;
    s->n_computed = hits * bs;
    s->n_named = hits;
    s->last_name = name;
    sc->cache_queries += (uint64_t)s->n_tokens;
    sc->cache_hits += (uint64_t)hits * bs;
    if (!s->admitted_once) {
        s->admitted_once = true;
        s->cached_tokens = hits * bs < s->n_prompt ? hits * bs : s->n_prompt;
    }
    return true;
}

static void schedule_tokens(sched *sc, seq *s, int budget) {
    int left = s->n_tokens - s->n_computed;
    s->n_sched = left < budget ? left : budget;
    sc->batch[sc->n_batch++] = s;
    sc->n_batch_tokens += s->n_sched;
}

void sched_schedule(sched *sc) {
    sc->step++;
    sc->n_batch = 0;
    sc->n_batch_tokens = 0;

    /* Decode tokens first, so a long prompt being prefilled never stalls generation. */
    for (int i = 0; i < sc->n_running && sc->n_batch_tokens < sc->max_batch_tokens;) {
        seq *s = sc->running[i];
        if (s->n_tokens - s->n_computed != 1) {
            i++;
            continue;
        }
        bool preempted_self = false;
        while (s->n_blocks < blocks_for(sc, s->n_tokens)) {
            int b = kv_pool_alloc(sc->pool);
            if (b >= 0) {
                s->blocks[s->n_blocks++] = b;
                continue;
            }
            /* The victim sits after s in the running order, so it is not scheduled yet, or is s. */
            seq *victim = sc->running[sc->n_running - 1];
            preempt(sc, victim);
            if (victim == s) {
                preempted_self = true;
                break;
            }
        }
        if (preempted_self) continue; /* running[i] is now the next sequence */
        schedule_tokens(sc, s, 1);
        i++;
    }
    /* Then prompt chunks of admitted sequences (their blocks were reserved at admission). */
    for (int i = 0; i < sc->n_running && sc->n_batch_tokens < sc->max_batch_tokens; i++) {
        seq *s = sc->running[i];
        if (s->n_tokens - s->n_computed > 1) schedule_tokens(sc, s, sc->max_batch_tokens - sc->n_batch_tokens);
    }

    while (sc->n_waiting > 0 && sc->n_batch_tokens < sc->max_batch_tokens) {
        seq *w = sc->waiting[0];
        if (w->preempted_step == sc->step) break; /* just lost its blocks: memory is short */
        if (sc->n_running < sc->max_num_seqs && try_admit(sc, w)) {
            remove_from(sc->waiting, &sc->n_waiting, w);
            w->state = SEQ_RUNNING;
            insert_ordered(sc->running, &sc->n_running, w);
            schedule_tokens(sc, w, sc->max_batch_tokens - sc->n_batch_tokens);
            continue;
        }
        seq *victim = sc->n_running > 0 ? sc->running[sc->n_running - 1] : NULL;
        if (!victim || victim->priority >= w->priority) break;
        preempt(sc, victim);
    }
}

void sched_commit(sched *sc) {
    const int bs = sc->pool->block_size;
    for (int i = 0; i < sc->n_batch; i++) {
        seq *s = sc->batch[i];
        s->n_computed += s->n_sched;
        s->n_sched = 0;
        if (!sc->prefix_cache) continue;
        while ((s->n_named + 1) * bs <= s->n_computed) {
            const int32_t *toks = &s->tokens[(size_t)s->n_named * bs];
            uint64_t name = kv_pool_chain_hash(s->last_name, toks, bs);
            kv_pool_name(sc->pool, s->blocks[s->n_named], name, s->last_name, toks);
            s->last_name = name;
            s->n_named++;
        }
    }
}
