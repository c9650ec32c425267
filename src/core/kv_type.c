/* Names of the K/V cache types (engine.h). */
#include <string.h>

#include "pith/engine.h"

static const char *const names[] = {"default", "f32", "f16", "bf16", "q8_0"};

const char *pith_kv_type_name(pith_kv_type t) {
    return (unsigned)t < sizeof names / sizeof names[0] ? names[t] : "?";
}

int pith_kv_type_parse(const char *s) {
    for (int i = 1; i < (int)(sizeof names / sizeof names[0]); i++)
        if (!strcmp(s, names[i])) return i;
    return -1;
}
