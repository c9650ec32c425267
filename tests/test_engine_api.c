/* Directed tests of the engine API over the fake model (engine_fake_model.h): prefix cache hits and
 * cache salts, tail-first eviction, priorities and preemption, cancellation, rejection, sampled output
 * independent of batching, logprobs, model failure, freeing with live requests, the background
 * thread with concurrent submitters and cancellers, and stop-string hold-back. */
#include <math.h>
#include <pthread.h>
#include <stdint.h>

#include "check.h"
#include "core/engine_internal.h"
#include "engine_fake_model.h"

enum { V = 97 };

typedef struct out {
    uint64_t id;
    int32_t toks[512];
    int n;
    int n_final;
    pith_finish_reason why;
    pith_usage usage;
    int finish_order;
    char error[128];
    float logprob[512];
    pith_logprob top[512][5];
    int n_top;
} out;

static int finish_counter; /* test-only: order in which final events arrive */

static void collect(const pith_token_event *ev, void *user) {
    out *o = user;
    if (ev->final) {
        o->n_final++;
        o->why = ev->finish_reason;
        o->usage = ev->usage;
        o->finish_order = ++finish_counter;
        snprintf(o->error, sizeof o->error, "%s", ev->error);
        return;
    }
    if (o->n < 512) {
        if (ev->has_logprob) {
            o->logprob[o->n] = ev->logprob;
            o->n_top = ev->n_top;
            for (int i = 0; i < ev->n_top && i < 5; i++) o->top[o->n][i] = ev->top[i];
        }
        o->toks[o->n++] = ev->token;
    }
}

static pith_request greedy(const int32_t *prompt, int n, int max_tokens, out *o) {
    pith_request r = {.prompt = prompt, .n_prompt = n, .sampling = pith_sampling_defaults(),
                      .max_tokens = max_tokens, .on_token = collect, .user = o};
    r.sampling.temperature = 0;
    return r;
}

static uint64_t submit(pith_engine *e, const pith_request *r) {
    pith_err err;
    uint64_t id = 0;
    int rc = pith_engine_submit(e, r, &id, &err);
    CHECKF(rc == 0, "submit: %s", err.msg);
    ((out *)r->user)->id = id;
    return id;
}

static void run_checked(pith_engine *e) {
    pith_err err;
    for (int guard = 0; pith_engine_has_work(e) && guard < 100000; guard++) {
        pith_engine_step(e, &err);
        int rc = engine_check(e, &err);
        CHECKF(rc == 0, "%s", err.msg);
        if (rc) break;
    }
    CHECK(!pith_engine_has_work(e));
}

/* The reference: greedy continuation without any cache. */
static bool matches_reference(const int32_t *prompt, int n_prompt, const out *o) {
    int32_t all[1024];
    memcpy(all, prompt, (size_t)n_prompt * sizeof *all);
    for (int i = 0; i < o->n; i++) {
        if (o->toks[i] != fake_next(all, n_prompt + i, V)) return false;
        all[n_prompt + i] = o->toks[i];
    }
    return true;
}

static pith_engine *new_engine(pith_model *m, pith_engine_options o) {
    pith_engine *e = NULL;
    pith_err err;
    CHECKF(pith_engine_create(m, NULL, &o, &e, &err) == 0, "%s", err.msg);
    return e;
}

static void fill(int32_t *t, int n, uint32_t seed) {
    for (int i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        t[i] = (int32_t)((seed >> 16) % V);
    }
}

static void test_prefix_cache_and_salt(void) {
    pith_model *m = fake_model_new(V, 2, 0);
    pith_engine *e = new_engine(m, (pith_engine_options){.block_size = 4, .kv_blocks = 64, .max_seq_len = 64});
    int32_t p[13], q[12];
    fill(p, 13, 1);
    memcpy(q, p, sizeof q);
    out a = {0}, b = {0}, c = {0}, d = {0}, s1 = {0}, s2 = {0}, s3 = {0};
    pith_request r = greedy(p, 13, 10, &a);
    submit(e, &r);
    run_checked(e);
    CHECK(a.n == 10 && a.why == PITH_FINISH_LENGTH && a.usage.cached_tokens == 0 && matches_reference(p, 13, &a));
    r.user = &b;
    submit(e, &r);
    run_checked(e);
    CHECK(b.usage.cached_tokens == 12 && b.n == 10 && !memcmp(a.toks, b.toks, sizeof a.toks[0] * 10));
    /* A prompt that is a whole number of cached blocks still computes its last block's tokens. */
    r = greedy(q, 12, 5, &c);
    submit(e, &r);
    run_checked(e);
    CHECK(c.usage.cached_tokens == 8 && c.n == 5 && matches_reference(q, 12, &c));
    /* A different tail after two shared blocks. */
    int32_t t[11];
    memcpy(t, p, 8 * sizeof *t);
    t[8] = 1, t[9] = 2, t[10] = 3;
    r = greedy(t, 11, 5, &d);
    submit(e, &r);
    run_checked(e);
    CHECK(d.usage.cached_tokens == 8 && matches_reference(t, 11, &d));
    /* Salts keep tenants apart. */
    r = greedy(p, 13, 3, &s1);
    r.cache_salt = "tenant-a";
    submit(e, &r);
    run_checked(e);
    CHECK(s1.usage.cached_tokens == 0 && matches_reference(p, 13, &s1));
    r.user = &s2;
    submit(e, &r);
    run_checked(e);
    CHECK(s2.usage.cached_tokens == 12);
    r.user = &s3;
    r.cache_salt = "tenant-b";
    submit(e, &r);
    run_checked(e);
    CHECK(s3.usage.cached_tokens == 0);
    pith_engine_stats st;
    pith_engine_get_stats(e, &st);
    CHECK(st.prefix_cache_hits == 12 + 8 + 8 + 12 && st.kv_blocks_used == 0 && st.kv_blocks_cached > 0);
    pith_engine_free(e);
    m->ops->destroy(m);
}

/* The stats a final event's receiver reads already count that request and its released blocks (so a
 * client that reads /metrics right after its response sees them). */
typedef struct stats_probe {
    pith_engine *e;
    int n_final;
    pith_engine_stats at_final[4];
} stats_probe;

static void read_stats_at_final(const pith_token_event *ev, void *user) {
    stats_probe *p = user;
    if (ev->final && p->n_final < 4) pith_engine_get_stats(p->e, &p->at_final[p->n_final++]);
}

static void test_stats_before_final(void) {
    pith_model *m = fake_model_new(V, 2, 0);
    pith_engine *e = new_engine(m, (pith_engine_options){.block_size = 4, .kv_blocks = 64, .max_seq_len = 64});
    int32_t p[9];
    fill(p, 9, 7);
    stats_probe a = {.e = e}, b = {.e = e};
    out unused;
    pith_request r = greedy(p, 9, 6, &unused);
    r.on_token = read_stats_at_final;
    r.user = &a;
    pith_err err;
    uint64_t id;
    CHECK(pith_engine_submit(e, &r, &id, &err) == 0);
    r.max_tokens = 2;
    r.user = &b;
    CHECK(pith_engine_submit(e, &r, &id, &err) == 0);
    run_checked(e);
    CHECK(a.n_final == 1 && b.n_final == 1);
    /* b (2 tokens) ends first, while a still runs; then a ends and nothing is left */
    CHECKF(b.at_final[0].requests_finished == 1 && b.at_final[0].running == 1,
           "at b's final event: %llu finished, %d running", (unsigned long long)b.at_final[0].requests_finished,
           b.at_final[0].running);
    CHECKF(a.at_final[0].requests_finished == 2 && a.at_final[0].running == 0 && a.at_final[0].waiting == 0 &&
               a.at_final[0].kv_blocks_used == 0,
           "at a's final event: %llu finished, %d running, %d waiting, %d blocks used",
           (unsigned long long)a.at_final[0].requests_finished, a.at_final[0].running, a.at_final[0].waiting,
           a.at_final[0].kv_blocks_used);
    CHECK(a.at_final[0].generation_tokens == 8);
    pith_engine_free(e);
    m->ops->destroy(m);
}

/* A finished sequence's blocks are evicted tail first: after pressure, its head is still cached. */
static void test_tail_first_eviction(void) {
    pith_model *m = fake_model_new(V, 1, 0);
    pith_engine *e = new_engine(m, (pith_engine_options){.block_size = 4, .kv_blocks = 8});
    int32_t a[13], b[24];
    fill(a, 13, 2);
    fill(b, 24, 3);
    out oa = {0}, ob = {0}, oa2 = {0};
    pith_request r = greedy(a, 13, 1, &oa);
    submit(e, &r);
    run_checked(e);
    CHECK(e->mem.g[0].pool.n_cached == 3 && e->mem.g[0].pool.n_free == 5);
    r = greedy(b, 24, 1, &ob); /* needs 6 blocks: 5 free and one eviction */
    submit(e, &r);
    run_checked(e);
    CHECK(e->mem.g[0].pool.evictions == 1);
    r = greedy(a, 13, 1, &oa2);
    submit(e, &r);
    run_checked(e);
    CHECK(oa2.usage.cached_tokens == 8);
    CHECK(oa2.n == 1 && oa2.toks[0] == oa.toks[0]);
    pith_engine_free(e);
    m->ops->destroy(m);
}

static void test_priorities(void) {
    pith_model *m = fake_model_new(V, 1, 0);
    pith_engine *e = new_engine(m, (pith_engine_options){.block_size = 4, .kv_blocks = 64, .max_num_seqs = 1});
    int32_t p[6];
    fill(p, 6, 4);
    out lo = {0}, hi = {0}, mid = {0};
    pith_request r = greedy(p, 6, 20, &lo);
    submit(e, &r);
    pith_err err;
    for (int i = 0; i < 3; i++) pith_engine_step(e, &err);
    CHECK(lo.n == 3);
    r = greedy(p, 5, 20, &mid);
    submit(e, &r); /* same priority: waits its turn */
    r = greedy(p, 4, 20, &hi);
    r.priority = 5;
    submit(e, &r);
    run_checked(e);
    CHECK(hi.finish_order < lo.finish_order && lo.finish_order < mid.finish_order);
    CHECK(matches_reference(p, 6, &lo) && matches_reference(p, 4, &hi) && matches_reference(p, 5, &mid));
    CHECK(lo.n == 20 && hi.n == 20 && mid.n == 20);
    pith_engine_stats st;
    pith_engine_get_stats(e, &st);
    CHECK(st.preemptions == 1);
    pith_engine_free(e);
    m->ops->destroy(m);

    /* Memory as the limit: the pool holds one long sequence; a high-priority arrival preempts. */
    m = fake_model_new(V, 1, 0);
    e = new_engine(m, (pith_engine_options){.block_size = 4, .kv_blocks = 10, .max_num_seqs = 4});
    int32_t q[30];
    fill(q, 30, 5);
    out a = {0}, b = {0};
    r = greedy(q, 30, 8, &a);
    submit(e, &r);
    pith_engine_step(e, &err);
    r = greedy(q + 1, 20, 8, &b);
    r.priority = 1;
    submit(e, &r);
    run_checked(e);
    CHECK(b.finish_order < a.finish_order && matches_reference(q, 30, &a) && matches_reference(q + 1, 20, &b));
    pith_engine_get_stats(e, &st);
    CHECK(st.preemptions >= 1);
    pith_engine_free(e);
    m->ops->destroy(m);
}

static void test_cancel_and_reject(void) {
    pith_model *m = fake_model_new(V, 1, 0);
    pith_engine *e = new_engine(m, (pith_engine_options){.block_size = 4, .kv_blocks = 16, .max_seq_len = 40, .max_waiting = 2});
    CHECK(pith_engine_max_seq_len(e) == 40);
    int32_t p[40];
    fill(p, 40, 6);
    out a = {0}, b = {0}, c = {0}, x = {0};
    pith_request r = greedy(p, 10, 0, &a);
    uint64_t ida = submit(e, &r);
    pith_err err;
    pith_engine_step(e, &err);
    pith_engine_step(e, &err);
    CHECK(a.n == 2 && e->mem.g[0].pool.n_used > 0);
    CHECK(pith_engine_cancel(e, ida) == 0);
    CHECK(pith_engine_cancel(e, ida) == 0); /* still live until the next step */
    CHECK(pith_engine_cancel(e, 999) == -1);
    pith_engine_step(e, &err);
    CHECK(a.n_final == 1 && a.why == PITH_FINISH_CANCELLED && a.n == 2 && e->mem.g[0].pool.n_used == 0);
    CHECK(pith_engine_cancel(e, ida) == -1);
    CHECK(engine_check(e, &err) == 0);

    /* Cancelled before it ever ran. */
    r = greedy(p, 10, 0, &b);
    uint64_t idb = submit(e, &r);
    CHECK(pith_engine_cancel(e, idb) == 0);
    run_checked(e);
    CHECK(b.n_final == 1 && b.why == PITH_FINISH_CANCELLED && b.n == 0);

    /* Unbounded max_tokens stops at the sequence limit. */
    r = greedy(p, 10, 0, &c);
    submit(e, &r);
    run_checked(e);
    CHECK(c.why == PITH_FINISH_LENGTH && c.n == 30 && c.usage.completion_tokens == 30 && matches_reference(p, 10, &c));

    uint64_t id = 77;
    r = greedy(p, 40, 1, &x);
    CHECK(pith_engine_submit(e, &r, &id, &err) == PITH_SUBMIT_INVALID && id == 0 && strstr(err.msg, "40"));
    r = greedy(p, 0, 1, &x);
    CHECK(pith_engine_submit(e, &r, &id, &err) == PITH_SUBMIT_INVALID);
    int32_t bad[2] = {1, V};
    r = greedy(bad, 2, 1, &x);
    CHECK(pith_engine_submit(e, &r, &id, &err) == PITH_SUBMIT_INVALID && strstr(err.msg, "vocabulary"));
    r = greedy(p, 3, 1, &x);
    r.sampling.top_p = 0;
    CHECK(pith_engine_submit(e, &r, &id, &err) == PITH_SUBMIT_INVALID);
    r = greedy(p, 3, 1, &x);
    const char *empty_stop[1] = {""};
    r.stop = empty_stop;
    r.n_stop = 1;
    CHECK(pith_engine_submit(e, &r, &id, &err) == PITH_SUBMIT_INVALID);
    r = greedy(p, 3, 1, &x);
    r.logprobs = true;
    r.top_logprobs = 21;
    CHECK(pith_engine_submit(e, &r, &id, &err) == PITH_SUBMIT_INVALID);
    /* Queue full: two waiting is the limit. */
    out w[3] = {{0}};
    for (int i = 0; i < 2; i++) {
        r = greedy(p, 3, 1, &w[i]);
        submit(e, &r);
    }
    r = greedy(p, 3, 1, &w[2]);
    CHECK(pith_engine_submit(e, &r, &id, &err) == PITH_SUBMIT_BUSY);
    run_checked(e);
    CHECK(w[0].n_final == 1 && w[1].n_final == 1 && w[2].n_final == 0 && x.n_final == 0);
    pith_engine_stats st;
    pith_engine_get_stats(e, &st);
    CHECK(st.requests_rejected == 7 && st.requests_cancelled == 2 && st.requests_finished == 5);
    pith_engine_free(e);
    m->ops->destroy(m);
}

/* Seeded sampling gives the same tokens alone and batched under a pool small enough to preempt. */
static void test_sampled_batching_invariance(void) {
    enum { N = 12 };
    int32_t prompts[N][20];
    out alone[N], together[N];
    memset(alone, 0, sizeof alone);
    memset(together, 0, sizeof together);
    for (int i = 0; i < N; i++) fill(prompts[i], 20, 100 + (uint32_t)(i % 4)); /* shared prompts too */
    for (int pass = 0; pass < 2; pass++) {
        pith_model *m = fake_model_new(V, 2, 0);
        pith_engine_options o = {.block_size = 4, .kv_blocks = pass ? 24 : 64, .max_num_seqs = pass ? 8 : 1,
                                 .max_batch_tokens = pass ? 13 : 64};
        pith_engine *e = new_engine(m, o);
        for (int i = 0; i < N; i++) {
            out *dst = pass ? &together[i] : &alone[i];
            pith_request r = greedy(prompts[i], 20 - i, 24, dst);
            r.sampling = pith_sampling_defaults();
            r.sampling.temperature = 1.5f;
            r.sampling.seed = 1000 + (uint64_t)i;
            r.sampling.top_k = 0;
            r.sampling.min_p = 0;
            r.sampling.repetition_penalty = 1.3f;
            submit(e, &r);
            if (!pass) run_checked(e);
        }
        run_checked(e);
        pith_engine_stats st;
        pith_engine_get_stats(e, &st);
        if (pass) CHECKF(st.preemptions > 0, "no preemption with a small pool");
        pith_engine_free(e);
        m->ops->destroy(m);
    }
    for (int i = 0; i < N; i++) {
        CHECK(alone[i].n == 24 && together[i].n == 24);
        CHECKF(!memcmp(alone[i].toks, together[i].toks, 24 * sizeof(int32_t)), "request %d differs", i);
    }
    /* Not greedy: at least one request left the greedy path (else the test proves nothing). */
    int differs = 0;
    for (int i = 0; i < N; i++) differs += !matches_reference(prompts[i], 20 - i, &alone[i]);
    CHECK(differs > 0);
}

static void test_logprobs(void) {
    pith_model *m = fake_model_new(V, 1, 0);
    pith_engine *e = new_engine(m, (pith_engine_options){.block_size = 4, .kv_blocks = 16});
    int32_t p[5];
    fill(p, 5, 7);
    out o = {0};
    pith_request r = greedy(p, 5, 4, &o);
    r.logprobs = true;
    r.top_logprobs = 5;
    submit(e, &r);
    run_checked(e);
    CHECK(o.n == 4 && o.n_top == 5);
    int32_t all[16];
    memcpy(all, p, sizeof p);
    for (int k = 0; k < o.n; k++) {
        /* Independent log-softmax of the fake logits. */
        uint64_t h = fake_hash_for(fake_of(m), all, 5 + k);
        double mx = -1e30, sum = 0;
        for (int v = 0; v < V; v++) mx = fmax(mx, fake_logit(h, v));
        for (int v = 0; v < V; v++) sum += exp(fake_logit(h, v) - mx);
        double want = fake_logit(h, o.toks[k]) - mx - log(sum);
        CHECKF(fabs(o.logprob[k] - want) < 1e-5, "logprob %g, want %g", (double)o.logprob[k], want);
        CHECK(o.top[k][0].token == o.toks[k] && fabsf(o.top[k][0].logprob - o.logprob[k]) < 1e-6f);
        for (int i = 1; i < 5; i++) {
            CHECK(o.top[k][i].logprob <= o.top[k][i - 1].logprob);
            double w = fake_logit(h, o.top[k][i].token) - mx - log(sum);
            CHECK(fabs(o.top[k][i].logprob - w) < 1e-5);
        }
        all[5 + k] = o.toks[k];
    }
    pith_engine_free(e);
    m->ops->destroy(m);
}

static void test_model_failure_and_free(void) {
    pith_model *m = fake_model_new(V, 1, 0);
    fake_of(m)->fail_at_call = 3;
    pith_engine *e = new_engine(m, (pith_engine_options){.block_size = 4, .kv_blocks = 32});
    int32_t p[8];
    fill(p, 8, 8);
    out a = {0}, b = {0}, c = {0}, d = {0};
    pith_request r = greedy(p, 8, 10, &a);
    submit(e, &r);
    r.user = &b;
    submit(e, &r);
    pith_err err;
    int fails = 0;
    while (pith_engine_has_work(e)) fails += pith_engine_step(e, &err) != 0;
    CHECK(fails == 1 && a.why == PITH_FINISH_ERROR && b.why == PITH_FINISH_ERROR && strstr(a.error, "planned"));
    CHECK(a.n == 2 && e->mem.g[0].pool.n_used == 0);
    r.user = &c;
    submit(e, &r);
    run_checked(e);
    CHECK(c.why == PITH_FINISH_LENGTH && matches_reference(p, 8, &c));
    /* Freeing with live requests cancels them. */
    r.user = &d;
    submit(e, &r);
    pith_engine_step(e, &err);
    pith_engine_free(e);
    CHECK(d.n_final == 1 && d.why == PITH_FINISH_CANCELLED);
    m->ops->destroy(m);
}

/* Background thread: several threads submit and wait; another cancels. */
typedef struct shared {
    pith_engine *e;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;
    out outs[64];
    int32_t prompts[64][12];
    int submit_rc[64];
} shared;

typedef struct tagged {
    shared *sh;
    out *o;
} tagged;

static tagged tags[64];

static void collect_signal(const pith_token_event *ev, void *user) {
    tagged *t = user;
    collect(ev, t->o);
    if (ev->final) {
        pthread_mutex_lock(&t->sh->mu);
        t->sh->done++;
        pthread_cond_broadcast(&t->sh->cv);
        pthread_mutex_unlock(&t->sh->mu);
    }
}

typedef struct worker_arg {
    shared *sh;
    int first;
} worker_arg;

static void *submitter(void *arg) {
    worker_arg *w = arg;
    for (int i = w->first; i < w->first + 16; i++) {
        tags[i] = (tagged){w->sh, &w->sh->outs[i]};
        pith_request r = greedy(w->sh->prompts[i], 12, 8 + i % 8, NULL);
        r.on_token = collect_signal;
        r.user = &tags[i];
        pith_err err;
        uint64_t id;
        w->sh->submit_rc[i] = pith_engine_submit(w->sh->e, &r, &id, &err); /* checked on the main thread */
        /* Cancel every 5th right away from this thread: a race with the engine thread by design. */
        if (i % 5 == 0) pith_engine_cancel(w->sh->e, id);
    }
    return NULL;
}

static void test_thread(void) {
    pith_model *m = fake_model_new(V, 1, 0);
    static shared sh;
    memset(&sh, 0, sizeof sh);
    pthread_mutex_init(&sh.mu, NULL);
    pthread_cond_init(&sh.cv, NULL);
    sh.e = new_engine(m, (pith_engine_options){.block_size = 4, .kv_blocks = 30, .max_num_seqs = 6});
    for (int i = 0; i < 64; i++) fill(sh.prompts[i], 12, 200 + (uint32_t)(i % 7));
    pith_err err;
    CHECK(pith_engine_start(sh.e, &err) == 0);
    CHECK(pith_engine_start(sh.e, &err) == -1);
    pthread_t th[4];
    worker_arg args[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (worker_arg){&sh, i * 16};
        pthread_create(&th[i], NULL, submitter, &args[i]);
    }
    for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
    pthread_mutex_lock(&sh.mu);
    while (sh.done < 64) pthread_cond_wait(&sh.cv, &sh.mu);
    pthread_mutex_unlock(&sh.mu);
    pith_engine_stop(sh.e);
    pith_engine_stats st;
    pith_engine_get_stats(sh.e, &st);
    CHECK(st.requests_finished == 64 && st.running == 0 && st.waiting == 0 && st.kv_blocks_used == 0);
    CHECK(engine_check(sh.e, &err) == 0);
    for (int i = 0; i < 64; i++) {
        out *o = &sh.outs[i];
        CHECK(sh.submit_rc[i] == 0 && o->n_final == 1);
        CHECK(matches_reference(sh.prompts[i], 12, o));
        if (o->why != PITH_FINISH_CANCELLED) CHECK(o->why == PITH_FINISH_LENGTH && o->n == 8 + i % 8);
        else CHECK(i % 5 == 0);
    }
    pith_engine_free(sh.e);
    m->ops->destroy(m);
    pthread_cond_destroy(&sh.cv);
    pthread_mutex_destroy(&sh.mu);
}

static void push(seq *s, const char *t, bool final, const char *want_out, bool want_stop) {
    const char *o;
    int n;
    bool stop = seq_push_text(s, t, (int)strlen(t), final, &o, &n);
    CHECKF(stop == want_stop && n == (int)strlen(want_out) && !memcmp(o, want_out, (size_t)n),
           "push '%s': got '%.*s' stop %d, want '%s' stop %d", t, n, o, stop, want_out, want_stop);
}

static void test_stop_strings(void) {
    seq s = {0};
    char *stops[2] = {"abc", "xy"};
    s.stop = stops;
    s.n_stop = 2;
    push(&s, "12a", false, "12", false);
    push(&s, "bd", false, "abd", false);
    push(&s, "zab", false, "z", false);
    push(&s, "c!", false, "", true);
    s.n_held = 0;
    push(&s, "1xab", false, "1x", false); /* "ab" may start "abc"; "b" starts nothing */
    s.n_held = 0;
    push(&s, "ab", false, "", false);
    push(&s, "", true, "ab", false);       /* the final release lets go of a partial match */
    push(&s, "q xy abc", false, "q ", true); /* the earliest match wins */
    s.n_held = 0;
    push(&s, "x", false, "", false);
    push(&s, "x", false, "x", false);
    push(&s, "y", false, "", true);
    s.n_stop = 0;
    s.n_held = 0;
    push(&s, "abc", false, "abc", false);
    free(s.held);
    free(s.released);
}

int main(void) {
    test_prefix_cache_and_salt();
    test_tail_first_eviction();
    test_priorities();
    test_cancel_and_reject();
    test_sampled_batching_invariance();
    test_logprobs();
    test_model_failure_and_free();
    test_thread();
    test_stop_strings();
    test_stats_before_final();
    return check_summary("test_engine_api");
}
