/* pith: one binary, several subcommands. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

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
};

static void usage(FILE *out) {
    fprintf(out, "pith: a small, fast LLM inference engine\n\nusage: pith COMMAND [options]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(out, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(out,
            "  help       show this help\n"
            "\n"
            "Run 'pith COMMAND --help' for a command's options.\n"
            "Models: GGUF files, Hugging Face directories (config.json + *.safetensors), llama2.c .bin\n"
            "checkpoints. Without -m, commands use the default model: $PITH_DEFAULT_MODEL if set, else\n"
            "pith-default.gguf next to the binary, else ../share/pith/pith-default.gguf relative to it\n"
            "(where 'make install' puts it; the build copies it from assets/default.gguf, a\n"
            "3.4M-parameter Llama trained on the King James Bible; see docs/default-model.md).\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return PITH_EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(cmd, commands[i].name)) return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "pith: unknown command '%s' (try 'pith --help')\n", cmd);
    return PITH_EXIT_USAGE;
}
