/* `pith run -f PROMPTS.txt`: batch mode. Every line of the file is one prompt; an empty line is not
 * run but reported (an error result, "empty line: not run", and a line on stderr). All are submitted to
 * one engine at once and run with continuous batching. With --jsonl, one JSON object per prompt is
 * written as soon as it finishes (so not in input order; "index" is the 0-based line):
 *   {"index", "text", "tokens" (generated ids), "prompt_tokens", "cached_tokens", "finish_reason"}
 * (plus "error" for a prompt not run, and "sample" with --samples N > 1: each prompt is then sampled N
 * times, the N forked from one prefill, sample k of line i drawing with seed S + i * N + k). Otherwise one line per prompt in input order, each written once it
 * and all before it are done: the generated text with backslash, newline and carriage return escaped as
 * \\, \n and \r, so line i is always prompt i. Prompts that stop because the context is full say so
 * on stderr; engine statistics go to stderr. On Ctrl-C (cli_sigint_install) the live prompts are
 * cancelled and only the results already finished are written. A failed write to `out` cancels the
 * rest and fails the run.
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
    int samples;                   /* --samples N: each prompt N times, forked from one prefill */
    pith_engine_options engine;    /* --max-num-seqs, --kv-blocks, --kv-mem, --block-size,
                                      --max-batch-tokens, --max-seq-len, --kv-type, --kv-f32, --no-prefix-cache */
} run_batch_opts;

/* Looks at argv[*i]: when it is a batch-mode option, stores it (advancing *i past its value) and
 * returns 1; returns 0 when it is not one, -1 on a bad value (message printed). */
int run_batch_parse_arg(int argc, char **argv, int *i, run_batch_opts *o);
/* Help lines for the options above. */
void run_batch_usage(FILE *out);

/* Runs the batch. sp: sampling for every prompt (prompt i sample k uses seed sp->seed + i * N + k). n_predict: tokens
 * to generate per prompt, -1 for "until EOS or the context is full". Returns 0, 130 when interrupted
 * (what finished is written), or -1 with err (failed write, unreadable file, engine creation failure); a
 * prompt the engine rejects is reported in its own output line and does not fail the run. */
int pith_run_batch(pith_model *m, const pith_tokenizer *tok, const run_batch_opts *o,
                   const pith_sampling_params *sp, int n_predict, bool ignore_eos, FILE *out, pith_err *err);

#endif
