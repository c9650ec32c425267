/* GBNF (llama.cpp's grammar format) -> ir.
 *
 *   rule ::= alternatives       names: [A-Za-z0-9_-]+; comments: # to the end of the line
 *   "literal" (UTF-8, escapes \n \r \t \\ \" \xHH \uHHHH \UHHHHHHHH), [a-z0-9_] and [^...] (code points),
 *   . (any code point), ( groups ), name references, and the quantifiers * + ? {m} {m,} {m,n} {,n}.
 * A rule ends where the next `name ::=` begins, so alternatives may continue over lines. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/gr_internal.h"

#define GBNF_MAX_REPEAT 10000

typedef struct parser {
    const char *s, *p, *end;
    gr_ir *ir;
    pith_err *err;
    int failed;
    int depth;
    /* elements in the sequences being built (not yet in ir): with ir->n_elems, what GR_MAX_ELEMS bounds */
    int64_t pending;
} parser;

static void where(const parser *ps, const char *at, int *line, int *col) {
    *line = 1;
    *col = 1;
    for (const char *q = ps->s; q < at && q < ps->end; q++) {
        if (*q == '\n') { (*line)++; *col = 1; }
        else (*col)++;
    }
}

static int fail(parser *ps, const char *at, const char *what) {
    if (ps->failed) return -1;
    int line, col;
    where(ps, at, &line, &col);
    ps->failed = 1;
    return pith_errf(ps->err, "grammar: %s at line %d, column %d", what, line, col);
}

static int oom(parser *ps) {
    if (!ps->failed) {
        if (ps->ir->too_large) gr_too_large(ps->err);
        else pith_errf(ps->err, "grammar: out of memory");
    }
    ps->failed = 1;
    return -1;
}

/* Whether `more` elements still fit under GR_MAX_ELEMS; else the limit's error. */
static int room(parser *ps, int64_t more) {
    if (ps->ir->n_elems + ps->pending + more <= GR_MAX_ELEMS) return 0;
    ps->ir->too_large = true;
    return oom(ps);
}

/* gr_seq_push for the parser's own sequences, counted in ps->pending */
static int put(parser *ps, gr_seq *s, int kind, int val) {
    if (room(ps, 1)) return -1;
    if (gr_seq_push(s, kind, val)) return oom(ps);
    ps->pending++;
    return 0;
}

static void drop(parser *ps, gr_seq *s) {
    ps->pending -= s->n;
    gr_seq_free(s);
}

static bool is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

static void skip_space(parser *ps) {
    while (ps->p < ps->end) {
        char c = *ps->p;
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r') ps->p++;
        else if (c == '#') {
            while (ps->p < ps->end && *ps->p != '\n') ps->p++;
        } else break;
    }
}

/* At a rule definition: name followed by ::= */
static bool at_definition(const parser *ps) {
    const char *q = ps->p;
    if (q >= ps->end || !is_name_char(*q)) return false;
    while (q < ps->end && is_name_char(*q)) q++;
    while (q < ps->end && (*q == ' ' || *q == '\t')) q++;
    return ps->end - q >= 3 && memcmp(q, "::=", 3) == 0;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* One UTF-8 code point (invalid bytes are taken as themselves). */
static uint32_t decode_utf8(parser *ps) {
    const unsigned char *u = (const unsigned char *)ps->p;
    size_t left = (size_t)(ps->end - ps->p);
    unsigned c = u[0];
    int n = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
    if ((size_t)n > left) n = 1;
    uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
    for (int i = 1; i < n; i++) {
        if ((u[i] & 0xC0) != 0x80) { n = 1; cp = c; break; }
        cp = (cp << 6) | (u[i] & 0x3F);
    }
    ps->p += n;
    return cp;
}

/* A character of a literal or class, escapes decoded. *is_byte: a \xHH escape (a raw byte in
 * literals). Returns -1 on error. */
static int64_t parse_char(parser *ps, bool *is_byte) {
    *is_byte = false;
    if (ps->p >= ps->end) return fail(ps, ps->p, "unexpected end of grammar");
    if (*ps->p != '\\') return decode_utf8(ps);
    const char *at = ps->p++;
    if (ps->p >= ps->end) return fail(ps, at, "unfinished escape");
    char e = *ps->p++;
    int digits = 0;
    switch (e) {
    case 'n': return '\n';
    case 'r': return '\r';
    case 't': return '\t';
    case 'x': digits = 2; *is_byte = true; break;
    case 'u': digits = 4; break;
    case 'U': digits = 8; break;
    default:
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '0' && e <= '9'))
            return fail(ps, at, "unknown escape");
        return (unsigned char)e;
    }
    uint32_t v = 0;
    for (int i = 0; i < digits; i++) {
        int h = ps->p < ps->end ? hexval(*ps->p) : -1;
        if (h < 0) return fail(ps, at, "bad hex escape");
        v = v * 16 + (uint32_t)h;
        ps->p++;
    }
    if (v > 0x10FFFF) return fail(ps, at, "code point out of range");
    return v;
}

static int push_byte(parser *ps, gr_seq *seq, unsigned b) {
    gr_bytes set = {{0}};
    gr_bytes_set(&set, b);
    int c = gr_ir_class(ps->ir, &set);
    if (c < 0) return oom(ps);
    return put(ps, seq, GR_BYTES, c);
}

static int push_utf8(parser *ps, gr_seq *seq, uint32_t cp) {
    unsigned char b[4];
    int n;
    if (cp < 0x80) { b[0] = (unsigned char)cp; n = 1; }
    else if (cp < 0x800) { b[0] = (unsigned char)(0xC0 | (cp >> 6)); b[1] = (unsigned char)(0x80 | (cp & 0x3F)); n = 2; }
    else if (cp < 0x10000) {
        b[0] = (unsigned char)(0xE0 | (cp >> 12)); b[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        b[2] = (unsigned char)(0x80 | (cp & 0x3F)); n = 3;
    } else {
        b[0] = (unsigned char)(0xF0 | (cp >> 18)); b[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
        b[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F)); b[3] = (unsigned char)(0x80 | (cp & 0x3F)); n = 4;
    }
    for (int i = 0; i < n; i++)
        if (push_byte(ps, seq, b[i])) return -1;
    return 0;
}

static int parse_alternatives(parser *ps, int rule);

static int parse_literal(parser *ps, gr_seq *item) {
    const char *start = ps->p++;
    while (ps->p < ps->end && *ps->p != '"') {
        bool is_byte;
        int64_t c = parse_char(ps, &is_byte);
        if (c < 0) return -1;
        if (is_byte ? push_byte(ps, item, (unsigned)c) : push_utf8(ps, item, (uint32_t)c)) return -1;
    }
    if (ps->p >= ps->end) return fail(ps, start, "unterminated string literal");
    ps->p++;
    return 0;
}

static int parse_class(parser *ps, gr_seq *item) {
    const char *start = ps->p++;
    bool negate = false;
    if (ps->p < ps->end && *ps->p == '^') { negate = true; ps->p++; }
    uint32_t *r = NULL;
    int n = 0, cap = 0;
    while (ps->p < ps->end && *ps->p != ']') {
        bool is_byte;
        int64_t lo = parse_char(ps, &is_byte), hi;
        if (lo < 0) { free(r); return -1; }
        hi = lo;
        if (ps->p + 1 < ps->end && *ps->p == '-' && ps->p[1] != ']') {
            ps->p++;
            hi = parse_char(ps, &is_byte);
            if (hi < 0) { free(r); return -1; }
            if (hi < lo) { free(r); return fail(ps, start, "character range out of order"); }
        }
        if (n == cap) {
            cap = cap ? cap * 2 : 8;
            uint32_t *q = realloc(r, (size_t)cap * 2 * sizeof *r);
            if (!q) { free(r); return oom(ps); }
            r = q;
        }
        r[2 * n] = (uint32_t)lo;
        r[2 * n + 1] = (uint32_t)hi;
        n++;
    }
    if (ps->p >= ps->end) { free(r); return fail(ps, start, "unterminated character class"); }
    ps->p++;
    int before = item->n;
    int rc = room(ps, 1) ? -1 : gr_ir_push_codepoints(ps->ir, item, r, n, negate);
    free(r);
    if (rc) return oom(ps);
    ps->pending += item->n - before;
    if (!negate && n == 0) return fail(ps, start, "empty character class matches nothing");
    return 0;
}

static long parse_int(parser *ps) {
    long v = 0;
    int digits = 0;
    while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') {
        v = v * 10 + (*ps->p - '0');
        if (v > GBNF_MAX_REPEAT) v = GBNF_MAX_REPEAT + 1;
        ps->p++;
        digits++;
    }
    return digits ? v : -1;
}

/* Makes `item` one element (wrapping a longer sequence in a rule). */
static int as_one(parser *ps, gr_seq *item) {
    if (item->n == 1) return 0;
    int r = gr_ir_anon_rule(ps->ir, "group");
    if (r < 0 || gr_ir_add_alt(ps->ir, r, item)) return oom(ps);
    ps->pending -= item->n;
    item->n = 0;
    return put(ps, item, GR_REF, r);
}

/* Appends x{min,max} (max < 0: unbounded) to seq, x being the single element e. */
static int push_repeat(parser *ps, gr_seq *seq, gr_elem e, long min, long max) {
    /* all it will add, before any of it is allocated: min copies, then a rule of 4 elements (x next |
     * "", the ends included) per optional copy or one for the unbounded tail, and the reference to it */
    if (room(ps, min + (max < 0 ? 4 : 4 * (max - min)) + 1)) return -1;
    for (long i = 0; i < min; i++)
        if (put(ps, seq, e.kind, e.val)) return -1;
    if (max < 0) {
        int r = gr_ir_anon_rule(ps->ir, "star");
        if (r < 0) return oom(ps);
        gr_seq a = {0}, empty = {0};
        int bad = gr_seq_push(&a, e.kind, e.val) || gr_seq_push(&a, GR_REF, r) || gr_ir_add_alt(ps->ir, r, &a) ||
                  gr_ir_add_alt(ps->ir, r, &empty);
        gr_seq_free(&a);
        if (bad) return oom(ps);
        return put(ps, seq, GR_REF, r);
    }
    int prev = -1, first = -1;
    for (long i = min; i < max; i++) {
        int r = gr_ir_anon_rule(ps->ir, "opt");
        if (r < 0) return oom(ps);
        if (e.kind == GR_BYTES) {
            if (first < 0) first = r;
            ps->ir->rules[r].chain_first = first;
            ps->ir->rules[r].chain_k = (int)(i - min + 1);
        }
        gr_seq a = {0}, empty = {0};
        int bad = gr_seq_push(&a, e.kind, e.val) || (prev >= 0 && gr_seq_push(&a, GR_REF, prev)) ||
                  gr_ir_add_alt(ps->ir, r, &a) || gr_ir_add_alt(ps->ir, r, &empty);
        gr_seq_free(&a);
        if (bad) return oom(ps);
        prev = r;
    }
    if (prev >= 0 && put(ps, seq, GR_REF, prev)) return -1;
    return 0;
}

static int parse_sequence(parser *ps, gr_seq *seq) {
    for (;;) {
        skip_space(ps);
        if (ps->p >= ps->end) return 0;
        char c = *ps->p;
        if (c == '|' || c == ')') return 0;
        if (at_definition(ps)) return 0;
        gr_seq item = {0};
        const char *at = ps->p;
        if (c == '"') {
            if (parse_literal(ps, &item)) { drop(ps, &item); return -1; }
        } else if (c == '[') {
            if (parse_class(ps, &item)) { drop(ps, &item); return -1; }
        } else if (c == '.') {
            ps->p++;
            uint32_t all[2] = {0, 0x10FFFF};
            if (room(ps, 1) || gr_ir_push_codepoints(ps->ir, &item, all, 1, false)) { drop(ps, &item); return oom(ps); }
            ps->pending += item.n;
        } else if (c == '(') {
            ps->p++;
            if (++ps->depth > 200) { drop(ps, &item); return fail(ps, at, "groups nested too deeply"); }
            int r = gr_ir_anon_rule(ps->ir, "group");
            if (r < 0) { drop(ps, &item); return oom(ps); }
            if (parse_alternatives(ps, r)) { drop(ps, &item); return -1; }
            ps->depth--;
            skip_space(ps);
            if (ps->p >= ps->end || *ps->p != ')') { drop(ps, &item); return fail(ps, at, "unclosed '('"); }
            ps->p++;
            if (put(ps, &item, GR_REF, r)) { drop(ps, &item); return -1; }
        } else if (is_name_char(c)) {
            const char *n0 = ps->p;
            while (ps->p < ps->end && is_name_char(*ps->p)) ps->p++;
            int r = gr_ir_rule(ps->ir, n0, (size_t)(ps->p - n0));
            if (r < 0) { drop(ps, &item); return oom(ps); }
            if (!ps->ir->rules[r].line) where(ps, n0, &ps->ir->rules[r].line, &ps->ir->rules[r].col);
            if (put(ps, &item, GR_REF, r)) { drop(ps, &item); return -1; }
        } else {
            drop(ps, &item);
            return fail(ps, at, "unexpected character");
        }
        /* quantifier */
        long min = 1, max = 1;
        if (ps->p < ps->end) {
            const char *q = ps->p;
            if (*q == '*') { min = 0; max = -1; ps->p++; }
            else if (*q == '+') { min = 1; max = -1; ps->p++; }
            else if (*q == '?') { min = 0; max = 1; ps->p++; }
            else if (*q == '{') {
                ps->p++;
                skip_space(ps);
                long a = parse_int(ps), b;
                skip_space(ps);
                if (ps->p < ps->end && *ps->p == ',') {
                    ps->p++;
                    skip_space(ps);
                    b = parse_int(ps);
                    if (a < 0) a = 0;
                } else {
                    if (a < 0) { drop(ps, &item); return fail(ps, q, "bad repetition"); }
                    b = a;
                }
                skip_space(ps);
                if (ps->p >= ps->end || *ps->p != '}') { drop(ps, &item); return fail(ps, q, "bad repetition"); }
                ps->p++;
                if (a > GBNF_MAX_REPEAT || b > GBNF_MAX_REPEAT) {
                    drop(ps, &item);
                    return fail(ps, q, "repetition count over 10000");
                }
                if (b >= 0 && b < a) { drop(ps, &item); return fail(ps, q, "repetition {m,n} with n < m"); }
                min = a;
                max = b;
            }
        }
        if (min == 1 && max == 1) {
            for (int i = 0; i < item.n; i++)
                if (put(ps, seq, item.e[i].kind, item.e[i].val)) { drop(ps, &item); return -1; }
        } else if (item.n > 0) {
            if (as_one(ps, &item) || push_repeat(ps, seq, item.e[0], min, max)) { drop(ps, &item); return -1; }
        }
        drop(ps, &item);
    }
}

static int parse_alternatives(parser *ps, int rule) {
    for (;;) {
        gr_seq seq = {0};
        if (parse_sequence(ps, &seq)) { drop(ps, &seq); return -1; }
        if (gr_ir_add_alt(ps->ir, rule, &seq)) { drop(ps, &seq); return oom(ps); }
        drop(ps, &seq);
        skip_space(ps);
        if (ps->p < ps->end && *ps->p == '|') { ps->p++; continue; }
        return 0;
    }
}

int gr_gbnf_parse(const char *src, size_t len, gr_ir *ir, int *root, pith_err *err) {
    parser ps = {.s = src, .p = src, .end = src + len, .ir = ir, .err = err};
    int n_defs = 0;
    for (;;) {
        skip_space(&ps);
        if (ps.p >= ps.end) break;
        const char *n0 = ps.p;
        if (!is_name_char(*ps.p)) return fail(&ps, ps.p, "expected a rule name");
        while (ps.p < ps.end && is_name_char(*ps.p)) ps.p++;
        size_t nl = (size_t)(ps.p - n0);
        while (ps.p < ps.end && (*ps.p == ' ' || *ps.p == '\t')) ps.p++;
        if (ps.end - ps.p < 3 || memcmp(ps.p, "::=", 3) != 0) return fail(&ps, ps.p, "expected '::='");
        ps.p += 3;
        int r = gr_ir_rule(ir, n0, nl);
        if (r < 0) return oom(&ps);
        if (ir->rules[r].defined) {
            char msg[160];
            snprintf(msg, sizeof msg, "rule '%.*s' defined twice", (int)(nl > 60 ? 60 : nl), n0);
            return fail(&ps, n0, msg);
        }
        ir->rules[r].defined = true;
        if (parse_alternatives(&ps, r)) return -1;
        skip_space(&ps);
        if (ps.p < ps.end && !at_definition(&ps)) return fail(&ps, ps.p, "unexpected character");
        n_defs++;
    }
    if (!n_defs) return pith_errf(err, "grammar: empty grammar (no rules)");
    int r = -1;
    for (int i = 0; i < ir->n_rules; i++)
        if (strcmp(ir->rules[i].name, "root") == 0) r = i;
    if (r < 0 || !ir->rules[r].defined) return pith_errf(err, "grammar: no 'root' rule");
    *root = r;
    return gr_ir_check(ir, err);
}
