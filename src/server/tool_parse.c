/* The output parser of tool_parse.h: a mode machine over a buffer of undecided bytes. Text modes look
 * for their markers and hold back a suffix that may still become one; call modes feed bytes to a JSON
 * scanner that finds the call's name and the extent of its arguments without parsing them whole. */
#include "server/tool_parse.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "server/tool_parse_internal.h"

enum obj_state { O_START, O_KEY_OR_END, O_KEY, O_COLON, O_VAL_START, O_VAL, O_AFTER_VAL };
enum key_class { K_OTHER, K_NAME, K_ARGS };
enum route { R_CONTENT, R_REASONING, R_CALL };
enum step { S_MORE, S_DONE, S_FAIL };

#define THINK_OPEN "<think>"
#define THINK_CLOSE "</think>"
#define HERMES_OPEN "<tool_call>"
#define HERMES_CLOSE "</tool_call>"
#define PYTHON_TAG "<|python_tag|>"
#define MISTRAL_CALLS "[TOOL_CALLS]"
#define MISTRAL_ARGS "[ARGS]"
#define H_MESSAGE "<|message|>"
#define H_START "<|start|>"
#define H_CHANNEL "<|channel|>"
#define MAX_HEADER 512

bool tp_is_ws(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

void tp_emit(tp_parser *p, tp_event ev, const char *s, size_t n) {
    if (ev == TP_CONTENT || ev == TP_REASONING) {
        if (p->strip_ws)
            while (n && tp_is_ws(*s)) s++, n--;
        if (!n) return;
        p->strip_ws = false;
        p->any_output = true;
    }
    p->sink(p->user, ev, s, n);
}

static void emit_text(tp_parser *p, tp_event ev, const char *s, size_t n) { tp_emit(p, ev, s, n); }

/* Where the earliest of the markers starts in b (SIZE_MAX: none); *which gets its index. */
size_t tp_find_marker(const buf *b, const char *const *m, int n, int *which) {
    size_t best = SIZE_MAX;
    for (int i = 0; i < n; i++) {
        size_t ml = strlen(m[i]);
        for (size_t at = 0; at + ml <= b->len && at < best; at++) {
            if (!memcmp(b->data + at, m[i], ml)) {
                best = at;
                *which = i;
                break;
            }
        }
    }
    return best;
}

/* The longest suffix of b that is a proper prefix of one of the markers. */
size_t tp_partial_len(const buf *b, const char *const *m, int n) {
    size_t keep = 0;
    for (int i = 0; i < n; i++) {
        size_t ml = strlen(m[i]);
        for (size_t k = ml - 1; k > keep; k--)
            if (k <= b->len && !memcmp(b->data + b->len - k, m[i], k)) {
                keep = k;
                break;
            }
    }
    return keep;
}

size_t tp_trailing_ws(const char *s, size_t n) {
    size_t k = 0;
    while (k < n && tp_is_ws(s[n - 1 - k])) k++;
    return k;
}

int tp_starts(const tp_parser *p, const char *m) {
    size_t ml = strlen(m), n = p->hold.len < ml ? p->hold.len : ml;
    if (n && memcmp(p->hold.data, m, n)) return 0;
    return n == ml ? 1 : -1;
}

void tp_take(tp_parser *p, size_t n) {
    buf_append(&p->raw, p->hold.data, n);
    tp_consume(p, n);
}

bool tp_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
           c == '.' || c == ':' || c == '/';
}

/* ---- JSON value scanning ---- */

/* 1: c belongs to the value; 2: it does and ends it; 0: it does not (it ended a bare scalar); -1: no
 * JSON value starts with c. */
static int jscan_feed(tp_jscan *j, char c) {
    if (!j->started) {
        j->started = true;
        if (c == '{' || c == '[') j->depth = 1;
        else if (c == '"') j->in_str = true;
        else if (c == '-' || (c >= '0' && c <= '9') || c == 't' || c == 'f' || c == 'n') j->scalar = true;
        else return -1;
        return 1;
    }
    if (j->scalar) {
        if (c == ',' || c == '}' || c == ']' || tp_is_ws(c)) {
            j->done = true;
            return 0;
        }
        return 1;
    }
    if (j->in_str) {
        if (j->esc) j->esc = false;
        else if (c == '\\') j->esc = true;
        else if (c == '"') {
            j->in_str = false;
            if (j->depth == 0) {
                j->done = true;
                return 2;
            }
        }
        return 1;
    }
    if (c == '"') j->in_str = true;
    else if (c == '{' || c == '[') j->depth++;
    else if (c == '}' || c == ']') {
        if (--j->depth == 0) {
            j->done = true;
            return 2;
        }
    }
    return 1;
}

/* ---- calls ---- */

void tp_call_reset(tp_parser *p, int wrap, const char *opening) {
    p->wrap = wrap;
    p->obj_state = O_START;
    p->raw.len = p->key.len = p->name.len = p->args.len = 0;
    p->args_is_str = p->args_seen = p->name_seen = p->begun = false;
    p->first_key = true;
    buf_puts(&p->raw, opening);
}

void tp_begin_call(tp_parser *p) {
    if (p->begun) return;
    p->begun = true;
    p->any_output = true;
    p->sink(p->user, TP_CALL_BEGIN, p->name.data ? p->name.data : "", p->name.len);
}

/* Sends the arguments gathered since the last flush (streamed form only). */
static void flush_args(tp_parser *p, size_t *sent) {
    if (!p->begun || p->args_is_str || *sent >= p->args.len) return;
    p->sink(p->user, TP_CALL_ARGS, p->args.data + *sent, p->args.len - *sent);
    *sent = p->args.len;
}

/* Decodes a JSON string held in b (quotes included) into out; false when it is not one. */
static bool decode_string(const buf *b, buf *out) {
    if (!b->len) return false;
    cJSON *j = cJSON_ParseWithLength(b->data, b->len);
    bool ok = cJSON_IsString(j);
    if (ok) {
        out->len = 0;
        buf_puts(out, j->valuestring);
    }
    cJSON_Delete(j);
    return ok;
}


void tp_end_call(tp_parser *p) {
    if (p->args_is_str) {
        buf text = {0};
        if (decode_string(&p->args, &text) && text.len) p->sink(p->user, TP_CALL_ARGS, text.data, text.len);
        buf_free(&text);
    } else if (!p->args_seen) {
        p->sink(p->user, TP_CALL_ARGS, "{}", 2);
    }
    p->sink(p->user, TP_CALL_END, "", 0);
    if (p->think_resume) p->notes |= TP_NOTE_IN_REASONING;
    p->n_calls++;
    p->begun = false;
    p->tentative = false;
}

void tp_resume_text(tp_parser *p) {
    p->mode = p->think_resume ? M_THINK : M_TEXT;
    p->think_resume = false;
}

void tp_close_unfinished(tp_parser *p) {
    if (!p->begun && p->name_seen && p->truncated) tp_begin_call(p);
    if (p->begun) {
        p->notes |= TP_NOTE_CUT_CALL;
        if (p->truncated) p->args_seen = true; /* nothing is supplied for arguments never started */
        tp_end_call(p);
        tp_resume_text(p);
        return;
    }
    if (p->truncated && (!p->tentative || p->cfg.forced)) {
        p->notes |= TP_NOTE_DROPPED;
        buf_append(&p->dropped, p->raw.data ? p->raw.data : "", p->raw.len);
        buf_append(&p->dropped, p->hold.data ? p->hold.data : "", p->hold.len);
        tp_consume(p, p->hold.len);
        p->tentative = false;
        p->think_resume = false;
        p->mode = M_DISCARD;
        return;
    }
    tp_fall_back(p);
}

/* The call's text turned out not to be a call: it is content. */
void tp_fall_back(tp_parser *p) {
    if (!p->tentative) p->notes |= TP_NOTE_FELL_BACK;
    p->tentative = false;
    p->any_output = true;
    emit_text(p, p->think_resume ? TP_REASONING : TP_CONTENT, p->raw.data ? p->raw.data : "", p->raw.len);
    tp_resume_text(p);
}

static int classify_key(const buf *key) {
    buf k = {0};
    int c = K_OTHER;
    if (decode_string(key, &k)) {
        if (!strcmp(k.data ? k.data : "", "name")) c = K_NAME;
        else if (k.data && (!strcmp(k.data, "arguments") || !strcmp(k.data, "parameters"))) c = K_ARGS;
    }
    buf_free(&k);
    return c;
}

/* One byte of a call object {"name": ..., "arguments": ...}. */
static int obj_byte(tp_parser *p, char c) {
    switch (p->obj_state) {
    case O_START:
        if (tp_is_ws(c)) return S_MORE;
        if (c != '{') return S_FAIL;
        p->obj_state = O_KEY_OR_END;
        return S_MORE;
    case O_KEY_OR_END:
        if (tp_is_ws(c)) return S_MORE;
        if (c == '}') return S_DONE;
        if (c != '"') return S_FAIL;
        p->key.len = 0;
        buf_append(&p->key, &c, 1);
        p->js = (tp_jscan){.started = true, .in_str = true};
        p->obj_state = O_KEY;
        return S_MORE;
    case O_KEY:
        if (p->key.len > TP_MAX_NAME) return S_FAIL;
        buf_append(&p->key, &c, 1);
        if (jscan_feed(&p->js, c) == 2) p->obj_state = O_COLON;
        return S_MORE;
    case O_COLON:
        if (tp_is_ws(c)) return S_MORE;
        if (c != ':') return S_FAIL;
        p->obj_state = O_VAL_START;
        return S_MORE;
    case O_VAL_START: {
        if (tp_is_ws(c)) return S_MORE;
        int k = classify_key(&p->key);
        if (p->tentative && p->first_key && k != K_NAME) return S_FAIL;
        p->first_key = false;
        p->vkey = k;
        p->js = (tp_jscan){0};
        if (jscan_feed(&p->js, c) < 0) return S_FAIL;
        if (k == K_NAME) {
            if (c != '"' || p->name_seen) return S_FAIL;
            p->key.len = 0;
            buf_append(&p->key, &c, 1); /* the raw name string collects in key */
        } else if (k == K_ARGS) {
            if (p->args_seen) return S_FAIL;
            p->args_seen = true;
            p->args_is_str = c == '"';
            buf_append(&p->args, &c, 1);
            if (p->name_seen) tp_begin_call(p);
        }
        p->obj_state = O_VAL;
        return S_MORE;
    }
    case O_VAL: {
        int r = jscan_feed(&p->js, c);
        int k = p->vkey;
        if (r >= 1) {
            if (k == K_NAME) {
                if (p->key.len > TP_MAX_NAME) return S_FAIL;
                buf_append(&p->key, &c, 1);
            } else if (k == K_ARGS) {
                buf_append(&p->args, &c, 1);
            }
            if (r == 1) return S_MORE;
        }
        if (k == K_NAME) {
            if (!decode_string(&p->key, &p->name) || !p->name.len) return S_FAIL;
            p->name_seen = true;
            if (p->args_seen) tp_begin_call(p);
        }
        p->obj_state = O_AFTER_VAL;
        if (r == 2) return S_MORE;
        return obj_byte(p, c); /* c ended a bare scalar and is read after it */
    }
    case O_AFTER_VAL:
        if (tp_is_ws(c)) return S_MORE;
        if (c == ',') {
            p->obj_state = O_KEY_OR_END;
            return S_MORE;
        }
        return c == '}' ? S_DONE : S_FAIL;
    }
    return S_FAIL;
}

/* ---- the modes ---- */

void tp_consume(tp_parser *p, size_t n) { buf_consume(&p->hold, n); }

static void start_call(tp_parser *p, int wrap, const char *opening) {
    tp_call_reset(p, wrap, opening);
    p->mode = M_CALL_OBJ;
}

void tp_after_call_mode(tp_parser *p) {
    if (!p->cfg.parallel && p->n_calls > 0) {
        p->mode = M_DISCARD;
        return;
    }
    p->strip_ws = true;
    if (p->wrap == W_MISTRAL_ARR) p->mode = M_MISTRAL_ARR;
    else if (p->wrap == W_MISTRAL_V11) tp_resume_text(p);
    else if (p->wrap == W_SECTION) p->mode = M_SEC;
    else p->mode = M_AFTER_CALL;
}

/* The markers that open a call in text (none when tools are off); their count. */
static int call_openers(const tp_parser *p, const char **m) {
    if (!p->cfg.tools) return 0;
    switch (p->cfg.format) {
    case TP_FMT_HERMES:
    case TP_FMT_QWEN3_XML:
    case TP_FMT_GLM: m[0] = HERMES_OPEN; return 1;
    case TP_FMT_LLAMA3: m[0] = PYTHON_TAG; return 1;
    case TP_FMT_MISTRAL: m[0] = MISTRAL_CALLS; return 1;
    case TP_FMT_DEEPSEEK:
    case TP_FMT_KIMI_K2:
    case TP_FMT_GEMMA4: return tp_section_openers(p, m);
    default: return 0;
    }
}

/* Text and reasoning: returns true when it changed mode (call again), false when it needs more. */
static bool text_mode(tp_parser *p, bool final) {
    const char *m[8];
    int n = 0, id_think = -1, id_call = -1;
    bool think = p->mode == M_THINK;
    if (think) m[n++] = THINK_CLOSE;
    else if (p->cfg.think) m[id_think = n++] = THINK_OPEN;
    id_call = n;
    n += call_openers(p, m + n);
    if (!think) {
        /* Llama's bare JSON call: the reply itself starts with "{". */
        if (p->cfg.tools && p->cfg.format == TP_FMT_LLAMA3 && !p->any_output && p->n_calls == 0) {
            size_t i = 0;
            while (i < p->hold.len && tp_is_ws(p->hold.data[i])) i++;
            if (i == p->hold.len && !final) return false;
            if (i < p->hold.len && p->hold.data[i] == '{') {
                buf ws = {0};
                buf_append(&ws, p->hold.data, i);
                start_call(p, W_LLAMA, ws.data ? ws.data : "");
                buf_free(&ws);
                p->tentative = true;
                tp_consume(p, i);
                return true;
            }
        }
    }
    tp_event ev = think ? TP_REASONING : TP_CONTENT;
    int which = -1;
    size_t at = tp_find_marker(&p->hold, m, n, &which);
    if (at != SIZE_MAX) {
        size_t len = at, ws = think ? tp_trailing_ws(p->hold.data, len) : 0;
        emit_text(p, ev, p->hold.data, len - ws);
        /* Whitespace before a call inside reasoning belongs to the call's text, should it fall back. */
        buf pre = {0};
        if (think && which != 0) buf_append(&pre, p->hold.data + len - ws, ws);
        tp_consume(p, at + strlen(m[which]));
        if (think && which == 0) {
            p->mode = M_TEXT;
            p->strip_ws = true;
        } else if (which == id_think) {
            p->mode = M_THINK;
            p->strip_ws = true;
        } else {
            p->think_resume = think;
            switch (p->cfg.format) {
            case TP_FMT_HERMES: start_call(p, W_HERMES, HERMES_OPEN); break;
            case TP_FMT_QWEN3_XML:
            case TP_FMT_GLM:
                tp_call_reset(p, W_HERMES, HERMES_OPEN);
                p->mode = M_TC_SNIFF;
                break;
            case TP_FMT_LLAMA3: start_call(p, W_LLAMA, PYTHON_TAG); break;
            case TP_FMT_MISTRAL:
                tp_call_reset(p, W_MISTRAL_ARR, MISTRAL_CALLS);
                p->mode = M_MISTRAL_START;
                break;
            default: tp_section_start(p, which - id_call); break;
            }
            if (pre.len) {
                buf_append(&pre, p->raw.data, p->raw.len);
                buf t = p->raw;
                p->raw = pre;
                pre = t;
            }
        }
        buf_free(&pre);
        return true;
    }
    size_t keep = final ? 0 : tp_partial_len(&p->hold, m, n);
    /* A forced call cut off inside its opening marker: the partial marker is not text. */
    size_t cut = final && p->truncated && p->cfg.forced ? tp_partial_len(&p->hold, m + id_call, n - id_call) : 0;
    if (think && !final) keep += tp_trailing_ws(p->hold.data, p->hold.len - keep);
    emit_text(p, ev, p->hold.data, p->hold.len - keep - cut);
    tp_consume(p, p->hold.len - keep - cut);
    if (cut) {
        p->notes |= TP_NOTE_DROPPED;
        buf_append(&p->dropped, p->hold.data, cut);
        tp_consume(p, cut);
    }
    return false;
}

static bool call_obj_mode(tp_parser *p, bool final) {
    size_t sent = p->args.len, i = 0;
    int r = S_MORE;
    if (!p->begun) sent = 0;
    while (i < p->hold.len && r == S_MORE) {
        char c = p->hold.data[i++];
        buf_append(&p->raw, &c, 1);
        bool was_begun = p->begun;
        r = obj_byte(p, c);
        if (!was_begun && p->begun) sent = 0;
    }
    if (r == S_DONE && !p->name_seen) r = S_FAIL;
    if (r == S_DONE) tp_begin_call(p);
    flush_args(p, &sent);
    tp_consume(p, i);
    if (r == S_DONE) {
        tp_end_call(p);
        tp_after_call_mode(p);
        return true;
    }
    if (r == S_FAIL) {
        if (p->begun) {
            p->notes |= TP_NOTE_FELL_BACK;
            tp_end_call(p);
            tp_resume_text(p);
        } else {
            tp_fall_back(p);
        }
        return true;
    }
    if (final) {
        tp_close_unfinished(p);
        return true;
    }
    return false;
}

/* Mistral v11 arguments after [ARGS]: one JSON value. */
static bool call_val_mode(tp_parser *p, bool final) {
    size_t sent = p->args.len, i = 0;
    int r = 1;
    while (i < p->hold.len && r == 1) {
        char c = p->hold.data[i];
        if (!p->js.started && tp_is_ws(c)) { /* whitespace before the value */
            i++;
            continue;
        }
        r = jscan_feed(&p->js, c);
        if (r < 0) break;
        if (r >= 1) {
            buf_append(&p->args, &c, 1);
            i++;
        }
    }
    p->args_seen = true;
    flush_args(p, &sent);
    tp_consume(p, i);
    if (r == 1 && !final) return false;
    if (r == 1 && !(p->js.scalar && p->args.len)) { /* the output ended inside the arguments */
        tp_close_unfinished(p);
        return true;
    }
    tp_end_call(p);
    tp_after_call_mode(p);
    return true;
}

static bool after_call(tp_parser *p, bool final) {
    size_t i = 0;
    while (i < p->hold.len && tp_is_ws(p->hold.data[i])) i++;
    tp_consume(p, i);
    if (!p->hold.len) {
        if (final) tp_resume_text(p);
        return final;
    }
    if (p->wrap == W_HERMES || p->wrap == W_GEMMA) {
        const char *close = p->wrap == W_HERMES ? HERMES_CLOSE : "<tool_call|>";
        int r = tp_starts(p, close);
        if (r < 0 && !final) return false;
        if (r > 0) tp_consume(p, strlen(close));
    } else if (p->wrap == W_LLAMA && p->hold.data[0] == ';') {
        tp_consume(p, 1);
        start_call(p, W_LLAMA, ";");
        return true;
    }
    tp_resume_text(p);
    p->strip_ws = true;
    return true;
}

static bool mistral_start(tp_parser *p, bool final) {
    size_t i = 0;
    while (i < p->hold.len && tp_is_ws(p->hold.data[i])) i++;
    if (i == p->hold.len && !final) return false;
    if (i < p->hold.len && p->hold.data[i] == '[') {
        buf_append(&p->raw, p->hold.data, i + 1); /* "[TOOL_CALLS] [" stays in raw until a call is read */
        tp_consume(p, i + 1);
        p->arr_start = p->n_calls;
        p->mode = M_MISTRAL_ARR;
    } else {
        tp_consume(p, i);
        p->mode = M_MISTRAL_NAME;
    }
    return true;
}

/* Inside [TOOL_CALLS][...]: objects separated by commas, up to "]". */
static bool mistral_arr(tp_parser *p, bool final) {
    size_t i = 0;
    bool first = p->n_calls == p->arr_start;
    while (i < p->hold.len && (tp_is_ws(p->hold.data[i]) || (!first && p->hold.data[i] == ','))) i++;
    if (first) buf_append(&p->raw, p->hold.data, i);
    tp_consume(p, i);
    if (!p->hold.len) {
        if (final && first) tp_close_unfinished(p);
        else if (final) tp_resume_text(p);
        return final;
    }
    if (p->hold.data[0] == '{') {
        if (first) {
            buf prefix = {0};
            buf_append(&prefix, p->raw.data, p->raw.len);
            start_call(p, W_MISTRAL_ARR, prefix.data ? prefix.data : "");
            buf_free(&prefix);
        } else {
            start_call(p, W_MISTRAL_ARR, "");
        }
        return true;
    }
    if (first) { /* "[TOOL_CALLS][" not followed by a call object */
        tp_fall_back(p);
        return true;
    }
    if (p->hold.data[0] == ']') tp_consume(p, 1);
    tp_resume_text(p);
    p->strip_ws = true;
    return true;
}

static bool mistral_name(tp_parser *p, bool final) {
    const char *m[1] = {MISTRAL_ARGS};
    int which;
    size_t at = tp_find_marker(&p->hold, m, 1, &which);
    if (at > TP_MAX_NAME) at = SIZE_MAX; /* a name that long is not one, however the text was split */
    if (at == SIZE_MAX) {
        if (p->hold.len <= TP_MAX_NAME + strlen(MISTRAL_ARGS) && !final) return false;
        if (final && p->hold.len <= TP_MAX_NAME + strlen(MISTRAL_ARGS)) tp_close_unfinished(p);
        else tp_fall_back(p); /* "[TOOL_CALLS]" is content; the text after it is read again as text */
        return true;
    }
    size_t n = at;
    for (size_t k = 0; k < at; k++)
        if (p->hold.data[k] == '[') { /* [CALL_ID]... before [ARGS] */
            n = k;
            break;
        }
    while (n && tp_is_ws(p->hold.data[n - 1])) n--;
    p->name.len = 0;
    buf_append(&p->name, p->hold.data, n);
    if (!p->name.len) {
        tp_fall_back(p);
        return true;
    }
    tp_consume(p, at + strlen(MISTRAL_ARGS));
    p->wrap = W_MISTRAL_V11;
    tp_begin_call(p);
    p->js = (tp_jscan){0};
    size_t i = 0;
    while (i < p->hold.len && tp_is_ws(p->hold.data[i])) i++;
    tp_consume(p, i);
    p->args_is_str = false;
    p->mode = M_CALL_VAL;
    return true;
}

/* ---- harmony ---- */

/* The value after `key` in the header (up to whitespace or "<|"), into out. */
static bool header_field(const char *h, size_t n, const char *key, buf *out) {
    size_t kl = strlen(key);
    for (size_t i = 0; i + kl <= n; i++) {
        if (memcmp(h + i, key, kl)) continue;
        size_t s = i + kl, e = s;
        while (s < n && h[s] == ' ') s++;
        e = s;
        while (e < n && !tp_is_ws(h[e]) && !(h[e] == '<' && e + 1 < n && h[e + 1] == '|')) e++;
        out->len = 0;
        buf_append(out, h + s, e - s);
        return true;
    }
    return false;
}

static bool h_header(tp_parser *p, bool final) {
    const char *m[1] = {H_MESSAGE};
    int which;
    size_t at = tp_find_marker(&p->hold, m, 1, &which);
    if (at > MAX_HEADER) at = SIZE_MAX; /* however the text was split */
    if (at == SIZE_MAX) {
        if (!final && p->hold.len <= MAX_HEADER + strlen(H_MESSAGE)) return false;
        if (p->h_seen && final && p->hold.len <= MAX_HEADER + strlen(H_MESSAGE)) {
            tp_consume(p, p->hold.len); /* a later message's header cut short (max_tokens): no text of it */
            return false;
        }
        p->cfg.format = TP_FMT_NONE; /* not harmony after all: everything is content */
        p->mode = M_TEXT;
        return true;
    }
    buf channel = {0}, to = {0};
    header_field(p->hold.data, at, H_CHANNEL, &channel);
    bool has_to = header_field(p->hold.data, at, "to=", &to);
    p->h_route = R_CONTENT;
    if (has_to && to.len > 10 && !memcmp(to.data, "functions.", 10) && p->cfg.tools) {
        tp_call_reset(p, W_HERMES, "");
        p->name.len = 0;
        buf_append(&p->name, to.data + 10, to.len - 10);
        p->args_seen = true;
        tp_begin_call(p);
        p->h_route = R_CALL;
    } else if (channel.data && !strcmp(channel.data, "analysis")) {
        p->h_route = R_REASONING;
    }
    buf_free(&channel);
    buf_free(&to);
    tp_consume(p, at + strlen(H_MESSAGE));
    p->h_seen = true;
    p->strip_ws = p->h_route != R_CALL;
    p->mode = M_H_BODY;
    return true;
}

static bool h_body(tp_parser *p, bool final) {
    static const char *const m[4] = {"<|end|>", "<|call|>", "<|return|>", H_START};
    int which = -1;
    size_t at = tp_find_marker(&p->hold, m, 4, &which);
    size_t len = at != SIZE_MAX ? at : final ? p->hold.len : p->hold.len - tp_partial_len(&p->hold, m, 4);
    if (len) {
        if (p->h_route == R_CALL) p->sink(p->user, TP_CALL_ARGS, p->hold.data, len);
        else emit_text(p, p->h_route == R_REASONING ? TP_REASONING : TP_CONTENT, p->hold.data, len);
    }
    tp_consume(p, len);
    if (at == SIZE_MAX && !final) return false;
    if (at != SIZE_MAX) tp_consume(p, strlen(m[which]));
    if (p->h_route == R_CALL) {
        p->sink(p->user, TP_CALL_END, "", 0);
        p->n_calls++;
        p->begun = false;
        if (!p->cfg.parallel) {
            p->mode = M_DISCARD;
            return true;
        }
    }
    p->mode = which == 3 ? M_H_HEADER : M_H_BETWEEN;
    return at != SIZE_MAX;
}

static bool h_between(tp_parser *p, bool final) {
    static const char *const m[2] = {H_START, H_CHANNEL};
    int which = -1;
    size_t at = tp_find_marker(&p->hold, m, 2, &which);
    if (at == SIZE_MAX) {
        size_t keep = final ? 0 : tp_partial_len(&p->hold, m, 2);
        tp_consume(p, p->hold.len - keep);
        return false;
    }
    tp_consume(p, at + (which == 0 ? strlen(H_START) : 0));
    p->mode = M_H_HEADER;
    return true;
}

/* ---- driver ---- */

static void run(tp_parser *p, bool final) {
    for (;;) {
        bool again;
        switch (p->mode) {
        case M_TEXT:
        case M_THINK: again = text_mode(p, final); break;
        case M_CALL_OBJ: again = call_obj_mode(p, final); break;
        case M_CALL_VAL: again = call_val_mode(p, final); break;
        case M_AFTER_CALL: again = after_call(p, final); break;
        case M_MISTRAL_START: again = mistral_start(p, final); break;
        case M_MISTRAL_ARR: again = mistral_arr(p, final); break;
        case M_MISTRAL_NAME: again = mistral_name(p, final); break;
        case M_H_HEADER: again = h_header(p, final); break;
        case M_H_BODY: again = h_body(p, final); break;
        case M_H_BETWEEN: again = h_between(p, final); break;
        case M_TC_SNIFF: again = tp_sniff_mode(p, final); break;
        case M_XML: again = tp_xml_mode(p, final); break;
        case M_SEC: again = tp_sec_mode(p, final); break;
        case M_SEC_HEADER: again = tp_sec_header_mode(p, final); break;
        case M_SEC_ARGS: again = tp_sec_args_mode(p, final); break;
        default: tp_consume(p, p->hold.len); again = false; break;
        }
        if (!again) return;
        if (!p->hold.len && !final) return;
        if (!p->hold.len && final && (p->mode == M_TEXT || p->mode == M_THINK || p->mode == M_DISCARD ||
                                      p->mode == M_AFTER_CALL || p->mode == M_MISTRAL_ARR ||
                                      p->mode == M_H_BETWEEN))
            return;
    }
}

void tp_init(tp_parser *p, const tp_config *cfg, tp_sink sink, void *user) {
    memset(p, 0, sizeof *p);
    p->cfg = *cfg;
    p->sink = sink;
    p->user = user;
    if (cfg->format == TP_FMT_HARMONY) p->mode = M_H_HEADER;
    else p->mode = cfg->think && cfg->in_think ? M_THINK : M_TEXT;
    p->strip_ws = p->mode == M_THINK;
}

static bool any_failed(const tp_parser *p) {
    return p->failed || p->hold.failed || p->raw.failed || p->key.failed || p->name.failed || p->args.failed ||
           p->xval.failed || p->dropped.failed;
}

int tp_feed(tp_parser *p, const char *s, size_t n) {
    if (any_failed(p)) return -1;
    if (!n) return 0;
    buf_append(&p->hold, s, n);
    run(p, false);
    return any_failed(p) ? (p->failed = true, -1) : 0;
}

int tp_finish(tp_parser *p) {
    if (any_failed(p)) return -1;
    p->final_run = true;
    run(p, true);
    return any_failed(p) ? (p->failed = true, -1) : 0;
}

int tp_finish_truncated(tp_parser *p) {
    p->truncated = true;
    return tp_finish(p);
}

void tp_free(tp_parser *p) {
    buf_free(&p->xval);
    buf_free(&p->dropped);
    buf_free(&p->hold);
    buf_free(&p->raw);
    buf_free(&p->key);
    buf_free(&p->name);
    buf_free(&p->args);
}
