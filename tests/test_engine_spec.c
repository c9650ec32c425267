/* Speculative decoding in the engine (spec.h), over fake models (engine_fake_model.h) whose next token
 * is a hash of the memory they read back, so a draft token verified against stale or misplaced K/V
 * changes the output. A custom draft source plays oracle: it knows the true greedy continuation
 * (fake_next_for) and proposes it with planted errors, so every acceptance length occurs.
 *
 * Checks: greedy outputs identical to decoding without speculation, alone and batched, with preemption
 * (a tiny pool), prefix-cache hits, sliding windows, stop ids, max_tokens and the length limit inside a
 * draft; sampled outputs with a seed identical too (the fake logits do not depend on the batch); the
 * counters; the integrity check after every step; no drafts on a model with recurrent state; the n-gram
 * lookup itself. */
#include <stdint.h>

#include "check.h"
#include "core/engine_internal.h"
#include "core/spec.h"
#include "engine_fake_model.h"

enum { V = 61, MAXT = 128, MAXR = 24 };

typedef struct out {
    int32_t toks[MAXT];
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
    } else if (o->n < MAXT) {
        o->toks[o->n++] = ev->token;
    }
}

static void fill(int32_t *t, int n, uint32_t seed) {
    for (int i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        t[i] = (int32_t)((seed >> 16) % V);
    }
}

/* The oracle: the true greedy continuation, with one planted error at a pseudo-random position (or
 * none), so drafts are accepted in full, in part, or not at all. */
typedef struct oracle {
    fake_state *fs;
    uint64_t calls;
    int proposed;
} oracle;

static int oracle_draft(void *user, uint64_t id, const int32_t *tokens, int n, int32_t *draft, int max) {
    oracle *o = user;
    o->calls++;
    static int32_t all[4096];
    if (n + max > 4096) return 0;
    memcpy(all, tokens, (size_t)n * sizeof *all);
    uint64_t h = fake_mix(id * 31 + (uint64_t)n);
    int wrong = (int)(h % (uint64_t)(max + 2)); /* max + 1: no error */
    for (int i = 0; i < max; i++) {
        int32_t t = fake_next_for(o->fs, all, n + i, V);
        if (i == wrong) t = (t + 1) % V;
        all[n + i] = t;
        draft[i] = t;
    }
    o->proposed += max;
    return (h >> 20) % 7 == 0 ? 0 : max; /* sometimes no draft at all */
}

typedef struct req {
    int32_t prompt[400];
    int n_prompt, max_tokens;
    int32_t stop_id;
    bool sampled;
} req;

static void make_reqs(req *r, int n, uint32_t seed) {
    int32_t shared[64];
    fill(shared, 64, seed);
    for (int i = 0; i < n; i++) {
        r[i].n_prompt = 5 + (int)((seed + (uint32_t)i * 37u) % 150u);
        memcpy(r[i].prompt, shared, sizeof shared); /* a shared head: cache hits */
        if (r[i].n_prompt > 64) fill(&r[i].prompt[i % 2 ? 40 : 64], r[i].n_prompt - (i % 2 ? 40 : 64), seed * 7u + (uint32_t)i);
        r[i].max_tokens = 10 + (i * 13) % 60;
        r[i].stop_id = i % 4 == 1 ? (int32_t)(i % V) : -1;
        r[i].sampled = i % 3 == 2;
    }
}

/* Runs the requests (all at once, or one after another) on a fresh model of this spec; fills outs and
 * the stats. */
static bool no_checkpoints; /* run() makes models that cannot roll their state back */

static void run(const fake_group_def *defs, int n_groups, pith_engine_options o, const req *r, int n, bool together,
                out *outs, pith_engine_stats *st, oracle *orc) {
    pith_model *m = fake_model_new_spec(V, 0, defs, n_groups, 1);
    m->state_checkpoints = !no_checkpoints;
    if (orc) {
        orc->fs = fake_of(m);
        o.spec_user = orc;
    }
    pith_engine *e = NULL;
    pith_err err;
    CHECKF(pith_engine_create(m, NULL, &o, &e, &err) == 0, "%s", err.msg);
    if (!e) return;
    for (int i = 0; i < n; i++) {
        memset(&outs[i], 0, sizeof outs[i]);
        pith_request q = {.prompt = r[i].prompt, .n_prompt = r[i].n_prompt, .sampling = pith_sampling_defaults(),
                          .max_tokens = r[i].max_tokens, .stop_ids = &r[i].stop_id, .n_stop_ids = r[i].stop_id >= 0,
                          .on_token = collect, .user = &outs[i], .ignore_eos = true};
        if (!r[i].sampled) q.sampling.temperature = 0;
        q.sampling.seed = 1000u + (uint64_t)i;
        CHECKF(pith_engine_submit(e, &q, NULL, &err) == 0, "%s", err.msg);
        while (!together && pith_engine_has_work(e)) {
            CHECKF(pith_engine_step(e, &err) == 0, "%s (%s)", err.msg, fake_of(m)->first_violation);
            CHECKF(engine_check(e, &err) == 0, "%s", err.msg);
        }
    }
    while (pith_engine_has_work(e)) {
        CHECKF(pith_engine_step(e, &err) == 0, "%s (%s)", err.msg, fake_of(m)->first_violation);
        CHECKF(engine_check(e, &err) == 0, "%s", err.msg);
    }
    CHECKF(fake_of(m)->violations == 0, "%s", fake_of(m)->first_violation);
    pith_engine_get_stats(e, st);
    pith_engine_free(e);
    m->ops->destroy(m);
}

static void test_identity(void) {
    fake_group_def full[1] = {{PITH_MEM_FULL, 0, 2}};
    fake_group_def swa[2] = {{PITH_MEM_FULL, 0, 1}, {PITH_MEM_WINDOW, 19, 2}};
    fake_group_def hyb[3] = {{PITH_MEM_FULL, 0, 1}, {PITH_MEM_WINDOW, 13, 1}, {PITH_MEM_RECURRENT, 0, 2}};
    fake_group_def rec[1] = {{PITH_MEM_RECURRENT, 0, 2}};
    const fake_group_def *specs[4] = {full, swa, hyb, rec};
    const int n_groups[4] = {1, 2, 3, 1};
    static req reqs[MAXR];
    static out base[MAXR], got[MAXR];
    make_reqs(reqs, MAXR, 3);
    for (int sp = 0; sp < 4; sp++) {
        for (int cfg = 0; cfg < 4; cfg++) {
            /* 0: roomy; 1: a pool so small that sequences are preempted; 2: block size 1, budget 7;
             * 3: a long draft and many sequences allowed to speculate */
            pith_engine_options o = {.block_size = cfg == 2 ? 1 : 8, .max_num_seqs = 6, .max_seq_len = 240,
                                     .max_batch_tokens = cfg == 2 ? 7 : 64, .kv_blocks = cfg == 1 ? 40 : cfg == 2 ? 600 : 0};
            for (int together = 0; together < 2; together++) {
                pith_engine_stats st0, st;
                pith_engine_options o0 = o;
                o0.spec_type = PITH_SPEC_OFF;
                run(specs[sp], n_groups[sp], o0, reqs, MAXR, true, base, &st0, NULL);
                if (!together) run(specs[sp], n_groups[sp], o0, reqs, MAXR, false, got, &st0, NULL); /* its step count */
                oracle orc = {0};
                o.spec_type = PITH_SPEC_CUSTOM;
                o.spec_draft = oracle_draft;
                o.spec_max_draft = cfg == 3 ? 16 : 5;
                o.spec_max_seqs = cfg == 3 ? 6 : 3;
                run(specs[sp], n_groups[sp], o, reqs, MAXR, together, got, &st, &orc);
                for (int i = 0; i < MAXR; i++)
                    CHECKF(got[i].n_final == 1 && got[i].n == base[i].n && got[i].why == base[i].why &&
                               !memcmp(got[i].toks, base[i].toks, (size_t)base[i].n * sizeof got[i].toks[0]),
                           "spec %d cfg %d together %d: request %d differs (%d vs %d tokens)", sp, cfg, together, i,
                           got[i].n, base[i].n);
                uint64_t drafted = 0, accepted = 0;
                for (int i = 0; i < MAXR; i++) drafted += (uint64_t)got[i].usage.draft_tokens, accepted += (uint64_t)got[i].usage.accepted_tokens;
                CHECK(st.spec_draft_tokens >= drafted && st.spec_accepted_tokens >= accepted && accepted <= drafted);
                CHECK(st.spec_draft_tokens > 0 && st.spec_accepted_tokens > 0 && st.spec_accepted_tokens < st.spec_draft_tokens);
                /* accepted drafts save forward passes where few sequences decode */
                if (!together || cfg == 3) CHECK(st.steps < st0.steps);
                if (cfg == 1 && together && sp < 3) CHECK(st.preemptions > 0); /* recurrent-only: no pool */
                printf("spec %d cfg %d %s: %llu steps (%llu without), %llu/%llu draft tokens accepted, %llu preemptions, "
                       "%llu/%llu cached\n", sp, cfg, together ? "together" : "one by one", (unsigned long long)st.steps,
                       (unsigned long long)st0.steps, (unsigned long long)st.spec_accepted_tokens,
                       (unsigned long long)st.spec_draft_tokens, (unsigned long long)st.preemptions,
                       (unsigned long long)st.prefix_cache_hits, (unsigned long long)st.prefix_cache_queries);
            }
        }
    }
}

/* A model with recurrent state that cannot take checkpoints never drafts, and still decodes. */
static void test_recurrent_off(void) {
    no_checkpoints = true;
    fake_group_def hyb[2] = {{PITH_MEM_FULL, 0, 1}, {PITH_MEM_RECURRENT, 0, 1}};
    static req reqs[4];
    static out got[4];
    make_reqs(reqs, 4, 9);
    oracle orc = {0};
    pith_engine_options o = {.block_size = 8, .max_num_seqs = 4, .max_seq_len = 240, .spec_type = PITH_SPEC_CUSTOM,
                             .spec_draft = oracle_draft};
    pith_engine_stats st;
    run(hyb, 2, o, reqs, 4, true, got, &st, &orc);
    CHECK(st.spec_draft_tokens == 0 && orc.calls == 0);
    for (int i = 0; i < 4; i++) CHECK(got[i].n_final == 1 && got[i].n > 0);
    no_checkpoints = false;
}

static void test_ngram(void) {
    int32_t t[] = {1, 2, 3, 4, 5, 9, 9, 1, 2, 3, 4, 6, 7, 2, 3, 4};
    int32_t d[8];
    /* "2 3 4" last occurred at 8..10 (4-gram "4 2 3 4"? no): followed by 6 7 2 3 4 */
    int k = spec_ngram(t, 16, d, 8);
    CHECK(k == 5 && d[0] == 6 && d[1] == 7 && d[4] == 4);
    CHECK(spec_ngram(t, 16, d, 2) == 2 && d[0] == 6 && d[1] == 7);
    int32_t u[] = {5, 6, 7, 8};
    CHECK(spec_ngram(u, 4, d, 8) == 0);
    int32_t w[] = {3, 3, 3, 3, 3};
    k = spec_ngram(w, 5, d, 8); /* "3 3 3 3" at 0: followed by one 3 */
    CHECK(k == 1 && d[0] == 3);
    /* the engine's n-gram source on a repetitive prompt drafts and accepts */
    fake_group_def full[1] = {{PITH_MEM_FULL, 0, 1}};
    static req r[1];
    /* every "11 v" pair, each followed by the same four tokens: whatever the model samples after an 11,
     * the lookup has a draft */
    for (int v = 0; v < V; v++) {
        int32_t pat[6] = {11, v, 20, 21, 22, 23};
        memcpy(&r[0].prompt[6 * v], pat, sizeof pat);
    }
    r[0].n_prompt = 6 * V;
    r[0].max_tokens = 40;
    r[0].stop_id = -1;
    static out got[1], base[1];
    pith_engine_options o = {.block_size = 8, .max_num_seqs = 2, .max_seq_len = 480};
    pith_engine_stats st;
    run(full, 1, o, r, 1, true, base, &st, NULL);
    o.spec_type = PITH_SPEC_NGRAM;
    run(full, 1, o, r, 1, true, got, &st, NULL);
    CHECK(got[0].n == base[0].n && !memcmp(got[0].toks, base[0].toks, sizeof got[0].toks));
    CHECK(st.spec_draft_tokens > 0);
    printf("n-gram on a repetitive prompt: %llu/%llu draft tokens accepted\n", (unsigned long long)st.spec_accepted_tokens,
           (unsigned long long)st.spec_draft_tokens);
}

static void test_options(void) {
    fake_group_def full[1] = {{PITH_MEM_FULL, 0, 1}};
    pith_model *m = fake_model_new_spec(V, 0, full, 1, 0);
    pith_engine *e = NULL;
    pith_err err;
    pith_engine_options o = {.spec_type = PITH_SPEC_CUSTOM};
    CHECK(pith_engine_create(m, NULL, &o, &e, &err) == -1 && strstr(err.msg, "draft function"));
    o = (pith_engine_options){.spec_type = PITH_SPEC_NGRAM, .spec_max_draft = 17};
    CHECK(pith_engine_create(m, NULL, &o, &e, &err) == -1 && strstr(err.msg, "spec_max_draft"));
    o.spec_max_draft = 3;
    CHECK(pith_engine_create(m, NULL, &o, &e, &err) == 0);
    CHECK(fake_of(m)->limits.max_logits == 64 + ENGINE_PROMPT_ROWS + 2 * 3); /* rows for the drafts: spec_max_seqs (default 2) x 3 */
    pith_engine_free(e);
    m->ops->destroy(m);
}

int main(void) {
    test_ngram();
    test_identity();
    test_recurrent_off();
    test_options();
    return check_summary("test_engine_spec");
}
