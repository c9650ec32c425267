/* Python methods templates call on values (str.strip(), dict.get(), ...) and the global functions
 * (range, namespace, dict, raise_exception, strftime_now).
 *
 * A name that is a real Python method of the value's type resolves to a method even when this table
 * does not implement it, so calling it fails with "unsupported method 'str.zfill'" rather than with a
 * confusing "undefined"; methods that mutate lists and dicts fail as in jinja2's immutable sandbox. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "chat/jinja.h"

static const char *const STR_METHODS[] = {
    "capitalize", "casefold", "center", "count", "encode", "endswith", "expandtabs", "find", "format",
    "format_map", "index", "isalnum", "isalpha", "isascii", "isdecimal", "isdigit", "isidentifier",
    "islower", "isnumeric", "isprintable", "isspace", "istitle", "isupper", "join", "ljust", "lower",
    "lstrip", "maketrans", "partition", "removeprefix", "removesuffix", "replace", "rfind", "rindex",
    "rjust", "rpartition", "rsplit", "rstrip", "split", "splitlines", "startswith", "strip", "swapcase",
    "title", "translate", "upper", "zfill", NULL};
static const char *const DICT_METHODS[] = {"clear", "copy", "fromkeys", "get", "items", "keys", "pop",
                                           "popitem", "setdefault", "update", "values", NULL};
static const char *const LIST_METHODS[] = {"append", "clear", "copy", "count", "extend", "index",
                                           "insert", "pop", "remove", "reverse", "sort", NULL};
static const char *const UNSAFE[] = {"append", "clear", "extend", "insert", "pop", "popitem", "remove",
                                     "reverse", "sort", "setdefault", "update", NULL};

static bool in_list(const char *const *list, jstr name) {
    for (int i = 0; list[i]; i++)
        if (jstr_eq_c(name, list[i])) return true;
    return false;
}

bool jinja_has_method(jv self, jstr name) {
    switch (self.kind) {
    case JV_STR: return in_list(STR_METHODS, name);
    case JV_DICT: return in_list(DICT_METHODS, name);
    case JV_LIST: return in_list(LIST_METHODS, name);
    default: return false;
    }
}

static int get_str(jctx *c, const jargs *a, int pos, const char *name, jstr *out, bool *found) {
    jv v;
    jargs_get(c, a, pos, name, &v, found);
    if (!*found || v.kind == JV_NONE) {
        *found = false;
        return 0;
    }
    if (v.kind != JV_STR) return jerr(c, "%s argument must be str, not %s", name, jv_type_name(v));
    *out = v.u.s;
    return 0;
}

static int get_int(jctx *c, const jargs *a, int pos, const char *name, int64_t def, int64_t *out) {
    jv v;
    bool found;
    jargs_get(c, a, pos, name, &v, &found);
    if (!found) {
        *out = def;
        return 0;
    }
    if (v.kind == JV_BOOL) v = jv_int(v.u.b);
    if (v.kind != JV_INT) return jerr(c, "%s argument must be int, not %s", name, jv_type_name(v));
    *out = v.u.i;
    return 0;
}

/* A list grown in the arena, for results whose length is not known up front. */
typedef struct jvec {
    jv *v;
    size_t n, cap;
} jvec;

static int vec_push(jctx *c, jvec *v, jv x) {
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 8;
        jv *p = jalloc_array(c, cap, sizeof *p);
        if (!p) return -1;
        if (v->n) memcpy(p, v->v, v->n * sizeof *p);
        v->v = p;
        v->cap = cap;
    }
    v->v[v->n++] = x;
    return 0;
}

static int vec_list(jctx *c, const jvec *v, bool reverse, jv *out) {
    if (jlist_new(c, v->n, false, out) < 0) return -1;
    for (size_t i = 0; i < v->n; i++) out->u.list->items[i] = v->v[reverse ? v->n - 1 - i : i];
    return 0;
}

static int push_str(jctx *c, jvec *v, const char *p, size_t n) { return vec_push(c, v, jv_str((jstr){p, n})); }

/* Byte-reversed copy: searching it forwards finds matches from the right of the original, which is
 * how rfind / rsplit / rpartition match, in linear time. */
static int reversed(jctx *c, jstr s, jstr *out) {
    char *p = jalloc(c, s.n + 1);
    if (!p) return -1;
    for (size_t i = 0; i < s.n; i++) p[i] = s.p[s.n - 1 - i];
    *out = (jstr){p, s.n};
    return 0;
}

/* Byte offset of the first (or last) occurrence of sub in s, or SIZE_MAX. */
static int find_bytes(jctx *c, jstr s, jstr sub, bool last, size_t *at) {
    *at = SIZE_MAX;
    if (sub.n > s.n) return 0;
    if (!last) {
        const char *hit = sub.n ? memmem(s.p, s.n, sub.p, sub.n) : s.p;
        if (hit) *at = (size_t)(hit - s.p);
        return 0;
    }
    if (sub.n == 0) {
        *at = s.n;
        return 0;
    }
    jstr rs, rsub;
    if (reversed(c, s, &rs) < 0 || reversed(c, sub, &rsub) < 0) return -1;
    const char *hit = memmem(rs.p, rs.n, rsub.p, rsub.n);
    if (hit) *at = s.n - (size_t)(hit - rs.p) - sub.n;
    return 0;
}

/* Skips whitespace (over_space) or non-whitespace from i; returns the offset where that run ends. */
static size_t skip_space(jstr s, size_t i, bool over_space) {
    while (i < s.n) {
        uint32_t cp;
        size_t k = ju_decode(s.p, s.n, i, &cp);
        if (ju_is_space(cp) != over_space) break;
        i += k;
    }
    return i;
}

/* Skips whitespace or non-whitespace backwards from end; returns where that run starts. */
static size_t skip_space_back(jstr s, size_t end, bool over_space) {
    while (end > 0) {
        uint32_t cp;
        size_t k = ju_decode_back(s.p, end, &cp);
        if (ju_is_space(cp) != over_space) break;
        end -= k;
    }
    return end;
}

/* str.split / str.rsplit. */
static int split(jctx *c, jstr s, const jargs *a, bool from_right, jv *out) {
    static const char *const kw[] = {"sep", "maxsplit", NULL};
    if (jargs_check(c, a, 2, kw, from_right ? "str.rsplit" : "str.split") < 0) return -1;
    jstr sep;
    bool has_sep;
    int64_t maxsplit;
    if (get_str(c, a, 0, "sep", &sep, &has_sep) < 0 || get_int(c, a, 1, "maxsplit", -1, &maxsplit) < 0) return -1;
    if (has_sep && sep.n == 0) return jerr(c, "empty separator");
    if (maxsplit < 0) maxsplit = INT64_MAX;
    jvec parts = {0};
    if (has_sep) {
        jstr hay = s, needle = sep;
        if (from_right && (reversed(c, s, &hay) < 0 || reversed(c, sep, &needle) < 0)) return -1;
        size_t i = 0;
        for (int64_t k = 0; k < maxsplit; k++) {
            const char *hit = memmem(hay.p + i, hay.n - i, needle.p, needle.n);
            if (!hit) break;
            size_t h = (size_t)(hit - hay.p);
            int r = from_right ? push_str(c, &parts, s.p + s.n - h, h - i) : push_str(c, &parts, s.p + i, h - i);
            if (r < 0) return -1;
            i = h + needle.n;
        }
        if ((from_right ? push_str(c, &parts, s.p, s.n - i) : push_str(c, &parts, s.p + i, s.n - i)) < 0) return -1;
        return vec_list(c, &parts, from_right, out);
    }
    /* Whitespace: runs of whitespace separate, no empty strings; once maxsplit words are taken the rest
     * (from the next non-space, keeping whitespace at the far end) is one piece. */
    if (!from_right) {
        size_t i = skip_space(s, 0, true);
        for (int64_t k = 0; i < s.n; k++) {
            if (k == maxsplit) return push_str(c, &parts, s.p + i, s.n - i) < 0 ? -1 : vec_list(c, &parts, false, out);
            size_t end = skip_space(s, i, false);
            if (push_str(c, &parts, s.p + i, end - i) < 0) return -1;
            i = skip_space(s, end, true);
        }
        return vec_list(c, &parts, false, out);
    }
    size_t end = skip_space_back(s, s.n, true);
    for (int64_t k = 0; end > 0; k++) {
        if (k == maxsplit) return push_str(c, &parts, s.p, end) < 0 ? -1 : vec_list(c, &parts, true, out);
        size_t start = skip_space_back(s, end, false);
        if (push_str(c, &parts, s.p + start, end - start) < 0) return -1;
        end = skip_space_back(s, start, true);
    }
    return vec_list(c, &parts, true, out);
}

static int splitlines(jctx *c, jstr s, const jargs *a, jv *out) {
    static const char *const kw[] = {"keepends", NULL};
    if (jargs_check(c, a, 1, kw, "str.splitlines") < 0) return -1;
    jv kv;
    bool found;
    jargs_get(c, a, 0, "keepends", &kv, &found);
    bool keep = found && jv_truthy(kv);
    jvec parts = {0};
    size_t i = 0;
    while (i < s.n) {
        size_t start = i, end = s.n, next = s.n;
        while (i < s.n) {
            uint32_t cp;
            size_t k = ju_decode(s.p, s.n, i, &cp);
            if (ju_is_linebreak(cp)) {
                end = i;
                next = i + k;
                if (cp == '\r' && next < s.n && s.p[next] == '\n') next++;
                break;
            }
            i += k;
        }
        if (push_str(c, &parts, s.p + start, (keep ? next : end) - start) < 0) return -1;
        i = next;
    }
    return vec_list(c, &parts, false, out);
}

static int affix_test(jctx *c, jstr s, const jargs *a, bool ends, jv *out) {
    if (a->n_kw || a->n_pos != 1) return jerr(c, "str.%s supports exactly one argument here", ends ? "endswith" : "startswith");
    jv p = a->pos[0];
    const jv *cands = &p;
    size_t n = 1;
    if (p.kind == JV_LIST && p.u.list->tuple) {
        cands = p.u.list->items;
        n = p.u.list->n;
    }
    bool r = false;
    for (size_t i = 0; i < n && !r; i++) {
        if (cands[i].kind != JV_STR) return jerr(c, "%s first arg must be str or a tuple of str", ends ? "endswith" : "startswith");
        jstr x = cands[i].u.s;
        r = x.n <= s.n && memcmp(ends ? s.p + s.n - x.n : s.p, x.p, x.n) == 0;
    }
    *out = jv_bool(r);
    return 0;
}

static int char_class(jctx *c, jstr s, const jargs *a, jv *out, int which) {
    if (jargs_check(c, a, 0, NULL, "str predicate") < 0) return -1;
    bool all = s.n > 0;
    for (size_t i = 0; i < s.n && all;) {
        uint32_t cp;
        i += ju_decode(s.p, s.n, i, &cp);
        switch (which) {
        case 0: all = ju_is_digit(cp); break;
        case 1: all = ju_is_alpha(cp); break;
        case 2: all = ju_is_alpha(cp) || ju_is_digit(cp); break;
        case 3: all = ju_is_space(cp); break;
        default: all = cp < 0x80; break;
        }
    }
    *out = jv_bool(which == 4 ? (all || s.n == 0) : all);
    return 0;
}

static int str_method(jctx *c, jstr s, jstr name, const jargs *a, jv *out) {
    jstr chars, r;
    bool has;
    if (jcharge(c, s.n / 16) < 0) return -1;
    if (jstr_eq_c(name, "strip") || jstr_eq_c(name, "lstrip") || jstr_eq_c(name, "rstrip")) {
        static const char *const kw[] = {"chars", NULL};
        if (jargs_check(c, a, 1, kw, "str.strip") < 0 || get_str(c, a, 0, "chars", &chars, &has) < 0) return -1;
        ju_strip(s, has ? &chars : NULL, name.p[0] != 'r', name.p[0] != 'l', &r);
        *out = jv_str(r);
        return 0;
    }
    if (jstr_eq_c(name, "startswith")) return affix_test(c, s, a, false, out);
    if (jstr_eq_c(name, "endswith")) return affix_test(c, s, a, true, out);
    if (jstr_eq_c(name, "split")) return split(c, s, a, false, out);
    if (jstr_eq_c(name, "rsplit")) return split(c, s, a, true, out);
    if (jstr_eq_c(name, "splitlines")) return splitlines(c, s, a, out);
    int mode = jstr_eq_c(name, "lower") || jstr_eq_c(name, "casefold") ? 0 : jstr_eq_c(name, "upper") ? 1
               : jstr_eq_c(name, "capitalize") ? 2 : jstr_eq_c(name, "title") ? 4 : -1;
    if (mode >= 0) {
        if (jargs_check(c, a, 0, NULL, "str case method") < 0 || ju_map_case(c, s, mode, &r) < 0) return -1;
        *out = jv_str(r);
        return 0;
    }
    if (jstr_eq_c(name, "replace")) {
        jstr o, n;
        bool h1, h2;
        int64_t count;
        if (jargs_check(c, a, 3, NULL, "str.replace") < 0 || get_str(c, a, 0, "old", &o, &h1) < 0 ||
            get_str(c, a, 1, "new", &n, &h2) < 0 || get_int(c, a, 2, "count", -1, &count) < 0)
            return -1;
        if (!h1 || !h2) return jerr(c, "str.replace needs old and new strings");
        if (jinja_str_replace(c, s, o, n, count, &r) < 0) return -1;
        *out = jv_str(r);
        return 0;
    }
    if (jstr_eq_c(name, "find") || jstr_eq_c(name, "rfind") || jstr_eq_c(name, "index") || jstr_eq_c(name, "rindex")) {
        jstr sub;
        if (jargs_check(c, a, 1, NULL, "str.find") < 0 || get_str(c, a, 0, "sub", &sub, &has) < 0) return -1;
        if (!has) return jerr(c, "str.find needs a string");
        size_t at;
        if (find_bytes(c, s, sub, name.p[0] == 'r', &at) < 0) return -1;
        int64_t i = at == SIZE_MAX ? -1 : (int64_t)ju_count((jstr){s.p, at});
        if (i < 0 && (jstr_eq_c(name, "index") || jstr_eq_c(name, "rindex"))) return jerr(c, "substring not found");
        *out = jv_int(i);
        return 0;
    }
    if (jstr_eq_c(name, "count")) {
        jstr sub;
        if (jargs_check(c, a, 1, NULL, "str.count") < 0 || get_str(c, a, 0, "sub", &sub, &has) < 0) return -1;
        if (!has) return jerr(c, "str.count needs a string");
        int64_t n = 0;
        if (sub.n == 0) {
            n = (int64_t)ju_count(s) + 1;
        } else {
            for (size_t i = 0; i + sub.n <= s.n;) {
                const char *hit = memmem(s.p + i, s.n - i, sub.p, sub.n);
                if (!hit) break;
                n++;
                i = (size_t)(hit - s.p) + sub.n;
            }
        }
        *out = jv_int(n);
        return 0;
    }
    if (jstr_eq_c(name, "join")) {
        const jlist *l;
        if (jargs_check(c, a, 1, NULL, "str.join") < 0 || a->n_pos != 1) return jerr(c, "str.join takes one argument");
        if (jv_iterate(c, a->pos[0], &l) < 0) return -1;
        jbuf b = {0};
        for (size_t i = 0; i < l->n; i++) {
            if (l->items[i].kind != JV_STR)
                return jerr(c, "sequence item %zu: expected str instance, %s found", i, jv_type_name(l->items[i]));
            if ((i && jbuf_put(c, &b, s.p, s.n) < 0) || jbuf_put(c, &b, l->items[i].u.s.p, l->items[i].u.s.n) < 0)
                return -1;
        }
        *out = jv_str(jbuf_str(&b));
        return 0;
    }
    if (jstr_eq_c(name, "isdigit") || jstr_eq_c(name, "isdecimal") || jstr_eq_c(name, "isnumeric"))
        return char_class(c, s, a, out, 0);
    if (jstr_eq_c(name, "isalpha")) return char_class(c, s, a, out, 1);
    if (jstr_eq_c(name, "isalnum")) return char_class(c, s, a, out, 2);
    if (jstr_eq_c(name, "isspace")) return char_class(c, s, a, out, 3);
    if (jstr_eq_c(name, "isascii")) return char_class(c, s, a, out, 4);
    if (jstr_eq_c(name, "islower") || jstr_eq_c(name, "isupper")) {
        bool any = false, bad = false, lower = name.p[2] == 'l';
        if (jargs_check(c, a, 0, NULL, "str.islower") < 0) return -1;
        for (size_t i = 0; i < s.n;) {
            uint32_t cp;
            i += ju_decode(s.p, s.n, i, &cp);
            bool is_l = ju_upper(cp) != cp || cp == 0xDF, is_u = ju_lower(cp) != cp;
            if (lower ? is_l : is_u) any = true;
            if (lower ? is_u : is_l) bad = true;
        }
        *out = jv_bool(any && !bad);
        return 0;
    }
    if (jstr_eq_c(name, "removeprefix") || jstr_eq_c(name, "removesuffix")) {
        jstr x;
        bool suffix = name.p[6] == 's';
        if (jargs_check(c, a, 1, NULL, "str.removeprefix") < 0 || get_str(c, a, 0, "affix", &x, &has) < 0) return -1;
        if (!has) return jerr(c, "str.%.*s needs a string", (int)name.n, name.p);
        bool hit = x.n <= s.n && memcmp(suffix ? s.p + s.n - x.n : s.p, x.p, x.n) == 0;
        *out = jv_str(hit ? (jstr){suffix ? s.p : s.p + x.n, s.n - x.n} : s);
        return 0;
    }
    if (jstr_eq_c(name, "center") || jstr_eq_c(name, "ljust") || jstr_eq_c(name, "rjust") || jstr_eq_c(name, "zfill")) {
        int64_t width;
        jstr fill = JSTR_LIT(" ");
        bool z = name.p[0] == 'z';
        if (jargs_check(c, a, z ? 1 : 2, NULL, "str padding") < 0 || get_int(c, a, 0, "width", -1, &width) < 0) return -1;
        if (!z && get_str(c, a, 1, "fillchar", &fill, &has) < 0) return -1;
        if (ju_count(fill) != 1) return jerr(c, "The fill character must be exactly one character long");
        if (z) {
            /* zfill pads after a leading sign */
            bool sign = s.n && (s.p[0] == '+' || s.p[0] == '-');
            jstr body = {s.p + sign, s.n - sign}, padded;
            if (jinja_str_pad(c, body, width - sign, JSTR_LIT("0"), 1, &padded) < 0) return -1;
            if (sign && jstr_cat(c, (jstr){s.p, 1}, padded, &padded) < 0) return -1;
            *out = jv_str(padded);
            return 0;
        }
        int how = name.p[0] == 'c' ? 0 : name.p[0] == 'l' ? -1 : 1;
        if (jinja_str_pad(c, s, width, fill, how, &r) < 0) return -1;
        *out = jv_str(r);
        return 0;
    }
    if (jstr_eq_c(name, "partition") || jstr_eq_c(name, "rpartition")) {
        jstr sep;
        bool right = name.p[0] == 'r';
        if (jargs_check(c, a, 1, NULL, "str.partition") < 0 || get_str(c, a, 0, "sep", &sep, &has) < 0) return -1;
        if (!has || sep.n == 0) return jerr(c, "str.partition needs a non-empty separator");
        if (jlist_new(c, 3, true, out) < 0) return -1;
        jv *t = out->u.list->items;
        size_t at;
        if (find_bytes(c, s, sep, right, &at) < 0) return -1;
        const char *hit = at == SIZE_MAX ? NULL : s.p + at;
        if (!hit) {
            t[0] = jv_str(right ? JSTR_LIT("") : s);
            t[1] = jv_str(JSTR_LIT(""));
            t[2] = jv_str(right ? s : JSTR_LIT(""));
        } else {
            size_t at = (size_t)(hit - s.p);
            t[0] = jv_str((jstr){s.p, at});
            t[1] = jv_str(sep);
            t[2] = jv_str((jstr){s.p + at + sep.n, s.n - at - sep.n});
        }
        return 0;
    }
    if (jstr_eq_c(name, "format")) return jinja_str_format(c, s, a, out);
    return jerr(c, "unsupported method 'str.%.*s'", (int)(name.n > 40 ? 40 : name.n), name.p);
}

static int dict_method(jctx *c, jv self, jstr name, const jargs *a, jv *out) {
    const jdict *d = self.u.dict;
    if (jstr_eq_c(name, "get")) {
        if (a->n_kw || a->n_pos < 1 || a->n_pos > 2) return jerr(c, "dict.get takes 1 or 2 arguments");
        const jv *v = jdict_get(d, a->pos[0]);
        *out = v ? *v : a->n_pos == 2 ? a->pos[1] : jv_none();
        return 0;
    }
    if (jargs_check(c, a, 0, NULL, "dict method") < 0) return -1;
    bool keys = jstr_eq_c(name, "keys"), values = jstr_eq_c(name, "values"), items = jstr_eq_c(name, "items");
    if (keys || values || items) {
        if (jlist_new(c, d->n, false, out) < 0) return -1;
        out->u.list->view = keys ? JVIEW_KEYS : values ? JVIEW_VALUES : JVIEW_ITEMS;
        for (size_t i = 0; i < d->n; i++) {
            if (!items) {
                out->u.list->items[i] = keys ? d->keys[i] : d->vals[i];
                continue;
            }
            jv t;
            if (jlist_new(c, 2, true, &t) < 0) return -1;
            t.u.list->items[0] = d->keys[i];
            t.u.list->items[1] = d->vals[i];
            out->u.list->items[i] = t;
        }
        return 0;
    }
    if (jstr_eq_c(name, "copy")) {
        *out = self;
        return 0;
    }
    return jerr(c, "unsupported method 'dict.%.*s'", (int)(name.n > 40 ? 40 : name.n), name.p);
}

static int list_method(jctx *c, jv self, jstr name, const jargs *a, jv *out) {
    const jlist *l = self.u.list;
    if (jstr_eq_c(name, "copy")) {
        *out = self;
        return 0;
    }
    if (jstr_eq_c(name, "count") || jstr_eq_c(name, "index")) {
        if (a->n_kw || a->n_pos != 1) return jerr(c, "list.%.*s takes one argument", (int)name.n, name.p);
        int64_t n = 0, first = -1;
        for (size_t i = 0; i < l->n; i++) {
            bool same;
            if (jv_eq(c, l->items[i], a->pos[0], &same) < 0) return -1;
            if (same) {
                if (first < 0) first = (int64_t)i;
                n++;
            }
        }
        if (name.p[0] == 'i' && first < 0) return jerr(c, "value is not in list");
        *out = jv_int(name.p[0] == 'i' ? first : n);
        return 0;
    }
    return jerr(c, "unsupported method 'list.%.*s'", (int)(name.n > 40 ? 40 : name.n), name.p);
}

int jinja_call_method(jctx *c, jv self, jstr name, const jargs *a, jv *out) {
    if (self.kind == JV_LOOP) { /* loop.cycle(a, b, ...) */
        if (a->n_pos == 0) return jerr(c, "no items for cycling given");
        *out = a->pos[self.u.loop->index0 % (size_t)a->n_pos];
        return 0;
    }
    if ((self.kind == JV_LIST || self.kind == JV_DICT) && in_list(UNSAFE, name))
        return jerr(c, "access to attribute '%.*s' of '%s' object is unsafe (templates cannot modify data)",
                    (int)name.n, name.p, jv_type_name(self));
    switch (self.kind) {
    case JV_STR: return str_method(c, self.u.s, name, a, out);
    case JV_DICT: return dict_method(c, self, name, a, out);
    case JV_LIST: return list_method(c, self, name, a, out);
    default: return jerr(c, "'%s' object has no method '%.*s'", jv_type_name(self), (int)name.n, name.p);
    }
}

/* ---- globals ---- */

static const char *const GLOBALS[JFN_COUNT] = {"range", "namespace", "raise_exception", "dict", "strftime_now"};

int jinja_global_index(jstr name) {
    for (int i = 0; i < JFN_COUNT; i++)
        if (jstr_eq_c(name, GLOBALS[i])) return i;
    return -1;
}

enum { MAX_RANGE = 100000 }; /* jinja2's sandbox refuses larger ranges too */

static int g_range(jctx *c, const jargs *a, jv *out) {
    if (a->n_kw || a->n_pos < 1 || a->n_pos > 3) return jerr(c, "range expects 1 to 3 integer arguments");
    int64_t v[3];
    for (int i = 0; i < a->n_pos; i++) {
        jv x = a->pos[i];
        if (x.kind == JV_BOOL) x = jv_int(x.u.b);
        if (x.kind != JV_INT) return jerr(c, "range() argument must be an integer, not %s", jv_type_name(x));
        v[i] = x.u.i;
    }
    int64_t start = a->n_pos == 1 ? 0 : v[0], stop = a->n_pos == 1 ? v[0] : v[1], step = a->n_pos == 3 ? v[2] : 1;
    if (step == 0) return jerr(c, "range() arg 3 must not be zero");
    if ((start > 0 && stop < start - INT64_MAX / 2) || (start < 0 && stop > start + INT64_MAX / 2))
        return jerr(c, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (%d).", MAX_RANGE);
    int64_t n = 0;
    if (step > 0 && start < stop) n = (stop - start - 1) / step + 1;
    if (step < 0 && stop < start) n = (start - stop - 1) / (-step) + 1;
    if (n > MAX_RANGE) return jerr(c, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (%d).", MAX_RANGE);
    if (jlist_new(c, (size_t)n, false, out) < 0) return -1;
    for (int64_t i = 0; i < n; i++) out->u.list->items[i] = jv_int(start + i * step);
    return 0;
}

static int g_namespace(jctx *c, const jargs *a, jv *out, bool is_dict) {
    if (a->n_pos > 1) return jerr(c, "%s takes at most one positional argument", is_dict ? "dict" : "namespace");
    if (jdict_new(c, out) < 0) return -1;
    if (!is_dict) out->kind = JV_NS;
    if (a->n_pos == 1) {
        jv init = a->pos[0];
        if (init.kind == JV_DICT || init.kind == JV_NS) {
            for (size_t i = 0; i < init.u.dict->n; i++)
                if (jdict_set(c, out->u.dict, init.u.dict->keys[i], init.u.dict->vals[i]) < 0) return -1;
        } else {
            return jerr(c, "%s: unsupported positional argument of type %s", is_dict ? "dict" : "namespace",
                        jv_type_name(init));
        }
    }
    for (int i = 0; i < a->n_kw; i++)
        if (jdict_set(c, out->u.dict, jv_str(a->kw_names[i]), a->kw_vals[i]) < 0) return -1;
    return 0;
}

static int g_raise(jctx *c, const jargs *a) {
    jstr msg = JSTR_LIT("");
    if (a->n_pos >= 1 && jv_to_str(c, a->pos[0], &msg) < 0) return -1;
    return jerr(c, "template raised an error: %.*s", (int)(msg.n > 300 ? 300 : msg.n), msg.p);
}

static int g_strftime(jctx *c, const jargs *a, jv *out) {
    if (a->n_kw || a->n_pos != 1 || a->pos[0].kind != JV_STR) return jerr(c, "strftime_now takes one format string");
    jstr f = a->pos[0].u.s;
    if (f.n > 200 || memchr(f.p, 0, f.n)) return jerr(c, "strftime_now format too long");
    char fmt[256], buf[512];
    memcpy(fmt, f.p, f.n);
    fmt[f.n] = 0;
    time_t now = time(NULL);
    struct tm tm;
    if (!localtime_r(&now, &tm)) return jerr(c, "strftime_now: no local time");
    size_t n = strftime(buf, sizeof buf, fmt, &tm);
    jstr s;
    if (jstr_dup(c, buf, n, &s) < 0) return -1;
    *out = jv_str(s);
    return 0;
}

int jinja_call_global(jctx *c, int fn, const jargs *a, jv *out) {
    switch (fn) {
    case JFN_RANGE: return g_range(c, a, out);
    case JFN_NAMESPACE: return g_namespace(c, a, out, false);
    case JFN_DICT: return g_namespace(c, a, out, true);
    case JFN_RAISE: return g_raise(c, a);
    case JFN_STRFTIME: return g_strftime(c, a, out);
    default: return jerr(c, "internal error: bad global");
    }
}
