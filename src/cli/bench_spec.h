/* `pith bench --spec-type ngram|draft -f PROMPTS`: speculative decoding against plain decoding. */
#ifndef PITH_CLI_BENCH_SPEC_H
#define PITH_CLI_BENCH_SPEC_H

#include <stdbool.h>

#include "pith/engine.h"

typedef struct bench_spec_opts {
    const char *model, *draft_model, *prompts_file;
    pith_spec_type spec_type;      /* NGRAM or DRAFT */
    const int *threads;
    int n_thread_counts;
    int n_gen, reps, spec_max_draft;
    long long bw_mib;              /* 0: the weight bytes of a token, at least 256 */
    pith_kv_type kv_type;
    bool json, warmup, force_scalar;
} bench_spec_opts;

/* Runs every prompt (one per non-empty line of the file, BOS added as the tokenizer says) alone, greedy,
 * n_gen tokens with EOS ignored, without and with speculation, alternating, reps times each; checks the
 * tokens are identical; prints one row per prompt and a total. 0, -1 on a failure, -2 when the options
 * do not suit the model (err says why). */
int cli_bench_spec(const bench_spec_opts *o, pith_err *err);

#endif
