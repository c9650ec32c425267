/* The Llama 2 SentencePiece model read from its protobuf (tokenizers/llama2-spm/tokenizer.model):
 * llama.cpp's llama-spm golden suite and the 1,500 War and Peace paragraphs, exact, with
 * decode(encode(text)) == text, and robustness on hostile input. */
#include "test_tokenizer_util.h"

int main(void) {
    const char *shared = check_shared_dir();
    if (!shared) return CHECK_SKIP;
    char path[4400], inp[4400], out[4400];
    snprintf(path, sizeof path, "%s/tokenizers/llama2-spm/tokenizer.model", shared);
    pith_tokenizer *t;
    pith_err err = {{0}};
    if (pith_tokenizer_load(path, 0, &t, &err) != 0) {
        fprintf(stderr, "load: %s\n", err.msg);
        return 1;
    }
    CHECK(pith_tokenizer_n_vocab(t) == 32000);
    CHECK(pith_tokenizer_bos(t) == 1 && pith_tokenizer_eos(t) == 2);
    snprintf(inp, sizeof inp, "%s/tokenizers/llamacpp/ggml-vocab-llama-spm.gguf.inp", shared);
    snprintf(out, sizeof out, "%s/tokenizers/llamacpp/ggml-vocab-llama-spm.gguf.out", shared);
    CHECK(tt_run_suite(t, inp, out, true) > 40);
    snprintf(inp, sizeof inp, "%s/tokenizers/vectors/war-and-peace-1500.inp", shared);
    snprintf(out, sizeof out, "%s/tokenizers/vectors/war-and-peace-1500.llama2spm.out", shared);
    CHECK(tt_run_suite(t, inp, out, true) == 1500);

    /* BOS is added by default and "<s>" in the text is only a token with PITH_TOK_PARSE_SPECIAL. */
    int32_t *ids;
    int n;
    CHECK(pith_tokenizer_encode(t, "<s>Hi", 5, PITH_TOK_ADD_BOS | PITH_TOK_PARSE_SPECIAL, &ids, &n, &err) == 0);
    CHECK(n >= 3 && ids[0] == 1 && ids[1] == 1);
    free(ids);
    CHECK(pith_tokenizer_encode(t, "<s>Hi", 5, PITH_TOK_ADD_BOS, &ids, &n, &err) == 0);
    CHECK(n >= 3 && ids[0] == 1 && ids[1] != 1);
    free(ids);

    /* Damaged model files are refused with an error, never a crash. */
    size_t size;
    char *data = tt_slurp(path, &size);
    CHECK(data != NULL);
    const char *tmp = getenv("PITH_TEST_TMP");
    char bad[4400];
    snprintf(bad, sizeof bad, "%s/bad_tokenizer.model", tmp ? tmp : ".");
    for (int round = 0; data && round < 6; round++) {
        FILE *f = fopen(bad, "wb");
        if (!f) break;
        size_t cut = round < 3 ? size / (size_t)(round + 2) : size;
        fwrite(data, 1, cut, f);
        if (round >= 3) { /* flip bytes in the middle instead */
            fseek(f, (long)(size / 3 + (size_t)round * 101), SEEK_SET);
            fputc(0xFF, f);
            fputc(0xFF, f);
        }
        fclose(f);
        pith_tokenizer *bt = NULL;
        pith_err e2 = {{0}};
        if (pith_tokenizer_load(bad, 0, &bt, &e2) == 0) {
            /* A flip inside a piece's text can leave a valid file: it must still work. */
            CHECK(bt != NULL);
            tt_encode_decode_ok(bt, "Hello world", 11, false);
            pith_tokenizer_free(bt);
        } else {
            CHECK(bt == NULL && strstr(e2.msg, "bad_tokenizer.model") != NULL);
        }
    }
    free(data);

    tt_robustness(t, "llama2-spm");
    pith_tokenizer_free(t);
    return check_summary("test_tokenizer_spm");
}
