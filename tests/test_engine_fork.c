/* Requests with n > 1 (pith_request.n): the siblings share one prefill and fork from it. Over fake
 * models with every kind of memory spec (engine_fake_model.h), checks that the prompt is computed once
 * (the model's token count), that sibling i's sampled output equals the same request alone with seed +
 * i, ids and event indices, the integrity check after every step, and the fallbacks: no room to fork
 * (fewer running places or blocks than siblings), a sibling cancelled while it waits, the first sibling
 * cancelled before its prompt is done. */
#include <stdint.h>

#include "check.h"
#include "core/engine_internal.h"
#include "engine_fake_model.h"

enum { V = 89, MAXN = 16, MAXT = 64 };

typedef struct outs {
    int32_t toks[MAXN][MAXT];
    int n[MAXN], n_final[MAXN];
    uint64_t id[MAXN];
    pith_finish_reason why[MAXN];
    int bad_index;
} outs;

static void collect(const pith_token_event *ev, void *user) {
    outs *o = user;
    if (ev->index < 0 || ev->index >= MAXN) {
        o->bad_index++;
        return;
    }
    int i = ev->index;
    o->id[i] = ev->request_id;
    if (ev->final) {
        o->n_final[i]++;
        o->why[i] = ev->finish_reason;
    } else if (o->n[i] < MAXT) {
        o->toks[i][o->n[i]++] = ev->token;
    }
}

static void fill(int32_t *t, int n, uint32_t seed) {
    for (int i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        t[i] = (int32_t)((seed >> 16) % V);
    }
}

static pith_request sampled(const int32_t *prompt, int n_prompt, int n, int max_tokens, uint64_t seed, outs *o) {
    pith_request r = {.prompt = prompt, .n_prompt = n_prompt, .sampling = pith_sampling_defaults(), .n = n,
                      .max_tokens = max_tokens, .on_token = collect, .user = o, .ignore_eos = true};
    r.sampling.temperature = 1.0f;
    r.sampling.top_k = 0;
    r.sampling.top_p = 1.0f;
    r.sampling.min_p = 0;
    r.sampling.seed = seed;
    return r;
}

static void run_all(pith_engine *e) {
    pith_err err;
    while (pith_engine_has_work(e)) {
        CHECKF(pith_engine_step(e, &err) == 0, "%s (%s)", err.msg, fake_of(e->model)->first_violation);
        CHECKF(engine_check(e, &err) == 0, "%s", err.msg);
    }
}

static pith_model *model_of(int kind) {
    fake_group_def full[1] = {{PITH_MEM_FULL, 0, 2}};
    fake_group_def swa[2] = {{PITH_MEM_FULL, 0, 1}, {PITH_MEM_WINDOW, 21, 2}};
    fake_group_def hyb[2] = {{PITH_MEM_FULL, 0, 1}, {PITH_MEM_RECURRENT, 0, 3}};
    fake_group_def rec[1] = {{PITH_MEM_RECURRENT, 0, 2}};
    switch (kind) {
    case 0: return fake_model_new_spec(V, 0, full, 1, 0);
    case 1: return fake_model_new_spec(V, 0, swa, 2, 0);
    case 2: return fake_model_new_spec(V, 0, hyb, 2, 1);
    default: return fake_model_new_spec(V, 0, rec, 1, 0);
    }
}

static const char *kind_name(int kind) {
    static const char *names[] = {"full", "full+window", "full+recurrent", "recurrent"};
    return names[kind];
}

/* The expected output of sibling i: the request alone (n = 1) with seed + i, in an engine of its own. */
static void alone(int kind, const int32_t *prompt, int n_prompt, int max_tokens, uint64_t seed, outs *ref, int n) {
    memset(ref, 0, sizeof *ref);
    for (int i = 0; i < n; i++) {
        pith_model *m = model_of(kind);
        pith_engine *e = NULL;
        pith_err err;
        pith_engine_options o = {.block_size = 8, .max_num_seqs = 4, .max_seq_len = 1024, .no_prefix_cache = true};
        CHECKF(pith_engine_create(m, NULL, &o, &e, &err) == 0, "%s", err.msg);
        if (!e) continue;
        outs one = {0};
        pith_request r = sampled(prompt, n_prompt, 1, max_tokens, seed + (uint64_t)i, &one);
        CHECK(pith_engine_submit(e, &r, NULL, &err) == 0);
        run_all(e);
        memcpy(ref->toks[i], one.toks[0], sizeof one.toks[0]);
        ref->n[i] = one.n[0];
        pith_engine_free(e);
        m->ops->destroy(m);
    }
}

static bool same(const outs *a, const outs *b, int i) {
    return a->n[i] == b->n[i] && !memcmp(a->toks[i], b->toks[i], (size_t)a->n[i] * sizeof a->toks[i][0]);
}

/* n siblings of prompts of several lengths (block-aligned and not) with roomy memory: computed once. */
static void test_computed_once(void) {
    static const int lens[] = {300, 296, 1, 9};
    for (int kind = 0; kind < 4; kind++) {
        for (int li = 0; li < 4; li++) {
            const int N = 8, T = 12, L = lens[li];
            int32_t prompt[300];
            fill(prompt, L, 11u + (uint32_t)li);
            outs ref;
            alone(kind, prompt, L, T, 1000, &ref, N);
            pith_model *m = model_of(kind);
            pith_engine *e = NULL;
            pith_err err;
            pith_engine_options o = {.block_size = 8, .max_num_seqs = 16, .max_seq_len = 1024, .max_batch_tokens = 128};
            CHECKF(pith_engine_create(m, NULL, &o, &e, &err) == 0, "%s", err.msg);
            if (!e) continue;
            outs got = {0};
            pith_request r = sampled(prompt, L, N, T, 1000, &got);
            uint64_t id = 0;
            CHECK(pith_engine_submit(e, &r, &id, &err) == 0 && id > 0);
            run_all(e);
            int distinct = 0;
            for (int i = 0; i < N; i++) {
                CHECKF(got.n_final[i] == 1 && got.why[i] == PITH_FINISH_LENGTH && same(&got, &ref, i),
                       "%s, prompt %d: sibling %d differs from the request alone", kind_name(kind), L, i);
                CHECK(got.id[i] == id + (uint64_t)i);
                distinct += i > 0 && memcmp(got.toks[i], got.toks[0], sizeof got.toks[0]) != 0;
            }
            CHECK(got.bad_index == 0 && distinct > 0); /* the seeds differ, so do the samples */
            pith_engine_stats st;
            pith_engine_get_stats(e, &st);
            /* the prompt once, then each sibling's decode tokens (its last sample is never computed) */
            CHECKF(fake_of(m)->tokens == (uint64_t)(L + N * (T - 1)), "%s, prompt %d: %llu tokens computed",
                   kind_name(kind), L, (unsigned long long)fake_of(m)->tokens);
            CHECK(st.forked_sequences == (uint64_t)(N - 1) && st.requests_finished == (uint64_t)N);
            CHECK(st.requests_submitted == (uint64_t)N && st.prompt_tokens == (uint64_t)(N * L));
            pith_engine_free(e);
            m->ops->destroy(m);
        }
    }
}

/* Fewer running places than siblings, or a pool too small for every copy: the ones that cannot fork
 * wait like any request (and recompute what the cache does not hold); outputs are unchanged. */
static void test_no_room(void) {
    for (int kind = 0; kind < 4; kind++) {
        for (int variant = 0; variant < 2; variant++) {
            const int N = 6, T = 20, L = 45;
            int32_t prompt[45];
            fill(prompt, L, 5);
            outs ref;
            alone(kind, prompt, L, T, 77, &ref, N);
            pith_model *m = model_of(kind);
            pith_engine *e = NULL;
            pith_err err;
            pith_engine_options o = {.block_size = 8, .max_num_seqs = variant ? 8 : 3, .max_seq_len = 72,
                                     .kv_blocks = variant ? 12 : 64};
            CHECKF(pith_engine_create(m, NULL, &o, &e, &err) == 0, "%s", err.msg);
            if (!e) continue;
            outs got = {0};
            pith_request r = sampled(prompt, L, N, T, 77, &got);
            CHECK(pith_engine_submit(e, &r, NULL, &err) == 0);
            run_all(e);
            for (int i = 0; i < N; i++)
                CHECKF(got.n_final[i] == 1 && same(&got, &ref, i), "%s variant %d: sibling %d", kind_name(kind), variant, i);
            pith_engine_stats st;
            pith_engine_get_stats(e, &st);
            CHECK(st.forked_sequences < (uint64_t)(N - 1) || variant == 1);
            CHECK(fake_of(m)->violations == 0);
            pith_engine_free(e);
            m->ops->destroy(m);
        }
    }
}

/* Cancelling a waiting sibling, or the first one before its prompt is computed, loses nothing else. */
static void test_cancel(void) {
    for (int kind = 0; kind < 4; kind++) {
        const int N = 5, T = 10, L = 100;
        int32_t prompt[100];
        fill(prompt, L, 9);
        outs ref;
        alone(kind, prompt, L, T, 5, &ref, N);
        for (int victim = 0; victim < 2; victim++) {
            pith_model *m = model_of(kind);
            pith_engine *e = NULL;
            pith_err err;
            pith_engine_options o = {.block_size = 8, .max_num_seqs = 8, .max_seq_len = 512, .max_batch_tokens = 16};
            CHECKF(pith_engine_create(m, NULL, &o, &e, &err) == 0, "%s", err.msg);
            if (!e) continue;
            outs got = {0};
            pith_request r = sampled(prompt, L, N, T, 5, &got);
            uint64_t id = 0;
            CHECK(pith_engine_submit(e, &r, &id, &err) == 0);
            CHECK(pith_engine_step(e, &err) == 0); /* the first 16 prompt tokens */
            uint64_t cancel = victim ? id : id + 2;
            CHECK(pith_engine_cancel(e, cancel) == 0);
            run_all(e);
            for (int i = 0; i < N; i++) {
                bool cancelled = got.id[i] == cancel;
                CHECK(got.n_final[i] == 1);
                if (cancelled) CHECK(got.why[i] == PITH_FINISH_CANCELLED);
                else CHECKF(got.why[i] == PITH_FINISH_LENGTH && same(&got, &ref, i), "%s: sibling %d after cancelling %d",
                            kind_name(kind), i, victim ? 0 : 2);
            }
            pith_engine_free(e);
            m->ops->destroy(m);
        }
    }
}

/* n is checked. */
static void test_refusals(void) {
    pith_model *m = model_of(0);
    pith_engine *e = NULL;
    pith_err err;
    pith_engine_options o = {.block_size = 8, .max_seq_len = 64};
    CHECKF(pith_engine_create(m, NULL, &o, &e, &err) == 0, "%s", err.msg);
    if (e) {
        int32_t p[3] = {1, 2, 3};
        outs got = {0};
        pith_request r = sampled(p, 3, 1025, 4, 1, &got);
        CHECK(pith_engine_submit(e, &r, NULL, &err) == PITH_SUBMIT_INVALID && strstr(err.msg, "n must"));
        r.n = -1;
        CHECK(pith_engine_submit(e, &r, NULL, &err) == PITH_SUBMIT_INVALID);
        pith_engine_free(e);
    }
    m->ops->destroy(m);
}

int main(void) {
    test_computed_once();
    test_no_room();
    test_cancel();
    test_refusals();
    return check_summary("test_engine_fork");
}
