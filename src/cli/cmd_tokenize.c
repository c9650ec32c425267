/* pith tokenize: text on stdin -> token ids on stdout, for checking tokenizers against references. */
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "pith/tokenizer.h"


static void usage(FILE *out) {
    fprintf(out,
            "usage: pith tokenize -m PATH [--no-bos] [--no-parse-special]\n"
            "\n"
            "Reads all of stdin as one text and prints its token ids, space-separated, on one line.\n"
            "\n"
            "  -m, --model PATH     a GGUF file, a tokenizer.json, a SentencePiece tokenizer.model, a llama2.c\n"
            "                       tokenizer file, or a model directory holding one of these\n"
            "                       (default: the default model, as for pith run)\n"
            "      --no-bos         do not add BOS (by default it is added when the tokenizer adds one)\n"
            "      --no-parse-special  treat special-token texts such as <|im_start|> as plain text\n"
            "  -h, --help           show this help\n");
}

static char *read_all(FILE *f, size_t *n) {
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    while (buf) {
        len += fread(buf + len, 1, cap - len, f);
        if (len < cap) break;
        char *nb = cap <= SIZE_MAX / 4 ? realloc(buf, cap * 2) : NULL;
        if (!nb) {
            free(buf);
            return NULL;
        }
        buf = nb;
        cap *= 2;
    }
    if (buf && ferror(f)) {
        free(buf);
        return NULL;
    }
    *n = len;
    return buf;
}

int pith_cmd_tokenize(int argc, char **argv) {
    const char *model = NULL;
    int flags = PITH_TOK_ADD_BOS | PITH_TOK_PARSE_SPECIAL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (!(model = cli_value("tokenize", argc, argv, &i))) return PITH_EXIT_USAGE;
        } else if (!strcmp(a, "--no-bos")) {
            flags &= ~PITH_TOK_ADD_BOS;
        } else if (!strcmp(a, "--no-parse-special")) {
            flags &= ~PITH_TOK_PARSE_SPECIAL;
        } else {
            fprintf(stderr, "pith tokenize: unknown option '%s' (try 'pith tokenize --help')\n", a);
            return PITH_EXIT_USAGE;
        }
    }
    if (!model) model = cli_default_model();
    if (!model) {
        cli_no_default_model("tokenize");
        return PITH_EXIT_USAGE;
    }
    pith_err err = {{0}};
    pith_tokenizer *tok;
    if (pith_tokenizer_load(model, 0, &tok, &err) != 0) {
        fprintf(stderr, "pith tokenize: %s\n", err.msg);
        return 1;
    }
    size_t n;
    char *text = read_all(stdin, &n);
    if (!text) {
        fprintf(stderr, "pith tokenize: cannot read stdin\n");
        pith_tokenizer_free(tok);
        return 1;
    }
    int32_t *ids;
    int n_ids;
    int rc = pith_tokenizer_encode(tok, text, n, flags, &ids, &n_ids, &err);
    free(text);
    pith_tokenizer_free(tok);
    if (rc != 0) {
        fprintf(stderr, "pith tokenize: %s\n", err.msg);
        return 1;
    }
    for (int i = 0; i < n_ids; i++) printf(i ? " %d" : "%d", ids[i]);
    putchar('\n');
    free(ids);
    return fflush(stdout) == 0 ? 0 : 1;
}
