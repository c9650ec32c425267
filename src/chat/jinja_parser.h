/* Shared state and helpers of the two halves of the parser: jinja_parse.c (expressions) and
 * jinja_parse_stmt.c (statements and the entry point). Internal to src/chat. */
#ifndef PITH_CHAT_JINJA_PARSER_H
#define PITH_CHAT_JINJA_PARSER_H

#include "chat/jinja.h"

typedef struct parser {
    jarena *a;
    pith_err *err;
    const jtok *t;
    size_t n, pos;
    int depth, max_depth;
    int loop_depth;
} parser;

static inline const jtok *cur(parser *P) { return &P->t[P->pos]; }
static inline const jtok *peek(parser *P, size_t k) {
    size_t i = P->pos + k;
    return &P->t[i < P->n ? i : P->n - 1];
}
static inline void advance(parser *P) {
    if (P->pos + 1 < P->n) P->pos++;
}
static inline bool is_op(const jtok *t, const char *op) { return t->type == T_OP && jstr_eq_c(t->s, op); }
static inline bool is_name(const jtok *t, const char *name) { return t->type == T_NAME && jstr_eq_c(t->s, name); }

/* Growable node-pointer vector in the arena. */
typedef struct nvec {
    jnode **v;
    int n, cap;
} nvec;

int jp_err(parser *P, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int jp_unexpected(parser *P, const char *expected); /* "syntax error: expected X, got Y" */
int jp_expect_op(parser *P, const char *op);
int jp_expect_block_end(parser *P);
jnode *jp_node(parser *P, jnode_type type, int line);
int jp_nvec_push(parser *P, nvec *v, jnode *x);
int jp_enter(parser *P); /* one nesting level deeper; error past max_depth (caller decrements) */
jnode *jp_expression(parser *P, bool with_condexpr);
jnode *jp_tuple(parser *P, bool with_condexpr, bool explicit_parens);
jnode *jp_primary(parser *P);
int jp_call_args(parser *P, jnode *n);   /* at '(' */
int jp_dotted_name(parser *P, jstr *out); /* name(.name)* */

#endif
