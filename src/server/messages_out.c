#include "server/messages_out.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/tools.h"
#include "server/tools_out.h"

/* BLK_HELD: a tool call kept until it ends, then sent as a tool_use block or, when its arguments are not
 * a JSON object, as a text block. */
enum { BLK_NONE, BLK_TEXT, BLK_THINKING, BLK_TOOL, BLK_HELD };

struct msg_out {
    gen_output *o;
    cJSON *content;   /* finished blocks */
    int cur;          /* the open block's kind */
    int n_blocks;     /* blocks opened so far; the open one has index n_blocks - 1 */
    buf text;         /* the open block's text, or the call's arguments */
    buf ws;           /* whitespace that has not opened a block (yet) */
    int ws_kind;
    int call;         /* BLK_TOOL, BLK_HELD: the call's index in the parser's list */
    bool incremental; /* tool input is sent as it comes */
    bool any_tool;
};

msg_out *msg_out_new(gen_output *o) {
    msg_out *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->o = o;
    s->incremental = o->p->tools && o->p->tools->constrained;
    if (!(s->content = cJSON_CreateArray())) {
        free(s);
        return NULL;
    }
    return s;
}

void msg_out_free(msg_out *s) {
    if (!s) return;
    cJSON_Delete(s->content);
    buf_free(&s->text);
    buf_free(&s->ws);
    free(s);
}

static cJSON *event(const char *type) {
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "type", type);
    return e;
}

static void send(msg_put put, void *ctx, cJSON *e) {
    if (put) put(ctx, e);
    else cJSON_Delete(e);
}

static cJSON *string_n(const char *p, size_t n) {
    char *z = malloc(n + 1);
    if (!z) return NULL;
    memcpy(z, p, n);
    z[n] = 0;
    cJSON *j = cJSON_CreateString(z);
    free(z);
    return j;
}

static const char *text_of(const msg_out *s) { return s->text.len ? s->text.data : ""; }

static const tools_call *call_of(const msg_out *s) { return &s->o->tools->ch[0].calls[s->call]; }

/* The id of the serial part of the response id ("cmpl-X" gives "PREFIX_X"). */
static void id_with(const char *id, const char *prefix, char *out, size_t cap) {
    const char *p = strpbrk(id, "-_");
    snprintf(out, cap, "%s_%s", prefix, p ? p + 1 : id);
}

/* A block: whole (done) or as content_block_start shows it. */
static cJSON *block_json(const msg_out *s, int kind, bool done, cJSON *input) {
    cJSON *b = cJSON_CreateObject();
    if (kind == BLK_TEXT) {
        cJSON_AddStringToObject(b, "type", "text");
        cJSON_AddStringToObject(b, "text", done ? text_of(s) : "");
    } else if (kind == BLK_THINKING) {
        cJSON_AddStringToObject(b, "type", "thinking");
        cJSON_AddStringToObject(b, "thinking", done ? text_of(s) : "");
        cJSON_AddStringToObject(b, "signature", "");
    } else {
        const tools_call *k = call_of(s);
        char id[96];
        id_with(k->id, "toolu", id, sizeof id);
        cJSON_AddStringToObject(b, "type", "tool_use");
        cJSON_AddStringToObject(b, "id", id);
        cJSON_AddStringToObject(b, "name", k->name.len ? k->name.data : "");
        cJSON_AddItemToObject(b, "input", input ? input : cJSON_CreateObject());
    }
    return b;
}

/* A call's arguments as the tool_use input: a JSON object (nothing but whitespace: {}), else NULL. */
static cJSON *parse_input(const char *args) {
    const char *p = args + strspn(args, " \t\r\n");
    if (!*p) return cJSON_CreateObject();
    cJSON *v = cJSON_ParseWithOpts(p, NULL, 1);
    if (cJSON_IsObject(v)) return v;
    cJSON_Delete(v);
    return NULL;
}

static void open_block(msg_out *s, int kind, msg_put put, void *ctx);

static void delta(msg_out *s, const char *txt, size_t n, msg_put put, void *ctx) {
    buf_append(&s->text, txt, n);
    if (!put) return;
    cJSON *e = event("content_block_delta");
    cJSON_AddNumberToObject(e, "index", s->n_blocks - 1);
    cJSON *d = cJSON_AddObjectToObject(e, "delta");
    if (s->cur == BLK_TEXT) {
        cJSON_AddStringToObject(d, "type", "text_delta");
        cJSON_AddItemToObject(d, "text", string_n(txt, n));
    } else if (s->cur == BLK_THINKING) {
        cJSON_AddStringToObject(d, "type", "thinking_delta");
        cJSON_AddItemToObject(d, "thinking", string_n(txt, n));
    } else {
        cJSON_AddStringToObject(d, "type", "input_json_delta");
        cJSON_AddItemToObject(d, "partial_json", string_n(txt, n));
    }
    put(ctx, e);
}

/* A held call, once it ended: a tool_use block with its input, or a text block saying what it was. */
static void finish_held(msg_out *s, msg_put put, void *ctx) {
    cJSON *input = parse_input(text_of(s));
    if (!input) {
        const tools_call *k = call_of(s);
        buf note = {0};
        buf_printf(&note, "[the model called the tool '%s' with arguments that are not a JSON object: %s]",
                   k->name.len ? k->name.data : "", text_of(s));
        s->cur = BLK_NONE;
        open_block(s, BLK_TEXT, put, ctx);
        if (note.len) delta(s, note.data, note.len, put, ctx);
        if (note.failed) s->text.failed = true;
        buf_free(&note);
        return;
    }
    cJSON_Delete(input);
    buf args = s->text;
    s->text = (buf){0};
    s->cur = BLK_NONE;
    open_block(s, BLK_TOOL, put, ctx);
    if (strspn(args.len ? args.data : "", " \t\r\n") < args.len) delta(s, args.data, args.len, put, ctx);
    if (args.failed) s->text.failed = true;
    buf_free(&args);
}

static void close_block(msg_out *s, msg_put put, void *ctx) {
    if (s->cur == BLK_NONE) return;
    if (s->cur == BLK_HELD) {
        finish_held(s, put, ctx); /* leaves the block it opened open */
        close_block(s, put, ctx);
        return;
    }
    cJSON *input = NULL;
    if (s->cur == BLK_TOOL) {
        /* Streamed input that ends as no JSON object (cut by max_tokens) is {} in the whole message. */
        input = parse_input(text_of(s));
        s->any_tool = true;
    }
    cJSON_AddItemToArray(s->content, block_json(s, s->cur, true, input));
    cJSON *e = event("content_block_stop");
    cJSON_AddNumberToObject(e, "index", s->n_blocks - 1);
    send(put, ctx, e);
    s->cur = BLK_NONE;
    s->text.len = 0;
}

static void open_block(msg_out *s, int kind, msg_put put, void *ctx) {
    close_block(s, put, ctx);
    s->cur = kind;
    s->text.len = 0;
    int index = s->n_blocks++;
    cJSON *e = event("content_block_start");
    cJSON_AddNumberToObject(e, "index", index);
    cJSON_AddItemToObject(e, "content_block", block_json(s, kind, false, NULL));
    send(put, ctx, e);
}

static bool all_space(const char *t, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (t[i] != ' ' && t[i] != '\n' && t[i] != '\r' && t[i] != '\t') return false;
    return true;
}

static void add_text(msg_out *s, int kind, const char *t, size_t n, msg_put put, void *ctx) {
    if (s->cur == kind) {
        delta(s, t, n, put, ctx);
        return;
    }
    if (s->ws_kind != kind) {
        s->ws.len = 0;
        s->ws_kind = kind;
    }
    if (all_space(t, n)) {
        buf_append(&s->ws, t, n);
        return;
    }
    open_block(s, kind, put, ctx);
    buf_append(&s->ws, t, n);
    if (s->ws.len) delta(s, s->ws.data, s->ws.len, put, ctx);
    if (s->ws.failed) s->text.failed = true;
    s->ws.len = 0;
}

static void apply_op(msg_out *s, const tools_choice *c, const tools_op *op, msg_put put, void *ctx) {
    const char *t = tools_op_text(c, op);
    switch (op->ev) {
    case TP_CONTENT: add_text(s, BLK_TEXT, t, op->len, put, ctx); break;
    case TP_REASONING: add_text(s, BLK_THINKING, t, op->len, put, ctx); break;
    case TP_CALL_BEGIN:
        close_block(s, put, ctx);
        s->ws.len = 0;
        s->call = op->call;
        if (s->incremental) {
            open_block(s, BLK_TOOL, put, ctx);
        } else {
            s->cur = BLK_HELD;
            s->text.len = 0;
        }
        break;
    case TP_CALL_ARGS:
        if (s->cur == BLK_TOOL) delta(s, t, op->len, put, ctx);
        else if (s->cur == BLK_HELD) buf_append(&s->text, t, op->len);
        break;
    case TP_CALL_END:
        if (s->cur == BLK_TOOL || s->cur == BLK_HELD) close_block(s, put, ctx);
        break;
    }
}

static void apply_ops(msg_out *s, msg_put put, void *ctx) {
    tools_choice *c = &s->o->tools->ch[0];
    for (int i = 0; i < c->n_ops; i++) apply_op(s, c, &c->ops[i], put, ctx);
    tools_ops_clear(c);
}

/* ---- stop reason, usage, the message ---- */

/* The stop sequence that ended the output: the one whose first occurrence in the whole output (the
 * held-back text included, decoded from the token ids as the engine decodes them) ends first. */
static const char *matched_stop(const gen_output *o) {
    const gen_params *p = o->p;
    const out_choice *c = &o->choices[0];
    if (!p->n_stop || !c->n_ids || !o->srv->tok) return NULL;
    const pith_tokenizer *tok = o->srv->tok;
    size_t cap = pith_detok_max_piece(tok) + 8;
    char *piece = malloc(cap);
    if (!piece) return NULL;
    pith_detok d;
    pith_detok_init(&d, tok, false);
    if (p->n_prompt_ids > 0) pith_detok_skip(&d, p->prompt_ids[0], p->prompt_n[0]);
    buf text = {0};
    for (int i = 0; i < c->n_ids; i++) buf_append(&text, piece, pith_detok_push(&d, c->ids[i], piece, cap));
    buf_append(&text, piece, pith_detok_flush(&d, piece, cap));
    free(piece);
    const char *best = NULL;
    size_t best_end = 0;
    for (int i = 0; !text.failed && text.len && i < p->n_stop; i++) {
        const char *at = strstr(text.data, p->stop[i]);
        if (!at) continue;
        size_t end = (size_t)(at - text.data) + strlen(p->stop[i]);
        if (!best || end < best_end) best = p->stop[i], best_end = end;
    }
    buf_free(&text);
    return best;
}

static const char *stop_reason(const msg_out *s, const char **seq) {
    const out_choice *c = &s->o->choices[0];
    *seq = NULL;
    if (c->finish == PITH_FINISH_LENGTH) return "max_tokens";
    if (s->any_tool) return "tool_use";
    if ((*seq = matched_stop(s->o))) return "stop_sequence";
    return "end_turn";
}

static int input_tokens(const gen_output *o) {
    const out_choice *c = &o->choices[0];
    if (c->done) return c->usage.prompt_tokens;
    const cJSON *n = o->p->tools ? cJSON_GetObjectItemCaseSensitive(o->p->tools->echo, "input_tokens") : NULL;
    return cJSON_IsNumber(n) ? n->valueint : 0;
}

static cJSON *usage_json(const gen_output *o) {
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "input_tokens", input_tokens(o));
    cJSON_AddNumberToObject(u, "output_tokens", o->choices[0].usage.completion_tokens);
    cJSON_AddNumberToObject(u, "cache_creation_input_tokens", 0);
    cJSON_AddNumberToObject(u, "cache_read_input_tokens", 0);
    cJSON_AddStringToObject(u, "service_tier", "standard");
    return u;
}

/* done: generation ended (stop reason, usage); content is taken. */
static cJSON *message_json(const msg_out *s, bool done, cJSON *content) {
    const gen_output *o = s->o;
    char id[64];
    id_with(o->id, "msg", id, sizeof id);
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", id);
    cJSON_AddStringToObject(m, "type", "message");
    cJSON_AddStringToObject(m, "role", "assistant");
    cJSON_AddStringToObject(m, "model", o->srv->model_name);
    cJSON_AddItemToObject(m, "content", content ? content : cJSON_CreateArray());
    const char *seq = NULL;
    if (done) cJSON_AddStringToObject(m, "stop_reason", stop_reason(s, &seq));
    else cJSON_AddNullToObject(m, "stop_reason");
    if (seq) cJSON_AddStringToObject(m, "stop_sequence", seq);
    else cJSON_AddNullToObject(m, "stop_sequence");
    cJSON_AddItemToObject(m, "usage", usage_json(o));
    return m;
}

cJSON *messages_object(gen_output *o) {
    msg_out *s = msg_out_new(o);
    if (!s) return NULL;
    s->incremental = false;
    apply_ops(s, NULL, NULL);
    close_block(s, NULL, NULL);
    cJSON *m = s->text.failed || s->ws.failed ? NULL : message_json(s, true, s->content);
    if (m) s->content = NULL;
    msg_out_free(s);
    return m;
}

void msg_stream_open(msg_out *s, msg_put put, void *ctx) {
    cJSON *e = event("message_start");
    cJSON_AddItemToObject(e, "message", message_json(s, false, NULL));
    put(ctx, e);
    put(ctx, event("ping"));
}

static void record_id(out_choice *c, int32_t id) {
    if (c->n_ids == c->cap_ids) {
        int cap = c->cap_ids ? c->cap_ids * 2 : 64;
        int32_t *ids = realloc(c->ids, (size_t)cap * sizeof *ids);
        if (!ids) return; /* only the stop sequence's name is at stake */
        c->ids = ids;
        c->cap_ids = cap;
    }
    c->ids[c->n_ids++] = id;
}

int msg_stream_event(msg_out *s, const job_event *ev, msg_put put, void *ctx) {
    if (ev->prompt || ev->restart || ev->choice != 0) return 0;
    out_choice *c = &s->o->choices[0];
    if (!ev->final && ev->token >= 0 && s->o->p->return_token_ids) record_id(c, ev->token);
    int rc = tools_out_event(s->o->tools, ev);
    if (ev->final) {
        c->done = true;
        c->finish = ev->finish;
        c->usage = ev->usage;
    }
    apply_ops(s, put, ctx);
    if (ev->final) close_block(s, put, ctx);
    return rc || s->text.failed || s->ws.failed ? -1 : 0;
}

void msg_stream_close(msg_out *s, msg_put put, void *ctx) {
    cJSON *e = event("message_delta");
    cJSON *d = cJSON_AddObjectToObject(e, "delta");
    const char *seq;
    cJSON_AddStringToObject(d, "stop_reason", stop_reason(s, &seq));
    if (seq) cJSON_AddStringToObject(d, "stop_sequence", seq);
    else cJSON_AddNullToObject(d, "stop_sequence");
    cJSON *u = cJSON_AddObjectToObject(e, "usage");
    cJSON_AddNumberToObject(u, "input_tokens", input_tokens(s->o));
    cJSON_AddNumberToObject(u, "output_tokens", s->o->choices[0].usage.completion_tokens);
    put(ctx, e);
    put(ctx, event("message_stop"));
}

void msg_stream_error(msg_out *s, int status, const char *message, msg_put put, void *ctx) {
    (void)s;
    api_error e;
    api_errorf(&e, status, NULL, NULL, "%s", message);
    put(ctx, anthropic_error_json(&e));
}

/* ---- errors ---- */

int anthropic_status(int status) { return status == 503 ? 529 : status; }

const char *anthropic_error_type(int status) {
    switch (status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503:
    case 529: return "overloaded_error";
    default: return status >= 500 ? "api_error" : "invalid_request_error";
    }
}

cJSON *anthropic_error_json(const api_error *e) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "type", "error");
    cJSON *o = cJSON_AddObjectToObject(root, "error");
    if (!o) {
        cJSON_Delete(root);
        return NULL;
    }
    cJSON_AddStringToObject(o, "type", anthropic_error_type(e->status));
    cJSON_AddStringToObject(o, "message", e->message);
    return root;
}
