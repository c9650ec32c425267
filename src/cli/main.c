/* pith: one binary, several subcommands. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/info.h"
#include "cli/cli.h"
#include "pith/dist.h"

#ifndef PITH_VERSION
#define PITH_VERSION "unknown"
#endif

typedef struct command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} command;

static const command commands[] = {
    {"run", pith_cmd_run, "generate text from a prompt, a chat (--chat), or a file of prompts (-f)"},
    {"serve", pith_cmd_serve, "OpenAI-compatible HTTP server (completions, chat, streaming, metrics)"},
    {"tokenize", pith_cmd_tokenize, "print the token ids of stdin's text"},
    {"bench", pith_cmd_bench, "prompt-processing and generation speed against measured machine limits"},
    {"tokbench", pith_cmd_tokbench, "tokenizer encode throughput (MB/s) on a text file"},
    {"devices", pith_cmd_devices, "the devices a model can run on (cpu, vulkan:N) for --device"},
};

static void usage(FILE *out) {
    fprintf(out, "pith: a small, fast LLM inference engine\n\nusage: pith COMMAND [options]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(out, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(out,
            "  help [COMMAND]  show this help, or a command's ('pith help run' = 'pith run --help')\n"
            "  --version  print the version, the compiler and the kernel table chosen for this CPU\n"
            "\n"
            "Run 'pith COMMAND --help' for a command's options. Every long option taking a value also\n"
            "takes the form --option=value.\n"
            "Models: GGUF files, Hugging Face directories (config.json + *.safetensors), llama2.c .bin\n"
            "checkpoints. Without -m, commands use the default model: $PITH_DEFAULT_MODEL if set, else\n"
            "pith-default.gguf next to the binary, else ../share/pith/pith-default.gguf relative to it\n"
            "(where 'make install' puts it; the build copies it from assets/default.gguf, a\n"
            "3.4M-parameter Llama trained on the King James Bible; see docs/default-model.md).\n");
}

static const command *find_command(const char *name) {
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(name, commands[i].name)) return &commands[i];
    return NULL;
}

static int print_version(void) {
#define PITH_STR2(x) #x
#define PITH_STR(x) PITH_STR2(x)
#if defined(__clang__)
    const char *cc = "clang " PITH_STR(__clang_major__) "." PITH_STR(__clang_minor__) "." PITH_STR(__clang_patchlevel__);
#elif defined(__GNUC__)
    const char *cc = "gcc " __VERSION__;
#else
    const char *cc = "unknown compiler";
#endif
    printf("pith %s\ncompiler: %s\nkernels: %s (chosen for this CPU)\nmpi: %s\n", PITH_VERSION, cc,
           pith_backend_cpu_kernel_name(false), pith_dist_have_mpi() ? "yes (--tp)" : "no (built without MPI)");
    return fflush(stdout) || ferror(stdout) ? 1 : 0;
}

/* Splits every "--option=value" argument into "--option" "value", so each command's parser sees one
 * form. A value that itself starts with "--" and holds '=' must be given as --option=VALUE. */
static char **split_equals(int argc, char **argv, int *out_argc) {
    char **v = malloc(((size_t)argc * 2 + 1) * sizeof *v);
    if (!v) return NULL;
    int n = 0;
    for (int i = 0; i < argc; i++) {
        char *eq = argv[i][0] == '-' && argv[i][1] == '-' ? strchr(argv[i], '=') : NULL;
        if (eq && eq > argv[i] + 2) {
            *eq = 0; /* argv strings are writable (C11 5.1.2.2.1) */
            v[n++] = argv[i];
            v[n++] = eq + 1;
        } else {
            v[n++] = argv[i];
        }
    }
    v[n] = NULL;
    *out_argc = n;
    return v;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return PITH_EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || (!strcmp(cmd, "help") && argc == 2)) {
        usage(stdout);
        return fflush(stdout) ? 1 : 0;
    }
    if (!strcmp(cmd, "--version")) return print_version();
    if (!strcmp(cmd, "help")) {
        const command *c = find_command(argv[2]);
        if (!c || argc > 3) {
            fprintf(stderr, "pith help: %s '%s' (try 'pith --help')\n", c ? "too many arguments after" : "unknown command",
                    argv[2]);
            return PITH_EXIT_USAGE;
        }
        char *help_argv[] = {argv[2], "--help", NULL};
        return c->run(2, help_argv);
    }
    const command *c = find_command(cmd);
    if (!c) {
        fprintf(stderr, "pith: unknown command '%s' (try 'pith --help')\n", cmd);
        return PITH_EXIT_USAGE;
    }
    int n;
    char **args = split_equals(argc - 1, argv + 1, &n);
    if (!args) {
        fprintf(stderr, "pith: out of memory\n");
        return 1;
    }
    int rc = c->run(n, args);
    free(args);
    return rc;
}
