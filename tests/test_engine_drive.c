/* pith_engine_run_until (engine.h), the one loop the CLI commands drive the engine with, over the fake
 * model (engine_fake_model.h): a check that says STOP after N steps returns 1 with the requests live and
 * intact (a later call resumes them to the same output as an uninterrupted run; pith_engine_cancel ends
 * one of them), CANCEL ends every live request with exactly one cancelled final event before the call
 * returns, no check runs everything to the end, the check is asked once per step and never on an idle
 * engine, it may submit, a model failure comes back as -1 with its message while the run goes on to the
 * end (or to a STOP), a paused engine's held requests are left to a STOP, and the call refuses an engine
 * whose own thread steps it. */
#include <stdint.h>

#include "check.h"
#include "core/engine_internal.h"
#include "engine_fake_model.h"

enum { V = 97, N_REQ = 3, MAX_TOK = 10 };

typedef struct out {
    uint64_t id;
    int32_t toks[64];
    int n;
    int n_final;
    pith_finish_reason why;
    char error[128];
} out;

static void collect(const pith_token_event *ev, void *user) {
    out *o = user;
    if (ev->final) {
        o->n_final++;
        o->why = ev->finish_reason;
        snprintf(o->error, sizeof o->error, "%s", ev->error);
    } else if (o->n < 64) {
        o->toks[o->n++] = ev->token;
    }
}

static void fill(int32_t *t, int n, uint32_t seed) {
    for (int i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        t[i] = (int32_t)((seed >> 16) % V);
    }
}

/* Prompts of the test's requests: 6 tokens each, different per request. */
static int32_t prompts[N_REQ + 1][6];

static pith_engine *new_engine(pith_model *m, int max_num_seqs) {
    pith_engine_options o = {.block_size = 4, .kv_blocks = 64, .max_num_seqs = max_num_seqs};
    pith_engine *e = NULL;
    pith_err err;
    CHECKF(pith_engine_create(m, NULL, &o, &e, &err) == 0, "%s", err.msg);
    return e;
}

static void submit(pith_engine *e, int i, out *o) {
    pith_request r = {.prompt = prompts[i], .n_prompt = 6, .sampling = pith_sampling_defaults(),
                      .max_tokens = MAX_TOK, .on_token = collect, .user = o};
    r.sampling.temperature = 0;
    pith_err err;
    CHECKF(pith_engine_submit(e, &r, &o->id, &err) == 0, "submit: %s", err.msg);
}

/* Greedy continuation of prompt i without any cache, as an uninterrupted run gives it. */
static bool matches_reference(int i, const out *o) {
    int32_t all[64];
    memcpy(all, prompts[i], sizeof prompts[i]);
    for (int k = 0; k < o->n; k++) {
        if (o->toks[k] != fake_next(all, 6 + k, V)) return false;
        all[6 + k] = o->toks[k];
    }
    return o->n == MAX_TOK && o->why == PITH_FINISH_LENGTH && o->n_final == 1;
}

/* The check: counts its calls, says `act` from call `at` on (CONTINUE before), and can submit one more
 * request on its first call. */
typedef struct driver {
    pith_engine *e;
    int calls;
    int at;
    pith_run_action act;
    out *submit_on_first; /* request N_REQ's output, or NULL */
    int integrity_failures;
} driver;

static pith_run_action drive(void *user) {
    driver *d = user;
    pith_err err;
    if (engine_check(d->e, &err)) d->integrity_failures++; /* between steps, with no lock held */
    if (d->calls++ == 0 && d->submit_on_first) submit(d->e, N_REQ, d->submit_on_first);
    return d->calls > d->at ? d->act : PITH_RUN_CONTINUE;
}

static void test_stop_then_resume(void) {
    pith_model *m = fake_model_new(V, 1, 0);
    pith_engine *e = new_engine(m, 0);
    out o[N_REQ] = {{0}};
    for (int i = 0; i < N_REQ; i++) submit(e, i, &o[i]);
    pith_err err;
    driver d = {.e = e, .at = 3, .act = PITH_RUN_STOP};
    CHECK(pith_engine_run_until(e, drive, &d, &err) == 1);
    pith_engine_stats st;
    pith_engine_get_stats(e, &st);
    /* Asked before each of the 3 steps and once more, when it said STOP: no fourth step. */
    CHECK(d.calls == 4 && st.steps == 3 && d.integrity_failures == 0);
    CHECK(pith_engine_has_work(e));
    for (int i = 0; i < N_REQ; i++) CHECK(o[i].n_final == 0 && o[i].n > 0 && o[i].n < MAX_TOK);
    CHECKF(engine_check(e, &err) == 0, "%s", err.msg);

    /* Resumed, the requests finish as if never stopped; the check is asked once per step. */
    driver go = {.e = e, .at = 1 << 30};
    CHECK(pith_engine_run_until(e, drive, &go, &err) == 0);
    pith_engine_get_stats(e, &st);
    CHECK(go.calls == (int)st.steps - 3 && go.integrity_failures == 0 && !pith_engine_has_work(e));
    for (int i = 0; i < N_REQ; i++) CHECKF(matches_reference(i, &o[i]), "request %d", i);

    /* Idle: the check is never asked. */
    driver idle = {.e = e, .at = 0, .act = PITH_RUN_STOP};
    CHECK(pith_engine_run_until(e, drive, &idle, &err) == 0 && idle.calls == 0);
    pith_engine_free(e);
    m->ops->destroy(m);
}

static void test_stop_then_cancel(void) {
    pith_model *m = fake_model_new(V, 1, 0);
    pith_engine *e = new_engine(m, 0);
    out o[N_REQ] = {{0}};
    for (int i = 0; i < N_REQ; i++) submit(e, i, &o[i]);
    pith_err err;
    driver d = {.e = e, .at = 2, .act = PITH_RUN_STOP};
    CHECK(pith_engine_run_until(e, drive, &d, &err) == 1);
    CHECK(pith_engine_cancel(e, o[1].id) == 0);
    CHECK(pith_engine_run_until(e, NULL, NULL, &err) == 0 && !pith_engine_has_work(e));
    CHECK(o[1].n_final == 1 && o[1].why == PITH_FINISH_CANCELLED && o[1].n < MAX_TOK);
    CHECK(matches_reference(0, &o[0]) && matches_reference(2, &o[2]));
    CHECK(e->mem.g[0].pool.n_used == 0);
    pith_engine_free(e);
    m->ops->destroy(m);
}

static void test_cancel(void) {
    pith_model *m = fake_model_new(V, 1, 0);
    pith_engine *e = new_engine(m, 2); /* one request waits: CANCEL ends the waiting ones too */
    out o[N_REQ] = {{0}};
    for (int i = 0; i < N_REQ; i++) submit(e, i, &o[i]);
    pith_err err;
    driver d = {.e = e, .at = 2, .act = PITH_RUN_CANCEL};
    CHECK(pith_engine_run_until(e, drive, &d, &err) == 0);
    /* 2 steps, then CANCEL and the step that delivers the final events: no work after it, no more asks. */
    CHECK(d.calls == 3 && d.integrity_failures == 0 && !pith_engine_has_work(e));
    for (int i = 0; i < N_REQ; i++) CHECK(o[i].n_final == 1 && o[i].why == PITH_FINISH_CANCELLED);
    CHECK(o[0].n > 0 && o[2].n == 0);
    pith_engine_stats st;
    pith_engine_get_stats(e, &st);
    CHECK(st.requests_cancelled == N_REQ && e->mem.g[0].pool.n_used == 0);
    pith_engine_free(e);
    m->ops->destroy(m);
}

static void test_no_check_and_submitting_check(void) {
    pith_model *m = fake_model_new(V, 1, 0);
    pith_engine *e = new_engine(m, 0);
    out o[N_REQ + 1] = {{0}};
    for (int i = 0; i < N_REQ; i++) submit(e, i, &o[i]);
    pith_err err;
    CHECK(pith_engine_run_until(e, NULL, NULL, &err) == 0 && !pith_engine_has_work(e));
    for (int i = 0; i < N_REQ; i++) CHECKF(matches_reference(i, &o[i]), "request %d", i);
    /* A check may submit: the new request runs in the same call. */
    memset(o, 0, sizeof o);
    for (int i = 0; i < N_REQ; i++) submit(e, i, &o[i]);
    driver d = {.e = e, .at = 1 << 30, .submit_on_first = &o[N_REQ]};
    CHECK(pith_engine_run_until(e, drive, &d, &err) == 0 && !pith_engine_has_work(e));
    for (int i = 0; i <= N_REQ; i++) CHECKF(matches_reference(i, &o[i]), "request %d", i);
    pith_engine_free(e);
    m->ops->destroy(m);
}

static void test_failure(void) {
    pith_model *m = fake_model_new(V, 1, 0);
    fake_of(m)->fail_at_call = 3;
    pith_engine *e = new_engine(m, 1); /* one at a time: the failure hits request 0 alone */
    out o[2] = {{0}};
    submit(e, 0, &o[0]);
    submit(e, 1, &o[1]);
    pith_err err = {{0}};
    CHECK(pith_engine_run_until(e, NULL, NULL, &err) == -1);
    CHECKF(strstr(err.msg, "planned") != NULL, "%s", err.msg);
    CHECK(o[0].n_final == 1 && o[0].why == PITH_FINISH_ERROR && strstr(o[0].error, "planned"));
    CHECK(matches_reference(1, &o[1]) && !pith_engine_has_work(e)); /* the run went on */
    pith_engine_free(e);
    m->ops->destroy(m);

    /* A failure, then a STOP: -1 (the failure comes first), the rest still live, and resumable. */
    m = fake_model_new(V, 1, 0);
    fake_of(m)->fail_at_call = 2;
    e = new_engine(m, 1);
    memset(o, 0, sizeof o);
    submit(e, 0, &o[0]);
    submit(e, 1, &o[1]);
    driver d = {.e = e, .at = 4, .act = PITH_RUN_STOP};
    err.msg[0] = 0;
    CHECK(pith_engine_run_until(e, drive, &d, &err) == -1 && strstr(err.msg, "planned"));
    CHECK(o[0].why == PITH_FINISH_ERROR && o[1].n_final == 0 && pith_engine_has_work(e));
    CHECK(pith_engine_run_until(e, NULL, NULL, &err) == 0 && matches_reference(1, &o[1]));
    pith_engine_free(e);
    m->ops->destroy(m);
}

static void test_paused_and_threaded(void) {
    pith_model *m = fake_model_new(V, 1, 0);
    pith_engine *e = new_engine(m, 0);
    pith_err err;
    CHECKF(pith_engine_pause(e, PITH_PAUSE_KEEP, 0, &err) == 0, "%s", err.msg);
    out o = {0};
    submit(e, 0, &o);
    /* Held: work that no step advances; only the check's STOP ends the call. */
    driver d = {.e = e, .at = 5, .act = PITH_RUN_STOP};
    CHECK(pith_engine_run_until(e, drive, &d, &err) == 1 && o.n == 0 && o.n_final == 0);
    CHECKF(pith_engine_resume(e, &err) == 0, "%s", err.msg);
    CHECK(pith_engine_run_until(e, NULL, NULL, &err) == 0 && matches_reference(0, &o));

    /* The engine's own thread steps it: the call refuses, touching nothing. */
    CHECKF(pith_engine_start(e, &err) == 0, "%s", err.msg);
    driver t = {.e = e, .at = 0, .act = PITH_RUN_STOP};
    err.msg[0] = 0;
    CHECK(pith_engine_run_until(e, drive, &t, &err) == -1 && t.calls == 0 && err.msg[0]);
    pith_engine_stop(e);
    pith_engine_free(e);
    m->ops->destroy(m);
}

int main(void) {
    for (int i = 0; i <= N_REQ; i++) fill(prompts[i], 6, 101u + (uint32_t)i);
    test_stop_then_resume();
    test_stop_then_cancel();
    test_cancel();
    test_no_check_and_submitting_check();
    test_failure();
    test_paused_and_threaded();
    return check_summary("test_engine_drive");
}
