/* The architecture registry: one line per architecture (see model/arch.h and
 * docs/adding-an-architecture.md). Order is the order names are listed in messages. */
#include <stdio.h>
#include <string.h>

#include "format/arch.h"

#define PITH_ARCHS(X) \
    X(llama)          \
    X(qwen2)          \
    X(qwen3)          \
    X(smollm3)        \
    X(gemma3)         \
    X(lfm2)           \
    X(qwen35)         \
    X(qwen35moe)      \
    X(granitehybrid)  \
    X(nemotron_h)     \
    X(qwen3moe)       \
    X(mixtral)        \
    X(gpt_oss)        \
    X(olmo2)          \
    X(qwen3next)      \
    X(phi3)           \
    X(mistral3)       \
    X(glm4moe)        \
    X(gemma4)         \
    X(deepseek2)      \
    X(qwen3vl)        \
    X(qwen3vlmoe)

#define DECLARE(n) extern const pith_arch pith_arch_##n;
PITH_ARCHS(DECLARE)
#undef DECLARE

#define ENTRY(n) &pith_arch_##n,
static const pith_arch *const registry[] = {PITH_ARCHS(ENTRY)};
#undef ENTRY

#define N_ARCHS (sizeof registry / sizeof registry[0])

static bool listed(const char *const *names, const char *name) {
    for (; names && *names; names++)
        if (!strcmp(*names, name)) return true;
    return false;
}

const pith_arch *pith_arch_find(const char *name) {
    for (size_t i = 0; name && i < N_ARCHS; i++)
        if (!strcmp(registry[i]->name, name)) return registry[i];
    return NULL;
}

const pith_arch *pith_arch_find_hf(const char *hf_arch, const char *model_type) {
    for (size_t i = 0; hf_arch && i < N_ARCHS; i++)
        if (listed(registry[i]->hf_archs, hf_arch)) return registry[i];
    for (size_t i = 0; model_type && i < N_ARCHS; i++)
        if (listed(registry[i]->hf_model_types, model_type)) return registry[i];
    return NULL;
}

static void append(char *buf, size_t cap, size_t *len, const char *name) {
    int n = snprintf(buf + *len, cap - *len, "%s%s", *len ? ", " : "", name);
    if (n > 0) *len = *len + (size_t)n < cap ? *len + (size_t)n : cap - 1;
}

const char *pith_arch_names(char *buf, size_t cap, bool hf) {
    if (!cap) return buf;
    size_t len = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < N_ARCHS; i++) {
        if (!hf) {
            append(buf, cap, &len, registry[i]->name);
            continue;
        }
        for (const char *const *n = registry[i]->hf_archs; n && *n; n++) append(buf, cap, &len, *n);
    }
    return buf;
}
