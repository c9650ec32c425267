/* Hand-written tokenizer.json files for the parts of the Hugging Face format that the Llama 3 / Qwen3
 * files do not use: SentencePiece-style BPE (Prepend/Replace normalizers, byte_fallback, fuse_unk,
 * Strip decoder, TemplateProcessing), added tokens with lstrip/rstrip, merges in both spellings,
 * Metaspace, every Split behaviour, the regex engine's large-stack retry, and refusals of what is not
 * supported. Expected ids are worked out by hand from the BPE rules in each case's comment. */
#include "test_tokenizer_util.h"

static const char *tmp_dir(void) {
    const char *d = getenv("PITH_TEST_TMP");
    return d && *d ? d : ".";
}

/* Writes json to tmp/name (and tokenizer_config.json beside it when config is not NULL) and loads. */
static pith_tokenizer *load_json(const char *name, const char *json, const char *config, pith_err *err) {
    char dir[4300], path[4400];
    snprintf(dir, sizeof dir, "%s/%s", tmp_dir(), name);
    char cmd[4500];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
    if (system(cmd) != 0) return NULL;
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    remove(path);
    if (config) {
        FILE *f = fopen(path, "wb");
        if (!f) return NULL;
        fputs(config, f);
        fclose(f);
    }
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    FILE *f = fopen(path, "wb");
    if (!f) return NULL;
    fputs(json, f);
    fclose(f);
    pith_tokenizer *t = NULL;
    /* The directory form: pith_tokenizer_load finds tokenizer.json inside. */
    if (pith_tokenizer_load(dir, 0, &t, err) != 0) return NULL;
    return t;
}

static int encode(const pith_tokenizer *t, const char *text, int flags, int32_t *out, int cap) {
    int32_t *ids;
    int n;
    pith_err err = {{0}};
    if (pith_tokenizer_encode(t, text, strlen(text), flags, &ids, &n, &err) != 0) return -1;
    for (int i = 0; i < n && i < cap; i++) out[i] = ids[i];
    free(ids);
    return n;
}

static bool ids_are(const pith_tokenizer *t, const char *text, int flags, const int32_t *want, int n_want) {
    int32_t got[64];
    int n = encode(t, text, flags, got, 64);
    bool ok = n == n_want && memcmp(got, want, (size_t)n * sizeof *got) == 0;
    if (!ok) {
        fprintf(stderr, "encode(\"%s\"): got", text);
        for (int i = 0; i < n && i < 64; i++) fprintf(stderr, " %d", got[i]);
        fprintf(stderr, ", want");
        for (int i = 0; i < n_want; i++) fprintf(stderr, " %d", want[i]);
        fputc('\n', stderr);
    }
    return ok;
}

static char *decode(const pith_tokenizer *t, const int32_t *ids, int n, bool keep) {
    char *text = NULL;
    size_t len;
    pith_err err = {{0}};
    if (pith_tokenizer_decode(t, ids, n, keep, &text, &len, &err) != 0) return NULL;
    return text;
}

/* A Llama-2-style tokenizer.json: ids 0-2 <unk> <s> </s>, 3..258 <0x00>..<0xFF>, then the pieces. */
static void test_spm_style(void) {
    static char json[32768];
    int k = snprintf(json, sizeof json,
                     "{\"version\":\"1.0\",\"added_tokens\":["
                     "{\"id\":0,\"content\":\"<unk>\",\"special\":true,\"lstrip\":false,\"rstrip\":false},"
                     "{\"id\":1,\"content\":\"<s>\",\"special\":true},"
                     "{\"id\":2,\"content\":\"</s>\",\"special\":true},"
                     "{\"id\":265,\"content\":\"<sep>\",\"special\":true,\"lstrip\":true,\"rstrip\":true},"
                     "{\"id\":266,\"content\":\"xyz\",\"special\":false}],"
                     "\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":["
                     "{\"type\":\"Prepend\",\"prepend\":\"\\u2581\"},"
                     "{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"\\u2581\"}]},"
                     "\"pre_tokenizer\":null,"
                     "\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":["
                     "{\"SpecialToken\":{\"id\":\"<s>\",\"type_id\":0}},{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}]},"
                     "\"decoder\":{\"type\":\"Sequence\",\"decoders\":["
                     "{\"type\":\"Replace\",\"pattern\":{\"String\":\"\\u2581\"},\"content\":\" \"},"
                     "{\"type\":\"ByteFallback\"},{\"type\":\"Fuse\"},"
                     "{\"type\":\"Strip\",\"content\":\" \",\"start\":1,\"stop\":0}]},"
                     "\"model\":{\"type\":\"BPE\",\"dropout\":null,\"unk_token\":\"<unk>\",\"fuse_unk\":true,"
                     "\"byte_fallback\":true,\"vocab\":{\"<unk>\":0,\"<s>\":1,\"</s>\":2");
    for (int b = 0; b < 256; b++) k += snprintf(json + k, sizeof json - (size_t)k, ",\"<0x%02X>\":%d", b, 3 + b);
    /* 259 ▁, 260 a, 261 b, 262 ▁a, 263 ab, 264 ▁ab; merges by rank: ▁+a, a+b, ▁a+b. */
    snprintf(json + k, sizeof json - (size_t)k,
             ",\"\\u2581\":259,\"a\":260,\"b\":261,\"\\u2581a\":262,\"ab\":263,\"\\u2581ab\":264},"
             "\"merges\":[\"\\u2581 a\",[\"a\",\"b\"],\"\\u2581a b\"]}}");
    pith_err err = {{0}};
    pith_tokenizer *t = load_json("hf_spm", json, NULL, &err);
    CHECKF(t != NULL, "%s", err.msg);
    if (!t) return;
    CHECK(pith_tokenizer_n_vocab(t) == 267 && pith_tokenizer_bos(t) == 1);
    /* "ab ab" -> "▁ab▁ab": ▁+a at both words (rank 0), then ▁a+b (rank 2): [▁ab ▁ab]. */
    CHECK(ids_are(t, "ab ab", 0, (const int32_t[]){264, 264}, 2));
    CHECK(ids_are(t, "ab ab", PITH_TOK_ADD_BOS, (const int32_t[]){1, 264, 264}, 3));
    /* "ba": ▁+b has no merge, b+a none: [▁ b a]. */
    CHECK(ids_are(t, "ba", 0, (const int32_t[]){259, 261, 260}, 3));
    /* "é" is not in the vocabulary: its UTF-8 bytes C3 A9 as <0xC3> <0xA9>. */
    CHECK(ids_are(t, "\xc3\xa9", 0, (const int32_t[]){259, 3 + 0xC3, 3 + 0xA9}, 3));
    /* <sep> strips the spaces around it; xyz (non-special) matches even without parse-special, and each
     * fragment after a token gets its own ▁ prefix. */
    CHECK(ids_are(t, "ab  <sep> ab", PITH_TOK_PARSE_SPECIAL, (const int32_t[]){264, 265, 264}, 3));
    CHECK(ids_are(t, "abxyzab", 0, (const int32_t[]){264, 266, 264}, 3));
    int32_t ids[8];
    int n = encode(t, "ab \xc3\xa9 ba", 0, ids, 8);
    char *dec = decode(t, ids, n, false);
    CHECK(dec && strcmp(dec, "ab \xc3\xa9 ba") == 0);
    free(dec);
    int32_t with_specials[] = {1, 264, 265, 2};
    dec = decode(t, with_specials, 4, false);
    CHECK(dec && strcmp(dec, "ab") == 0);
    free(dec);
    /* Kept specials are text: the leading-space strip only applies to the sequence's first token, as
     * Hugging Face's Strip decoder does. */
    dec = decode(t, with_specials, 4, true);
    CHECK(dec && strcmp(dec, "<s> ab<sep></s>") == 0);
    free(dec);
    pith_tokenizer_free(t);
}

/* With a token holding "▁" after a letter, merges cross word starts, so the fragment must be merged
 * whole: "a b" -> ▁a▁b via a+▁, a▁+b, ▁+a▁b; cut at words it would be [▁ a] [▁ b]. */
static void test_unsplittable(void) {
    static const char json[] =
        "{\"added_tokens\":[],\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":["
        "{\"type\":\"Prepend\",\"prepend\":\"\\u2581\"},"
        "{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"\\u2581\"}]},"
        "\"pre_tokenizer\":null,\"decoder\":{\"type\":\"Replace\",\"pattern\":{\"String\":\"\\u2581\"},\"content\":\" \"},"
        "\"model\":{\"type\":\"BPE\",\"vocab\":{\"\\u2581\":0,\"a\":1,\"b\":2,\"a\\u2581\":3,\"a\\u2581b\":4,"
        "\"\\u2581a\\u2581b\":5},\"merges\":[\"a \\u2581\",\"a\\u2581 b\",\"\\u2581 a\\u2581b\"]}}";
    pith_err err = {{0}};
    pith_tokenizer *t = load_json("hf_unsplit", json, NULL, &err);
    CHECKF(t != NULL, "%s", err.msg);
    if (!t) return;
    CHECK(ids_are(t, "a b", 0, (const int32_t[]){5}, 1));
    pith_tokenizer_free(t);
}

/* Byte-level vocabulary over a-z plus merges; a pre_tokenizer given by the caller. */
static pith_tokenizer *byte_level(const char *name, const char *pre, const char *extra_vocab, const char *merges,
                                  pith_err *err) {
    static char json[65536];
    int k = snprintf(json, sizeof json, "{\"added_tokens\":[],\"normalizer\":null,\"pre_tokenizer\":%s,"
                                        "\"decoder\":{\"type\":\"ByteLevel\"},"
                                        "\"model\":{\"type\":\"BPE\",\"vocab\":{", pre);
    /* Ids 0..255: the GPT-2 byte alphabet in byte order. */
    for (int b = 0; b < 256; b++) {
        uint32_t cp;
        if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174) cp = (uint32_t)b;
        else cp = 256 + (uint32_t)(b <= 32 ? b : b <= 160 ? b - 127 + 33 : 67);
        if (cp == '"' || cp == '\\') k += snprintf(json + k, sizeof json - (size_t)k, "%s\"\\%c\":%d", b ? "," : "", (char)cp, b);
        else k += snprintf(json + k, sizeof json - (size_t)k, "%s\"\\u%04X\":%d", b ? "," : "", cp, b);
    }
    snprintf(json + k, sizeof json - (size_t)k, "%s},\"merges\":%s}}", extra_vocab, merges);
    return load_json(name, json, NULL, err);
}

static void test_split_behaviours(void) {
    /* 256 "a-", 257 "-b", 258 "--": each is reachable only when the split keeps its two chars together. */
    const char *vocab = ",\"a-\":256,\"-b\":257,\"--\":258";
    const char *merges = "[\"a -\",\"- b\",\"- -\"]";
    const struct {
        const char *behavior, *pattern, *text;
        bool invert;
        int32_t want[6];
        int n;
    } cases[] = {
        {"Isolated", "-", "a-b", false, {'a', '-', 'b'}, 3},
        {"Removed", "-", "a-b", false, {'a', 'b'}, 2},
        {"MergedWithPrevious", "-", "a-b", false, {256, 'b'}, 2},
        {"MergedWithNext", "-", "a-b", false, {'a', 257}, 2},
        {"Contiguous", "-", "a--b", false, {'a', 258, 'b'}, 3},
        {"Isolated", "-", "a--b", false, {'a', '-', '-', 'b'}, 4},
        {"Removed", "[ab]", "a-b", true, {'a', 'b'}, 2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char pre[512];
        snprintf(pre, sizeof pre,
                 "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":\"%s\"},"
                 "\"behavior\":\"%s\",\"invert\":%s},{\"type\":\"ByteLevel\",\"add_prefix_space\":false,"
                 "\"use_regex\":false}]}",
                 cases[i].pattern, cases[i].behavior, cases[i].invert ? "true" : "false");
        pith_err err = {{0}};
        pith_tokenizer *t = byte_level("hf_split", pre, vocab, merges, &err);
        CHECKF(t != NULL, "%s", err.msg);
        if (!t) continue;
        CHECKF(ids_are(t, cases[i].text, 0, cases[i].want, cases[i].n), "%s%s", cases[i].behavior,
               cases[i].invert ? " inverted" : "");
        pith_tokenizer_free(t);
    }
}

static void test_byte_level_details(void) {
    /* ByteLevel with its own GPT-2 regex and prefix space: " ab" is one pre-token; 256 "Ġa", 257 "Ġab". */
    pith_err err = {{0}};
    pith_tokenizer *t = byte_level("hf_bl", "{\"type\":\"ByteLevel\",\"add_prefix_space\":true,\"use_regex\":true}",
                                   ",\"\\u0120a\":256,\"\\u0120ab\":257", "[[\"\\u0120\",\"a\"],[\"\\u0120a\",\"b\"]]", &err);
    CHECKF(t != NULL, "%s", err.msg);
    if (t) {
        CHECK(ids_are(t, "ab ab", 0, (const int32_t[]){257, 257}, 2));
        CHECK(ids_are(t, "ab\xff", 0, (const int32_t[]){257, 255}, 2));
        pith_tokenizer_free(t);
    }

    /* A regex whose JIT match outgrows the default 32 KiB stack on a 1 MB run: the large-stack retry
     * handles it (or the call fails cleanly); never a crash. */
    t = byte_level("hf_jit",
                   "{\"type\":\"Split\",\"pattern\":{\"Regex\":\"(?:a|b)+\"},\"behavior\":\"Isolated\",\"invert\":false}",
                   ",\"ab\":256", "[\"a b\"]", &err);
    CHECKF(t != NULL, "%s", err.msg);
    if (t) {
        size_t n = 1 << 20;
        char *buf = malloc(n + 1);
        for (size_t i = 0; i < n; i++) buf[i] = "ab"[i & 1];
        buf[n] = '\0';
        int32_t *ids;
        int n_ids;
        if (pith_tokenizer_encode(t, buf, n, 0, &ids, &n_ids, &err) == 0) {
            CHECK(n_ids == (int)(n / 2) && ids[0] == 256 && ids[n_ids - 1] == 256);
            free(ids);
        } else {
            CHECK(strstr(err.msg, "regex") != NULL);
        }
        free(buf);
        pith_tokenizer_free(t);
    }
}

static void test_metaspace(void) {
    /* Metaspace, prepend_scheme "first", split: "ab ab" -> "▁ab" "▁ab"; after a special token no prefix. */
    static const char json[] =
        "{\"added_tokens\":[{\"id\":6,\"content\":\"<x>\",\"special\":true}],\"normalizer\":null,"
        "\"pre_tokenizer\":{\"type\":\"Metaspace\",\"replacement\":\"\\u2581\",\"prepend_scheme\":\"first\",\"split\":true},"
        "\"decoder\":{\"type\":\"Metaspace\",\"replacement\":\"\\u2581\",\"prepend_scheme\":\"first\",\"split\":true},"
        "\"model\":{\"type\":\"BPE\",\"vocab\":{\"\\u2581\":0,\"a\":1,\"b\":2,\"\\u2581a\":3,\"\\u2581ab\":4,\"ab\":5},"
        "\"merges\":[\"\\u2581 a\",\"\\u2581a b\",\"a b\"]}}";
    pith_err err = {{0}};
    pith_tokenizer *t = load_json("hf_meta", json, "{\"add_bos_token\":false}", &err);
    CHECKF(t != NULL, "%s", err.msg);
    if (!t) return;
    CHECK(ids_are(t, "ab ab", PITH_TOK_ADD_BOS, (const int32_t[]){4, 4}, 2));
    CHECK(ids_are(t, "<x>ab", PITH_TOK_PARSE_SPECIAL, (const int32_t[]){6, 5}, 2));
    int32_t ids[] = {4, 4};
    char *dec = decode(t, ids, 2, false);
    CHECK(dec && strcmp(dec, "ab ab") == 0);
    free(dec);
    pith_tokenizer_free(t);
}

static void test_refusals(void) {
    const struct {
        const char *json, *needle;
    } cases[] = {
        {"{\"model\":{\"type\":\"Unigram\",\"vocab\":[]}}", "Unigram"},
        {"{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]},\"normalizer\":{\"type\":\"Lowercase\"}}",
         "Lowercase"},
        {"{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]},\"pre_tokenizer\":{\"type\":\"BertPreTokenizer\"}}",
         "BertPreTokenizer"},
        {"{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":-4},\"merges\":[]}}", "id"},
        {"{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]},\"pre_tokenizer\":{\"type\":\"Split\","
         "\"pattern\":{\"Regex\":\"([a-\"},\"behavior\":\"Isolated\"}}",
         "regex"},
        {"{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[7]}}", "merge"},
        {"{\"model\": [1, 2", "JSON"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pith_err err = {{0}};
        pith_tokenizer *t = load_json("hf_bad", cases[i].json, NULL, &err);
        CHECK(t == NULL);
        CHECKF(strstr(err.msg, cases[i].needle) && strstr(err.msg, "tokenizer.json"), "case %zu: %s", i, err.msg);
        pith_tokenizer_free(t);
    }
}

int main(void) {
    test_spm_style();
    test_unsplittable();
    test_split_behaviours();
    test_byte_level_details();
    test_metaspace();
    test_refusals();
    return check_summary("test_tokenizer_hfjson");
}
