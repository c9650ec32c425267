/* Timed prompt processing and generation through the public model API.
 *
 * One sequence whose block table is the identity (slot == position), in a KV cache of its own sized for
 * the longer of the two tests; each test starts again at position 0 and overwrites the slots it uses.
 * Token ids are random: speed does not depend on them, and no tokenizer is needed. */
#include <stdlib.h>
#include <string.h>

#include "pith/bench.h"

#define BLOCK_SIZE 16

struct pith_bench_runner {
    pith_model *m;
    bool mem;
    int max_prompt, max_batch, max_gen;
    int max_blocks;
    int32_t *block_table; /* [max_blocks] */
    int32_t *tokens, *positions, *seq, *slots; /* [max_batch] */
    uint8_t *want;
    float *logits; /* [n_vocab]: every pass asks for one row */
    uint64_t rng;
};

/* xorshift64*: a few random token ids per pass need nothing better. */
static int32_t random_token(pith_bench_runner *r) {
    r->rng ^= r->rng >> 12;
    r->rng ^= r->rng << 25;
    r->rng ^= r->rng >> 27;
    return (int32_t)((r->rng * 0x2545f4914f6cdd1dull >> 33) % (uint64_t)r->m->hp.n_vocab);
}

void pith_bench_runner_free(pith_bench_runner *r) {
    if (!r) return;
    if (r->mem) pith_model_mem_free(r->m);
    free(r->block_table);
    free(r->tokens);
    free(r->positions);
    free(r->seq);
    free(r->slots);
    free(r->want);
    free(r->logits);
    free(r);
}

int pith_bench_runner_new(pith_model *m, int max_prompt, int max_batch, int max_gen, uint64_t seed,
                          pith_bench_runner **out, pith_err *err) {
    *out = NULL;
    if (max_prompt < 0 || max_gen < 0 || max_batch < 1)
        return pith_errf(err, "bench: prompt %d, generation %d and batch %d must be >= 0, >= 0, >= 1",
                         max_prompt, max_gen, max_batch);
    /* Generation decodes a BOS first, so it needs one position more than it times. */
    int64_t need = max_prompt > max_gen + 1 ? max_prompt : (int64_t)max_gen + 1;
    if (need > m->hp.ctx_len)
        return pith_errf(err, "bench: %lld positions needed but the model's context is %d",
                         (long long)need, m->hp.ctx_len);
    pith_bench_runner *r = calloc(1, sizeof *r);
    if (!r) return pith_errf(err, "out of memory");
    r->m = m;
    r->max_prompt = max_prompt;
    r->max_gen = max_gen;
    r->max_batch = max_batch < max_prompt ? max_batch : (max_prompt > 0 ? max_prompt : 1);
    r->rng = seed ? seed : 0x853c49e6748fea9bull;
    r->max_blocks = (int)((need + BLOCK_SIZE - 1) / BLOCK_SIZE);
    size_t nb = (size_t)r->max_batch;
    r->block_table = malloc((size_t)r->max_blocks * sizeof *r->block_table);
    r->tokens = malloc(nb * sizeof *r->tokens);
    r->positions = malloc(nb * sizeof *r->positions);
    r->seq = calloc(nb, sizeof *r->seq);
    r->slots = malloc(nb * sizeof *r->slots);
    r->want = calloc(nb, 1);
    r->logits = malloc((size_t)m->hp.n_vocab * sizeof *r->logits);
    if (!r->block_table || !r->tokens || !r->positions || !r->seq || !r->slots || !r->want || !r->logits) {
        pith_bench_runner_free(r);
        return pith_errf(err, "out of memory");
    }
    for (int i = 0; i < r->max_blocks; i++) r->block_table[i] = i;
    pith_mem_layout lay = {.block_size = BLOCK_SIZE, .n_groups = m->mem.n_groups};
    for (int k = 0; k < lay.n_groups; k++) lay.n_blocks[k] = r->max_blocks, lay.type[k] = PITH_F16;
    pith_model_limits lim = {.max_batch_tokens = r->max_batch, .max_num_seqs = 1, .max_seq_len = (int)need, .max_logits = 1};
    if (pith_model_prepare(m, &lim, err) || pith_model_mem_alloc(m, &lay, err)) {
        pith_bench_runner_free(r);
        return -1;
    }
    r->mem = true;
    *out = r;
    return 0;
}

/* One forward pass of n tokens at positions start..start+n-1 (tokens already in r->tokens); logits for
 * the last. */
static int forward(pith_bench_runner *r, int start, int n, pith_err *err) {
    for (int i = 0; i < n; i++) {
        r->positions[i] = start + i;
        r->slots[i] = start + i;
        r->want[i] = i == n - 1;
    }
    pith_batch_mem bm[PITH_MAX_MEM_GROUPS];
    for (int k = 0; k < PITH_MAX_MEM_GROUPS; k++)
        bm[k] = (pith_batch_mem){.slots = r->slots, .block_tables = r->block_table, .max_blocks = r->max_blocks, .state_slots = r->seq};
    pith_batch b = {
        .n_tokens = n, .tokens = r->tokens, .positions = r->positions, .seq = r->seq, .want_logits = r->want,
        .n_seqs = 1, .n_groups = r->m->mem.n_groups, .mem = bm,
    };
    return pith_model_forward(r->m, &b, r->logits, err);
}

int pith_bench_pp(pith_bench_runner *r, int n, int batch, double *seconds, pith_err *err) {
    if (n < 1 || n > r->max_prompt) return pith_errf(err, "bench: prompt of %d tokens, room for 1..%d", n, r->max_prompt);
    if (batch < 1) return pith_errf(err, "bench: batch %d must be >= 1", batch);
    if (batch > r->max_batch) batch = r->max_batch;
    double t = 0;
    for (int start = 0; start < n; start += batch) {
        int len = n - start < batch ? n - start : batch;
        for (int i = 0; i < len; i++) r->tokens[i] = random_token(r);
        /* Only the model's work is timed, not drawing the random ids. */
        double t0 = pith_bench_now();
        if (forward(r, start, len, err)) return -1;
        t += pith_bench_now() - t0;
    }
    *seconds = t;
    return 0;
}

int pith_bench_tg(pith_bench_runner *r, int n, double *seconds, pith_err *err) {
    if (n < 1 || n > r->max_gen) return pith_errf(err, "bench: generation of %d tokens, room for 1..%d", n, r->max_gen);
    int bos = r->m->hp.bos_id;
    r->tokens[0] = bos >= 0 && bos < r->m->hp.n_vocab ? bos : random_token(r);
    if (forward(r, 0, 1, err)) return -1;
    double t0 = pith_bench_now();
    for (int pos = 1; pos <= n; pos++) {
        r->tokens[0] = random_token(r);
        if (forward(r, pos, 1, err)) return -1;
    }
    *seconds = pith_bench_now() - t0;
    return 0;
}
