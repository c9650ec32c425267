/* Statement half of the chat-template parser: {% if %}, {% for %}, {% set %}, {% macro %}, {% with %},
 * {% filter %}, {% generation %}, {% break %}/{% continue %}, bodies up to their end tags, and the entry
 * point. Node layouts are documented in jinja_parse.c. Tags jinja2 has but chat templates do not need
 * (include, import, extends, block, call...) fail with "unsupported tag". */
#include <string.h>

#include "chat/jinja_parser.h"

/* Assignment target: name, ns.attr (set only) or a tuple of names, possibly parenthesized. */
static jnode *parse_target(parser *P, bool with_namespace) {
    int line = cur(P)->line;
    if (with_namespace && cur(P)->type == T_NAME && is_op(peek(P, 1), ".")) {
        jnode *obj = jp_node(P, N_NAME, line), *n = jp_node(P, N_ATTR, line);
        if (!obj || !n) return NULL;
        obj->name = cur(P)->s;
        advance(P);
        advance(P);
        if (cur(P)->type != T_NAME) {
            jp_unexpected(P, "an attribute name");
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
        jnode *e = jp_primary(P);
        if (!e) return NULL;
        if (e->type != N_NAME && e->type != N_TUPLE) {
            jp_err(P, e->line, "syntax error: cannot assign to this expression");
            return NULL;
        }
        if (jp_nvec_push(P, &items, e) < 0) return NULL;
    }
    if (items.n == 1 && !comma) return items.v[0];
    jnode *n = jp_node(P, N_TUPLE, line);
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
        jnode *f = jp_node(P, N_FILTER, line);
        if (!f || jp_dotted_name(P, &f->name) < 0) return -1;
        f->op = jinja_filter_index(f->name);
        if (f->op < 0)
            return jp_err(P, line, "unsupported filter '%.*s'", (int)(f->name.n > 60 ? 60 : f->name.n), f->name.p);
        if (is_op(cur(P), "(") && jp_call_args(P, f) < 0) return -1;
        if (jp_nvec_push(P, &fs, f) < 0) return -1;
    }
    n->kids = fs.v;
    n->n_kids = fs.n;
    return 0;
}

static jnode *parse_stmt_if(parser *P, int line) {
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    static const char *const else_end[] = {"endif", NULL};
    jnode *n = jp_node(P, N_IF, line);
    if (!n || !(n->a = jp_tuple(P, false, false)) || jp_expect_block_end(P) < 0) return NULL;
    if (!(n->b = parse_body(P, ends))) return NULL;
    const jtok *t = cur(P);
    int tline = t->line;
    advance(P);
    if (jstr_eq_c(t->s, "elif")) {
        if (jp_enter(P) < 0 || !(n->c = parse_stmt_if(P, tline))) return NULL;
        P->depth--;
        return n;
    }
    if (jstr_eq_c(t->s, "else")) {
        if (jp_expect_block_end(P) < 0 || !(n->c = parse_body(P, else_end))) return NULL;
        advance(P);
    }
    if (jp_expect_block_end(P) < 0) return NULL;
    return n;
}

static jnode *parse_stmt_for(parser *P, int line) {
    static const char *const ends[] = {"else", "endfor", NULL};
    static const char *const else_end[] = {"endfor", NULL};
    jnode *n = jp_node(P, N_FOR, line);
    if (!n || !(n->d = parse_target(P, false))) return NULL;
    if (!is_name(cur(P), "in")) {
        jp_unexpected(P, "'in'");
        return NULL;
    }
    advance(P);
    if (!(n->a = jp_tuple(P, false, false))) return NULL;
    if (is_name(cur(P), "if")) {
        advance(P);
        if (!(n->b = jp_expression(P, true))) return NULL;
    }
    if (is_name(cur(P), "recursive")) {
        jp_err(P, cur(P)->line, "unsupported construct: recursive for loop");
        return NULL;
    }
    if (jp_expect_block_end(P) < 0) return NULL;
    P->loop_depth++;
    n->c = parse_body(P, ends);
    P->loop_depth--;
    if (!n->c) return NULL;
    if (is_name(cur(P), "else")) {
        advance(P);
        if (jp_expect_block_end(P) < 0 || !(n->e = parse_body(P, else_end))) return NULL;
    }
    advance(P);
    if (jp_expect_block_end(P) < 0) return NULL;
    return n;
}

static jnode *parse_stmt_set(parser *P, int line) {
    static const char *const ends[] = {"endset", NULL};
    jnode *target = parse_target(P, true);
    if (!target) return NULL;
    if (is_op(cur(P), "=")) {
        advance(P);
        jnode *n = jp_node(P, N_SET, line);
        if (!n || !(n->a = jp_tuple(P, true, false)) || jp_expect_block_end(P) < 0) return NULL;
        n->d = target;
        return n;
    }
    jnode *n = jp_node(P, N_SETBLOCK, line);
    if (!n) return NULL;
    if (target->type == N_TUPLE) {
        jp_err(P, line, "syntax error: a block set needs one target");
        return NULL;
    }
    n->d = target;
    if (parse_filter_chain(P, n, true) < 0 || jp_expect_block_end(P) < 0) return NULL;
    if (!(n->b = parse_body(P, ends))) return NULL;
    advance(P);
    if (jp_expect_block_end(P) < 0) return NULL;
    return n;
}

static jnode *parse_stmt_macro(parser *P, int line) {
    static const char *const ends[] = {"endmacro", NULL};
    jnode *n = jp_node(P, N_MACRO, line);
    if (!n) return NULL;
    if (cur(P)->type != T_NAME) {
        jp_unexpected(P, "a macro name");
        return NULL;
    }
    n->name = cur(P)->s;
    advance(P);
    if (jp_expect_op(P, "(") < 0) return NULL;
    nvec defaults = {0};
    jstr names[64];
    int k = 0;
    while (!is_op(cur(P), ")")) {
        if (k && jp_expect_op(P, ",") < 0) return NULL;
        if (is_op(cur(P), ")")) break;
        if (cur(P)->type != T_NAME) {
            jp_unexpected(P, "a parameter name");
            return NULL;
        }
        if (k == 64) {
            jp_err(P, line, "macro has too many parameters");
            return NULL;
        }
        names[k++] = cur(P)->s;
        advance(P);
        jnode *def = NULL;
        if (is_op(cur(P), "=")) {
            advance(P);
            if (!(def = jp_expression(P, true))) return NULL;
        } else if (defaults.n && defaults.v[defaults.n - 1]) {
            jp_err(P, line, "syntax error: non-default argument follows default argument");
            return NULL;
        }
        if (jp_nvec_push(P, &defaults, def) < 0) return NULL;
    }
    advance(P);
    if (jp_expect_block_end(P) < 0) return NULL;
    n->kw_names = jarena_alloc(P->a, (size_t)(k ? k : 1) * sizeof(jstr));
    if (!n->kw_names) {
        jp_err(P, line, "template too large (memory limit)");
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
    if (jp_expect_block_end(P) < 0) return NULL;
    return n;
}

static jnode *parse_stmt_with(parser *P, int line, bool generation) {
    static const char *const with_end[] = {"endwith", NULL};
    static const char *const gen_end[] = {"endgeneration", NULL};
    jnode *n = jp_node(P, N_WITH, line);
    if (!n) return NULL;
    nvec vals = {0};
    jstr names[32];
    while (!generation && cur(P)->type != T_BLOCK_END) {
        if (vals.n && jp_expect_op(P, ",") < 0) return NULL;
        if (cur(P)->type != T_NAME || !is_op(peek(P, 1), "=")) {
            jp_unexpected(P, "'name = value'");
            return NULL;
        }
        if (vals.n == 32) {
            jp_err(P, line, "too many assignments in with");
            return NULL;
        }
        names[vals.n] = cur(P)->s;
        advance(P);
        advance(P);
        jnode *v = jp_expression(P, true);
        if (!v || jp_nvec_push(P, &vals, v) < 0) return NULL;
    }
    if (jp_expect_block_end(P) < 0) return NULL;
    if (vals.n) {
        n->kw_names = jarena_alloc(P->a, (size_t)vals.n * sizeof(jstr));
        if (!n->kw_names) {
            jp_err(P, line, "template too large (memory limit)");
            return NULL;
        }
        memcpy(n->kw_names, names, (size_t)vals.n * sizeof(jstr));
    }
    n->kw_vals = vals.v;
    n->n_kw = vals.n;
    if (!(n->b = parse_body(P, generation ? gen_end : with_end))) return NULL;
    advance(P);
    if (jp_expect_block_end(P) < 0) return NULL;
    return n;
}

static jnode *parse_statement(parser *P) {
    const jtok *t = cur(P);
    int line = t->line;
    if (t->type != T_NAME) {
        jp_unexpected(P, "a tag name");
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
        jnode *n = jp_node(P, N_FILTERBLOCK, line);
        if (!n || parse_filter_chain(P, n, false) < 0 || jp_expect_block_end(P) < 0) return NULL;
        if (!n->n_kids) {
            jp_err(P, line, "syntax error: filter block needs a filter");
            return NULL;
        }
        if (!(n->b = parse_body(P, ends))) return NULL;
        advance(P);
        if (jp_expect_block_end(P) < 0) return NULL;
        return n;
    }
    if (jstr_eq_c(name, "break") || jstr_eq_c(name, "continue")) {
        bool brk = jstr_eq_c(name, "break");
        if (P->loop_depth == 0) {
            jp_err(P, line, "syntax error: '%s' outside loop", brk ? "break" : "continue");
            return NULL;
        }
        jnode *n = jp_node(P, brk ? N_BREAK : N_CONTINUE, line);
        if (!n || jp_expect_block_end(P) < 0) return NULL;
        return n;
    }
    static const char *const unsupported[] = {"include", "import", "from", "extends", "block", "call",
                                              "do", "autoescape", "trans", "pluralize", NULL};
    for (int i = 0; unsupported[i]; i++)
        if (jstr_eq_c(name, unsupported[i])) {
            jp_err(P, line, "unsupported tag '%s'", unsupported[i]);
            return NULL;
        }
    jp_err(P, line, "syntax error: unknown tag '%.*s'", (int)(name.n > 40 ? 40 : name.n), name.p);
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
    if (jp_enter(P) < 0) return NULL;
    jnode *body = jp_node(P, N_BODY, line);
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
                jp_err(P, t->line, "syntax error: unexpected end of template, expected '%s'", want);
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
            s = jp_node(P, N_TEXT, t->line);
            if (!s) return NULL;
            s->lit = jv_str(t->s);
            advance(P);
        } else if (t->type == T_VAR_BEGIN) {
            advance(P);
            s = jp_node(P, N_OUTPUT, t->line);
            if (!s || !(s->a = jp_tuple(P, true, false))) return NULL;
            if (cur(P)->type != T_VAR_END) {
                jp_unexpected(P, "end of print statement '}}'");
                return NULL;
            }
            advance(P);
        } else if (t->type == T_BLOCK_BEGIN) {
            advance(P);
            const jtok *name = cur(P);
            if (name->type == T_NAME && name->s.n > 3 && strncmp(name->s.p, "end", 3) == 0) {
                jp_err(P, name->line, "syntax error: unexpected '%.*s'", (int)(name->s.n > 40 ? 40 : name->s.n), name->s.p);
                return NULL;
            }
            if (is_name(name, "elif") || is_name(name, "else")) {
                jp_err(P, name->line, "syntax error: unexpected '%.*s'", (int)name->s.n, name->s.p);
                return NULL;
            }
            s = parse_statement(P);
            if (!s) return NULL;
        } else {
            jp_unexpected(P, NULL);
            return NULL;
        }
        if (jp_nvec_push(P, &kids, s) < 0) return NULL;
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
