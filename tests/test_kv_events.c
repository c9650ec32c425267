/* KV-cache events (pith/engine.h, kv_pool.h): what the pools record and what the engine hands out.
 *
 * The pool alone: STORED / REMOVED / CLEARED in order with their names, parents, root flags and token
 * copies, and a randomized run where replaying the events always gives exactly the pool's named blocks
 * (kv_pool_check after every operation). The engine over the fake model (no weights): a workload with
 * shared prefixes, evictions from a small pool, preemption and cancels, stepped one step at a time,
 * where after every step the set rebuilt from the sink's events equals pith_engine_kv_cache_blocks and
 * engine_check holds; a weight swap and a sleep clear everything; without a sink nothing is recorded;
 * a hybrid publishes its FULL group and a window-only model is refused. */
#include <stdint.h>

#include "check.h"
#include "core/engine_internal.h"
#include "core/kv_pool.h"
#include "engine_fake_model.h"

static uint64_t rng_state = 0x51a7e5;
static uint32_t rnd(uint32_t n) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 33) % n;
}

/* A set of block names (linear: tests hold few). */
typedef struct name_set {
    uint64_t v[4096];
    int n;
} name_set;

static int set_find(const name_set *s, uint64_t x) {
    for (int i = 0; i < s->n; i++)
        if (s->v[i] == x) return i;
    return -1;
}

static bool set_add(name_set *s, uint64_t x) {
    if (set_find(s, x) >= 0 || s->n == (int)(sizeof s->v / sizeof *s->v)) return false;
    s->v[s->n++] = x;
    return true;
}

static bool set_del(name_set *s, uint64_t x) {
    int i = set_find(s, x);
    if (i < 0) return false;
    s->v[i] = s->v[--s->n];
    return true;
}

static bool set_equal(const name_set *a, const name_set *b) {
    if (a->n != b->n) return false;
    for (int i = 0; i < a->n; i++)
        if (set_find(b, a->v[i]) < 0) return false;
    return true;
}

static void pool_ok(const kv_pool *p) {
    pith_err err = {{0}};
    CHECKF(kv_pool_check(p, NULL, &err) == 0, "%s", err.msg);
}

/* The pool's named blocks, from its own state. */
static void pool_names(const kv_pool *p, name_set *out) {
    out->n = 0;
    for (int b = 0; b < p->n_blocks; b++)
        if (p->blocks[b].named) set_add(out, p->blocks[b].name);
}

static void test_pool_events(void) {
    const int bs = 4;
    kv_pool p;
    pith_err err;
    CHECK(kv_pool_init(&p, bs, 4, &err) == 0);
    kv_event_log log = {.block_size = bs};
    /* No log: nothing is recorded anywhere. */
    int32_t t[4][4] = {{1, 2, 3, 4}, {5, 6, 7, 8}, {9, 10, 11, 12}, {13, 14, 15, 16}};
    int b0 = kv_pool_alloc(&p);
    kv_pool_name(&p, b0, 111, 0, true, t[0]);
    CHECK(log.n == 0 && p.log == NULL);
    kv_pool_release(&p, b0);
    pool_ok(&p);

    p.log = &log;
    /* A chain of three under one sequence: three STORED, in order, with parents and tokens. */
    int b[3];
    uint64_t names[3] = {1001, 1002, 1003}, parents[3] = {77, 1001, 1002};
    for (int i = 0; i < 3; i++) {
        b[i] = kv_pool_alloc(&p);
        kv_pool_name(&p, b[i], names[i], parents[i], i == 0, t[i + 1]);
        pool_ok(&p);
    }
    CHECK(b[0] == b0 || p.evictions == 0); /* b0 was cached; the pool had free blocks first */
    CHECK(log.n == 3);
    for (int i = 0; i < 3 && log.n == 3; i++) {
        CHECK(log.ev[i].type == KV_EVENT_STORED && log.ev[i].name == names[i] && log.ev[i].parent == parents[i]);
        CHECK(log.ev[i].root == (i == 0));
        CHECK(!memcmp(&log.tokens[(size_t)i * bs], t[i + 1], sizeof t[0]));
    }
    /* Naming again, or a second block with the same content: nothing. */
    kv_pool_name(&p, b[1], names[1], parents[1], false, t[2]);
    CHECK(log.n == 3);
    /* Allocation with no free block evicts the oldest cached one (block 111): REMOVED. */
    int b3 = kv_pool_alloc(&p);
    CHECK(b3 == b0 && log.n == 4 && log.ev[3].type == KV_EVENT_REMOVED && log.ev[3].name == 111);
    pool_ok(&p);
    /* The holder overwrites its block: REMOVED. An unnamed block unnamed: nothing. */
    kv_pool_unname(&p, b[2]);
    CHECK(log.n == 5 && log.ev[4].type == KV_EVENT_REMOVED && log.ev[4].name == 1003);
    kv_pool_unname(&p, b[2]);
    CHECK(log.n == 5);
    /* The STORED event kept its own copy of the tokens although the block is renamed now. */
    kv_pool_name(&p, b[2], 2003, 1002, false, t[0]);
    CHECK(log.n == 6 && !memcmp(&log.tokens[2 * (size_t)bs], t[3], sizeof t[0]));
    pool_ok(&p);
    /* The pool dropped: earlier unread events are replaced by one CLEARED. */
    kv_event_log_cleared(&log);
    CHECK(log.n == 1 && log.ev[0].type == KV_EVENT_CLEARED && !log.lost);
    kv_event_log_free(&log);
    kv_pool_free(&p);
}

/* Random operations on a pool with a log; after each, the events so far replayed give exactly the
 * pool's named blocks. */
static void test_pool_replay(void) {
    const int bs = 2, nb = 12;
    kv_pool p;
    pith_err err;
    CHECK(kv_pool_init(&p, bs, nb, &err) == 0);
    kv_event_log log = {.block_size = bs};
    p.log = &log;
    int held[64], n_held = 0;
    name_set replay = {.n = 0}, truth;
    int stored = 0, removed = 0;
    for (int step = 0; step < 4000; step++) {
        uint32_t what = rnd(10);
        if (what < 4) {
            int b = kv_pool_alloc(&p);
            if (b >= 0) {
                held[n_held++] = b;
                if (rnd(3)) {
                    int32_t tok[2] = {(int32_t)rnd(3), (int32_t)rnd(3)};
                    uint64_t parent = rnd(4);
                    kv_pool_name(&p, b, kv_pool_chain_hash(parent, tok, bs), parent, parent == 0, tok);
                }
            }
        } else if (what < 7 && n_held > 0) {
            int i = (int)rnd((uint32_t)n_held);
            kv_pool_release(&p, held[i]);
            held[i] = held[--n_held];
        } else if (what < 8 && n_held > 0) {
            kv_pool_unname(&p, held[rnd((uint32_t)n_held)]);
        } else if (what < 9) {
            /* a hit: take a cached block */
            int b = p.lru_head;
            if (b >= 0 && n_held < 64) {
                kv_pool_acquire(&p, b);
                held[n_held++] = b;
            }
        }
        for (int i = 0; i < log.n; i++) {
            const kv_event_rec *r = &log.ev[i];
            if (r->type == KV_EVENT_STORED) {
                CHECKF(set_add(&replay, r->name), "step %d: stored twice", step);
                stored++;
            } else if (r->type == KV_EVENT_REMOVED) {
                CHECKF(set_del(&replay, r->name), "step %d: removed a block never stored", step);
                removed++;
            }
        }
        log.n = 0;
        CHECK(!log.lost);
        pool_names(&p, &truth);
        CHECKF(set_equal(&replay, &truth), "step %d: events say %d named blocks, the pool has %d", step, replay.n, truth.n);
        pool_ok(&p);
        if (check_failures_) break;
    }
    CHECKF(stored > 100 && removed > 100, "stored %d removed %d", stored, removed);
    kv_event_log_free(&log);
    kv_pool_free(&p);
}

/* ---- the engine over the fake model ---- */

enum { V = 64, BS = 4 };

typedef struct listener {
    name_set set;
    int stored, removed, cleared, calls;
    int errors;
} listener;

static void on_events(void *user, const pith_kv_event *ev, int n) {
    listener *l = user;
    l->calls++;
    CHECK(n > 0);
    for (int i = 0; i < n; i++) {
        switch (ev[i].type) {
        case PITH_KV_EVENT_STORED:
            l->stored++;
            if (!set_add(&l->set, ev[i].block)) l->errors++;
            if (ev[i].n_tokens != BS || !ev[i].tokens) l->errors++;
            break;
        case PITH_KV_EVENT_REMOVED:
            l->removed++;
            if (!set_del(&l->set, ev[i].block)) l->errors++;
            break;
        case PITH_KV_EVENT_CLEARED:
            l->cleared++;
            l->set.n = 0;
            break;
        default:
            l->errors++;
        }
    }
}

static void dump_into(void *user, const pith_kv_event *ev, int n) {
    name_set *s = user;
    s->n = 0;
    for (int i = 0; i < n; i++) {
        CHECK(ev[i].type == PITH_KV_EVENT_STORED && ev[i].n_tokens == BS);
        CHECK(set_add(s, ev[i].block));
    }
}

/* The listener's set equals the engine's named blocks, and the engine is consistent. */
static void agree(pith_engine *e, listener *l, const char *when) {
    name_set truth;
    pith_err err = {{0}};
    CHECKF(pith_engine_kv_cache_blocks(e, dump_into, &truth, &err) == 0, "%s", err.msg);
    CHECKF(set_equal(&l->set, &truth), "%s: the events say %d blocks, the engine holds %d", when, l->set.n, truth.n);
    CHECKF(engine_check(e, &err) == 0, "%s: %s", when, err.msg);
    CHECK(l->errors == 0);
}

static void submit_prompt(pith_engine *e, const int32_t *prompt, int n, int max_tokens, uint64_t *id) {
    pith_request r = {.prompt = prompt, .n_prompt = n, .sampling = pith_sampling_defaults(), .max_tokens = max_tokens,
                      .ignore_eos = true};
    pith_err err;
    CHECKF(pith_engine_submit(e, &r, id, &err) == 0, "%s", err.msg);
}

/* Prompts from a few shared system prefixes plus a tail, so hits, misses and evictions all happen. */
static int make_prompt(int32_t *p, int k) {
    int sys = k % 3, len = 8 + (int)rnd(20);
    for (int i = 0; i < len; i++) p[i] = i < 12 ? (int32_t)((sys * 7 + i) % V) : (int32_t)rnd(V);
    return len;
}

static void test_engine_events(void) {
    fake_group_def defs[2] = {{PITH_MEM_WINDOW, 6, 1}, {PITH_MEM_FULL, 0, 1}}; /* FULL is group 1 */
    pith_model *m = fake_model_new_spec(V, 0, defs, 2, 0), *m2 = fake_model_new_spec(V, 0, defs, 2, 0);
    pith_err err;
    pith_engine *e = NULL;
    pith_engine_options o = {.block_size = BS, .kv_blocks = 24, .max_num_seqs = 6, .max_batch_tokens = 32,
                             .max_seq_len = 64};
    CHECKF(pith_engine_create(m, NULL, &o, &e, &err) == 0, "%s", err.msg);
    if (!e) return;
    CHECK(engine_kv_group(e) == 1);

    /* Nobody listens: nothing is recorded, no pool has a log. */
    int32_t prompt[64];
    uint64_t id;
    for (int k = 0; k < 3; k++) submit_prompt(e, prompt, make_prompt(prompt, k), 4, &id);
    CHECK(pith_engine_run(e, &err) == 0);
    CHECK(e->kv_log.n == 0 && e->kv_log.cap == 0 && !e->mem.g[0].pool.log && !e->mem.g[1].pool.log);
    /* Flush those (named without a listener: never reported) by a swap, for a clean start. */
    CHECK(pith_engine_pause(e, PITH_PAUSE_DRAIN, 0, &err) == 0);
    pith_model *old = NULL;
    CHECKF(pith_engine_swap_model(e, m2, PITH_SWAP_DRAIN, &old, &err) == 0, "%s", err.msg);
    CHECK(old == m && pith_engine_resume(e, &err) == 0);

    listener l = {.set = {.n = 0}};
    CHECKF(pith_engine_set_kv_event_sink(e, on_events, &l, &err) == 0, "%s", err.msg);
    CHECK(e->mem.g[1].pool.log == &e->kv_log && !e->mem.g[0].pool.log); /* the FULL group's only */
    agree(e, &l, "empty");

    /* A stream of requests stepped one step at a time; some cancelled on the way. */
    int submitted = 0, steps = 0;
    while ((submitted < 60 || pith_engine_has_work(e)) && steps < 5000) {
        if (submitted < 60 && rnd(2) == 0) {
            int n = make_prompt(prompt, submitted);
            submit_prompt(e, prompt, n, 4 + (int)rnd(28), &id);
            if (rnd(8) == 0) pith_engine_cancel(e, id);
            submitted++;
        }
        CHECKF(pith_engine_step(e, &err) == 0, "%s", err.msg);
        steps++;
        char when[64];
        snprintf(when, sizeof when, "step %d", steps);
        agree(e, &l, when);
        if (check_failures_) break; /* the first disagreement says it all */
    }
    pith_engine_stats st;
    pith_engine_get_stats(e, &st);
    CHECKF(l.stored > 50 && l.removed > 10 && st.prefix_cache_hits > 0 && st.preemptions > 0,
           "stored %d removed %d hits %llu preemptions %llu", l.stored, l.removed,
           (unsigned long long)st.prefix_cache_hits, (unsigned long long)st.preemptions);
    CHECK(l.set.n > 0 && l.cleared == 0);

    /* A weight swap drops every block: CLEARED, and the engine holds none. */
    CHECK(pith_engine_pause(e, PITH_PAUSE_DRAIN, 0, &err) == 0);
    CHECKF(pith_engine_swap_model(e, m, PITH_SWAP_DRAIN, &old, &err) == 0, "%s", err.msg);
    CHECK(l.cleared == 1 && l.set.n == 0);
    agree(e, &l, "after the swap");
    CHECK(pith_engine_resume(e, &err) == 0);
    /* Blocks after it are reported again; then sleep drops them. */
    for (int k = 0; k < 4; k++) submit_prompt(e, prompt, make_prompt(prompt, k), 3, &id);
    CHECK(pith_engine_run(e, &err) == 0);
    agree(e, &l, "after the swap's requests");
    CHECK(l.set.n > 0);
    CHECK(pith_engine_pause(e, PITH_PAUSE_KEEP, 0, &err) == 0 && pith_engine_sleep(e, &err) == 0);
    CHECK(l.cleared == 2 && l.set.n == 0);
    CHECKF(pith_engine_wake(e, NULL, &err) == 0, "%s", err.msg);
    CHECK(e->mem.g[1].pool.log == &e->kv_log); /* the new pools record too */
    submit_prompt(e, prompt, make_prompt(prompt, 1), 3, &id);
    CHECK(pith_engine_run(e, &err) == 0);
    agree(e, &l, "after the wake");
    CHECK(l.set.n > 0);

    /* Removing the sink takes the log off the pools. */
    CHECK(pith_engine_set_kv_event_sink(e, NULL, NULL, &err) == 0 && !e->mem.g[1].pool.log);
    pith_engine_free(e);
    m->ops->destroy(m);
    m2->ops->destroy(m2);

    /* A model of window layers only has no prefix blocks to report. */
    pith_model *mw = fake_model_new_spec(V, 0, defs, 1, 0);
    CHECKF(pith_engine_create(mw, NULL, &o, &e, &err) == 0, "%s", err.msg);
    if (e) {
        CHECK(pith_engine_set_kv_event_sink(e, on_events, &l, &err) == -1 && strstr(err.msg, "full-attention"));
        CHECK(pith_engine_kv_cache_blocks(e, dump_into, &l.set, &err) == -1);
        pith_engine_free(e);
    }
    mw->ops->destroy(mw);
}

int main(void) {
    test_pool_events();
    test_pool_replay();
    test_engine_events();
    return check_summary("test_kv_events");
}
