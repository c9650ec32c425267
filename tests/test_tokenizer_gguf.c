/* Tokenizers from GGUF metadata.
 *
 * - Every llama.cpp golden suite in ../shared/tokenizers/llamacpp whose vocabulary GGUF is present
 *   (SentencePiece llama-spm and phi-3; byte-level gpt-2, deepseek-coder, deepseek-llm, falcon,
 *   starcoder), every case exact, and decode(encode(text)) == text.
 * - The llama-spm GGUF holds the same vocabulary as Llama 2's tokenizer.model (same ids, texts and
 *   special flags), and reproduces the 1,500 War and Peace paragraphs exactly, as the .model does in
 *   test_tokenizer_spm.
 * - The tiny random Llama 2 fixture's 32,000-token vocabulary loads and tokenizes like Llama 2.
 * - One tokenizer shared by 4 threads encoding at once gives the same ids as one thread.
 * - Where the default, Tekken, DeepSeek-V3 and Kimi K2 pre-tokenizers cut (merges that only happen inside a
 *   piece).
 * - Hand-built GGUF files: a minimal byte-level vocabulary with one merge, and broken tokenizer
 *   metadata (unknown model, mismatched arrays, missing merges) refused with an error. */
#include <dirent.h>
#include <pthread.h>

#include "test_tokenizer_util.h"

static void run_llamacpp_suites(const char *shared) {
    char dir[4300];
    snprintf(dir, sizeof dir, "%s/tokenizers/llamacpp", shared);
    DIR *d = opendir(dir);
    CHECK(d != NULL);
    if (!d) return;
    int suites = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t n = strlen(e->d_name);
        if (n < 5 || strcmp(e->d_name + n - 5, ".gguf") != 0) continue;
        char path[4600], inp[4700], out[4700];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        snprintf(inp, sizeof inp, "%s.inp", path);
        snprintf(out, sizeof out, "%s.out", path);
        pith_tokenizer *t;
        pith_err err = {{0}};
        CHECKF(pith_tokenizer_load(path, 0, &t, &err) == 0, "%s", err.msg);
        if (!t) continue;
        CHECK(tt_run_suite(t, inp, out, true) > 40);
        if (strstr(e->d_name, "gpt-2") || strstr(e->d_name, "deepseek-llm") || strstr(e->d_name, "llama-spm"))
            tt_robustness(t, e->d_name);
        pith_tokenizer_free(t);
        suites++;
    }
    closedir(d);
    printf("%d llama.cpp suites with a GGUF vocabulary\n", suites);
    CHECK(suites >= 7);
}

static void compare_with_sentencepiece(const char *shared) {
    char gguf[4400], model[4400], inp[4400], out[4400];
    snprintf(gguf, sizeof gguf, "%s/tokenizers/llamacpp/ggml-vocab-llama-spm.gguf", shared);
    snprintf(model, sizeof model, "%s/tokenizers/llama2-spm/tokenizer.model", shared);
    pith_tokenizer *a = NULL, *b = NULL;
    pith_err err = {{0}};
    CHECKF(pith_tokenizer_load(gguf, 0, &a, &err) == 0, "%s", err.msg);
    CHECKF(pith_tokenizer_load(model, 0, &b, &err) == 0, "%s", err.msg);
    if (!a || !b) goto done;
    CHECK(pith_tokenizer_n_vocab(a) == 32000 && pith_tokenizer_n_vocab(b) == 32000);
    int differ = 0;
    for (int32_t id = 0; id < 32000; id++) {
        size_t la, lb;
        const char *ta = pith_tokenizer_token_text(a, id, &la), *tb = pith_tokenizer_token_text(b, id, &lb);
        if (la != lb || memcmp(ta, tb, la) != 0 || pith_tokenizer_is_special(a, id) != pith_tokenizer_is_special(b, id))
            differ++;
    }
    CHECKF(differ == 0, "%d of 32000 ids differ between the GGUF and tokenizer.model vocabularies", differ);
    snprintf(inp, sizeof inp, "%s/tokenizers/vectors/war-and-peace-1500.inp", shared);
    snprintf(out, sizeof out, "%s/tokenizers/vectors/war-and-peace-1500.llama2spm.out", shared);
    CHECK(tt_run_suite(a, inp, out, true) == 1500);
done:
    pith_tokenizer_free(a);
    pith_tokenizer_free(b);
}

/* Phi-3's control tokens strip the whitespace after them (llama.cpp sets this by model name, matching
 * the rstrip flags of Phi-3's tokenizer.json); <|endoftext|> does not. */
static void check_phi3(const char *shared) {
    char path[4400];
    snprintf(path, sizeof path, "%s/tokenizers/llamacpp/ggml-vocab-phi-3.gguf", shared);
    pith_tokenizer *t;
    pith_err err = {{0}};
    CHECKF(pith_tokenizer_load(path, 0, &t, &err) == 0, "%s", err.msg);
    if (!t) return;
    const char *chat = "<|user|>\nHi<|end|>\n<|assistant|>";
    int32_t *ids, *plain;
    int n, n_plain;
    CHECK(pith_tokenizer_encode(t, chat, strlen(chat), PITH_TOK_PARSE_SPECIAL, &ids, &n, &err) == 0);
    CHECK(pith_tokenizer_encode(t, "Hi", 2, 0, &plain, &n_plain, &err) == 0);
    /* <|user|> ▁Hi <|end|> <|assistant|>: both newlines stripped, "Hi" encoded as a fresh fragment. */
    CHECK(n == n_plain + 3 && ids[0] == 32010 && ids[n - 2] == 32007 && ids[n - 1] == 32001);
    CHECK(n >= 3 && memcmp(ids + 1, plain, (size_t)n_plain * sizeof *ids) == 0);
    CHECK(pith_tokenizer_is_eog(t, 32007) && pith_tokenizer_is_eog(t, 32000));
    free(ids);
    free(plain);
    const char *eot = "<|endoftext|>\nHi";
    CHECK(pith_tokenizer_encode(t, eot, strlen(eot), PITH_TOK_PARSE_SPECIAL, &ids, &n, &err) == 0);
    CHECK(n >= 3 && ids[0] == 32000 && ids[1] != 32000);
    bool has_newline = false;
    for (int i = 1; i < n; i++) has_newline |= ids[i] == 13;
    CHECK(has_newline);
    free(ids);
    pith_tokenizer_free(t);
}

typedef struct job {
    const pith_tokenizer *t;
    const char *text;
    size_t n;
    uint64_t hash; /* of the ids of 20 encodes of text */
} job;

static uint64_t hash_ids(uint64_t h, const int32_t *ids, int n) {
    for (int i = 0; i < n; i++) h = (h ^ (uint32_t)ids[i]) * 0x100000001b3ULL;
    return h ^ (uint64_t)n;
}

static void *encode_job(void *arg) {
    job *j = arg;
    j->hash = 0xcbf29ce484222325ULL;
    for (int r = 0; r < 20; r++) {
        int32_t *ids;
        int n;
        pith_err err = {{0}};
        if (pith_tokenizer_encode(j->t, j->text, j->n, PITH_TOK_ADD_BOS | PITH_TOK_PARSE_SPECIAL, &ids, &n, &err) != 0) {
            j->hash = 0;
            return NULL;
        }
        j->hash = hash_ids(j->hash, ids, n);
        free(ids);
    }
    return NULL;
}

static void check_threads(const char *shared) {
    char path[4400], inp[4400];
    snprintf(path, sizeof path, "%s/tokenizers/llamacpp/ggml-vocab-deepseek-llm.gguf", shared);
    snprintf(inp, sizeof inp, "%s/tokenizers/vectors/war-and-peace-1500.inp", shared);
    pith_tokenizer *t;
    pith_err err = {{0}};
    size_t n;
    char *text = tt_slurp(inp, &n);
    CHECKF(pith_tokenizer_load(path, 0, &t, &err) == 0 && text, "%s", err.msg);
    if (!t || !text) {
        free(text);
        pith_tokenizer_free(t);
        return;
    }
    job jobs[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        /* Different 40 KB slices, so the threads also hit different words and caches. */
        jobs[i] = (job){t, text + (size_t)i * (n / 8), 40000, 0};
    }
    job solo[4];
    for (int i = 0; i < 4; i++) {
        solo[i] = jobs[i];
        encode_job(&solo[i]);
    }
    for (int i = 0; i < 4; i++) CHECK(pthread_create(&th[i], NULL, encode_job, &jobs[i]) == 0);
    for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < 4; i++) CHECK(jobs[i].hash == solo[i].hash && jobs[i].hash != 0);
    free(text);
    pith_tokenizer_free(t);
}

static void check_fixture(const char *shared) {
    char path[4400];
    snprintf(path, sizeof path, "%s/models/fixtures/llama-2-tiny-random.gguf", shared);
    pith_tokenizer *t;
    pith_err err = {{0}};
    CHECKF(pith_tokenizer_load(path, 0, &t, &err) == 0, "%s", err.msg);
    if (!t) return;
    CHECK(pith_tokenizer_n_vocab(t) == 32000 && pith_tokenizer_bos(t) == 1 && pith_tokenizer_eos(t) == 2);
    int32_t *ids;
    int n;
    CHECK(pith_tokenizer_encode(t, "Hello world", 11, PITH_TOK_ADD_BOS, &ids, &n, &err) == 0);
    CHECK(n == 3 && ids[0] == 1 && ids[1] == 15043 && ids[2] == 3186);
    free(ids);
    pith_tokenizer_free(t);
}

/* --- a minimal GGUF writer for hand-made vocabularies --- */
typedef struct gbuf {
    unsigned char *p;
    size_t n, cap;
} gbuf;

static void put(gbuf *b, const void *d, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
}
static void put_u32(gbuf *b, uint32_t v) { put(b, &v, 4); }
static void put_u64(gbuf *b, uint64_t v) { put(b, &v, 8); }
static void put_str(gbuf *b, const char *s, size_t n) {
    put_u64(b, n);
    put(b, s, n);
}
static void key(gbuf *b, const char *k, uint32_t type) {
    put_str(b, k, strlen(k));
    put_u32(b, type);
}
static void kv_str(gbuf *b, const char *k, const char *v) {
    key(b, k, 8);
    put_str(b, v, strlen(v));
}
static void kv_str_array(gbuf *b, const char *k, const char *const *v, const size_t *lens, uint64_t n) {
    key(b, k, 9);
    put_u32(b, 8);
    put_u64(b, n);
    for (uint64_t i = 0; i < n; i++) put_str(b, v[i], lens ? lens[i] : strlen(v[i]));
}
static void kv_f32_array(gbuf *b, const char *k, uint64_t n) {
    key(b, k, 9);
    put_u32(b, 6);
    put_u64(b, n);
    for (uint64_t i = 0; i < n; i++) {
        float f = -(float)i;
        put(b, &f, 4);
    }
}

static void kv_f32_values(gbuf *b, const char *k, const float *v, uint64_t n) {
    key(b, k, 9);
    put_u32(b, 6);
    put_u64(b, n);
    put(b, v, n * sizeof *v);
}
static void kv_i32_values(gbuf *b, const char *k, const int32_t *v, uint64_t n) {
    key(b, k, 9);
    put_u32(b, 5);
    put_u64(b, n);
    put(b, v, n * sizeof *v);
}

static int write_gguf(const char *path, const gbuf *kvs, uint64_t n_kv) {
    gbuf b = {0};
    put(&b, "GGUF", 4);
    put_u32(&b, 3);
    put_u64(&b, 0);
    put_u64(&b, n_kv);
    put(&b, kvs->p, kvs->n);
    static const unsigned char zeros[32];
    put(&b, zeros, (32 - b.n % 32) % 32);
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    fwrite(b.p, 1, b.n, f);
    fclose(f);
    free(b.p);
    return 0;
}

/* The 256 GPT-2 byte-alphabet characters as tokens 0..255, then extra tokens. */
static size_t byte_alphabet(char texts[][3], const char **ptrs, size_t *lens) {
    size_t k = 0;
    for (int b = 0; b < 256; b++) {
        uint32_t cp;
        if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174) cp = (uint32_t)b;
        else cp = 256 + (uint32_t)(b <= 32 ? b : b <= 160 ? b - 127 + 33 : 67);
        if (cp < 0x80) {
            texts[k][0] = (char)cp;
            lens[k] = 1;
        } else {
            texts[k][0] = (char)(0xC0 | (cp >> 6));
            texts[k][1] = (char)(0x80 | (cp & 0x3F));
            lens[k] = 2;
        }
        ptrs[k] = texts[k];
        k++;
    }
    return k;
}

static void check_handmade(const char *tmp) {
    char path[4200];
    snprintf(path, sizeof path, "%s/tok_handmade.gguf", tmp ? tmp : ".");
    char texts[256][3];
    const char *ptrs[260];
    size_t lens[260];
    size_t n = byte_alphabet(texts, ptrs, lens);
    ptrs[n] = "ab", lens[n++] = 2;
    ptrs[n] = "abc", lens[n++] = 3;
    const char *merges[] = {"a b", "ab c"};

    /* A working byte-level vocabulary: "abcab" -> [abc][ab]. */
    gbuf kv = {0};
    kv_str(&kv, "tokenizer.ggml.model", "gpt2");
    kv_str(&kv, "tokenizer.ggml.pre", "gpt-2");
    kv_str_array(&kv, "tokenizer.ggml.tokens", ptrs, lens, n);
    kv_str_array(&kv, "tokenizer.ggml.merges", merges, NULL, 2);
    CHECK(write_gguf(path, &kv, 4) == 0);
    free(kv.p);
    pith_tokenizer *t = NULL;
    pith_err err = {{0}};
    CHECKF(pith_tokenizer_load(path, 0, &t, &err) == 0, "%s", err.msg);
    if (t) {
        int32_t *ids;
        int m;
        CHECK(pith_tokenizer_encode(t, "abcab", 5, PITH_TOK_ADD_BOS, &ids, &m, &err) == 0);
        CHECK(m == 2 && ids[0] == 257 && ids[1] == 256);
        free(ids);
        CHECK(pith_tokenizer_bos(t) == -1 && pith_tokenizer_eos(t) == -1);
        tt_encode_decode_ok(t, "x\xff\xfe y\n", 6, false);
        pith_tokenizer_free(t);
    }

    /* A SentencePiece vocabulary with a token holding "▁" after a letter ("a▁"): merges can then cross
     * the start of a word, so the text must be merged whole. "a b" -> ▁a▁b: a+▁ (best), a▁+b, ▁+a▁b.
     * Cutting at words would give [▁a][▁][b] instead. */
    {
        const char *toks[] = {"<unk>", "<s>", "</s>", "\xe2\x96\x81", "a", "b", "a\xe2\x96\x81",
                              "a\xe2\x96\x81" "b", "\xe2\x96\x81" "a\xe2\x96\x81" "b", "\xe2\x96\x81" "a"};
        const float scores[] = {0, 0, 0, -5, -6, -7, -1, -2, -3, -1.5f};
        const int32_t types[] = {2, 3, 3, 1, 1, 1, 1, 1, 1, 1};
        gbuf b = {0};
        kv_str(&b, "tokenizer.ggml.model", "llama");
        kv_str_array(&b, "tokenizer.ggml.tokens", toks, NULL, 10);
        kv_f32_values(&b, "tokenizer.ggml.scores", scores, 10);
        kv_i32_values(&b, "tokenizer.ggml.token_type", types, 10);
        CHECK(write_gguf(path, &b, 4) == 0);
        free(b.p);
        t = NULL;
        CHECKF(pith_tokenizer_load(path, 0, &t, &err) == 0, "%s", err.msg);
        if (t) {
            int32_t *ids;
            int m;
            CHECK(pith_tokenizer_encode(t, "a b", 3, PITH_TOK_ADD_BOS, &ids, &m, &err) == 0);
            CHECK(m == 2 && ids[0] == 1 && ids[1] == 8);
            free(ids);
            /* "b a" -> ▁b▁a: only ▁+a is a token: [▁][b][▁a]. */
            CHECK(pith_tokenizer_encode(t, "b a", 3, 0, &ids, &m, &err) == 0);
            CHECK(m == 3 && ids[0] == 3 && ids[1] == 5 && ids[2] == 9);
            free(ids);
            pith_tokenizer_free(t);
        }
    }

    /* Broken metadata: each is refused with a message naming the file. */
    for (int c = 0; c < 4; c++) {
        gbuf b = {0};
        uint64_t n_kv = 2;
        kv_str(&b, "tokenizer.ggml.model", c == 0 ? "bert" : c == 1 ? "llama" : "gpt2");
        if (c == 3) {
            key(&b, "tokenizer.ggml.tokens", 4); /* a uint32 where an array belongs */
            put_u32(&b, 7);
        } else {
            kv_str_array(&b, "tokenizer.ggml.tokens", ptrs, lens, n);
        }
        if (c == 1) {
            kv_f32_array(&b, "tokenizer.ggml.scores", n - 1); /* one score short */
            n_kv++;
        }
        CHECK(write_gguf(path, &b, n_kv) == 0);
        free(b.p);
        t = NULL;
        err.msg[0] = '\0';
        CHECK(pith_tokenizer_load(path, 0, &t, &err) == -1 && t == NULL);
        CHECKF(strstr(err.msg, "tok_handmade.gguf") != NULL, "case %d: %s", c, err.msg);
    }
}

/* Where each pre-tokenizer cuts, seen through merges that can only happen inside one piece: "o W"
 * (inside "HelloWorld" unless a case change cuts it), "1 2" and "3 4" (inside a run of digits unless it
 * is cut into threes or ones), ". H" (a punctuation mark kept on the word after it). */
static void check_pre_splits(const char *tmp) {
    char path[4200];
    snprintf(path, sizeof path, "%s/tok_presplit.gguf", tmp ? tmp : ".");
    char texts[256][3];
    const char *ptrs[264];
    size_t lens[264];
    size_t n = byte_alphabet(texts, ptrs, lens);
    /* ids 256..262; "\xc3\xa6\xc4\xb8\xc4\xa9" is U+6587 (a Han character, bytes e6 96 87) in the byte alphabet */
    const char *extra[] = {"oW", "12", "34", ".H", "\xc3\xa6\xc4\xb8\xc4\xa9\x61", "\xc3\xa6\xc4\xb8",
                           "\xc3\xa6\xc4\xb8\xc4\xa9"};
    for (int i = 0; i < 7; i++) ptrs[n] = extra[i], lens[n++] = strlen(extra[i]);
    /* the Han character's bytes merge first (ids 261, 262), then with a letter after it (260) */
    const char *merges[] = {"\xc3\xa6 \xc4\xb8", "\xc3\xa6\xc4\xb8 \xc4\xa9", "o W", "1 2", "3 4", ". H",
                            "\xc3\xa6\xc4\xb8\xc4\xa9 a"};
    static const struct {
        const char *pre;
        int32_t hello_world_has_oW, digits[4], n_digits, dot_word_first, han_joins_word;
    } cases[] = {
        /* gpt-2 style words, digits in threes after \p{N}+, punctuation alone */
        {"default", 1, {256, 51, 52}, 3, '.', 1},
        /* Tekken: a cut before each upper-case run, every digit alone, punctuation joins the next word */
        {"tekken", 0, {49, 50, 51, 52}, 4, 259, 1},
        /* DeepSeek-V3: letters of any case together, digits in threes, ASCII punctuation joins a word, CJK
         * runs cut out first */
        {"deepseek-v3", 1, {256, 51, 52}, 3, 259, 0},
        /* Kimi K2: o200k's cuts (a case change cuts), digits in threes, Han runs on their own */
        {"kimi-k2", 0, {256, 51, 52}, 3, 259, 0},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        gbuf kv = {0};
        kv_str(&kv, "tokenizer.ggml.model", "gpt2");
        kv_str(&kv, "tokenizer.ggml.pre", cases[c].pre);
        kv_str_array(&kv, "tokenizer.ggml.tokens", ptrs, lens, n);
        kv_str_array(&kv, "tokenizer.ggml.merges", merges, NULL, 7);
        CHECK(write_gguf(path, &kv, 4) == 0);
        free(kv.p);
        pith_tokenizer *t = NULL;
        pith_err err = {{0}};
        CHECKF(pith_tokenizer_load(path, 0, &t, &err) == 0, "%s: %s", cases[c].pre, err.msg);
        if (!t) continue;
        int32_t *ids;
        int m, has = 0;
        CHECK(pith_tokenizer_encode(t, "HelloWorld", 10, 0, &ids, &m, &err) == 0);
        for (int i = 0; i < m; i++) has |= ids[i] == 256;
        CHECKF(has == cases[c].hello_world_has_oW, "%s: HelloWorld %s the o-W merge", cases[c].pre,
               has ? "has" : "lacks");
        free(ids);
        CHECK(pith_tokenizer_encode(t, "1234", 4, 0, &ids, &m, &err) == 0);
        bool same = m == cases[c].n_digits;
        for (int i = 0; same && i < m; i++) same = ids[i] == (cases[c].digits[i] == 256 ? 257 : cases[c].digits[i]);
        CHECKF(same, "%s: 1234 cut otherwise (%d ids)", cases[c].pre, m);
        free(ids);
        CHECK(pith_tokenizer_encode(t, ".Hello", 6, 0, &ids, &m, &err) == 0);
        CHECKF(m > 0 && ids[0] == cases[c].dot_word_first, "%s: .Hello starts with id %d", cases[c].pre,
               m > 0 ? ids[0] : -1);
        free(ids);
        CHECK(pith_tokenizer_encode(t, "\xe6\x96\x87\x61", 4, 0, &ids, &m, &err) == 0);
        bool joined = m == 1 && ids[0] == 260;
        CHECKF(joined == (cases[c].han_joins_word != 0), "%s: a Han character %s the letter after it (%d ids)",
               cases[c].pre, joined ? "joins" : "stays apart from", m);
        free(ids);
        const char *mixed = "Ministral 3 und DeepSeek-V3: 12345 ÉtéÀ 中文abc\n";
        tt_encode_decode_ok(t, mixed, strlen(mixed), false);
        pith_tokenizer_free(t);
    }
}

int main(void) {
    check_handmade(getenv("PITH_TEST_TMP"));
    check_pre_splits(getenv("PITH_TEST_TMP"));
    const char *shared = check_shared_dir();
    if (!shared) return check_failures_ ? check_summary("test_tokenizer_gguf") : CHECK_SKIP; /* the checks above need no assets */
    run_llamacpp_suites(shared);
    compare_with_sentencepiece(shared);
    check_fixture(shared);
    check_phi3(shared);
    check_threads(shared);
    return check_summary("test_tokenizer_gguf");
}
