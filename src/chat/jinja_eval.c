/* Evaluator of the chat-template interpreter: walks the AST, writing output to the current buffer.
 *
 * Scoping follows jinja2: the template level has one scope (where `set` inside `if` lands too); each
 * for-loop iteration gets a fresh scope, so `set` inside a loop is invisible after it (and in the next
 * iteration) — the reason templates use namespace(); macros run in a scope above the template level.
 * Every expression and statement costs a step and every nesting level counts against the depth limit,
 * so no template can run forever or overflow the C stack. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "chat/jinja.h"

enum { MAX_ARGS = 16 };

static int enter(jctx *c, int line) {
    c->line = line;
    if (++c->steps > c->lim.max_steps)
        return jerr(c, "evaluation step limit of %" PRIu64 " exceeded", c->lim.max_steps);
    if (++c->depth > c->lim.max_depth) {
        c->depth--;
        return jerr(c, "nesting deeper than %d levels", c->lim.max_depth);
    }
    return 0;
}

int jframe_set(jctx *c, jframe *f, jstr name, jv val) { return jdict_set(c, &f->vars, jv_str(name), val); }

void jframe_clear(jframe *f) {
    f->vars.n = 0;
    if (f->vars.index) memset(f->vars.index, 0, f->vars.index_cap * sizeof *f->vars.index);
}

int jinja_lookup(jctx *c, jstr name, jv *out) {
    for (const jframe *f = c->frame; f; f = f->parent) {
        const jv *v = jdict_get_str(&f->vars, name);
        if (v) {
            *out = *v;
            return 0;
        }
    }
    int fn = jinja_global_index(name);
    if (fn >= 0) {
        out->kind = JV_FUNC;
        out->u.fn = fn;
        return 0;
    }
    *out = jv_undef(name);
    return 0;
}

/* Evaluates call arguments into caller-provided arrays of MAX_ARGS. */
static int eval_args(jctx *c, const jnode *n, jv *pos, jv *kw, jargs *a) {
    if (n->n_kids > MAX_ARGS || n->n_kw > MAX_ARGS) return jerr(c, "too many arguments in a call");
    for (int i = 0; i < n->n_kids; i++)
        if (jinja_eval(c, n->kids[i], &pos[i]) < 0) return -1;
    for (int i = 0; i < n->n_kw; i++)
        if (jinja_eval(c, n->kw_vals[i], &kw[i]) < 0) return -1;
    c->line = n->line;
    *a = (jargs){pos, n->n_kids, n->kw_names, kw, n->n_kw};
    return 0;
}

static int apply_filter_node(jctx *c, const jnode *f, jv self, jv *out) {
    jv pos[MAX_ARGS], kw[MAX_ARGS];
    jargs a;
    if (eval_args(c, f, pos, kw, &a) < 0) return -1;
    return jinja_apply_filter(c, f->op, self, &a, out);
}

static int slice_index(jctx *c, const jnode *n, int64_t *v, bool *given) {
    *given = false;
    if (!n) return 0;
    jv x;
    if (jinja_eval(c, n, &x) < 0) return -1;
    if (x.kind == JV_NONE) return 0;
    if (x.kind == JV_BOOL) x = jv_int(x.u.b);
    if (x.kind != JV_INT) return jerr(c, "slice indices must be integers or none");
    *v = x.u.i;
    *given = true;
    return 0;
}

/* Python's slice index adjustment for a sequence of length len. */
static void adjust(int64_t len, int64_t step, bool has_start, int64_t *start, bool has_stop, int64_t *stop) {
    if (!has_start) *start = step < 0 ? len - 1 : 0;
    else if (*start < 0) { *start += len; if (*start < 0) *start = step < 0 ? -1 : 0; }
    else if (*start >= len) *start = step < 0 ? len - 1 : len;
    if (!has_stop) *stop = step < 0 ? -1 : len;
    else if (*stop < 0) { *stop += len; if (*stop < 0) *stop = step < 0 ? -1 : 0; }
    else if (*stop >= len) *stop = step < 0 ? len - 1 : len;
}

static int eval_slice(jctx *c, const jnode *n, jv *out) {
    jv obj;
    if (jinja_eval(c, n->a, &obj) < 0) return -1;
    int64_t start = 0, stop = 0, step = 1;
    bool hs, ht, hp;
    if (slice_index(c, n->b, &start, &hs) < 0 || slice_index(c, n->c, &stop, &ht) < 0 ||
        slice_index(c, n->d, &step, &hp) < 0)
        return -1;
    c->line = n->line;
    if (!hp) step = 1;
    if (step == 0) return jerr(c, "slice step cannot be zero");
    /* jinja2 slices with Python's own subscript (not its forgiving getitem): other types raise. */
    if (obj.kind == JV_UNDEF) return jerr(c, "'%.*s' is undefined", (int)obj.u.s.n, obj.u.s.p);
    if (obj.kind == JV_DICT) return jerr(c, "unhashable type: 'slice'");
    if ((obj.kind != JV_LIST && obj.kind != JV_STR) || (obj.kind == JV_LIST && obj.u.list->view))
        return jerr(c, "'%s' object is not subscriptable", jv_type_name(obj));
    if (jcharge(c, obj.kind == JV_LIST ? obj.u.list->n / 8 : obj.u.s.n / 16) < 0) return -1;
    int64_t len = obj.kind == JV_LIST ? (int64_t)obj.u.list->n : (int64_t)ju_count(obj.u.s);
    adjust(len, step, hs, &start, ht, &stop);
    int64_t count = 0;
    if (step > 0 && start < stop) count = (stop - start - 1) / step + 1;
    if (step < 0 && stop < start) count = (start - stop - 1) / (-step) + 1;
    if (obj.kind == JV_LIST) {
        if (jlist_new(c, (size_t)count, obj.u.list->tuple, out) < 0) return -1;
        for (int64_t i = 0; i < count; i++) out->u.list->items[i] = obj.u.list->items[start + i * step];
        return 0;
    }
    jstr s = obj.u.s;
    if (step == 1) {
        size_t a = ju_offset(s, (size_t)start);
        size_t b = count ? a + ju_offset((jstr){s.p + a, s.n - a}, (size_t)count) : a;
        *out = jv_str((jstr){s.p + a, b - a});
        return 0;
    }
    size_t *offs = jalloc_array(c, (size_t)len + 1, sizeof *offs);
    if (!offs) return -1;
    size_t k = 0;
    for (size_t i = 0; i < s.n; k++) {
        uint32_t cp;
        offs[k] = i;
        i += ju_decode(s.p, s.n, i, &cp);
    }
    offs[k] = s.n;
    jbuf b = {0};
    for (int64_t i = 0; i < count; i++) {
        int64_t j = start + i * step;
        if (jbuf_put(c, &b, s.p + offs[j], offs[j + 1] - offs[j]) < 0) return -1;
    }
    *out = jv_str(jbuf_str(&b));
    return 0;
}

static int compare_op(jctx *c, int op, jv a, jv b, bool *r) {
    int cmp;
    switch (op) {
    case OP_EQ: return jv_eq(c, a, b, r);
    case OP_NE:
        if (jv_eq(c, a, b, r) < 0) return -1;
        *r = !*r;
        return 0;
    case OP_IN: return jv_contains(c, b, a, r);
    case OP_NOTIN:
        if (jv_contains(c, b, a, r) < 0) return -1;
        *r = !*r;
        return 0;
    default:
        if (jv_compare(c, a, b, &cmp) < 0) return -1;
        *r = op == OP_LT ? cmp < 0 : op == OP_LE ? cmp <= 0 : op == OP_GT ? cmp > 0 : cmp >= 0;
        return 0;
    }
}

static int call_macro(jctx *c, const jnode *m, const jargs *a, jv *out) {
    if (a->n_pos > m->n_kw)
        return jerr(c, "macro '%.*s' takes not more than %d argument(s)", (int)m->name.n, m->name.p, m->n_kw);
    jframe f = {.parent = c->root};
    jv vals[64];
    bool set[64] = {false};
    for (int i = 0; i < a->n_pos; i++) {
        vals[i] = a->pos[i];
        set[i] = true;
    }
    for (int k = 0; k < a->n_kw; k++) {
        int i;
        for (i = 0; i < m->n_kw && !jstr_eq(m->kw_names[i], a->kw_names[k]); i++) {}
        if (i == m->n_kw)
            return jerr(c, "macro '%.*s' takes no keyword argument '%.*s'", (int)m->name.n, m->name.p,
                        (int)a->kw_names[k].n, a->kw_names[k].p);
        vals[i] = a->kw_vals[k];
        set[i] = true;
    }
    jframe *saved_frame = c->frame;
    jbuf *saved_out = c->out;
    jbuf buf = {0};
    c->frame = &f;
    int r = 0;
    for (int i = 0; i < m->n_kw && r == 0; i++) {
        if (!set[i]) {
            if (m->kw_vals[i]) r = jinja_eval(c, m->kw_vals[i], &vals[i]);
            else vals[i] = jv_undef(m->kw_names[i]);
        }
        if (r == 0) r = jframe_set(c, &f, m->kw_names[i], vals[i]);
    }
    c->out = &buf;
    if (r == 0) r = jinja_exec(c, m->b);
    c->out = saved_out;
    c->frame = saved_frame;
    c->ctl = CTL_NONE;
    if (r < 0) return -1;
    *out = jv_str(jbuf_str(&buf));
    return 0;
}

int jinja_call(jctx *c, jv callee, const jargs *a, jv *out) {
    switch (callee.kind) {
    case JV_FUNC: return jinja_call_global(c, callee.u.fn, a, out);
    case JV_METHOD: return jinja_call_method(c, callee.u.method->self, callee.u.method->name, a, out);
    case JV_MACRO: return call_macro(c, callee.u.macro, a, out);
    case JV_UNDEF: return jerr(c, "'%.*s' is undefined", (int)callee.u.s.n, callee.u.s.p);
    default: return jerr(c, "'%s' object is not callable", jv_type_name(callee));
    }
}

static int eval_inner(jctx *c, const jnode *n, jv *out) {
    jv a, b;
    switch (n->type) {
    case N_LIT: *out = n->lit; return 0;
    case N_NAME: return jinja_lookup(c, n->name, out);
    case N_LIST:
    case N_TUPLE:
        if (jlist_new(c, (size_t)n->n_kids, n->type == N_TUPLE, out) < 0) return -1;
        for (int i = 0; i < n->n_kids; i++)
            if (jinja_eval(c, n->kids[i], &out->u.list->items[i]) < 0) return -1;
        return 0;
    case N_DICT:
        if (jdict_new(c, out) < 0) return -1;
        for (int i = 0; i + 1 < n->n_kids; i += 2) {
            if (jinja_eval(c, n->kids[i], &a) < 0 || jinja_eval(c, n->kids[i + 1], &b) < 0) return -1;
            if (jv_check_hashable(c, a) < 0) return -1;
            if (jdict_set(c, out->u.dict, a, b) < 0) return -1;
        }
        return 0;
    case N_ATTR:
        if (jinja_eval(c, n->a, &a) < 0) return -1;
        c->line = n->line;
        return jv_getattr(c, a, n->name, out);
    case N_ITEM:
        if (jinja_eval(c, n->a, &a) < 0 || jinja_eval(c, n->b, &b) < 0) return -1;
        c->line = n->line;
        return jv_getitem(c, a, b, out);
    case N_SLICE: return eval_slice(c, n, out);
    case N_CALL: {
        jv pos[MAX_ARGS], kw[MAX_ARGS];
        jargs args;
        if (jinja_eval(c, n->a, &a) < 0 || eval_args(c, n, pos, kw, &args) < 0) return -1;
        return jinja_call(c, a, &args, out);
    }
    case N_FILTER:
        if (!n->a) return jerr(c, "filter without a value");
        if (jinja_eval(c, n->a, &a) < 0) return -1;
        return apply_filter_node(c, n, a, out);
    case N_TEST: {
        jv pos[MAX_ARGS], kw[MAX_ARGS];
        jargs args;
        bool r;
        if (jinja_eval(c, n->a, &a) < 0 || eval_args(c, n, pos, kw, &args) < 0) return -1;
        if (jinja_apply_test(c, n->op, a, &args, &r) < 0) return -1;
        *out = jv_bool(r);
        return 0;
    }
    case N_NEG:
    case N_POS:
        if (jinja_eval(c, n->a, &a) < 0) return -1;
        c->line = n->line;
        if (a.kind == JV_BOOL) a = jv_int(a.u.b);
        if (a.kind == JV_INT) {
            if (n->type == N_NEG && a.u.i == INT64_MIN) return jerr(c, "integer overflow");
            *out = jv_int(n->type == N_NEG ? -a.u.i : a.u.i);
        } else if (a.kind == JV_FLOAT) {
            *out = jv_float(n->type == N_NEG ? -a.u.f : a.u.f);
        } else {
            if (a.kind == JV_UNDEF) return jerr(c, "'%.*s' is undefined", (int)a.u.s.n, a.u.s.p);
            return jerr(c, "bad operand type for unary %s: '%s'", n->type == N_NEG ? "-" : "+", jv_type_name(a));
        }
        return 0;
    case N_NOT:
        if (jinja_eval(c, n->a, &a) < 0) return -1;
        *out = jv_bool(!jv_truthy(a));
        return 0;
    case N_AND:
    case N_OR:
        if (jinja_eval(c, n->a, &a) < 0) return -1;
        if (jv_truthy(a) == (n->type == N_OR)) {
            *out = a;
            return 0;
        }
        return jinja_eval(c, n->b, out);
    case N_BINOP:
        if (jinja_eval(c, n->a, &a) < 0 || jinja_eval(c, n->b, &b) < 0) return -1;
        c->line = n->line;
        return jv_binop(c, n->op, a, b, out);
    case N_COMPARE: {
        if (jinja_eval(c, n->kids[0], &a) < 0) return -1;
        for (int i = 1; i < n->n_kids; i++) {
            bool r;
            if (jinja_eval(c, n->kids[i], &b) < 0) return -1;
            c->line = n->line;
            if (compare_op(c, n->ops[i - 1], a, b, &r) < 0) return -1;
            if (!r) {
                *out = jv_bool(false);
                return 0;
            }
            a = b;
        }
        *out = jv_bool(true);
        return 0;
    }
    case N_COND:
        if (jinja_eval(c, n->b, &a) < 0) return -1;
        if (jv_truthy(a)) return jinja_eval(c, n->a, out);
        if (n->c) return jinja_eval(c, n->c, out);
        *out = jv_undef(JSTR_LIT("else"));
        return 0;
    default: return jerr(c, "internal error: statement used as expression");
    }
}

int jinja_eval(jctx *c, const jnode *n, jv *out) {
    if (enter(c, n->line) < 0) return -1;
    int r = eval_inner(c, n, out);
    c->depth--;
    return r;
}

/* ---- statements ---- */

static int assign(jctx *c, const jnode *target, jv val) {
    if (target->type == N_NAME) return jframe_set(c, c->frame, target->name, val);
    if (target->type == N_ATTR) {
        jv ns;
        if (jinja_lookup(c, target->a->name, &ns) < 0) return -1;
        if (ns.kind != JV_NS) return jerr(c, "cannot assign attribute on non-namespace object");
        return jdict_set(c, ns.u.dict, jv_str(target->name), val);
    }
    const jlist *items;
    if (val.kind == JV_UNDEF) return jerr(c, "'%.*s' is undefined", (int)val.u.s.n, val.u.s.p);
    if (jv_iterate(c, val, &items) < 0) return -1;
    if (items->n != (size_t)target->n_kids)
        return jerr(c, items->n > (size_t)target->n_kids ? "too many values to unpack (expected %d)"
                                                         : "not enough values to unpack (expected %d)",
                    target->n_kids);
    for (int i = 0; i < target->n_kids; i++)
        if (assign(c, target->kids[i], items->items[i]) < 0) return -1;
    return 0;
}

static int capture(jctx *c, const jnode *body, jstr *out) {
    jbuf buf = {0};
    jbuf *saved = c->out;
    c->out = &buf;
    int r = jinja_exec(c, body);
    c->out = saved;
    *out = jbuf_str(&buf);
    return r;
}

static int filter_chain(jctx *c, const jnode *n, jv *v) {
    for (int i = 0; i < n->n_kids; i++)
        if (apply_filter_node(c, n->kids[i], *v, v) < 0) return -1;
    return 0;
}

static int write_value(jctx *c, jv v) {
    if (v.kind == JV_INT) return jbuf_printf(c, c->out, "%" PRId64, v.u.i);
    if (v.kind == JV_FLOAT) {
        char tmp[64];
        jv_format_float(tmp, sizeof tmp, v.u.f);
        return jbuf_puts(c, c->out, tmp);
    }
    if (v.kind == JV_LIST || v.kind == JV_DICT || v.kind == JV_NS) return jv_repr(c, c->out, v);
    jstr s;
    if (jv_to_str(c, v, &s) < 0) return -1;
    return jbuf_put(c, c->out, s.p, s.n);
}

static int exec_for(jctx *c, const jnode *n) {
    jv seq;
    const jlist *items;
    if (jinja_eval(c, n->a, &seq) < 0) return -1;
    c->line = n->line;
    if (jv_iterate(c, seq, &items) < 0) return -1;
    jframe f = {.parent = c->frame};
    const jv *vals = items->items;
    size_t count = items->n;
    int r = 0;
    if (n->b) { /* `for x in xs if cond`: filter first, so loop.length counts what remains */
        jv *kept = count ? jalloc_array(c, count, sizeof(jv)) : NULL;
        if (count && !kept) return -1;
        size_t k = 0;
        c->frame = &f;
        for (size_t i = 0; i < count && r == 0; i++) {
            jv ok;
            jframe_clear(&f);
            r = assign(c, n->d, vals[i]);
            if (r == 0) r = jinja_eval(c, n->b, &ok);
            if (r == 0 && jv_truthy(ok)) kept[k++] = vals[i];
        }
        c->frame = f.parent;
        if (r < 0) return -1;
        vals = kept;
        count = k;
    }
    jloop *loop = jalloc(c, sizeof *loop);
    if (!loop) return -1;
    loop->items = vals;
    loop->length = count;
    loop->depth = 1;
    jv loopv = {.kind = JV_LOOP};
    loopv.u.loop = loop;
    c->frame = &f;
    c->loop_depth++;
    for (size_t i = 0; i < count && r == 0; i++) {
        c->line = n->line;
        if (++c->steps > c->lim.max_steps) {
            r = jerr(c, "evaluation step limit of %" PRIu64 " exceeded", c->lim.max_steps);
            break;
        }
        loop->index0 = i;
        jframe_clear(&f);
        r = jframe_set(c, &f, JSTR_LIT("loop"), loopv);
        if (r == 0) r = assign(c, n->d, vals[i]);
        if (r == 0) r = jinja_exec(c, n->c);
        if (c->ctl == CTL_BREAK) {
            c->ctl = CTL_NONE;
            break;
        }
        c->ctl = CTL_NONE;
    }
    c->loop_depth--;
    c->frame = f.parent;
    if (r < 0) return -1;
    if (count == 0 && n->e) return jinja_exec(c, n->e);
    return 0;
}

static int exec_stmt(jctx *c, const jnode *n) {
    jv v;
    jstr s;
    switch (n->type) {
    case N_TEXT: return jbuf_put(c, c->out, n->lit.u.s.p, n->lit.u.s.n);
    case N_OUTPUT:
        if (jinja_eval(c, n->a, &v) < 0) return -1;
        return write_value(c, v);
    case N_IF:
        for (const jnode *br = n; br;) {
            if (br->type != N_IF) return jinja_exec(c, br);
            if (jinja_eval(c, br->a, &v) < 0) return -1;
            if (jv_truthy(v)) return jinja_exec(c, br->b);
            br = br->c;
        }
        return 0;
    case N_FOR: return exec_for(c, n);
    case N_SET:
        if (jinja_eval(c, n->a, &v) < 0) return -1;
        c->line = n->line;
        return assign(c, n->d, v);
    case N_SETBLOCK:
        if (capture(c, n->b, &s) < 0) return -1;
        v = jv_str(s);
        if (filter_chain(c, n, &v) < 0) return -1;
        c->line = n->line;
        return assign(c, n->d, v);
    case N_FILTERBLOCK:
        if (capture(c, n->b, &s) < 0) return -1;
        v = jv_str(s);
        if (filter_chain(c, n, &v) < 0) return -1;
        return write_value(c, v);
    case N_BREAK: c->ctl = CTL_BREAK; return 0;
    case N_CONTINUE: c->ctl = CTL_CONTINUE; return 0;
    case N_MACRO:
        v.kind = JV_MACRO;
        v.u.macro = n;
        return jframe_set(c, c->frame, n->name, v);
    case N_WITH: {
        jframe f = {.parent = c->frame};
        jv vals[32];
        for (int i = 0; i < n->n_kw && i < 32; i++)
            if (jinja_eval(c, n->kw_vals[i], &vals[i]) < 0) return -1;
        for (int i = 0; i < n->n_kw && i < 32; i++)
            if (jframe_set(c, &f, n->kw_names[i], vals[i]) < 0) return -1;
        c->frame = &f;
        int r = jinja_exec(c, n->b);
        c->frame = f.parent;
        return r;
    }
    case N_BODY: return jinja_exec(c, n);
    default: return jerr(c, "internal error: expression used as statement");
    }
}

int jinja_exec(jctx *c, const jnode *body) {
    if (enter(c, body->line) < 0) return -1;
    int r = 0;
    for (int i = 0; i < body->n_kids && r == 0 && c->ctl == CTL_NONE; i++) {
        const jnode *s = body->kids[i];
        c->line = s->line;
        if (++c->steps > c->lim.max_steps) {
            r = jerr(c, "evaluation step limit of %" PRIu64 " exceeded", c->lim.max_steps);
            break;
        }
        r = exec_stmt(c, s);
    }
    c->depth--;
    return r;
}
