/* Regular expressions -> GBNF (the regex form of structured output, and JSON Schema's `pattern`).
 *
 * The ECMAScript subset that describes a regular language: alternation, groups ( ) and (?: ), the
 * quantifiers * + ? {n} {n,} {n,m} (lazy forms accepted: laziness does not change the language),
 * classes [...] and [^...] with ranges, . (any character but line terminators), the escapes \d \w \s
 * \D \W \S \n \r \t \f \v \0 \xHH \uHHHH \u{H...} and escaped punctuation, and ^ / $ at the ends.
 * Backreferences, lookaround, word boundaries, flags and anchors inside the pattern are errors.
 *
 * As JSON Schema's `pattern` (json_string), the pattern describes the decoded string but the output is
 * the JSON text of it: characters that JSON must escape are written as their escapes, and an
 * unanchored side matches any characters there (a pattern is a search). As the regex form it matches
 * the whole output. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/gr_internal.h"

#define RX_MAX_RANGES 512

typedef struct rx {
    const char *s, *p, *end;
    gr_buf *out;
    bool json;
    pith_err *err;
    int failed;
    int depth;
} rx;

typedef struct cpset {
    uint32_t r[RX_MAX_RANGES * 2];
    int n;
} cpset;

static int rfail(rx *x, const char *what) {
    if (!x->failed) pith_errf(x->err, "regex: %s at offset %d", what, (int)(x->p - x->s));
    x->failed = 1;
    return -1;
}

static int add_range(rx *x, cpset *c, uint32_t lo, uint32_t hi) {
    if (c->n >= RX_MAX_RANGES) return rfail(x, "character class too large");
    c->r[2 * c->n] = lo;
    c->r[2 * c->n + 1] = hi;
    c->n++;
    return 0;
}

static int cmp_pair(const void *a, const void *b) {
    const uint32_t *p = a, *q = b;
    return p[0] < q[0] ? -1 : p[0] > q[0];
}

static void normalize(cpset *c) {
    qsort(c->r, (size_t)c->n, 2 * sizeof(uint32_t), cmp_pair);
    int m = 0;
    for (int i = 0; i < c->n; i++) {
        if (m && c->r[2 * i] <= c->r[2 * (m - 1) + 1] + 1) {
            if (c->r[2 * i + 1] > c->r[2 * (m - 1) + 1]) c->r[2 * (m - 1) + 1] = c->r[2 * i + 1];
        } else {
            c->r[2 * m] = c->r[2 * i];
            c->r[2 * m + 1] = c->r[2 * i + 1];
            m++;
        }
    }
    c->n = m;
}

static void complement(cpset *c) {
    normalize(c);
    cpset o;
    o.n = 0;
    uint32_t next = 0;
    for (int i = 0; i < c->n; i++) {
        if (c->r[2 * i] > next) { o.r[2 * o.n] = next; o.r[2 * o.n + 1] = c->r[2 * i] - 1; o.n++; }
        next = c->r[2 * i + 1] + 1;
    }
    if (next <= 0x10FFFF) { o.r[2 * o.n] = next; o.r[2 * o.n + 1] = 0x10FFFF; o.n++; }
    *c = o;
}

static int add_escape_class(rx *x, cpset *c, char e) {
    cpset t;
    t.n = 0;
    char lower = (char)(e | 0x20);
    if (lower == 'd') add_range(x, &t, '0', '9');
    else if (lower == 'w') {
        add_range(x, &t, '0', '9');
        add_range(x, &t, 'A', 'Z');
        add_range(x, &t, 'a', 'z');
        add_range(x, &t, '_', '_');
    } else {
        static const uint32_t sp[][2] = {{9, 13}, {32, 32}, {0xA0, 0xA0}, {0x1680, 0x1680}, {0x2000, 0x200A},
                                         {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000},
                                         {0xFEFF, 0xFEFF}};
        for (size_t i = 0; i < sizeof sp / sizeof sp[0]; i++) add_range(x, &t, sp[i][0], sp[i][1]);
    }
    if (e >= 'A' && e <= 'Z') complement(&t);
    for (int i = 0; i < t.n; i++)
        if (add_range(x, c, t.r[2 * i], t.r[2 * i + 1])) return -1;
    return 0;
}

static int hexv(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static int64_t read_hex(rx *x, int n) {
    uint32_t v = 0;
    for (int i = 0; i < n; i++) {
        int h = x->p < x->end ? hexv(*x->p) : -1;
        if (h < 0) return rfail(x, "bad hex escape");
        v = v * 16 + (uint32_t)h;
        x->p++;
    }
    return v;
}

static uint32_t utf8_next(rx *x) {
    const unsigned char *u = (const unsigned char *)x->p;
    size_t left = (size_t)(x->end - x->p);
    unsigned c = u[0];
    int n = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
    if ((size_t)n > left) n = 1;
    uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
    for (int i = 1; i < n; i++) {
        if ((u[i] & 0xC0) != 0x80) { n = 1; cp = c; break; }
        cp = (cp << 6) | (u[i] & 0x3F);
    }
    x->p += n;
    return cp;
}

/* One escape after '\' (x->p at the char after the backslash): a class escape goes into c and returns
 * -2; a single char returns its code point; -1 on error. */
static int64_t parse_escape(rx *x, cpset *c) {
    if (x->p >= x->end) return rfail(x, "pattern ends with '\\'");
    char e = *x->p++;
    switch (e) {
    case 'd': case 'D': case 'w': case 'W': case 's': case 'S':
        return add_escape_class(x, c, e) ? -1 : -2;
    case 'n': return '\n';
    case 'r': return '\r';
    case 't': return '\t';
    case 'f': return '\f';
    case 'v': return '\v';
    case '0': return 0;
    case 'x': return read_hex(x, 2);
    case 'u':
        if (x->p < x->end && *x->p == '{') {
            x->p++;
            uint32_t v = 0;
            int n = 0;
            while (x->p < x->end && hexv(*x->p) >= 0 && n < 6) { v = v * 16 + (uint32_t)hexv(*x->p++); n++; }
            if (!n || x->p >= x->end || *x->p != '}' || v > 0x10FFFF) return rfail(x, "bad \\u{...} escape");
            x->p++;
            return v;
        }
        return read_hex(x, 4);
    case 'b': case 'B': return rfail(x, "word boundaries (\\b, \\B) are not supported");
    default:
        if (e >= '1' && e <= '9') return rfail(x, "backreferences are not supported");
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z')) return rfail(x, "unknown escape");
        return (unsigned char)e;
    }
}

/* Writes what matches one character of the set (the JSON text of it when json). */
static void emit_set(rx *x, cpset *c) {
    normalize(c);
    gr_buf *b = x->out;
    cpset raw;
    raw.n = 0;
    bool esc[0x20 + 2] = {0}, quote = false, backslash = false, any_esc = false;
    for (int i = 0; i < c->n; i++) {
        uint32_t lo = c->r[2 * i], hi = c->r[2 * i + 1];
        if (x->json) {
            for (uint32_t v = lo; v <= hi && v < 0x20; v++) esc[v] = any_esc = true;
            if (lo <= '"' && hi >= '"') quote = any_esc = true;
            if (lo <= '\\' && hi >= '\\') backslash = any_esc = true;
            /* cut out what JSON escapes */
            uint32_t cuts[3][2] = {{0, 0x1F}, {'"', '"'}, {'\\', '\\'}};
            uint32_t segs[8][2];
            int ns = 1;
            segs[0][0] = lo;
            segs[0][1] = hi;
            for (int k = 0; k < 3; k++) {
                int nn = 0;
                uint32_t tmp[8][2];
                for (int s = 0; s < ns; s++) {
                    uint32_t a = segs[s][0], z = segs[s][1];
                    if (z < cuts[k][0] || a > cuts[k][1]) { tmp[nn][0] = a; tmp[nn][1] = z; nn++; continue; }
                    if (a < cuts[k][0]) { tmp[nn][0] = a; tmp[nn][1] = cuts[k][0] - 1; nn++; }
                    if (z > cuts[k][1]) { tmp[nn][0] = cuts[k][1] + 1; tmp[nn][1] = z; nn++; }
                }
                memcpy(segs, tmp, sizeof tmp);
                ns = nn;
            }
            for (int s = 0; s < ns; s++) {
                raw.r[2 * raw.n] = segs[s][0];
                raw.r[2 * raw.n + 1] = segs[s][1];
                raw.n++;
            }
        } else {
            raw.r[2 * raw.n] = lo;
            raw.r[2 * raw.n + 1] = hi;
            raw.n++;
        }
        if (raw.n > RX_MAX_RANGES - 4) break;
    }
    int alts = (raw.n > 0) + any_esc;
    if (alts == 0) { rfail(x, "a character class that matches nothing"); return; }
    gr_buf_puts(b, "(");
    bool first = true;
    if (raw.n) {
        gr_buf_puts(b, "[");
        for (int i = 0; i < raw.n; i++) {
            if (raw.r[2 * i] == raw.r[2 * i + 1]) gr_buf_printf(b, "\\U%08X", raw.r[2 * i]);
            else gr_buf_printf(b, "\\U%08X-\\U%08X", raw.r[2 * i], raw.r[2 * i + 1]);
        }
        gr_buf_puts(b, "]");
        first = false;
    }
    if (quote) { gr_buf_printf(b, "%s\"\\\\\\\"\"", first ? "" : " | "); first = false; }
    if (backslash) { gr_buf_printf(b, "%s\"\\\\\\\\\"", first ? "" : " | "); first = false; }
    static const char *SHORT[0x20] = {[8] = "b", [9] = "t", [10] = "n", [12] = "f", [13] = "r"};
    for (int v = 0; v < 0x20; v++) {
        if (!esc[v]) continue;
        if (SHORT[v]) gr_buf_printf(b, "%s\"\\\\%s\"", first ? "" : " | ", SHORT[v]);
        else gr_buf_printf(b, "%s\"\\\\u00%02x\"", first ? "" : " | ", v);
        first = false;
    }
    gr_buf_puts(b, ")");
}

static void emit_char(rx *x, uint32_t cp) {
    cpset c;
    c.n = 1;
    c.r[0] = c.r[1] = cp;
    emit_set(x, &c);
}

static void emit_dot(rx *x) {
    cpset c;
    c.n = 0;
    add_range(x, &c, '\n', '\n');
    add_range(x, &c, '\r', '\r');
    add_range(x, &c, 0x2028, 0x2029);
    complement(&c);
    emit_set(x, &c);
}

static int parse_class(rx *x) {
    x->p++; /* [ */
    cpset c;
    c.n = 0;
    bool neg = false;
    if (x->p < x->end && *x->p == '^') { neg = true; x->p++; }
    bool first = true;
    while (x->p < x->end && (*x->p != ']' || (first && false))) {
        first = false;
        int64_t lo;
        if (*x->p == '\\') {
            x->p++;
            lo = parse_escape(x, &c);
            if (lo == -1) return -1;
            if (lo == -2) continue;
        } else {
            lo = utf8_next(x);
        }
        int64_t hi = lo;
        if (x->p + 1 < x->end && *x->p == '-' && x->p[1] != ']') {
            x->p++;
            if (*x->p == '\\') {
                x->p++;
                hi = parse_escape(x, &c);
                if (hi == -1) return -1;
                if (hi == -2) return rfail(x, "a class escape cannot end a range");
            } else {
                hi = utf8_next(x);
            }
            if (hi < lo) return rfail(x, "character range out of order");
        }
        if (add_range(x, &c, (uint32_t)lo, (uint32_t)hi)) return -1;
    }
    if (x->p >= x->end) return rfail(x, "unterminated character class");
    x->p++;
    if (neg) complement(&c);
    emit_set(x, &c);
    return x->failed ? -1 : 0;
}

static int parse_alt(rx *x);

static int parse_quant(rx *x) {
    if (x->p >= x->end) return 0;
    char q = *x->p;
    if (q == '*' || q == '+' || q == '?') {
        x->p++;
        gr_buf_put(x->out, &q, 1);
    } else if (q == '{') {
        const char *save = x->p++;
        long a = -1, b = -1;
        int digits = 0;
        long v = 0;
        while (x->p < x->end && *x->p >= '0' && *x->p <= '9') { v = v * 10 + (*x->p++ - '0'); digits++; if (v > 10000) v = 10001; }
        if (digits) a = v;
        bool comma = false;
        if (x->p < x->end && *x->p == ',') {
            comma = true;
            x->p++;
            v = 0;
            digits = 0;
            while (x->p < x->end && *x->p >= '0' && *x->p <= '9') { v = v * 10 + (*x->p++ - '0'); digits++; if (v > 10000) v = 10001; }
            if (digits) b = v;
        }
        if (x->p >= x->end || *x->p != '}' || a < 0) {
            /* not a quantifier: a literal '{' in ECMAScript's annex B; we refuse it to stay exact */
            x->p = save;
            return rfail(x, "a '{' that is not a quantifier (escape it as \\{)");
        }
        x->p++;
        if (a > 10000 || b > 10000) return rfail(x, "repetition count over 10000");
        if (!comma) gr_buf_printf(x->out, "{%ld}", a);
        else if (b < 0) gr_buf_printf(x->out, "{%ld,}", a);
        else {
            if (b < a) return rfail(x, "repetition {n,m} with m < n");
            gr_buf_printf(x->out, "{%ld,%ld}", a, b);
        }
    } else {
        return 0;
    }
    if (x->p < x->end && *x->p == '?') x->p++; /* lazy: same language */
    if (x->p < x->end && (*x->p == '*' || *x->p == '+' || *x->p == '?' || *x->p == '{'))
        return rfail(x, "nothing to repeat");
    return 0;
}

static int parse_seq(rx *x) {
    gr_buf_puts(x->out, "(");
    bool empty = true;
    while (x->p < x->end && *x->p != '|' && *x->p != ')') {
        char ch = *x->p;
        gr_buf_puts(x->out, " ");
        if (ch == '(') {
            x->p++;
            if (x->p < x->end && *x->p == '?') {
                if (x->p + 1 < x->end && x->p[1] == ':') x->p += 2;
                else if (x->p + 1 < x->end && x->p[1] == '<' && x->p + 2 < x->end && x->p[2] != '=' && x->p[2] != '!') {
                    while (x->p < x->end && *x->p != '>') x->p++; /* named group */
                    if (x->p >= x->end) return rfail(x, "unterminated group name");
                    x->p++;
                } else return rfail(x, "lookaround and inline flags are not supported");
            }
            if (++x->depth > 100) return rfail(x, "groups nested too deeply");
            if (parse_alt(x)) return -1;
            x->depth--;
            if (x->p >= x->end || *x->p != ')') return rfail(x, "unclosed '('");
            x->p++;
        } else if (ch == '[') {
            if (parse_class(x)) return -1;
        } else if (ch == '.') {
            x->p++;
            emit_dot(x);
        } else if (ch == '\\') {
            x->p++;
            cpset c;
            c.n = 0;
            int64_t v = parse_escape(x, &c);
            if (v == -1) return -1;
            if (v == -2) emit_set(x, &c);
            else emit_char(x, (uint32_t)v);
        } else if (ch == '^' || ch == '$') {
            return rfail(x, "anchors are supported only at the start (^) and the end ($)");
        } else if (ch == '*' || ch == '+' || ch == '?' || ch == '{') {
            return rfail(x, "nothing to repeat");
        } else if (ch == ']' || ch == '}') {
            x->p++;
            emit_char(x, (unsigned char)ch);
        } else {
            emit_char(x, utf8_next(x));
        }
        if (x->failed || parse_quant(x)) return -1;
        empty = false;
    }
    gr_buf_puts(x->out, empty ? " \"\" )" : " )");
    return 0;
}

static int parse_alt(rx *x) {
    gr_buf_puts(x->out, "(");
    for (;;) {
        if (parse_seq(x)) return -1;
        if (x->p < x->end && *x->p == '|') {
            x->p++;
            gr_buf_puts(x->out, " | ");
            continue;
        }
        break;
    }
    gr_buf_puts(x->out, ")");
    return 0;
}

int gr_regex_to_gbnf(const char *re, size_t len, const char *name, bool json_string, gr_buf *out, int *counter,
                     pith_err *err) {
    (void)counter;
    rx x = {.s = re, .p = re, .end = re + len, .out = out, .json = json_string, .err = err};
    bool start_anchor = false, end_anchor = false;
    if (x.p < x.end && *x.p == '^') { start_anchor = true; x.p++; }
    if (x.end > x.p && x.end[-1] == '$' && (x.end - 1 == x.p || x.end[-2] != '\\')) { end_anchor = true; x.end--; }
    gr_buf_printf(out, "%s ::= ", name);
    bool search = json_string;
    cpset all;
    all.n = 1;
    all.r[0] = 0;
    all.r[1] = 0x10FFFF;
    if (search && !start_anchor) { emit_set(&x, &all); gr_buf_puts(out, "* "); all.n = 1; all.r[0] = 0; all.r[1] = 0x10FFFF; }
    if (parse_alt(&x)) return -1;
    if (x.p != x.end) return rfail(&x, "unmatched ')'");
    if (search && !end_anchor) { gr_buf_puts(out, " "); emit_set(&x, &all); gr_buf_puts(out, "*"); }
    gr_buf_puts(out, "\n");
    if (x.failed) return -1;
    if (out->oom) return pith_errf(err, "regex: out of memory");
    return 0;
}

int pith_grammar_regex_to_gbnf(const char *regex, size_t len, const char *root_name, char **gbnf, pith_err *err) {
    *gbnf = NULL;
    if (!root_name || !*root_name) root_name = "root";
    if (!regex) return pith_errf(err, "regex: no pattern");
    gr_buf b = {0};
    int counter = 0;
    if (gr_regex_to_gbnf(regex, len, root_name, false, &b, &counter, err)) {
        free(b.p);
        return -1;
    }
    *gbnf = b.p;
    return 0;
}
