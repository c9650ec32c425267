/* Calls framed by special tokens (tool_parse.h): DeepSeek's and Kimi K2's sections of calls, each a
 * header (the name) up to a separator and the arguments up to the call's end marker, and Gemma 4's
 * <|tool_call>call:N{...}<tool_call|>, whose arguments (bare keys, strings quoted by <|"|>) are rewritten
 * to JSON as they stream. */
#include <string.h>

#include "server/tool_parse_internal.h"

typedef struct section {
    const char *begin, *end, *call, *sep, *call_end;
} section;

static const section DEEPSEEK = {
    "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "begin\xef\xbd\x9c>",
    "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "end\xef\xbd\x9c>",
    "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "begin\xef\xbd\x9c>",
    "<\xef\xbd\x9ctool\xe2\x96\x81" "sep\xef\xbd\x9c>",
    "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "end\xef\xbd\x9c>",
};
static const section KIMI = {
    "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", "<|tool_call_begin|>",
    "<|tool_call_argument_begin|>", "<|tool_call_end|>",
};
#define G_OPEN "<|tool_call>"
#define G_CALL "call:"
#define G_STR "<|\"|>"
#define MAX_HEADER (TP_MAX_NAME + 32)

/* sec_state: how the arguments are written. */
enum { A_JSON, A_V3_FENCE, A_V3_JSON };
/* g_state: where Gemma's converter is. */
enum { G_BARE, G_KEY, G_GSTR, G_JSTR };

static const section *sec(const tp_parser *p) { return p->cfg.format == TP_FMT_DEEPSEEK ? &DEEPSEEK : &KIMI; }

int tp_section_openers(const tp_parser *p, const char **m) {
    if (p->cfg.format == TP_FMT_GEMMA4) {
        m[0] = G_OPEN;
        return 1;
    }
    m[0] = sec(p)->begin;
    m[1] = sec(p)->call; /* a call without its section's opening is read too */
    return 2;
}

void tp_section_start(tp_parser *p, int which) {
    if (p->cfg.format == TP_FMT_GEMMA4) {
        tp_call_reset(p, W_GEMMA, G_OPEN);
        p->mode = M_SEC_HEADER;
        return;
    }
    tp_call_reset(p, W_SECTION, which == 0 ? sec(p)->begin : sec(p)->call);
    p->sec_first = which == 0;
    p->mode = which == 0 ? M_SEC : M_SEC_HEADER;
}

/* Drops what is held: the output was cut off inside a marker. */
static void drop_rest(tp_parser *p) {
    p->notes |= TP_NOTE_DROPPED;
    buf_append(&p->dropped, p->hold.data ? p->hold.data : "", p->hold.len);
    tp_consume(p, p->hold.len);
    p->mode = M_DISCARD;
}

/* Between the calls of a section. */
bool tp_sec_mode(tp_parser *p, bool final) {
    const section *s = sec(p);
    size_t i = 0;
    while (i < p->hold.len && tp_is_ws(p->hold.data[i])) i++;
    if (p->sec_first) tp_take(p, i);
    else tp_consume(p, i);
    int rc = p->hold.len ? tp_starts(p, s->call) : -1, re = p->hold.len ? tp_starts(p, s->end) : -1;
    if (rc > 0) {
        if (p->sec_first) tp_take(p, strlen(s->call));
        else {
            tp_call_reset(p, W_SECTION, s->call);
            tp_consume(p, strlen(s->call));
        }
        p->sec_first = false;
        p->mode = M_SEC_HEADER;
        return true;
    }
    if (re > 0) {
        if (p->sec_first) tp_take(p, strlen(s->end));
        else tp_consume(p, strlen(s->end));
        if (p->sec_first) tp_fall_back(p); /* a section with no call */
        else tp_resume_text(p);
        p->strip_ws = true;
        return true;
    }
    if (rc < 0 || re < 0) {
        if (!final) return false;
        if (p->sec_first) tp_close_unfinished(p);
        else if (p->truncated && p->hold.len) drop_rest(p);
        else tp_resume_text(p);
        return true;
    }
    if (p->sec_first) tp_fall_back(p);
    else tp_resume_text(p);
    return true;
}

static bool header_fail(tp_parser *p) {
    tp_fall_back(p);
    return true;
}

static bool valid_name(const buf *b) {
    if (!b->len) return false;
    for (size_t i = 0; i < b->len; i++)
        if (!tp_name_char(b->data[i])) return false;
    return true;
}

/* Sets dst to s[0, n) without surrounding whitespace. */
static void trimmed(buf *dst, const char *s, size_t n) {
    while (n && tp_is_ws(*s)) s++, n--;
    n -= tp_trailing_ws(s, n);
    dst->len = 0;
    buf_append(dst, s, n);
}

static bool gemma_header(tp_parser *p, bool final) {
    int r = tp_starts(p, G_CALL);
    if (r < 0 || !p->hold.len) return final ? (tp_close_unfinished(p), true) : false;
    if (r == 0) return header_fail(p);
    size_t i = strlen(G_CALL);
    while (i < p->hold.len && i <= MAX_HEADER && p->hold.data[i] != '{' && tp_name_char(p->hold.data[i])) i++;
    if (i > MAX_HEADER) return header_fail(p);
    if (i == p->hold.len) return final ? (tp_close_unfinished(p), true) : false;
    if (p->hold.data[i] != '{') return header_fail(p);
    trimmed(&p->name, p->hold.data + strlen(G_CALL), i - strlen(G_CALL));
    if (!valid_name(&p->name)) return header_fail(p);
    tp_take(p, i);
    tp_begin_call(p);
    p->g_depth = 0;
    p->g_stack = 0;
    p->g_state = G_BARE;
    p->g_key = p->g_esc = false;
    p->mode = M_SEC_ARGS;
    return true;
}

bool tp_sec_header_mode(tp_parser *p, bool final) {
    if (p->cfg.format == TP_FMT_GEMMA4) return gemma_header(p, final);
    const section *s = sec(p);
    const char *m[1] = {s->sep};
    int which;
    size_t at = tp_find_marker(&p->hold, m, 1, &which), sl = strlen(s->sep);
    if (at > MAX_HEADER) at = SIZE_MAX;
    if (at == SIZE_MAX) {
        if (p->hold.len > MAX_HEADER + sl) return header_fail(p);
        return final ? (tp_close_unfinished(p), true) : false;
    }
    trimmed(&p->name, p->hold.data, at);
    size_t take = at + sl;
    p->sec_state = A_JSON;
    if (p->cfg.format == TP_FMT_DEEPSEEK && p->name.len == 8 && !memcmp(p->name.data, "function", 8)) {
        /* V3 / R1: function<｜tool▁sep｜>NAME\n```json\nARGS\n``` */
        const char *nl = memchr(p->hold.data + take, '\n', p->hold.len - take);
        if (!nl) {
            if (p->hold.len - take > MAX_HEADER) return header_fail(p);
            return final ? (tp_close_unfinished(p), true) : false;
        }
        size_t e = (size_t)(nl - p->hold.data);
        trimmed(&p->name, p->hold.data + take, e - take);
        take = e + 1;
        p->sec_state = A_V3_FENCE;
    } else if (p->cfg.format == TP_FMT_KIMI_K2) {
        /* functions.NAME:INDEX */
        if (p->name.len > 10 && !memcmp(p->name.data, "functions.", 10)) buf_consume(&p->name, 10);
        size_t k = p->name.len;
        while (k && p->name.data[k - 1] >= '0' && p->name.data[k - 1] <= '9') k--;
        if (k && k < p->name.len && p->name.data[k - 1] == ':') p->name.len = k - 1;
        if (p->name.data) p->name.data[p->name.len] = 0;
    }
    if (!valid_name(&p->name)) return header_fail(p);
    tp_take(p, take);
    tp_begin_call(p);
    p->mode = M_SEC_ARGS;
    return true;
}

static void args_out(tp_parser *p, const char *s, size_t n) {
    if (!n) return;
    p->args_seen = true;
    p->sink(p->user, TP_CALL_ARGS, s, n);
}

/* Gemma 4's arguments, rewritten to JSON: returns true when the outer object closed. */
static bool gemma_convert(tp_parser *p, bool final, bool *cut) {
    buf out = {0};
    bool done = false;
    size_t i = 0;
    while (i < p->hold.len && !done && !*cut) {
        char c = p->hold.data[i];
        switch (p->g_state) {
        case G_GSTR: {
            const char *rest = p->hold.data + i;
            size_t n = p->hold.len - i, k = 0, gl = strlen(G_STR);
            while (k < n && !(n - k >= gl ? !memcmp(rest + k, G_STR, gl) : !memcmp(rest + k, G_STR, n - k))) k++;
            tp_json_escape(&out, rest, k);
            i += k;
            if (k == n) break;
            if (n - k < gl) { /* a partial <|"|> at the end */
                if (final) {
                    tp_json_escape(&out, rest + k, n - k);
                    i = p->hold.len;
                }
                *cut = final;
                goto stop;
            }
            buf_puts(&out, "\"");
            i += gl;
            p->g_state = G_BARE;
            break;
        }
        case G_JSTR:
            buf_append(&out, &c, 1);
            i++;
            if (p->g_esc) p->g_esc = false;
            else if (c == '\\') p->g_esc = true;
            else if (c == '"') p->g_state = G_BARE;
            break;
        case G_KEY:
            if (tp_name_char(c) && c != ':') {
                buf_append(&out, &c, 1);
                i++;
            } else {
                buf_puts(&out, "\"");
                p->g_state = G_BARE;
                p->g_key = false;
            }
            break;
        default: {
            size_t n = p->hold.len - i, gl = strlen(G_STR);
            if (c == '<' && !memcmp(p->hold.data + i, G_STR, n < gl ? n : gl)) {
                if (n < gl) {
                    *cut = final;
                    goto stop;
                }
                buf_puts(&out, "\"");
                i += gl;
                p->g_state = G_GSTR;
                p->g_key = false;
                break;
            }
            i++;
            if (c == '{' || c == '[') {
                if (p->g_depth >= 31) {
                    *cut = true; /* too deep to be arguments */
                    break;
                }
                p->g_stack = (p->g_stack << 1) | (c == '{');
                p->g_depth++;
                p->g_key = c == '{';
            } else if (c == '}' || c == ']') {
                p->g_stack >>= 1;
                p->g_key = false;
                if (--p->g_depth <= 0) done = true;
            } else if (c == ',') {
                p->g_key = p->g_stack & 1;
            } else if (c == ':') {
                p->g_key = false;
            } else if (c == '"') {
                p->g_state = G_JSTR;
                p->g_key = false;
            } else if (p->g_key && tp_name_char(c)) {
                buf_puts(&out, "\"");
                p->g_state = G_KEY;
            }
            buf_append(&out, &c, 1);
            break;
        }
        }
    }
stop:
    args_out(p, out.data, out.len);
    buf_free(&out);
    tp_consume(p, i);
    return done;
}

bool tp_sec_args_mode(tp_parser *p, bool final) {
    if (p->cfg.format == TP_FMT_GEMMA4) {
        bool cut = false;
        if (gemma_convert(p, final, &cut)) {
            tp_end_call(p);
            tp_after_call_mode(p);
            return true;
        }
        if (cut && !final) { /* not Gemma's arguments after all: the call ends here, the rest is text */
            p->notes |= TP_NOTE_FELL_BACK;
            tp_end_call(p);
            tp_resume_text(p);
            return true;
        }
        if (!final) return false;
        tp_close_unfinished(p);
        return true;
    }
    const section *s = sec(p);
    bool v3 = p->sec_state != A_JSON;
    if (!p->args_seen) { /* whitespace (and V3's ```json line) before the arguments */
        size_t i = 0;
        while (i < p->hold.len && tp_is_ws(p->hold.data[i])) i++;
        tp_consume(p, i);
        if (p->sec_state == A_V3_FENCE && p->hold.len) {
            if (p->hold.data[0] == '`') {
                const char *nl = memchr(p->hold.data, '\n', p->hold.len);
                if (!nl && !final && p->hold.len < 64) return false;
                if (nl) tp_consume(p, (size_t)(nl - p->hold.data) + 1);
            }
            p->sec_state = A_V3_JSON;
            return true;
        }
    }
    const char *m[2] = {s->call_end, s->end};
    int which = -1;
    size_t at = tp_find_marker(&p->hold, m, 2, &which);
    size_t len = at != SIZE_MAX ? at : final ? p->hold.len : p->hold.len - tp_partial_len(&p->hold, m, 2);
    /* Trailing whitespace (and V3's closing ```) is not part of the arguments. */
    size_t body = len;
    while (body && (tp_is_ws(p->hold.data[body - 1]) || (v3 && p->hold.data[body - 1] == '`'))) body--;
    if (at == SIZE_MAX && !final) len = body;
    args_out(p, p->hold.data, body);
    tp_consume(p, len);
    if (at == SIZE_MAX) {
        if (!final) return false;
        tp_close_unfinished(p);
        return true;
    }
    if (which == 0) tp_consume(p, strlen(s->call_end));
    tp_end_call(p);
    tp_after_call_mode(p);
    return true;
}
