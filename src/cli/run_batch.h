/* `pith run -f PROMPTS.txt`: batch mode. Every line of the file is one prompt (an empty line is an
 * empty prompt: BOS alone); all are submitted to one engine at once and run with continuous batching.
 * Results are printed in input order once all are done: with --jsonl one JSON object per prompt,
 *   {"index", "text", "tokens" (generated ids), "prompt_tokens", "cached_tokens", "finish_reason"}
 * (plus "error" for a prompt the engine rejected), otherwise each prompt's generated text followed by
 * a newline. Engine statistics go to stderr.
 *
 * Integration with `pith run`: the caller passes each argument it does not know to
 * run_batch_parse_arg, and calls pith_run_batch instead of single-sequence generation when
 * prompts_path is set. */
#ifndef PITH_CLI_RUN_BATCH_H
#define PITH_CLI_RUN_BATCH_H

#include <stdbool.h>
#include <stdio.h>

#include "pith/engine.h"
#include "pith/model.h"
#include "pith/sampler.h"
#include "pith/tokenizer.h"

typedef struct run_batch_opts {
    const char *prompts_path;      /* -f, --file */
    bool jsonl;                    /* --jsonl */
    pith_engine_options engine;    /* --max-num-seqs, --kv-blocks, --kv-mem, --block-size,
                                      --max-batch-tokens, --max-seq-len, --kv-f32, --no-prefix-cache */
} run_batch_opts;

/* Looks at argv[*i]: when it is a batch-mode option, stores it (advancing *i past its value) and
 * returns 1; returns 0 when it is not one, -1 on a bad value (message printed). */
int run_batch_parse_arg(int argc, char **argv, int *i, run_batch_opts *o);
/* Help lines for the options above. */
void run_batch_usage(FILE *out);

/* Runs the batch. sp: sampling for every prompt (prompt i uses seed sp->seed + i). n_predict: tokens
 * to generate per prompt. Returns 0, or -1 with err (unreadable file, engine creation failure); a
 * prompt the engine rejects is reported in its own output line and does not fail the run. */
int pith_run_batch(pith_model *m, const pith_tokenizer *tok, const run_batch_opts *o,
                   const pith_sampling_params *sp, int n_predict, bool ignore_eos, FILE *out, pith_err *err);

#endif
