/* pith_meta: the metadata readers architecture descriptors use (see model/arch.h), over GGUF keys and
 * config.json members alike. Messages keep each format's wording: GGUF names the full key, config.json
 * the quoted member. */
#include <cjson/cJSON.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "format/arch.h"
#include "format/printable.h"

/* GGUF: "{arch}.{key}", or the key itself after a leading '='. */
static const char *gguf_key(const pith_meta *m, const char *key, char *buf, size_t cap) {
    if (key[0] == '=') return key + 1;
    snprintf(buf, cap, "%s.%s", m->arch, key);
    return buf;
}

/* JSON null counts as absent: configs write "head_dim": null and similar. */
static const cJSON *member(const pith_meta *m, const char *key) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(m->json, key);
    return cJSON_IsNull(j) ? NULL : j;
}

static int fail(const pith_meta *m, int rc) { return m->lenient ? 0 : rc; }

bool pith_meta_has(const pith_meta *m, const char *key) {
    char buf[128];
    if (m->gguf) return pith_gguf_find(m->gguf, gguf_key(m, key, buf, sizeof buf)) != NULL;
    return m->json && member(m, key) != NULL;
}

static int missing(const pith_meta *m, const char *key, bool required) {
    if (!required || m->lenient) return 0;
    char buf[128];
    if (m->gguf) return pith_errf(m->err, "%s: missing metadata key %s", m->path, gguf_key(m, key, buf, sizeof buf));
    return pith_errf(m->err, "%s: missing \"%s\"", m->path, key);
}

int pith_meta_int(const pith_meta *m, const char *key, bool required, int *out) {
    if (!pith_meta_has(m, key)) return missing(m, key, required);
    if (m->gguf) {
        char buf[128];
        const char *k = gguf_key(m, key, buf, sizeof buf);
        int64_t v;
        if (!pith_gguf_get_i64(m->gguf, k, &v))
            return fail(m, pith_errf(m->err, "%s: metadata key %s is not an integer", m->path, k));
        if (v < -1 || v > INT32_MAX)
            return fail(m, pith_errf(m->err, "%s: metadata key %s = %lld is out of range", m->path, k, (long long)v));
        *out = (int)v;
        return 0;
    }
    const cJSON *j = member(m, key);
    double v = cJSON_IsNumber(j) ? j->valuedouble : NAN;
    if (!(v >= INT_MIN && v <= INT_MAX) || v != floor(v))
        return pith_errf(m->err, "%s: \"%s\" is not an integer in the int range", m->path, key);
    *out = (int)v;
    return 0;
}

int pith_meta_float(const pith_meta *m, const char *key, bool required, float *out) {
    if (!pith_meta_has(m, key)) return missing(m, key, required);
    if (m->gguf) {
        char buf[128];
        const char *k = gguf_key(m, key, buf, sizeof buf);
        double v;
        if (!pith_gguf_get_f64(m->gguf, k, &v))
            return fail(m, pith_errf(m->err, "%s: metadata key %s is not a number", m->path, k));
        *out = (float)v;
        return 0;
    }
    const cJSON *j = member(m, key);
    if (!cJSON_IsNumber(j) || !isfinite(j->valuedouble))
        return pith_errf(m->err, "%s: \"%s\" is not a number", m->path, key);
    *out = (float)j->valuedouble;
    return 0;
}

int pith_meta_bool(const pith_meta *m, const char *key, bool *out) {
    if (!pith_meta_has(m, key)) return 0;
    if (m->gguf) {
        char buf[128];
        const char *k = gguf_key(m, key, buf, sizeof buf);
        if (!pith_gguf_get_bool(m->gguf, k, out))
            return fail(m, pith_errf(m->err, "%s: metadata key %s is not a boolean", m->path, k));
        return 0;
    }
    const cJSON *j = member(m, key);
    if (!cJSON_IsBool(j)) return pith_errf(m->err, "%s: \"%s\" is not a boolean", m->path, key);
    *out = cJSON_IsTrue(j);
    return 0;
}

int pith_meta_str(const pith_meta *m, const char *key, char *out, size_t cap) {
    if (!pith_meta_has(m, key)) return 0;
    char buf[128], shown[PITH_PRINTABLE_CAP];
    const char *k = m->gguf ? gguf_key(m, key, buf, sizeof buf) : key;
    pith_str s = {0};
    bool ok;
    if (m->gguf) {
        ok = pith_gguf_get_str(m->gguf, k, &s);
    } else {
        const cJSON *j = member(m, key);
        ok = cJSON_IsString(j);
        if (ok) s = (pith_str){j->valuestring, strlen(j->valuestring)};
    }
    if (!ok) return fail(m, pith_errf(m->err, "%s: %s%s%s is not a string", m->path, m->gguf ? "metadata key " : "\"", k,
                                      m->gguf ? "" : "\""));
    if (s.len >= cap || memchr(s.ptr, '\0', (size_t)s.len))
        return fail(m, pith_errf(m->err, "%s: %s has an unexpected value '%s'", m->path, k,
                                 pith_printable(shown, sizeof shown, s.ptr, s.len)));
    memcpy(out, s.ptr, (size_t)s.len);
    out[s.len] = '\0';
    return 0;
}

/* Item i of a GGUF array as text; false when its type has no text form here. */
static bool gguf_item(const pith_gguf_kv *kv, uint64_t i, char *buf, size_t cap) {
    pith_str s;
    int64_t v;
    if (kv->arr_type == PITH_GGUF_BOOL) {
        const uint8_t *p = (const uint8_t *)kv->data + i;
        snprintf(buf, cap, "%s", *p ? "true" : "false");
        return true;
    }
    if (pith_gguf_arr_str(kv, i, &s)) {
        if (s.len >= cap) return false;
        memcpy(buf, s.ptr, (size_t)s.len);
        buf[s.len] = '\0';
        return true;
    }
    if (pith_gguf_arr_i64(kv, i, &v)) {
        snprintf(buf, cap, "%lld", (long long)v);
        return true;
    }
    return false;
}

static bool json_item(const cJSON *j, char *buf, size_t cap) {
    if (cJSON_IsString(j)) {
        if (strlen(j->valuestring) >= cap) return false;
        snprintf(buf, cap, "%s", j->valuestring);
        return true;
    }
    if (cJSON_IsBool(j)) {
        snprintf(buf, cap, "%s", cJSON_IsTrue(j) ? "true" : "false");
        return true;
    }
    if (cJSON_IsNumber(j) && j->valuedouble == floor(j->valuedouble) && fabs(j->valuedouble) < 1e9) {
        snprintf(buf, cap, "%d", (int)j->valuedouble);
        return true;
    }
    return false;
}

int pith_meta_ints(const pith_meta *m, const char *key, int max_n, int lo, int hi, int *out) {
    if (!pith_meta_has(m, key)) return 0;
    char buf[128];
    const char *k = m->gguf ? gguf_key(m, key, buf, sizeof buf) : key;
    const pith_gguf_kv *kv = m->gguf ? pith_gguf_find(m->gguf, k) : NULL;
    const cJSON *arr = m->gguf ? NULL : member(m, key);
    if (kv ? kv->type != PITH_GGUF_ARRAY : !cJSON_IsArray(arr))
        return fail(m, pith_errf(m->err, "%s: %s is not a list", m->path, k));
    int vals[64] = {0};
    if (max_n > 64) max_n = 64;
    const cJSON *j = arr ? arr->child : NULL;
    for (int i = 0; i < max_n && (kv ? (uint64_t)i < kv->arr_n : j != NULL); i++, j = j ? j->next : NULL) {
        int64_t v;
        bool ok = kv ? pith_gguf_arr_i64(kv, (uint64_t)i, &v)
                     : cJSON_IsNumber(j) && j->valuedouble == floor(j->valuedouble) && fabs(j->valuedouble) < 1e15;
        if (!kv && ok) v = (int64_t)j->valuedouble;
        if (!ok || v < lo || v > hi)
            return fail(m, pith_errf(m->err, "%s: %s entry %d is not an integer in [%d, %d]", m->path, k, i, lo, hi));
        vals[i] = (int)v;
    }
    memcpy(out, vals, (size_t)max_n * sizeof *out);
    return 0;
}

int pith_meta_layers(const pith_meta *m, const char *key, int n_layers, const char *on, uint64_t *mask,
                     bool *found) {
    *found = false;
    if (!pith_meta_has(m, key)) return 0;
    char buf[128], item[64];
    const char *k = m->gguf ? gguf_key(m, key, buf, sizeof buf) : key;
    const pith_gguf_kv *kv = m->gguf ? pith_gguf_find(m->gguf, k) : NULL;
    const cJSON *arr = m->gguf ? NULL : member(m, key);
    long long n = kv ? (kv->type == PITH_GGUF_ARRAY ? (long long)kv->arr_n : -1)
                     : (cJSON_IsArray(arr) ? cJSON_GetArraySize(arr) : -1);
    if (n < 0) return fail(m, pith_errf(m->err, "%s: %s is not a list", m->path, k));
    if (n != n_layers || n_layers > PITH_MAX_LAYERS)
        return fail(m, pith_errf(m->err, "%s: %s has %lld entries, expected one per layer (%d)", m->path, k, n,
                                 n_layers));
    uint64_t bits[PITH_MAX_LAYERS / 64] = {0};
    const cJSON *j = arr ? arr->child : NULL;
    for (int l = 0; l < n_layers; l++, j = j ? j->next : NULL) {
        if (!(kv ? gguf_item(kv, (uint64_t)l, item, sizeof item) : json_item(j, item, sizeof item)))
            return fail(m, pith_errf(m->err, "%s: %s entry %d is not a string, number or boolean", m->path, k, l));
        pith_layer_set(bits, l, !strcmp(item, on));
    }
    memcpy(mask, bits, sizeof bits);
    *found = true;
    return 0;
}
