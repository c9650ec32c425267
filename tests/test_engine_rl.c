/* The engine's RL-serving parts over the fake model (engine_fake_model.h): prompt logprobs (every prompt
 * token's log-softmax given the tokens before it, in order, exactly once, also for a prompt needing
 * more logits rows than one batch has and under preemption), processed logprobs (recomputed here from
 * the sampling parameters), and the admin API with the background thread: pause keep / drain / abort,
 * resume, swapping the model in drain and recompute modes (restart events, weight generations, outputs
 * still those of an uncached run), sleep and wake (memory released and back, nothing lost). */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <time.h>

#include "check.h"
#include "core/engine_internal.h"
#include "engine_fake_model.h"

enum { V = 97, MAXT = 512 };

typedef struct out {
    pthread_mutex_t lock;
    int32_t toks[MAXT];
    float lp[MAXT];
    pith_logprob top[MAXT][5];
    int n_top[MAXT];
    int n;
    int n_prompt_ev;
    int prompt_index[MAXT];
    float prompt_lp[MAXT];
    pith_logprob prompt_top[MAXT][3];
    int n_final, n_restart;
    uint64_t gen_last, gen_final;
    bool mixed_gen;            /* token events since the last restart carried two generations */
    pith_finish_reason why;
} out;

static void collect(const pith_token_event *ev, void *user) {
    out *o = user;
    pthread_mutex_lock(&o->lock);
    if (ev->final) {
        o->n_final++;
        o->why = ev->finish_reason;
        o->gen_final = ev->weight_generation;
    } else if (ev->restart) {
        o->n_restart++;
        o->n = 0;
        o->n_prompt_ev = 0;
        o->gen_last = ev->weight_generation;
    } else if (ev->prompt) {
        if (o->n_prompt_ev < MAXT) {
            o->prompt_index[o->n_prompt_ev] = ev->prompt_index;
            o->prompt_lp[o->n_prompt_ev] = ev->logprob;
            for (int i = 0; i < ev->n_top && i < 3; i++) o->prompt_top[o->n_prompt_ev][i] = ev->top[i];
            o->n_prompt_ev++;
        }
    } else if (o->n < MAXT) {
        if (o->n > 0 && ev->weight_generation != o->gen_last) o->mixed_gen = true;
        o->gen_last = ev->weight_generation;
        o->lp[o->n] = ev->logprob;
        o->n_top[o->n] = ev->n_top;
        for (int i = 0; i < ev->n_top && i < 5; i++) o->top[o->n][i] = ev->top[i];
        o->toks[o->n++] = ev->token;
    }
    pthread_mutex_unlock(&o->lock);
}

static void out_init(out *o) {
    memset(o, 0, sizeof *o);
    pthread_mutex_init(&o->lock, NULL);
}

static pith_request request(const int32_t *prompt, int n, int max_tokens, out *o) {
    pith_request r = {.prompt = prompt, .n_prompt = n, .sampling = pith_sampling_defaults(),
                      .max_tokens = max_tokens, .ignore_eos = true, .on_token = collect, .user = o};
    r.sampling.temperature = 0;
    return r;
}

static void submit(pith_engine *e, const pith_request *r) {
    pith_err err;
    uint64_t id;
    CHECKF(pith_engine_submit(e, r, &id, &err) == 0, "submit: %s", err.msg);
}

static void run_checked(pith_engine *e) {
    pith_err err;
    for (int guard = 0; pith_engine_has_work(e) && guard < 100000; guard++) {
        pith_engine_step(e, &err);
        int rc = engine_check(e, &err);
        CHECKF(rc == 0, "%s", err.msg);
        if (rc) break;
    }
}

static void fill(int32_t *t, int n, uint32_t seed) {
    for (int i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        t[i] = (int32_t)((seed >> 16) % V);
    }
}

/* Independent log-softmax of the fake logits after tokens[0..n), at token v. */
static double ref_logprob(pith_model *m, const int32_t *tokens, int n, int v) {
    uint64_t h = fake_hash_for(fake_of(m), tokens, n);
    double mx = -1e30, sum = 0;
    for (int k = 0; k < V; k++) mx = fmax(mx, fake_logit(h, k));
    for (int k = 0; k < V; k++) sum += exp(fake_logit(h, k) - mx);
    return fake_logit(h, v) - mx - log(sum);
}

static bool greedy_matches(const int32_t *prompt, int n_prompt, const out *o) {
    int32_t all[1024];
    memcpy(all, prompt, (size_t)n_prompt * sizeof *all);
    for (int i = 0; i < o->n; i++) {
        if (o->toks[i] != fake_next(all, n_prompt + i, V)) return false;
        all[n_prompt + i] = o->toks[i];
    }
    return true;
}

static void check_prompt_events(pith_model *m, const int32_t *p, int n, const out *o) {
    CHECKF(o->n_prompt_ev == n - 1, "prompt events %d, want %d", o->n_prompt_ev, n - 1);
    for (int i = 0; i < o->n_prompt_ev && i < n - 1; i++) {
        CHECKF(o->prompt_index[i] == i + 1, "prompt event %d has index %d", i, o->prompt_index[i]);
        double want = ref_logprob(m, p, i + 1, p[i + 1]);
        CHECKF(fabs(o->prompt_lp[i] - want) < 1e-5, "prompt logprob %d: %g, want %g", i, (double)o->prompt_lp[i], want);
        double best = ref_logprob(m, p, i + 1, o->prompt_top[i][0].token);
        CHECK(fabs(o->prompt_top[i][0].logprob - best) < 1e-5 && o->prompt_top[i][1].logprob <= o->prompt_top[i][0].logprob);
    }
}

static void test_prompt_logprobs(void) {
    pith_model *m = fake_model_new(V, 1, 0);
    /* A roomy pool, then one so small that the requests preempt each other. */
    for (int small = 0; small < 2; small++) {
        pith_err err;
        pith_engine *e = NULL;
        pith_engine_options opt = {.block_size = 4, .kv_blocks = small ? 40 : 256, .max_batch_tokens = 64};
        CHECKF(pith_engine_create(m, NULL, &opt, &e, &err) == 0, "%s", err.msg);
        enum { N = 3 };
        int32_t p[N][100];
        int len[N] = {100, 9, 60};
        out o[N];
        for (int k = 0; k < N; k++) {
            fill(p[k], len[k], 11u + (uint32_t)k);
            out_init(&o[k]);
            pith_request r = request(p[k], len[k], 12, &o[k]);
            r.prompt_logprobs = k != 1;
            r.prompt_top_logprobs = 3;
            submit(e, &r);
        }
        /* The same prompt again without prompt logprobs: its cache hits must not disturb the others. */
        out plain;
        out_init(&plain);
        pith_request r = request(p[0], len[0], 12, &plain);
        submit(e, &r);
        run_checked(e);
        for (int k = 0; k < N; k++) {
            CHECK(o[k].n == 12 && o[k].n_final == 1 && greedy_matches(p[k], len[k], &o[k]));
            if (k != 1) check_prompt_events(m, p[k], len[k], &o[k]);
            else CHECK(o[k].n_prompt_ev == 0);
        }
        CHECK(plain.n_prompt_ev == 0 && greedy_matches(p[0], len[0], &plain));
        pith_engine_stats st;
        pith_engine_get_stats(e, &st);
        if (small) CHECKF(st.preemptions > 0, "no preemption in the small pool (%llu)", (unsigned long long)st.preemptions);
        pith_engine_free(e);
    }
    m->ops->destroy(m);
}

/* The processed distribution recomputed: top-k, softmax(logit / T), top-p, min-p, renormalised. */
static double ref_processed(const float *logits, const pith_sampling_params *sp, int v, int32_t *top_ids, int n_top) {
    int idx[V];
    for (int i = 0; i < V; i++) idx[i] = i;
    for (int i = 0; i < V; i++) /* sort by logit, ties to the lower id */
        for (int j = i + 1; j < V; j++)
            if (logits[idx[j]] > logits[idx[i]] || (logits[idx[j]] == logits[idx[i]] && idx[j] < idx[i])) {
                int t = idx[i];
                idx[i] = idx[j];
                idx[j] = t;
            }
    int m = sp->top_k > 0 && sp->top_k < V ? sp->top_k : V;
    double p[V], sum = 0;
    for (int i = 0; i < m; i++) sum += p[i] = exp((logits[idx[i]] - logits[idx[0]]) / sp->temperature);
    for (int i = 0; i < m; i++) p[i] /= sum;
    double cum = 0;
    for (int i = 0; i < m; i++)
        if ((cum += p[i]) >= sp->top_p) {
            m = i + 1;
            break;
        }
    int keep = 1;
    while (keep < m && p[keep] >= p[0] * sp->min_p) keep++;
    m = keep;
    double total = 0;
    for (int i = 0; i < m; i++) total += p[i];
    for (int i = 0; i < n_top && i < m; i++) top_ids[i] = idx[i];
    for (int i = 0; i < m; i++)
        if (idx[i] == v) return log(p[i] / total);
    return -INFINITY;
}

static void test_processed_logprobs(void) {
    pith_model *m = fake_model_new(V, 1, 0);
    pith_err err;
    pith_engine *e = NULL;
    CHECKF(pith_engine_create(m, NULL, &(pith_engine_options){.block_size = 4, .kv_blocks = 64}, &e, &err) == 0, "%s", err.msg);
    int32_t p[7];
    fill(p, 7, 3);
    pith_sampling_params sps[2] = {pith_sampling_defaults(), pith_sampling_defaults()};
    sps[0] = (pith_sampling_params){.temperature = 0.05f, .top_k = 12, .top_p = 0.9f, .min_p = 0.2f,
                                    .repetition_penalty = 1, .seed = 5};
    sps[1].temperature = 0; /* greedy: the log-softmax of the (unpenalised) logits */
    for (int c = 0; c < 2; c++) {
        out o;
        out_init(&o);
        pith_request r = request(p, 7, 16, &o);
        r.sampling = sps[c];
        r.logprobs = true;
        r.top_logprobs = 5;
        r.logprobs_mode = PITH_LOGPROBS_PROCESSED;
        submit(e, &r);
        run_checked(e);
        CHECK(o.n == 16);
        int32_t all[64];
        memcpy(all, p, sizeof p);
        int truncated = 0;
        for (int k = 0; k < o.n; k++) {
            uint64_t h = fake_hash_for(fake_of(m), all, 7 + k);
            float row[V];
            fake_logits_row(h, V, row);
            if (c == 0) {
                int32_t top[5] = {-1, -1, -1, -1, -1};
                double want = ref_processed(row, &sps[c], o.toks[k], top, 5);
                CHECKF(fabs(o.lp[k] - want) < 1e-4, "processed logprob %g, want %g", (double)o.lp[k], want);
                truncated += o.n_top[k] < 5;
                for (int i = 0; i < o.n_top[k]; i++) CHECK(o.top[k][i].token == top[i]);
            } else {
                double want = ref_logprob(m, all, 7 + k, o.toks[k]);
                CHECKF(fabs(o.lp[k] - want) < 1e-5, "greedy processed logprob %g, want %g", (double)o.lp[k], want);
                CHECK(o.n_top[k] == 5);
            }
            all[7 + k] = o.toks[k];
        }
        if (c == 0) CHECKF(truncated > 0, "the filters never cut the distribution below 5 tokens");
    }
    pith_engine_free(e);
    m->ops->destroy(m);
}

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static int tokens_of(out *o) {
    pthread_mutex_lock(&o->lock);
    int n = o->n;
    pthread_mutex_unlock(&o->lock);
    return n;
}

static bool all_final(out *o, int n) {
    for (int i = 0; i < n; i++) {
        pthread_mutex_lock(&o[i].lock);
        bool done = o[i].n_final == 1;
        pthread_mutex_unlock(&o[i].lock);
        if (!done) return false;
    }
    return true;
}

static void wait_final(out *o, int n) {
    for (int guard = 0; guard < 20000 && !all_final(o, n); guard++) sleep_ms(1);
    CHECK(all_final(o, n));
}

enum { NR = 6, LEN = 40, GEN = 300 };

static void submit_batch(pith_engine *e, int32_t p[NR][LEN], out *o, int first) {
    for (int k = first; k < first + NR / 2; k++) {
        fill(p[k], LEN, 100u + (uint32_t)k);
        out_init(&o[k]);
        pith_request r = request(p[k], LEN, GEN, &o[k]);
        submit(e, &r);
    }
}

static void test_admin(void) {
    pith_model *m = fake_model_new(V, 1, 0), *m2 = fake_model_new(V, 1, 0);
    pith_err err;
    pith_engine *e = NULL;
    CHECKF(pith_engine_create(m, NULL, &(pith_engine_options){.block_size = 4, .kv_blocks = 1024}, &e, &err) == 0, "%s", err.msg);
    CHECK(pith_engine_start(e, &err) == 0);
    int32_t p[NR][LEN];
    out o[NR];

    /* keep: nothing moves while paused; resume finishes everything as if never paused. */
    submit_batch(e, p, o, 0);
    /* All three started (a request not yet admitted at the pause is held, and would not drain). */
    while (tokens_of(&o[0]) < 1 || tokens_of(&o[1]) < 1 || tokens_of(&o[2]) < 1) sleep_ms(1);
    CHECK(pith_engine_pause(e, PITH_PAUSE_KEEP, 0, &err) == 0 && pith_engine_paused(e));
    submit_batch(e, p, o, 3); /* held */
    int before = tokens_of(&o[0]);
    sleep_ms(30);
    CHECK(tokens_of(&o[0]) == before && tokens_of(&o[3]) == 0);
    /* drain: the running ones finish, the held ones do not start. */
    CHECK(pith_engine_pause(e, PITH_PAUSE_DRAIN, 30, &err) == 0);
    CHECK(all_final(o, 3) && tokens_of(&o[3]) == 0);
    CHECK(pith_engine_swap_model(e, m2, PITH_SWAP_DRAIN, &(pith_model *){NULL}, &err) == 0);
    CHECK(pith_engine_weight_generation(e) == 1);
    CHECK(pith_engine_resume(e, &err) == 0 && !pith_engine_paused(e));
    wait_final(o, NR);
    for (int k = 0; k < NR; k++) {
        CHECKF(o[k].n == GEN && greedy_matches(p[k], LEN, &o[k]) && !o[k].mixed_gen && o[k].n_restart == 0,
               "request %d after keep / drain / swap: %d tokens", k, o[k].n);
        CHECK(o[k].gen_final == (k < 3 ? 0u : 1u));
    }

    pith_model *old = NULL;
    submit_batch(e, p, o, 3);
    CHECK(pith_engine_pause(e, PITH_PAUSE_KEEP, 0, &err) == 0);
    /* sleep: memory released, requests kept; wake: they finish unchanged. */
    CHECK(pith_engine_sleep(e, &err) == 0 && pith_engine_asleep(e));
    pith_engine_stats st;
    pith_engine_get_stats(e, &st);
    CHECK(st.mem_bytes == 0 && st.asleep && st.running == 0);
    CHECK(pith_engine_resume(e, &err) != 0);
    CHECK(pith_engine_wake(e, NULL, &err) == 0 && !pith_engine_asleep(e) && !pith_engine_paused(e));
    wait_final(o + 3, 3);
    for (int k = 3; k < NR; k++) CHECKF(o[k].n == GEN && greedy_matches(p[k], LEN, &o[k]), "request %d after sleep", k);
    (void)old;

    /* abort: everything live is cancelled, then new requests are held until resumed. */
    submit_batch(e, p, o, 0);
    CHECK(pith_engine_pause(e, PITH_PAUSE_ABORT, 30, &err) == 0);
    CHECK(all_final(o, 3));
    for (int k = 0; k < 3; k++) CHECK(o[k].why == PITH_FINISH_CANCELLED || o[k].n == GEN);
    submit_batch(e, p, o, 3);
    CHECK(pith_engine_abort_all(e) == 3);
    CHECK(all_final(o + 3, 3) && o[3].why == PITH_FINISH_CANCELLED && o[3].n == 0);
    CHECK(pith_engine_resume(e, &err) == 0);
    pith_engine_free(e);
    m->ops->destroy(m);
    m2->ops->destroy(m2);
}

/* Without the thread (deterministic: what runs is what this test steps): a swap in drain mode refused
 * while requests run; in recompute mode they restart on the new weights, once, and finish as an uncached
 * run would; a drain pause steps the engine itself. */
static void test_admin_sync(void) {
    pith_model *m = fake_model_new(V, 1, 0), *m2 = fake_model_new(V, 1, 0);
    pith_err err;
    pith_engine *e = NULL;
    CHECKF(pith_engine_create(m, NULL, &(pith_engine_options){.block_size = 4, .kv_blocks = 512}, &e, &err) == 0, "%s", err.msg);
    int32_t p[NR][LEN];
    out o[NR];
    submit_batch(e, p, o, 0);
    for (int i = 0; i < 4; i++) pith_engine_step(e, &err);
    CHECK(tokens_of(&o[0]) == 4 && tokens_of(&o[2]) == 4); /* the first step prefills and samples */
    pith_model *old = NULL;
    CHECK(pith_engine_swap_model(e, m2, PITH_SWAP_DRAIN, &old, &err) != 0 && strstr(err.msg, "pause")); /* not paused */
    CHECK(pith_engine_pause(e, PITH_PAUSE_KEEP, 0, &err) == 0);
    CHECK(pith_engine_swap_model(e, m2, PITH_SWAP_DRAIN, &old, &err) != 0 && old == NULL && strstr(err.msg, "running"));
    CHECK(pith_engine_swap_model(e, m2, PITH_SWAP_RECOMPUTE, &old, &err) == 0 && old == m);
    for (int k = 0; k < 3; k++) CHECK(o[k].n_restart == 1 && o[k].n == 0 && o[k].gen_last == 1);
    pith_engine_stats st;
    pith_engine_get_stats(e, &st);
    CHECK(st.requests_restarted == 3 && st.weight_generation == 1 && st.paused);
    CHECK(pith_engine_resume(e, &err) == 0);
    run_checked(e);
    for (int k = 0; k < 3; k++)
        CHECKF(o[k].n == GEN && greedy_matches(p[k], LEN, &o[k]) && !o[k].mixed_gen && o[k].gen_final == 1 && o[k].n_restart == 1,
               "recomputed request %d: %d tokens", k, o[k].n);
    /* A drain pause with no thread steps the engine until the running requests are done. */
    submit_batch(e, p, o, 3);
    pith_engine_step(e, &err);
    CHECK(pith_engine_pause(e, PITH_PAUSE_DRAIN, 0, &err) == 0);
    CHECK(all_final(o + 3, 3) && o[3].n == GEN && greedy_matches(p[3], LEN, &o[3]));
    CHECK(pith_engine_resume(e, &err) == 0);
    pith_engine_free(e);
    m->ops->destroy(m);
    m2->ops->destroy(m2);
}

int main(void) {
    test_admin_sync();
    test_prompt_logprobs();
    test_processed_logprobs();
    test_admin();
    return check_summary("test_engine_rl");
}
