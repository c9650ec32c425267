/* Engine administration (engine.h): pause and resume admission, drain, abort everything, swap the
 * model's weights, sleep (release the KV memory) and wake.
 *
 * Every change happens with the stepping thread stopped (pith_engine_stop returns after its current
 * step), so the scheduler, the pools and the sequences are this caller's alone; the thread is started
 * again afterwards. Waiting for a drain or an abort runs with the thread going (or, without a thread,
 * by stepping here). admin_lock makes admin calls one at a time.
 *
 * Holding: with e->hold set, the step's intake leaves submitted requests on the incoming list; a pause
 * also moves requests that never started out of the waiting queue back onto it, so a drain waits only
 * for requests that had started. Frozen (PITH_PAUSE_KEEP, asleep): steps only take cancellations. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/engine_internal.h"

static void admin_enter(pith_engine *e, bool *was_running) {
    pthread_mutex_lock(&e->admin_lock);
    *was_running = e->thread_started;
    pith_engine_stop(e);
}

static void admin_restart(pith_engine *e, bool was_running) {
    engine_publish_stats(e);
    if (was_running) {
        pith_err ignored;
        pith_engine_start(e, &ignored); /* it ran before; starting a thread again does not fail in practice */
    }
}

static void admin_leave(pith_engine *e, bool was_running) {
    if (!e->thread_started) admin_restart(e, was_running);
    pthread_mutex_unlock(&e->admin_lock);
}

static void set_flags(pith_engine *e, bool hold, bool frozen) {
    pthread_mutex_lock(&e->lock);
    e->hold = hold;
    e->frozen = frozen;
    pthread_cond_broadcast(&e->wake);
    pthread_mutex_unlock(&e->lock);
}

/* Requests in the waiting queue that never ran go back to the incoming list (held). */
static void hold_unstarted(pith_engine *e) {
    sched *sc = &e->sc;
    for (int i = sc->n_waiting - 1; i >= 0; i--) {
        seq *s = sc->waiting[i];
        if (s->admitted_once) continue;
        pthread_mutex_lock(&e->lock);
        bool room = engine_grow_list(&e->incoming, &e->cap_incoming, e->n_incoming + 1) == 0;
        if (room) {
            sched_remove(sc, s); /* holds nothing: this only unlists it */
            e->incoming[e->n_incoming++] = s;
        }
        pthread_mutex_unlock(&e->lock);
    }
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Nothing runs: every live request is held on the incoming list, and no cancellation is pending. */
static bool settled(pith_engine *e) {
    pthread_mutex_lock(&e->lock);
    bool done = e->n_live == e->n_incoming && e->n_cancel_pending == 0;
    pthread_mutex_unlock(&e->lock);
    return done;
}

static bool no_cancels_pending(pith_engine *e) {
    pthread_mutex_lock(&e->lock);
    bool done = e->n_cancel_pending == 0;
    pthread_mutex_unlock(&e->lock);
    return done;
}

/* Waits (stepping when there is no thread) until cond holds or timeout_s (> 0) passes. */
static bool wait_for(pith_engine *e, bool (*cond)(pith_engine *), double timeout_s) {
    double until = timeout_s > 0 ? now_s() + timeout_s : 0;
    while (!cond(e)) {
        if (until && now_s() > until) return false;
        if (e->thread_started) {
            struct timespec ts = {0, 2 * 1000 * 1000};
            nanosleep(&ts, NULL);
        } else {
            pith_err ignored;
            engine_step(e, &ignored);
        }
    }
    return true;
}

int pith_engine_pause(pith_engine *e, pith_pause_mode mode, double timeout_s, pith_err *err) {
    if (mode != PITH_PAUSE_KEEP && mode != PITH_PAUSE_DRAIN && mode != PITH_PAUSE_ABORT)
        return pith_errf(err, "pause mode %d is not keep, drain or abort", (int)mode);
    bool was_running;
    admin_enter(e, &was_running);
    if (e->asleep) {
        admin_leave(e, was_running);
        return pith_errf(err, "the engine is asleep");
    }
    set_flags(e, true, mode == PITH_PAUSE_KEEP);
    hold_unstarted(e);
    if (mode == PITH_PAUSE_ABORT) engine_cancel_live(e);
    admin_restart(e, was_running);
    int rc = 0;
    if (mode != PITH_PAUSE_KEEP && !wait_for(e, settled, timeout_s))
        rc = pith_errf(err, "requests still running after %g s", timeout_s);
    admin_leave(e, was_running);
    return rc;
}

int pith_engine_resume(pith_engine *e, pith_err *err) {
    bool was_running;
    admin_enter(e, &was_running);
    int rc = 0;
    if (e->asleep) rc = pith_errf(err, "the engine is asleep: wake it");
    else set_flags(e, false, false);
    admin_leave(e, was_running);
    return rc;
}

bool pith_engine_paused(pith_engine *e) {
    pthread_mutex_lock(&e->lock);
    bool held = e->hold;
    pthread_mutex_unlock(&e->lock);
    return held;
}

bool pith_engine_asleep(pith_engine *e) {
    pthread_mutex_lock(&e->lock);
    bool asleep = e->asleep;
    pthread_mutex_unlock(&e->lock);
    return asleep;
}

uint64_t pith_engine_weight_generation(pith_engine *e) {
    pthread_mutex_lock(&e->lock);
    uint64_t g = e->generation;
    pthread_mutex_unlock(&e->lock);
    return g;
}

int pith_engine_abort_all(pith_engine *e) {
    bool was_running;
    pthread_mutex_lock(&e->admin_lock);
    was_running = e->thread_started;
    int n = engine_cancel_live(e);
    wait_for(e, no_cancels_pending, 0);
    (void)was_running;
    pthread_mutex_unlock(&e->admin_lock);
    return n;
}

static void shape_of(const pith_model *m, engine_shape *out) {
    memset(out, 0, sizeof *out);
    out->hp = m->hp;
    out->mem = m->mem;
    out->has_hidden = m->has_hidden;
    out->state_checkpoints = m->state_checkpoints;
    uint64_t h = 1469598103934665603ull;
    for (int g = 0; g < m->mem.n_groups; g++) {
        out->mem.groups[g].layers = NULL;
        for (int i = 0; i < m->mem.groups[g].n_layers; i++) h = (h ^ (uint64_t)(m->mem.groups[g].layers[i] + 1)) * 1099511628211ull;
        h = (h ^ 0xffu) * 1099511628211ull;
    }
    out->layers_hash = h;
}

/* Same architecture, hyper-parameters, vocabulary and memory spec: the pools, the layout and every
 * request's tokens stay valid. */
static int check_same_shape(const engine_shape *a, const pith_model *model, pith_err *err) {
    engine_shape b;
    shape_of(model, &b);
    const pith_hparams *x = &a->hp, *y = &b.hp;
    if (strcmp(x->arch, y->arch)) return pith_errf(err, "the new weights are %s, the served model %s", y->arch, x->arch);
#define SAME(f) \
    if (x->f != y->f) return pith_errf(err, "the new weights' " #f " is %g, the served model's %g", (double)y->f, (double)x->f)
    SAME(n_vocab); SAME(dim); SAME(n_layers); SAME(n_heads); SAME(n_kv_heads); SAME(head_dim); SAME(ffn_dim);
    SAME(sliding_window);
#undef SAME
    if (a->mem.n_groups != b.mem.n_groups || a->layers_hash != b.layers_hash)
        return pith_errf(err, "the new weights declare another memory layout");
    for (int g = 0; g < a->mem.n_groups; g++) {
        const pith_mem_group *p = &a->mem.groups[g], *q = &b.mem.groups[g];
        if (p->kind != q->kind || p->window != q->window || p->type != q->type || p->n_layers != q->n_layers ||
            p->k_dim != q->k_dim || p->v_dim != q->v_dim || p->state_bytes != q->state_bytes)
            return pith_errf(err, "the new weights declare another memory layout (group %d)", g);
    }
    if (a->has_hidden != b.has_hidden) return pith_errf(err, "the new weights differ in hidden-state support");
    if (a->state_checkpoints != b.state_checkpoints) return pith_errf(err, "the new weights differ in state checkpoint support");
    return 0;
}

/* Gives `model` the engine's memory: prepare, allocate, fresh pools (an empty prefix cache). */
static int attach(pith_engine *e, pith_model *model, pith_err *err) {
    const pith_engine_options *o = &e->opt;
    pith_model_limits lim = {.max_batch_tokens = o->max_batch_tokens, .max_num_seqs = o->max_num_seqs,
                             .max_seq_len = o->max_seq_len, .max_logits = e->max_logits};
    if (pith_model_prepare(model, &lim, err) || pith_model_mem_alloc(model, &e->layout, err)) return -1;
    mem_config mc = {.prefix_cache = !o->no_prefix_cache, .n_state_slots = o->max_num_seqs + e->state_spares,
                     .snapshot_interval = o->snapshot_interval > 0 ? o->snapshot_interval : 0};
    if (mem_init(&e->mem, &model->mem, &e->layout, &mc, err)) {
        pith_model_mem_free(model);
        return -1;
    }
    e->model = model;
    engine_kv_events_attach(e); /* the fresh pools record events too */
    return 0;
}

/* Takes every running request off its memory (back to the waiting queue, tokens kept) and releases
 * the pools and the model's memory. */
static void detach(pith_engine *e) {
    sched *sc = &e->sc;
    while (sc->n_running > 0) {
        seq *s = sc->running[sc->n_running - 1];
        sched_remove(sc, s);
        sched_add(sc, s); /* cannot fail: the waiting list keeps room for every running sequence */
    }
    engine_kv_events_cleared(e); /* every cached prefix goes with the pools */
    mem_free(&e->mem);
    pith_model_mem_free(e->model);
}

/* Back to its prompt: generated tokens, text state and sampler dropped (the sampler is created anew at
 * the next sample, with the same seed), then a restart event. */
static void restart(pith_engine *e, seq *s) {
    s->n_tokens = s->n_prompt;
    int full = s->n_prompt / e->opt.block_size;
    if (s->n_hashed > full) s->n_hashed = full;
    s->plp_next = 0;
    pith_sampler_free(s->sampler);
    s->sampler = NULL;
    s->n_held = 0;
    if (s->has_detok) {
        pith_detok_init(&s->detok, e->tok, false);
        pith_detok_skip(&s->detok, s->tokens, s->n_prompt);
    }
    e->n_restarted++;
    pith_token_event ev = {.request_id = s->id, .user = s->user, .token = -1, .text = "", .restart = true,
                           .weight_generation = e->generation};
    if (s->on_token) s->on_token(&ev, s->user);
}

int pith_engine_swap_model(pith_engine *e, pith_model *model, pith_swap_mode mode, pith_model **old, pith_err *err) {
    *old = NULL;
    if (!model || model == e->model) return pith_errf(err, "swap: no new model");
    if (mode != PITH_SWAP_DRAIN && mode != PITH_SWAP_RECOMPUTE) return pith_errf(err, "swap mode %d is unknown", (int)mode);
    bool was_running;
    admin_enter(e, &was_running);
    shape_of(e->model, &e->shape);
    if (check_same_shape(&e->shape, model, err)) {
        admin_leave(e, was_running);
        return -1;
    }
    int rc = 0;
    sched *sc = &e->sc;
    if (!e->hold) rc = pith_errf(err, "swap: pause the engine first");
    else if (e->asleep) rc = pith_errf(err, "swap: the engine is asleep");
    else if (mode == PITH_SWAP_DRAIN && (sc->n_running > 0 || sc->n_waiting > 0))
        rc = pith_errf(err, "swap: %d requests still running; drain first or swap in recompute mode",
                       sc->n_running + sc->n_waiting);
    if (rc) {
        admin_leave(e, was_running);
        return rc;
    }
    pith_model *prev = e->model;
    detach(e);
    if (attach(e, model, err)) {
        pith_err again;
        if (attach(e, prev, &again)) { /* cannot even go back: the engine is left without memory */
            e->asleep = true;
            e->frozen = true;
        }
        admin_leave(e, was_running);
        return -1;
    }
    pthread_mutex_lock(&e->lock);
    e->generation++;
    pthread_mutex_unlock(&e->lock);
    /* Every request that produced anything restarts; the others had only been preempted. */
    for (int i = 0; i < sc->n_waiting; i++) {
        seq *s = sc->waiting[i];
        if (s->n_tokens > s->n_prompt || s->plp_next > 0) restart(e, s);
    }
    *old = prev;
    admin_leave(e, was_running);
    return 0;
}

int pith_engine_sleep(pith_engine *e, pith_err *err) {
    bool was_running;
    admin_enter(e, &was_running);
    if (e->asleep) {
        admin_leave(e, was_running);
        return pith_errf(err, "the engine is already asleep");
    }
    set_flags(e, true, true);
    hold_unstarted(e);
    shape_of(e->model, &e->shape);
    detach(e);
    pthread_mutex_lock(&e->lock);
    e->asleep = true;
    pthread_mutex_unlock(&e->lock);
    admin_leave(e, was_running);
    return 0;
}

int pith_engine_wake(pith_engine *e, pith_model *model, pith_err *err) {
    bool was_running;
    admin_enter(e, &was_running);
    int rc = 0;
    if (!e->asleep) rc = pith_errf(err, "the engine is not asleep");
    else if (model && model != e->model) rc = check_same_shape(&e->shape, model, err);
    if (!rc && attach(e, model ? model : e->model, err)) rc = -1;
    if (!rc) {
        pthread_mutex_lock(&e->lock);
        e->asleep = false;
        pthread_mutex_unlock(&e->lock);
        set_flags(e, false, false);
    }
    admin_leave(e, was_running);
    return rc;
}
