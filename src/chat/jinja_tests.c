/* Tests (`x is defined`, `x is string`...) of the chat-template interpreter, as jinja2's tests.py
 * defines them on Python values: bool counts as a number but not as an integer, an undefined value is
 * iterable and a sequence (jinja2's Undefined has __iter__ and __len__), a dict is a sequence. */
#include <string.h>

#include "chat/jinja.h"

typedef int (*jtest_fn)(jctx *c, jv v, const jargs *a, bool *out);

static int one_arg(jctx *c, const jargs *a, const char *name, jv *out) {
    if (a->n_pos + a->n_kw != 1) return jerr(c, "test '%s' takes one argument", name);
    *out = a->n_pos ? a->pos[0] : a->kw_vals[0];
    return 0;
}

static int no_args(jctx *c, const jargs *a, const char *name) {
    if (a->n_pos || a->n_kw) return jerr(c, "test '%s' takes no arguments", name);
    return 0;
}

#define SIMPLE_TEST(fname, label, expr)                          \
    static int fname(jctx *c, jv v, const jargs *a, bool *out) { \
        (void)v;                                                 \
        if (no_args(c, a, label) < 0) return -1;                 \
        *out = (expr);                                           \
        return 0;                                                \
    }

SIMPLE_TEST(t_defined, "defined", v.kind != JV_UNDEF)
SIMPLE_TEST(t_undefined, "undefined", v.kind == JV_UNDEF)
SIMPLE_TEST(t_none, "none", v.kind == JV_NONE)
SIMPLE_TEST(t_boolean, "boolean", v.kind == JV_BOOL)
SIMPLE_TEST(t_true, "true", v.kind == JV_BOOL && v.u.b)
SIMPLE_TEST(t_false, "false", v.kind == JV_BOOL && !v.u.b)
SIMPLE_TEST(t_integer, "integer", v.kind == JV_INT)
SIMPLE_TEST(t_float, "float", v.kind == JV_FLOAT)
SIMPLE_TEST(t_number, "number", jv_is_number(v))
SIMPLE_TEST(t_string, "string", v.kind == JV_STR)
SIMPLE_TEST(t_mapping, "mapping", v.kind == JV_DICT)
SIMPLE_TEST(t_iterable, "iterable",
            v.kind == JV_STR || v.kind == JV_LIST || v.kind == JV_DICT || v.kind == JV_UNDEF || v.kind == JV_LOOP)
SIMPLE_TEST(t_sequence, "sequence", v.kind == JV_STR || v.kind == JV_LIST || v.kind == JV_DICT || v.kind == JV_UNDEF)
/* jinja2's Undefined defines __call__ (to raise), so Python calls it callable. */
SIMPLE_TEST(t_callable, "callable", v.kind == JV_FUNC || v.kind == JV_METHOD || v.kind == JV_MACRO || v.kind == JV_UNDEF)
SIMPLE_TEST(t_escaped, "escaped", false)

static int parity(jctx *c, jv v, const jargs *a, bool *out, const char *name, int want) {
    if (no_args(c, a, name) < 0) return -1;
    jv r;
    if (jv_binop(c, OP_MOD, v, jv_int(2), &r) < 0) return -1;
    *out = jv_equal(r, jv_int(want));
    return 0;
}
static int t_odd(jctx *c, jv v, const jargs *a, bool *out) { return parity(c, v, a, out, "odd", 1); }
static int t_even(jctx *c, jv v, const jargs *a, bool *out) { return parity(c, v, a, out, "even", 0); }

static int t_divisibleby(jctx *c, jv v, const jargs *a, bool *out) {
    jv n, r;
    if (one_arg(c, a, "divisibleby", &n) < 0 || jv_binop(c, OP_MOD, v, n, &r) < 0) return -1;
    *out = jv_equal(r, jv_int(0));
    return 0;
}

static int t_sameas(jctx *c, jv v, const jargs *a, bool *out) {
    jv o;
    if (one_arg(c, a, "sameas", &o) < 0) return -1;
    if (v.kind != o.kind) {
        *out = false;
        return 0;
    }
    switch (v.kind) {
    case JV_NONE: *out = true; break;
    case JV_BOOL: *out = v.u.b == o.u.b; break;
    case JV_INT: *out = v.u.i == o.u.i && v.u.i >= -5 && v.u.i <= 256; break; /* CPython's small ints */
    case JV_STR: *out = v.u.s.p == o.u.s.p && v.u.s.n == o.u.s.n; break;
    case JV_LIST: *out = v.u.list == o.u.list; break;
    case JV_DICT:
    case JV_NS: *out = v.u.dict == o.u.dict; break;
    default: return jv_eq(c, v, o, out);
    }
    return 0;
}

static int compare_test(jctx *c, jv v, const jargs *a, bool *out, int op) {
    jv o;
    if (one_arg(c, a, "comparison", &o) < 0) return -1;
    if (op == OP_EQ || op == OP_NE) {
        if (jv_eq(c, v, o, out) < 0) return -1;
        if (op == OP_NE) *out = !*out;
        return 0;
    }
    int cmp;
    if (jv_compare(c, v, o, &cmp) < 0) return -1;
    *out = op == OP_LT ? cmp < 0 : op == OP_LE ? cmp <= 0 : op == OP_GT ? cmp > 0 : cmp >= 0;
    return 0;
}
static int t_eq(jctx *c, jv v, const jargs *a, bool *out) { return compare_test(c, v, a, out, OP_EQ); }
static int t_ne(jctx *c, jv v, const jargs *a, bool *out) { return compare_test(c, v, a, out, OP_NE); }
static int t_lt(jctx *c, jv v, const jargs *a, bool *out) { return compare_test(c, v, a, out, OP_LT); }
static int t_le(jctx *c, jv v, const jargs *a, bool *out) { return compare_test(c, v, a, out, OP_LE); }
static int t_gt(jctx *c, jv v, const jargs *a, bool *out) { return compare_test(c, v, a, out, OP_GT); }
static int t_ge(jctx *c, jv v, const jargs *a, bool *out) { return compare_test(c, v, a, out, OP_GE); }

static int t_in(jctx *c, jv v, const jargs *a, bool *out) {
    jv seq;
    if (one_arg(c, a, "in", &seq) < 0) return -1;
    return jv_contains(c, seq, v, out);
}

/* str.islower() / isupper(): some cased character, and none of the other case. */
static int case_test(jctx *c, jv v, const jargs *a, bool *out, bool lower) {
    if (no_args(c, a, lower ? "lower" : "upper") < 0) return -1;
    jstr s;
    if (jv_to_str(c, v, &s) < 0) return -1;
    bool any = false, bad = false;
    for (size_t i = 0; i < s.n;) {
        uint32_t cp;
        i += ju_decode(s.p, s.n, i, &cp);
        bool is_l = ju_upper(cp) != cp || cp == 0xDF, is_u = ju_lower(cp) != cp;
        if (lower ? is_l : is_u) any = true;
        if (lower ? is_u : is_l) bad = true;
    }
    *out = any && !bad;
    return 0;
}
static int t_lower(jctx *c, jv v, const jargs *a, bool *out) { return case_test(c, v, a, out, true); }
static int t_upper(jctx *c, jv v, const jargs *a, bool *out) { return case_test(c, v, a, out, false); }

static int t_filter(jctx *c, jv v, const jargs *a, bool *out) {
    if (no_args(c, a, "filter") < 0) return -1;
    *out = v.kind == JV_STR && jinja_filter_index(v.u.s) >= 0;
    return 0;
}

static int t_test(jctx *c, jv v, const jargs *a, bool *out) {
    if (no_args(c, a, "test") < 0) return -1;
    *out = v.kind == JV_STR && jinja_test_index(v.u.s) >= 0;
    return 0;
}

static const struct {
    const char *name;
    jtest_fn fn;
} TESTS[] = {
    {"defined", t_defined}, {"undefined", t_undefined}, {"none", t_none}, {"boolean", t_boolean},
    {"true", t_true}, {"false", t_false}, {"integer", t_integer}, {"float", t_float}, {"number", t_number},
    {"string", t_string}, {"mapping", t_mapping}, {"iterable", t_iterable}, {"sequence", t_sequence},
    {"callable", t_callable}, {"escaped", t_escaped}, {"odd", t_odd}, {"even", t_even},
    {"divisibleby", t_divisibleby}, {"sameas", t_sameas}, {"eq", t_eq}, {"equalto", t_eq}, {"==", t_eq},
    {"ne", t_ne}, {"!=", t_ne}, {"lt", t_lt}, {"lessthan", t_lt}, {"<", t_lt}, {"le", t_le}, {"<=", t_le},
    {"gt", t_gt}, {"greaterthan", t_gt}, {">", t_gt}, {"ge", t_ge}, {">=", t_ge}, {"in", t_in},
    {"lower", t_lower}, {"upper", t_upper}, {"filter", t_filter}, {"test", t_test},
};

int jinja_test_index(jstr name) {
    for (size_t i = 0; i < sizeof TESTS / sizeof TESTS[0]; i++)
        if (jstr_eq_c(name, TESTS[i].name)) return (int)i;
    return -1;
}

int jinja_apply_test(jctx *c, int index, jv v, const jargs *a, bool *out) {
    if (index < 0 || (size_t)index >= sizeof TESTS / sizeof TESTS[0]) return jerr(c, "internal error: bad test");
    return TESTS[index].fn(c, v, a, out);
}
