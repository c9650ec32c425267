/* Embedding requests (pith_request.embed) over the default model (assets/default.gguf, a small Llama):
 *   - the model seam: forward with want_hidden fills one final-norm row per asking token, the same rows
 *     whether or not the token also wants logits, and the logits are unchanged by asking for them;
 *   - the engine's MEAN, CLS and LAST vectors equal the pooling of those rows computed here in double
 *     (mean / first / last row, then L2-normalised), with the prompt cut into chunks of 7 tokens and
 *     mixed into batches with a generating request and with each other, and in a pool small enough
 *     that the growing generation preempts embedding requests mid-prompt (their recompute must not
 *     count a position twice);
 *   - an embedding request gets one event, the final one: stop, prompt_tokens, completion_tokens 0;
 *   - bad pooling values and models without hidden states are refused at submit. */
#include <math.h>
#include <stdint.h>

#include "check.h"
#include "model_mem.h"
#include "core/engine_internal.h"
#include "pith/engine.h"

#define N_PROMPT 20
#define N_REQ 6

typedef struct got {
    int n_events, n_final;
    pith_finish_reason why;
    pith_usage usage;
    float emb[1024];
    int n_emb;
} got;

static void collect(const pith_token_event *ev, void *user) {
    got *g = user;
    g->n_events++;
    if (!ev->final) return;
    g->n_final++;
    g->why = ev->finish_reason;
    g->usage = ev->usage;
    g->n_emb = ev->n_embedding;
    if (ev->embedding && ev->n_embedding <= 1024) memcpy(g->emb, ev->embedding, (size_t)ev->n_embedding * sizeof(float));
}

static void prompt_of(int r, int32_t *ids, int n_vocab) {
    for (int i = 0; i < N_PROMPT; i++) ids[i] = (int32_t)((7 + 31 * i + 101 * r + i * i * r) % n_vocab);
}

/* Reference vectors of prompt r: [3][dim] for MEAN, CLS, LAST, from one forward over the whole prompt. */
static void reference(pith_model *m, int r, double ref[3][1024]) {
    const int dim = m->hp.dim;
    int32_t tok[N_PROMPT], pos[N_PROMPT], sq[N_PROMPT], slot[N_PROMPT], tables[4] = {0, 1, 2, 3};
    uint8_t want[N_PROMPT], none[N_PROMPT] = {0}, all[N_PROMPT];
    prompt_of(r, tok, m->hp.n_vocab);
    for (int i = 0; i < N_PROMPT; i++) {
        pos[i] = slot[i] = i;
        sq[i] = 0;
        want[i] = i % 3 == 0;
        all[i] = 1;
    }
    pith_err err;
    float *hid = malloc((size_t)N_PROMPT * dim * sizeof(float)), *hid2 = malloc((size_t)N_PROMPT * dim * sizeof(float));
    float *lg = malloc((size_t)N_PROMPT * m->hp.n_vocab * sizeof(float)), *lg2 = malloc((size_t)N_PROMPT * m->hp.n_vocab * sizeof(float));
    tm_batch t;
    /* hidden rows for every token, logits for every third one */
    tm_batch_init(&t, m, N_PROMPT, tok, pos, sq, slot, want, 1, 4, tables);
    t.b.want_hidden = all;
    t.b.hidden = hid;
    CHECKF(pith_model_forward(m, &t.b, lg, &err) == 0, "%s", err.msg);
    /* the same batch again: hidden rows only, then logits only */
    tm_batch_init(&t, m, N_PROMPT, tok, pos, sq, slot, none, 1, 4, tables);
    t.b.want_hidden = all;
    t.b.hidden = hid2;
    CHECKF(pith_model_forward(m, &t.b, NULL, &err) == 0, "%s", err.msg);
    double dmax = 0;
    for (size_t i = 0; i < (size_t)N_PROMPT * dim; i++) dmax = fmax(dmax, fabs((double)hid[i] - hid2[i]));
    CHECKF(dmax < 1e-5, "hidden rows differ by %g with and without logits", dmax);
    tm_batch_init(&t, m, N_PROMPT, tok, pos, sq, slot, want, 1, 4, tables);
    CHECKF(pith_model_forward(m, &t.b, lg2, &err) == 0, "%s", err.msg);
    int n_lg = pith_batch_n_logits(&t.b);
    CHECK(n_lg == 7);
    dmax = 0;
    for (size_t i = 0; i < (size_t)n_lg * m->hp.n_vocab; i++) dmax = fmax(dmax, fabs((double)lg[i] - lg2[i]));
    CHECKF(dmax < 1e-5, "logits differ by %g when hidden rows are asked for too", dmax);

    for (int k = 0; k < dim; k++) {
        double s = 0;
        for (int i = 0; i < N_PROMPT; i++) s += hid[(size_t)i * dim + k];
        ref[0][k] = s / N_PROMPT;
        ref[1][k] = hid[k];
        ref[2][k] = hid[(size_t)(N_PROMPT - 1) * dim + k];
    }
    for (int p = 0; p < 3; p++) {
        double ss = 0;
        for (int k = 0; k < dim; k++) ss += ref[p][k] * ref[p][k];
        CHECK(ss > 0);
        for (int k = 0; k < dim; k++) ref[p][k] /= sqrt(ss);
    }
    free(hid);
    free(hid2);
    free(lg);
    free(lg2);
}

/* One generating request (gen_tokens tokens, submitted first) and N_REQ embedding requests (prompt r % 2
 * with pooling r % 3 + 1), through an engine with these limits; checks every vector against ref. */
static void run_engine(pith_model *m, double ref[2][3][1024], int kv_blocks, int max_batch_tokens, int gen_tokens,
                       bool want_preempt) {
    pith_engine_options o = {.kv_blocks = kv_blocks, .block_size = 4, .max_batch_tokens = max_batch_tokens,
                             .max_num_seqs = 8, .kv_f32 = true, .max_seq_len = 32};
    pith_engine *e = NULL;
    pith_err err;
    CHECKF(pith_engine_create(m, NULL, &o, &e, &err) == 0, "%s", err.msg);
    if (!e) return;
    CHECK(pith_engine_n_embd(e) == m->hp.dim);
    int32_t ids[N_REQ][N_PROMPT];
    got g[N_REQ + 1];
    memset(g, 0, sizeof g);
    for (int k = 0; k <= N_REQ; k++) {
        int r = (k + N_REQ) % (N_REQ + 1); /* the generating one (r == N_REQ) first */
        prompt_of(r % 2, ids[r % N_REQ], m->hp.n_vocab);
        pith_request q = {.prompt = ids[r % N_REQ], .n_prompt = N_PROMPT, .on_token = collect, .user = &g[r]};
        if (r < N_REQ) q.embed = (pith_embed_pooling)(r % 3 + 1);
        else {
            q.max_tokens = gen_tokens;
            q.sampling = pith_sampling_defaults();
        }
        CHECKF(pith_engine_submit(e, &q, NULL, &err) == 0, "%s", err.msg);
    }
    CHECKF(pith_engine_run(e, &err) == 0, "%s", err.msg);
    pith_engine_stats st;
    pith_engine_get_stats(e, &st);
    CHECKF(st.requests_finished == N_REQ + 1, "finished %llu", (unsigned long long)st.requests_finished);
    if (want_preempt) CHECKF(st.preemptions > 0, "no preemption with %d blocks", kv_blocks);
    for (int r = 0; r < N_REQ; r++) {
        CHECK(g[r].n_events == 1 && g[r].n_final == 1 && g[r].why == PITH_FINISH_STOP);
        CHECK(g[r].usage.prompt_tokens == N_PROMPT && g[r].usage.completion_tokens == 0);
        CHECK(g[r].n_emb == m->hp.dim);
        double dmax = 0, ss = 0;
        for (int k = 0; k < g[r].n_emb; k++) {
            dmax = fmax(dmax, fabs(g[r].emb[k] - ref[r % 2][r % 3][k]));
            ss += (double)g[r].emb[k] * g[r].emb[k];
        }
        CHECKF(dmax < 2e-4, "request %d (pooling %d): off by %g", r, r % 3 + 1, dmax);
        CHECKF(fabs(ss - 1) < 1e-4, "request %d: |v|^2 = %g", r, ss);
    }
    CHECK(g[N_REQ].n_final == 1 && g[N_REQ].usage.completion_tokens == gen_tokens && g[N_REQ].n_emb == 0);
    CHECKF(engine_check(e, &err) == 0, "%s", err.msg);
    pith_engine_free(e);
}

int main(void) {
    const char *src = getenv("PITH_SOURCE_DIR");
    if (!src) {
        printf("SKIP: PITH_SOURCE_DIR not set (run through ctest)\n");
        return CHECK_SKIP;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/assets/default.gguf", src);
    pith_model *m = NULL;
    pith_err err;
    pith_model_options mo = {.n_threads = 2};
    if (pith_model_load(path, &mo, &m, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    CHECK(m->has_hidden && m->hp.dim <= 1024);
    double ref[2][3][1024];
    CHECKF(tm_alloc(m, 8, 4, 64, PITH_F32, &err) == 0, "%s", err.msg);
    reference(m, 0, ref[0]);
    reference(m, 1, ref[1]);
    pith_model_mem_free(m);

    run_engine(m, ref, 0, 7, 5, false);       /* roomy pool, prompts in chunks of 7 */
    run_engine(m, ref, 0, 2048, 5, false);    /* whole prompts in one batch */
    /* 12 blocks of 4, chunks of 3: the generating request grows to 8 blocks while an embedding request
     * holds 5, so embedding requests are preempted mid-prompt and recompute (from their own cached
     * blocks: no position may be counted twice) */
    run_engine(m, ref, 12, 3, 11, true);

    /* refusals */
    pith_engine *e = NULL;
    CHECKF(pith_engine_create(m, NULL, NULL, &e, &err) == 0, "%s", err.msg);
    int32_t ids[3] = {1, 2, 3};
    pith_request q = {.prompt = ids, .n_prompt = 3, .sampling = pith_sampling_defaults(), .embed = (pith_embed_pooling)4};
    CHECK(pith_engine_submit(e, &q, NULL, &err) == PITH_SUBMIT_INVALID && strstr(err.msg, "pooling"));
    pith_engine_free(e);
    /* The engine reads has_hidden at creation (it keeps it: a sleeping engine may outlive its model). */
    m->has_hidden = false;
    CHECKF(pith_engine_create(m, NULL, NULL, &e, &err) == 0, "%s", err.msg);
    q.embed = PITH_EMBED_MEAN;
    CHECK(pith_engine_submit(e, &q, NULL, &err) == PITH_SUBMIT_INVALID && strstr(err.msg, "hidden states"));
    CHECK(pith_engine_n_embd(e) == 0);
    m->has_hidden = true;
    pith_engine_free(e);
    pith_model_free(m);
    return check_summary("test_engine_embed");
}
