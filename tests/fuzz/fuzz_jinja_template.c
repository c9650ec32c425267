/* Jinja chat templates: the input is the template source, compiled and rendered with a fixed small
 * conversation (strings, null and list content, a tool call, tools and extra variables) under tight
 * limits, so that runaway templates end quickly with an error. */
#include "fuzz_util.h"
#include "pith/chat.h"

static cJSON *messages, *vars;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    messages = cJSON_Parse(
        "[{\"role\":\"system\",\"content\":\"Be brief.\"},{\"role\":\"user\",\"content\":\"Hi \\u00e9 <b>\"},"
        "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"type\":\"function\",\"function\":"
        "{\"name\":\"f\",\"arguments\":{\"x\":1}}}]},{\"role\":\"tool\",\"content\":\"42\"},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"}]}]");
    vars = cJSON_Parse("{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{}}}],"
                       "\"enable_thinking\":false,\"n\":3,\"s\":\"str\"}");
    if (!messages || !vars) exit(1);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *src = malloc(size + 1);
    if (!src) return 0;
    memcpy(src, data, size);
    src[size] = 0;
    pith_err err;
    pith_chat_template *t = NULL;
    if (pith_chat_template_compile(src, &t, &err) == 0) {
        pith_chat_options opts = {
            .add_generation_prompt = size % 2 == 0,
            .bos_token = "<s>",
            .eos_token = "</s>",
            .vars = vars,
            .limits = {.max_output_bytes = 1 << 16, .max_memory_bytes = 16 << 20, .max_steps = 200000, .max_depth = 50},
        };
        char *out = NULL;
        if (pith_chat_template_render(t, messages, &opts, &out, NULL, &err) == 0) free(out);
        pith_chat_template_free(t);
    }
    free(src);
    return 0;
}
