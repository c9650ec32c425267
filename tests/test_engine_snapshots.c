/* Prefix caching on models with recurrent state (mem.h: state snapshots), over a fake hybrid model
 * that declares a FULL group next to a RECURRENT one (Qwen3.5-like: attention plus linear attention)
 * and a pure RECURRENT one (Mamba-like). The fake model's output depends on its recurrent state, so a
 * wrong or stale snapshot changes the tokens, which fake_next_for predicts without any cache.
 *
 * Checks each point of the snapshot policy: a chat's next turn resumes at the end of the last reply; a
 * shared system prompt hits from the third request on (the second one finds where it diverges); long
 * prompts are snapshot every interval and prefill chunks end there; preemption; an LRU of one snapshot;
 * snapshots off. Prints the recompute table of docs/engine.md: prompt tokens computed per request with
 * caching on and off, on a multi-turn chat and on a shared-system-prompt workload. */
#include <stdint.h>

#include "check.h"
#include "core/engine_internal.h"
#include "engine_fake_model.h"

enum { V = 97, BS = 16 };

typedef struct out {
    int32_t toks[256];
    int n, n_final;
    pith_finish_reason why;
    pith_usage usage;
} out;

static void collect(const pith_token_event *ev, void *user) {
    out *o = user;
    if (ev->final) {
        o->n_final++;
        o->why = ev->finish_reason;
        o->usage = ev->usage;
    } else if (o->n < 256) {
        o->toks[o->n++] = ev->token;
    }
}

static void fill(int32_t *t, int n, uint32_t seed) {
    for (int i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        t[i] = (int32_t)((seed >> 16) % V);
    }
}

static void step_checked(pith_engine *e) {
    pith_err err;
    CHECKF(pith_engine_step(e, &err) == 0, "%s (%s)", err.msg, fake_of(e->model)->first_violation);
    CHECKF(engine_check(e, &err) == 0, "%s", err.msg);
}

static bool matches(const fake_state *fs, const int32_t *prompt, int n_prompt, const out *o) {
    static int32_t all[8192];
    memcpy(all, prompt, (size_t)n_prompt * sizeof *all);
    for (int i = 0; i < o->n; i++) {
        if (o->toks[i] != fake_next_for(fs, all, n_prompt + i, V)) return false;
        all[n_prompt + i] = o->toks[i];
    }
    return true;
}

/* Runs one greedy request to its end; returns the prompt tokens it computed (the model's token count
 * grows by computed prompt tokens + generated tokens - 1: the last sampled token is never computed). */
static int run_one(pith_engine *e, const int32_t *prompt, int n, int max_tokens, out *o) {
    memset(o, 0, sizeof *o);
    pith_request r = {.prompt = prompt, .n_prompt = n, .sampling = pith_sampling_defaults(),
                      .max_tokens = max_tokens, .on_token = collect, .user = o, .ignore_eos = true};
    r.sampling.temperature = 0;
    pith_err err;
    uint64_t before = fake_of(e->model)->tokens;
    CHECKF(pith_engine_submit(e, &r, NULL, &err) == 0, "%s", err.msg);
    while (pith_engine_has_work(e)) step_checked(e);
    CHECK(o->n_final == 1 && o->n == max_tokens && matches(fake_of(e->model), prompt, n, o));
    return (int)(fake_of(e->model)->tokens - before) - (o->n - 1);
}

static pith_model *hybrid(void) {
    fake_group_def d[2] = {{PITH_MEM_FULL, 0, 1}, {PITH_MEM_RECURRENT, 0, 3}};
    return fake_model_new_spec(V, 0, d, 2, 1);
}

static pith_engine *engine(pith_model *m, pith_engine_options o) {
    pith_engine *e = NULL;
    pith_err err;
    if (!o.block_size) o.block_size = BS;
    if (!o.max_num_seqs) o.max_num_seqs = 4;
    if (!o.max_seq_len) o.max_seq_len = 4096;
    CHECKF(pith_engine_create(m, NULL, &o, &e, &err) == 0, "%s", err.msg);
    return e;
}

/* A chat: each turn's prompt is the whole history (the last prompt, the reply, a new message). With
 * snapshots each turn computes only what follows the last block boundary of the previous reply.
 * Returns prompt tokens computed over all turns; fills per-turn counts. */
static int chat(bool cache, int turns, int *per_turn, int *prompt_len) {
    pith_model *m = hybrid();
    pith_engine *e = engine(m, (pith_engine_options){.no_prefix_cache = !cache, .snapshot_interval = -1});
    static int32_t hist[8192];
    int n = 0, total = 0;
    for (int t = 0; t < turns && e; t++) {
        fill(&hist[n], 37, 100u + (uint32_t)t); /* the user's message, in its template */
        n += 37;
        out o;
        int computed = run_one(e, hist, n, 24, &o);
        per_turn[t] = computed;
        prompt_len[t] = n;
        total += computed;
        if (cache && t > 0) {
            /* the previous turn ended at n - 37 - 1 computed tokens: its last block boundary */
            int resume = (n - 37 - 1) / BS * BS;
            CHECKF(o.usage.cached_tokens == resume && computed == n - resume,
                   "turn %d: %d cached, %d computed of %d (expected resume at %d)", t, o.usage.cached_tokens, computed, n, resume);
        }
        if (!cache) CHECK(computed == n && o.usage.cached_tokens == 0);
        memcpy(&hist[n], o.toks, (size_t)o.n * sizeof *hist);
        n += o.n;
    }
    pith_engine_free(e);
    m->ops->destroy(m);
    return total;
}

/* Requests that share a system prompt of S tokens, each with its own question. The first computes
 * everything; the second finds in the FULL group where the prompts diverge and snapshots there; the
 * rest resume there. */
static int shared_system(bool cache, int n_req, int S, int *per_req) {
    pith_model *m = hybrid();
    pith_engine *e = engine(m, (pith_engine_options){.no_prefix_cache = !cache, .snapshot_interval = -1});
    static int32_t p[4096];
    fill(p, S, 7);
    int total = 0;
    for (int i = 0; i < n_req && e; i++) {
        fill(&p[S], 29, 1000u + (uint32_t)i);
        out o;
        int computed = run_one(e, p, S + 29, 8, &o);
        per_req[i] = computed;
        total += computed;
        int expect_hit = cache && i >= 2 ? S / BS * BS : 0;
        CHECKF(o.usage.cached_tokens == expect_hit, "request %d: %d cached, expected %d", i, o.usage.cached_tokens, expect_hit);
    }
    pith_engine_stats st;
    if (e) {
        pith_engine_get_stats(e, &st);
        if (cache) CHECK(st.state_restores == (uint64_t)(n_req - 2) && st.state_snapshots >= 2);
    }
    pith_engine_free(e);
    m->ops->destroy(m);
    return total;
}

static void test_recompute_tables(void) {
    enum { TURNS = 5, REQS = 6, SYS = 300 };
    int on[TURNS], off[TURNS], len[TURNS];
    int tot_on = chat(true, TURNS, on, len), tot_off = chat(false, TURNS, off, len);
    printf("multi-turn chat (37-token messages, 24-token replies, block %d), prompt tokens computed per turn:\n", BS);
    printf("  turn | prompt | cache off | cache on\n");
    for (int t = 0; t < TURNS; t++) printf("  %4d | %6d | %9d | %8d\n", t + 1, len[t], off[t], on[t]);
    printf("  all  |        | %9d | %8d\n", tot_off, tot_on);
    CHECK(tot_on < tot_off / 3);

    int s_on[REQS], s_off[REQS];
    int t_on = shared_system(true, REQS, SYS, s_on), t_off = shared_system(false, REQS, SYS, s_off);
    printf("shared %d-token system prompt + 29-token questions, prompt tokens computed per request:\n", SYS);
    printf("  request | cache off | cache on\n");
    for (int i = 0; i < REQS; i++) printf("  %7d | %9d | %8d\n", i + 1, s_off[i], s_on[i]);
    printf("  all     | %9d | %8d\n", t_off, t_on);
    CHECK(t_on < t_off);
}

/* Long prompts are snapshot every interval, prefill chunks end on those points, and a later prompt that
 * shares the first 100 tokens resumes at the last interval point before 100. */
static void test_interval_and_chunks(void) {
    pith_model *m = hybrid();
    pith_engine *e = engine(m, (pith_engine_options){.snapshot_interval = 32, .max_batch_tokens = 512});
    int32_t p[200], q[150];
    fill(p, 200, 3);
    out o;
    uint64_t calls = fake_of(m)->calls;
    CHECK(run_one(e, p, 200, 4, &o) == 200);
    /* prefill chunks end at 32, 64, ..., 192 (also the prompt point): 6 chunks, then the last 8 tokens,
     * then 3 decode steps */
    CHECKF(fake_of(m)->calls - calls == 6 + 1 + 3, "%llu forward calls", (unsigned long long)(fake_of(m)->calls - calls));
    memcpy(q, p, 100 * sizeof *q);
    fill(&q[100], 50, 4);
    CHECK(run_one(e, q, 150, 4, &o) == 150 - 96 && o.usage.cached_tokens == 96);
    /* the same prompt again: resumes at its prompt point, 192 */
    CHECK(run_one(e, p, 200, 4, &o) == 8 && o.usage.cached_tokens == 192);
    pith_engine_free(e);
    m->ops->destroy(m);
}

/* Snapshots have their own LRU: with room for one, the newest point wins; with none, no hits at all. */
static void test_budget(void) {
    for (int room = 0; room <= 1; room++) {
        pith_model *m = hybrid();
        pith_engine_options o = {.snapshot_interval = -1,
                                 .snapshot_mem_bytes = room ? sizeof(fake_rstate) : SIZE_MAX};
        pith_engine *e = engine(m, o);
        if (!e) continue;
        pith_engine_stats st;
        pith_engine_get_stats(e, &st);
        CHECK(st.mem[1].snapshot_units == room && st.mem[1].units_total == 4 + room);
        int32_t a[80], b[80];
        fill(a, 80, 5);
        fill(b, 80, 6);
        out o1;
        run_one(e, a, 80, 3, &o1);
        run_one(e, b, 80, 3, &o1); /* its snapshots evict a's */
        CHECK(run_one(e, a, 80, 3, &o1) == 80 && o1.usage.cached_tokens == 0);
        /* that run left a snapshot at 64 (its divergence and prompt point) where there is room */
        CHECK(run_one(e, a, 80, 3, &o1) == (room ? 80 - 64 : 80));
        pith_engine_get_stats(e, &st);
        CHECK(st.mem[1].units_cached == room && st.mem[1].units_free == 4);
        pith_engine_free(e);
        m->ops->destroy(m);
    }
}

/* Many requests sharing prefixes on a pool small enough to preempt: outputs still match, every step's
 * integrity check holds, and preempted sequences resume from their own snapshots. Pure recurrent
 * models too (no FULL group to find divergence points: prompt ends, intervals and decode only). */
static void test_preemption_mix(void) {
    for (int kind = 0; kind < 2; kind++) {
        fake_group_def dh[2] = {{PITH_MEM_FULL, 0, 1}, {PITH_MEM_RECURRENT, 0, 2}};
        fake_group_def dr[1] = {{PITH_MEM_RECURRENT, 0, 2}};
        pith_model *m = kind ? fake_model_new_spec(V, 0, dr, 1, 0) : fake_model_new_spec(V, 0, dh, 2, 0);
        pith_engine_options o = {.block_size = 8, .max_num_seqs = 6, .max_batch_tokens = 40, .kv_blocks = 40,
                                 .snapshot_interval = 24, .max_seq_len = 300, .snapshot_mem_bytes = 7 * sizeof(fake_rstate)};
        pith_engine *e = NULL;
        pith_err err;
        CHECKF(pith_engine_create(m, NULL, &o, &e, &err) == 0, "%s", err.msg);
        if (!e) continue;
        enum { N = 24 };
        static int32_t prompts[N][120];
        static out outs[N];
        int lens[N];
        int32_t base[120];
        fill(base, 120, 9);
        for (int i = 0; i < N; i++) {
            lens[i] = 40 + (i * 37) % 80;
            memcpy(prompts[i], base, sizeof base);
            fill(&prompts[i][(i % 3) * 20 + 10], lens[i] - ((i % 3) * 20 + 10), 50u + (uint32_t)i);
            memset(&outs[i], 0, sizeof outs[i]);
            pith_request r = {.prompt = prompts[i], .n_prompt = lens[i], .sampling = pith_sampling_defaults(),
                              .max_tokens = 30 + i % 5, .on_token = collect, .user = &outs[i], .ignore_eos = true};
            r.sampling.temperature = 0;
            CHECKF(pith_engine_submit(e, &r, NULL, &err) == 0, "%s", err.msg);
            if (i % 4 == 3) step_checked(e);
        }
        while (pith_engine_has_work(e)) step_checked(e);
        for (int i = 0; i < N; i++)
            CHECKF(outs[i].n_final == 1 && outs[i].n == 30 + i % 5 && matches(fake_of(m), prompts[i], lens[i], &outs[i]),
                   "kind %d request %d", kind, i);
        pith_engine_stats st;
        pith_engine_get_stats(e, &st);
        printf("%s: %llu preemptions, %llu/%llu prompt tokens from the cache, %llu snapshots, %llu restores\n",
               kind ? "recurrent only" : "hybrid", (unsigned long long)st.preemptions,
               (unsigned long long)st.prefix_cache_hits, (unsigned long long)st.prefix_cache_queries,
               (unsigned long long)st.state_snapshots, (unsigned long long)st.state_restores);
        CHECK(st.state_restores > 0);
        if (kind == 0) CHECK(st.preemptions > 0); /* a recurrent-only model has no pool to run out of */
        CHECK(fake_of(m)->violations == 0);
        pith_engine_free(e);
        m->ops->destroy(m);
    }
}

int main(void) {
    test_recompute_tables();
    test_interval_and_chunks();
    test_budget();
    test_preemption_mix();
    return check_summary("test_engine_snapshots");
}
