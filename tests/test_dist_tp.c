/* Tensor parallelism (pith/dist.h) with its ranks as threads of this process (a local group), so it runs
 * in every build, MPI or not, and under the sanitizers; tests/test_dist_mpi.py runs the same code over
 * MPI processes.
 *
 * Model level, for each architecture that runs sharded (the mixtures of experts split by expert: expert
 * parallelism) (random weights, F32, written by tools/mkmodel.py):
 * a batch of two sequences' prompts (40 and 23 tokens: past Mistral's window of 16), three decode steps,
 * a step that also wants hidden rows, and a fork (copy_blocks) decoding on both branches; over 2 and 4
 * ranks (4: fewer KV heads than ranks are copied; a shape 4 ranks cannot share must be refused naming
 * why), every logits row within 5e-4 of one process's, relative to the row's largest logit, and the same
 * argmax wherever one process's top two differ by more than that. Why 5e-4: each rank's partial product
 * sums 1/N of the terms, and the allreduce adds the N partials in another order than one dot product
 * does. That is a rounding difference of order 2^-24 per addition, which a random-weight network then
 * amplifies layer by layer: any reordering shows it, and one process's logits on test-gemma3 move by
 * 6.5e-5 of the largest when only its kernel table changes (AVX2 against AVX-512). Sharding here moves
 * them by 1e-6 (threads as ranks) to 6e-5 (over MPI, another prompt). 5e-4 leaves a factor of about eight
 * over that and still fails on any misplaced head, column or vocabulary row (errors of order 1).
 *
 * Hidden rows come back identical in bits on rank 0 to what it computes (the residual is replicated),
 * and within the same tolerance of one process's.
 *
 * Engine level (Llama with GQA, Qwen3-MoE, LFM2 and Nemotron-H in Q8_0, Qwen3.5 in F32: quantized blocks split across ranks, experts split
 * between them): eight random prompts in pairs sharing 20 tokens give the same greedy tokens under --tp 2
 * each alone, all at once (prefix-cache hits), all at once in a pool of about two sequences
 * (preemptions), and with speculative decoding (a draft oracle with planted errors, so the verifier's rows
 * are checked too); a request of n = 3 samples (forks of one prefill, temperature 0.9) gives one process's
 * three samples (Llama; Qwen3-MoE's the same in two runs: its Q8_0 logits differ by more than rounding,
 * which moves a draw now and then); and one process's tokens, except after a near tie that the difference
 * between the two models' logits there explains (check_divergence). Hybrids (LFM2: its convolution split
 * by channel, its states snapshotted, restored and rolled back by speculation under --tp) also run a
 * chat's second turn, which must hit the first's snapshot (as many tokens as in one process) and give
 * the tokens it gives without the cache.
 *
 * Pipeline parallelism (every architecture's forward runs a stage's layers): 2 stages, and 2 stages of 2
 * ranks, at model level (the same steps, the batch cut into micro-batches where long enough: the prompts'
 * step) and at engine level (Llama with GQA over 2 stages, Qwen3-MoE over 2 x 2).
 *
 * Refusals: a dimension that does not divide (8 attention heads over 3 ranks), a Q4_K block split by a shard
 * boundary, a stage without a layer of one of the model's memory groups,
 * an architecture without stages under --pp; each a clear error on every rank, no hang. */
#include <math.h>
#include <pthread.h>
#include <stdint.h>

#include "check.h"
#include "engine_run.h"
#include "model_mem.h"
#include "pith/dist.h"
#include "pith/engine.h"

/* ---- the worker ranks ---- */

typedef struct worker {
    pthread_t th;
    const char *path;
    pith_comm *comm;
    int tp, pp;
    bool no_ep, mtp;
    int rc;
    pith_err err;
} worker;

static void *worker_main(void *arg) {
    worker *w = arg;
    pith_model_options mo = {.n_threads = 1, .comm = w->comm, .tp = w->tp, .pp = w->pp, .no_ep = w->no_ep,
                             .mtp = w->mtp};
    pith_model *m;
    w->rc = pith_model_load(w->path, &mo, &m, &w->err);
    if (w->rc == 0) w->rc = pith_dist_worker(m, w->comm, &w->err); /* frees m */
    return NULL;
}

typedef struct group {
    pith_comm *comm[8];
    worker w[8];
    int n;
} group;

/* Experts split by column in the groups group_start makes (pith_model_options.no_ep), or by expert; and
 * whether they load the file's MTP head (pith_model_options.mtp). */
static bool experts_by_column, with_mtp;

/* Starts ranks 1..tp x pp - 1 and loads rank 0's model; NULL (err set) when rank 0's load failed (the
 * others fail the same way). */
static pith_model *group_start(group *g, const char *path, int tp, int pp, pith_err *err) {
    memset(g, 0, sizeof *g);
    int n = g->n = tp * pp;
    if (pith_comm_local_group(n, g->comm, err)) return NULL;
    for (int r = 1; r < n; r++) {
        g->w[r] = (worker){.path = path, .comm = g->comm[r], .tp = tp, .pp = pp, .no_ep = experts_by_column,
                           .mtp = with_mtp};
        pthread_create(&g->w[r].th, NULL, worker_main, &g->w[r]);
    }
    pith_model_options mo = {.n_threads = 1, .comm = g->comm[0], .tp = tp, .pp = pp, .no_ep = experts_by_column,
                             .mtp = with_mtp};
    pith_model *m;
    if (pith_model_load(path, &mo, &m, err)) m = NULL;
    return m;
}

/* Frees rank 0's model (the others leave their loop) and joins them: true when they all ended cleanly
 * (or, with failed_load, all failed to load too). */
static bool group_end(group *g, pith_model *m, bool failed_load) {
    pith_model_free(m);
    bool ok = true;
    for (int r = 1; r < g->n; r++) {
        pthread_join(g->w[r].th, NULL);
        if ((g->w[r].rc != 0) != failed_load) {
            fprintf(stderr, "rank %d: rc %d: %s\n", r, g->w[r].rc, g->w[r].err.msg);
            ok = false;
        }
    }
    for (int r = 0; r < g->n; r++) pith_comm_free(g->comm[r]);
    return ok;
}

static bool make_model_seed(const char *preset, const char *dtype, int seed, char *path, size_t cap) {
    const char *src = getenv("PITH_SOURCE_DIR"), *tmp = getenv("PITH_TEST_TMP");
    if (!src || !tmp) return false;
    char cmd[9000];
    snprintf(path, cap, "%s/tp-%s-%s%s%.0d.gguf", tmp, preset, dtype, seed == 11 ? "" : "-", seed == 11 ? 0 : seed);
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 '%s/tools/mkmodel.py' --preset %s --dtype %s --seed %d --out '%s' >/dev/null",
             src, preset, dtype, seed, path);
    int rc = system(cmd);
    CHECKF(rc == 0, "%s failed", cmd);
    return rc == 0;
}

static bool make_model(const char *preset, const char *dtype, char *path, size_t cap) {
    return make_model_seed(preset, dtype, 11, path, cap);
}

/* ---- model level ---- */

enum { BS = 16, NB = 24, MAXB = 8, MAXT = 64, STEPS = 6, MAXROWS = 64 };

typedef struct run_out {
    int n_rows[STEPS];
    float *logits[STEPS];    /* [n_rows][n_vocab] */
    float *hidden;           /* step 4's hidden rows */
    int n_hidden;
} run_out;

static void run_out_free(run_out *o) {
    for (int s = 0; s < STEPS; s++) free(o->logits[s]);
    free(o->hidden);
}

/* The steps of the file comment on model m, whose memory it allocates and frees. */
static bool run_steps(pith_model *m, run_out *o, pith_err *err) {
    memset(o, 0, sizeof *o);
    const int V = m->hp.n_vocab;
    if (tm_alloc(m, BS, NB, MAXT, PITH_F32, err)) return false;
    /* sequence s holds blocks [s * MAXB, (s + 1) * MAXB); the fork (sequence 2 from step 5) blocks 16.. */
    int32_t tables[3 * MAXB];
    for (int i = 0; i < 3 * MAXB; i++) tables[i] = i;
    int len[3] = {0, 0, 0};
    uint32_t x = 99;
    bool ok = true;
    for (int step = 0; step < STEPS && ok; step++) {
        int32_t tok[MAXT], pos[MAXT], seq[MAXT], slot[MAXT];
        uint8_t want[MAXT], want_h[MAXT];
        int n = 0, n_seqs = step == 5 ? 3 : 2;
        if (step == 5) {
            /* fork sequence 1 into 2: its whole blocks and its partial last one */
            int nb = (len[1] + BS - 1) / BS;
            int32_t src[MAXB], dst[MAXB];
            for (int i = 0; i < nb; i++) src[i] = tables[MAXB + i], dst[i] = tables[2 * MAXB + i];
            for (int g = 0; g < m->mem.n_groups && ok; g++)
                if (pith_model_copy_blocks(m, g, src, dst, nb, err)) ok = false;
            len[2] = len[1];
        }
        for (int s = 0; s < n_seqs; s++) {
            int k = step == 0 ? (s == 0 ? 40 : 23) : 1;
            for (int i = 0; i < k; i++, n++) {
                x = x * 1103515245u + 12345u;
                tok[n] = s == 2 ? tok[n - 1] : (int32_t)((x >> 8) % (uint32_t)V); /* the fork repeats 1's token */
                pos[n] = len[s];
                seq[n] = s;
                slot[n] = tables[s * MAXB + len[s] / BS] * BS + len[s] % BS;
                want[n] = 1;
                want_h[n] = step == 4;
                len[s]++;
            }
        }
        tm_batch b;
        tm_batch_init(&b, m, n, tok, pos, seq, slot, want, n_seqs, MAXB, tables);
        if (step == 4) {
            o->n_hidden = n;
            o->hidden = malloc((size_t)n * (size_t)m->hp.dim * sizeof(float));
            b.b.want_hidden = want_h;
            b.b.hidden = o->hidden;
        }
        o->n_rows[step] = n;
        o->logits[step] = malloc((size_t)n * (size_t)V * sizeof(float));
        if (!o->logits[step] || pith_model_forward(m, &b.b, o->logits[step], err)) ok = false;
    }
    pith_model_mem_free(m);
    return ok;
}

/* max |a - b| over a row, relative to the row's largest |b|; and whether b's argmax is clear of its
 * runner-up by more than tol (then a's argmax must be the same). */
static double row_error(const float *a, const float *b, int V, double tol, bool *argmax_ok) {
    double big = 0, diff = 0;
    int ia = 0, ib = 0;
    for (int v = 0; v < V; v++) {
        if (fabs(b[v]) > big) big = fabs(b[v]);
        if (fabs((double)a[v] - b[v]) > diff) diff = fabs((double)a[v] - b[v]);
        if (a[v] > a[ia]) ia = v;
        if (b[v] > b[ib]) ib = v;
    }
    double second = -INFINITY;
    for (int v = 0; v < V; v++)
        if (v != ib && b[v] > second) second = b[v];
    double rel = diff / (big > 0 ? big : 1);
    *argmax_ok = ia == ib || b[ib] - second <= tol * big;
    return rel;
}

static void test_model_level(const char *preset, bool pipelined) {
    char path[4200];
    if (!make_model(preset, "F32", path, sizeof path)) return;
    pith_err err;
    pith_model_options mo = {.n_threads = 1};
    pith_model *one;
    if (pith_model_load(path, &mo, &one, &err)) {
        CHECKF(0, "%s: %s", preset, err.msg);
        return;
    }
    run_out ref;
    bool ok = run_steps(one, &ref, &err);
    CHECKF(ok, "%s, one process: %s", preset, err.msg);
    const int V = one->hp.n_vocab, dim = one->hp.dim;
    pith_model_free(one);
    const double tol = 5e-4;
    /* tensor parallelism over 2 and 4 ranks, 2 pipeline stages, and 2 stages of 2 ranks */
    static const int layouts[][2] = {{2, 1}, {4, 1}, {1, 2}, {2, 2}};
    for (size_t li = 0; li < sizeof layouts / sizeof *layouts && ok; li++) {
        int tp = layouts[li][0], pp = layouts[li][1];
        if (pp > 1 && !pipelined) continue;
        char what[64];
        snprintf(what, sizeof what, "--tp %d --pp %d%s", tp, pp, experts_by_column ? " --no-ep" : "");
        group g;
        pith_model *m = group_start(&g, path, tp, pp, &err);
        /* a shape 4 ranks cannot share: a width that does not divide, or a KV head that cannot be copied to
         * ranks whose query heads read it (in a fused QKV projection, under a K norm over all heads); or
         * stages of which one would hold no layer of a kind the model has (the test models are short) */
        if (!m && ((tp == 4 && (strstr(err.msg, "divide") || strstr(err.msg, "cannot copy a KV head"))) ||
                   (pp > 1 && strstr(err.msg, "holds none of the model's")))) {
            printf("%s %s: refused as it should be: %s\n", preset, what, err.msg);
            CHECKF(group_end(&g, m, true), "%s %s: the other ranks did not refuse it too", preset, what);
            continue;
        }
        if (!m && pp > 1 && strstr(err.msg, "failed to load")) { /* a later stage's refusal (rank 0 loaded) */
            bool said = false;
            CHECKF(group_end(&g, m, true), "%s %s: the other ranks did not refuse it too", preset, what);
            for (int r = 1; r < g.n && !said; r++)
                if (strstr(g.w[r].err.msg, "does not hold")) { /* a KV-shared layer's source on another stage */
                    printf("%s %s: refused as it should be (rank %d): %s\n", preset, what, r, g.w[r].err.msg);
                    said = true;
                }
            CHECKF(said, "%s %s: %s", preset, what, err.msg);
            continue;
        }
        CHECKF(m != NULL, "%s %s: %s", preset, what, err.msg);
        run_out got;
        pith_dist_stats st0 = {0}, st1 = {0};
        if (m) CHECK(pith_dist_get_stats(m, &st0));
        bool ran = m && run_steps(m, &got, &err);
        if (ran) {
            pith_dist_get_stats(m, &st1);
            /* with 2 stages the prompts' step (63 tokens) runs as 4 x 2 micro-batches (PITH_PP_MIN_TOKENS=4),
             * the others whole */
            uint64_t steps = st1.forwards - st0.forwards, mbs = st1.micro_batches - st0.micro_batches;
            CHECKF(steps == STEPS && mbs == (pp > 1 ? STEPS + 7 : STEPS), "%s %s: %llu micro-batches in %llu steps",
                   preset, what, (unsigned long long)mbs, (unsigned long long)steps);
        }
        CHECKF(!m || ran, "%s %s: %s", preset, what, err.msg);
        double worst = 0;
        int bad_argmax = 0;
        for (int s = 0; ran && s < STEPS; s++) {
            CHECK(got.n_rows[s] == ref.n_rows[s]);
            for (int r = 0; r < ref.n_rows[s]; r++) {
                bool am;
                double e = row_error(got.logits[s] + (size_t)r * V, ref.logits[s] + (size_t)r * V, V, tol, &am);
                if (e > worst) worst = e;
                bad_argmax += !am;
            }
        }
        if (ran) {
            double hworst = 0;
            for (size_t i = 0; i < (size_t)ref.n_hidden * dim; i++) {
                double e = fabs((double)got.hidden[i] - ref.hidden[i]) / (1 + fabs(ref.hidden[i]));
                if (e > hworst) hworst = e;
            }
            CHECKF(worst <= tol, "%s %s: logits differ by %.3g of the largest (tolerance %g)", preset, what, worst, tol);
            CHECKF(bad_argmax == 0, "%s %s: %d rows with another clear argmax", preset, what, bad_argmax);
            CHECKF(hworst <= tol, "%s %s: hidden rows differ by %.3g", preset, what, hworst);
            printf("%s %s: logits within %.2g of one process's (relative to each row's largest), hidden rows "
                   "within %.2g, same argmax\n", preset, what, worst, hworst);
            run_out_free(&got);
        }
        CHECKF(group_end(&g, m, m == NULL), "%s %s: a worker rank failed", preset, what);
    }
    run_out_free(&ref);
}

/* ---- engine level ---- */

#define MAX_OUT 64
typedef struct out {
    int32_t toks[MAX_OUT];
    int n;
} out;

static void collect(const pith_token_event *ev, void *user) {
    out *o = user;
    if (!ev->final && o->n < MAX_OUT) o->toks[o->n++] = ev->token;
}

enum { N2 = 8, GEN2 = 20, LEN = 36, PASSES = 4 };
static int32_t ids[N2][LEN];

typedef struct spec_oracle {
    const out *expect;
    uint64_t calls;
} spec_oracle;

/* Drafts the expected continuation of a prompt with one planted error at a varying place. */
static int oracle_draft(void *user, uint64_t id, const int32_t *tokens, int n, int32_t *draft, int max) {
    spec_oracle *o = user;
    o->calls++;
    for (int i = 0; i < N2; i++) {
        int np = LEN - i;
        if (n < np || memcmp(tokens, ids[i], (size_t)np * sizeof *tokens)) continue;
        int have = n - np, k = 0, wrong = (int)((id * 7 + (uint64_t)n) % (uint64_t)(max + 2));
        for (; k < max && have + k < o->expect[i].n; k++) {
            int32_t t = o->expect[i].toks[have + k];
            draft[k] = k == wrong ? (t > 0 ? t - 1 : t + 1) : t;
        }
        return k;
    }
    return 0;
}

/* pass 0: each alone, no cache; 1: all at once (prefix hits); 2: all at once in a pool of about two
 * sequences (preemptions); 3: all at once speculating from pass 0's output of one process. */
static void engine_passes(pith_model *m, const out *expect, out res[PASSES][N2], pith_engine_stats st[PASSES]) {
    int per_seq = (LEN + GEN2 + 15) / 16;
    int kv[PASSES] = {64, 256, per_seq * 2, per_seq * 3}, seqs[PASSES] = {1, 8, 8, 8};
    spec_oracle orc = {.expect = expect};
    for (int pass = 0; pass < PASSES; pass++) {
        pith_engine_options o = {.kv_blocks = kv[pass], .max_num_seqs = seqs[pass], .max_batch_tokens = 40,
                                 .no_prefix_cache = pass == 0};
        if (pass == 3) {
            o.spec_type = PITH_SPEC_CUSTOM;
            o.spec_draft = oracle_draft;
            o.spec_user = &orc;
            o.spec_max_draft = 5;
            o.spec_max_seqs = 8;
        }
        pith_engine *e = NULL;
        pith_err err;
        if (pith_engine_create(m, NULL, &o, &e, &err)) {
            CHECKF(0, "engine: %s", err.msg);
            return;
        }
        for (int i = 0; i < N2; i++) {
            pith_request r = {.prompt = ids[i], .n_prompt = LEN - i, .sampling = pith_sampling_defaults(),
                              .max_tokens = GEN2, .ignore_eos = true, .on_token = collect, .user = &res[pass][i]};
            r.sampling.temperature = 0;
            CHECKF(pith_engine_submit(e, &r, NULL, &err) == 0, "submit: %s", err.msg);
            if (pass == 0) run(e);
        }
        run(e);
        pith_engine_get_stats(e, &st[pass]);
        pith_engine_free(e);
    }
}

/* n > 1: one prompt's three samples (temperature 0.9, seeds 11, 12, 13), forked from one prefill. */
static void collect_sibling(const pith_token_event *ev, void *user) {
    out *outs = user;
    if (ev->index >= 0 && ev->index < 3) collect(ev, &outs[ev->index]);
}

static void forks(pith_model *m, out res[3]) {
    pith_engine_options o = {.max_num_seqs = 4};
    pith_engine *e = NULL;
    pith_err err;
    if (pith_engine_create(m, NULL, &o, &e, &err)) {
        CHECKF(0, "engine: %s", err.msg);
        return;
    }
    pith_request r = {.prompt = ids[0], .n_prompt = LEN, .sampling = pith_sampling_defaults(), .max_tokens = GEN2,
                      .ignore_eos = true, .on_token = collect_sibling, .user = res, .n = 3};
    r.sampling.temperature = 0.9f;
    r.sampling.seed = 11;
    CHECKF(pith_engine_submit(e, &r, NULL, &err) == 0, "submit: %s", err.msg);
    run(e);
    pith_engine_free(e);
}

/* A chat's two turns, greedy: prompt 0, then prompt 0, its reply and prompt 1's first 8 tokens, on one
 * engine (with the prefix cache or without). Returns the prefix-cache hits (the second turn's, on the
 * snapshot the reply's decode kept). */
static uint64_t turns(pith_model *m, out res[2], bool cache) {
    pith_engine_options o = {.max_num_seqs = 4, .no_prefix_cache = !cache};
    pith_engine *e = NULL;
    pith_err err;
    if (pith_engine_create(m, NULL, &o, &e, &err)) {
        CHECKF(0, "engine: %s", err.msg);
        return 0;
    }
    static int32_t second[LEN + GEN2 + 8];
    for (int t = 0; t < 2; t++) {
        int n = LEN;
        if (t == 1) {
            memcpy(second, ids[0], sizeof(int32_t) * LEN);
            memcpy(second + LEN, res[0].toks, sizeof(int32_t) * GEN2);
            memcpy(second + LEN + GEN2, ids[1], sizeof(int32_t) * 8);
            n = LEN + GEN2 + 8;
        }
        pith_request r = {.prompt = t ? second : ids[0], .n_prompt = n, .sampling = pith_sampling_defaults(),
                          .max_tokens = GEN2, .ignore_eos = true, .on_token = collect, .user = &res[t]};
        r.sampling.temperature = 0;
        CHECKF(pith_engine_submit(e, &r, NULL, &err) == 0, "submit: %s", err.msg);
        run(e);
    }
    pith_engine_stats st;
    pith_engine_get_stats(e, &st);
    pith_engine_free(e);
    return st.prefix_cache_hits;
}

/* m's logits after prompt i and the first k tokens of o, into lg; false on failure. */
static bool logits_at(pith_model *m, int i, const out *o, int k, float *lg) {
    int32_t tok[LEN + GEN2], pos[LEN + GEN2], seq[LEN + GEN2], slot[LEN + GEN2], tables[8];
    uint8_t want[LEN + GEN2];
    int n = 0;
    for (int t = 0; t < LEN - i; t++) tok[n++] = ids[i][t];
    for (int t = 0; t < k; t++) tok[n++] = o->toks[t];
    for (int t = 0; t < n; t++) pos[t] = t, seq[t] = 0, slot[t] = t, want[t] = t == n - 1;
    for (int b = 0; b < 8; b++) tables[b] = b;
    pith_err err;
    bool ok = false;
    if (!tm_alloc(m, 16, 8, LEN + GEN2, PITH_F16, &err)) {
        tm_batch b;
        tm_batch_init(&b, m, n, tok, pos, seq, slot, want, 1, 8, tables);
        ok = pith_model_forward(m, &b.b, lg, &err) == 0;
        pith_model_mem_free(m);
    }
    return ok;
}

/* Where --tp's greedy tokens leave one process's (prompt i, token k): both models' logits there. The
 * flip is explained when one process's top-two margin is within what separates the two rows (the gap
 * between two logits moves by at most twice the largest difference), and that difference is within
 * Q8_0's tolerance: the activations are quantized to 8 bits per element before each product, so a
 * reordered sum that moves an element across a rounding boundary moves it by a whole step (1/127 of its
 * block's largest), not by a rounding error, and in a mixture of experts a router whose k-th and
 * (k+1)-th experts are that close may swap them; 3e-2 of the largest logit bounds what that does here
 * (1.4e-2 measured where test-qwen3moe's prompt 6 diverges). */
static void check_divergence(const char *preset, pith_model *one, pith_model *tp, int i, const out *o, int k,
                             int *near_ties) {
    int V = one->hp.n_vocab;
    float *a = malloc((size_t)V * sizeof *a), *b = malloc((size_t)V * sizeof *b);
    bool ok = a && b && logits_at(one, i, o, k, a) && logits_at(tp, i, o, k, b);
    CHECKF(ok, "%s: the logits where prompt %d diverges", preset, i);
    if (ok) {
        float top = -INFINITY, second = -INFINITY, big = 0, diff = 0;
        for (int v = 0; v < V; v++) {
            if (a[v] > top) second = top, top = a[v];
            else if (a[v] > second) second = a[v];
            if (fabsf(a[v]) > big) big = fabsf(a[v]);
            if (fabsf(a[v] - b[v]) > diff) diff = fabsf(a[v] - b[v]);
        }
        double margin = (top - second) / big, moved = diff / big;
        CHECKF(moved <= 3e-2 && margin <= 2 * moved, "%s --tp 2, prompt %d: token %d differs where one process's top "
               "two are %.3g apart and the rows %.3g (relative to the largest logit)", preset, i, k, margin, moved);
        printf("%s --tp 2, prompt %d: token %d differs where one process's top two are %.2g apart and the two rows "
               "%.2g\n", preset, i, k, margin, moved);
        ++*near_ties;
    }
    free(a);
    free(b);
}

static void test_engine_level(const char *preset, const char *dtype, int tp, int pp) {
    char path[4200];
    if (!make_model(preset, dtype, path, sizeof path)) return;
    pith_err err;
    pith_model_options mo = {.n_threads = 1};
    pith_model *one;
    if (pith_model_load(path, &mo, &one, &err)) {
        CHECKF(0, "%s", err.msg);
        return;
    }
    uint32_t x = 4242;
    for (int i = 0; i < N2; i++)
        for (int k = 0; k < LEN; k++) {
            x = x * 1103515245u + 12345u;
            ids[i][k] = k < 20 && (i & 1) ? ids[i - 1][k] : (int32_t)((x >> 8) % (uint32_t)one->hp.n_vocab);
        }
    static out ref[PASSES][N2], got[PASSES][N2];
    pith_engine_stats st_ref[PASSES], st[PASSES];
    memset(ref, 0, sizeof ref);
    memset(got, 0, sizeof got);
    engine_passes(one, ref[0], ref, st_ref);
    static out fork_ref[3], fork_got[3];
    memset(fork_ref, 0, sizeof fork_ref);
    memset(fork_got, 0, sizeof fork_got);
    forks(one, fork_ref);
    group g;
    pith_model *m = group_start(&g, path, tp, pp, &err);
    CHECKF(m != NULL, "%s --tp %d --pp %d: %s", preset, tp, pp, err.msg);
    if (m) engine_passes(m, ref[0], got, st);
    if (m) forks(m, fork_got);
    static out fork_again[3];
    memset(fork_again, 0, sizeof fork_again);
    if (m) forks(m, fork_again);
    const bool hybrid = one->mem.n_groups > 0 && one->mem.groups[one->mem.n_groups - 1].kind == PITH_MEM_RECURRENT;
    uint64_t turn_hits[2] = {0, 0};
    bool turns_same = true;
    if (m && hybrid) {
        /* against the same turns under --tp without the cache (one process's may differ at a Q8_0 near tie,
         * as its second turn does here at token 3: not the cache, the same without it) */
        static out turn_ref[2], turn_got[2], turn_cold[2];
        memset(turn_ref, 0, sizeof turn_ref);
        memset(turn_got, 0, sizeof turn_got);
        memset(turn_cold, 0, sizeof turn_cold);
        turn_hits[0] = turns(one, turn_ref, true);
        turn_hits[1] = turns(m, turn_got, true);
        CHECK(turns(m, turn_cold, false) == 0);
        for (int t = 0; t < 2; t++) turns_same &= !memcmp(turn_cold[t].toks, turn_got[t].toks, sizeof(int32_t) * GEN2);
    }
    if (!m) {
        CHECKF(group_end(&g, m, true), "%s: a worker rank failed", preset);
        pith_model_free(one);
        return;
    }
    /* Under --tp every pass gives pass 0's tokens, as in one process (the engine's features); against
     * one process's, the same tokens up to a near tie (check_divergence), if anywhere. */
    /* sampled siblings: under the same layout the same tokens again; against one process the same where
     * the logits differ by rounding alone (the dense model: the same draws give the same tokens), not
     * where they differ by Q8_0 steps or swapped experts (the MoE: 1.4e-2 of the largest logit, which
     * moves a draw now and then) or where the distribution is flat (LFM2's random weights: sampled at 0.9
     * a Q8_0 step moves a draw within the first few tokens; greedy, its n = 3 forks give one process's
     * tokens) */
    bool dense = strncmp(preset, "test-llama", 10) == 0;
    for (int k = 0; k < 3; k++) {
        CHECKF(fork_got[k].n == GEN2 && !memcmp(fork_got[k].toks, fork_again[k].toks, sizeof(int32_t) * GEN2),
               "%s --tp %d --pp %d: sample %d of n = 3 differs between two runs", preset, tp, pp, k);
        CHECKF(!dense || !memcmp(fork_got[k].toks, fork_ref[k].toks, sizeof(int32_t) * GEN2),
               "%s --tp %d --pp %d: sample %d of n = 3 differs from one process's", preset, tp, pp, k);
    }
    CHECKF(memcmp(fork_ref[0].toks, fork_ref[1].toks, sizeof(int32_t) * GEN2) ||
           memcmp(fork_ref[1].toks, fork_ref[2].toks, sizeof(int32_t) * GEN2), "%s: n = 3 gave three equal samples", preset);
    int same = 0, near_ties = 0;
    for (int p = 0; p < PASSES; p++)
        for (int i = 0; i < N2; i++) {
            CHECKF(got[p][i].n == GEN2 && !memcmp(got[p][i].toks, got[0][i].toks, sizeof(int32_t) * GEN2),
                   "%s --tp 2, pass %d, prompt %d: tokens differ from pass 0's", preset, p, i);
            CHECKF(ref[p][i].n == GEN2 && !memcmp(ref[p][i].toks, ref[0][i].toks, sizeof(int32_t) * GEN2),
                   "%s one process, pass %d, prompt %d: tokens differ from pass 0's", preset, p, i);
        }
    for (int i = 0; i < N2; i++) {
        int k = 0;
        while (k < GEN2 && got[0][i].toks[k] == ref[0][i].toks[k]) k++;
        if (k == GEN2) same++;
        else check_divergence(preset, one, m, i, &ref[0][i], k, &near_ties);
    }
    CHECKF(group_end(&g, m, false), "%s --tp %d --pp %d: a worker rank failed", preset, tp, pp);
    pith_model_free(one);
    /* A hybrid hits only where its states were snapshotted: two requests sharing 20 tokens give none (the
     * second snapshots where it leaves the first, for a third), so its hits are checked on a second turn */
    if (hybrid) {
        CHECKF(turn_hits[0] > 0 && turn_hits[1] == turn_hits[0] && turns_same,
               "%s --tp %d: a second turn hit %llu tokens (one process %llu), its tokens %s without the cache", preset, tp,
               (unsigned long long)turn_hits[1], (unsigned long long)turn_hits[0], turns_same ? "the same" : "differ");
        st[1].prefix_cache_hits = turn_hits[1];
    } else {
        CHECKF(st[1].prefix_cache_hits > 0, "--tp 2: no prefix-cache hit");
    }
    CHECKF(st[2].preemptions > 0, "--tp 2: no preemption in the small pool");
    CHECKF(st[3].spec_accepted_tokens > 0 && st[3].spec_accepted_tokens < st[3].spec_draft_tokens,
           "--tp 2: %llu of %llu draft tokens accepted", (unsigned long long)st[3].spec_accepted_tokens,
           (unsigned long long)st[3].spec_draft_tokens);
    printf("%s engine --tp %d --pp %d (%s): %d of %d prompts give one process's tokens (%d diverge at a near tie), and the "
           "same alone, batched with %llu prefix-cache hits, under %llu preemptions and speculating (%llu of %llu "
           "drafts accepted); n = 3 samples the same %s\n", preset, tp, pp, dtype, same, N2, near_ties,
           (unsigned long long)st[1].prefix_cache_hits, (unsigned long long)st[2].preemptions,
           (unsigned long long)st[3].spec_accepted_tokens, (unsigned long long)st[3].spec_draft_tokens,
           dense ? "as one process's" : "in two runs");
}

/* ---- weight reload ---- */

/* Greedy tokens of prompt 0 on an engine over m. */
static void greedy(pith_engine *e, out *o) {
    memset(o, 0, sizeof *o);
    pith_request r = {.prompt = ids[0], .n_prompt = LEN, .sampling = pith_sampling_defaults(), .max_tokens = GEN2,
                      .ignore_eos = true, .on_token = collect, .user = o};
    r.sampling.temperature = 0;
    pith_err err;
    CHECKF(pith_engine_submit(e, &r, NULL, &err) == 0, "submit: %s", err.msg);
    run(e);
}

/* A weight reload under --tp (pith_dist_reload, then the engine's swap): every rank loads its shard of
 * other weights of the same shape beside the served ones, the engine swaps to them, and prompt 0 then
 * gives what one process gives on those weights; a reload of a missing file fails on every rank and the
 * served model runs on. Then a server's sleep and wake: the engine asleep, every rank's weights released
 * (pith_dist_release), loaded again through the released model, the engine woken on them: the same
 * tokens. The ranks end cleanly with the last model. */
static void test_reload(const char *preset, int tp, int pp) {
    char a[4200], b[4200];
    if (!make_model(preset, "F32", a, sizeof a) || !make_model_seed(preset, "F32", 12, b, sizeof b)) return;
    pith_model_options mo = {.n_threads = 1};
    pith_err err;
    out want[2], got[3];
    for (int k = 0; k < 2; k++) {
        pith_model *one;
        if (pith_model_load(k ? b : a, &mo, &one, &err)) {
            CHECKF(0, "%s", err.msg);
            return;
        }
        pith_engine *e;
        pith_engine_options eo = {.max_num_seqs = 2};
        if (pith_engine_create(one, NULL, &eo, &e, &err) == 0) {
            greedy(e, &want[k]);
            pith_engine_free(e);
        }
        pith_model_free(one);
    }
    CHECKF(memcmp(want[0].toks, want[1].toks, sizeof want[0].toks), "%s: the two weights give the same tokens", preset);
    group g;
    pith_model *m = group_start(&g, a, tp, pp, &err);
    CHECKF(m != NULL, "%s --tp %d --pp %d: %s", preset, tp, pp, err.msg);
    if (!m) {
        group_end(&g, m, true);
        return;
    }
    pith_engine *e;
    pith_engine_options eo = {.max_num_seqs = 2};
    if (pith_engine_create(m, NULL, &eo, &e, &err)) {
        CHECKF(0, "engine: %s", err.msg);
        group_end(&g, m, false);
        return;
    }
    greedy(e, &got[0]);
    pith_model *fresh = NULL, *old = NULL;
    pith_err miss = {{0}};
    CHECK(pith_dist_reload(m, "/nonexistent/weights.gguf", &mo, &fresh, &miss) != 0 && fresh == NULL);
    CHECKF(strstr(miss.msg, "nonexistent") != NULL, "a missing file's reload says \"%s\"", miss.msg);
    greedy(e, &got[1]); /* the served model runs on */
    int rc = pith_dist_reload(m, b, &mo, &fresh, &err);
    CHECKF(rc == 0, "%s --tp %d --pp %d: reload: %s", preset, tp, pp, err.msg);
    if (rc == 0) {
        CHECK(pith_engine_pause(e, PITH_PAUSE_DRAIN, 0, &err) == 0);
        rc = pith_engine_swap_model(e, fresh, PITH_SWAP_DRAIN, &old, &err);
        CHECKF(rc == 0, "swap: %s", err.msg);
        CHECK(pith_engine_resume(e, &err) == 0);
        if (rc == 0) {
            pith_model_free(old); /* every rank frees its shard of the old weights */
            m = fresh;
        } else {
            pith_model_free(fresh);
        }
    }
    greedy(e, &got[2]);
    /* asleep: the KV memory and the weights released on every rank, then loaded again for the wake */
    out woke;
    memset(&woke, 0, sizeof woke);
    CHECK(pith_engine_pause(e, PITH_PAUSE_DRAIN, 0, &err) == 0);
    rc = pith_engine_sleep(e, &err);
    CHECKF(rc == 0, "sleep: %s", err.msg);
    if (rc == 0) {
        CHECKF(pith_dist_release(m, &err) == 0, "release: %s", err.msg);
        CHECK(m->file == NULL);
        pith_model *again = NULL;
        rc = pith_dist_reload(m, b, &mo, &again, &err);
        CHECKF(rc == 0, "%s: the reload that wakes: %s", preset, err.msg);
        if (rc == 0 && pith_engine_wake(e, again, &err) == 0) {
            pith_model_free(m); /* the released handle: its place on every rank goes */
            m = again;
            greedy(e, &woke);
        } else {
            CHECKF(0, "wake: %s", err.msg);
            pith_model_free(again);
        }
    }
    pith_engine_free(e);
    CHECKF(!memcmp(woke.toks, want[1].toks, sizeof woke.toks), "%s --tp %d --pp %d: after a sleep and a wake, tokens "
           "differ from one process's", preset, tp, pp);
    CHECKF(!memcmp(got[0].toks, want[0].toks, sizeof got[0].toks) && !memcmp(got[1].toks, want[0].toks, sizeof got[1].toks),
           "%s --tp %d --pp %d: the served weights' tokens differ from one process's", preset, tp, pp);
    CHECKF(!memcmp(got[2].toks, want[1].toks, sizeof got[2].toks),
           "%s --tp %d --pp %d: after the reload, tokens differ from one process's on the new weights", preset, tp, pp);
    CHECKF(group_end(&g, m, false), "%s --tp %d --pp %d: a worker rank failed after the reload", preset, tp, pp);
    printf("%s --tp %d --pp %d: a reload swaps every rank's shard (one process's tokens on the new weights), as "
           "does a sleep that releases every rank's weights and a wake that loads them again; a missing file fails "
           "on every rank and the served weights run on\n", preset, tp, pp);
}

/* ---- MTP heads ---- */

/* Speculative decoding with the file's MTP head under --tp 2: the head's layer sharded like the
 * decoder's, each draft step's greedy token settled across the vocabulary's shares. Four prompts, greedy:
 * one process's tokens, drafts accepted (a head that copies the decoder), and as many as one process's
 * where as many were proposed (F32: the drafts are argmaxes of logits a rounding apart). */
static void test_mtp(const char *name, const char *mkargs) {
    const char *src = getenv("PITH_SOURCE_DIR"), *tmp = getenv("PITH_TEST_TMP");
    char path[4200], cmd[9000];
    snprintf(path, sizeof path, "%s/tp-mtp-%s.gguf", tmp, name);
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 '%s/tools/mkmodel.py' %s --dtype F32 --seed 7 --out '%s' >/dev/null",
             src, mkargs, path);
    if (system(cmd) != 0) {
        CHECKF(0, "%s failed", cmd);
        return;
    }
    pith_err err;
    out res[2][4];
    pith_engine_stats st[2];
    memset(res, 0, sizeof res);
    for (int k = 0; k < 2; k++) {
        pith_model *m = NULL;
        group g;
        if (k == 0) {
            pith_model_options mo = {.n_threads = 1, .mtp = true};
            if (pith_model_load(path, &mo, &m, &err)) m = NULL;
        } else {
            with_mtp = true;
            m = group_start(&g, path, 2, 1, &err);
            with_mtp = false;
        }
        CHECKF(m != NULL, "%s %s: %s", name, k ? "--tp 2" : "one process", err.msg);
        pith_engine *e = NULL;
        pith_engine_options eo = {.max_num_seqs = 4, .spec_type = PITH_SPEC_MTP, .spec_max_draft = 5,
                                  .spec_max_seqs = 4};
        if (m && pith_engine_create(m, NULL, &eo, &e, &err) == 0) {
            for (int i = 0; i < 4; i++) {
                pith_request r = {.prompt = ids[i], .n_prompt = LEN - i, .sampling = pith_sampling_defaults(),
                                  .max_tokens = GEN2, .ignore_eos = true, .on_token = collect, .user = &res[k][i]};
                r.sampling.temperature = 0;
                CHECKF(pith_engine_submit(e, &r, NULL, &err) == 0, "submit: %s", err.msg);
            }
            run(e);
            pith_engine_get_stats(e, &st[k]);
            pith_engine_free(e);
        } else if (m) {
            CHECKF(0, "%s: engine: %s", name, err.msg);
        }
        if (k == 0) pith_model_free(m);
        else CHECKF(group_end(&g, m, m == NULL), "%s --tp 2: a worker rank failed", name);
        if (!m) return;
    }
    for (int i = 0; i < 4; i++)
        CHECKF(res[1][i].n == GEN2 && !memcmp(res[0][i].toks, res[1][i].toks, sizeof res[0][i].toks),
               "%s --tp 2 with its MTP head: prompt %d's tokens differ from one process's", name, i);
    /* where the speculation policy proposed as many drafts (its break-even comes from each rank's own bytes
     * read: Qwen3.5's head keeps eh_proj whole on every rank, so it drafts less often there), the same
     * ones were taken */
    CHECKF(st[1].spec_draft_tokens != st[0].spec_draft_tokens || st[1].spec_accepted_tokens == st[0].spec_accepted_tokens,
           "%s --tp 2: %llu of %llu drafts accepted, one process %llu of %llu", name,
           (unsigned long long)st[1].spec_accepted_tokens, (unsigned long long)st[1].spec_draft_tokens,
           (unsigned long long)st[0].spec_accepted_tokens, (unsigned long long)st[0].spec_draft_tokens);
    CHECKF(st[1].spec_accepted_tokens > 0, "%s --tp 2: no MTP draft accepted", name);
    printf("%s --tp 2 with its MTP head: one process's tokens, %llu of %llu drafts accepted (one process %llu of "
           "%llu)\n", name, (unsigned long long)st[1].spec_accepted_tokens, (unsigned long long)st[1].spec_draft_tokens,
           (unsigned long long)st[0].spec_accepted_tokens, (unsigned long long)st[0].spec_draft_tokens);
}

/* ---- refusals ---- */

static void expect_refusal(const char *preset, const char *dtype, int tp, int pp, const char *needle) {
    char path[4200];
    if (!make_model(preset, dtype, path, sizeof path)) return;
    group g;
    pith_err err = {{0}};
    pith_model *m = group_start(&g, path, tp, pp, &err);
    CHECKF(m == NULL, "%s %s --tp %d loaded", preset, dtype, tp);
    CHECKF(m || strstr(err.msg, needle), "%s %s --tp %d: \"%s\" does not say \"%s\"", preset, dtype, tp, err.msg, needle);
    CHECKF(group_end(&g, m, m == NULL), "%s --tp %d: the other ranks did not refuse it too", preset, tp);
    if (!m) printf("refused as it should be: %s\n", err.msg);
}

int main(void) {
    /* micro-batches of 4 tokens and more: the prompts' step (63 tokens) and the engine's prefill chunks
     * (40) run as 8 micro-batches through 2 stages, sequences cut between them */
    setenv("PITH_PP_MIN_TOKENS", "4", 1);
    if (!getenv("PITH_SOURCE_DIR") || !getenv("PITH_TEST_TMP")) {
        printf("SKIP: PITH_SOURCE_DIR / PITH_TEST_TMP not set (run through ctest)\n");
        return CHECK_SKIP;
    }
    /* every architecture runs in pipeline stages (stages: the test model's layers can be split in two) */
    static const struct { const char *preset; bool stages; } models[] = {
        {"test-llama", true}, {"test-llama-gqa", true}, {"test-qwen2", true}, {"test-qwen3", true},
        {"test-mistral-swa", true}, {"test-smollm3", true}, {"test-gemma3", true}, {"test-gemma3-pp", true}, {"test-mistral3", true},
        {"test-olmo2", true}, /* its QK norm over the whole projection: the statistic summed across ranks */
        {"test-qwen3moe", true}, {"test-mixtral", true}, {"test-gpt-oss", true}, {"test-glm4moe", true},
        {"test-lfm2", true}, /* its short convolution split by channel */
        {"test-nemotronh", true}, {"test-granitehybrid", true}, /* Mamba2 heads, B/C by group */
        {"test-nemotronh-pp", true}, /* an attention layer in each of two stages */
        {"test-phi3", true}, /* fused [Q | K | V] of unequal parts */
        {"test-qwen35", true}, {"test-qwen35moe", true}, /* DeltaNet by key head, value heads tiled */
        {"test-qwen3next", true}, {"test-qwen3next-legacy", true}, /* grouped; fused [q | k | v | z] */
        {"test-gemma4", true}, {"test-gemma4-e", true}, {"test-gemma4-e-pp", true}, {"test-gemma4-moe", true}, /* two head shapes, PLE */
        {"test-deepseek2", true}, {"test-deepseek2-v2", true}, /* MLA: query heads split, latent rows whole */
        {"test-granitehybrid-moe", true}, /* one B/C group, whole on each rank; the norm across ranks */
    };
    for (size_t i = 0; i < sizeof models / sizeof *models; i++) test_model_level(models[i].preset, models[i].stages);
    /* tensor-parallel experts (--no-ep): every expert's hidden width split by column instead */
    static const char *const moe[] = {"test-qwen3moe", "test-mixtral", "test-gpt-oss", "test-glm4moe",
                                      "test-granitehybrid-moe", "test-qwen35moe", "test-gemma4-moe", "test-deepseek2"};
    experts_by_column = true;
    for (size_t i = 0; i < sizeof moe / sizeof *moe; i++) test_model_level(moe[i], true);
    experts_by_column = false;
    test_engine_level("test-llama-gqa", "Q8_0", 2, 1);
    test_engine_level("test-qwen3moe", "Q8_0", 2, 1);
    test_engine_level("test-llama-gqa", "Q8_0", 1, 2);
    test_engine_level("test-qwen3moe", "Q8_0", 2, 2);
    test_engine_level("test-lfm2", "Q8_0", 2, 1); /* hybrids: their states snapshotted, restored, preempted */
    test_engine_level("test-nemotronh", "Q8_0", 2, 1);
    /* F32: Qwen3.5's random Q8_0 model moves by 3.2e-2 of the largest logit where a prompt parts from one
     * process's (Q8_0 steps amplified through its DeltaNet layers), past check_divergence's bound */
    test_engine_level("test-qwen35", "F32", 2, 1);
    test_mtp("qwen35", "--preset test-qwen35 --mtp 1 --mtp-copy --damp 0:0.2");
    test_mtp("glm4moe", "--preset test-glm4moe-mtp-copy");
    test_mtp("deepseek2", "--preset test-deepseek2-mtp-copy");
    test_reload("test-llama-gqa", 2, 1);
    test_reload("test-qwen35", 2, 1); /* a hybrid: its states' pools made anew on every rank */
    test_reload("test-llama-gqa", 2, 2);
    expect_refusal("test-llama-gqa", "F32", 3, 1, "the number of attention heads (8) does not divide by 3");
    expect_refusal("test-llama-gqa", "Q4_K", 2, 1, "inside a Q4_K block");
    /* 7 layers, the only full-attention one is layer 5: the first of two stages would have none */
    expect_refusal("test-gemma3", "F32", 1, 2, "holds none of the model's full-attention layers");
    return check_summary("test_dist_tp");
}
