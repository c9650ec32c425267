/* Chat templates without a reference: the C API (ChatML fallback, plain messages, compile once and
 * render many times, from several threads), error messages that name the construct and line, resource
 * limits against hostile templates (steps, output, memory, nesting, recursion), invalid UTF-8, and a
 * mutation fuzzer over the family templates. Meant to run under ASan/UBSan: "no crash" is checked there. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "check.h"
#include "pith/chat.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Renders tmpl over a small fixed conversation; returns 0/-1 like the API. */
static int render(const char *tmpl, const pith_chat_limits *lim, char **out, size_t *len, pith_err *err) {
    cJSON *msgs = cJSON_Parse("[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\",\"content\":\"hello\"},"
                              "{\"role\":\"assistant\",\"content\":\"hi\"},{\"role\":\"user\",\"content\":\"bye\"}]");
    pith_chat_options o = {.add_generation_prompt = true, .bos_token = "<s>", .eos_token = "</s>"};
    if (lim) o.limits = *lim;
    int r = pith_chat_render_json(tmpl, msgs, &o, out, len, err);
    cJSON_Delete(msgs);
    return r;
}

static void expect_text(const char *tmpl, const char *want) {
    char *out = NULL;
    pith_err err = {{0}};
    int r = render(tmpl, NULL, &out, NULL, &err);
    CHECKF(r == 0 && out && strcmp(out, want) == 0, "template %s: want [%s], got [%s] (%s)", tmpl, want,
           out ? out : "(null)", r ? err.msg : "ok");
    free(out);
}

/* The render must fail and the message must contain every fragment. */
static void expect_error(const char *tmpl, const pith_chat_limits *lim, const char *frag1, const char *frag2) {
    char *out = NULL;
    pith_err err = {{0}};
    double t0 = now_s();
    int r = render(tmpl, lim, &out, NULL, &err);
    double dt = now_s() - t0;
    CHECKF(r == -1 && out == NULL, "template %.60s: expected an error, rendered %zu bytes", tmpl, out ? strlen(out) : 0);
    CHECKF(strncmp(err.msg, "chat template: ", 15) == 0, "message without prefix: %s", err.msg);
    CHECKF(!frag1 || strstr(err.msg, frag1), "message [%s] lacks [%s]", err.msg, frag1);
    CHECKF(!frag2 || strstr(err.msg, frag2), "message [%s] lacks [%s]", err.msg, frag2);
    CHECKF(dt < 20.0, "template %.60s took %.1f s to fail", tmpl, dt);
    if (dt > 0.3) printf("slow: %.2f s: %.70s\n", dt, tmpl);
    free(out);
}

static void test_api(void) {
    /* ChatML fallback for NULL and "" templates, from plain C messages. */
    pith_chat_message m[] = {{"system", "S"}, {"user", "U"}};
    const char *want = "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n";
    for (int k = 0; k < 2; k++) {
        char *out = NULL;
        pith_err err = {{0}};
        int r = pith_chat_render(k ? "" : NULL, m, 2, true, NULL, NULL, &out, &err);
        CHECKF(r == 0 && out && strcmp(out, want) == 0, "ChatML fallback: got [%s] %s", out ? out : "", err.msg);
        free(out);
    }
    char *out = NULL;
    pith_err err = {{0}};
    CHECK(pith_chat_render(NULL, m, 2, false, NULL, NULL, &out, &err) == 0);
    CHECK(out && strcmp(out, "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n") == 0);
    free(out);

    /* NULL content is none; absent tokens are undefined. */
    pith_chat_message nul[] = {{"user", NULL}};
    CHECK(pith_chat_render("{{ messages[0].content is none }}|{{ bos_token is defined }}|{{ eos_token }}", nul, 1,
                           false, NULL, "E", &out, &err) == 0);
    CHECK(out && strcmp(out, "True|False|E") == 0);
    free(out);
    /* The ChatML fallback renders content null as empty (the assistant turn of a tool-call history). */
    CHECK(pith_chat_render(NULL, nul, 1, false, NULL, NULL, &out, &err) == 0);
    CHECK(out && strcmp(out, "<|im_start|>user\n<|im_end|>\n") == 0);
    free(out);
    CHECK(pith_chat_render(NULL, NULL, 0, true, NULL, NULL, &out, &err) == 0);
    CHECK(out && strcmp(out, "<|im_start|>assistant\n") == 0);
    free(out);
    CHECK(pith_chat_render(NULL, NULL, -1, true, NULL, NULL, &out, &err) == -1);

    /* Compile once, render many; vars; bad inputs. */
    pith_chat_template *t = NULL;
    CHECK(pith_chat_template_compile("{{ messages | length }}:{{ enable_thinking | default('unset') }}", &t, &err) == 0);
    cJSON *two = cJSON_Parse("[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"user\",\"content\":\"b\"}]");
    cJSON *vars = cJSON_Parse("{\"enable_thinking\": false}");
    size_t len = 0;
    CHECK(pith_chat_template_render(t, two, NULL, &out, &len, &err) == 0 && strcmp(out, "2:unset") == 0 && len == 7);
    free(out);
    pith_chat_options o = {.vars = vars};
    CHECK(pith_chat_template_render(t, two, &o, &out, &len, &err) == 0 && strcmp(out, "2:False") == 0);
    free(out);
    CHECK(pith_chat_template_render(t, vars, NULL, &out, &len, &err) == -1); /* messages not an array */
    CHECK(strstr(err.msg, "array") != NULL);
    o.vars = two;
    CHECK(pith_chat_template_render(t, two, &o, &out, &len, &err) == -1); /* vars not an object */
    cJSON_Delete(two);
    cJSON_Delete(vars);
    pith_chat_template_free(t);
    pith_chat_template_free(NULL);
    t = (pith_chat_template *)1;
    CHECK(pith_chat_template_compile("{% if %}", &t, &err) == -1 && t == NULL);
    CHECK(pith_chat_render("{{ x | nope }}", m, 2, false, NULL, NULL, &out, NULL) == -1); /* NULL err is fine */

    expect_text("{% for m in messages %}{{ loop.index }}{{ m.role[0] }}{% endfor %}{{ bos_token }}", "1s2u3a4u<s>");
    expect_text("{{ strftime_now('%Y-%m') | length }}", "7");
    expect_text("{{ messages | selectattr('role', 'eq', 'user') | map(attribute='content') | join(',') }}", "hello,bye");
}

static void test_error_messages(void) {
    expect_error("line one\nline two\n{{ messages | foo }}", NULL, "unsupported filter 'foo'", "at line 3");
    expect_error("{% if x is frobbed %}{% endif %}", NULL, "unsupported test 'frobbed'", "at line 1");
    expect_error("\n{% include 'other.jinja' %}", NULL, "unsupported tag 'include'", "at line 2");
    expect_error("{% frobnicate %}", NULL, "unknown tag 'frobnicate'", NULL);
    expect_error("{{ 'a'.expandtabs() }}", NULL, "unsupported method 'str.expandtabs'", NULL);
    expect_error("{% if true %}\nopen", NULL, "expected 'endif'", NULL);
    expect_error("{% for m in messages %}{% endif %}", NULL, "syntax error", NULL);
    expect_error("{{ 1 +", NULL, "syntax error", NULL);
    expect_error("{{ 'unterminated }}", NULL, "unterminated string", NULL);
    expect_error("{# never closed", NULL, "comment", NULL);
    expect_error("{{ (1 }}", NULL, "syntax error", NULL);
    expect_error("{{ raise_exception('Conversation roles must alternate') }}", NULL, "Conversation roles must alternate", NULL);
    expect_error("\n\n{{ undefined_thing.attr }}", NULL, "'undefined_thing' is undefined", "at line 3");
    expect_error("{{ 9223372036854775807 + 1 }}", NULL, "integer overflow", NULL);
    expect_error("{{ 99999999999999999999 }}", NULL, "too large", NULL);
    expect_error("{% break %}", NULL, "outside loop", NULL);
    expect_error("{{ messages.append(1) }}", NULL, "unsafe", NULL);
    expect_error("{{ 'x' % 1 }}", NULL, "string formatting", NULL);
    expect_error("{{ f(*args) }}", NULL, "*args", NULL);
    expect_error("{% for x in messages recursive %}{% endfor %}", NULL, "recursive", NULL);
}

static void test_limits(void) {
    pith_chat_limits small = {.max_steps = 200000, .max_output_bytes = 1 << 20, .max_memory_bytes = 32 << 20,
                              .max_depth = 50};
    expect_error("{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}", &small,
                 "step limit", NULL);
    expect_error("{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}", NULL,
                 "step limit", NULL);
    expect_error("{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}", NULL, "output limit", NULL);
    expect_error("{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
                 NULL, "output limit", NULL);
    expect_error("{{ 'x' * 100000000000 }}", NULL, "output limit", NULL);
    expect_error("{{ [1] * 100000000000 }}", NULL, "too large", NULL);
    expect_error("{% set ns = namespace(l=[]) %}{% for i in range(100000) %}{% set ns.l = ns.l + [i] %}{% endfor %}",
                 &small, "memory limit", NULL);
    expect_error("{{ range(100001) | length }}", NULL, "Range too big", NULL);
    expect_error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", NULL, "nesting", NULL);
    expect_error("{% set ns = namespace(l=[]) %}{% for i in range(5000) %}{% set ns.l = [ns.l] %}{% endfor %}{{ ns.l }}",
                 NULL, "nested too deeply", NULL);
    expect_error("{% set ns = namespace(l=[]) %}{% for i in range(5000) %}{% set ns.l = [ns.l] %}{% endfor %}"
                 "{{ ns.l | tojson }}", NULL, "nested too deeply", NULL);
    expect_error("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}", NULL, "nested too deeply", NULL);
    expect_error("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns | tojson }}", NULL, "not JSON serializable", NULL);
    /* Deeply nested values compare without recursing forever (the answer is unspecified). */
    char *out = NULL;
    pith_err err = {{0}};
    int r = render("{% set ns = namespace(l=[]) %}{% for i in range(3000) %}{% set ns.l = [ns.l] %}{% endfor %}"
                   "{{ ns.l == ns.l }}", NULL, &out, NULL, &err);
    CHECK(r == 0 || r == -1);
    free(out);

    /* Syntax nested far deeper than the limit: an error, not a stack overflow. */
    size_t deep = 100000;
    char *t = malloc(deep * 2 + 16);
    strcpy(t, "{{ ");
    memset(t + 3, '(', deep);
    t[3 + deep] = '1';
    memset(t + 4 + deep, ')', deep);
    strcpy(t + 4 + 2 * deep, " }}");
    expect_error(t, NULL, "nested too deeply", NULL);
    memset(t + 3, '[', deep);
    memset(t + 4 + deep, ']', deep);
    expect_error(t, NULL, "nested too deeply", NULL);
    free(t);
    size_t n_if = 20000;
    t = malloc(n_if * 32 + 1);
    t[0] = 0;
    char *p = t;
    for (size_t i = 0; i < n_if; i++) p += sprintf(p, "{%% if true %%}");
    for (size_t i = 0; i < n_if; i++) p += sprintf(p, "{%% endif %%}");
    expect_error(t, NULL, "nested too deeply", NULL);
    p = t;
    for (size_t i = 0; i < n_if; i++) p += sprintf(p, "{{ not ");
    expect_error(t, NULL, NULL, NULL);
    free(t);

    /* Deeply nested JSON input. */
    cJSON *root = cJSON_CreateArray(), *cur = root;
    for (int i = 0; i < 900; i++) {
        cJSON *next = cJSON_CreateArray();
        cJSON_AddItemToArray(cur, next);
        cur = next;
    }
    CHECK(pith_chat_render_json("x", root, NULL, &out, NULL, &err) == -1 && strstr(err.msg, "nested"));
    cJSON_Delete(root);

    /* A long but legitimate conversation renders in full. */
    size_t big = 1 << 20;
    char *content = malloc(big + 1);
    for (size_t i = 0; i < big; i++) content[i] = (char)('a' + i % 26);
    content[big] = 0;
    pith_chat_message m[] = {{"user", content}, {"assistant", content}};
    r = pith_chat_render(NULL, m, 2, true, NULL, NULL, &out, &err);
    CHECKF(r == 0 && out && strlen(out) == 2 * big + strlen("<|im_start|>user\n<|im_end|>\n") +
                                               strlen("<|im_start|>assistant\n<|im_end|>\n") +
                                               strlen("<|im_start|>assistant\n"),
           "long render: %s", r ? err.msg : "wrong length");
    free(out);
    free(content);
}

/* Work that grows with data size is charged to the step budget: repeating it on huge values ends in a
 * step-limit error instead of running for hours; linear algorithms stay fast on big inputs. */
static void test_work_bounds(void) {
    pith_chat_limits lim = {.max_steps = 2000000};
    /* one at the default limits, to show the default bound is a short one */
    expect_error("{% set s = 'a' * 4000000 %}{% for i in range(100000) %}{{ s[-1] }}{% endfor %}", NULL, "step limit", NULL);
    expect_error("{% set s = 'a' * 4000000 %}{% for i in range(100000) %}{{ s[-1] }}{% endfor %}", &lim, "step limit", NULL);
    expect_error("{% set s = 'ab' * 2000000 %}{% for i in range(100000) %}{{ s | length }}{% endfor %}", &lim,
                 "step limit", NULL);
    expect_error("{% set s = 'ab' * 2000000 %}{% for i in range(100000) %}{{ s[1:3] }}{% endfor %}", &lim,
                 "step limit", NULL);
    expect_error("{% set s = 'ab' * 2000000 %}{% for i in range(100000) %}{{ 'x' in s }}{% endfor %}", &lim,
                 "step limit", NULL);
    expect_error("{% set l = range(100000) | list %}{% for i in range(100000) %}{{ 99999 in l }}{% endfor %}", &lim,
                 "step limit", NULL);
    expect_error("{% set l = range(100000) | list %}{% for i in range(100000) %}{{ l == l }}{% endfor %}", &lim,
                 "step limit", NULL);
    expect_error("{{ range(100000) | unique | list | length }}", &lim, "step limit", NULL);
    expect_error("{% set big = [1] * 10000 %}{% set l = [big] * 2000 %}{{ l | sort | length }}", &lim, "step limit", NULL);
    expect_error("{% set s = ' ' * 4000000 ~ 'x' %}{% for i in range(100000) %}{{ s.strip() }}{% endfor %}", &lim,
                 "step limit", NULL);

    char *out = NULL;
    pith_err err = {{0}};
    double t0 = now_s();
    int r = render("{% set s = 'a' * 1000000 %}{{ s.rfind('a' * 500000 ~ 'b') }}|{{ s.find('a' * 500000 ~ 'b') }}|"
                   "{{ s.rsplit('aab', 1) | length }}|{{ ('x' * 200000).split('x') | length }}|"
                   "{{ (' a' * 100000).rsplit() | length }}|{{ ('a' * 1000000 ~ ' ') | trim | length }}",
                   NULL, &out, NULL, &err);
    CHECKF(r == 0 && out && strcmp(out, "-1|-1|1|200001|100000|1000000") == 0, "got %s (%s)", out ? out : "-", err.msg);
    free(out);

    /* A JSON object with many keys converts and looks up in linear time. */
    cJSON *msgs = cJSON_CreateArray(), *m = cJSON_CreateObject();
    cJSON_AddItemToArray(msgs, m);
    char key[32];
    for (int i = 0; i < 50000; i++) {
        snprintf(key, sizeof key, "k%d", i);
        cJSON_AddNumberToObject(m, key, i);
    }
    cJSON_AddNumberToObject(m, "k5", -5); /* a duplicate key: the later value wins, as in Python */
    r = pith_chat_render_json("{{ messages[0] | length }} {{ messages[0].k49999 }} {{ messages[0]['k5'] }}",
                              msgs, NULL, &out, NULL, &err);
    CHECKF(r == 0 && out && strcmp(out, "50000 49999 -5") == 0, "got %s (%s)", out ? out : "-", err.msg);
    free(out);
    cJSON_Delete(msgs);

    /* Many variables in one scope. */
    size_t nv = 20000;
    char *t = malloc(nv * 40 + 200);
    char *p = t;
    for (size_t i = 0; i < nv; i++) p += sprintf(p, "{%% set v%zu = %zu %%}", i, i);
    strcpy(p, "{% for i in range(100000) %}{{ v0 }}{% endfor %}");
    r = render(t, NULL, &out, NULL, &err);
    CHECKF(r == 0 || strstr(err.msg, "step limit"), "many variables: %s", err.msg);
    free(out);
    free(t);
    double dt = now_s() - t0;
    printf("work bounds: big-input operations took %.2f s\n", dt);
    CHECKF(dt < 30, "big-input operations took %.1f s", dt);
}

static void test_utf8(void) {
    /* Invalid bytes survive slicing, reversing and JSON; code points count as Python counts them. */
    pith_chat_message m[] = {{"user", "a\xff\xc3z\xc3\xa9"}};
    char *out = NULL;
    pith_err err = {{0}};
    CHECK(pith_chat_render("{{ messages[0].content | length }}|{{ messages[0].content[::-1] }}|"
                           "{{ messages[0].content[1:3] }}|{{ messages[0].content | tojson }}|{{ messages[0].content | upper }}",
                           m, 1, false, NULL, NULL, &out, &err) == 0);
    CHECKF(out && strcmp(out, "5|\xc3\xa9z\xc3\xff" "a|\xff\xc3|\"a\xff\xc3z\xc3\xa9\"|A\xff\xc3Z\xc3\x89") == 0,
           "got [%s]", out ? out : "");
    free(out);
    CHECK(pith_chat_render("{{ messages[0].content | tojson(ensure_ascii=true) }}", m, 1, false, NULL, NULL, &out, &err) == 0);
    CHECKF(out && strcmp(out, "\"a\\udcff\\udcc3z\\u00e9\"") == 0, "got [%s]", out ? out : "");
    free(out);
}

typedef struct {
    const pith_chat_template *t;
    const cJSON *msgs;
    const char *want;
    int failures;
} thread_arg;

static void *render_many(void *p) {
    thread_arg *a = p;
    pith_chat_options o = {.add_generation_prompt = true, .bos_token = "<s>"};
    for (int i = 0; i < 200; i++) {
        char *out = NULL;
        pith_err err;
        if (pith_chat_template_render(a->t, a->msgs, &o, &out, NULL, &err) != 0 || strcmp(out, a->want) != 0)
            a->failures++;
        free(out);
    }
    return NULL;
}

static void test_threads(void) {
    const char *tmpl = "{{ bos_token }}{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}"
                       "[{{ m.role | upper }}:{{ m.content | trim }}]{% endfor %}{{ ns.n }}";
    pith_chat_template *t;
    pith_err err;
    CHECK(pith_chat_template_compile(tmpl, &t, &err) == 0);
    cJSON *msgs = cJSON_Parse("[{\"role\":\"user\",\"content\":\" a \"},{\"role\":\"assistant\",\"content\":\"b\"}]");
    thread_arg args[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (thread_arg){t, msgs, "<s>[USER:a][ASSISTANT:b]2", 0};
        pthread_create(&th[i], NULL, render_many, &args[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        CHECKF(args[i].failures == 0, "thread %d: %d bad renders", i, args[i].failures);
    }
    cJSON_Delete(msgs);
    pith_chat_template_free(t);
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static char *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    size_t k = fread(buf, 1, (size_t)n, f);
    buf[k] = 0;
    fclose(f);
    return buf;
}

/* Mutates real templates (byte edits and spliced-in template syntax) and random bytes; every call
 * must return 0 or -1 with a message, within the small limits. */
static void test_fuzz(void) {
    static const char *const files[] = {"llama2.jinja", "llama3.1.jinja", "mistral-v0.3.jinja", "gemma3.jinja",
                                        "qwen2.5.jinja", "phi3.jinja", "constructs.txt"};
    static const char *const frags[] = {"{%", "%}", "{{", "}}", "{#", "#}", "-%}", "{%-", "|", "(", ")", "[", "]",
                                        "'", "\"", "\\", ".", ",", " is ", " not ", " in ", "endfor", "endif",
                                        "loop", "ns.", "[::-1]", "\xff", "\xc3", "\n", "~", "*", "**", "{% raw %}",
                                        "range(99999)", "{% for x in messages %}", "{% macro m() %}{{ m() }}"};
    const char *src = getenv("PITH_SOURCE_DIR");
    char *seeds[8];
    int n_seeds = 0;
    for (size_t i = 0; i < sizeof files / sizeof files[0] && src; i++) {
        char path[4200];
        snprintf(path, sizeof path, "%s/tests/chat/%s", src, files[i]);
        char *s = read_file(path);
        if (s) seeds[n_seeds++] = s;
    }
    seeds[n_seeds++] = strdup(PITH_CHAT_TEMPLATE_CHATML);
    pith_chat_limits lim = {.max_steps = 100000, .max_output_bytes = 1 << 20, .max_memory_bytes = 16 << 20,
                            .max_depth = 60};
    int rendered = 0, failed = 0;
    double t0 = now_s();
    const int iterations = 4000;
    for (int it = 0; it < iterations; it++) {
        const char *seed = seeds[rnd() % (uint64_t)n_seeds];
        size_t n = strlen(seed);
        size_t cap = n + 4096;
        char *t = malloc(cap + 1);
        size_t len = 0;
        if (it % 10 == 9) { /* pure random bytes */
            len = rnd() % 300;
            for (size_t i = 0; i < len; i++) t[i] = (char)(rnd() % 255 + 1);
        } else {
            /* a window of the seed, then edits */
            size_t from = n ? rnd() % n : 0, take = n - from;
            if (rnd() % 2 && take > 600) take = 600;
            if (rnd() % 3 == 0) from = 0, take = n < cap - 2048 ? n : cap - 2048;
            memcpy(t, seed + from, take);
            len = take;
            int edits = 1 + (int)(rnd() % 4);
            for (int e = 0; e < edits; e++) {
                size_t at = len ? rnd() % (len + 1) : 0;
                switch (rnd() % 3) {
                case 0: if (at < len) t[at] = (char)(rnd() % 255 + 1); break;
                case 1:
                    if (at < len) {
                        size_t k = 1 + rnd() % 8;
                        if (at + k > len) k = len - at;
                        memmove(t + at, t + at + k, len - at - k);
                        len -= k;
                    }
                    break;
                default: {
                    const char *f = frags[rnd() % (sizeof frags / sizeof frags[0])];
                    size_t k = strlen(f);
                    if (len + k >= cap) break;
                    memmove(t + at + k, t + at, len - at);
                    memcpy(t + at, f, k);
                    len += k;
                }
                }
            }
        }
        t[len] = 0;
        char *out = NULL;
        pith_err err = {{0}};
        int r = render(t, &lim, &out, NULL, &err);
        if (r == 0) {
            rendered++;
            CHECK(out != NULL);
        } else {
            failed++;
            CHECKF(r == -1 && out == NULL && strncmp(err.msg, "chat template", 13) == 0, "bad failure: r=%d msg=[%s]", r, err.msg);
        }
        free(out);
        free(t);
    }
    double dt = now_s() - t0;
    printf("fuzz: %d mutated templates, %d rendered, %d rejected, %.2f s\n", iterations, rendered, failed, dt);
    CHECK(rendered > 50 && failed > 50); /* the mutations exercise both paths */
    for (int i = 0; i < n_seeds; i++) free(seeds[i]);
}

/* Render time of a realistic template and conversation (printed, not asserted beyond sanity). */
static void bench(void) {
    const char *src = getenv("PITH_SOURCE_DIR");
    char path[4200];
    snprintf(path, sizeof path, "%s/tests/chat/qwen2.5.jinja", src ? src : "..");
    char *tmpl = read_file(path);
    if (!tmpl) return;
    cJSON *msgs = cJSON_CreateArray();
    for (int i = 0; i < 50; i++) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", i % 2 ? "assistant" : "user");
        cJSON_AddStringToObject(m, "content", "Some message content of moderate length, as chats have.");
        cJSON_AddItemToArray(msgs, m);
    }
    pith_chat_template *t;
    pith_err err;
    CHECK(pith_chat_template_compile(tmpl, &t, &err) == 0);
    pith_chat_options o = {.add_generation_prompt = true};
    int reps = 200;
    double t0 = now_s();
    for (int i = 0; i < reps; i++) {
        char *out = NULL;
        CHECK(pith_chat_template_render(t, msgs, &o, &out, NULL, &err) == 0);
        free(out);
    }
    double dt = (now_s() - t0) / reps;
    printf("render qwen2.5 template, 50 messages: %.1f us per render\n", dt * 1e6);
    pith_chat_template_free(t);
    cJSON_Delete(msgs);
    free(tmpl);
}

int main(void) {
    test_api();
    test_error_messages();
    test_limits();
    test_work_bounds();
    test_utf8();
    test_threads();
    test_fuzz();
    bench();
    return check_summary("test_chat_template_limits");
}
