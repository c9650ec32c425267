/* The XML call bodies that follow <tool_call> (tool_parse.h): Qwen3-Coder / Qwen3.5's
 * <function=N><parameter=P>\nV\n</parameter></function> and GLM's N<arg_key>K</arg_key><arg_value>V</arg_value>.
 * The arguments are written out as a JSON object while they stream: a string-typed value is streamed as a
 * JSON string, any other value is gathered whole and passed on when it is JSON (a string of it when not).
 * A body that starts with "{" is a Hermes JSON call (both families also write those). */
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "server/tool_parse_internal.h"

#define FN_OPEN "<function="
#define FN_CLOSE "</function>"
#define P_OPEN "<parameter="
#define P_CLOSE "</parameter>"
#define TC_CLOSE "</tool_call>"
#define K_OPEN "<arg_key>"
#define K_CLOSE "</arg_key>"
#define V_OPEN "<arg_value>"
#define V_CLOSE "</arg_value>"

enum xstate { XQ_FNAME, XQ_BODY, XQ_PNAME, XQ_PVAL, XG_NAME, XG_BODY, XG_KEY, XG_AFTER_KEY, XG_VAL };
enum vtype { V_STRING, V_JSON };

static const cJSON *field(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

bool tp_param_is_string(const cJSON *schema) {
    if (!cJSON_IsObject(schema)) return true; /* a parameter the schema does not describe */
    const cJSON *type = field(schema, "type"), *t;
    if (cJSON_IsString(type)) return !strcmp(type->valuestring, "string");
    if (cJSON_IsArray(type)) {
        cJSON_ArrayForEach(t, type) if (cJSON_IsString(t) && !strcmp(t->valuestring, "string")) return true;
        return false;
    }
    const cJSON *en = field(schema, "enum"), *c = field(schema, "const");
    if (cJSON_IsArray(en) && en->child) {
        cJSON_ArrayForEach(t, en) if (!cJSON_IsString(t)) return false;
        return true;
    }
    if (c) return cJSON_IsString(c);
    /* No type: a combination (anyOf, ...) may take any JSON; a bare description takes text. */
    return !(field(schema, "anyOf") || field(schema, "oneOf") || field(schema, "allOf") || field(schema, "$ref") ||
             field(schema, "properties") || field(schema, "items"));
}

const cJSON *tp_param_schema(const cJSON *tools, const char *name, const char *key) {
    const cJSON *t;
    if (!cJSON_IsArray(tools) || !name || !key) return NULL;
    cJSON_ArrayForEach(t, tools) {
        const cJSON *fn = field(t, "function"), *n = field(fn, "name");
        if (!cJSON_IsString(n) || strcmp(n->valuestring, name)) continue;
        return field(field(field(fn, "parameters"), "properties"), key);
    }
    return NULL;
}

void tp_json_escape(buf *b, const char *s, size_t n) {
    static const char hex[] = "0123456789abcdef";
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\') continue;
        buf_append(b, s + run, i - run);
        run = i + 1;
        char e[7] = {'\\', 0};
        if (c == '"' || c == '\\') e[1] = (char)c;
        else if (c == '\n') e[1] = 'n';
        else if (c == '\r') e[1] = 'r';
        else if (c == '\t') e[1] = 't';
        else {
            e[1] = 'u', e[2] = '0', e[3] = '0', e[4] = hex[c >> 4], e[5] = hex[c & 15];
            buf_append(b, e, 6);
            continue;
        }
        buf_append(b, e, 2);
    }
    buf_append(b, s + run, n - run);
}

static void args_out(tp_parser *p, const buf *b) {
    if (b->len) p->sink(p->user, TP_CALL_ARGS, b->data, b->len);
}

/* A parameter's value opens: its key, and the opening quote of a string. */
static void value_start(tp_parser *p) {
    const char *key = p->key.data ? p->key.data : "";
    const cJSON *sch = tp_param_schema(p->cfg.tool_defs, p->name.data, key);
    p->x_vtype = tp_param_is_string(sch) ? V_STRING : V_JSON;
    buf b = {0};
    buf_puts(&b, p->x_params ? ", \"" : "{\"");
    tp_json_escape(&b, key, p->key.len);
    buf_puts(&b, p->x_vtype == V_STRING ? "\": \"" : "\": ");
    args_out(p, &b);
    buf_free(&b);
    p->x_params = p->args_seen = true;
    p->xval.len = 0;
}

static void value_piece(tp_parser *p, const char *s, size_t n) {
    if (!n) return;
    if (p->x_vtype == V_JSON) {
        buf_append(&p->xval, s, n);
        return;
    }
    buf b = {0};
    tp_json_escape(&b, s, n);
    args_out(p, &b);
    buf_free(&b);
}

static void value_end(tp_parser *p) {
    buf b = {0};
    if (p->x_vtype == V_STRING) {
        buf_puts(&b, "\"");
    } else {
        const char *s = p->xval.data ? p->xval.data : "";
        size_t n = p->xval.len, i = 0;
        while (i < n && tp_is_ws(s[i])) i++;
        n -= tp_trailing_ws(s + i, n - i);
        char *z = malloc(n - i + 1);
        bool json = false;
        if (z) {
            memcpy(z, s + i, n - i);
            z[n - i] = 0;
            const char *end = NULL;
            cJSON *j = n > i ? cJSON_ParseWithOpts(z, &end, true) : NULL;
            json = j != NULL;
            cJSON_Delete(j);
            free(z);
        } else {
            p->failed = true;
        }
        if (json) {
            buf_append(&b, s + i, n - i);
        } else {
            buf_puts(&b, "\"");
            tp_json_escape(&b, s, p->xval.len);
            buf_puts(&b, "\"");
        }
    }
    args_out(p, &b);
    buf_free(&b);
}

/* Streams a value up to the first of the terminators (left held); with strip_nl one newline before the
 * terminator is not part of it. Returns the terminator's index, or -1 when none is there yet. */
static int value_until(tp_parser *p, const char *const *term, int n, bool strip_nl, bool final) {
    int which = -1;
    size_t at = tp_find_marker(&p->hold, term, n, &which);
    size_t len = at != SIZE_MAX ? at : final ? p->hold.len : p->hold.len - tp_partial_len(&p->hold, term, n);
    size_t body = len;
    if (strip_nl && body && p->hold.data[body - 1] == '\n' && (at != SIZE_MAX || !final)) {
        body--;
        if (at == SIZE_MAX) len = body; /* it may yet precede the terminator */
    }
    value_piece(p, p->hold.data, body);
    tp_consume(p, len);
    return at != SIZE_MAX ? which : -1;
}

static void finish_call(tp_parser *p) {
    if (p->x_params) p->sink(p->user, TP_CALL_ARGS, "}", 1);
    tp_end_call(p);
    tp_after_call_mode(p);
}

static bool fail(tp_parser *p) {
    if (!p->begun) {
        tp_fall_back(p);
        return true;
    }
    p->notes |= TP_NOTE_FELL_BACK; /* the call is ended where it broke; the rest is text again */
    tp_end_call(p);
    tp_resume_text(p);
    return true;
}

/* The output ended inside the body: between parameters a call that was not cut off is complete. */
static bool at_end(tp_parser *p, bool between) {
    if (between && p->begun && !p->truncated) finish_call(p);
    else tp_close_unfinished(p);
    return true;
}

static void skip_ws(tp_parser *p) {
    size_t i = 0;
    while (i < p->hold.len && tp_is_ws(p->hold.data[i])) i++;
    if (p->begun) tp_consume(p, i);
    else tp_take(p, i);
}

bool tp_sniff_mode(tp_parser *p, bool final) {
    skip_ws(p);
    if (!p->hold.len) return final ? (tp_close_unfinished(p), true) : false;
    if (p->hold.data[0] == '{') {
        p->mode = M_CALL_OBJ;
        return true;
    }
    p->x_params = false;
    if (p->cfg.format == TP_FMT_QWEN3_XML) {
        int r = tp_starts(p, FN_OPEN);
        if (r < 0) return final ? (tp_close_unfinished(p), true) : false;
        if (r == 0) return fail(p);
        tp_take(p, strlen(FN_OPEN));
        p->x_state = XQ_FNAME;
    } else {
        p->x_state = XG_NAME;
    }
    p->mode = M_XML;
    return true;
}

/* Sets dst to s[0, n) without surrounding whitespace; false when that is empty. */
static bool set_trimmed(buf *dst, const char *s, size_t n) {
    while (n && tp_is_ws(*s)) s++, n--;
    n -= tp_trailing_ws(s, n);
    dst->len = 0;
    buf_append(dst, s, n);
    return n > 0;
}

/* Which of the markers the held bytes from off start with (its index), -2 when undecided, -1 when none. */
static int starts_any_at(const tp_parser *p, size_t off, const char *const *m, int n) {
    bool undecided = false;
    for (int i = 0; i < n; i++) {
        size_t ml = strlen(m[i]), k = p->hold.len - off < ml ? p->hold.len - off : ml;
        if (k && memcmp(p->hold.data + off, m[i], k)) continue;
        if (k == ml) return i;
        undecided = true;
    }
    return undecided ? -2 : -1;
}

static int starts_any(const tp_parser *p, const char *const *m, int n) { return starts_any_at(p, 0, m, n); }

static bool qwen(tp_parser *p, bool final) {
    switch (p->x_state) {
    case XQ_FNAME:
    case XQ_PNAME: {
        const char *gt = memchr(p->hold.data, '>', p->hold.len);
        size_t lim = gt ? (size_t)(gt - p->hold.data) : p->hold.len;
        for (size_t i = 0; i < lim; i++)
            if (!tp_name_char(p->hold.data[i]) && !(p->x_state == XQ_PNAME && p->hold.data[i] == ' ')) return fail(p);
        if (lim > TP_MAX_NAME) return fail(p);
        if (!gt) return final ? at_end(p, false) : false;
        if (p->x_state == XQ_FNAME) {
            if (!set_trimmed(&p->name, p->hold.data, lim)) return fail(p);
            tp_take(p, lim + 1);
            tp_begin_call(p);
            p->x_state = XQ_BODY;
        } else {
            if (!set_trimmed(&p->key, p->hold.data, lim)) return fail(p);
            tp_consume(p, lim + 1);
            value_start(p);
            p->x_lead = true;
            p->x_state = XQ_PVAL;
        }
        return true;
    }
    case XQ_BODY: {
        static const char *const m[3] = {P_OPEN, FN_CLOSE, TC_CLOSE};
        skip_ws(p);
        int w = p->hold.len ? starts_any(p, m, 3) : -2;
        if (w == -2) return final ? at_end(p, true) : false;
        if (w == -1) return fail(p);
        if (w == 0) {
            tp_consume(p, strlen(P_OPEN));
            p->x_state = XQ_PNAME;
            return true;
        }
        if (w == 1) tp_consume(p, strlen(FN_CLOSE));
        finish_call(p); /* </tool_call> is read after the call */
        return true;
    }
    case XQ_PVAL: {
        if (p->x_lead) {
            if (!p->hold.len) return final ? at_end(p, false) : false;
            if (p->hold.data[0] == '\n') tp_consume(p, 1);
            p->x_lead = false;
        }
        /* Qwen3-Coder sometimes leaves </parameter> out: the next parameter or </function> ends it too. */
        static const char *const m[3] = {P_CLOSE, P_OPEN, FN_CLOSE};
        int w = value_until(p, m, 3, true, final);
        if (w < 0) return final ? at_end(p, false) : false;
        value_end(p);
        if (w == 0) tp_consume(p, strlen(P_CLOSE));
        p->x_state = XQ_BODY;
        return true;
    }
    }
    return fail(p);
}

static bool glm(tp_parser *p, bool final) {
    switch (p->x_state) {
    case XG_NAME: {
        size_t i = 0;
        while (i < p->hold.len && i <= TP_MAX_NAME && tp_name_char(p->hold.data[i])) i++;
        if (i > TP_MAX_NAME || (i < p->hold.len && !tp_is_ws(p->hold.data[i]) && p->hold.data[i] != '<')) return fail(p);
        size_t j = i;
        while (j < p->hold.len && tp_is_ws(p->hold.data[j])) j++;
        if (j == p->hold.len) return final ? at_end(p, false) : false;
        static const char *const m[2] = {K_OPEN, TC_CLOSE};
        int w = starts_any_at(p, j, m, 2); /* the text after the name must open an argument or end the call */
        if (w == -2) return final ? at_end(p, false) : false;
        if (w == -1 || i == 0) return fail(p);
        set_trimmed(&p->name, p->hold.data, i);
        tp_take(p, j);
        tp_begin_call(p);
        p->x_state = XG_BODY;
        return true;
    }
    case XG_BODY: {
        static const char *const m[2] = {K_OPEN, TC_CLOSE};
        skip_ws(p);
        int w = p->hold.len ? starts_any(p, m, 2) : -2;
        if (w == -2) return final ? at_end(p, true) : false;
        if (w == -1) return fail(p);
        if (w == 0) {
            tp_consume(p, strlen(K_OPEN));
            p->x_state = XG_KEY;
            return true;
        }
        finish_call(p);
        return true;
    }
    case XG_KEY: {
        static const char *const m[1] = {K_CLOSE};
        int which;
        size_t at = tp_find_marker(&p->hold, m, 1, &which);
        if (at == SIZE_MAX) {
            if (p->hold.len > TP_MAX_NAME + strlen(K_CLOSE)) return fail(p);
            return final ? at_end(p, false) : false;
        }
        if (at > TP_MAX_NAME || !set_trimmed(&p->key, p->hold.data, at)) return fail(p);
        tp_consume(p, at + strlen(K_CLOSE));
        p->x_state = XG_AFTER_KEY;
        return true;
    }
    case XG_AFTER_KEY: {
        skip_ws(p);
        int r = p->hold.len ? tp_starts(p, V_OPEN) : -1;
        if (r < 0) return final ? at_end(p, false) : false;
        if (r == 0) return fail(p);
        tp_consume(p, strlen(V_OPEN));
        value_start(p);
        p->x_state = XG_VAL;
        return true;
    }
    case XG_VAL: {
        static const char *const m[1] = {V_CLOSE};
        int w = value_until(p, m, 1, false, final);
        if (w < 0) return final ? at_end(p, false) : false;
        value_end(p);
        tp_consume(p, strlen(V_CLOSE));
        p->x_state = XG_BODY;
        return true;
    }
    }
    return fail(p);
}

bool tp_xml_mode(tp_parser *p, bool final) {
    return p->x_state >= XG_NAME ? glm(p, final) : qwen(p, final);
}
