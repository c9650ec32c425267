/* JSON in and out of template values.
 *
 * In: cJSON values become template values without copying strings (they point into the cJSON tree,
 * which outlives the render). JSON numbers that are whole and within 2^53 become ints, others floats
 * (cJSON keeps no trace of "1.0" versus "1", so 1.0 renders as 1; see docs/chat-templates.md).
 * Out: the `tojson` filter as Hugging Face defines it, i.e. Python's json.dumps with ensure_ascii=False
 * by default, key order kept, separators (", ", ": ") or with an indent (",", ": "). */
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "chat/jinja.h"

int jv_from_cjson(jctx *c, const cJSON *j, int depth, jv *out) {
    if (depth > c->lim.max_depth) return jerr(c, "JSON input nested deeper than %d levels", c->lim.max_depth);
    if (!j || cJSON_IsNull(j)) {
        *out = jv_none();
        return 0;
    }
    if (cJSON_IsBool(j)) {
        *out = jv_bool(cJSON_IsTrue(j));
        return 0;
    }
    if (cJSON_IsNumber(j)) {
        double d = j->valuedouble;
        if (d == floor(d) && fabs(d) <= 9007199254740992.0) *out = jv_int((int64_t)d);
        else *out = jv_float(d);
        return 0;
    }
    if (cJSON_IsString(j)) {
        const char *s = j->valuestring ? j->valuestring : "";
        *out = jv_str((jstr){s, strlen(s)});
        return 0;
    }
    if (cJSON_IsArray(j)) {
        size_t n = 0;
        for (const cJSON *e = j->child; e; e = e->next) n++;
        if (jlist_new(c, n, false, out) < 0) return -1;
        size_t i = 0;
        for (const cJSON *e = j->child; e; e = e->next, i++)
            if (jv_from_cjson(c, e, depth + 1, &out->u.list->items[i]) < 0) return -1;
        return 0;
    }
    if (cJSON_IsObject(j)) {
        if (jdict_new(c, out) < 0) return -1;
        for (const cJSON *e = j->child; e; e = e->next) {
            jv v;
            const char *k = e->string ? e->string : "";
            if (jv_from_cjson(c, e, depth + 1, &v) < 0) return -1;
            if (jdict_set(c, out->u.dict, jv_str((jstr){k, strlen(k)}), v) < 0) return -1;
        }
        return 0;
    }
    return jerr(c, "unsupported JSON value in input");
}

static int json_string(jctx *c, jbuf *b, jstr s, bool ensure_ascii) {
    if (jbuf_putc(c, b, '"') < 0) return -1;
    size_t run = 0; /* bytes copied verbatim, flushed in bulk */
    for (size_t i = 0; i < s.n;) {
        uint32_t cp;
        size_t k = ju_decode(s.p, s.n, i, &cp);
        const char *esc = NULL;
        char tmp[16];
        switch (cp) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        case '\b': esc = "\\b"; break;
        case '\f': esc = "\\f"; break;
        default:
            if (cp < 0x20 || (ensure_ascii && cp >= 0x7F)) {
                if (cp >= 0x10000) {
                    uint32_t v = cp - 0x10000;
                    snprintf(tmp, sizeof tmp, "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
                } else {
                    snprintf(tmp, sizeof tmp, "\\u%04x", cp);
                }
                esc = tmp;
            }
        }
        if (esc) {
            if (run && jbuf_put(c, b, s.p + i - run, run) < 0) return -1;
            run = 0;
            if (jbuf_puts(c, b, esc) < 0) return -1;
        } else {
            run += k;
        }
        i += k;
    }
    if (run && jbuf_put(c, b, s.p + s.n - run, run) < 0) return -1;
    return jbuf_putc(c, b, '"');
}

static int json_newline(jctx *c, jbuf *b, const jjson_opts *o, int level) {
    if (o->indent < 0) return 0;
    if (jbuf_putc(c, b, '\n') < 0) return -1;
    for (int i = 0; i < level * o->indent; i++)
        if (jbuf_putc(c, b, ' ') < 0) return -1;
    return 0;
}

static int json_float(jctx *c, jbuf *b, double f) {
    if (isnan(f)) return jbuf_puts(c, b, "NaN");
    if (isinf(f)) return jbuf_puts(c, b, f < 0 ? "-Infinity" : "Infinity");
    char tmp[64];
    jv_format_float(tmp, sizeof tmp, f);
    return jbuf_puts(c, b, tmp);
}

/* json.dumps turns non-string keys into strings: true/false/null, ints, float repr. */
static int json_key(jctx *c, jbuf *b, jv k, const jjson_opts *o) {
    switch (k.kind) {
    case JV_STR: return json_string(c, b, k.u.s, o->ensure_ascii);
    case JV_BOOL: return jbuf_puts(c, b, k.u.b ? "\"true\"" : "\"false\"");
    case JV_NONE: return jbuf_puts(c, b, "\"null\"");
    case JV_INT: return jbuf_printf(c, b, "\"%" PRId64 "\"", k.u.i);
    case JV_FLOAT:
        if (jbuf_putc(c, b, '"') < 0 || json_float(c, b, k.u.f) < 0) return -1;
        return jbuf_putc(c, b, '"');
    default: return jerr(c, "keys must be str, int, float, bool or None, not %s", jv_type_name(k));
    }
}

static int sorted_order(jctx *c, const jdict *d, size_t *order) {
    for (size_t i = 0; i < d->n; i++) order[i] = i;
    /* insertion sort: dicts in templates are small */
    for (size_t i = 1; i < d->n; i++) {
        size_t x = order[i], j = i;
        while (j > 0) {
            int cmp;
            if (jv_compare(c, d->keys[order[j - 1]], d->keys[x], &cmp) < 0) return -1;
            if (cmp <= 0) break;
            order[j] = order[j - 1];
            j--;
        }
        order[j] = x;
    }
    return 0;
}

int jv_to_json(jctx *c, jbuf *b, jv v, const jjson_opts *o, int level) {
    switch (v.kind) {
    case JV_NONE: return jbuf_puts(c, b, "null");
    case JV_BOOL: return jbuf_puts(c, b, v.u.b ? "true" : "false");
    case JV_INT: return jbuf_printf(c, b, "%" PRId64, v.u.i);
    case JV_FLOAT: return json_float(c, b, v.u.f);
    case JV_STR: return json_string(c, b, v.u.s, o->ensure_ascii);
    case JV_LIST:
        if (v.u.list->view) return jerr(c, "Object of type %s is not JSON serializable", jv_type_name(v));
        break;
    case JV_DICT: break;
    default: return jerr(c, "Object of type %s is not JSON serializable", jv_type_name(v));
    }
    if (++c->depth > c->lim.max_depth) return jerr(c, "value nested too deeply for tojson");
    bool is_list = v.kind == JV_LIST;
    size_t n = is_list ? v.u.list->n : v.u.dict->n;
    int r = jbuf_putc(c, b, is_list ? '[' : '{');
    size_t *order = NULL;
    if (r == 0 && !is_list && o->sort_keys && n > 1) {
        order = jalloc_array(c, n, sizeof *order);
        r = order ? sorted_order(c, v.u.dict, order) : -1;
    }
    for (size_t i = 0; i < n && r == 0; i++) {
        if (i) r = jbuf_put(c, b, o->item_sep.p, o->item_sep.n);
        if (r == 0) r = json_newline(c, b, o, level + 1);
        if (r < 0) break;
        if (is_list) {
            r = jv_to_json(c, b, v.u.list->items[i], o, level + 1);
        } else {
            size_t k = order ? order[i] : i;
            r = json_key(c, b, v.u.dict->keys[k], o);
            if (r == 0) r = jbuf_put(c, b, o->key_sep.p, o->key_sep.n);
            if (r == 0) r = jv_to_json(c, b, v.u.dict->vals[k], o, level + 1);
        }
    }
    if (r == 0 && n) r = json_newline(c, b, o, level);
    if (r == 0) r = jbuf_putc(c, b, is_list ? ']' : '}');
    c->depth--;
    return r;
}
