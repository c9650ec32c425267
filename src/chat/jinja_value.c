/* Python semantics of template values: truth, equality, ordering, str() and repr(), len(), iteration,
 * attribute and item lookup, arithmetic and `in`, matching what jinja2 does on Python objects.
 *
 * Where jinja2 returns Undefined (a missing key, an index out of range, an attribute of none) this does
 * too; where Python raises (adding a string to a number, ordering a string against a number, anything
 * but printing or testing an undefined value) this returns an error. Integers are 64-bit: a result that
 * would overflow is an error rather than a wrong number. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/jinja.h"

const char *jv_type_name(jv v) {
    switch (v.kind) {
    case JV_UNDEF: return "Undefined";
    case JV_NONE: return "NoneType";
    case JV_BOOL: return "bool";
    case JV_INT: return "int";
    case JV_FLOAT: return "float";
    case JV_STR: return "str";
    case JV_LIST:
        if (v.u.list->view) return v.u.list->view == JVIEW_KEYS ? "dict_keys" : v.u.list->view == JVIEW_VALUES ? "dict_values" : "dict_items";
        return v.u.list->tuple ? "tuple" : "list";
    case JV_DICT: return "dict";
    case JV_NS: return "Namespace";
    case JV_LOOP: return "LoopContext";
    case JV_FUNC: return "function";
    case JV_METHOD: return "method";
    case JV_MACRO: return "Macro";
    }
    return "object";
}

bool jv_is_number(jv v) { return v.kind == JV_INT || v.kind == JV_FLOAT || v.kind == JV_BOOL; }

double jv_as_double(jv v) {
    if (v.kind == JV_FLOAT) return v.u.f;
    if (v.kind == JV_INT) return (double)v.u.i;
    if (v.kind == JV_BOOL) return v.u.b ? 1.0 : 0.0;
    return 0.0;
}

int jv_check_hashable(jctx *c, jv v) {
    if (v.kind == JV_DICT || (v.kind == JV_LIST && (!v.u.list->tuple || v.u.list->view)))
        return jerr(c, "unhashable type: '%s'", jv_type_name(v));
    if (v.kind == JV_LIST)
        for (size_t i = 0; i < v.u.list->n; i++)
            if (jv_check_hashable(c, v.u.list->items[i]) < 0) return -1;
    return 0;
}

static bool is_intlike(jv v) { return v.kind == JV_INT || v.kind == JV_BOOL; }
static int64_t as_int(jv v) { return v.kind == JV_BOOL ? (int64_t)v.u.b : v.u.i; }

bool jv_truthy(jv v) {
    switch (v.kind) {
    case JV_UNDEF:
    case JV_NONE: return false;
    case JV_BOOL: return v.u.b;
    case JV_INT: return v.u.i != 0;
    case JV_FLOAT: return v.u.f != 0.0;
    case JV_STR: return v.u.s.n > 0;
    case JV_LIST: return v.u.list->n > 0;
    case JV_DICT: return v.u.dict->n > 0;
    default: return true;
    }
}

/* Depth-limited so a pathologically nested value cannot exhaust the C stack; legitimate data is far
 * shallower than the limit. */
static bool equal_at(jv a, jv b, int depth, size_t *visits) {
    (*visits)++;
    if (depth > 1000) return false;
    if (jv_is_number(a) && jv_is_number(b)) {
        if (is_intlike(a) && is_intlike(b)) return as_int(a) == as_int(b);
        return jv_as_double(a) == jv_as_double(b);
    }
    if (a.kind != b.kind) return false;
    switch (a.kind) {
    case JV_UNDEF:
    case JV_NONE: return true;
    case JV_STR:
        *visits += a.u.s.n / 64;
        return jstr_eq(a.u.s, b.u.s);
    case JV_LIST: {
        const jlist *x = a.u.list, *y = b.u.list;
        if (x->tuple != y->tuple || x->view != y->view || x->n != y->n) return false;
        for (size_t i = 0; i < x->n; i++)
            if (!equal_at(x->items[i], y->items[i], depth + 1, visits)) return false;
        return true;
    }
    case JV_DICT: {
        const jdict *x = a.u.dict, *y = b.u.dict;
        if (x->n != y->n) return false;
        for (size_t i = 0; i < x->n; i++) {
            const jv *w = NULL;
            for (size_t j = 0; j < y->n && !w; j++)
                if (equal_at(x->keys[i], y->keys[j], depth + 1, visits)) w = &y->vals[j];
            if (!w || !equal_at(x->vals[i], *w, depth + 1, visits)) return false;
        }
        return true;
    }
    case JV_NS: return a.u.dict == b.u.dict;
    case JV_LOOP: return a.u.loop == b.u.loop;
    case JV_FUNC: return a.u.fn == b.u.fn;
    case JV_MACRO: return a.u.macro == b.u.macro;
    default: return false;
    }
}

bool jv_equal(jv a, jv b) {
    size_t visits = 0;
    return equal_at(a, b, 0, &visits);
}

int jv_eq(jctx *c, jv a, jv b, bool *out) {
    size_t visits = 0;
    *out = equal_at(a, b, 0, &visits);
    return jcharge(c, visits);
}

static int unorderable(jctx *c, const char *op, jv a, jv b) {
    if (a.kind == JV_UNDEF) return jerr(c, "'%.*s' is undefined", (int)a.u.s.n, a.u.s.p);
    if (b.kind == JV_UNDEF) return jerr(c, "'%.*s' is undefined", (int)b.u.s.n, b.u.s.p);
    return jerr(c, "'%s' not supported between instances of '%s' and '%s'", op, jv_type_name(a), jv_type_name(b));
}

int jv_compare(jctx *c, jv a, jv b, int *cmp) {
    if (jcharge(c, 1) < 0) return -1;
    if (jv_is_number(a) && jv_is_number(b)) {
        if (is_intlike(a) && is_intlike(b)) {
            int64_t x = as_int(a), y = as_int(b);
            *cmp = x < y ? -1 : x > y;
        } else {
            double x = jv_as_double(a), y = jv_as_double(b);
            *cmp = x < y ? -1 : x > y;
        }
        return 0;
    }
    if (a.kind == JV_STR && b.kind == JV_STR) {
        /* UTF-8 byte order is code point order. */
        size_t n = a.u.s.n < b.u.s.n ? a.u.s.n : b.u.s.n;
        if (jcharge(c, n / 64) < 0) return -1;
        int r = n ? memcmp(a.u.s.p, b.u.s.p, n) : 0;
        *cmp = r ? (r < 0 ? -1 : 1) : (a.u.s.n < b.u.s.n ? -1 : a.u.s.n > b.u.s.n);
        return 0;
    }
    if (a.kind == JV_LIST && b.kind == JV_LIST && a.u.list->tuple == b.u.list->tuple && !a.u.list->view &&
        !b.u.list->view) {
        if (++c->depth > c->lim.max_depth) return jerr(c, "values nested too deeply to compare");
        const jlist *x = a.u.list, *y = b.u.list;
        size_t n = x->n < y->n ? x->n : y->n;
        for (size_t i = 0; i < n; i++) {
            bool same;
            if (jv_eq(c, x->items[i], y->items[i], &same) < 0) return -1;
            if (same) continue;
            int r = jv_compare(c, x->items[i], y->items[i], cmp);
            c->depth--;
            return r;
        }
        c->depth--;
        *cmp = x->n < y->n ? -1 : x->n > y->n;
        return 0;
    }
    return unorderable(c, "<", a, b);
}

int jv_format_float(char *buf, size_t cap, double f) {
    if (isnan(f)) return snprintf(buf, cap, "nan");
    if (isinf(f)) return snprintf(buf, cap, f < 0 ? "-inf" : "inf");
    if (f == 0) return snprintf(buf, cap, signbit(f) ? "-0.0" : "0.0");
    /* Shortest digit string that reads back to f, as Python's repr. */
    char tmp[40];
    int prec;
    for (prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec - 1, f);
        if (strtod(tmp, NULL) == f) break;
    }
    if (prec > 17) prec = 17;
    snprintf(tmp, sizeof tmp, "%.*e", prec - 1, f);
    bool neg = tmp[0] == '-';
    const char *m = tmp + neg;
    char digits[20];
    int nd = 0;
    const char *e = m;
    for (; *e && *e != 'e'; e++)
        if (*e >= '0' && *e <= '9') digits[nd++] = *e;
    int exp = atoi(e + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    char out[64];
    int o = 0;
    if (neg) out[o++] = '-';
    if (exp >= -4 && exp < 16) {
        if (exp >= 0) {
            for (int i = 0; i <= exp; i++) out[o++] = i < nd ? digits[i] : '0';
            out[o++] = '.';
            if (nd > exp + 1)
                for (int i = exp + 1; i < nd; i++) out[o++] = digits[i];
            else
                out[o++] = '0';
        } else {
            out[o++] = '0';
            out[o++] = '.';
            for (int i = 0; i < -exp - 1; i++) out[o++] = '0';
            for (int i = 0; i < nd; i++) out[o++] = digits[i];
        }
        out[o] = 0;
    } else {
        out[o++] = digits[0];
        if (nd > 1) {
            out[o++] = '.';
            for (int i = 1; i < nd; i++) out[o++] = digits[i];
        }
        snprintf(out + o, sizeof out - (size_t)o, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    }
    return snprintf(buf, cap, "%s", out);
}

static int repr_str(jctx *c, jbuf *b, jstr s) {
    bool has_sq = memchr(s.p, '\'', s.n) != NULL, has_dq = memchr(s.p, '"', s.n) != NULL;
    char q = has_sq && !has_dq ? '"' : '\'';
    if (jbuf_putc(c, b, q) < 0) return -1;
    for (size_t i = 0; i < s.n;) {
        uint32_t cp;
        size_t k = ju_decode(s.p, s.n, i, &cp);
        int r = 0;
        if (cp == (uint32_t)q || cp == '\\') {
            char e[2] = {'\\', (char)cp};
            r = jbuf_put(c, b, e, 2);
        } else if (cp == '\n') r = jbuf_put(c, b, "\\n", 2);
        else if (cp == '\r') r = jbuf_put(c, b, "\\r", 2);
        else if (cp == '\t') r = jbuf_put(c, b, "\\t", 2);
        else if (cp < 0x20 || cp == 0x7F || (cp >= 0x80 && cp <= 0xA0) || cp == 0xAD)
            r = jbuf_printf(c, b, "\\x%02x", cp);
        else if (cp >= 0xDC80 && cp <= 0xDCFF)
            r = jbuf_printf(c, b, "\\udc%02x", cp & 0xFF);
        else if ((cp >= 0x2000 && cp <= 0x200F) || (cp >= 0x2028 && cp <= 0x202F) ||
                 (cp >= 0x205F && cp <= 0x206F) || cp == 0x3000 || cp == 0xFEFF || cp == 0x1680)
            r = jbuf_printf(c, b, "\\u%04x", cp);
        else
            r = jbuf_put(c, b, s.p + i, k);
        if (r < 0) return -1;
        i += k;
    }
    return jbuf_putc(c, b, q);
}

int jv_repr(jctx *c, jbuf *b, jv v) {
    if (v.kind == JV_STR) return repr_str(c, b, v.u.s);
    if (v.kind == JV_UNDEF) return jbuf_puts(c, b, "Undefined");
    if (v.kind == JV_LIST || v.kind == JV_DICT || v.kind == JV_NS) {
        if (++c->depth > c->lim.max_depth) return jerr(c, "value nested too deeply to print");
        int r = 0;
        if (v.kind == JV_LIST) {
            const jlist *l = v.u.list;
            if (l->view) r = jbuf_printf(c, b, "%s(", jv_type_name(v));
            if (r == 0) r = jbuf_putc(c, b, l->tuple ? '(' : '[');
            for (size_t i = 0; i < l->n && r == 0; i++) {
                if (i) r = jbuf_put(c, b, ", ", 2);
                if (r == 0) r = jv_repr(c, b, l->items[i]);
            }
            if (r == 0 && l->tuple && l->n == 1) r = jbuf_putc(c, b, ',');
            if (r == 0) r = jbuf_putc(c, b, l->tuple ? ')' : ']');
            if (r == 0 && l->view) r = jbuf_putc(c, b, ')');
        } else {
            const jdict *d = v.u.dict;
            if (v.kind == JV_NS) r = jbuf_puts(c, b, "<Namespace ");
            if (r == 0) r = jbuf_putc(c, b, '{');
            for (size_t i = 0; i < d->n && r == 0; i++) {
                if (i) r = jbuf_put(c, b, ", ", 2);
                if (r == 0) r = jv_repr(c, b, d->keys[i]);
                if (r == 0) r = jbuf_put(c, b, ": ", 2);
                if (r == 0) r = jv_repr(c, b, d->vals[i]);
            }
            if (r == 0) r = jbuf_putc(c, b, '}');
            if (r == 0 && v.kind == JV_NS) r = jbuf_putc(c, b, '>');
        }
        c->depth--;
        return r;
    }
    jstr s;
    if (jv_to_str(c, v, &s) < 0) return -1;
    return jbuf_put(c, b, s.p, s.n);
}

int jv_to_str(jctx *c, jv v, jstr *out) {
    char tmp[64];
    switch (v.kind) {
    case JV_UNDEF: *out = JSTR_LIT(""); return 0;
    case JV_NONE: *out = JSTR_LIT("None"); return 0;
    case JV_BOOL: *out = v.u.b ? JSTR_LIT("True") : JSTR_LIT("False"); return 0;
    case JV_STR: *out = v.u.s; return 0;
    case JV_INT: snprintf(tmp, sizeof tmp, "%" PRId64, v.u.i); return jstr_dup(c, tmp, strlen(tmp), out);
    case JV_FLOAT: jv_format_float(tmp, sizeof tmp, v.u.f); return jstr_dup(c, tmp, strlen(tmp), out);
    case JV_LOOP:
        snprintf(tmp, sizeof tmp, "<LoopContext %zu/%zu>", v.u.loop->index0 + 1, v.u.loop->length);
        return jstr_dup(c, tmp, strlen(tmp), out);
    case JV_FUNC: *out = JSTR_LIT("<function>"); return 0;
    case JV_METHOD: *out = JSTR_LIT("<method>"); return 0;
    case JV_MACRO: {
        jbuf b = {0};
        if (jbuf_printf(c, &b, "<Macro '%.*s'>", (int)(v.u.macro->name.n > 60 ? 60 : v.u.macro->name.n),
                        v.u.macro->name.p) < 0)
            return -1;
        *out = jbuf_str(&b);
        return 0;
    }
    default: {
        jbuf b = {0};
        if (jv_repr(c, &b, v) < 0) return -1;
        *out = jbuf_str(&b);
        return 0;
    }
    }
}

int jv_iterate(jctx *c, jv v, const jlist **out) {
    static const jlist empty = {0};
    jv r;
    switch (v.kind) {
    case JV_LIST: *out = v.u.list; return jcharge(c, v.u.list->n);
    case JV_UNDEF: *out = &empty; return 0;
    case JV_DICT: {
        const jdict *d = v.u.dict;
        if (jcharge(c, d->n) < 0 || jlist_new(c, d->n, false, &r) < 0) return -1;
        for (size_t i = 0; i < d->n; i++) r.u.list->items[i] = d->keys[i];
        *out = r.u.list;
        return 0;
    }
    case JV_STR: {
        jstr s = v.u.s;
        if (jcharge(c, s.n) < 0 || jlist_new(c, ju_count(s), false, &r) < 0) return -1;
        size_t k = 0;
        for (size_t i = 0; i < s.n; k++) {
            uint32_t cp;
            size_t w = ju_decode(s.p, s.n, i, &cp);
            r.u.list->items[k] = jv_str((jstr){s.p + i, w});
            i += w;
        }
        *out = r.u.list;
        return 0;
    }
    default: return jerr(c, "'%s' object is not iterable", jv_type_name(v));
    }
}

int jv_length(jctx *c, jv v, int64_t *n) {
    switch (v.kind) {
    case JV_STR: *n = (int64_t)ju_count(v.u.s); return jcharge(c, v.u.s.n / 16);
    case JV_LIST: *n = (int64_t)v.u.list->n; return 0;
    case JV_DICT: *n = (int64_t)v.u.dict->n; return 0;
    case JV_UNDEF: *n = 0; return 0;
    default: return jerr(c, "object of type '%s' has no len()", jv_type_name(v));
    }
}

static int make_method(jctx *c, jv self, jstr name, jv *out) {
    jmethod *m = jalloc(c, sizeof *m);
    if (!m) return -1;
    m->self = self;
    m->name = name;
    out->kind = JV_METHOD;
    out->u.method = m;
    return 0;
}

static int loop_attr(jctx *c, jv obj, jstr name, jv *out) {
    const jloop *l = obj.u.loop;
    size_t i = l->index0, n = l->length;
    if (jstr_eq_c(name, "index")) *out = jv_int((int64_t)i + 1);
    else if (jstr_eq_c(name, "index0")) *out = jv_int((int64_t)i);
    else if (jstr_eq_c(name, "revindex")) *out = jv_int((int64_t)(n - i));
    else if (jstr_eq_c(name, "revindex0")) *out = jv_int((int64_t)(n - i - 1));
    else if (jstr_eq_c(name, "first")) *out = jv_bool(i == 0);
    else if (jstr_eq_c(name, "last")) *out = jv_bool(i + 1 == n);
    else if (jstr_eq_c(name, "length")) *out = jv_int((int64_t)n);
    else if (jstr_eq_c(name, "depth")) *out = jv_int(l->depth);
    else if (jstr_eq_c(name, "depth0")) *out = jv_int(l->depth - 1);
    else if (jstr_eq_c(name, "previtem")) *out = i > 0 ? l->items[i - 1] : jv_undef(JSTR_LIT("previtem"));
    else if (jstr_eq_c(name, "nextitem")) *out = i + 1 < n ? l->items[i + 1] : jv_undef(JSTR_LIT("nextitem"));
    else if (jstr_eq_c(name, "cycle")) return make_method(c, obj, name, out);
    else if (jstr_eq_c(name, "changed")) return jerr(c, "unsupported loop attribute 'changed'");
    else *out = jv_undef(name);
    return 0;
}

int jv_getattr(jctx *c, jv obj, jstr name, jv *out) {
    switch (obj.kind) {
    case JV_UNDEF: return jerr(c, "'%.*s' is undefined", (int)obj.u.s.n, obj.u.s.p);
    case JV_DICT:
        if (jinja_has_method(obj, name)) return make_method(c, obj, name, out);
        /* fallthrough */
    case JV_NS: {
        const jv *v = jdict_get_str(obj.u.dict, name);
        *out = v ? *v : jv_undef(name);
        return 0;
    }
    case JV_LOOP: return loop_attr(c, obj, name, out);
    default:
        if (jinja_has_method(obj, name)) return make_method(c, obj, name, out);
        *out = jv_undef(name);
        return 0;
    }
}

int jv_getitem(jctx *c, jv obj, jv key, jv *out) {
    jstr uname = key.kind == JV_STR ? key.u.s : JSTR_LIT("[item]");
    switch (obj.kind) {
    case JV_UNDEF: return jerr(c, "'%.*s' is undefined", (int)obj.u.s.n, obj.u.s.p);
    case JV_LIST:
    case JV_STR:
        if (is_intlike(key) && !(obj.kind == JV_LIST && obj.u.list->view)) {
            if (obj.kind == JV_STR && jcharge(c, obj.u.s.n / 16) < 0) return -1;
            int64_t i = as_int(key);
            int64_t n = obj.kind == JV_LIST ? (int64_t)obj.u.list->n : (int64_t)ju_count(obj.u.s);
            if (i < 0) i += n;
            if (i < 0 || i >= n) {
                *out = jv_undef(uname);
                return 0;
            }
            if (obj.kind == JV_LIST) {
                *out = obj.u.list->items[i];
            } else {
                jstr s = obj.u.s;
                size_t a = ju_offset(s, (size_t)i);
                uint32_t cp;
                *out = jv_str((jstr){s.p + a, ju_decode(s.p, s.n, a, &cp)});
            }
            return 0;
        }
        break;
    case JV_DICT: {
        const jv *v = jdict_get(obj.u.dict, key);
        if (v) {
            *out = *v;
            return 0;
        }
        break;
    }
    default: break;
    }
    if (key.kind == JV_STR && obj.kind != JV_NONE) return jv_getattr(c, obj, key.u.s, out);
    *out = jv_undef(uname);
    return 0;
}

static int type_error(jctx *c, const char *op, jv a, jv b) {
    if (a.kind == JV_UNDEF) return jerr(c, "'%.*s' is undefined", (int)a.u.s.n, a.u.s.p);
    if (b.kind == JV_UNDEF) return jerr(c, "'%.*s' is undefined", (int)b.u.s.n, b.u.s.p);
    return jerr(c, "unsupported operand type(s) for %s: '%s' and '%s'", op, jv_type_name(a), jv_type_name(b));
}

static int overflow(jctx *c) { return jerr(c, "integer overflow (integers are 64-bit here)"); }

static int repeat(jctx *c, jv seq, int64_t times, jv *out) {
    if (times < 0) times = 0;
    if (seq.kind == JV_STR) {
        jstr s = seq.u.s;
        if (s.n && (uint64_t)times > c->lim.max_output_bytes / s.n)
            return jerr(c, "output limit of %zu bytes exceeded", c->lim.max_output_bytes);
        jbuf b = {0};
        for (int64_t i = 0; i < times; i++)
            if (jbuf_put(c, &b, s.p, s.n) < 0) return -1;
        *out = jv_str(jbuf_str(&b));
        return 0;
    }
    const jlist *l = seq.u.list;
    if (l->n && (uint64_t)times > c->lim.max_steps / l->n) return jerr(c, "list repetition too large");
    if (jlist_new(c, l->n * (size_t)times, l->tuple, out) < 0) return -1;
    for (int64_t i = 0; i < times; i++)
        if (l->n) memcpy(out->u.list->items + (size_t)i * l->n, l->items, l->n * sizeof(jv));
    return 0;
}

static int64_t floordiv_i(int64_t a, int64_t b) {
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) q--;
    return q;
}

static int arith(jctx *c, int op, jv a, jv b, jv *out) {
    static const char *const names[] = {"+", "-", "*", "/", "//", "%", "**"};
    if (!jv_is_number(a) || !jv_is_number(b)) return type_error(c, names[op], a, b);
    if (is_intlike(a) && is_intlike(b) && op != OP_DIV) {
        int64_t x = as_int(a), y = as_int(b), r;
        switch (op) {
        case OP_ADD: if (__builtin_add_overflow(x, y, &r)) return overflow(c); break;
        case OP_SUB: if (__builtin_sub_overflow(x, y, &r)) return overflow(c); break;
        case OP_MUL: if (__builtin_mul_overflow(x, y, &r)) return overflow(c); break;
        case OP_FLOORDIV:
        case OP_MOD:
            if (y == 0) return jerr(c, "integer division or modulo by zero");
            if (x == INT64_MIN && y == -1) return overflow(c);
            r = floordiv_i(x, y);
            if (op == OP_MOD) r = x - r * y;
            break;
        default: /* OP_POW */
            if (y < 0) {
                if (x == 0) return jerr(c, "0.0 cannot be raised to a negative power");
                *out = jv_float(pow((double)x, (double)y));
                return 0;
            }
            r = 1;
            for (int64_t base = x, e = y; e > 0; e >>= 1) {
                if ((e & 1) && __builtin_mul_overflow(r, base, &r)) return overflow(c);
                if (e > 1 && __builtin_mul_overflow(base, base, &base)) return overflow(c);
            }
            break;
        }
        *out = jv_int(r);
        return 0;
    }
    double x = jv_as_double(a), y = jv_as_double(b), r;
    switch (op) {
    case OP_ADD: r = x + y; break;
    case OP_SUB: r = x - y; break;
    case OP_MUL: r = x * y; break;
    case OP_DIV:
        if (y == 0) return jerr(c, "division by zero");
        r = x / y;
        break;
    case OP_FLOORDIV:
    case OP_MOD: {
        /* CPython's float_divmod, including the signs of zero results */
        if (y == 0) return jerr(c, op == OP_MOD ? "float modulo" : "float floor division by zero");
        double mod = fmod(x, y), div = (x - mod) / y;
        if (mod != 0) {
            if ((y < 0) != (mod < 0)) {
                mod += y;
                div -= 1.0;
            }
        } else {
            mod = copysign(0.0, y);
        }
        double fd;
        if (div != 0) {
            fd = floor(div);
            if (div - fd > 0.5) fd += 1.0;
        } else {
            fd = copysign(0.0, x / y);
        }
        r = op == OP_MOD ? mod : fd;
        break;
    }
    default:
        if (x == 0 && y < 0) return jerr(c, "0.0 cannot be raised to a negative power");
        if (x < 0 && y != floor(y)) return jerr(c, "unsupported: a negative number to a fractional power is complex");
        r = pow(x, y);
        if (isinf(r) && isfinite(x) && isfinite(y)) return jerr(c, "(34, 'Numerical result out of range')");
        break;
    }
    *out = jv_float(r);
    return 0;
}

int jv_binop(jctx *c, int op, jv a, jv b, jv *out) {
    if (op == OP_CONCAT) {
        jstr x, y, r;
        if (jv_to_str(c, a, &x) < 0 || jv_to_str(c, b, &y) < 0 || jstr_cat(c, x, y, &r) < 0) return -1;
        *out = jv_str(r);
        return 0;
    }
    if (op == OP_ADD) {
        if (a.kind == JV_STR && b.kind == JV_STR) {
            jstr r;
            if (jstr_cat(c, a.u.s, b.u.s, &r) < 0) return -1;
            *out = jv_str(r);
            return 0;
        }
        if (a.kind == JV_LIST && b.kind == JV_LIST && a.u.list->tuple == b.u.list->tuple && !a.u.list->view &&
            !b.u.list->view) {
            const jlist *x = a.u.list, *y = b.u.list;
            if (jlist_new(c, x->n + y->n, x->tuple, out) < 0) return -1;
            if (x->n) memcpy(out->u.list->items, x->items, x->n * sizeof(jv));
            if (y->n) memcpy(out->u.list->items + x->n, y->items, y->n * sizeof(jv));
            return 0;
        }
        if (a.kind == JV_STR || b.kind == JV_STR) {
            if (a.kind == JV_UNDEF || b.kind == JV_UNDEF) return type_error(c, "+", a, b);
            if (a.kind == JV_STR)
                return jerr(c, "can only concatenate str (not \"%s\") to str", jv_type_name(b));
            return type_error(c, "+", a, b);
        }
    }
    if (op == OP_MUL) {
        if ((a.kind == JV_STR || (a.kind == JV_LIST && !a.u.list->view)) && is_intlike(b)) return repeat(c, a, as_int(b), out);
        if ((b.kind == JV_STR || (b.kind == JV_LIST && !b.u.list->view)) && is_intlike(a)) return repeat(c, b, as_int(a), out);
    }
    if (op == OP_MOD && a.kind == JV_STR) return jinja_printf(c, a.u.s, b, out);
    return arith(c, op, a, b, out);
}

int jv_contains(jctx *c, jv container, jv item, bool *out) {
    switch (container.kind) {
    case JV_STR:
        if (item.kind != JV_STR) {
            if (item.kind == JV_UNDEF) return jerr(c, "'%.*s' is undefined", (int)item.u.s.n, item.u.s.p);
            return jerr(c, "'in <string>' requires string as left operand, not %s", jv_type_name(item));
        }
        *out = item.u.s.n == 0 || memmem(container.u.s.p, container.u.s.n, item.u.s.p, item.u.s.n) != NULL;
        return jcharge(c, container.u.s.n / 16);
    case JV_LIST:
        *out = false;
        for (size_t i = 0; i < container.u.list->n && !*out; i++)
            if (jv_eq(c, container.u.list->items[i], item, out) < 0) return -1;
        return 0;
    case JV_DICT:
        if (jv_check_hashable(c, item) < 0) return -1;
        *out = jdict_get(container.u.dict, item) != NULL;
        return 0;
    case JV_UNDEF: *out = false; return 0;
    default: return jerr(c, "argument of type '%s' is not iterable", jv_type_name(container));
    }
}
