/* Sequence filters of the chat-template interpreter (join, list, items, sort, dictsort, reverse,
 * unique, min, max, sum, map, select, reject, selectattr, rejectattr), as jinja2's filters.py defines
 * them: items come from jv_iterate, attribute paths ("a.b.0") look items up like jinja2's
 * make_attrgetter, and string keys compare case-insensitively unless case_sensitive is set. */
#include <string.h>

#include "chat/jinja_filters.h"

/* Attribute path of jinja2's make_attrgetter: "a.b.0" looks up item a, then b, then index 0. */
static int get_path(jctx *c, jv item, jv attribute, jv *out) {
    if (attribute.kind == JV_INT) return jv_getitem(c, item, attribute, out);
    jstr path = {0};
    if (jf_want_str(c, attribute, "attribute", &path) < 0) return -1;
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

/* Stable merge sort of idx[0..n) by keys, stopping at the first comparison error. eq_first: keys
 * compare as jinja2's attribute sort keys do (one-item lists: equal items never get ordered, so even
 * undefined keys sort without error). */
static int merge_sort(jctx *c, size_t *idx, size_t *tmp, size_t n, const jv *keys, bool reverse, bool eq_first) {
    if (n < 2) return 0;
    size_t h = n / 2;
    if (merge_sort(c, idx, tmp, h, keys, reverse, eq_first) < 0 ||
        merge_sort(c, idx + h, tmp, n - h, keys, reverse, eq_first) < 0)
        return -1;
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n) {
        int cmp = 0;
        bool same = false;
        if (eq_first && jv_eq(c, keys[idx[j]], keys[idx[i]], &same) < 0) return -1;
        if (!same && jv_compare(c, keys[idx[j]], keys[idx[i]], &cmp) < 0) return -1;
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
    if (merge_sort(c, idx, tmp, n, keys, reverse, attribute.kind == JV_STR) < 0) return -1;
    if (jlist_new(c, n, false, out) < 0) return -1;
    for (size_t i = 0; i < n; i++) out->u.list->items[i] = l->items[idx[i]];
    return 0;
}


int jf_join(jctx *c, jv self, const jargs *a, jv *out) {
    static const char *const kw[] = {"d", "attribute", NULL};
    if (jargs_check(c, a, 2, kw, "filter 'join'") < 0) return -1;
    jv d = jf_arg(c, a, 0, "d", jv_str(JSTR_LIT("")));
    jv attribute = jf_arg(c, a, 1, "attribute", jv_none());
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

int jf_list(jctx *c, jv self, const jargs *a, jv *out) {
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

int jf_items(jctx *c, jv self, const jargs *a, jv *out) {
    if (jargs_check(c, a, 0, NULL, "filter 'items'") < 0) return -1;
    if (self.kind == JV_UNDEF) return jlist_new(c, 0, false, out);
    if (self.kind != JV_DICT) return jerr(c, "Can only get item pairs from a mapping.");
    return dict_items(c, self.u.dict, out);
}

int jf_dictsort(jctx *c, jv self, const jargs *a, jv *out) {
    static const char *const kw[] = {"case_sensitive", "by", "reverse", NULL};
    if (jargs_check(c, a, 3, kw, "filter 'dictsort'") < 0) return -1;
    bool cs = jv_truthy(jf_arg(c, a, 0, "case_sensitive", jv_bool(false)));
    jv by = jf_arg(c, a, 1, "by", jv_str(JSTR_LIT("key")));
    bool rev = jv_truthy(jf_arg(c, a, 2, "reverse", jv_bool(false)));
    if (self.kind != JV_DICT) return jerr(c, "filter 'dictsort' needs a mapping, not %s", jv_type_name(self));
    int pos;
    if (by.kind == JV_STR && jstr_eq_c(by.u.s, "key")) pos = 0;
    else if (by.kind == JV_STR && jstr_eq_c(by.u.s, "value")) pos = 1;
    else return jerr(c, "You can only sort by either \"key\" or \"value\"");
    jv items;
    if (dict_items(c, self.u.dict, &items) < 0) return -1;
    return sorted(c, items.u.list, jv_int(pos), cs, rev, out);
}

int jf_sort(jctx *c, jv self, const jargs *a, jv *out) {
    static const char *const kw[] = {"reverse", "case_sensitive", "attribute", NULL};
    if (jargs_check(c, a, 3, kw, "filter 'sort'") < 0) return -1;
    bool rev = jv_truthy(jf_arg(c, a, 0, "reverse", jv_bool(false)));
    bool cs = jv_truthy(jf_arg(c, a, 1, "case_sensitive", jv_bool(false)));
    jv attribute = jf_arg(c, a, 2, "attribute", jv_none());
    const jlist *l;
    if (jv_iterate(c, self, &l) < 0) return -1;
    return sorted(c, l, attribute, cs, rev, out);
}

int jf_reverse(jctx *c, jv self, const jargs *a, jv *out) {
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

int jf_unique(jctx *c, jv self, const jargs *a, jv *out) {
    static const char *const kw[] = {"case_sensitive", "attribute", NULL};
    if (jargs_check(c, a, 2, kw, "filter 'unique'") < 0) return -1;
    bool cs = jv_truthy(jf_arg(c, a, 0, "case_sensitive", jv_bool(false)));
    jv attribute = jf_arg(c, a, 1, "attribute", jv_none());
    const jlist *l;
    if (jv_iterate(c, self, &l) < 0) return -1;
    jv *keys = l->n ? jalloc_array(c, l->n, sizeof *keys) : NULL;
    if (l->n && !keys) return -1;
    if (jlist_new(c, l->n, false, out) < 0) return -1;
    size_t k = 0;
    for (size_t i = 0; i < l->n; i++) {
        jv key = l->items[i];
        if (attribute.kind != JV_NONE && get_path(c, key, attribute, &key) < 0) return -1;
        if (lowered(c, key, cs, &key) < 0 || jv_check_hashable(c, key) < 0) return -1;
        bool seen = false;
        for (size_t j = 0; j < k && !seen; j++)
            if (jv_eq(c, keys[j], key, &seen) < 0) return -1;
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
    bool cs = jv_truthy(jf_arg(c, a, 0, "case_sensitive", jv_bool(false)));
    jv attribute = jf_arg(c, a, 1, "attribute", jv_none());
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
int jf_min(jctx *c, jv self, const jargs *a, jv *out) { return min_max(c, self, a, out, false); }
int jf_max(jctx *c, jv self, const jargs *a, jv *out) { return min_max(c, self, a, out, true); }

int jf_sum(jctx *c, jv self, const jargs *a, jv *out) {
    static const char *const kw[] = {"attribute", "start", NULL};
    if (jargs_check(c, a, 2, kw, "filter 'sum'") < 0) return -1;
    jv attribute = jf_arg(c, a, 0, "attribute", jv_none());
    jv total = jf_arg(c, a, 1, "start", jv_int(0));
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
int jf_map(jctx *c, jv self, const jargs *a, jv *out) {
    const jlist *l;
    if (!jv_truthy(self)) return jlist_new(c, 0, false, out); /* jinja2 does not iterate falsy values */
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
    if (!jv_truthy(self)) return jlist_new(c, 0, false, out); /* jinja2 does not iterate falsy values */
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
int jf_select(jctx *c, jv self, const jargs *a, jv *out) { return select_impl(c, self, a, out, false, true); }
int jf_reject(jctx *c, jv self, const jargs *a, jv *out) { return select_impl(c, self, a, out, false, false); }
int jf_selectattr(jctx *c, jv self, const jargs *a, jv *out) { return select_impl(c, self, a, out, true, true); }
int jf_rejectattr(jctx *c, jv self, const jargs *a, jv *out) { return select_impl(c, self, a, out, true, false); }

