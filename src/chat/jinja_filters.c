/* Filters of the chat-template interpreter, with jinja2's semantics (filters.py), and Hugging Face's
 * tojson (json.dumps(ensure_ascii=False, indent, separators, sort_keys) rather than jinja2's HTML-safe
 * one). A filter jinja2 has but this table lacks is rejected when the template is parsed, naming it.
 * Sequence filters (sort, map, select...) take items through jv_iterate, so strings, lists, dicts and
 * undefined values behave as jinja2's iteration does. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/jinja_filters.h"

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
jv jf_arg(jctx *c, const jargs *a, int pos, const char *name, jv def) {
    jv v;
    bool found;
    jargs_get(c, a, pos, name, &v, &found);
    return found ? v : def;
}

int jf_want_str(jctx *c, jv v, const char *what, jstr *out) {
    if (v.kind != JV_STR) return jerr(c, "%s must be a string, not %s", what, jv_type_name(v));
    *out = v.u.s;
    return 0;
}

int jf_want_int(jctx *c, jv v, const char *what, int64_t *out) {
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

/* ---- filters ---- */

static int f_trim(jctx *c, jv self, const jargs *a, jv *out) {
    static const char *const kw[] = {"chars", NULL};
    if (jargs_check(c, a, 1, kw, "filter 'trim'") < 0) return -1;
    jv chars = jf_arg(c, a, 0, "chars", jv_none());
    jstr s, cs, r;
    if (jv_to_str(c, self, &s) < 0) return -1;
    if (chars.kind != JV_NONE && jf_want_str(c, chars, "trim chars", &cs) < 0) return -1;
    ju_strip(s, chars.kind == JV_NONE ? NULL : &cs, true, true, &r);
    *out = jv_str(r);
    return jcharge(c, (s.n - r.n) / 16);
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
    jv ea = jf_arg(c, a, 0, "ensure_ascii", jv_bool(false));
    jv ind = jf_arg(c, a, 1, "indent", jv_none());
    jv sep = jf_arg(c, a, 2, "separators", jv_none());
    jv sk = jf_arg(c, a, 3, "sort_keys", jv_bool(false));
    o.ensure_ascii = jv_truthy(ea);
    o.sort_keys = jv_truthy(sk);
    if (ind.kind != JV_NONE) {
        int64_t w;
        if (jf_want_int(c, ind, "tojson indent", &w) < 0) return -1;
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
    jv def = jf_arg(c, a, 0, "default_value", jv_str(JSTR_LIT("")));
    bool boolean = jv_truthy(jf_arg(c, a, 1, "boolean", jv_bool(false)));
    *out = (self.kind == JV_UNDEF || (boolean && !jv_truthy(self))) ? def : self;
    return 0;
}

/* first/last take the end code point of a string directly (iterating would copy every character). */
static int first_last(jctx *c, jv self, const jargs *a, jv *out, bool last) {
    if (jargs_check(c, a, 0, NULL, last ? "filter 'last'" : "filter 'first'") < 0) return -1;
    if (self.kind == JV_STR) {
        jstr s = self.u.s;
        uint32_t cp;
        if (s.n == 0) *out = jv_undef(JSTR_LIT("first"));
        else if (last) {
            size_t k = ju_decode_back(s.p, s.n, &cp);
            *out = jv_str((jstr){s.p + s.n - k, k});
        } else {
            *out = jv_str((jstr){s.p, ju_decode(s.p, s.n, 0, &cp)});
        }
        return 0;
    }
    const jlist *l;
    if (jv_iterate(c, self, &l) < 0) return -1;
    *out = l->n ? l->items[last ? l->n - 1 : 0] : jv_undef(JSTR_LIT("first"));
    return 0;
}
static int f_first(jctx *c, jv self, const jargs *a, jv *out) { return first_last(c, self, a, out, false); }
static int f_last(jctx *c, jv self, const jargs *a, jv *out) { return first_last(c, self, a, out, true); }

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
    jv o = jf_arg(c, a, 0, "old", jv_undef(JSTR_LIT("old"))), n = jf_arg(c, a, 1, "new", jv_undef(JSTR_LIT("new")));
    jv cnt = jf_arg(c, a, 2, "count", jv_none());
    if (o.kind == JV_UNDEF || n.kind == JV_UNDEF) return jerr(c, "filter 'replace' needs old and new");
    jstr s, os, ns, r;
    int64_t count = -1;
    if (jv_to_str(c, self, &s) < 0 || jv_to_str(c, o, &os) < 0 || jv_to_str(c, n, &ns) < 0) return -1;
    if (cnt.kind != JV_NONE && jf_want_int(c, cnt, "replace count", &count) < 0) return -1;
    if (jinja_str_replace(c, s, os, ns, count, &r) < 0) return -1;
    *out = jv_str(r);
    return 0;
}

static int f_string(jctx *c, jv self, const jargs *a, jv *out) {
    if (jargs_check(c, a, 0, NULL, "filter 'string'") < 0) return -1;
    return str_of(c, self, out);
}

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

static int undefined_error(jctx *c, jv v) { return jerr(c, "'%.*s' is undefined", (int)v.u.s.n, v.u.s.p); }

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

/* Python float(str): surrounding whitespace, underscores between digits, nan/inf/infinity. */
static bool parse_float(jctx *c, jstr s, double *out) {
    (void)c;
    jstr t;
    ju_strip(s, NULL, true, true, &t);
    if (t.n == 0 || t.n > 200) return false;
    char buf[256];
    size_t m = 0;
    for (size_t i = 0; i < t.n; i++) {
        char ch = t.p[i];
        if (ch == '_') {
            bool between = i > 0 && i + 1 < t.n && t.p[i - 1] >= '0' && t.p[i - 1] <= '9' && t.p[i + 1] >= '0' && t.p[i + 1] <= '9';
            if (!between) return false;
            continue;
        }
        if (!strchr("0123456789+-.eEinfatyINFATY", ch)) return false;
        buf[m++] = ch;
    }
    buf[m] = 0;
    char *end;
    *out = strtod(buf, &end);
    return end != buf && *end == 0;
}

/* jinja2: int(value), else int(float(value)), else the default; int() of an infinity raises. */
static int f_int(jctx *c, jv self, const jargs *a, jv *out) {
    static const char *const kw[] = {"default", "base", NULL};
    if (jargs_check(c, a, 2, kw, "filter 'int'") < 0) return -1;
    jv def = jf_arg(c, a, 0, "default", jv_int(0));
    jv base = jf_arg(c, a, 1, "base", jv_int(10));
    if (!(base.kind == JV_INT && base.u.i == 10)) return jerr(c, "filter 'int' supports only base 10");
    int64_t i;
    double f;
    switch (self.kind) {
    case JV_UNDEF: return undefined_error(c, self);
    case JV_INT: *out = self; return 0;
    case JV_BOOL: *out = jv_int(self.u.b); return 0;
    case JV_FLOAT:
    case JV_STR:
        if (self.kind == JV_STR && parse_int(self.u.s, &i)) {
            *out = jv_int(i);
            return 0;
        }
        if (self.kind == JV_FLOAT) f = self.u.f;
        else if (!parse_float(c, self.u.s, &f)) {
            *out = def;
            return 0;
        }
        if (isnan(f)) *out = def;
        else if (isinf(f)) return jerr(c, "cannot convert float infinity to integer");
        else if (fabs(f) >= 9.2e18) return jerr(c, "integer overflow");
        else *out = jv_int((int64_t)f);
        return 0;
    default: *out = def; return 0;
    }
}

static int f_float(jctx *c, jv self, const jargs *a, jv *out) {
    static const char *const kw[] = {"default", NULL};
    if (jargs_check(c, a, 1, kw, "filter 'float'") < 0) return -1;
    jv def = jf_arg(c, a, 0, "default", jv_float(0.0));
    double f;
    if (self.kind == JV_UNDEF) return undefined_error(c, self);
    if (jv_is_number(self)) *out = jv_float(jv_as_double(self));
    else if (self.kind == JV_STR && parse_float(c, self.u.s, &f)) *out = jv_float(f);
    else *out = def;
    return 0;
}

static int f_round(jctx *c, jv self, const jargs *a, jv *out) {
    static const char *const kw[] = {"precision", "method", NULL};
    if (jargs_check(c, a, 2, kw, "filter 'round'") < 0) return -1;
    int64_t prec = 0;
    jv p = jf_arg(c, a, 0, "precision", jv_int(0));
    jv m = jf_arg(c, a, 1, "method", jv_str(JSTR_LIT("common")));
    if (jf_want_int(c, p, "round precision", &prec) < 0) return -1;
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
    jv w = jf_arg(c, a, 0, "width", jv_int(4));
    bool first = jv_truthy(jf_arg(c, a, 1, "first", jv_bool(false)));
    bool blank = jv_truthy(jf_arg(c, a, 2, "blank", jv_bool(false)));
    jstr ind;
    if (w.kind == JV_STR) {
        ind = w.u.s;
    } else {
        int64_t n;
        if (jf_want_int(c, w, "indent width", &n) < 0) return -1;
        if (n < 0) n = 0;
        if (n > 4096) return jerr(c, "indent width too large");
        jv sp = jv_str(JSTR_LIT(" "));
        if (jv_binop(c, OP_MUL, sp, jv_int(n), &sp) < 0) return -1;
        ind = sp.u.s;
    }
    if (self.kind == JV_UNDEF) return undefined_error(c, self);
    if (self.kind != JV_STR) return jerr(c, "filter 'indent' needs a string, not %s", jv_type_name(self));
    jstr s = self.u.s;
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
    if (jf_want_int(c, jf_arg(c, a, 0, "width", jv_int(80)), "center width", &w) < 0) return -1;
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

/* Markup(str(value)): a string, whatever went in (there is no separate Markup type here). */
static int f_safe(jctx *c, jv self, const jargs *a, jv *out) {
    if (jargs_check(c, a, 0, NULL, "filter 'safe'") < 0) return -1;
    if (self.kind == JV_STR) {
        *out = self;
        return 0;
    }
    return str_of(c, self, out);
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
    if (jf_want_str(c, jf_arg(c, a, 0, "name", jv_none()), "attr name", &name) < 0) return -1;
    if (self.kind == JV_DICT && !jinja_has_method(self, name)) { /* getattr only, never the item */
        *out = jv_undef(name);
        return 0;
    }
    return jv_getattr(c, self, name, out);
}

/* jinja2's do_format: `fmt|format(a, b)` is fmt % (a, b); keyword arguments make a mapping. */
static int f_format(jctx *c, jv self, const jargs *a, jv *out) {
    if (a->n_pos && a->n_kw) return jerr(c, "can't handle positional and keyword arguments at the same time");
    jstr fmt;
    jv args;
    if (jv_to_str(c, self, &fmt) < 0) return -1;
    if (a->n_kw) {
        if (jdict_new(c, &args) < 0) return -1;
        for (int i = 0; i < a->n_kw; i++)
            if (jdict_set(c, args.u.dict, jv_str(a->kw_names[i]), a->kw_vals[i]) < 0) return -1;
    } else {
        if (jlist_new(c, (size_t)a->n_pos, true, &args) < 0) return -1;
        for (int i = 0; i < a->n_pos; i++) args.u.list->items[i] = a->pos[i];
    }
    return jinja_printf(c, fmt, args, out);
}

static const struct {
    const char *name;
    jfilter_fn fn;
} FILTERS[] = {
    {"abs", f_abs}, {"attr", f_attr}, {"capitalize", f_capitalize}, {"center", f_center},
    {"count", f_length}, {"d", f_default}, {"default", f_default}, {"dictsort", jf_dictsort},
    {"e", f_escape}, {"escape", f_escape}, {"first", f_first}, {"float", f_float},
    {"forceescape", f_escape}, {"format", f_format}, {"indent", f_indent}, {"int", f_int}, {"items", jf_items},
    {"join", jf_join}, {"last", f_last}, {"length", f_length}, {"list", jf_list}, {"lower", f_lower},
    {"map", jf_map}, {"max", jf_max}, {"min", jf_min}, {"reject", jf_reject}, {"rejectattr", jf_rejectattr},
    {"replace", f_replace}, {"reverse", jf_reverse}, {"round", f_round}, {"safe", f_safe},
    {"select", jf_select}, {"selectattr", jf_selectattr}, {"sort", jf_sort}, {"string", f_string},
    {"sum", jf_sum}, {"title", f_title}, {"tojson", f_tojson}, {"trim", f_trim}, {"unique", jf_unique},
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
