/* Filters of the chat-template interpreter, with jinja2's semantics (filters.py), and Hugging Face's
 * tojson (json.dumps(ensure_ascii=False, indent, separators, sort_keys) rather than jinja2's HTML-safe
 * one). A filter jinja2 has but this table lacks is rejected when the template is parsed, naming it.
 * Sequence filters (sort, map, select...) take items through jv_iterate, so strings, lists, dicts and
 * undefined values behave as jinja2's iteration does. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/jinja.h"

typedef int (*jfilter_fn)(jctx *c, jv self, const jargs *a, jv *out);

/* ---- argument helpers (shared with tests and methods) ---- */

int jargs_get(jctx *c, const jargs *a, int pos, const char *name, jv *out, bool *found) {
    (void)c;
    *found = false;
    if (pos >= 0 && pos < a->n_pos) {
        *out = a->pos[pos];
        *found = true;
        return 0;
    }
    for (int i = 0; name && i < a->n_kw; i++)
        if (jstr_eq_c(a->kw_names[i], name)) {
            *out = a->kw_vals[i];
            *found = true;
        }
    return 0;
}

int jargs_check(jctx *c, const jargs *a, int max_pos, const char *const *kw_allowed, const char *what) {
    if (a->n_pos > max_pos) return jerr(c, "%s takes at most %d positional argument(s), got %d", what, max_pos, a->n_pos);
    for (int i = 0; i < a->n_kw; i++) {
        bool ok = false;
        for (int k = 0; kw_allowed && kw_allowed[k] && !ok; k++) ok = jstr_eq_c(a->kw_names[i], kw_allowed[k]);
        if (!ok)
            return jerr(c, "%s got an unexpected keyword argument '%.*s'", what, (int)a->kw_names[i].n,
                        a->kw_names[i].p);
    }
    return 0;
}

/* Optional argument with a default. */
static jv arg(jctx *c, const jargs *a, int pos, const char *name, jv def) {
    jv v;
    bool found;
    jargs_get(c, a, pos, name, &v, &found);
    return found ? v : def;
}

static int want_str(jctx *c, jv v, const char *what, jstr *out) {
    if (v.kind != JV_STR) return jerr(c, "%s must be a string, not %s", what, jv_type_name(v));
    *out = v.u.s;
    return 0;
}

static int want_int(jctx *c, jv v, const char *what, int64_t *out) {
    if (v.kind == JV_BOOL) v = jv_int(v.u.b);
    if (v.kind != JV_INT) return jerr(c, "%s must be an integer, not %s", what, jv_type_name(v));
    *out = v.u.i;
    return 0;
}

static int str_of(jctx *c, jv v, jv *out) {
    jstr s;
    if (jv_to_str(c, v, &s) < 0) return -1;
    *out = jv_str(s);
    return 0;
}

/* Attribute path of jinja2's make_attrgetter: "a.b.0" looks up item a, then b, then index 0. */
static int get_path(jctx *c, jv item, jv attribute, jv *out) {
    if (attribute.kind == JV_INT) return jv_getitem(c, item, attribute, out);
    jstr path = {0};
    if (want_str(c, attribute, "attribute", &path) < 0) return -1;
    size_t i = 0;
    *out = item;
    while (i <= path.n) {
        size_t j = i;
        while (j < path.n && path.p[j] != '.') j++;
        jstr part = {path.p + i, j - i};
        jv key = jv_str(part);
        bool digits = part.n > 0;
        int64_t num = 0;
        for (size_t k = 0; k < part.n && digits; k++) {
            digits = part.p[k] >= '0' && part.p[k] <= '9';
            if (digits && num < 100000000000LL) num = num * 10 + (part.p[k] - '0');
        }
        if (digits) key = jv_int(num);
        if (jv_getitem(c, *out, key, out) < 0) return -1;
        i = j + 1;
    }
    return 0;
}

static int lowered(jctx *c, jv v, bool case_sensitive, jv *out) {
    if (case_sensitive || v.kind != JV_STR) {
        *out = v;
        return 0;
    }
    jstr s;
    if (ju_map_case(c, v.u.s, 0, &s) < 0) return -1;
    *out = jv_str(s);
    return 0;
}

/* Stable merge sort of idx[0..n) by keys, stopping at the first comparison error. */
static int merge_sort(jctx *c, size_t *idx, size_t *tmp, size_t n, const jv *keys, bool reverse) {
    if (n < 2) return 0;
    size_t h = n / 2;
    if (merge_sort(c, idx, tmp, h, keys, reverse) < 0 || merge_sort(c, idx + h, tmp, n - h, keys, reverse) < 0)
        return -1;
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n) {
        int cmp;
        if (jv_compare(c, keys[idx[j]], keys[idx[i]], &cmp) < 0) return -1;
        bool take_right = reverse ? cmp > 0 : cmp < 0;
        tmp[k++] = take_right ? idx[j++] : idx[i++];
    }
    while (i < h) tmp[k++] = idx[i++];
    while (j < n) tmp[k++] = idx[j++];
    memcpy(idx, tmp, n * sizeof *idx);
    return 0;
}

/* Sorted copy of items by key (attribute path and case folding as jinja2's sort). */
static int sorted(jctx *c, const jlist *l, jv attribute, bool case_sensitive, bool reverse, jv *out) {
    size_t n = l->n;
    jv *keys = n ? jalloc_array(c, n, sizeof *keys) : NULL;
    size_t *idx = n ? jalloc_array(c, n, sizeof *idx) : NULL;
    size_t *tmp = n ? jalloc_array(c, n, sizeof *tmp) : NULL;
    if (n && (!keys || !idx || !tmp)) return -1;
    for (size_t i = 0; i < n; i++) {
        jv k = l->items[i];
        if (attribute.kind != JV_NONE && get_path(c, k, attribute, &k) < 0) return -1;
        if (lowered(c, k, case_sensitive, &keys[i]) < 0) return -1;
        idx[i] = i;
    }
    if (merge_sort(c, idx, tmp, n, keys, reverse) < 0) return -1;
    if (jlist_new(c, n, false, out) < 0) return -1;
    for (size_t i = 0; i < n; i++) out->u.list->items[i] = l->items[idx[i]];
    return 0;
}

/* ---- filters ---- */

static int f_trim(jctx *c, jv self, const jargs *a, jv *out) {
    static const char *const kw[] = {"chars", NULL};
    if (jargs_check(c, a, 1, kw, "filter 'trim'") < 0) return -1;
    jv chars = arg(c, a, 0, "chars", jv_none());
    jstr s, cs, r;
    if (jv_to_str(c, self, &s) < 0) return -1;
    if (chars.kind != JV_NONE && want_str(c, chars, "trim chars", &cs) < 0) return -1;
    ju_strip(s, chars.kind == JV_NONE ? NULL : &cs, true, true, &r);
    *out = jv_str(r);
    return 0;
}

static int f_length(jctx *c, jv self, const jargs *a, jv *out) {
    if (jargs_check(c, a, 0, NULL, "filter 'length'") < 0) return -1;
    int64_t n;
    if (jv_length(c, self, &n) < 0) return -1;
    *out = jv_int(n);
    return 0;
}

static int f_tojson(jctx *c, jv self, const jargs *a, jv *out) {
    static const char *const kw[] = {"ensure_ascii", "indent", "separators", "sort_keys", NULL};
    if (jargs_check(c, a, 4, kw, "filter 'tojson'") < 0) return -1;
    jjson_opts o = {.indent = -1};
    jv ea = arg(c, a, 0, "ensure_ascii", jv_bool(false));
    jv ind = arg(c, a, 1, "indent", jv_none());
    jv sep = arg(c, a, 2, "separators", jv_none());
    jv sk = arg(c, a, 3, "sort_keys", jv_bool(false));
    o.ensure_ascii = jv_truthy(ea);
    o.sort_keys = jv_truthy(sk);
    if (ind.kind != JV_NONE) {
        int64_t w;
        if (want_int(c, ind, "tojson indent", &w) < 0) return -1;
        o.indent = w < 0 ? 0 : w > 64 ? 64 : (int)w;
    }
    o.item_sep = o.indent >= 0 ? JSTR_LIT(",") : JSTR_LIT(", ");
    o.key_sep = JSTR_LIT(": ");
    if (sep.kind != JV_NONE) {
        if (sep.kind != JV_LIST || sep.u.list->n != 2 || sep.u.list->items[0].kind != JV_STR ||
            sep.u.list->items[1].kind != JV_STR)
            return jerr(c, "tojson separators must be a pair of strings");
        o.item_sep = sep.u.list->items[0].u.s;
        o.key_sep = sep.u.list->items[1].u.s;
    }
    jbuf b = {0};
    if (jv_to_json(c, &b, self, &o, 0) < 0) return -1;
    *out = jv_str(jbuf_str(&b));
    return 0;
}

static int map_case(jctx *c, jv self, const jargs *a, jv *out, int mode, const char *name) {
    if (jargs_check(c, a, 0, NULL, name) < 0) return -1;
    jstr s, r;
    if (jv_to_str(c, self, &s) < 0 || ju_map_case(c, s, mode, &r) < 0) return -1;
    *out = jv_str(r);
    return 0;
}
static int f_lower(jctx *c, jv self, const jargs *a, jv *out) { return map_case(c, self, a, out, 0, "filter 'lower'"); }
static int f_upper(jctx *c, jv self, const jargs *a, jv *out) { return map_case(c, self, a, out, 1, "filter 'upper'"); }
static int f_capitalize(jctx *c, jv self, const jargs *a, jv *out) { return map_case(c, self, a, out, 2, "filter 'capitalize'"); }
static int f_title(jctx *c, jv self, const jargs *a, jv *out) { return map_case(c, self, a, out, 3, "filter 'title'"); }

static int f_default(jctx *c, jv self, const jargs *a, jv *out) {
    static const char *const kw[] = {"default_value", "boolean", NULL};
    if (jargs_check(c, a, 2, kw, "filter 'default'") < 0) return -1;
    jv def = arg(c, a, 0, "default_value", jv_str(JSTR_LIT("")));
    bool boolean = jv_truthy(arg(c, a, 1, "boolean", jv_bool(false)));
    *out = (self.kind == JV_UNDEF || (boolean && !jv_truthy(self))) ? def : self;
    return 0;
}

static int f_first(jctx *c, jv self, const jargs *a, jv *out) {
    const jlist *l;
    if (jargs_check(c, a, 0, NULL, "filter 'first'") < 0 || jv_iterate(c, self, &l) < 0) return -1;
    *out = l->n ? l->items[0] : jv_undef(JSTR_LIT("first"));
    return 0;
}

static int f_last(jctx *c, jv self, const jargs *a, jv *out) {
    const jlist *l;
    if (jargs_check(c, a, 0, NULL, "filter 'last'") < 0 || jv_iterate(c, self, &l) < 0) return -1;
    *out = l->n ? l->items[l->n - 1] : jv_undef(JSTR_LIT("last"));
    return 0;
}

static int f_join(jctx *c, jv self, const jargs *a, jv *out) {
    static const char *const kw[] = {"d", "attribute", NULL};
    if (jargs_check(c, a, 2, kw, "filter 'join'") < 0) return -1;
    jv d = arg(c, a, 0, "d", jv_str(JSTR_LIT("")));
    jv attribute = arg(c, a, 1, "attribute", jv_none());
    jstr sep;
    const jlist *l;
    if (jv_to_str(c, d, &sep) < 0 || jv_iterate(c, self, &l) < 0) return -1;
    jbuf b = {0};
    for (size_t i = 0; i < l->n; i++) {
        jv item = l->items[i];
        jstr s;
        if (attribute.kind != JV_NONE && get_path(c, item, attribute, &item) < 0) return -1;
        if (i && jbuf_put(c, &b, sep.p, sep.n) < 0) return -1;
        if (jv_to_str(c, item, &s) < 0 || jbuf_put(c, &b, s.p, s.n) < 0) return -1;
    }
    *out = jv_str(jbuf_str(&b));
    return 0;
}

int jinja_str_replace(jctx *c, jstr s, jstr old, jstr new_, int64_t count, jstr *out) {
    jbuf b = {0};
    if (count < 0) count = INT64_MAX;
    size_t i = 0;
    int64_t done = 0;
    if (old.n == 0) { /* insert between code points, as Python does */
        while (done < count) {
            if (jbuf_put(c, &b, new_.p, new_.n) < 0) return -1;
            done++;
            if (i >= s.n) break;
            uint32_t cp;
            size_t k = ju_decode(s.p, s.n, i, &cp);
            if (jbuf_put(c, &b, s.p + i, k) < 0) return -1;
            i += k;
        }
    } else {
        while (done < count && i + old.n <= s.n) {
            const char *hit = memmem(s.p + i, s.n - i, old.p, old.n);
            if (!hit) break;
            size_t at = (size_t)(hit - s.p);
            if (jbuf_put(c, &b, s.p + i, at - i) < 0 || jbuf_put(c, &b, new_.p, new_.n) < 0) return -1;
            i = at + old.n;
            done++;
        }
    }
    if (jbuf_put(c, &b, s.p + i, s.n - i) < 0) return -1;
    *out = jbuf_str(&b);
    return 0;
}

static int f_replace(jctx *c, jv self, const jargs *a, jv *out) {
    static const char *const kw[] = {"old", "new", "count", NULL};
    if (jargs_check(c, a, 3, kw, "filter 'replace'") < 0) return -1;
    jv o = arg(c, a, 0, "old", jv_undef(JSTR_LIT("old"))), n = arg(c, a, 1, "new", jv_undef(JSTR_LIT("new")));
    jv cnt = arg(c, a, 2, "count", jv_none());
    if (o.kind == JV_UNDEF || n.kind == JV_UNDEF) return jerr(c, "filter 'replace' needs old and new");
    jstr s, os, ns, r;
    int64_t count = -1;
    if (jv_to_str(c, self, &s) < 0 || jv_to_str(c, o, &os) < 0 || jv_to_str(c, n, &ns) < 0) return -1;
    if (cnt.kind != JV_NONE && want_int(c, cnt, "replace count", &count) < 0) return -1;
    if (jinja_str_replace(c, s, os, ns, count, &r) < 0) return -1;
    *out = jv_str(r);
    return 0;
}

static int f_string(jctx *c, jv self, const jargs *a, jv *out) {
    if (jargs_check(c, a, 0, NULL, "filter 'string'") < 0) return -1;
    return str_of(c, self, out);
}

static int f_list(jctx *c, jv self, const jargs *a, jv *out) {
    const jlist *l;
    if (jargs_check(c, a, 0, NULL, "filter 'list'") < 0 || jv_iterate(c, self, &l) < 0) return -1;
    if (jlist_new(c, l->n, false, out) < 0) return -1;
    if (l->n) memcpy(out->u.list->items, l->items, l->n * sizeof(jv));
    return 0;
}

static int dict_items(jctx *c, const jdict *d, jv *out) {
    if (jlist_new(c, d->n, false, out) < 0) return -1;
    for (size_t i = 0; i < d->n; i++) {
        jv t;
        if (jlist_new(c, 2, true, &t) < 0) return -1;
        t.u.list->items[0] = d->keys[i];
        t.u.list->items[1] = d->vals[i];
        out->u.list->items[i] = t;
    }
    return 0;
}

static int f_items(jctx *c, jv self, const jargs *a, jv *out) {
    if (jargs_check(c, a, 0, NULL, "filter 'items'") < 0) return -1;
    if (self.kind == JV_UNDEF) return jlist_new(c, 0, false, out);
    if (self.kind != JV_DICT) return jerr(c, "Can only get item pairs from a mapping.");
    return dict_items(c, self.u.dict, out);
}

static int f_dictsort(jctx *c, jv self, const jargs *a, jv *out) {
    static const char *const kw[] = {"case_sensitive", "by", "reverse", NULL};
    if (jargs_check(c, a, 3, kw, "filter 'dictsort'") < 0) return -1;
    bool cs = jv_truthy(arg(c, a, 0, "case_sensitive", jv_bool(false)));
    jv by = arg(c, a, 1, "by", jv_str(JSTR_LIT("key")));
    bool rev = jv_truthy(arg(c, a, 2, "reverse", jv_bool(false)));
    if (self.kind != JV_DICT) return jerr(c, "filter 'dictsort' needs a mapping, not %s", jv_type_name(self));
    int pos;
    if (by.kind == JV_STR && jstr_eq_c(by.u.s, "key")) pos = 0;
    else if (by.kind == JV_STR && jstr_eq_c(by.u.s, "value")) pos = 1;
    else return jerr(c, "You can only sort by either \"key\" or \"value\"");
    jv items;
    if (dict_items(c, self.u.dict, &items) < 0) return -1;
    return sorted(c, items.u.list, jv_int(pos), cs, rev, out);
}

static int f_sort(jctx *c, jv self, const jargs *a, jv *out) {
    static const char *const kw[] = {"reverse", "case_sensitive", "attribute", NULL};
    if (jargs_check(c, a, 3, kw, "filter 'sort'") < 0) return -1;
    bool rev = jv_truthy(arg(c, a, 0, "reverse", jv_bool(false)));
    bool cs = jv_truthy(arg(c, a, 1, "case_sensitive", jv_bool(false)));
    jv attribute = arg(c, a, 2, "attribute", jv_none());
    const jlist *l;
    if (jv_iterate(c, self, &l) < 0) return -1;
    return sorted(c, l, attribute, cs, rev, out);
}

static int f_reverse(jctx *c, jv self, const jargs *a, jv *out) {
    const jlist *l;
    if (jargs_check(c, a, 0, NULL, "filter 'reverse'") < 0 || jv_iterate(c, self, &l) < 0) return -1;
    if (self.kind == JV_STR) {
        jbuf b = {0};
        for (size_t i = l->n; i-- > 0;)
            if (jbuf_put(c, &b, l->items[i].u.s.p, l->items[i].u.s.n) < 0) return -1;
        *out = jv_str(jbuf_str(&b));
        return 0;
    }
    if (jlist_new(c, l->n, false, out) < 0) return -1;
    for (size_t i = 0; i < l->n; i++) out->u.list->items[i] = l->items[l->n - 1 - i];
    return 0;
}

static int f_unique(jctx *c, jv self, const jargs *a, jv *out) {
    static const char *const kw[] = {"case_sensitive", "attribute", NULL};
    if (jargs_check(c, a, 2, kw, "filter 'unique'") < 0) return -1;
    bool cs = jv_truthy(arg(c, a, 0, "case_sensitive", jv_bool(false)));
    jv attribute = arg(c, a, 1, "attribute", jv_none());
    const jlist *l;
    if (jv_iterate(c, self, &l) < 0) return -1;
    jv *keys = l->n ? jalloc_array(c, l->n, sizeof *keys) : NULL;
    if (l->n && !keys) return -1;
    if (jlist_new(c, l->n, false, out) < 0) return -1;
    size_t k = 0;
    for (size_t i = 0; i < l->n; i++) {
        jv key = l->items[i];
        if (attribute.kind != JV_NONE && get_path(c, key, attribute, &key) < 0) return -1;
        if (lowered(c, key, cs, &key) < 0) return -1;
        bool seen = false;
        for (size_t j = 0; j < k && !seen; j++) seen = jv_equal(keys[j], key);
        if (seen) continue;
        keys[k] = key;
        out->u.list->items[k++] = l->items[i];
    }
    out->u.list->n = k;
    return 0;
}

static int min_max(jctx *c, jv self, const jargs *a, jv *out, bool want_max) {
    static const char *const kw[] = {"case_sensitive", "attribute", NULL};
    if (jargs_check(c, a, 2, kw, want_max ? "filter 'max'" : "filter 'min'") < 0) return -1;
    bool cs = jv_truthy(arg(c, a, 0, "case_sensitive", jv_bool(false)));
    jv attribute = arg(c, a, 1, "attribute", jv_none());
    const jlist *l;
    if (jv_iterate(c, self, &l) < 0) return -1;
    *out = jv_undef(JSTR_LIT(want_max ? "max" : "min"));
    jv best_key = jv_none();
    for (size_t i = 0; i < l->n; i++) {
        jv key = l->items[i];
        if (attribute.kind != JV_NONE && get_path(c, key, attribute, &key) < 0) return -1;
        if (lowered(c, key, cs, &key) < 0) return -1;
        int cmp = 0;
        if (i && jv_compare(c, key, best_key, &cmp) < 0) return -1;
        if (i == 0 || (want_max ? cmp > 0 : cmp < 0)) {
            best_key = key;
            *out = l->items[i];
        }
    }
    return 0;
}
static int f_min(jctx *c, jv self, const jargs *a, jv *out) { return min_max(c, self, a, out, false); }
static int f_max(jctx *c, jv self, const jargs *a, jv *out) { return min_max(c, self, a, out, true); }

static int f_sum(jctx *c, jv self, const jargs *a, jv *out) {
    static const char *const kw[] = {"attribute", "start", NULL};
    if (jargs_check(c, a, 2, kw, "filter 'sum'") < 0) return -1;
    jv attribute = arg(c, a, 0, "attribute", jv_none());
    jv total = arg(c, a, 1, "start", jv_int(0));
    const jlist *l;
    if (jv_iterate(c, self, &l) < 0) return -1;
    for (size_t i = 0; i < l->n; i++) {
        jv item = l->items[i];
        if (attribute.kind != JV_NONE && get_path(c, item, attribute, &item) < 0) return -1;
        if (jv_binop(c, OP_ADD, total, item, &total) < 0) return -1;
    }
    *out = total;
    return 0;
}

/* map / select / reject / selectattr / rejectattr share jinja2's argument conventions. */
static int f_map(jctx *c, jv self, const jargs *a, jv *out) {
    const jlist *l;
    if (jv_iterate(c, self, &l) < 0) return -1;
    jv attribute, def;
    bool has_attr, has_def;
    jargs_get(c, a, -1, "attribute", &attribute, &has_attr);
    jargs_get(c, a, -1, "default", &def, &has_def);
    int filter = -1;
    jargs rest = {0};
    if (!has_attr) {
        if (a->n_pos < 1 || a->pos[0].kind != JV_STR) return jerr(c, "map needs a filter name or attribute=");
        filter = jinja_filter_index(a->pos[0].u.s);
        if (filter < 0)
            return jerr(c, "unsupported filter '%.*s'", (int)a->pos[0].u.s.n, a->pos[0].u.s.p);
        rest = (jargs){a->pos + 1, a->n_pos - 1, a->kw_names, a->kw_vals, a->n_kw};
    } else if (a->n_pos) {
        return jerr(c, "map with attribute= takes no positional arguments");
    }
    if (jlist_new(c, l->n, false, out) < 0) return -1;
    for (size_t i = 0; i < l->n; i++) {
        jv v = l->items[i];
        if (filter >= 0) {
            if (jinja_apply_filter(c, filter, v, &rest, &v) < 0) return -1;
        } else {
            if (get_path(c, v, attribute, &v) < 0) return -1;
            if (has_def && v.kind == JV_UNDEF) v = def;
        }
        out->u.list->items[i] = v;
    }
    return 0;
}

static int select_impl(jctx *c, jv self, const jargs *a, jv *out, bool attr_mode, bool keep_when) {
    const jlist *l;
    if (jv_iterate(c, self, &l) < 0) return -1;
    int first = 0;
    jv attribute = jv_none();
    if (attr_mode) {
        if (a->n_pos < 1) return jerr(c, "selectattr/rejectattr need an attribute name");
        attribute = a->pos[0];
        first = 1;
    }
    int test = -1;
    jargs rest = {0};
    if (a->n_pos > first) {
        if (a->pos[first].kind != JV_STR) return jerr(c, "test name must be a string");
        test = jinja_test_index(a->pos[first].u.s);
        if (test < 0) return jerr(c, "unsupported test '%.*s'", (int)a->pos[first].u.s.n, a->pos[first].u.s.p);
        rest = (jargs){a->pos + first + 1, a->n_pos - first - 1, a->kw_names, a->kw_vals, a->n_kw};
    }
    if (jlist_new(c, l->n, false, out) < 0) return -1;
    size_t k = 0;
    for (size_t i = 0; i < l->n; i++) {
        jv v = l->items[i];
        if (attr_mode && get_path(c, v, attribute, &v) < 0) return -1;
        bool r;
        if (test >= 0) {
            if (jinja_apply_test(c, test, v, &rest, &r) < 0) return -1;
        } else {
            r = jv_truthy(v);
        }
        if (r == keep_when) out->u.list->items[k++] = l->items[i];
    }
    out->u.list->n = k;
    return 0;
}
static int f_select(jctx *c, jv self, const jargs *a, jv *out) { return select_impl(c, self, a, out, false, true); }
static int f_reject(jctx *c, jv self, const jargs *a, jv *out) { return select_impl(c, self, a, out, false, false); }
static int f_selectattr(jctx *c, jv self, const jargs *a, jv *out) { return select_impl(c, self, a, out, true, true); }
static int f_rejectattr(jctx *c, jv self, const jargs *a, jv *out) { return select_impl(c, self, a, out, true, false); }

static int f_abs(jctx *c, jv self, const jargs *a, jv *out) {
    if (jargs_check(c, a, 0, NULL, "filter 'abs'") < 0) return -1;
    if (self.kind == JV_BOOL) self = jv_int(self.u.b);
    if (self.kind == JV_INT) {
        if (self.u.i == INT64_MIN) return jerr(c, "integer overflow");
        *out = jv_int(self.u.i < 0 ? -self.u.i : self.u.i);
    } else if (self.kind == JV_FLOAT) {
        *out = jv_float(fabs(self.u.f));
    } else {
        return jerr(c, "bad operand type for abs(): '%s'", jv_type_name(self));
    }
    return 0;
}

/* Python int(str): optional sign, digits with single underscores between, surrounding whitespace. */
static bool parse_int(jstr s, int64_t *out) {
    jstr t;
    ju_strip(s, NULL, true, true, &t);
    size_t i = 0;
    bool neg = false;
    if (i < t.n && (t.p[i] == '+' || t.p[i] == '-')) neg = t.p[i++] == '-';
    if (i >= t.n) return false;
    int64_t v = 0;
    bool prev_digit = false;
    for (; i < t.n; i++) {
        char ch = t.p[i];
        if (ch == '_' && prev_digit && i + 1 < t.n) {
            prev_digit = false;
            continue;
        }
        if (ch < '0' || ch > '9') return false;
        if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, ch - '0', &v)) return false;
        prev_digit = true;
    }
    if (!prev_digit) return false;
    *out = neg ? -v : v;
    return true;
}

static bool parse_float(jctx *c, jstr s, double *out) {
    jstr t;
    ju_strip(s, NULL, true, true, &t);
    if (t.n == 0 || t.n > 200) return false;
    char buf[256];
    memcpy(buf, t.p, t.n);
    buf[t.n] = 0;
    (void)c;
    for (size_t i = 0; i < t.n; i++)
        if (!strchr("0123456789+-.eEinfatyINFATY", buf[i])) return false;
    char *end;
    *out = strtod(buf, &end);
    return *end == 0;
}

static int f_int(jctx *c, jv self, const jargs *a, jv *out) {
    static const char *const kw[] = {"default", "base", NULL};
    if (jargs_check(c, a, 2, kw, "filter 'int'") < 0) return -1;
    jv def = arg(c, a, 0, "default", jv_int(0));
    jv base = arg(c, a, 1, "base", jv_int(10));
    if (!(base.kind == JV_INT && base.u.i == 10)) return jerr(c, "filter 'int' supports only base 10");
    int64_t i;
    double f;
    switch (self.kind) {
    case JV_INT: *out = self; return 0;
    case JV_BOOL: *out = jv_int(self.u.b); return 0;
    case JV_FLOAT:
        if (!isfinite(self.u.f)) { *out = def; return 0; }
        if (fabs(self.u.f) >= 9.2e18) return jerr(c, "integer overflow");
        *out = jv_int((int64_t)self.u.f);
        return 0;
    case JV_STR:
        if (parse_int(self.u.s, &i)) *out = jv_int(i);
        else if (parse_float(c, self.u.s, &f) && isfinite(f) && fabs(f) < 9.2e18) *out = jv_int((int64_t)f);
        else *out = def;
        return 0;
    default: *out = def; return 0;
    }
}

static int f_float(jctx *c, jv self, const jargs *a, jv *out) {
    static const char *const kw[] = {"default", NULL};
    if (jargs_check(c, a, 1, kw, "filter 'float'") < 0) return -1;
    jv def = arg(c, a, 0, "default", jv_float(0.0));
    double f;
    if (jv_is_number(self)) *out = jv_float(jv_as_double(self));
    else if (self.kind == JV_STR && parse_float(c, self.u.s, &f)) *out = jv_float(f);
    else *out = def;
    return 0;
}

static int f_round(jctx *c, jv self, const jargs *a, jv *out) {
    static const char *const kw[] = {"precision", "method", NULL};
    if (jargs_check(c, a, 2, kw, "filter 'round'") < 0) return -1;
    int64_t prec = 0;
    jv p = arg(c, a, 0, "precision", jv_int(0));
    jv m = arg(c, a, 1, "method", jv_str(JSTR_LIT("common")));
    if (want_int(c, p, "round precision", &prec) < 0) return -1;
    if (prec < 0 || prec > 30) return jerr(c, "round precision out of range");
    if (!jv_is_number(self)) return jerr(c, "type %s doesn't define __round__ method", jv_type_name(self));
    double x = jv_as_double(self), r;
    if (m.kind == JV_STR && jstr_eq_c(m.u.s, "common")) {
        if (self.kind != JV_FLOAT) { /* Python round(int, n) stays an int */
            *out = jv_int(self.kind == JV_BOOL ? self.u.b : self.u.i);
            return 0;
        }
        /* Python rounds the exact binary value half-to-even; so does printf. */
        char buf[400];
        snprintf(buf, sizeof buf, "%.*f", (int)prec, x);
        r = strtod(buf, NULL);
    } else if (m.kind == JV_STR && (jstr_eq_c(m.u.s, "ceil") || jstr_eq_c(m.u.s, "floor"))) {
        double scale = pow(10.0, (double)prec);
        r = jstr_eq_c(m.u.s, "ceil") ? ceil(x * scale) / scale : floor(x * scale) / scale;
    } else {
        return jerr(c, "method must be common, ceil or floor");
    }
    *out = jv_float(r);
    return 0;
}

static int f_indent(jctx *c, jv self, const jargs *a, jv *out) {
    static const char *const kw[] = {"width", "first", "blank", NULL};
    if (jargs_check(c, a, 3, kw, "filter 'indent'") < 0) return -1;
    jv w = arg(c, a, 0, "width", jv_int(4));
    bool first = jv_truthy(arg(c, a, 1, "first", jv_bool(false)));
    bool blank = jv_truthy(arg(c, a, 2, "blank", jv_bool(false)));
    jstr ind;
    if (w.kind == JV_STR) {
        ind = w.u.s;
    } else {
        int64_t n;
        if (want_int(c, w, "indent width", &n) < 0) return -1;
        if (n < 0) n = 0;
        if (n > 4096) return jerr(c, "indent width too large");
        jv sp = jv_str(JSTR_LIT(" "));
        if (jv_binop(c, OP_MUL, sp, jv_int(n), &sp) < 0) return -1;
        ind = sp.u.s;
    }
    jstr s;
    if (jv_to_str(c, self, &s) < 0) return -1;
    /* jinja2 appends "\n" and then uses str.splitlines(), so a trailing newline survives. */
    jbuf b = {0};
    if (first && jbuf_put(c, &b, ind.p, ind.n) < 0) return -1;
    size_t i = 0;
    bool first_line = true;
    jstr src;
    if (jstr_cat(c, s, JSTR_LIT("\n"), &src) < 0) return -1;
    while (i < src.n) {
        size_t start = i, end;
        for (;;) {
            uint32_t cp;
            size_t k = ju_decode(src.p, src.n, i, &cp);
            if (ju_is_linebreak(cp)) {
                end = i;
                i += k;
                if (cp == '\r' && i < src.n && src.p[i] == '\n') i++;
                break;
            }
            i += k;
            if (i >= src.n) {
                end = i;
                break;
            }
        }
        jstr line = {src.p + start, end - start};
        if (!first_line) {
            if (jbuf_putc(c, &b, '\n') < 0) return -1;
            if ((blank || line.n) && jbuf_put(c, &b, ind.p, ind.n) < 0) return -1;
        }
        if (jbuf_put(c, &b, line.p, line.n) < 0) return -1;
        first_line = false;
    }
    *out = jv_str(jbuf_str(&b));
    return 0;
}

int jinja_str_pad(jctx *c, jstr s, int64_t width, jstr fill, int how, jstr *out) {
    int64_t len = (int64_t)ju_count(s);
    if (width > (int64_t)c->lim.max_output_bytes) return jerr(c, "output limit of %zu bytes exceeded", c->lim.max_output_bytes);
    if (width <= len) {
        *out = s;
        return 0;
    }
    int64_t marg = width - len, left;
    if (how == 0) left = marg / 2 + (marg & width & 1); /* CPython's center */
    else left = how < 0 ? 0 : marg;
    jbuf b = {0};
    for (int64_t i = 0; i < left; i++)
        if (jbuf_put(c, &b, fill.p, fill.n) < 0) return -1;
    if (jbuf_put(c, &b, s.p, s.n) < 0) return -1;
    for (int64_t i = left; i < marg; i++)
        if (jbuf_put(c, &b, fill.p, fill.n) < 0) return -1;
    *out = jbuf_str(&b);
    return 0;
}

static int f_center(jctx *c, jv self, const jargs *a, jv *out) {
    static const char *const kw[] = {"width", NULL};
    if (jargs_check(c, a, 1, kw, "filter 'center'") < 0) return -1;
    int64_t w;
    jstr s, r;
    if (want_int(c, arg(c, a, 0, "width", jv_int(80)), "center width", &w) < 0) return -1;
    if (jv_to_str(c, self, &s) < 0 || jinja_str_pad(c, s, w, JSTR_LIT(" "), 0, &r) < 0) return -1;
    *out = jv_str(r);
    return 0;
}

static int f_wordcount(jctx *c, jv self, const jargs *a, jv *out) {
    if (jargs_check(c, a, 0, NULL, "filter 'wordcount'") < 0) return -1;
    jstr s;
    if (jv_to_str(c, self, &s) < 0) return -1;
    /* jinja2 counts matches of \w+ */
    int64_t n = 0;
    bool in_word = false;
    for (size_t i = 0; i < s.n;) {
        uint32_t cp;
        i += ju_decode(s.p, s.n, i, &cp);
        bool w = ju_is_alpha(cp) || ju_is_digit(cp) || cp == '_';
        if (w && !in_word) n++;
        in_word = w;
    }
    *out = jv_int(n);
    return 0;
}

static int f_safe(jctx *c, jv self, const jargs *a, jv *out) {
    if (jargs_check(c, a, 0, NULL, "filter 'safe'") < 0) return -1;
    *out = self;
    return 0;
}

static int f_escape(jctx *c, jv self, const jargs *a, jv *out) {
    if (jargs_check(c, a, 0, NULL, "filter 'escape'") < 0) return -1;
    jstr s;
    if (jv_to_str(c, self, &s) < 0) return -1;
    jbuf b = {0};
    for (size_t i = 0; i < s.n; i++) {
        const char *e = NULL;
        switch (s.p[i]) {
        case '&': e = "&amp;"; break;
        case '<': e = "&lt;"; break;
        case '>': e = "&gt;"; break;
        case '"': e = "&#34;"; break;
        case '\'': e = "&#39;"; break;
        default: break;
        }
        if (e ? jbuf_puts(c, &b, e) : jbuf_putc(c, &b, s.p[i])) return -1;
    }
    *out = jv_str(jbuf_str(&b));
    return 0;
}

static int f_attr(jctx *c, jv self, const jargs *a, jv *out) {
    static const char *const kw[] = {"name", NULL};
    if (jargs_check(c, a, 1, kw, "filter 'attr'") < 0) return -1;
    jstr name;
    if (want_str(c, arg(c, a, 0, "name", jv_none()), "attr name", &name) < 0) return -1;
    if (self.kind == JV_DICT && !jinja_has_method(self, name)) { /* getattr only, never the item */
        *out = jv_undef(name);
        return 0;
    }
    return jv_getattr(c, self, name, out);
}

static const struct {
    const char *name;
    jfilter_fn fn;
} FILTERS[] = {
    {"abs", f_abs}, {"attr", f_attr}, {"capitalize", f_capitalize}, {"center", f_center},
    {"count", f_length}, {"d", f_default}, {"default", f_default}, {"dictsort", f_dictsort},
    {"e", f_escape}, {"escape", f_escape}, {"first", f_first}, {"float", f_float},
    {"forceescape", f_escape}, {"indent", f_indent}, {"int", f_int}, {"items", f_items},
    {"join", f_join}, {"last", f_last}, {"length", f_length}, {"list", f_list}, {"lower", f_lower},
    {"map", f_map}, {"max", f_max}, {"min", f_min}, {"reject", f_reject}, {"rejectattr", f_rejectattr},
    {"replace", f_replace}, {"reverse", f_reverse}, {"round", f_round}, {"safe", f_safe},
    {"select", f_select}, {"selectattr", f_selectattr}, {"sort", f_sort}, {"string", f_string},
    {"sum", f_sum}, {"title", f_title}, {"tojson", f_tojson}, {"trim", f_trim}, {"unique", f_unique},
    {"upper", f_upper}, {"wordcount", f_wordcount},
};

int jinja_filter_index(jstr name) {
    for (size_t i = 0; i < sizeof FILTERS / sizeof FILTERS[0]; i++)
        if (jstr_eq_c(name, FILTERS[i].name)) return (int)i;
    return -1;
}

int jinja_apply_filter(jctx *c, int index, jv self, const jargs *a, jv *out) {
    if (index < 0 || (size_t)index >= sizeof FILTERS / sizeof FILTERS[0]) return jerr(c, "internal error: bad filter");
    return FILTERS[index].fn(c, self, a, out);
}
