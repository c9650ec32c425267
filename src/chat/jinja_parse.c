/* Parser for the chat-template interpreter: tokens to AST, following jinja2's grammar and operator
 * precedence (parser.py): conditional < or < and < not < comparisons (chained, `in`, `not in`) < + - <
 * ~ < * / // % < ** < unary - + < primary with postfix (.attr, [item], [a:b:c], call) and then filters
 * (`|f(args)`), tests (`is [not] t`) and calls.
 *
 * Node fields by type (see jnode in jinja.h):
 *   N_LIT lit | N_NAME name | N_LIST/N_TUPLE kids | N_DICT kids = k0, v0, k1, v1...
 *   N_ATTR a.name | N_ITEM a[b] | N_SLICE a[b:c:d] (NULL parts omitted) | N_CALL a(kids, kw)
 *   N_FILTER a|name(kids, kw), op = filter index (a NULL inside filter blocks)
 *   N_TEST a is name(kids, kw), op = test index (`is not` wraps it in N_NOT)
 *   N_NEG/N_POS/N_NOT a | N_AND/N_OR a, b | N_BINOP a op b | N_COMPARE kids with ops[n_kids-1]
 *   N_COND a if b else c (c NULL: undefined)
 *   N_BODY kids | N_TEXT lit | N_OUTPUT a | N_IF a: b else c (c is N_IF for elif, N_BODY, or NULL)
 *   N_FOR d in a if b: c else e | N_SET d = a | N_SETBLOCK d = body b filtered by kids
 *   N_MACRO name(kw_names = kw_vals defaults): b | N_WITH kw assignments: b | N_FILTERBLOCK b | kids
 * Unknown filters and tests are rejected here, as jinja2 rejects them at compile time. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "chat/jinja.h"

typedef struct parser {
    jarena *a;
    pith_err *err;
    const jtok *t;
    size_t n, pos;
    int depth, max_depth;
    int loop_depth;
} parser;

static int perr(parser *P, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int perr(parser *P, int line, const char *fmt, ...) {
    if (!P->err) return -1;
    char what[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    snprintf(P->err->msg, sizeof P->err->msg, "chat template: %s at line %d", what, line);
    return -1;
}

static const jtok *cur(parser *P) { return &P->t[P->pos]; }
static const jtok *peek(parser *P, size_t k) {
    size_t i = P->pos + k;
    return &P->t[i < P->n ? i : P->n - 1];
}
static void advance(parser *P) {
    if (P->pos + 1 < P->n) P->pos++;
}
static bool is_op(const jtok *t, const char *op) { return t->type == T_OP && jstr_eq_c(t->s, op); }
static bool is_name(const jtok *t, const char *name) { return t->type == T_NAME && jstr_eq_c(t->s, name); }

static const char *describe(const jtok *t, char *buf, size_t cap) {
    switch (t->type) {
    case T_EOF: return "end of template";
    case T_VAR_END: return "end of print statement '}}'";
    case T_BLOCK_END: return "end of statement block '%}'";
    case T_STRING: return "string";
    case T_INT: return "integer";
    case T_FLOAT: return "float";
    default: snprintf(buf, cap, "'%.*s'", (int)(t->s.n > 40 ? 40 : t->s.n), t->s.p); return buf;
    }
}

static int unexpected(parser *P, const char *expected) {
    char buf[64];
    const jtok *t = cur(P);
    if (expected) return perr(P, t->line, "syntax error: expected %s, got %s", expected, describe(t, buf, sizeof buf));
    return perr(P, t->line, "syntax error: unexpected %s", describe(t, buf, sizeof buf));
}

static int expect_op(parser *P, const char *op) {
    if (!is_op(cur(P), op)) {
        char want[16];
        snprintf(want, sizeof want, "'%s'", op);
        return unexpected(P, want);
    }
    advance(P);
    return 0;
}

static int expect_block_end(parser *P) {
    if (cur(P)->type != T_BLOCK_END) return unexpected(P, "end of statement block '%}'");
    advance(P);
    return 0;
}

static jnode *node(parser *P, jnode_type type, int line) {
    jnode *n = jarena_alloc(P->a, sizeof *n);
    if (!n) {
        perr(P, line, "template too large (memory limit)");
        return NULL;
    }
    n->type = type;
    n->line = line;
    return n;
}

/* Growable node-pointer vector in the arena. */
typedef struct nvec {
    jnode **v;
    int n, cap;
} nvec;

static int nvec_push(parser *P, nvec *v, jnode *x) {
    if (v->n == v->cap) {
        int cap = v->cap ? v->cap * 2 : 4;
        jnode **p = jarena_alloc(P->a, (size_t)cap * sizeof *p);
        if (!p) return perr(P, x ? x->line : 0, "template too large (memory limit)");
        if (v->n) memcpy(p, v->v, (size_t)v->n * sizeof *p);
        v->v = p;
        v->cap = cap;
    }
    v->v[v->n++] = x;
    return 0;
}

static int enter(parser *P) {
    if (++P->depth > P->max_depth)
        return perr(P, cur(P)->line, "template nested too deeply (more than %d levels)", P->max_depth);
    return 0;
}

static jnode *parse_expression(parser *P, bool with_condexpr);
static jnode *parse_unary(parser *P, bool with_filter);
static jnode *parse_primary(parser *P);
static jnode *parse_tuple(parser *P, bool with_condexpr, bool explicit_parens);

/* (args, name=value) after '(' has been seen at cur. */
static int parse_call_args(parser *P, jnode *n) {
    if (expect_op(P, "(") < 0) return -1;
    nvec pos = {0}, kwv = {0};
    jstr *kwn = NULL;
    int kcap = 0;
    while (!is_op(cur(P), ")")) {
        if (pos.n || kwv.n) {
            if (expect_op(P, ",") < 0) return -1;
            if (is_op(cur(P), ")")) break;
        }
        if (is_op(cur(P), "*") || is_op(cur(P), "**"))
            return perr(P, cur(P)->line, "unsupported construct: *args/**kwargs in a call");
        if (cur(P)->type == T_NAME && is_op(peek(P, 1), "=")) {
            jstr key = cur(P)->s;
            advance(P);
            advance(P);
            jnode *v = parse_expression(P, true);
            if (!v) return -1;
            if (kwv.n == kcap) {
                kcap = kcap ? kcap * 2 : 4;
                jstr *k2 = jarena_alloc(P->a, (size_t)kcap * sizeof *k2);
                if (!k2) return perr(P, v->line, "template too large (memory limit)");
                if (kwv.n) memcpy(k2, kwn, (size_t)kwv.n * sizeof *k2);
                kwn = k2;
            }
            kwn[kwv.n] = key;
            if (nvec_push(P, &kwv, v) < 0) return -1;
        } else {
            if (kwv.n) return perr(P, cur(P)->line, "syntax error: positional argument after keyword argument");
            jnode *v = parse_expression(P, true);
            if (!v || nvec_push(P, &pos, v) < 0) return -1;
        }
    }
    advance(P);
    n->kids = pos.v;
    n->n_kids = pos.n;
    n->kw_names = kwn;
    n->kw_vals = kwv.v;
    n->n_kw = kwv.n;
    return 0;
}

/* A dotted name (filter or test names may contain dots). */
static int dotted_name(parser *P, jstr *out) {
    if (cur(P)->type != T_NAME) return unexpected(P, "a name");
    const char *start = cur(P)->s.p;
    const char *end = start + cur(P)->s.n;
    advance(P);
    while (is_op(cur(P), ".") && peek(P, 1)->type == T_NAME) {
        advance(P);
        end = cur(P)->s.p + cur(P)->s.n;
        advance(P);
    }
    *out = (jstr){start, (size_t)(end - start)};
    return 0;
}

static jnode *parse_filter(parser *P, jnode *operand) {
    int line = cur(P)->line;
    advance(P); /* '|' */
    jnode *n = node(P, N_FILTER, line);
    if (!n || dotted_name(P, &n->name) < 0) return NULL;
    n->op = jinja_filter_index(n->name);
    if (n->op < 0) {
        perr(P, line, "unsupported filter '%.*s'", (int)(n->name.n > 60 ? 60 : n->name.n), n->name.p);
        return NULL;
    }
    n->a = operand;
    if (is_op(cur(P), "(") && parse_call_args(P, n) < 0) return NULL;
    return n;
}

static jnode *parse_test(parser *P, jnode *operand) {
    int line = cur(P)->line;
    advance(P); /* 'is' */
    bool negated = false;
    if (is_name(cur(P), "not")) {
        negated = true;
        advance(P);
    }
    jnode *n = node(P, N_TEST, line);
    if (!n || dotted_name(P, &n->name) < 0) return NULL;
    n->op = jinja_test_index(n->name);
    if (n->op < 0) {
        perr(P, line, "unsupported test '%.*s'", (int)(n->name.n > 60 ? 60 : n->name.n), n->name.p);
        return NULL;
    }
    n->a = operand;
    const jtok *t = cur(P);
    if (is_op(t, "(")) {
        if (parse_call_args(P, n) < 0) return NULL;
    } else if ((t->type == T_NAME || t->type == T_STRING || t->type == T_INT || t->type == T_FLOAT ||
                is_op(t, "[") || is_op(t, "{")) &&
               !is_name(t, "else") && !is_name(t, "or") && !is_name(t, "and")) {
        if (is_name(t, "is")) {
            perr(P, t->line, "syntax error: cannot chain multiple tests with 'is'");
            return NULL;
        }
        jnode *arg = parse_primary(P);
        if (!arg) return NULL;
        /* postfix only (no filters), as jinja2 */
        jnode **kids = jarena_alloc(P->a, sizeof *kids);
        if (!kids) {
            perr(P, line, "template too large (memory limit)");
            return NULL;
        }
        kids[0] = arg;
        n->kids = kids;
        n->n_kids = 1;
    }
    if (!negated) return n;
    jnode *neg = node(P, N_NOT, line);
    if (neg) neg->a = n;
    return neg;
}

static jnode *parse_subscript(parser *P, jnode *obj) {
    int line = cur(P)->line;
    if (is_op(cur(P), ".")) {
        advance(P);
        const jtok *t = cur(P);
        if (t->type == T_NAME) {
            jnode *n = node(P, N_ATTR, line);
            if (!n) return NULL;
            n->a = obj;
            n->name = t->s;
            advance(P);
            return n;
        }
        if (t->type == T_INT) {
            jnode *n = node(P, N_ITEM, line), *k = node(P, N_LIT, line);
            if (!n || !k) return NULL;
            k->lit = jv_int(t->i);
            n->a = obj;
            n->b = k;
            advance(P);
            return n;
        }
        unexpected(P, "name or number");
        return NULL;
    }
    advance(P); /* '[' */
    jnode *parts[3] = {NULL, NULL, NULL};
    bool is_slice = false;
    int idx = 0;
    for (;;) {
        if (is_op(cur(P), "]")) break;
        if (is_op(cur(P), ":")) {
            if (++idx > 2) {
                unexpected(P, "']'");
                return NULL;
            }
            is_slice = true;
            advance(P);
            continue;
        }
        if (is_op(cur(P), ",")) {
            perr(P, cur(P)->line, "unsupported construct: tuple subscript");
            return NULL;
        }
        if (parts[idx]) {
            unexpected(P, "']'");
            return NULL;
        }
        parts[idx] = parse_expression(P, true);
        if (!parts[idx]) return NULL;
    }
    advance(P);
    if (!is_slice) {
        if (!parts[0]) {
            perr(P, line, "syntax error: empty subscript");
            return NULL;
        }
        jnode *n = node(P, N_ITEM, line);
        if (!n) return NULL;
        n->a = obj;
        n->b = parts[0];
        return n;
    }
    jnode *n = node(P, N_SLICE, line);
    if (!n) return NULL;
    n->a = obj;
    n->b = parts[0];
    n->c = parts[1];
    n->d = parts[2];
    return n;
}

static jnode *parse_postfix(parser *P, jnode *n) {
    while (n) {
        if (is_op(cur(P), ".") || is_op(cur(P), "[")) {
            n = parse_subscript(P, n);
        } else if (is_op(cur(P), "(")) {
            jnode *call = node(P, N_CALL, cur(P)->line);
            if (!call) return NULL;
            call->a = n;
            if (parse_call_args(P, call) < 0) return NULL;
            n = call;
        } else {
            break;
        }
    }
    return n;
}

static jnode *parse_filter_expr(parser *P, jnode *n) {
    while (n) {
        if (is_op(cur(P), "|")) {
            n = parse_filter(P, n);
        } else if (is_name(cur(P), "is")) {
            n = parse_test(P, n);
        } else if (is_op(cur(P), "(")) {
            jnode *call = node(P, N_CALL, cur(P)->line);
            if (!call) return NULL;
            call->a = n;
            if (parse_call_args(P, call) < 0) return NULL;
            n = call;
        } else {
            break;
        }
    }
    return n;
}

static jnode *parse_list_or_dict(parser *P, bool dict) {
    int line = cur(P)->line;
    advance(P);
    jnode *n = node(P, dict ? N_DICT : N_LIST, line);
    if (!n) return NULL;
    nvec items = {0};
    const char *close = dict ? "}" : "]";
    while (!is_op(cur(P), close)) {
        if (items.n) {
            if (expect_op(P, ",") < 0) return NULL;
            if (is_op(cur(P), close)) break;
        }
        jnode *k = parse_expression(P, true);
        if (!k || nvec_push(P, &items, k) < 0) return NULL;
        if (dict) {
            if (expect_op(P, ":") < 0) return NULL;
            jnode *v = parse_expression(P, true);
            if (!v || nvec_push(P, &items, v) < 0) return NULL;
        }
    }
    advance(P);
    n->kids = items.v;
    n->n_kids = items.n;
    return n;
}

static jnode *parse_primary(parser *P) {
    if (enter(P) < 0) return NULL;
    const jtok *t = cur(P);
    jnode *n = NULL;
    switch (t->type) {
    case T_NAME:
        n = node(P, N_LIT, t->line);
        if (!n) return NULL;
        if (is_name(t, "true") || is_name(t, "True")) n->lit = jv_bool(true);
        else if (is_name(t, "false") || is_name(t, "False")) n->lit = jv_bool(false);
        else if (is_name(t, "none") || is_name(t, "None")) n->lit = jv_none();
        else {
            n->type = N_NAME;
            n->name = t->s;
        }
        advance(P);
        break;
    case T_STRING: {
        n = node(P, N_LIT, t->line);
        if (!n) return NULL;
        jstr s = t->s;
        advance(P);
        while (cur(P)->type == T_STRING) { /* adjacent literals concatenate */
            jstr u = cur(P)->s;
            char *p = jarena_alloc(P->a, s.n + u.n + 1);
            if (!p) {
                perr(P, t->line, "template too large (memory limit)");
                return NULL;
            }
            memcpy(p, s.p, s.n);
            memcpy(p + s.n, u.p, u.n);
            s = (jstr){p, s.n + u.n};
            advance(P);
        }
        n->lit = jv_str(s);
        break;
    }
    case T_INT:
    case T_FLOAT:
        n = node(P, N_LIT, t->line);
        if (!n) return NULL;
        n->lit = t->type == T_INT ? jv_int(t->i) : jv_float(t->f);
        advance(P);
        break;
    case T_OP:
        if (is_op(t, "(")) {
            advance(P);
            n = parse_tuple(P, true, true);
            if (!n || expect_op(P, ")") < 0) return NULL;
        } else if (is_op(t, "[")) {
            n = parse_list_or_dict(P, false);
        } else if (is_op(t, "{")) {
            n = parse_list_or_dict(P, true);
        } else {
            unexpected(P, NULL);
            return NULL;
        }
        break;
    default:
        unexpected(P, NULL);
        return NULL;
    }
    P->depth--;
    return n;
}

static jnode *parse_unary(parser *P, bool with_filter) {
    if (enter(P) < 0) return NULL;
    const jtok *t = cur(P);
    jnode *n;
    if (is_op(t, "-") || is_op(t, "+")) {
        advance(P);
        n = node(P, is_op(t, "-") ? N_NEG : N_POS, t->line);
        if (!n || !(n->a = parse_unary(P, false))) return NULL;
    } else {
        n = parse_primary(P);
    }
    n = parse_postfix(P, n);
    if (with_filter) n = parse_filter_expr(P, n);
    P->depth--;
    return n;
}

static jnode *binop(parser *P, int op, jnode *a, jnode *b, int line) {
    if (!a || !b) return NULL;
    jnode *n = node(P, N_BINOP, line);
    if (!n) return NULL;
    n->op = op;
    n->a = a;
    n->b = b;
    return n;
}

static jnode *parse_pow(parser *P) {
    jnode *a = parse_unary(P, true);
    while (a && is_op(cur(P), "**")) {
        int line = cur(P)->line;
        advance(P);
        a = binop(P, OP_POW, a, parse_unary(P, true), line);
    }
    return a;
}

static jnode *parse_math2(parser *P) {
    jnode *a = parse_pow(P);
    for (;;) {
        const jtok *t = cur(P);
        int op = is_op(t, "*") ? OP_MUL : is_op(t, "/") ? OP_DIV : is_op(t, "//") ? OP_FLOORDIV
                 : is_op(t, "%") ? OP_MOD : -1;
        if (!a || op < 0) return a;
        advance(P);
        a = binop(P, op, a, parse_pow(P), t->line);
    }
}

static jnode *parse_concat(parser *P) {
    jnode *a = parse_math2(P);
    while (a && is_op(cur(P), "~")) {
        int line = cur(P)->line;
        advance(P);
        a = binop(P, OP_CONCAT, a, parse_math2(P), line);
    }
    return a;
}

static jnode *parse_math1(parser *P) {
    jnode *a = parse_concat(P);
    for (;;) {
        const jtok *t = cur(P);
        int op = is_op(t, "+") ? OP_ADD : is_op(t, "-") ? OP_SUB : -1;
        if (!a || op < 0) return a;
        advance(P);
        a = binop(P, op, a, parse_concat(P), t->line);
    }
}

static jnode *parse_compare(parser *P) {
    int line = cur(P)->line;
    jnode *a = parse_math1(P);
    if (!a) return NULL;
    nvec operands = {0};
    int ops[64];
    int n_ops = 0;
    for (;;) {
        const jtok *t = cur(P);
        int op = is_op(t, "==") ? OP_EQ : is_op(t, "!=") ? OP_NE : is_op(t, "<") ? OP_LT : is_op(t, "<=") ? OP_LE
                 : is_op(t, ">") ? OP_GT : is_op(t, ">=") ? OP_GE : is_name(t, "in") ? OP_IN : -1;
        if (op < 0 && is_name(t, "not") && is_name(peek(P, 1), "in")) {
            op = OP_NOTIN;
            advance(P);
        }
        if (op < 0) break;
        advance(P);
        if (n_ops == (int)(sizeof ops / sizeof ops[0])) {
            perr(P, t->line, "comparison chain too long");
            return NULL;
        }
        if (!operands.n && nvec_push(P, &operands, a) < 0) return NULL;
        jnode *b = parse_math1(P);
        if (!b || nvec_push(P, &operands, b) < 0) return NULL;
        ops[n_ops++] = op;
    }
    if (!n_ops) return a;
    jnode *n = node(P, N_COMPARE, line);
    if (!n) return NULL;
    n->kids = operands.v;
    n->n_kids = operands.n;
    n->ops = jarena_alloc(P->a, (size_t)n_ops * sizeof(int));
    if (!n->ops) {
        perr(P, line, "template too large (memory limit)");
        return NULL;
    }
    memcpy(n->ops, ops, (size_t)n_ops * sizeof(int));
    return n;
}

static jnode *parse_not(parser *P) {
    if (is_name(cur(P), "not")) {
        int line = cur(P)->line;
        advance(P);
        if (enter(P) < 0) return NULL;
        jnode *n = node(P, N_NOT, line);
        if (!n || !(n->a = parse_not(P))) return NULL;
        P->depth--;
        return n;
    }
    return parse_compare(P);
}

static jnode *parse_and(parser *P) {
    jnode *a = parse_not(P);
    while (a && is_name(cur(P), "and")) {
        int line = cur(P)->line;
        advance(P);
        jnode *n = node(P, N_AND, line);
        if (!n || !(n->b = parse_not(P))) return NULL;
        n->a = a;
        a = n;
    }
    return a;
}

static jnode *parse_or(parser *P) {
    jnode *a = parse_and(P);
    while (a && is_name(cur(P), "or")) {
        int line = cur(P)->line;
        advance(P);
        jnode *n = node(P, N_OR, line);
        if (!n || !(n->b = parse_and(P))) return NULL;
        n->a = a;
        a = n;
    }
    return a;
}

static jnode *parse_condexpr(parser *P) {
    jnode *a = parse_or(P);
    while (a && is_name(cur(P), "if")) {
        int line = cur(P)->line;
        advance(P);
        jnode *n = node(P, N_COND, line);
        if (!n || !(n->b = parse_or(P))) return NULL;
        n->a = a;
        if (is_name(cur(P), "else")) {
            advance(P);
            if (enter(P) < 0 || !(n->c = parse_condexpr(P))) return NULL;
            P->depth--;
        }
        a = n;
    }
    return a;
}

static jnode *parse_expression(parser *P, bool with_condexpr) {
    if (enter(P) < 0) return NULL;
    jnode *n = with_condexpr ? parse_condexpr(P) : parse_or(P);
    P->depth--;
    return n;
}

static bool is_tuple_end(parser *P) {
    const jtok *t = cur(P);
    return t->type == T_VAR_END || t->type == T_BLOCK_END || t->type == T_EOF || is_op(t, ")");
}

static jnode *parse_tuple(parser *P, bool with_condexpr, bool explicit_parens) {
    int line = cur(P)->line;
    nvec items = {0};
    bool comma = false;
    for (;;) {
        if (items.n) {
            if (!is_op(cur(P), ",")) break;
            advance(P);
            comma = true;
        }
        if (is_tuple_end(P)) break;
        jnode *e = parse_expression(P, with_condexpr);
        if (!e || nvec_push(P, &items, e) < 0) return NULL;
    }
    if (items.n == 1 && !comma) return items.v[0];
    if (items.n == 0 && !explicit_parens) {
        unexpected(P, "an expression");
        return NULL;
    }
    jnode *n = node(P, N_TUPLE, line);
    if (!n) return NULL;
    n->kids = items.v;
    n->n_kids = items.n;
    return n;
}

/* Assignment target: name, ns.attr (set only) or a tuple of names, possibly parenthesized. */
static jnode *parse_target(parser *P, bool with_namespace) {
    int line = cur(P)->line;
    if (with_namespace && cur(P)->type == T_NAME && is_op(peek(P, 1), ".")) {
        jnode *obj = node(P, N_NAME, line), *n = node(P, N_ATTR, line);
        if (!obj || !n) return NULL;
        obj->name = cur(P)->s;
        advance(P);
        advance(P);
        if (cur(P)->type != T_NAME) {
            unexpected(P, "an attribute name");
            return NULL;
        }
        n->a = obj;
        n->name = cur(P)->s;
        advance(P);
        return n;
    }
    nvec items = {0};
    bool comma = false;
    for (;;) {
        if (items.n) {
            if (!is_op(cur(P), ",")) break;
            advance(P);
            comma = true;
            if (is_name(cur(P), "in") || is_op(cur(P), "=") || cur(P)->type == T_BLOCK_END) break;
        }
        jnode *e = parse_primary(P);
        if (!e) return NULL;
        if (e->type != N_NAME && e->type != N_TUPLE) {
            perr(P, e->line, "syntax error: cannot assign to this expression");
            return NULL;
        }
        if (nvec_push(P, &items, e) < 0) return NULL;
    }
    if (items.n == 1 && !comma) return items.v[0];
    jnode *n = node(P, N_TUPLE, line);
    if (!n) return NULL;
    n->kids = items.v;
    n->n_kids = items.n;
    return n;
}

static jnode *parse_body(parser *P, const char *const *ends);

/* Filters of `{% set x | f %}` and `{% filter f | g %}`: a chain of N_FILTER nodes with a NULL operand. */
static int parse_filter_chain(parser *P, jnode *n, bool leading_pipe) {
    nvec fs = {0};
    bool first = true;
    while (is_op(cur(P), "|") || (first && !leading_pipe && cur(P)->type == T_NAME)) {
        if (!first || leading_pipe) advance(P);
        first = false;
        int line = cur(P)->line;
        jnode *f = node(P, N_FILTER, line);
        if (!f || dotted_name(P, &f->name) < 0) return -1;
        f->op = jinja_filter_index(f->name);
        if (f->op < 0)
            return perr(P, line, "unsupported filter '%.*s'", (int)(f->name.n > 60 ? 60 : f->name.n), f->name.p);
        if (is_op(cur(P), "(") && parse_call_args(P, f) < 0) return -1;
        if (nvec_push(P, &fs, f) < 0) return -1;
    }
    n->kids = fs.v;
    n->n_kids = fs.n;
    return 0;
}

static jnode *parse_stmt_if(parser *P, int line) {
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    static const char *const else_end[] = {"endif", NULL};
    jnode *n = node(P, N_IF, line);
    if (!n || !(n->a = parse_tuple(P, false, false)) || expect_block_end(P) < 0) return NULL;
    if (!(n->b = parse_body(P, ends))) return NULL;
    const jtok *t = cur(P);
    int tline = t->line;
    advance(P);
    if (jstr_eq_c(t->s, "elif")) {
        if (enter(P) < 0 || !(n->c = parse_stmt_if(P, tline))) return NULL;
        P->depth--;
        return n;
    }
    if (jstr_eq_c(t->s, "else")) {
        if (expect_block_end(P) < 0 || !(n->c = parse_body(P, else_end))) return NULL;
        advance(P);
    }
    if (expect_block_end(P) < 0) return NULL;
    return n;
}

static jnode *parse_stmt_for(parser *P, int line) {
    static const char *const ends[] = {"else", "endfor", NULL};
    static const char *const else_end[] = {"endfor", NULL};
    jnode *n = node(P, N_FOR, line);
    if (!n || !(n->d = parse_target(P, false))) return NULL;
    if (!is_name(cur(P), "in")) {
        unexpected(P, "'in'");
        return NULL;
    }
    advance(P);
    if (!(n->a = parse_tuple(P, false, false))) return NULL;
    if (is_name(cur(P), "if")) {
        advance(P);
        if (!(n->b = parse_expression(P, true))) return NULL;
    }
    if (is_name(cur(P), "recursive")) {
        perr(P, cur(P)->line, "unsupported construct: recursive for loop");
        return NULL;
    }
    if (expect_block_end(P) < 0) return NULL;
    P->loop_depth++;
    n->c = parse_body(P, ends);
    P->loop_depth--;
    if (!n->c) return NULL;
    if (is_name(cur(P), "else")) {
        advance(P);
        if (expect_block_end(P) < 0 || !(n->e = parse_body(P, else_end))) return NULL;
    }
    advance(P);
    if (expect_block_end(P) < 0) return NULL;
    return n;
}

static jnode *parse_stmt_set(parser *P, int line) {
    static const char *const ends[] = {"endset", NULL};
    jnode *target = parse_target(P, true);
    if (!target) return NULL;
    if (is_op(cur(P), "=")) {
        advance(P);
        jnode *n = node(P, N_SET, line);
        if (!n || !(n->a = parse_tuple(P, true, false)) || expect_block_end(P) < 0) return NULL;
        n->d = target;
        return n;
    }
    jnode *n = node(P, N_SETBLOCK, line);
    if (!n) return NULL;
    if (target->type == N_TUPLE) {
        perr(P, line, "syntax error: a block set needs one target");
        return NULL;
    }
    n->d = target;
    if (parse_filter_chain(P, n, true) < 0 || expect_block_end(P) < 0) return NULL;
    if (!(n->b = parse_body(P, ends))) return NULL;
    advance(P);
    if (expect_block_end(P) < 0) return NULL;
    return n;
}

static jnode *parse_stmt_macro(parser *P, int line) {
    static const char *const ends[] = {"endmacro", NULL};
    jnode *n = node(P, N_MACRO, line);
    if (!n) return NULL;
    if (cur(P)->type != T_NAME) {
        unexpected(P, "a macro name");
        return NULL;
    }
    n->name = cur(P)->s;
    advance(P);
    if (expect_op(P, "(") < 0) return NULL;
    nvec defaults = {0};
    jstr names[64];
    int k = 0;
    while (!is_op(cur(P), ")")) {
        if (k && expect_op(P, ",") < 0) return NULL;
        if (is_op(cur(P), ")")) break;
        if (cur(P)->type != T_NAME) {
            unexpected(P, "a parameter name");
            return NULL;
        }
        if (k == 64) {
            perr(P, line, "macro has too many parameters");
            return NULL;
        }
        names[k++] = cur(P)->s;
        advance(P);
        jnode *def = NULL;
        if (is_op(cur(P), "=")) {
            advance(P);
            if (!(def = parse_expression(P, true))) return NULL;
        } else if (defaults.n && defaults.v[defaults.n - 1]) {
            perr(P, line, "syntax error: non-default argument follows default argument");
            return NULL;
        }
        if (nvec_push(P, &defaults, def) < 0) return NULL;
    }
    advance(P);
    if (expect_block_end(P) < 0) return NULL;
    n->kw_names = jarena_alloc(P->a, (size_t)(k ? k : 1) * sizeof(jstr));
    if (!n->kw_names) {
        perr(P, line, "template too large (memory limit)");
        return NULL;
    }
    if (k) memcpy(n->kw_names, names, (size_t)k * sizeof(jstr));
    n->kw_vals = defaults.v;
    n->n_kw = k;
    int saved_loops = P->loop_depth;
    P->loop_depth = 0;
    n->b = parse_body(P, ends);
    P->loop_depth = saved_loops;
    if (!n->b) return NULL;
    advance(P);
    if (expect_block_end(P) < 0) return NULL;
    return n;
}

static jnode *parse_stmt_with(parser *P, int line, bool generation) {
    static const char *const with_end[] = {"endwith", NULL};
    static const char *const gen_end[] = {"endgeneration", NULL};
    jnode *n = node(P, N_WITH, line);
    if (!n) return NULL;
    nvec vals = {0};
    jstr names[32];
    while (!generation && cur(P)->type != T_BLOCK_END) {
        if (vals.n && expect_op(P, ",") < 0) return NULL;
        if (cur(P)->type != T_NAME || !is_op(peek(P, 1), "=")) {
            unexpected(P, "'name = value'");
            return NULL;
        }
        if (vals.n == 32) {
            perr(P, line, "too many assignments in with");
            return NULL;
        }
        names[vals.n] = cur(P)->s;
        advance(P);
        advance(P);
        jnode *v = parse_expression(P, true);
        if (!v || nvec_push(P, &vals, v) < 0) return NULL;
    }
    if (expect_block_end(P) < 0) return NULL;
    if (vals.n) {
        n->kw_names = jarena_alloc(P->a, (size_t)vals.n * sizeof(jstr));
        if (!n->kw_names) {
            perr(P, line, "template too large (memory limit)");
            return NULL;
        }
        memcpy(n->kw_names, names, (size_t)vals.n * sizeof(jstr));
    }
    n->kw_vals = vals.v;
    n->n_kw = vals.n;
    if (!(n->b = parse_body(P, generation ? gen_end : with_end))) return NULL;
    advance(P);
    if (expect_block_end(P) < 0) return NULL;
    return n;
}

static jnode *parse_statement(parser *P) {
    const jtok *t = cur(P);
    int line = t->line;
    if (t->type != T_NAME) {
        unexpected(P, "a tag name");
        return NULL;
    }
    jstr name = t->s;
    advance(P);
    if (jstr_eq_c(name, "if")) return parse_stmt_if(P, line);
    if (jstr_eq_c(name, "for")) return parse_stmt_for(P, line);
    if (jstr_eq_c(name, "set")) return parse_stmt_set(P, line);
    if (jstr_eq_c(name, "macro")) return parse_stmt_macro(P, line);
    if (jstr_eq_c(name, "with")) return parse_stmt_with(P, line, false);
    if (jstr_eq_c(name, "generation")) return parse_stmt_with(P, line, true);
    if (jstr_eq_c(name, "filter")) {
        static const char *const ends[] = {"endfilter", NULL};
        jnode *n = node(P, N_FILTERBLOCK, line);
        if (!n || parse_filter_chain(P, n, false) < 0 || expect_block_end(P) < 0) return NULL;
        if (!n->n_kids) {
            perr(P, line, "syntax error: filter block needs a filter");
            return NULL;
        }
        if (!(n->b = parse_body(P, ends))) return NULL;
        advance(P);
        if (expect_block_end(P) < 0) return NULL;
        return n;
    }
    if (jstr_eq_c(name, "break") || jstr_eq_c(name, "continue")) {
        bool brk = jstr_eq_c(name, "break");
        if (P->loop_depth == 0) {
            perr(P, line, "syntax error: '%s' outside loop", brk ? "break" : "continue");
            return NULL;
        }
        jnode *n = node(P, brk ? N_BREAK : N_CONTINUE, line);
        if (!n || expect_block_end(P) < 0) return NULL;
        return n;
    }
    static const char *const unsupported[] = {"include", "import", "from", "extends", "block", "call",
                                              "do", "autoescape", "trans", "pluralize", NULL};
    for (int i = 0; unsupported[i]; i++)
        if (jstr_eq_c(name, unsupported[i])) {
            perr(P, line, "unsupported tag '%s'", unsupported[i]);
            return NULL;
        }
    perr(P, line, "syntax error: unknown tag '%.*s'", (int)(name.n > 40 ? 40 : name.n), name.p);
    return NULL;
}

static bool at_end_tag(parser *P, const char *const *ends) {
    if (cur(P)->type != T_BLOCK_BEGIN) return false;
    const jtok *t = peek(P, 1);
    if (t->type != T_NAME) return false;
    for (int i = 0; ends && ends[i]; i++)
        if (jstr_eq_c(t->s, ends[i])) return true;
    return false;
}

/* Statements up to (not including the name of) one of `ends`; on return cur is that end tag's name.
 * ends NULL: up to the end of the template. */
static jnode *parse_body(parser *P, const char *const *ends) {
    int line = cur(P)->line;
    if (enter(P) < 0) return NULL;
    jnode *body = node(P, N_BODY, line);
    if (!body) return NULL;
    nvec kids = {0};
    for (;;) {
        const jtok *t = cur(P);
        if (t->type == T_EOF) {
            if (ends) {
                const char *want = ends[0];
                for (int i = 0; ends[i]; i++)
                    if (strncmp(ends[i], "end", 3) == 0) {
                        want = ends[i];
                        break;
                    }
                perr(P, t->line, "syntax error: unexpected end of template, expected '%s'", want);
                return NULL;
            }
            break;
        }
        if (at_end_tag(P, ends)) {
            advance(P); /* now at the end tag's name */
            break;
        }
        jnode *s = NULL;
        if (t->type == T_TEXT) {
            s = node(P, N_TEXT, t->line);
            if (!s) return NULL;
            s->lit = jv_str(t->s);
            advance(P);
        } else if (t->type == T_VAR_BEGIN) {
            advance(P);
            s = node(P, N_OUTPUT, t->line);
            if (!s || !(s->a = parse_tuple(P, true, false))) return NULL;
            if (cur(P)->type != T_VAR_END) {
                unexpected(P, "end of print statement '}}'");
                return NULL;
            }
            advance(P);
        } else if (t->type == T_BLOCK_BEGIN) {
            advance(P);
            const jtok *name = cur(P);
            if (name->type == T_NAME && name->s.n > 3 && strncmp(name->s.p, "end", 3) == 0) {
                perr(P, name->line, "syntax error: unexpected '%.*s'", (int)(name->s.n > 40 ? 40 : name->s.n), name->s.p);
                return NULL;
            }
            if (is_name(name, "elif") || is_name(name, "else")) {
                perr(P, name->line, "syntax error: unexpected '%.*s'", (int)name->s.n, name->s.p);
                return NULL;
            }
            s = parse_statement(P);
            if (!s) return NULL;
        } else {
            unexpected(P, NULL);
            return NULL;
        }
        if (nvec_push(P, &kids, s) < 0) return NULL;
    }
    body->kids = kids.v;
    body->n_kids = kids.n;
    P->depth--;
    return body;
}

int jinja_parse(jarena *a, const jtokens *toks, int max_depth, jnode **root, pith_err *err) {
    parser P = {.a = a, .err = err, .t = toks->v, .n = toks->n, .max_depth = max_depth};
    jnode *body = parse_body(&P, NULL);
    if (!body) return -1;
    *root = body;
    return 0;
}
