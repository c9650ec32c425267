#include "server/tools_out.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/format.h"

/* Special tokens whose text the parsers read. */
static const char *const MARKERS[] = {
    "<|python_tag|>", "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]", "<|channel|>", "<|message|>", "<|end|>", "<|call|>",
    "<|return|>", "<|start|>", "<|constrain|>", "<think>", "</think>", "<tool_call>", "</tool_call>",
    /* GLM */
    "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>",
    /* DeepSeek V3 / V3.1 */
    ("<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "begin\xef\xbd\x9c>"),
    ("<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "end\xef\xbd\x9c>"),
    ("<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "begin\xef\xbd\x9c>"),
    ("<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "end\xef\xbd\x9c>"),
    ("<\xef\xbd\x9ctool\xe2\x96\x81" "sep\xef\xbd\x9c>"),
    /* Kimi K2 */
    "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", "<|tool_call_begin|>",
    "<|tool_call_argument_begin|>", "<|tool_call_end|>",
    /* Gemma 4 */
    "<|tool_call>", "<tool_call|>", "<|\"|>",
};

static void add_op(tools_choice *c, tp_event ev, int call, const char *s, size_t n) {
    tools_op *last = c->n_ops ? &c->ops[c->n_ops - 1] : NULL;
    size_t start = c->ops_text.len;
    buf_append(&c->ops_text, s, n);
    if (last && last->ev == ev && last->call == call && ev != TP_CALL_BEGIN && ev != TP_CALL_END &&
        last->start + last->len == start) {
        last->len += n;
        return;
    }
    if (c->n_ops == c->cap_ops) {
        int cap = c->cap_ops ? c->cap_ops * 2 : 8;
        tools_op *ops = realloc(c->ops, (size_t)cap * sizeof *ops);
        if (!ops) {
            c->oom = true;
            return;
        }
        c->ops = ops;
        c->cap_ops = cap;
    }
    c->ops[c->n_ops++] = (tools_op){ev, call, start, n};
}

static void sink(void *user, tp_event ev, const char *s, size_t n) {
    tools_choice *c = user;
    switch (ev) {
    case TP_CONTENT: buf_append(&c->content, s, n); break;
    case TP_REASONING: buf_append(&c->reasoning, s, n); break;
    case TP_CALL_BEGIN:
        if (c->n_calls == c->cap_calls) {
            int cap = c->cap_calls ? c->cap_calls * 2 : 4;
            tools_call *calls = realloc(c->calls, (size_t)cap * sizeof *calls);
            if (!calls) {
                c->oom = true;
                return;
            }
            c->calls = calls;
            c->cap_calls = cap;
        }
        tools_call *k = &c->calls[c->n_calls];
        memset(k, 0, sizeof *k);
        snprintf(k->id, sizeof k->id, "call_%s%d%d", c->id_base, c->index, c->n_calls);
        buf_append(&k->name, s, n);
        c->n_calls++;
        c->in_call = true;
        break;
    case TP_CALL_ARGS:
        if (c->in_call) buf_append(&c->calls[c->n_calls - 1].args, s, n);
        break;
    case TP_CALL_END: c->in_call = false; break;
    }
    add_op(c, ev, c->n_calls - 1, s, n);
}

tools_out *tools_out_new(const chat_tools *cfg, const pith_tokenizer *tok, const char *response_id, int n_choices) {
    tools_out *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->cfg = cfg;
    t->tok = tok;
    t->n_choices = n_choices;
    /* The serial part of the response id (after the last '-'). */
    const char *dash = strrchr(response_id, '-'), *us = strrchr(response_id, '_');
    if (!dash || (us && us > dash)) dash = us;
    snprintf(t->id_base, sizeof t->id_base, "%s", dash ? dash + 1 : response_id);
    t->ch = calloc((size_t)n_choices, sizeof *t->ch);
    if (!t->ch) {
        free(t);
        return NULL;
    }
    return t;
}

void tools_out_free(tools_out *t) {
    if (!t) return;
    for (int i = 0; i < t->n_choices; i++) {
        tools_choice *c = &t->ch[i];
        tp_free(&c->parser);
        buf_free(&c->content);
        buf_free(&c->reasoning);
        for (int k = 0; k < c->n_calls; k++) {
            buf_free(&c->calls[k].name);
            buf_free(&c->calls[k].args);
        }
        free(c->calls);
        free(c->ops);
        buf_free(&c->ops_text);
    }
    free(t->ch);
    free(t);
}

static bool is_marker(const char *s, size_t n) {
    for (size_t i = 0; i < sizeof MARKERS / sizeof *MARKERS; i++)
        if (strlen(MARKERS[i]) == n && !memcmp(MARKERS[i], s, n)) return true;
    return false;
}

int tools_out_event(tools_out *t, const job_event *ev) {
    if (ev->choice < 0 || ev->choice >= t->n_choices) return 0;
    tools_choice *c = &t->ch[ev->choice];
    if (!c->parser.sink) {
        c->id_base = t->id_base;
        c->index = ev->choice;
        tp_config cfg = t->cfg->parse;
        cfg.forced = t->cfg->constrained && t->cfg->choice != TOOL_CHOICE_AUTO;
        cfg.tool_defs = t->cfg->tools;
        tp_init(&c->parser, &cfg, sink, c);
    }
    if (c->finished) return 0;
    int rc = 0;
    if (ev->text_len) rc |= tp_feed(&c->parser, ev->text, ev->text_len);
    if (!ev->final && ev->token >= 0 && t->tok && pith_tokenizer_is_special(t->tok, ev->token) &&
        !pith_tokenizer_is_eog(t->tok, ev->token)) {
        size_t n = 0;
        const char *s = pith_tokenizer_token_text(t->tok, ev->token, &n);
        if (s && is_marker(s, n)) rc |= tp_feed(&c->parser, s, n);
    }
    if (ev->final) {
        /* Cut off by max_tokens: an unfinished call is returned as far as it got, or dropped when its
         * name was not complete (tool_parse.h). */
        rc |= ev->finish == PITH_FINISH_LENGTH ? tp_finish_truncated(&c->parser) : tp_finish(&c->parser);
        c->finished = true;
    }
    bool oom = c->oom || c->content.failed || c->reasoning.failed || c->ops_text.failed;
    for (int k = 0; k < c->n_calls; k++) oom |= c->calls[k].name.failed || c->calls[k].args.failed;
    return rc || oom ? -1 : 0;
}

void tools_ops_clear(tools_choice *c) {
    c->n_ops = 0;
    c->ops_text.len = 0;
}

const char *tools_op_text(const tools_choice *c, const tools_op *op) {
    return c->ops_text.data ? c->ops_text.data + op->start : "";
}

static cJSON *string_n(const char *s, size_t n) {
    char *z = malloc(n + 1);
    if (!z) return NULL;
    memcpy(z, s, n);
    z[n] = 0;
    cJSON *j = cJSON_CreateString(z);
    free(z);
    return j;
}

static cJSON *call_json(const tools_call *k, int index, bool with_index) {
    cJSON *j = cJSON_CreateObject();
    if (with_index) cJSON_AddNumberToObject(j, "index", index);
    cJSON_AddStringToObject(j, "id", k->id);
    cJSON_AddStringToObject(j, "type", "function");
    cJSON *f = cJSON_AddObjectToObject(j, "function");
    cJSON_AddStringToObject(f, "name", k->name.data ? k->name.data : "");
    cJSON_AddStringToObject(f, "arguments", k->args.data ? k->args.data : "");
    return j;
}

/* What the parser did about malformed or cut-off calls, as the choice's pith_warning (none when nothing). */
static void add_warning(const tools_choice *c, cJSON *choice) {
    unsigned notes = c->parser.notes;
    if (!(notes & (TP_NOTE_FELL_BACK | TP_NOTE_CUT_CALL | TP_NOTE_DROPPED))) return;
    buf w = {0};
    if (notes & TP_NOTE_FELL_BACK)
        buf_puts(&w, "text that began like a tool call was not a well-formed call: it is returned as text; ");
    if (notes & TP_NOTE_CUT_CALL) buf_puts(&w, "the output ended inside a tool call: its arguments are incomplete; ");
    if (notes & TP_NOTE_DROPPED) {
        const buf *d = &c->parser.dropped;
        size_t n = d->len > 200 ? 200 : d->len;
        while (n && n < d->len && ((unsigned char)d->data[n] & 0xC0) == 0x80) n--; /* whole characters */
        buf_puts(&w, "the output was cut off before a tool call's name was complete; the partial call was dropped: ");
        buf_append(&w, d->data ? d->data : "", n);
        if (n < d->len) buf_puts(&w, "...");
        buf_puts(&w, "; ");
    }
    if (w.len >= 2) w.len -= 2;
    cJSON *s = string_n(w.data ? w.data : "", w.len);
    if (s) cJSON_AddItemToObject(choice, "pith_warning", s);
    buf_free(&w);
}

void tools_out_fix_choice(tools_out *t, int i, cJSON *message, cJSON *choice) {
    tools_choice *c = &t->ch[i];
    add_warning(c, choice);
    if (c->n_calls && !c->content.len) cJSON_ReplaceItemInObjectCaseSensitive(message, "content", cJSON_CreateNull());
    else cJSON_ReplaceItemInObjectCaseSensitive(message, "content", cJSON_CreateString(c->content.data ? c->content.data : ""));
    if (c->reasoning.len) cJSON_AddStringToObject(message, "reasoning_content", c->reasoning.data);
    if (c->n_calls) {
        cJSON *calls = cJSON_AddArrayToObject(message, "tool_calls");
        for (int k = 0; k < c->n_calls; k++) cJSON_AddItemToArray(calls, call_json(&c->calls[k], k, false));
        const cJSON *fr = cJSON_GetObjectItemCaseSensitive(choice, "finish_reason");
        if (cJSON_IsString(fr) && !strcmp(fr->valuestring, "stop"))
            cJSON_ReplaceItemInObjectCaseSensitive(choice, "finish_reason", cJSON_CreateString("tool_calls"));
    }
}

/* The delta of one operation; NULL for those that send nothing (a call's end). */
static cJSON *op_delta(const tools_choice *c, const tools_op *op) {
    const char *s = tools_op_text(c, op);
    cJSON *d = NULL;
    switch (op->ev) {
    case TP_CONTENT:
    case TP_REASONING:
        d = cJSON_CreateObject();
        cJSON_AddItemToObject(d, op->ev == TP_CONTENT ? "content" : "reasoning_content", string_n(s, op->len));
        break;
    case TP_CALL_BEGIN:
    case TP_CALL_ARGS: {
        d = cJSON_CreateObject();
        cJSON *calls = cJSON_AddArrayToObject(d, "tool_calls");
        cJSON *k = cJSON_CreateObject();
        cJSON_AddItemToArray(calls, k);
        cJSON_AddNumberToObject(k, "index", op->call);
        cJSON *f;
        if (op->ev == TP_CALL_BEGIN) {
            cJSON_AddStringToObject(k, "id", c->calls[op->call].id);
            cJSON_AddStringToObject(k, "type", "function");
            f = cJSON_AddObjectToObject(k, "function");
            cJSON_AddItemToObject(f, "name", string_n(s, op->len));
            cJSON_AddStringToObject(f, "arguments", "");
        } else {
            f = cJSON_AddObjectToObject(k, "function");
            cJSON_AddItemToObject(f, "arguments", string_n(s, op->len));
        }
        break;
    }
    case TP_CALL_END: break;
    }
    return d;
}

int tools_out_chat_stream(gen_output *o, const job_event *ev, void (*put)(void *ctx, cJSON *chunk), void *ctx) {
    tools_out *t = o->tools;
    int rc = tools_out_event(t, ev);
    tools_choice *c = &t->ch[ev->choice];
    for (int i = 0; i < c->n_ops; i++) {
        cJSON *d = op_delta(c, &c->ops[i]);
        if (!d) continue;
        cJSON *chunk = out_role_chunk(o, ev->choice, ev->weight_generation);
        cJSON *choice = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(chunk, "choices"), 0);
        if (!choice) {
            cJSON_Delete(d);
            cJSON_Delete(chunk);
            rc = -1;
            continue;
        }
        cJSON_ReplaceItemInObjectCaseSensitive(choice, "delta", d);
        put(ctx, chunk);
    }
    tools_ops_clear(c);
    /* Logprobs, the finish reason and the bookkeeping come from the plain chunk, without its text. */
    job_event bare = *ev;
    bare.text = NULL;
    bare.text_len = 0;
    bool oom = false;
    cJSON *chunk = out_chunk(o, &bare, &oom);
    if (chunk) {
        cJSON *choice = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(chunk, "choices"), 0);
        cJSON_ReplaceItemInObjectCaseSensitive(choice, "delta", cJSON_CreateObject());
        const cJSON *fr = cJSON_GetObjectItemCaseSensitive(choice, "finish_reason");
        if (c->n_calls && cJSON_IsString(fr) && !strcmp(fr->valuestring, "stop"))
            cJSON_ReplaceItemInObjectCaseSensitive(choice, "finish_reason", cJSON_CreateString("tool_calls"));
        if (ev->final) add_warning(c, choice);
        put(ctx, chunk);
    }
    return rc || oom ? -1 : 0;
}
