/* Shared pieces of the command-line front end: argument parsing helpers and the subcommands.
 * Exit codes: 0 success, 1 runtime failure (unreadable model, ...), 2 bad usage. */
#ifndef PITH_CLI_H
#define PITH_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "pith/engine.h"

#define PITH_EXIT_USAGE 2

/* Parse a whole argument as a number within [lo, hi]; on failure print "pith CMD: OPT: ..." and return
 * false. */
bool cli_parse_int(const char *cmd, const char *opt, const char *s, long long lo, long long hi, long long *out);
bool cli_parse_float(const char *cmd, const char *opt, const char *s, double lo, double hi, double *out);
/* A byte count: digits with an optional K, M or G suffix (powers of 1024), at least 1. */
bool cli_parse_size(const char *cmd, const char *opt, const char *s, size_t *out);
/* Checks a device string (cpu, vulkan, vulkan:N) without opening it; on failure prints "pith CMD: OPT: ..."
 * and returns false. */
bool cli_parse_device(const char *cmd, const char *opt, const char *s);
/* -ngl's value: a count of layers or auto (backend.h: pith_backend_parse_gpu_layers); false after an error
 * line. */
bool cli_parse_gpu_layers(const char *cmd, const char *opt, const char *s);
/* Returns argv[*i + 1] and advances *i, or prints "option needs a value" and returns NULL. */
const char *cli_value(const char *cmd, int argc, char **argv, int *i);

/* The model to use when -m is absent: $PITH_DEFAULT_MODEL if set, else pith-default.gguf next to the
 * binary (the build tree), else ../share/pith/pith-default.gguf relative to the binary's directory (an
 * installed binary); NULL when neither file is readable. The returned string is static storage. */
const char *cli_default_model(void);
/* Prints the one-line error for a missing default model, naming every place that was looked in. */
void cli_no_default_model(const char *cmd);

/* The engine options shared by `run -f`, `run --chat` and `serve` (--max-num-seqs, --max-batch-tokens,
 * --kv-blocks, --kv-mem, --block-size, --max-seq-len (alias -c, --ctx-size), --kv-type, --kv-f32, --no-prefix-cache). Looks at argv[*i]:
 * stores an engine option (advancing *i past its value) and returns 1; returns 0 when it is not one,
 * -1 on a bad value (message printed). */
int cli_engine_arg(const char *cmd, int argc, char **argv, int *i, pith_engine_options *e);
/* Help lines for those options. */
void cli_engine_usage(FILE *out);

/* Ctrl-C handling for commands that stop cleanly: after cli_sigint_install, the first SIGINT makes
 * cli_interrupted() true and restores the default action, so a second one ends the process at once. */
void cli_sigint_install(void);
bool cli_interrupted(void);
/* A pith_run_check (engine.h) for a command that owns every request of its engine: once Ctrl-C has come,
 * sets *(bool *)interrupted and has the engine cancel them all, so their final events (and the text
 * they release) still come before pith_engine_run_until returns. */
pith_run_action cli_run_check(void *interrupted);

/* Reads a whole file into a NUL-terminated malloc'd buffer. */
int cli_read_file(const char *path, char **data, size_t *len, pith_err *err);

/* Tensor and pipeline parallelism (--tp N, --pp M, docs/distributed.md). cli_dist_begin joins the MPI job
 * when tp or pp > 1 (the job must have tp x pp ranks) and sets *comm (NULL otherwise); false after an
 * error line. A rank other than
 * 0 then calls cli_dist_worker, which loads the model with the model options rank 0 uses (quietly), runs
 * the ops rank 0 sends until it is done and returns the exit code. cli_dist_end ends the rank's part:
 * with rc 0 it leaves the job; otherwise it aborts it, so no rank is left waiting for this one. */
struct pith_comm;
bool cli_dist_begin(const char *cmd, int tp, int pp, struct pith_comm **comm);
int cli_dist_worker(const char *cmd, struct pith_comm *comm, const char *model_path, const pith_model_options *mo);
int cli_dist_end(struct pith_comm *comm, int rc);
/* "--tp N" or "--pp M" (1..256) at argv[*i]: stores it and returns 1; 0 when not one of them; -1 after
 * an error line. */
int cli_tp_arg(const char *cmd, int argc, char **argv, int *i, int *tp, int *pp, bool *no_ep);
/* --tp's help lines, aligned as the command's other options (wide: serve's column). */
const char *cli_tp_help(bool wide);

int pith_cmd_run(int argc, char **argv);
int pith_cmd_serve(int argc, char **argv);
int pith_cmd_tokenize(int argc, char **argv);
int pith_cmd_tokbench(int argc, char **argv);
int pith_cmd_bench(int argc, char **argv);
int pith_cmd_devices(int argc, char **argv);

#endif
