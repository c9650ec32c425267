/* Lexer for the chat-template interpreter.
 *
 * Mirrors jinja2's lexer with the settings Hugging Face uses (trim_blocks, lstrip_blocks,
 * keep_trailing_newline off): newlines are normalized to \n and one trailing newline is dropped; text
 * before `{%-`/`{{-`/`{#-` loses its trailing whitespace and `-%}`/`-}}`/`-#}` eat the whitespace after;
 * a block or comment tag alone on a line (only whitespace before it) loses that indentation unless
 * written `{%+`; the newline right after `%}` or `#}` is dropped unless written `+%}`. Inside tags,
 * brackets must balance and an end tag only counts outside brackets, as in jinja2. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/jinja.h"

typedef struct lexer {
    jarena *a;
    pith_err *err;
    const char *s;
    size_t n, pos;
    int line;
    bool line_starting; /* the previous match ended with a newline (or nothing came before) */
    jtok *v;
    size_t nt, cap;
} lexer;

static int lex_err(lexer *L, int line, const char *fmt, const char *arg) {
    if (!L->err) return -1;
    char what[300];
    snprintf(what, sizeof what, fmt, arg);
    snprintf(L->err->msg, sizeof L->err->msg, "chat template: syntax error: %s at line %d", what, line);
    return -1;
}

static int oom(lexer *L) {
    if (L->err) snprintf(L->err->msg, sizeof L->err->msg, "chat template: template too large (memory limit)");
    return -1;
}

static int push(lexer *L, jtok_type type, int line, const char *p, size_t n) {
    if (L->nt == L->cap) {
        size_t cap = L->cap ? L->cap * 2 : 256;
        jtok *v = jarena_alloc(L->a, cap * sizeof(jtok));
        if (!v) return oom(L);
        if (L->nt) memcpy(v, L->v, L->nt * sizeof(jtok));
        L->v = v;
        L->cap = cap;
    }
    jtok *t = &L->v[L->nt++];
    memset(t, 0, sizeof *t);
    t->type = type;
    t->line = line;
    t->s = (jstr){p, n};
    return 0;
}

static int count_nl(const char *p, size_t n) {
    int k = 0;
    for (size_t i = 0; i < n; i++) k += p[i] == '\n';
    return k;
}

/* Length of text without its trailing Python whitespace. */
static size_t rstrip_len(const char *p, size_t n) {
    size_t keep = 0, i = 0;
    while (i < n) {
        uint32_t cp;
        size_t k = ju_decode(p, n, i, &cp);
        i += k;
        if (!ju_is_space(cp)) keep = i;
    }
    return keep;
}

/* Bytes of Python whitespace starting at i. */
static size_t space_run(const char *p, size_t n, size_t i) {
    size_t start = i;
    while (i < n) {
        uint32_t cp;
        size_t k = ju_decode(p, n, i, &cp);
        if (!ju_is_space(cp)) break;
        i += k;
    }
    return i - start;
}

/* Emits the text before a tag, applying `-` stripping or lstrip_blocks. block_like: a block, comment or
 * raw tag (lstrip_blocks does not apply to {{ }}). */
static int emit_text(lexer *L, const char *p, size_t n, char sign, bool block_like) {
    int line = L->line;
    size_t keep = n;
    if (sign == '-') {
        keep = rstrip_len(p, n);
    } else if (sign != '+' && block_like) {
        size_t l_pos = n;
        while (l_pos > 0 && p[l_pos - 1] != '\n') l_pos--;
        if ((l_pos > 0 || L->line_starting) && l_pos < n && space_run(p, n, l_pos) == n - l_pos) keep = l_pos;
    }
    L->line += count_nl(p, n);
    if (keep == 0) return 0;
    return push(L, T_TEXT, line, p, keep);
}

static bool is_ident_start(char ch) { return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_'; }
static bool is_digit(char ch) { return ch >= '0' && ch <= '9'; }

/* (\d+_)*\d+ at i; returns bytes matched (0 if none). */
static size_t digits_us(const char *s, size_t n, size_t i) {
    size_t j = i;
    if (j >= n || !is_digit(s[j])) return 0;
    while (j < n) {
        while (j < n && is_digit(s[j])) j++;
        if (j + 1 < n && s[j] == '_' && is_digit(s[j + 1])) {
            j++;
            continue;
        }
        break;
    }
    return j - i;
}

static int hexval(char ch);

/* 0x1F, 0o17, 0b101 (digits may be separated by single underscores), as jinja2's integer_re. */
static int lex_prefixed_int(lexer *L, int base) {
    const char *s = L->s;
    size_t n = L->n, i = L->pos + 2;
    uint64_t v = 0;
    size_t digits = 0;
    while (i < n) {
        size_t k = i;
        if (s[k] == '_') k++;
        int d = k < n ? hexval(s[k]) : -1;
        if (d < 0 || d >= base) break;
        if (v > (uint64_t)INT64_MAX / (uint64_t)base) return lex_err(L, L->line, "integer literal too large", "");
        v = v * (uint64_t)base + (uint64_t)d;
        if (v > (uint64_t)INT64_MAX) return lex_err(L, L->line, "integer literal too large", "");
        digits++;
        i = k + 1;
    }
    if (!digits) return 1; /* not a prefixed literal after all */
    if (push(L, T_INT, L->line, s + L->pos, i - L->pos) < 0) return -1;
    L->v[L->nt - 1].i = (int64_t)v;
    L->pos = i;
    return 0;
}

static int lex_number(lexer *L) {
    const char *s = L->s;
    size_t n = L->n, i = L->pos;
    if (s[i] == '0' && i + 1 < n) {
        char p = s[i + 1];
        int base = (p == 'x' || p == 'X') ? 16 : (p == 'o' || p == 'O') ? 8 : (p == 'b' || p == 'B') ? 2 : 0;
        if (base) {
            int r = lex_prefixed_int(L, base);
            if (r <= 0) return r;
        }
    }
    size_t d = digits_us(s, n, i);
    size_t j = i + d;
    bool is_float = false;
    bool after_dot = i > 0 && s[i - 1] == '.';
    if (!after_dot) {
        size_t k = j;
        size_t frac = 0;
        if (k < n && s[k] == '.') frac = digits_us(s, n, k + 1);
        if (frac) k += 1 + frac;
        size_t e = k;
        if (e < n && (s[e] == 'e' || s[e] == 'E')) {
            e++;
            if (e < n && (s[e] == '+' || s[e] == '-')) e++;
            size_t ed = digits_us(s, n, e);
            if (ed) {
                k = e + ed;
                is_float = true;
            } else {
                is_float = frac > 0;
            }
        } else {
            is_float = frac > 0;
        }
        if (is_float) j = k;
    }
    char buf[128];
    if (j - i >= sizeof buf) return lex_err(L, L->line, "number too long", "");
    size_t m = 0;
    for (size_t x = i; x < j; x++)
        if (s[x] != '_') buf[m++] = s[x];
    buf[m] = 0;
    if (is_float) {
        if (push(L, T_FLOAT, L->line, s + i, j - i) < 0) return -1;
        L->v[L->nt - 1].f = strtod(buf, NULL);
    } else {
        /* jinja2 reads a leading zero only as `0`: 0123 is two tokens there too, an error later. */
        if (s[i] == '0') {
            j = i + 1;
            while (j < n && (s[j] == '0' || (s[j] == '_' && j + 1 < n && s[j + 1] == '0'))) j++;
            buf[0] = '0';
            buf[1] = 0;
        }
        char *end;
        unsigned long long v = strtoull(buf, &end, 10);
        if (v > INT64_MAX || strlen(buf) > 19) return lex_err(L, L->line, "integer literal too large", "");
        if (push(L, T_INT, L->line, s + i, j - i) < 0) return -1;
        L->v[L->nt - 1].i = (int64_t)v;
    }
    L->pos = j;
    return 0;
}

static int hexval(char ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

/* A quoted string, decoded the way jinja2 does (Python's unicode-escape). */
static int lex_string(lexer *L) {
    const char *s = L->s;
    size_t n = L->n, i = L->pos;
    char q = s[i];
    size_t j = i + 1;
    while (j < n && s[j] != q) {
        if (s[j] == '\\' && j + 1 < n) j++;
        j++;
    }
    if (j >= n) return lex_err(L, L->line, "unterminated string", "");
    const char *body = s + i + 1;
    size_t blen = j - i - 1;
    char *out = jarena_alloc(L->a, blen + 1);
    if (!out) return oom(L);
    size_t o = 0;
    for (size_t k = 0; k < blen;) {
        char ch = body[k];
        if (ch != '\\' || k + 1 >= blen) {
            out[o++] = ch;
            k++;
            continue;
        }
        char e = body[k + 1];
        k += 2;
        uint32_t cp = 0;
        int digits = 0;
        switch (e) {
        case '\n': continue;
        case '\\': out[o++] = '\\'; continue;
        case '\'': out[o++] = '\''; continue;
        case '"': out[o++] = '"'; continue;
        case 'a': out[o++] = '\a'; continue;
        case 'b': out[o++] = '\b'; continue;
        case 'f': out[o++] = '\f'; continue;
        case 'n': out[o++] = '\n'; continue;
        case 'r': out[o++] = '\r'; continue;
        case 't': out[o++] = '\t'; continue;
        case 'v': out[o++] = '\v'; continue;
        case 'x': digits = 2; break;
        case 'u': digits = 4; break;
        case 'U': digits = 8; break;
        case 'N': return lex_err(L, L->line, "unsupported \\N{...} escape in string", "");
        default:
            if (e >= '0' && e <= '7') {
                cp = (uint32_t)(e - '0');
                for (int m = 0; m < 2 && k < blen && body[k] >= '0' && body[k] <= '7'; m++, k++)
                    cp = cp * 8 + (uint32_t)(body[k] - '0');
                char enc[4];
                int w = ju_encode(cp, enc);
                memcpy(out + o, enc, (size_t)w);
                o += (size_t)w;
                continue;
            }
            out[o++] = '\\';
            out[o++] = e;
            continue;
        }
        for (int m = 0; m < digits; m++, k++) {
            int h = k < blen ? hexval(body[k]) : -1;
            if (h < 0) return lex_err(L, L->line, "truncated \\%s escape in string", e == 'x' ? "x" : "u");
            cp = cp * 16 + (uint32_t)h;
        }
        if (cp > 0x10FFFF) return lex_err(L, L->line, "illegal Unicode character in string", "");
        char enc[4];
        int w = ju_encode(cp, enc);
        /* An escape is never shorter than its encoding (\xNN: 4 bytes for at most 2). */
        memcpy(out + o, enc, (size_t)w);
        o += (size_t)w;
    }
    if (push(L, T_STRING, L->line, out, o) < 0) return -1;
    L->line += count_nl(body, blen);
    L->pos = j + 1;
    return 0;
}

static const char *const OPS2[] = {"//", "**", "==", "!=", ">=", "<="};
static const char OPS1[] = "+-/*%~[](){}><=.:|,;";

/* Tokens inside {{ }} or {% %} up to and including the end tag. */
static int lex_tag(lexer *L, bool block, int open_line) {
    char stack[256];
    int depth = 0;
    const char *s = L->s;
    size_t n = L->n;
    for (;;) {
        size_t i = L->pos;
        if (i >= n) return lex_err(L, open_line, "unexpected end of template, %s was not closed", block ? "'{%'" : "'{{'");
        if (depth == 0) {
            /* end tags: +%} | -%}\s* | %}\n?  and  -}}\s* | }} */
            char close0 = block ? '%' : '}';
            size_t m = 0;
            char sign = 0;
            if (i + 3 <= n && (s[i] == '-' || (block && s[i] == '+')) && s[i + 1] == close0 && s[i + 2] == '}') {
                sign = s[i];
                m = 3;
            }
            if (!m && i + 1 < n && s[i] == close0 && s[i + 1] == '}') m = 2;
            if (m) {
                size_t end = i + m;
                if (sign == '-') end += space_run(s, n, end);
                else if (block && sign == 0 && end < n && s[end] == '\n') end++;
                if (push(L, block ? T_BLOCK_END : T_VAR_END, L->line, s + i, m) < 0) return -1;
                L->line += count_nl(s + i, end - i);
                L->line_starting = s[end - 1] == '\n';
                L->pos = end;
                return 0;
            }
        }
        uint32_t cp;
        size_t k = ju_decode(s, n, i, &cp);
        if (ju_is_space(cp)) {
            size_t w = space_run(s, n, i);
            L->line += count_nl(s + i, w);
            L->pos = i + w;
            continue;
        }
        char ch = s[i];
        if (is_digit(ch)) {
            if (lex_number(L) < 0) return -1;
            continue;
        }
        if (is_ident_start(ch)) {
            size_t j = i + 1;
            while (j < n && (is_ident_start(s[j]) || is_digit(s[j]))) j++;
            if (push(L, T_NAME, L->line, s + i, j - i) < 0) return -1;
            L->pos = j;
            continue;
        }
        if (ch == '\'' || ch == '"') {
            if (lex_string(L) < 0) return -1;
            continue;
        }
        size_t oplen = 0;
        for (size_t o = 0; o < sizeof OPS2 / sizeof OPS2[0]; o++)
            if (i + 1 < n && s[i] == OPS2[o][0] && s[i + 1] == OPS2[o][1]) oplen = 2;
        if (!oplen && strchr(OPS1, ch) && ch) oplen = 1;
        if (!oplen) {
            char shown[8];
            snprintf(shown, sizeof shown, "%.*s", (int)k, s + i);
            return lex_err(L, L->line, "unexpected character '%s'", shown);
        }
        if (oplen == 1 && (ch == '(' || ch == '[' || ch == '{')) {
            if (depth == (int)sizeof stack) return lex_err(L, L->line, "brackets nested too deeply", "");
            stack[depth++] = ch == '(' ? ')' : ch == '[' ? ']' : '}';
        } else if (oplen == 1 && (ch == ')' || ch == ']' || ch == '}')) {
            char shown[2] = {ch, 0};
            if (depth == 0) return lex_err(L, L->line, "unexpected '%s'", shown);
            if (stack[--depth] != ch) return lex_err(L, L->line, "unexpected '%s' (brackets do not match)", shown);
        }
        if (push(L, T_OP, L->line, s + i, oplen) < 0) return -1;
        L->pos = i + oplen;
    }
}

/* Matches `{%[-+]?\s*raw\s*(-%}\s*|%})` or the same for endraw at i; returns the end offset or 0. */
static size_t match_raw_tag(const char *s, size_t n, size_t i, const char *word, bool end_tag, char *sign) {
    if (i + 2 > n || s[i] != '{' || s[i + 1] != '%') return 0;
    size_t j = i + 2;
    *sign = 0;
    if (j < n && (s[j] == '-' || s[j] == '+')) *sign = s[j++];
    j += space_run(s, n, j);
    size_t w = strlen(word);
    if (j + w > n || memcmp(s + j, word, w) != 0) return 0;
    j += w;
    j += space_run(s, n, j);
    if (end_tag && j + 3 <= n && s[j] == '+' && s[j + 1] == '%' && s[j + 2] == '}') return j + 3;
    if (j + 3 <= n && s[j] == '-' && s[j + 1] == '%' && s[j + 2] == '}') return j + 3 + space_run(s, n, j + 3);
    if (j + 2 <= n && s[j] == '%' && s[j + 1] == '}') {
        j += 2;
        if (end_tag && j < n && s[j] == '\n') j++;
        return j;
    }
    return 0;
}

static int lex_raw(lexer *L, size_t text_start, size_t tag_pos, char sign, size_t after) {
    if (emit_text(L, L->s + text_start, tag_pos - text_start, sign, true) < 0) return -1;
    L->line += count_nl(L->s + tag_pos, after - tag_pos);
    L->line_starting = L->s[after - 1] == '\n';
    int open_line = L->line;
    for (size_t i = after; i + 1 < L->n; i++) {
        char esign;
        size_t end = match_raw_tag(L->s, L->n, i, "endraw", true, &esign);
        if (!end) continue;
        if (emit_text(L, L->s + after, i - after, esign, true) < 0) return -1;
        L->line += count_nl(L->s + i, end - i);
        L->line_starting = L->s[end - 1] == '\n';
        L->pos = end;
        return 0;
    }
    return lex_err(L, open_line, "missing end of raw directive", "");
}

int jinja_lex(jarena *a, const char *src, size_t len, jtokens *out, pith_err *err) {
    lexer L = {.a = a, .err = err, .line = 1, .line_starting = true};
    /* Normalize \r\n and \r to \n; drop one trailing newline (keep_trailing_newline=False). */
    char *s = jarena_alloc(a, len + 1);
    if (!s) return oom(&L);
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            s[n++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n') i++;
        } else {
            s[n++] = src[i];
        }
    }
    if (n > 0 && s[n - 1] == '\n') n--;
    L.s = s;
    L.n = n;
    while (L.pos < n) {
        size_t start = L.pos, i = start;
        char kind = 0;
        while (i + 1 < n) {
            if (s[i] == '{' && (s[i + 1] == '{' || s[i + 1] == '%' || s[i + 1] == '#')) {
                kind = s[i + 1];
                break;
            }
            i++;
        }
        if (!kind) {
            if (emit_text(&L, s + start, n - start, 0, false) < 0) return -1;
            break;
        }
        char sign = 0;
        size_t after = i + 2;
        if (after < n && (s[after] == '-' || s[after] == '+')) sign = s[after++];
        if (kind == '%') {
            char rsign;
            size_t raw_end = match_raw_tag(s, n, i, "raw", false, &rsign);
            if (raw_end) {
                if (lex_raw(&L, start, i, rsign, raw_end) < 0) return -1;
                continue;
            }
        }
        if (emit_text(&L, s + start, i - start, sign, kind != '{') < 0) return -1;
        int open_line = L.line;
        if (kind == '#') {
            size_t j = after;
            while (j + 1 < n && !(s[j] == '#' && s[j + 1] == '}')) j++;
            if (j + 1 >= n) return lex_err(&L, open_line, "missing end of comment tag", "");
            size_t end = j + 2;
            char esign = j > after ? s[j - 1] : 0;
            if (esign == '-') end += space_run(s, n, end);
            else if (esign != '+' && end < n && s[end] == '\n') end++;
            L.line += count_nl(s + i, end - i);
            L.line_starting = s[end - 1] == '\n';
            L.pos = end;
            continue;
        }
        if (push(&L, kind == '%' ? T_BLOCK_BEGIN : T_VAR_BEGIN, L.line, s + i, after - i) < 0) return -1;
        L.pos = after;
        L.line_starting = false;
        if (lex_tag(&L, kind == '%', open_line) < 0) return -1;
    }
    if (push(&L, T_EOF, L.line, s + n, 0) < 0) return -1;
    out->v = L.v;
    out->n = L.nt;
    return 0;
}
