/* pith: one binary, several subcommands. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

static void usage(FILE *out) {
    fprintf(out,
            "pith: a small, fast LLM inference engine\n"
            "\n"
            "usage: pith COMMAND [options]\n"
            "\n"
            "commands:\n"
            "  run        generate text from a prompt (or a file of prompts, batched)\n"
            "  bench      measure prompt and generation speed against the machine's bandwidth and peaks\n"
            "  help       show this help\n"
            "\n"
            "Run 'pith COMMAND --help' for a command's options.\n"
            "Models: GGUF files, Hugging Face directories (config.json + *.safetensors), llama2.c .bin\n"
            "checkpoints. Without -m, commands use the default model installed next to the binary\n"
            "(pith-default.gguf) or named by $PITH_DEFAULT_MODEL.\n");
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
    if (!strcmp(cmd, "run")) return pith_cmd_run(argc - 1, argv + 1);
    if (!strcmp(cmd, "bench")) return pith_cmd_bench(argc - 1, argv + 1);
    fprintf(stderr, "pith: unknown command '%s' (try 'pith --help')\n", cmd);
    return PITH_EXIT_USAGE;
}
