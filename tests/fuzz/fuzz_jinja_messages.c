/* Chat template data: the input is the messages JSON (any JSON, not only a list of messages), rendered
 * with real model templates from tests/chat and with ChatML. Byte 0 picks the template and whether a
 * generation prompt is added. */
#include "fuzz_util.h"
#include "pith/chat.h"

static const char *const names[] = {"chatml", "llama3.1", "qwen2.5", "hermes-tools", "mistral-v0.3",
                                    "gemma3", "deepseek-r1", "phi4", "llama2", "zephyr"};
#define N_TEMPLATES (sizeof names / sizeof names[0])
static pith_chat_template *tmpls[N_TEMPLATES];

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    static char buf[1 << 18];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    return buf;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    for (size_t i = 0; i < N_TEMPLATES; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/tests/chat/%s.jinja", FUZZ_SOURCE_DIR, names[i]);
        const char *src = slurp(path);
        pith_err err;
        if (!src || pith_chat_template_compile(src, &tmpls[i], &err)) {
            fprintf(stderr, "fuzz_jinja_messages: %s: %s\n", path, src ? err.msg : "cannot read");
            exit(1);
        }
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    cJSON *msgs = cJSON_ParseWithLength((const char *)data + 1, size - 1);
    if (!msgs) return 0;
    pith_chat_options opts = {
        .add_generation_prompt = data[0] & 0x80,
        .bos_token = "<s>",
        .eos_token = "</s>",
        .limits = {.max_output_bytes = 1 << 16, .max_memory_bytes = 16 << 20, .max_steps = 200000, .max_depth = 50},
    };
    char *out = NULL;
    pith_err err;
    if (pith_chat_template_render(tmpls[(data[0] & 0x7f) % N_TEMPLATES], msgs, &opts, &out, NULL, &err) == 0) free(out);
    cJSON_Delete(msgs);
    return 0;
}
