#include "format/safetensors.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "format/json_file.h"
#include "format/printable.h"

/* Every integer in a header must be exact in a double (cJSON's representation). */
#define MAX_EXACT 9007199254740992.0 /* 2^53 */

static bool as_count(const cJSON *j, uint64_t *out) {
    if (!cJSON_IsNumber(j)) return false;
    double v = j->valuedouble;
    if (!(v >= 0 && v <= MAX_EXACT) || v != floor(v)) return false;
    *out = (uint64_t)v;
    return true;
}

static int parse_dtype(const char *path, const char *name, const cJSON *j, pith_dtype *out, pith_err *err) {
    if (!cJSON_IsString(j)) return pith_errf(err, "%s: tensor '%s': dtype is missing or not a string", path, name);
    const char *s = j->valuestring;
    if (!strcmp(s, "F32")) *out = PITH_F32;
    else if (!strcmp(s, "F16")) *out = PITH_F16;
    else if (!strcmp(s, "BF16")) *out = PITH_BF16;
    else {
        static const char *const known[] = {"F64", "I64", "I32", "I16", "I8", "U64", "U32", "U16", "U8", "BOOL",
                                            "F8_E4M3", "F8_E5M2"};
        char shown[PITH_PRINTABLE_CAP];
        for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
            if (!strcmp(s, known[i]))
                return pith_errf(err, "%s: tensor '%s' has dtype %s, which is not supported (only F32, F16, BF16)",
                                 path, name, s);
        return pith_errf(err, "%s: tensor '%s' has unknown dtype '%s'", path, name,
                         pith_printable(shown, sizeof shown, s, strlen(s)));
    }
    return 0;
}

static int parse_tensor(const char *path, const cJSON *item, const uint8_t *data, uint64_t data_size,
                        pith_tensor *t, pith_err *err) {
    char shown[PITH_PRINTABLE_CAP];
    const char *name = pith_printable(shown, sizeof shown, item->string, strlen(item->string));
    if (!cJSON_IsObject(item)) return pith_errf(err, "%s: tensor '%s' is not a JSON object", path, name);
    if (!item->string[0]) return pith_errf(err, "%s: a tensor has an empty name", path);
    if (parse_dtype(path, name, cJSON_GetObjectItemCaseSensitive(item, "dtype"), &t->type, err)) return -1;

    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(item, "shape");
    if (!cJSON_IsArray(shape)) return pith_errf(err, "%s: tensor '%s': shape is missing or not an array", path, name);
    /* A tensor of more dimensions than PITH_MAX_DIMS (a Conv3d's [out][in][t][h][w]: Qwen-VL's patch
     * embedding) keeps its layout with its outermost ones folded into the last: ne[3] is their product. */
    int n_dims = cJSON_GetArraySize(shape);
    if (n_dims > PITH_MAX_DIMS + 2)
        return pith_errf(err, "%s: tensor '%s' has %d dimensions (at most %d)", path, name, n_dims, PITH_MAX_DIMS + 2);
    t->n_dims = n_dims < PITH_MAX_DIMS ? n_dims : PITH_MAX_DIMS;
    for (int d = 0; d < PITH_MAX_DIMS; d++) t->ne[d] = 1;
    int d = n_dims - 1;
    const cJSON *dim;
    cJSON_ArrayForEach(dim, shape) {
        uint64_t v;
        if (!as_count(dim, &v))
            return pith_errf(err, "%s: tensor '%s': shape holds something other than a non-negative integer", path,
                             name);
        int at = d < PITH_MAX_DIMS ? d : PITH_MAX_DIMS - 1;
        d--;
        if (v > (uint64_t)INT64_MAX || (v > 0 && (uint64_t)t->ne[at] > (uint64_t)INT64_MAX / v))
            return pith_errf(err, "%s: tensor '%s' dimensions overflow", path, name);
        t->ne[at] *= (int64_t)v; /* 1 before, but for folded dimensions */
    }
    int64_t nel = pith_tensor_nelems(t);
    size_t esize = pith_dtype_block_bytes(t->type);
    if (nel < 0 || (uint64_t)nel > UINT64_MAX / esize)
        return pith_errf(err, "%s: tensor '%s' dimensions overflow", path, name);
    uint64_t nbytes = (uint64_t)nel * esize;

    const cJSON *offs = cJSON_GetObjectItemCaseSensitive(item, "data_offsets");
    uint64_t begin, end;
    if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2 || !as_count(cJSON_GetArrayItem(offs, 0), &begin) ||
        !as_count(cJSON_GetArrayItem(offs, 1), &end))
        return pith_errf(err, "%s: tensor '%s': data_offsets must be two non-negative integers", path, name);
    if (begin > end)
        return pith_errf(err, "%s: tensor '%s': data_offsets [%llu, %llu] begin after they end", path, name,
                         (unsigned long long)begin, (unsigned long long)end);
    if (end > data_size)
        return pith_errf(err, "%s: tensor '%s' data [%llu, %llu) extends past the end of the data (%llu bytes)",
                         path, name, (unsigned long long)begin, (unsigned long long)end,
                         (unsigned long long)data_size);
    if (end - begin != nbytes)
        return pith_errf(err, "%s: tensor '%s' has %llu bytes of data but its shape and dtype need %llu", path, name,
                         (unsigned long long)(end - begin), (unsigned long long)nbytes);
    t->data = data + begin;
    t->nbytes = (size_t)nbytes;
    size_t len = strlen(item->string);
    char *copy = malloc(len + 1);
    if (!copy) return pith_errf(err, "%s: out of memory", path);
    memcpy(copy, item->string, len + 1);
    t->name = copy;
    return 0;
}

int pith_safetensors_parse(const char *path, const pith_mapped_file *m, pith_tensor **out, int *n, pith_err *err) {
    *out = NULL;
    *n = 0;
    if (m->size < 8) return pith_errf(err, "%s: truncated: %zu bytes, shorter than the 8-byte header length", path, m->size);
    uint64_t hlen = 0;
    for (int b = 7; b >= 0; b--) hlen = hlen << 8 | m->base[b];
    if (hlen > PITH_SAFETENSORS_MAX_HEADER)
        return pith_errf(err, "%s: header length %llu exceeds the %u-byte limit", path, (unsigned long long)hlen,
                         PITH_SAFETENSORS_MAX_HEADER);
    if (hlen > m->size - 8)
        return pith_errf(err, "%s: header length %llu runs past end of file (%zu bytes)", path,
                         (unsigned long long)hlen, m->size);
    const char *hdr = (const char *)m->base + 8;
    if (hlen == 0 || memchr(hdr, '\0', (size_t)hlen))
        return pith_errf(err, "%s: header is not JSON (empty or contains NUL bytes)", path);
    if (pith_json_count_values(hdr, (size_t)hlen) > PITH_JSON_MAX_VALUES)
        return pith_errf(err, "%s: header holds more than %zu JSON values", path, PITH_JSON_MAX_VALUES);
    cJSON *root = cJSON_ParseWithLength(hdr, (size_t)hlen);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return pith_errf(err, "%s: header is not a JSON object", path);
    }
    int count = cJSON_GetArraySize(root);
    pith_tensor *ts = calloc((size_t)(count > 0 ? count : 1), sizeof *ts);
    if (!ts) {
        cJSON_Delete(root);
        return pith_errf(err, "%s: out of memory", path);
    }
    const uint8_t *data = m->base + 8 + hlen;
    uint64_t data_size = m->size - 8 - hlen;
    int k = 0, rc = 0;
    const cJSON *item;
    cJSON_ArrayForEach(item, root) {
        if (!strcmp(item->string, "__metadata__")) continue;
        if (k >= count || parse_tensor(path, item, data, data_size, &ts[k], err)) {
            rc = -1;
            break;
        }
        k++;
    }
    cJSON_Delete(root);
    if (rc) {
        pith_safetensors_free(ts, k);
        return -1;
    }
    *out = ts;
    *n = k;
    return 0;
}

void pith_safetensors_free(pith_tensor *t, int n) {
    if (!t) return;
    for (int i = 0; i < n; i++) free((void *)t[i].name);
    free(t);
}
