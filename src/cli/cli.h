/* Shared pieces of the command-line front end: argument parsing helpers and the subcommands.
 * Exit codes: 0 success, 1 runtime failure (unreadable model, ...), 2 bad usage. */
#ifndef PITH_CLI_H
#define PITH_CLI_H

#include <stdbool.h>
#include <stdint.h>

#define PITH_EXIT_USAGE 2

/* Parse a whole argument as a number within [lo, hi]; on failure print "pith CMD: OPT: ..." and return
 * false. */
bool cli_parse_int(const char *cmd, const char *opt, const char *s, long long lo, long long hi, long long *out);
bool cli_parse_float(const char *cmd, const char *opt, const char *s, double lo, double hi, double *out);
/* Returns argv[*i + 1] and advances *i, or prints "option needs a value" and returns NULL. */
const char *cli_value(const char *cmd, int argc, char **argv, int *i);

/* The model to use when -m is absent: $PITH_DEFAULT_MODEL, else pith-default.gguf next to the binary,
 * else NULL. The returned string is static storage. */
const char *cli_default_model(void);

int pith_cmd_run(int argc, char **argv);
int pith_cmd_serve(int argc, char **argv);
int pith_cmd_tokenize(int argc, char **argv);
int pith_cmd_tokbench(int argc, char **argv);
int pith_cmd_bench(int argc, char **argv);

#endif
