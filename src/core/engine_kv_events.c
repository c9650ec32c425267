/* KV-cache events (pith/engine.h): the sink, the per-step hand-out of what the published pool recorded
 * (kv_pool.h, kv_event_log), and a dump of the published pool's named blocks.
 *
 * Owns e->kv_log and e->kv_out. Invariant: the log hangs on the published pool (its `log` pointer)
 * exactly while a sink is installed, so an engine nobody listens to records nothing; it is emptied at
 * every hand-out, so the sink sees each event once, in order. */
#include <stdlib.h>
#include <string.h>

#include "core/engine_internal.h"

/* From the spec, which outlives the pools (asleep: none) and the model (asleep: the shape's copy). */
int engine_kv_group(const pith_engine *e) {
    const pith_mem_spec *spec = e->asleep ? &e->shape.mem : &e->model->mem;
    for (int g = 0; g < spec->n_groups; g++)
        if (spec->groups[g].kind == PITH_MEM_FULL) return g;
    return -1;
}

void engine_kv_events_attach(pith_engine *e) {
    int g = engine_kv_group(e);
    if (g < 0 || g >= e->mem.n_groups) return; /* asleep: the pools come back with attach */
    e->mem.g[g].pool.log = e->kv_sink ? &e->kv_log : NULL;
}

/* Grows e->kv_out to n entries. 0 or -1. */
static int out_room(pith_engine *e, int n) {
    if (n <= e->kv_out_cap) return 0;
    int cap = e->kv_out_cap ? e->kv_out_cap : 64;
    while (cap < n) cap *= 2;
    pith_kv_event *out = realloc(e->kv_out, (size_t)cap * sizeof *out);
    if (!out) return -1;
    e->kv_out = out;
    e->kv_out_cap = cap;
    return 0;
}

void engine_kv_events_flush(pith_engine *e) {
    kv_event_log *l = &e->kv_log;
    if (!e->kv_sink) {
        l->n = 0;
        l->lost = false;
        return;
    }
    /* Lost events cannot be told apart from kept ones: the listener starts over from nothing. */
    if (l->lost || out_room(e, l->n)) {
        static const pith_kv_event cleared = {.type = PITH_KV_EVENT_CLEARED};
        l->n = 0;
        l->lost = false;
        e->kv_sink(e->kv_sink_user, &cleared, 1);
        return;
    }
    for (int i = 0; i < l->n; i++) {
        const kv_event_rec *r = &l->ev[i];
        pith_kv_event *o = &e->kv_out[i];
        *o = (pith_kv_event){.type = (pith_kv_event_type)r->type, .root = r->root, .block = r->name,
                             .parent = r->parent};
        if (r->type == KV_EVENT_STORED) {
            o->tokens = &l->tokens[(size_t)i * l->block_size];
            o->n_tokens = l->block_size;
        }
    }
    int n = l->n;
    l->n = 0;
    if (n) e->kv_sink(e->kv_sink_user, e->kv_out, n);
}

void engine_kv_events_cleared(pith_engine *e) {
    if (!e->kv_sink || engine_kv_group(e) < 0) return;
    kv_event_log_cleared(&e->kv_log);
    engine_kv_events_flush(e);
}

void engine_kv_events_free(pith_engine *e) {
    kv_event_log_free(&e->kv_log);
    free(e->kv_out);
    e->kv_out = NULL;
    e->kv_out_cap = 0;
}

/* The thread stopped and admin calls held off, as the administration calls do (engine_admin.c). */
static bool enter(pith_engine *e) {
    pthread_mutex_lock(&e->admin_lock);
    bool was_running = e->thread_started;
    pith_engine_stop(e);
    return was_running;
}

static void leave(pith_engine *e, bool was_running) {
    if (was_running) {
        pith_err ignored;
        pith_engine_start(e, &ignored); /* it ran before; starting a thread again does not fail in practice */
    }
    pthread_mutex_unlock(&e->admin_lock);
}

int pith_engine_set_kv_event_sink(pith_engine *e, pith_kv_event_sink sink, void *user, pith_err *err) {
    bool was_running = enter(e);
    int rc = 0;
    if (sink && engine_kv_group(e) < 0) {
        rc = pith_errf(err, "the model has no full-attention memory group: it has no prefix blocks to report");
    } else {
        if (e->kv_sink) engine_kv_events_flush(e); /* the old sink gets what it was owed */
        e->kv_sink = sink;
        e->kv_sink_user = user;
        e->kv_log.n = 0;
        e->kv_log.lost = false;
        e->kv_log.block_size = e->opt.block_size;
        engine_kv_events_attach(e);
    }
    leave(e, was_running);
    return rc;
}

int pith_engine_kv_cache_blocks(pith_engine *e, pith_kv_event_sink fn, void *user, pith_err *err) {
    bool was_running = enter(e);
    int rc = 0, g = engine_kv_group(e);
    if (g < 0) {
        rc = pith_errf(err, "the model has no full-attention memory group: it has no prefix blocks to report");
    } else if (!e->asleep && g < e->mem.n_groups) { /* asleep: no pools, nothing cached */
        const kv_pool *p = &e->mem.g[g].pool;
        int n = 0;
        for (int b = 0; b < p->n_blocks; b++) n += p->blocks[b].named;
        pith_kv_event *ev = malloc((size_t)(n ? n : 1) * sizeof *ev);
        if (!ev) {
            rc = pith_errf(err, "out of memory for %d blocks", n);
        } else {
            int k = 0;
            for (int b = 0; b < p->n_blocks; b++) {
                const kv_block *blk = &p->blocks[b];
                if (!blk->named) continue;
                ev[k++] = (pith_kv_event){.type = PITH_KV_EVENT_STORED, .root = blk->root, .block = blk->name,
                                          .parent = blk->parent, .tokens = &p->tokens[(size_t)b * p->block_size],
                                          .n_tokens = p->block_size};
            }
            fn(user, ev, n);
            free(ev);
        }
    } else {
        fn(user, NULL, 0);
    }
    leave(e, was_running);
    return rc;
}
