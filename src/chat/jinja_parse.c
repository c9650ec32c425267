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

#include "chat/jinja_parser.h"

int jp_err(parser *P, int line, const char *fmt, ...) {
    if (!P->err) return -1;
    char what[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    snprintf(P->err->msg, sizeof P->err->msg, "chat template: %s at line %d", what, line);
    return -1;
}

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

int jp_unexpected(parser *P, const char *expected) {
    char buf[64];
    const jtok *t = cur(P);
    if (expected) return jp_err(P, t->line, "syntax error: expected %s, got %s", expected, describe(t, buf, sizeof buf));
    return jp_err(P, t->line, "syntax error: unexpected %s", describe(t, buf, sizeof buf));
}

int jp_expect_op(parser *P, const char *op) {
    if (!is_op(cur(P), op)) {
        char want[16];
        snprintf(want, sizeof want, "'%s'", op);
        return jp_unexpected(P, want);
    }
    advance(P);
    return 0;
}

int jp_expect_block_end(parser *P) {
    if (cur(P)->type != T_BLOCK_END) return jp_unexpected(P, "end of statement block '%}'");
    advance(P);
    return 0;
}

jnode *jp_node(parser *P, jnode_type type, int line) {
    jnode *n = jarena_alloc(P->a, sizeof *n);
    if (!n) {
        jp_err(P, line, "template too large (memory limit)");
        return NULL;
    }
    n->type = type;
    n->line = line;
    return n;
}

int jp_nvec_push(parser *P, nvec *v, jnode *x) {
    if (v->n == v->cap) {
        int cap = v->cap ? v->cap * 2 : 4;
        jnode **p = jarena_alloc(P->a, (size_t)cap * sizeof *p);
        if (!p) return jp_err(P, x ? x->line : 0, "template too large (memory limit)");
        if (v->n) memcpy(p, v->v, (size_t)v->n * sizeof *p);
        v->v = p;
        v->cap = cap;
    }
    v->v[v->n++] = x;
    return 0;
}

int jp_enter(parser *P) {
    if (++P->depth > P->max_depth)
        return jp_err(P, cur(P)->line, "template nested too deeply (more than %d levels)", P->max_depth);
    return 0;
}


/* (args, name=value) after '(' has been seen at cur. */
int jp_call_args(parser *P, jnode *n) {
    if (jp_expect_op(P, "(") < 0) return -1;
    nvec pos = {0}, kwv = {0};
    jstr *kwn = NULL;
    int kcap = 0;
    while (!is_op(cur(P), ")")) {
        if (pos.n || kwv.n) {
            if (jp_expect_op(P, ",") < 0) return -1;
            if (is_op(cur(P), ")")) break;
        }
        if (is_op(cur(P), "*") || is_op(cur(P), "**"))
            return jp_err(P, cur(P)->line, "unsupported construct: *args/**kwargs in a call");
        if (cur(P)->type == T_NAME && is_op(peek(P, 1), "=")) {
            jstr key = cur(P)->s;
            advance(P);
            advance(P);
            jnode *v = jp_expression(P, true);
            if (!v) return -1;
            if (kwv.n == kcap) {
                kcap = kcap ? kcap * 2 : 4;
                jstr *k2 = jarena_alloc(P->a, (size_t)kcap * sizeof *k2);
                if (!k2) return jp_err(P, v->line, "template too large (memory limit)");
                if (kwv.n) memcpy(k2, kwn, (size_t)kwv.n * sizeof *k2);
                kwn = k2;
            }
            kwn[kwv.n] = key;
            if (jp_nvec_push(P, &kwv, v) < 0) return -1;
        } else {
            if (kwv.n) return jp_err(P, cur(P)->line, "syntax error: positional argument after keyword argument");
            jnode *v = jp_expression(P, true);
            if (!v || jp_nvec_push(P, &pos, v) < 0) return -1;
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
int jp_dotted_name(parser *P, jstr *out) {
    if (cur(P)->type != T_NAME) return jp_unexpected(P, "a name");
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
    jnode *n = jp_node(P, N_FILTER, line);
    if (!n || jp_dotted_name(P, &n->name) < 0) return NULL;
    n->op = jinja_filter_index(n->name);
    if (n->op < 0) {
        jp_err(P, line, "unsupported filter '%.*s'", (int)(n->name.n > 60 ? 60 : n->name.n), n->name.p);
        return NULL;
    }
    n->a = operand;
    if (is_op(cur(P), "(") && jp_call_args(P, n) < 0) return NULL;
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
    jnode *n = jp_node(P, N_TEST, line);
    if (!n || jp_dotted_name(P, &n->name) < 0) return NULL;
    n->op = jinja_test_index(n->name);
    if (n->op < 0) {
        jp_err(P, line, "unsupported test '%.*s'", (int)(n->name.n > 60 ? 60 : n->name.n), n->name.p);
        return NULL;
    }
    n->a = operand;
    const jtok *t = cur(P);
    if (is_op(t, "(")) {
        if (jp_call_args(P, n) < 0) return NULL;
    } else if ((t->type == T_NAME || t->type == T_STRING || t->type == T_INT || t->type == T_FLOAT ||
                is_op(t, "[") || is_op(t, "{")) &&
               !is_name(t, "else") && !is_name(t, "or") && !is_name(t, "and")) {
        if (is_name(t, "is")) {
            jp_err(P, t->line, "syntax error: cannot chain multiple tests with 'is'");
            return NULL;
        }
        jnode *arg = jp_primary(P);
        if (!arg) return NULL;
        /* postfix only (no filters), as jinja2 */
        jnode **kids = jarena_alloc(P->a, sizeof *kids);
        if (!kids) {
            jp_err(P, line, "template too large (memory limit)");
            return NULL;
        }
        kids[0] = arg;
        n->kids = kids;
        n->n_kids = 1;
    }
    if (!negated) return n;
    jnode *neg = jp_node(P, N_NOT, line);
    if (neg) neg->a = n;
    return neg;
}

static jnode *parse_subscript(parser *P, jnode *obj) {
    int line = cur(P)->line;
    if (is_op(cur(P), ".")) {
        advance(P);
        const jtok *t = cur(P);
        if (t->type == T_NAME) {
            jnode *n = jp_node(P, N_ATTR, line);
            if (!n) return NULL;
            n->a = obj;
            n->name = t->s;
            advance(P);
            return n;
        }
        if (t->type == T_INT) {
            jnode *n = jp_node(P, N_ITEM, line), *k = jp_node(P, N_LIT, line);
            if (!n || !k) return NULL;
            k->lit = jv_int(t->i);
            n->a = obj;
            n->b = k;
            advance(P);
            return n;
        }
        jp_unexpected(P, "name or number");
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
                jp_unexpected(P, "']'");
                return NULL;
            }
            is_slice = true;
            advance(P);
            continue;
        }
        if (is_op(cur(P), ",")) {
            jp_err(P, cur(P)->line, "unsupported construct: tuple subscript");
            return NULL;
        }
        if (parts[idx]) {
            jp_unexpected(P, "']'");
            return NULL;
        }
        parts[idx] = jp_expression(P, true);
        if (!parts[idx]) return NULL;
    }
    advance(P);
    if (!is_slice) {
        if (!parts[0]) {
            jp_err(P, line, "syntax error: empty subscript");
            return NULL;
        }
        jnode *n = jp_node(P, N_ITEM, line);
        if (!n) return NULL;
        n->a = obj;
        n->b = parts[0];
        return n;
    }
    jnode *n = jp_node(P, N_SLICE, line);
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
            jnode *call = jp_node(P, N_CALL, cur(P)->line);
            if (!call) return NULL;
            call->a = n;
            if (jp_call_args(P, call) < 0) return NULL;
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
            jnode *call = jp_node(P, N_CALL, cur(P)->line);
            if (!call) return NULL;
            call->a = n;
            if (jp_call_args(P, call) < 0) return NULL;
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
    jnode *n = jp_node(P, dict ? N_DICT : N_LIST, line);
    if (!n) return NULL;
    nvec items = {0};
    const char *close = dict ? "}" : "]";
    while (!is_op(cur(P), close)) {
        if (items.n) {
            if (jp_expect_op(P, ",") < 0) return NULL;
            if (is_op(cur(P), close)) break;
        }
        jnode *k = jp_expression(P, true);
        if (!k || jp_nvec_push(P, &items, k) < 0) return NULL;
        if (dict) {
            if (jp_expect_op(P, ":") < 0) return NULL;
            jnode *v = jp_expression(P, true);
            if (!v || jp_nvec_push(P, &items, v) < 0) return NULL;
        }
    }
    advance(P);
    n->kids = items.v;
    n->n_kids = items.n;
    return n;
}

jnode *jp_primary(parser *P) {
    if (jp_enter(P) < 0) return NULL;
    const jtok *t = cur(P);
    jnode *n = NULL;
    switch (t->type) {
    case T_NAME:
        n = jp_node(P, N_LIT, t->line);
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
        n = jp_node(P, N_LIT, t->line);
        if (!n) return NULL;
        jstr s = t->s;
        advance(P);
        while (cur(P)->type == T_STRING) { /* adjacent literals concatenate */
            jstr u = cur(P)->s;
            char *p = jarena_alloc(P->a, s.n + u.n + 1);
            if (!p) {
                jp_err(P, t->line, "template too large (memory limit)");
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
        n = jp_node(P, N_LIT, t->line);
        if (!n) return NULL;
        n->lit = t->type == T_INT ? jv_int(t->i) : jv_float(t->f);
        advance(P);
        break;
    case T_OP:
        if (is_op(t, "(")) {
            advance(P);
            n = jp_tuple(P, true, true);
            if (!n || jp_expect_op(P, ")") < 0) return NULL;
        } else if (is_op(t, "[")) {
            n = parse_list_or_dict(P, false);
        } else if (is_op(t, "{")) {
            n = parse_list_or_dict(P, true);
        } else {
            jp_unexpected(P, NULL);
            return NULL;
        }
        break;
    default:
        jp_unexpected(P, NULL);
        return NULL;
    }
    P->depth--;
    return n;
}

static jnode *parse_unary(parser *P, bool with_filter) {
    if (jp_enter(P) < 0) return NULL;
    const jtok *t = cur(P);
    jnode *n;
    if (is_op(t, "-") || is_op(t, "+")) {
        advance(P);
        n = jp_node(P, is_op(t, "-") ? N_NEG : N_POS, t->line);
        if (!n || !(n->a = parse_unary(P, false))) return NULL;
    } else {
        n = jp_primary(P);
    }
    n = parse_postfix(P, n);
    if (with_filter) n = parse_filter_expr(P, n);
    P->depth--;
    return n;
}

static jnode *binop(parser *P, int op, jnode *a, jnode *b, int line) {
    if (!a || !b) return NULL;
    jnode *n = jp_node(P, N_BINOP, line);
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
            jp_err(P, t->line, "comparison chain too long");
            return NULL;
        }
        if (!operands.n && jp_nvec_push(P, &operands, a) < 0) return NULL;
        jnode *b = parse_math1(P);
        if (!b || jp_nvec_push(P, &operands, b) < 0) return NULL;
        ops[n_ops++] = op;
    }
    if (!n_ops) return a;
    jnode *n = jp_node(P, N_COMPARE, line);
    if (!n) return NULL;
    n->kids = operands.v;
    n->n_kids = operands.n;
    n->ops = jarena_alloc(P->a, (size_t)n_ops * sizeof(int));
    if (!n->ops) {
        jp_err(P, line, "template too large (memory limit)");
        return NULL;
    }
    memcpy(n->ops, ops, (size_t)n_ops * sizeof(int));
    return n;
}

static jnode *parse_not(parser *P) {
    if (is_name(cur(P), "not")) {
        int line = cur(P)->line;
        advance(P);
        if (jp_enter(P) < 0) return NULL;
        jnode *n = jp_node(P, N_NOT, line);
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
        jnode *n = jp_node(P, N_AND, line);
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
        jnode *n = jp_node(P, N_OR, line);
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
        jnode *n = jp_node(P, N_COND, line);
        if (!n || !(n->b = parse_or(P))) return NULL;
        n->a = a;
        if (is_name(cur(P), "else")) {
            advance(P);
            if (jp_enter(P) < 0 || !(n->c = parse_condexpr(P))) return NULL;
            P->depth--;
        }
        a = n;
    }
    return a;
}

jnode *jp_expression(parser *P, bool with_condexpr) {
    if (jp_enter(P) < 0) return NULL;
    jnode *n = with_condexpr ? parse_condexpr(P) : parse_or(P);
    P->depth--;
    return n;
}

static bool is_tuple_end(parser *P) {
    const jtok *t = cur(P);
    return t->type == T_VAR_END || t->type == T_BLOCK_END || t->type == T_EOF || is_op(t, ")");
}

jnode *jp_tuple(parser *P, bool with_condexpr, bool explicit_parens) {
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
        jnode *e = jp_expression(P, with_condexpr);
        if (!e || jp_nvec_push(P, &items, e) < 0) return NULL;
    }
    if (items.n == 1 && !comma) return items.v[0];
    if (items.n == 0 && !explicit_parens) {
        jp_unexpected(P, "an expression");
        return NULL;
    }
    jnode *n = jp_node(P, N_TUPLE, line);
    if (!n) return NULL;
    n->kids = items.v;
    n->n_kids = items.n;
    return n;
}

