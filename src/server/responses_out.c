#include "server/responses_out.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/tools_out.h"

enum { ITEM_NONE, ITEM_MESSAGE, ITEM_REASONING, ITEM_CALL };

struct resp_items {
    gen_output *o;
    cJSON *output;    /* finished items */
    int cur;          /* the open item's kind */
    char cur_id[96];
    buf text;         /* the open item's text so far */
    int call;         /* ITEM_CALL: the call's index in the parser's list */
    int seq;
    int n_items;
};

resp_items *resp_items_new(gen_output *o) {
    resp_items *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->o = o;
    if (!(s->output = cJSON_CreateArray())) {
        free(s);
        return NULL;
    }
    return s;
}

void resp_items_free(resp_items *s) {
    if (!s) return;
    cJSON_Delete(s->output);
    buf_free(&s->text);
    free(s);
}

static cJSON *event(resp_items *s, const char *type) {
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "type", type);
    cJSON_AddNumberToObject(e, "sequence_number", s->seq++);
    return e;
}

static void send(resp_put put, void *ctx, cJSON *e) {
    if (put) put(ctx, e);
    else cJSON_Delete(e);
}

static const char *text_of(const resp_items *s) { return s->text.data ? s->text.data : ""; }

static cJSON *part_json(int kind, const char *text) {
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "type", kind == ITEM_MESSAGE ? "output_text" : "reasoning_text");
    cJSON_AddStringToObject(p, "text", text);
    if (kind == ITEM_MESSAGE) {
        cJSON_AddArrayToObject(p, "annotations");
        cJSON_AddArrayToObject(p, "logprobs");
    }
    return p;
}

/* The open item as it stands (done: with its whole text and status completed). */
static cJSON *item_json(resp_items *s, bool done) {
    cJSON *it = cJSON_CreateObject();
    cJSON_AddStringToObject(it, "id", s->cur_id);
    const char *status = done ? "completed" : "in_progress";
    if (s->cur == ITEM_MESSAGE) {
        cJSON_AddStringToObject(it, "type", "message");
        cJSON_AddStringToObject(it, "status", status);
        cJSON_AddStringToObject(it, "role", "assistant");
        cJSON *c = cJSON_AddArrayToObject(it, "content");
        if (done) cJSON_AddItemToArray(c, part_json(ITEM_MESSAGE, text_of(s)));
    } else if (s->cur == ITEM_REASONING) {
        cJSON_AddStringToObject(it, "type", "reasoning");
        cJSON_AddArrayToObject(it, "summary");
        cJSON *c = cJSON_AddArrayToObject(it, "content");
        if (done) cJSON_AddItemToArray(c, part_json(ITEM_REASONING, text_of(s)));
        cJSON_AddStringToObject(it, "status", status);
    } else {
        const tools_choice *c = &s->o->tools->ch[0];
        const tools_call *k = &c->calls[s->call];
        cJSON_AddStringToObject(it, "type", "function_call");
        cJSON_AddStringToObject(it, "status", status);
        cJSON_AddStringToObject(it, "call_id", k->id);
        cJSON_AddStringToObject(it, "name", k->name.data ? k->name.data : "");
        cJSON_AddStringToObject(it, "arguments", done ? text_of(s) : "");
    }
    return it;
}

static void close_item(resp_items *s, resp_put put, void *ctx) {
    if (s->cur == ITEM_NONE) return;
    int index = s->n_items - 1;
    cJSON *e;
    if (s->cur == ITEM_CALL) {
        e = event(s, "response.function_call_arguments.done");
        cJSON_AddStringToObject(e, "item_id", s->cur_id);
        cJSON_AddNumberToObject(e, "output_index", index);
        cJSON_AddStringToObject(e, "arguments", text_of(s));
        send(put, ctx, e);
    } else {
        e = event(s, s->cur == ITEM_MESSAGE ? "response.output_text.done" : "response.reasoning_text.done");
        cJSON_AddStringToObject(e, "item_id", s->cur_id);
        cJSON_AddNumberToObject(e, "output_index", index);
        cJSON_AddNumberToObject(e, "content_index", 0);
        cJSON_AddStringToObject(e, "text", text_of(s));
        if (s->cur == ITEM_MESSAGE) cJSON_AddArrayToObject(e, "logprobs");
        send(put, ctx, e);
        e = event(s, "response.content_part.done");
        cJSON_AddStringToObject(e, "item_id", s->cur_id);
        cJSON_AddNumberToObject(e, "output_index", index);
        cJSON_AddNumberToObject(e, "content_index", 0);
        cJSON_AddItemToObject(e, "part", part_json(s->cur, text_of(s)));
        send(put, ctx, e);
    }
    e = event(s, "response.output_item.done");
    cJSON_AddNumberToObject(e, "output_index", index);
    cJSON_AddItemToObject(e, "item", item_json(s, true));
    send(put, ctx, e);
    cJSON_AddItemToArray(s->output, item_json(s, true));
    s->cur = ITEM_NONE;
    s->text.len = 0;
}

static void open_item(resp_items *s, int kind, int call, resp_put put, void *ctx) {
    close_item(s, put, ctx);
    s->cur = kind;
    s->call = call;
    s->text.len = 0;
    const char *serial = strchr(s->o->id, '_');
    serial = serial ? serial + 1 : s->o->id;
    snprintf(s->cur_id, sizeof s->cur_id, "%s_%s_%d", kind == ITEM_MESSAGE ? "msg" : kind == ITEM_REASONING ? "rs" : "fc",
             serial, s->n_items);
    int index = s->n_items++;
    cJSON *e = event(s, "response.output_item.added");
    cJSON_AddNumberToObject(e, "output_index", index);
    cJSON_AddItemToObject(e, "item", item_json(s, false));
    send(put, ctx, e);
    if (kind != ITEM_CALL) {
        e = event(s, "response.content_part.added");
        cJSON_AddStringToObject(e, "item_id", s->cur_id);
        cJSON_AddNumberToObject(e, "output_index", index);
        cJSON_AddNumberToObject(e, "content_index", 0);
        cJSON_AddItemToObject(e, "part", part_json(kind, ""));
        send(put, ctx, e);
    }
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

static void apply_op(resp_items *s, const tools_choice *c, const tools_op *op, resp_put put, void *ctx) {
    const char *txt = tools_op_text(c, op);
    int kind = op->ev == TP_CONTENT ? ITEM_MESSAGE : op->ev == TP_REASONING ? ITEM_REASONING : ITEM_CALL;
    if (op->ev == TP_CALL_END) {
        close_item(s, put, ctx);
        return;
    }
    if (op->ev == TP_CALL_BEGIN) {
        open_item(s, ITEM_CALL, op->call, put, ctx);
        return;
    }
    if (s->cur != kind) open_item(s, kind, op->call, put, ctx);
    buf_append(&s->text, txt, op->len);
    cJSON *e = event(s, kind == ITEM_MESSAGE ? "response.output_text.delta"
                        : kind == ITEM_REASONING ? "response.reasoning_text.delta" : "response.function_call_arguments.delta");
    cJSON_AddStringToObject(e, "item_id", s->cur_id);
    cJSON_AddNumberToObject(e, "output_index", s->n_items - 1);
    if (kind != ITEM_CALL) cJSON_AddNumberToObject(e, "content_index", 0);
    cJSON_AddItemToObject(e, "delta", string_n(txt, op->len));
    if (kind == ITEM_MESSAGE) cJSON_AddArrayToObject(e, "logprobs");
    send(put, ctx, e);
}

static void apply_ops(resp_items *s, resp_put put, void *ctx) {
    tools_choice *c = &s->o->tools->ch[0];
    for (int i = 0; i < c->n_ops; i++) apply_op(s, c, &c->ops[i], put, ctx);
    tools_ops_clear(c);
}

/* ---- the response object ---- */

static void echo(cJSON *r, const cJSON *e, const char *name, cJSON *fallback) {
    const cJSON *v = e ? cJSON_GetObjectItemCaseSensitive(e, name) : NULL;
    if (v && !cJSON_IsNull(v)) {
        cJSON_AddItemToObject(r, name, cJSON_Duplicate(v, true));
        cJSON_Delete(fallback);
    } else {
        cJSON_AddItemToObject(r, name, fallback);
    }
}

static cJSON *usage_json(const gen_output *o) {
    const pith_usage *u = &o->choices[0].usage;
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "input_tokens", u->prompt_tokens);
    cJSON *d = cJSON_AddObjectToObject(j, "input_tokens_details");
    cJSON_AddNumberToObject(d, "cached_tokens", u->cached_tokens);
    cJSON_AddNumberToObject(j, "output_tokens", u->completion_tokens);
    d = cJSON_AddObjectToObject(j, "output_tokens_details");
    cJSON_AddNumberToObject(d, "reasoning_tokens", 0);
    cJSON_AddNumberToObject(j, "total_tokens", (double)u->prompt_tokens + u->completion_tokens);
    return j;
}

/* done: generation ended (status, usage); output is taken. */
static cJSON *response_json(gen_output *o, bool done, cJSON *output) {
    const cJSON *e = o->p->tools ? o->p->tools->echo : NULL;
    bool incomplete = done && o->choices[0].finish == PITH_FINISH_LENGTH;
    cJSON *r = cJSON_CreateObject();
    cJSON_AddStringToObject(r, "id", o->id);
    cJSON_AddStringToObject(r, "object", "response");
    cJSON_AddNumberToObject(r, "created_at", (double)o->created);
    cJSON_AddStringToObject(r, "status", !done ? "in_progress" : incomplete ? "incomplete" : "completed");
    cJSON_AddNullToObject(r, "error");
    if (incomplete) {
        cJSON *d = cJSON_AddObjectToObject(r, "incomplete_details");
        cJSON_AddStringToObject(d, "reason", "max_output_tokens");
    } else {
        cJSON_AddNullToObject(r, "incomplete_details");
    }
    echo(r, e, "instructions", cJSON_CreateNull());
    echo(r, e, "max_output_tokens", cJSON_CreateNull());
    cJSON_AddStringToObject(r, "model", o->srv->model_name);
    cJSON_AddItemToObject(r, "output", output ? output : cJSON_CreateArray());
    echo(r, e, "parallel_tool_calls", cJSON_CreateTrue());
    cJSON_AddNullToObject(r, "previous_response_id");
    cJSON *reasoning = cJSON_AddObjectToObject(r, "reasoning");
    echo(reasoning, cJSON_GetObjectItemCaseSensitive(e, "reasoning"), "effort", cJSON_CreateNull());
    cJSON_AddNullToObject(reasoning, "summary");
    cJSON_AddFalseToObject(r, "store");
    echo(r, e, "temperature", cJSON_CreateNumber(1));
    cJSON *text = cJSON_CreateObject();
    cJSON_AddStringToObject(cJSON_AddObjectToObject(text, "format"), "type", "text");
    echo(r, e, "text", text);
    echo(r, e, "tool_choice", cJSON_CreateString("auto"));
    echo(r, e, "tools", cJSON_CreateArray());
    echo(r, e, "top_p", cJSON_CreateNumber(1));
    cJSON_AddStringToObject(r, "truncation", "disabled");
    if (done) cJSON_AddItemToObject(r, "usage", usage_json(o));
    else cJSON_AddNullToObject(r, "usage");
    echo(r, e, "user", cJSON_CreateNull());
    echo(r, e, "metadata", cJSON_CreateObject());
    return r;
}

cJSON *responses_object(gen_output *o, resp_items *s) {
    resp_items *own = NULL;
    if (!s) {
        /* A whole response: every operation was recorded; replay them without sending events. */
        if (!(own = s = resp_items_new(o))) return NULL;
        apply_ops(s, NULL, NULL);
        close_item(s, NULL, NULL);
    }
    cJSON *r = response_json(o, true, cJSON_Duplicate(s->output, true));
    resp_items_free(own);
    return r;
}

void resp_stream_open(resp_items *s, resp_put put, void *ctx) {
    cJSON *e = event(s, "response.created");
    cJSON_AddItemToObject(e, "response", response_json(s->o, false, NULL));
    put(ctx, e);
    e = event(s, "response.in_progress");
    cJSON_AddItemToObject(e, "response", response_json(s->o, false, NULL));
    put(ctx, e);
}

int resp_stream_event(resp_items *s, const job_event *ev, resp_put put, void *ctx) {
    int rc = tools_out_event(s->o->tools, ev);
    if (ev->final) {
        out_choice *c = &s->o->choices[0];
        c->done = true;
        c->finish = ev->finish;
        c->usage = ev->usage;
    }
    apply_ops(s, put, ctx);
    if (ev->final) close_item(s, put, ctx);
    return rc || s->text.failed ? -1 : 0;
}

void resp_stream_close(resp_items *s, resp_put put, void *ctx) {
    bool incomplete = s->o->choices[0].finish == PITH_FINISH_LENGTH;
    cJSON *e = event(s, incomplete ? "response.incomplete" : "response.completed");
    cJSON_AddItemToObject(e, "response", responses_object(s->o, s));
    put(ctx, e);
}

void resp_stream_error(resp_items *s, const char *code, const char *message, resp_put put, void *ctx) {
    cJSON *e = event(s, "error");
    cJSON_AddStringToObject(e, "code", code);
    cJSON_AddStringToObject(e, "message", message);
    cJSON_AddNullToObject(e, "param");
    put(ctx, e);
}
