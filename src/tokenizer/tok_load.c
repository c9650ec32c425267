/* pith_tokenizer_load: picks the loader from what the path holds. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "format/mapped_file.h"
#include "tokenizer/tok_internal.h"

/* Whether a model directory names this file at all: a FIFO or a directory there is then opened (non-
 * blocking) and refused with an error naming it, rather than passed over for the next candidate. */
static bool exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

static int load_gguf_path(const char *path, pith_tokenizer **out, pith_err *err) {
    pith_gguf *g;
    if (pith_gguf_open(path, &g, err) != 0) return -1;
    int rc = pith_tokenizer_from_gguf(g, out, err);
    pith_gguf_close(g);
    return rc;
}

/* tokenizer.json, with tokenizer_config.json from the same directory when present. */
static int load_json_path(const char *path, pith_tokenizer **out, pith_err *err) {
    const char *slash = strrchr(path, '/');
    size_t dir_len = slash ? (size_t)(slash - path + 1) : 0;
    char *config = malloc(dir_len + sizeof "tokenizer_config.json");
    if (!config) return pith_errf(err, "out of memory");
    memcpy(config, path, dir_len);
    strcpy(config + dir_len, "tokenizer_config.json");
    int rc = tok_load_hf_json(path, exists(config) ? config : NULL, out, err);
    free(config);
    return rc;
}

static int load_file(const char *path, int n_vocab, pith_tokenizer **out, pith_err *err) {
    unsigned char head[64];
    size_t got = 0;
    if (pith_read_file_head(path, head, sizeof head, &got, NULL, err)) return -1;
    if (got >= 4 && memcmp(head, "GGUF", 4) == 0) return load_gguf_path(path, out, err);
    size_t i = 0;
    while (i < got && (head[i] == ' ' || head[i] == '\t' || head[i] == '\n' || head[i] == '\r')) i++;
    if (i < got && head[i] == '{') return load_json_path(path, out, err);
    /* A llama2.c file opens with a small positive max_token_length; a SentencePiece protobuf opens with
     * field 1 (pieces), tag byte 0x0A, whose bytes read as a large integer. */
    if (got >= 4) {
        uint32_t v = (uint32_t)head[0] | (uint32_t)head[1] << 8 | (uint32_t)head[2] << 16 | (uint32_t)head[3] << 24;
        if (v > 0 && v <= (1u << 20)) return pith_tokenizer_load_llama2c(path, n_vocab, out, err);
        if (head[0] == 0x0A) return tok_load_spm_model(path, out, err);
    }
    return pith_errf(err, "%s: not a GGUF file, tokenizer.json, SentencePiece model or llama2.c tokenizer", path);
}

static int load_dir(const char *dir, int n_vocab, pith_tokenizer **out, pith_err *err) {
    static const char *const names[] = {"tokenizer.json", "tokenizer.model", "tokenizer.bin"};
    size_t n = strlen(dir);
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char *p = malloc(n + strlen(names[i]) + 2);
        if (!p) return pith_errf(err, "out of memory");
        sprintf(p, "%s/%s", dir, names[i]);
        if (exists(p)) {
            int rc = load_file(p, n_vocab, out, err);
            free(p);
            return rc;
        }
        free(p);
    }
    return pith_errf(err, "%s: no tokenizer.json, tokenizer.model or tokenizer.bin in this directory", dir);
}

int pith_tokenizer_load(const char *path, int n_vocab, pith_tokenizer **out, pith_err *err) {
    *out = NULL;
    struct stat st;
    if (!path || stat(path, &st) != 0) return pith_errf(err, "%s: cannot open", path ? path : "(null)");
    return S_ISDIR(st.st_mode) ? load_dir(path, n_vocab, out, err) : load_file(path, n_vocab, out, err);
}
