/* Tokenizer encode/decode and the streaming detokenizer, on two small fixed tokenizers: the default
 * model's SentencePiece vocabulary (assets/default.gguf) and a byte-level BPE tokenizer.json (the
 * seed tokenizer of the tokenizer_json corpus). Input byte 0 picks the tokenizer and the flags; the
 * rest is text, encoded, then decoded, and also read as little-endian 16-bit token ids (any value,
 * in range or not) for decode, skip, push and flush. */
#include "fuzz_util.h"

static pith_tokenizer *toks[2];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    pith_err err;
    if (pith_tokenizer_load(FUZZ_SOURCE_DIR "/assets/default.gguf", 0, &toks[0], &err) ||
        pith_tokenizer_load(FUZZ_SOURCE_DIR "/tests/fuzz/corpus/tokenizer_json/bytelevel.json", 0, &toks[1], &err)) {
        fprintf(stderr, "fuzz_tok_encode: %s\n", err.msg);
        exit(1);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const pith_tokenizer *t = toks[data[0] & 1];
    int flags = (data[0] & 2 ? PITH_TOK_ADD_BOS : 0) | (data[0] & 4 ? PITH_TOK_PARSE_SPECIAL : 0);
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    pith_err err;
    int32_t *ids = NULL;
    int n = 0;
    if (pith_tokenizer_encode(t, text, len, flags, &ids, &n, &err) == 0) {
        fuzz_decode_all(t, ids, n);
        free(ids);
    }
    int m = (int)(len / 2);
    int32_t *raw = malloc((size_t)(m > 0 ? m : 1) * sizeof *raw);
    if (!raw) return 0;
    for (int i = 0; i < m; i++) {
        int v = data[1 + 2 * i] | data[2 + 2 * i] << 8;
        raw[i] = (data[0] & 8) ? (int32_t)(int16_t)v : v % (pith_tokenizer_n_vocab(t) + 2);
        (void)pith_tokenizer_is_special(t, raw[i]);
        (void)pith_tokenizer_is_eog(t, raw[i]);
        size_t tl;
        (void)pith_tokenizer_token_text(t, raw[i], &tl);
    }
    fuzz_decode_all(t, raw, m);
    free(raw);
    return 0;
}
