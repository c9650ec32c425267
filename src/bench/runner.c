/* Timed prompt processing and generation through the engine (engine.h), the path `pith run` and the
 * server take.
 *
 * One engine per runner, for one sequence at a time: max_num_seqs 1, max_batch_tokens the pp batch, and a
 * KV pool of the blocks the longer test needs. At depth 0 the prefix cache is off (a repetition must
 * compute its prompt again, never find it cached). At depth D > 0 (llama-bench's --n-depth) the runner
 * computes a fixed prefix of D tokens once, untimed, and every test request starts with that prefix, which
 * the prefix cache then serves: the test computes only its own tokens, attending to D more positions. The
 * block size divides D (so the cache serves all of it, checked on every request), and the pool holds the
 * prefix plus twice the test's blocks, so that the tests' own cached blocks are what gets evicted, never
 * the prefix. Prompt token ids are random: speed does not depend on them, and no tokenizer is needed.
 * Sampling is greedy. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pith/bench.h"
#include "pith/engine.h"

#define BLOCK_SIZE 16 /* at depth 0; at depth D the largest power of two <= 16 dividing D */

struct pith_bench_runner {
    pith_engine *e;
    int n_vocab;
    int32_t bos;
    int max_prompt, max_gen;
    int depth;
    int32_t *prompt; /* [depth + max_prompt + 1]: the depth prefix, then the test's tokens */
    uint64_t rng;
};

/* What the callback saw of one request. */
typedef struct bench_events {
    int n_tokens;
    double t_first;  /* first token event */
    double t_final;  /* final event */
    bool done;
    pith_finish_reason why;
    pith_usage usage;
    char error[256];
} bench_events;

static void on_token(const pith_token_event *ev, void *user) {
    bench_events *b = user;
    double t = pith_bench_now();
    if (!ev->final) {
        if (b->n_tokens++ == 0) b->t_first = t;
        return;
    }
    b->t_final = t;
    b->done = true;
    b->why = ev->finish_reason;
    b->usage = ev->usage;
    snprintf(b->error, sizeof b->error, "%s", ev->error);
}

/* xorshift64*: random prompt ids need nothing better. */
static int32_t random_token(pith_bench_runner *r) {
    r->rng ^= r->rng >> 12;
    r->rng ^= r->rng << 25;
    r->rng ^= r->rng >> 27;
    return (int32_t)((r->rng * 0x2545f4914f6cdd1dull >> 33) % (uint64_t)r->n_vocab);
}

void pith_bench_runner_free(pith_bench_runner *r) {
    if (!r) return;
    pith_engine_free(r->e);
    free(r->prompt);
    free(r);
}

/* Submits one greedy request (EOS ignored), runs the engine until it is done, and checks that it
 * generated max_tokens tokens and that the depth prefix came from the cache. *t_submit: the time of the
 * submission. */
static int run_request(pith_bench_runner *r, const int32_t *prompt, int n_prompt, int max_tokens,
                       bench_events *b, double *t_submit, pith_err *err);

int pith_bench_runner_new(pith_model *m, int max_prompt, int batch, int max_gen, int depth, pith_kv_type kv_type,
                          uint64_t seed, pith_bench_runner **out, pith_err *err) {
    *out = NULL;
    if (max_prompt < 0 || max_gen < 0 || batch < 1 || depth < 0 || max_prompt > (1 << 24) ||
        max_gen > (1 << 24) || depth > (1 << 24))
        return pith_errf(err, "bench: prompt %d, generation %d, depth %d and batch %d must be in 0..2^24 (three) "
                         "and >= 1", max_prompt, max_gen, depth, batch);
    int need = pith_bench_positions(max_prompt, max_gen);
    if (need + depth > m->hp.ctx_len)
        return pith_errf(err, "bench: %d positions needed (depth %d + %d) but the model's context is %d",
                         need + depth, depth, need, m->hp.ctx_len);
    pith_bench_runner *r = calloc(1, sizeof *r);
    if (!r) return pith_errf(err, "out of memory");
    r->n_vocab = m->hp.n_vocab;
    r->bos = m->hp.bos_id;
    r->max_prompt = max_prompt;
    r->max_gen = max_gen;
    r->depth = depth;
    r->rng = seed ? seed : 0x853c49e6748fea9bull;
    if (!(r->prompt = malloc(((size_t)depth + (size_t)max_prompt + 1) * sizeof *r->prompt))) {
        free(r);
        return pith_errf(err, "out of memory");
    }
    int bs = BLOCK_SIZE;
    while (depth % bs) bs /= 2;
    int test_blocks = (need + bs - 1) / bs + 1;
    /* No batch larger than the prompt: the engine sizes its batch buffers by max_batch_tokens. */
    int longest = max_prompt > depth ? max_prompt : depth; /* the depth prefix runs in steps too */
    int max_batch = batch < longest ? batch : (longest > 0 ? longest : 1);
    pith_engine_options eo = {
        .block_size = bs,
        .kv_blocks = depth ? depth / bs + 2 * test_blocks : (need + bs - 1) / bs,
        .max_num_seqs = 1,
        .max_batch_tokens = max_batch,
        .max_seq_len = need + depth,
        .max_waiting = 1,
        .no_prefix_cache = depth == 0,
        .kv_type = kv_type,
    };
    if (pith_engine_create(m, NULL, &eo, &r->e, err)) {
        pith_err_prefix(err, "bench");
        pith_bench_runner_free(r);
        return -1;
    }
    if (pith_engine_max_seq_len(r->e) < need + depth) {
        pith_errf(err, "bench: %d positions needed but the engine holds %d per sequence", need + depth,
                  pith_engine_max_seq_len(r->e));
        pith_bench_runner_free(r);
        return -1;
    }
    if (depth > 0) {
        r->prompt[0] = r->bos >= 0 && r->bos < r->n_vocab ? r->bos : random_token(r);
        for (int i = 1; i < depth; i++) r->prompt[i] = random_token(r);
        bench_events b;
        double t0;
        r->depth = 0; /* nothing cached yet */
        int rc = run_request(r, r->prompt, depth, 1, &b, &t0, err);
        r->depth = depth;
        if (rc) {
            pith_err_prefix(err, "filling the cache to depth %d", depth);
            pith_bench_runner_free(r);
            return -1;
        }
    }
    *out = r;
    return 0;
}

int pith_bench_positions(int max_prompt, int max_gen) {
    int pp = max_prompt > 0 ? max_prompt + 1 : 0;
    int tg = max_gen > 0 ? max_gen + 2 : 0;
    return pp > tg ? pp : tg;
}

static int run_request(pith_bench_runner *r, const int32_t *prompt, int n_prompt, int max_tokens,
                       bench_events *b, double *t_submit, pith_err *err) {
    memset(b, 0, sizeof *b);
    pith_request q = {
        .prompt = prompt, .n_prompt = n_prompt, .sampling = pith_sampling_defaults(), .max_tokens = max_tokens,
        .ignore_eos = true, .on_token = on_token, .user = b,
    };
    q.sampling.temperature = 0;
    *t_submit = pith_bench_now();
    if (pith_engine_submit(r->e, &q, NULL, err) != 0) {
        pith_err_prefix(err, "bench");
        return -1;
    }
    pith_err run_err = {{0}};
    int rc = pith_engine_run(r->e, &run_err);
    if (!b->done) return pith_errf(err, "bench: the engine finished without a final event");
    if (b->why == PITH_FINISH_ERROR || rc)
        return pith_errf(err, "bench: the model failed: %s", b->error[0] ? b->error : run_err.msg);
    if (b->why != PITH_FINISH_LENGTH || b->n_tokens != max_tokens)
        return pith_errf(err, "bench: the request ended (%s) after %d of %d tokens", pith_finish_reason_str(b->why),
                         b->n_tokens, max_tokens);
    if (b->usage.cached_tokens != r->depth)
        return pith_errf(err, "bench: %d prompt tokens came from the cache, not the depth of %d", b->usage.cached_tokens,
                         r->depth);
    return 0;
}

int pith_bench_pp(pith_bench_runner *r, int n, double *seconds, pith_err *err) {
    if (n < 1 || n > r->max_prompt) return pith_errf(err, "bench: prompt of %d tokens, room for 1..%d", n, r->max_prompt);
    /* Drawing the ids is not timed: only submit to the final event. */
    for (int i = 0; i < n; i++) r->prompt[r->depth + i] = random_token(r);
    bench_events b;
    double t0;
    if (run_request(r, r->prompt, r->depth + n, 1, &b, &t0, err)) return -1;
    *seconds = b.t_final - t0;
    return 0;
}

int pith_bench_tg(pith_bench_runner *r, int n, double *seconds, pith_err *err) {
    if (n < 1 || n > r->max_gen) return pith_errf(err, "bench: generation of %d tokens, room for 1..%d", n, r->max_gen);
    /* At depth 0 the prompt is a BOS; at depth D the prefix and one random token. */
    r->prompt[r->depth] = r->depth == 0 && r->bos >= 0 && r->bos < r->n_vocab ? r->bos : random_token(r);
    bench_events b;
    double t0;
    /* The first token comes from the prompt (untimed); the n decode steps after it are timed. */
    if (run_request(r, r->prompt, r->depth + 1, n + 1, &b, &t0, err)) return -1;
    *seconds = b.t_final - b.t_first;
    return 0;
}
