#include "format/json_file.h"

#include <stdlib.h>

#include "format/mapped_file.h"

size_t pith_json_count_values(const char *text, size_t len) {
    size_t n = 1;
    bool in_string = false;
    for (size_t i = 0; i < len; i++) {
        char c = text[i];
        if (in_string) {
            if (c == '\\') i++;
            else if (c == '"') in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (c == ',' || c == '[' || c == '{') {
            n++;
        }
    }
    return n;
}

int pith_json_parse(const char *path, const char *text, size_t len, size_t max_values, cJSON **out, pith_err *err) {
    *out = NULL;
    if (pith_json_count_values(text, len) > max_values)
        return pith_errf(err, "%s: more than %zu JSON values", path, max_values);
    if (!(*out = cJSON_ParseWithLength(text, len))) return pith_errf(err, "%s: not valid JSON", path);
    return 0;
}

int pith_json_read(const char *path, size_t max_bytes, size_t max_values, bool optional, cJSON **out, pith_err *err) {
    *out = NULL;
    char *text;
    size_t len;
    int rc = optional ? pith_read_optional_file(path, max_bytes, &text, &len, err)
                      : pith_read_small_file(path, max_bytes, &text, &len, err);
    if (rc || !text) return rc;
    rc = pith_json_parse(path, text, len, max_values, out, err);
    free(text);
    return rc;
}
