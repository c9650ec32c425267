/* Speculative decoding with a draft model (PITH_SPEC_DRAFT, src/core/spec_model.h), over real models:
 *   - a random-weight Llama target (tools/mkmodel.py test-llama, Q8_0) with random drafts of its
 *     vocabulary: a smaller Llama, a sliding-window Mistral and an LFM2 with recurrent state (so the
 *     draft's own memory is each kind the core manages). Greedy outputs are identical to decoding
 *     without speculation: requests one by one, all at once, in a target pool so small that sequences
 *     are preempted, and with prompts sharing prefixes (cache hits); the draft engine's pool is checked
 *     after every step (engine_check) and holds no referenced memory once everything finished; with a
 *     draft engine for one sequence the requests' tokens exceed its pool, so its cache must evict;
 *   - the target drafting for itself (its file loaded again) in the same four ways, where nearly every
 *     draft token is accepted;
 *   - the default model drafting for itself (the file loaded twice): greedy acceptance is ~100 %
 *     (asserted >= 95 %: verification computes the draft tokens as one chunk, the draft one by one, so
 *     a near tie may break the other way) and the forward passes of the target fall accordingly;
 *   - a draft of another vocabulary is refused: another size (both sizes named), or the same size with
 *     other tokens (the first differing token named); the options without a draft model are refused. */
#include <stdint.h>
#include <stdlib.h>

#include "check.h"
#include "core/engine_internal.h"
#include "core/spec_model.h"
#include "pith/engine.h"
#include "pith/model.h"

enum { MAXT = 96, NREQ = 6 };

typedef struct out {
    int32_t toks[MAXT];
    int n, n_final;
    pith_finish_reason why;
} out;

static void collect(const pith_token_event *ev, void *user) {
    out *o = user;
    if (ev->final) {
        o->n_final++;
        o->why = ev->finish_reason;
    } else if (o->n < MAXT) {
        o->toks[o->n++] = ev->token;
    }
}

typedef struct req {
    int32_t prompt[200];
    int n_prompt, max_tokens;
} req;

static void make_reqs(req *r, int n, int n_vocab, uint32_t seed) {
    int32_t shared[48];
    for (int i = 0; i < 48; i++) shared[i] = (int32_t)((seed = seed * 1103515245u + 12345u) >> 16) % n_vocab;
    for (int i = 0; i < n; i++) {
        r[i].n_prompt = 20 + (i * 53) % 170;
        for (int k = 0; k < r[i].n_prompt; k++)
            r[i].prompt[k] = k < 48 && i % 3 != 2 ? shared[k] : (int32_t)((seed = seed * 1103515245u + 12345u) >> 16) % n_vocab;
        r[i].max_tokens = 24 + (i * 17) % 48;
    }
}

static const char *src, *tmp;

static bool make_model(const char *args, const char *name, char *path, size_t cap) {
    snprintf(path, cap, "%s/draft-%s.gguf", tmp, name);
    char cmd[9000];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 '%s/tools/mkmodel.py' %s --out '%s' >/dev/null 2>&1", src, args, path);
    int rc = system(cmd);
    CHECKF(rc == 0, "%s failed", cmd);
    return rc == 0;
}

static pith_model *load(const char *path) {
    pith_model *m = NULL;
    pith_err err;
    pith_model_options mo = {.n_threads = 2};
    CHECKF(pith_model_load(path, &mo, &m, &err) == 0, "%s: %s", path, err.msg);
    return m;
}

/* Runs the requests on the target (one by one or together), checking both engines after every step. */
static void run(pith_model *target, pith_engine_options o, const req *r, int n, bool together, out *outs,
                pith_engine_stats *st, pith_engine_stats *dst) {
    pith_engine *e = NULL;
    pith_err err;
    CHECKF(pith_engine_create(target, NULL, &o, &e, &err) == 0, "%s", err.msg);
    if (!e) return;
    pith_engine *de = e->draft ? spec_model_engine(e->draft) : NULL;
    for (int i = 0; i < n; i++) {
        memset(&outs[i], 0, sizeof outs[i]);
        pith_request q = {.prompt = r[i].prompt, .n_prompt = r[i].n_prompt, .sampling = pith_sampling_defaults(),
                          .max_tokens = r[i].max_tokens, .ignore_eos = true, .on_token = collect, .user = &outs[i]};
        q.sampling.temperature = 0;
        CHECKF(pith_engine_submit(e, &q, NULL, &err) == 0, "%s", err.msg);
        while ((!together || i == n - 1) && pith_engine_has_work(e)) {
            CHECKF(pith_engine_step(e, &err) == 0, "%s", err.msg);
            CHECKF(engine_check(e, &err) == 0, "target: %s", err.msg);
            if (de) CHECKF(engine_check(de, &err) == 0, "draft: %s", err.msg);
        }
    }
    pith_engine_get_stats(e, st);
    if (de) {
        pith_engine_get_stats(de, dst);
        CHECK(dst->running == 0 && dst->waiting == 0);
        for (int g = 0; g < dst->n_mem_groups; g++)
            CHECKF(dst->mem[g].units_used == 0, "draft group %d holds %d units after every request finished", g,
                   dst->mem[g].units_used);
    }
    pith_engine_free(e);
}

static void same(const out *got, const out *base, int n, const char *what) {
    for (int i = 0; i < n; i++)
        CHECKF(got[i].n_final == 1 && got[i].n == base[i].n && got[i].why == base[i].why &&
                   !memcmp(got[i].toks, base[i].toks, (size_t)base[i].n * sizeof got[i].toks[0]),
               "%s: request %d differs (%d vs %d tokens)", what, i, got[i].n, base[i].n);
}

static void test_random_drafts(void) {
    char tpath[4200], dpath[3][4200];
    if (!make_model("--preset test-llama --dtype Q8_0 --seed 7", "target", tpath, sizeof tpath)) return;
    static const char *dargs[3] = {
        "--arch llama --dim 64 --layers 1 --heads 2 --kv-heads 2 --ffn 128 --vocab 512 --ctx 512 --seed 8",
        "--preset test-mistral-swa --dtype Q8_0 --seed 9",
        "--preset test-lfm2 --dtype Q8_0 --seed 10",
    };
    static const char *dnames[4] = {"llama", "swa", "lfm2", "self"};
    pith_model *target = load(tpath);
    if (!target) return;
    static req reqs[NREQ];
    static out base[NREQ], got[NREQ];
    make_reqs(reqs, NREQ, target->hp.n_vocab, 5);
    pith_engine_stats st0, st, dst;
    pith_engine_options o0 = {.block_size = 8, .max_num_seqs = 4};
    run(target, o0, reqs, NREQ, true, base, &st0, &dst);
    for (int d = 0; d < 4; d++) {
        if (d < 3 && !make_model(dargs[d], dnames[d], dpath[d], sizeof dpath[d])) continue;
        pith_model *draft = load(d < 3 ? dpath[d] : tpath); /* self: the target's file again */
        if (!draft) continue;
        for (int cfg = 0; cfg < 4; cfg++) {
            /* 0: one by one; 1: together; 2: together, a target pool that forces preemption; 3: one by
             * one, a draft engine for one sequence (its pool smaller than the requests' tokens) */
            pith_engine_options o = o0;
            o.spec_type = PITH_SPEC_DRAFT;
            o.draft_model = draft;
            o.spec_max_draft = 4;
            if (cfg == 2) o.kv_blocks = 40;
            if (cfg == 3) o.spec_max_seqs = 1;
            run(target, o, reqs, NREQ, cfg == 1 || cfg == 2, got, &st, &dst);
            char what[64];
            snprintf(what, sizeof what, "draft %s cfg %d", dnames[d], cfg);
            same(got, base, NREQ, what);
            CHECK(st.spec_draft_tokens > 0 && st.spec_accepted_tokens <= st.spec_draft_tokens);
            CHECK(dst.requests_finished > 0 && dst.requests_failed == 0);
            if (cfg == 2) CHECK(st.preemptions > 0);
            if (cfg == 3) {
                int total = 0;
                for (int i = 0; i < NREQ; i++) total += reqs[i].n_prompt + reqs[i].max_tokens;
                for (int g = 0; g < dst.n_mem_groups; g++)
                    if (dst.mem[g].kind == PITH_MEM_FULL) CHECK(dst.mem[g].units_total < total);
            }
            if (cfg != 2) CHECK(st.prefix_cache_hits > 0);
            if (d == 3) CHECK(st.spec_accepted_tokens * 10 > st.spec_draft_tokens * 9 && st.steps < st0.steps);
            printf("%s: %llu/%llu drafted tokens accepted, %llu target steps (%llu without), %llu preemptions, "
                   "%llu cached; draft: %llu proposals, %llu tokens computed, %llu/%llu cached\n",
                   what, (unsigned long long)st.spec_accepted_tokens, (unsigned long long)st.spec_draft_tokens,
                   (unsigned long long)st.steps, (unsigned long long)st0.steps, (unsigned long long)st.preemptions,
                   (unsigned long long)st.prefix_cache_hits, (unsigned long long)dst.requests_finished,
                   (unsigned long long)dst.computed_tokens, (unsigned long long)dst.prefix_cache_hits,
                   (unsigned long long)dst.prefix_cache_queries);
        }
        pith_model_free(draft);
    }
    pith_model_free(target);
}

static void test_self_draft(void) {
    char path[4200];
    snprintf(path, sizeof path, "%s/assets/default.gguf", src);
    FILE *f = fopen(path, "rb");
    if (!f) {
        printf("no %s: the self-draft test is left out\n", path);
        return;
    }
    fclose(f);
    pith_model *target = load(path), *draft = load(path);
    if (!target || !draft) return;
    static req reqs[3];
    static out base[3], got[3];
    make_reqs(reqs, 3, target->hp.n_vocab, 11);
    pith_engine_stats st0, st, dst;
    pith_engine_options o = {.max_num_seqs = 4};
    run(target, o, reqs, 3, false, base, &st0, &dst);
    o.spec_type = PITH_SPEC_DRAFT;
    o.draft_model = draft;
    run(target, o, reqs, 3, false, got, &st, &dst);
    same(got, base, 3, "self-draft");
    double acc = st.spec_draft_tokens ? (double)st.spec_accepted_tokens / (double)st.spec_draft_tokens : 0;
    CHECKF(acc >= 0.95, "the default model drafting for itself: acceptance %.3f", acc);
    CHECK(st.steps * 2 < st0.steps);
    printf("self-draft: %llu/%llu accepted (%.1f %%), %llu target steps (%llu without)\n",
           (unsigned long long)st.spec_accepted_tokens, (unsigned long long)st.spec_draft_tokens, 100 * acc,
           (unsigned long long)st.steps, (unsigned long long)st0.steps);
    pith_model_free(draft);
    pith_model_free(target);
}

static void test_refusals(void) {
    char tpath[4200], p600[4200], p2048[4200], dflt[4200];
    snprintf(tpath, sizeof tpath, "%s/draft-target.gguf", tmp);
    if (!make_model("--arch llama --dim 64 --layers 1 --heads 2 --kv-heads 2 --ffn 128 --vocab 600 --ctx 512",
                    "v600", p600, sizeof p600))
        return;
    pith_model *target = load(tpath), *d600 = load(p600);
    pith_err err;
    pith_engine *e = NULL;
    if (target && d600) {
        pith_engine_options o = {.spec_type = PITH_SPEC_DRAFT, .draft_model = d600};
        CHECK(pith_engine_create(target, NULL, &o, &e, &err) == -1 && strstr(err.msg, "600") && strstr(err.msg, "512"));
        printf("refused: %s\n", err.msg);
        o.draft_model = NULL;
        CHECK(pith_engine_create(target, NULL, &o, &e, &err) == -1 && strstr(err.msg, "draft model"));
        o.draft_model_path = "/nonexistent/draft.gguf";
        CHECK(pith_engine_create(target, NULL, &o, &e, &err) == -1 && strstr(err.msg, "draft model"));
        o.draft_model_path = p600; /* loaded by the engine, refused, freed */
        CHECK(pith_engine_create(target, NULL, &o, &e, &err) == -1 && strstr(err.msg, "600"));
        o.draft_model_path = NULL;
        o.draft_model = target;
        CHECK(pith_engine_create(target, NULL, &o, &e, &err) == -1);
    }
    pith_model_free(d600);
    pith_model_free(target);
    /* the default model's vocabulary against a random one of the same size */
    snprintf(dflt, sizeof dflt, "%s/assets/default.gguf", src);
    pith_model *dm = load(dflt);
    if (!dm) return;
    char args[256];
    snprintf(args, sizeof args, "--arch llama --dim 64 --layers 1 --heads 2 --kv-heads 2 --ffn 128 --vocab %d --ctx 512",
             dm->hp.n_vocab);
    pith_model *other = make_model(args, "vsame", p2048, sizeof p2048) ? load(p2048) : NULL;
    if (other) {
        pith_engine_options o = {.spec_type = PITH_SPEC_DRAFT, .draft_model = other};
        CHECK(pith_engine_create(dm, NULL, &o, &e, &err) == -1 && strstr(err.msg, "at token"));
        printf("refused: %s\n", err.msg);
    }
    pith_model_free(other);
    pith_model_free(dm);
}

int main(void) {
    src = getenv("PITH_SOURCE_DIR");
    tmp = getenv("PITH_TEST_TMP");
    if (!src || !tmp) {
        printf("SKIP: PITH_SOURCE_DIR / PITH_TEST_TMP not set (run through ctest)\n");
        return CHECK_SKIP;
    }
    test_random_drafts();
    test_self_draft();
    test_refusals();
    return check_summary("test_engine_draft");
}
