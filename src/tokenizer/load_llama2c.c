/* llama2.c tokenizer files (tokenizer.bin, tok512.bin): int32 max_token_length, then per token a
 * float32 score, an int32 byte length and the bytes. Written by llama2.c's export from a SentencePiece
 * model with "▁" already turned into ' ', BOS/EOS stored as "\n<s>\n" / "\n</s>\n", and byte-fallback
 * pieces as "<0xNN>". Encoding follows llama2.c: one ' ' before the text, then score-driven merges. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/mapped_file.h"
#include "tokenizer/tok_internal.h"

int tok_read_file(const char *path, char **data, size_t *size, pith_err *err) {
    return pith_read_small_file(path, TOK_MAX_FILE_BYTES, data, size, err);
}

static int32_t read_i32(const unsigned char *p) {
    uint32_t v = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    int32_t r;
    memcpy(&r, &v, 4);
    return r;
}

static float read_f32(const unsigned char *p) {
    uint32_t v = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    float f;
    memcpy(&f, &v, 4);
    return f;
}

/* Walks the entries; returns how many complete ones the data holds, or -1 when one is malformed. */
static int count_entries(const unsigned char *d, size_t n, int limit) {
    size_t off = 4;
    int count = 0;
    while (off < n && (limit <= 0 || count < limit)) {
        if (n - off < 8) return -1;
        int32_t len = read_i32(d + off + 4);
        if (len < 0 || (size_t)len > n - off - 8) return -1;
        off += 8 + (size_t)len;
        count++;
    }
    return count;
}

int tok_load_llama2c_data(const char *path, const unsigned char *d, size_t n, int n_vocab, pith_tokenizer **out,
                          pith_err *err) {
    *out = NULL;
    if (n < 4) return pith_errf(err, "%s: too short for a llama2.c tokenizer", path);
    int32_t max_len = read_i32(d);
    if (max_len <= 0 || max_len > (1 << 20))
        return pith_errf(err, "%s: bad max_token_length %d (not a llama2.c tokenizer?)", path, max_len);
    if (n_vocab < 0) return pith_errf(err, "%s: negative vocabulary size %d", path, n_vocab);
    int have = count_entries(d, n, n_vocab);
    if (have < 0) return pith_errf(err, "%s: malformed token entry (length past the end of the file)", path);
    if (n_vocab == 0) n_vocab = have;
    if (have < n_vocab) return pith_errf(err, "%s: holds %d tokens, the model needs %d", path, have, n_vocab);
    pith_tokenizer *t = tok_alloc(n_vocab, err);
    if (!t) return pith_err_prefix(err, "%s", path);
    size_t off = 4;
    for (int32_t id = 0; id < n_vocab; id++) {
        float score = read_f32(d + off);
        int32_t len = read_i32(d + off + 4);
        const char *text = (const char *)d + off + 8;
        int type = TOK_NORMAL;
        if (id == 0) type = TOK_UNKNOWN;
        else if (id == 1 || id == 2) type = TOK_CONTROL;
        else if (len == 6 && memcmp(text, "<0x", 3) == 0 && text[5] == '>') type = TOK_BYTE;
        if (tok_set_token(t, id, text, (size_t)len, score, type, err) != 0) goto fail;
        off += 8 + (size_t)len;
    }
    t->model = TOK_MODEL_SPM;
    t->decode = TOK_DECODE_SPM;
    t->unk = 0;
    t->bos = n_vocab > 1 ? 1 : -1;
    t->eos = n_vocab > 2 ? 2 : -1;
    t->add_bos = true;
    t->add_space_prefix = true;
    t->strip_leading_space = true;
    t->no_special_matching = true;
    memcpy(t->space_marker, " ", 1);
    t->space_marker_len = 1;
    t->byte_fallback = true;
    if (tok_add_norm(t, TOK_NORM_PREPEND, " ", 1, NULL, 0, err) != 0) goto fail;
    if (tok_finalize(t, err) != 0) goto fail;
    *out = t;
    return 0;
fail:
    pith_tokenizer_free(t);
    return pith_err_prefix(err, "%s", path);
}

int pith_tokenizer_load_llama2c(const char *path, int n_vocab, pith_tokenizer **out, pith_err *err) {
    *out = NULL;
    char *data;
    size_t n;
    if (tok_read_file(path, &data, &n, err) != 0) return -1;
    int rc = tok_load_llama2c_data(path, (const unsigned char *)data, n, n_vocab, out, err);
    free(data);
    return rc;
}
