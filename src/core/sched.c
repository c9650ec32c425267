#include "core/sched.h"

#include <stdlib.h>
#include <string.h>

int sched_init(sched *sc, mem *m, int max_num_seqs, int max_batch_tokens, pith_err *err) {
    memset(sc, 0, sizeof *sc);
    sc->mem = m;
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

static void unschedule(sched *sc, seq *s) {
    if (remove_from(sc->batch, &sc->n_batch, s)) sc->n_batch_tokens -= s->n_sched;
    s->n_sched = 0;
    s->n_draft = 0;
}

void sched_remove(sched *sc, seq *s) {
    unschedule(sc, s);
    if (s->state == SEQ_RUNNING) remove_from(sc->running, &sc->n_running, s);
    else if (s->state == SEQ_WAITING) remove_from(sc->waiting, &sc->n_waiting, s);
    mem_release(sc->mem, s);
    s->state = SEQ_DONE;
}

bool sched_fork(sched *sc, seq *parent, seq *child) {
    if (sc->n_running >= sc->max_num_seqs || !mem_fork(sc->mem, parent, child)) return false;
    child->state = SEQ_RUNNING;
    child->admitted_once = true;
    child->cached_tokens = child->n_prompt; /* computed by its sibling: none of it by this one */
    insert_ordered(sc->running, &sc->n_running, child);
    return true;
}

static void preempt(sched *sc, seq *s) {
    unschedule(sc, s);
    remove_from(sc->running, &sc->n_running, s);
    mem_release(sc->mem, s);
    s->state = SEQ_WAITING;
    s->preempted_step = sc->step;
    insert_ordered(sc->waiting, &sc->n_waiting, s);
    sc->preemptions++;
}

/* Admits s when the memory manager can place it (see mem_admit). */
static bool try_admit(sched *sc, seq *s) {
    int hit;
    if (!mem_admit(sc->mem, s, &hit)) return false;
    sc->cache_queries += (uint64_t)s->n_tokens;
    sc->cache_hits += (uint64_t)hit;
    if (!s->admitted_once) {
        s->admitted_once = true;
        s->cached_tokens = hit < s->n_prompt ? hit : s->n_prompt;
    }
    return true;
}

static void schedule_tokens(sched *sc, seq *s, int n) {
    s->n_sched = n;
    sc->batch[sc->n_batch++] = s;
    sc->n_batch_tokens += n;
}

/* Schedules up to `want` tokens of running sequence s, taking the memory they need; when not even one
 * token fits, preempts the last running sequence (s itself included) and tries again. Returns false
 * when s was preempted. */
static bool reserve_and_schedule(sched *sc, seq *s, int want) {
    for (;;) {
        int end = mem_grow(sc->mem, s, s->n_computed + want);
        if (sc->whole_spans) end = media_chunk_end(s->media, s->n_computed, end, end);
        if (end > s->n_computed) {
            schedule_tokens(sc, s, end - s->n_computed);
            return true;
        }
        seq *victim = sc->running[sc->n_running - 1];
        preempt(sc, victim);
        if (victim == s) return false;
    }
}

static int budget_left(const sched *sc) { return sc->max_batch_tokens - sc->n_batch_tokens; }

/* Prompt tokens of s to schedule now: up to the budget and the next snapshot point (mem.h), and with
 * whole_spans to a media span's edge (0 when the span it is in does not fit the budget). */
static int chunk_want(const sched *sc, const seq *s) {
    int c = s->n_computed, want = mem_chunk_end(sc->mem, s) - c;
    if (want > budget_left(sc)) want = budget_left(sc);
    if (sc->whole_spans) want = media_chunk_end(s->media, c, c + want, c + budget_left(sc)) - c;
    return want;
}

void sched_schedule(sched *sc) {
    sc->step++;
    sc->n_batch = 0;
    sc->n_batch_tokens = 0;

    /* Decode tokens first, so a long prompt being prefilled never stalls generation. A victim of
     * preemption is the last running sequence: after s in this loop, so not scheduled yet, or s. */
    int decoders = 0;
    for (int i = 0; i < sc->n_running; i++) decoders += sc->running[i]->n_tokens - sc->running[i]->n_computed == 1;
    for (int i = 0; i < sc->n_running && budget_left(sc) > 0;) {
        seq *s = sc->running[i];
        if (s->n_tokens - s->n_computed != 1) {
            i++;
            continue;
        }
        /* with a draft (spec.h), as much of it as the budget and the pool allow, leaving a token for
         * every sequence still to decode */
        decoders--;
        int want = 1 + s->n_draft, spare = budget_left(sc) - decoders;
        if (want > spare) want = spare > 1 ? spare : 1;
        if (reserve_and_schedule(sc, s, want)) {
            s->n_draft = s->n_sched - 1;
            i++;
        } /* else running[i] is now the next sequence */
    }
    /* Then prompt chunks of admitted sequences. A victim here may have been scheduled for decode above;
     * preempt unschedules it. */
    for (int i = 0; i < sc->n_running && budget_left(sc) > 0;) {
        seq *s = sc->running[i];
        int left = s->n_tokens - s->n_computed;
        if (left <= 1 || s->n_sched > 0) {
            i++;
            continue;
        }
        int want = chunk_want(sc, s);
        if (want == 0 || reserve_and_schedule(sc, s, want)) i++; /* 0: its span waits for a roomier step */
    }

    while (sc->n_waiting > 0 && budget_left(sc) > 0) {
        seq *w = sc->waiting[0];
        if (w->preempted_step == sc->step) break; /* just lost its memory: memory is short */
        if (sc->n_running < sc->max_num_seqs && try_admit(sc, w)) {
            remove_from(sc->waiting, &sc->n_waiting, w);
            w->state = SEQ_RUNNING;
            insert_ordered(sc->running, &sc->n_running, w);
            /* Admission placed at least the first uncached token in every group; more where it can. */
            int end = mem_grow(sc->mem, w, w->n_computed + chunk_want(sc, w));
            if (sc->whole_spans) end = media_chunk_end(w->media, w->n_computed, end, end);
            if (end > w->n_computed) schedule_tokens(sc, w, end - w->n_computed);
            continue;
        }
        seq *victim = sc->n_running > 0 ? sc->running[sc->n_running - 1] : NULL;
        if (!victim || victim->priority >= w->priority) break;
        preempt(sc, victim);
    }
}

void sched_commit(sched *sc) {
    for (int i = 0; i < sc->n_batch; i++) {
        seq *s = sc->batch[i];
        if (s->n_draft > 0) continue; /* verified first: sched_commit_seq as its tokens are accepted */
        s->n_computed += s->n_sched;
        s->n_sched = 0;
        mem_commit(sc->mem, s);
    }
}

void sched_commit_seq(sched *sc, seq *s, int n) {
    s->n_computed += n;
    s->n_sched = 0;
    mem_commit(sc->mem, s);
}
