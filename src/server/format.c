#include "server/format.h"
#include "server/responses_out.h"
#include "server/tools_out.h"

#include "server/format_rl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

const char *out_finish_str(pith_finish_reason r) {
    switch (r) {
    case PITH_FINISH_STOP: return "stop";
    case PITH_FINISH_LENGTH: return "length";
    default: return NULL;
    }
}

int out_init(gen_output *o, pith_server *srv, gen_kind kind, const gen_params *p, int n_choices) {
    memset(o, 0, sizeof *o);
    o->srv = srv;
    o->kind = kind;
    o->p = p;
    o->created = (long long)time(NULL);
    unsigned long long serial = (unsigned long long)atomic_fetch_add(&srv->serial, 1) + 1;
    snprintf(o->id, sizeof o->id, "%s%llx%06llx", kind == GEN_CHAT ? "chatcmpl-" : kind == GEN_RESPONSES ? "resp_" : "cmpl-",
             (unsigned long long)srv->created_unix, serial);
    o->n_choices = n_choices;
    o->choices = calloc((size_t)n_choices, sizeof *o->choices);
    if (o->choices && p->tools && kind != GEN_COMPLETION && !(o->tools = tools_out_new(p->tools, srv->tok, o->id, n_choices))) {
        free(o->choices);
        o->choices = NULL;
    }
    return o->choices ? 0 : -1;
}

void out_free(gen_output *o) {
    for (int i = 0; o->choices && i < o->n_choices; i++) {
        buf_free(&o->choices[i].text);
        cJSON_Delete(o->choices[i].logprobs);
        cJSON_Delete(o->choices[i].prompt_lp);
        free(o->choices[i].ids);
    }
    free(o->choices);
    o->choices = NULL;
    tools_out_free(o->tools);
    o->tools = NULL;
}

/* A token's text as it reads in the middle of a sequence (SentencePiece's leading space kept, special
 * tokens shown). `text` is valid UTF-8 (an incomplete byte sequence shows as U+FFFD); `raw` holds the
 * token's own bytes. */
static void token_piece(const pith_tokenizer *t, int32_t id, char text[1024], buf *raw) {
    pith_detok d;
    pith_detok_init(&d, t, true);
    d.at_start = false;
    size_t n = pith_detok_push(&d, id, text, 1024);
    if (raw) {
        buf_append(raw, text, n);
        buf_append(raw, d.pending, (size_t)(d.n_pending > 0 ? d.n_pending : 0));
    }
    pith_detok_flush(&d, text + n, 1024 - n);
}

static cJSON *bytes_array(const buf *raw) {
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; a && i < raw->len; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber((unsigned char)raw->data[i]));
    return a;
}

/* One chat logprob entry {token, logprob, bytes}. */
static cJSON *chat_token_entry(const pith_tokenizer *t, int32_t id, float lp) {
    char text[1024];
    buf raw = {0};
    token_piece(t, id, text, &raw);
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "token", text);
    cJSON_AddNumberToObject(e, "logprob", rl_logprob_value(lp));
    cJSON_AddItemToObject(e, "bytes", bytes_array(&raw));
    buf_free(&raw);
    return e;
}

static cJSON *array_field(cJSON *obj, const char *name) {
    cJSON *a = cJSON_GetObjectItemCaseSensitive(obj, name);
    return a ? a : cJSON_AddArrayToObject(obj, name);
}

/* Appends the event's token to a logprobs object in the endpoint's shape. */
static void add_logprob(gen_output *o, cJSON *lp, const job_event *ev, size_t offset) {
    const pith_tokenizer *t = o->srv->tok;
    if (o->kind == GEN_CHAT) {
        cJSON *e = chat_token_entry(t, ev->token, ev->logprob);
        cJSON *top = cJSON_AddArrayToObject(e, "top_logprobs");
        for (int i = 0; i < ev->n_top && i < o->p->top_logprobs; i++)
            cJSON_AddItemToArray(top, chat_token_entry(t, ev->top[i].token, ev->top[i].logprob));
        cJSON_AddItemToArray(array_field(lp, "content"), e);
        return;
    }
    char text[1024];
    token_piece(t, ev->token, text, NULL);
    cJSON_AddItemToArray(array_field(lp, "tokens"), cJSON_CreateString(text));
    cJSON_AddItemToArray(array_field(lp, "token_logprobs"), cJSON_CreateNumber(rl_logprob_value(ev->logprob)));
    cJSON *top = o->p->top_logprobs > 0 ? cJSON_CreateObject() : cJSON_CreateNull();
    for (int i = 0; i < ev->n_top && i < o->p->top_logprobs; i++) {
        token_piece(t, ev->top[i].token, text, NULL);
        if (!cJSON_GetObjectItemCaseSensitive(top, text)) cJSON_AddNumberToObject(top, text, rl_logprob_value(ev->top[i].logprob));
    }
    cJSON_AddItemToArray(array_field(lp, "top_logprobs"), top);
    cJSON_AddItemToArray(array_field(lp, "text_offset"), cJSON_CreateNumber((double)offset));
}

static cJSON *empty_logprobs(gen_kind kind) {
    cJSON *lp = cJSON_CreateObject();
    if (kind == GEN_CHAT) {
        cJSON_AddArrayToObject(lp, "content");
        cJSON_AddNullToObject(lp, "refusal");
    } else {
        cJSON_AddArrayToObject(lp, "tokens");
        cJSON_AddArrayToObject(lp, "token_logprobs");
        cJSON_AddArrayToObject(lp, "top_logprobs");
        cJSON_AddArrayToObject(lp, "text_offset");
    }
    return lp;
}

int out_apply(gen_output *o, const job_event *ev) {
    out_choice *c = &o->choices[ev->choice];
    int taken = rl_apply(o, c, ev);
    if (taken) return taken < 0 ? -1 : 0;
    size_t offset = c->text.len;
    if (ev->text_len) buf_append(&c->text, ev->text, ev->text_len);
    if (ev->has_logprob && o->p->logprobs && ev->token >= 0) {
        if (!c->logprobs && !(c->logprobs = empty_logprobs(o->kind))) return -1;
        add_logprob(o, c->logprobs, ev, offset);
    }
    if (ev->final) {
        c->done = true;
        c->finish = ev->finish;
        c->usage = ev->usage;
    }
    if (o->tools && tools_out_event(o->tools, ev)) return -1;
    return c->text.failed ? -1 : 0;
}

static cJSON *usage_json(const gen_output *o) {
    long long prompt = 0, completion = 0, cached = 0;
    int per_prompt = o->p->n > 0 ? o->p->n : 1;
    for (int i = 0; i < o->n_choices; i++) {
        const out_choice *c = &o->choices[i];
        if (i % per_prompt == 0) {
            prompt += c->usage.prompt_tokens;
            cached += c->usage.cached_tokens;
        }
        completion += c->usage.completion_tokens;
    }
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "prompt_tokens", (double)prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", (double)completion);
    cJSON_AddNumberToObject(u, "total_tokens", (double)(prompt + completion));
    cJSON *d = cJSON_AddObjectToObject(u, "prompt_tokens_details");
    cJSON_AddNumberToObject(d, "cached_tokens", (double)cached);
    return u;
}

static cJSON *envelope(gen_output *o, bool chunk, uint64_t gen) {
    cJSON *r = cJSON_CreateObject();
    cJSON_AddStringToObject(r, "id", o->id);
    const char *object = o->kind == GEN_CHAT ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion";
    cJSON_AddStringToObject(r, "object", object);
    cJSON_AddNumberToObject(r, "created", (double)o->created);
    cJSON_AddStringToObject(r, "model", o->srv->model_name);
    cJSON_AddNullToObject(r, "system_fingerprint");
    rl_envelope(o, r, gen);
    return r;
}

static void add_finish(cJSON *choice, pith_finish_reason why, bool final) {
    const char *s = final ? out_finish_str(why) : NULL;
    if (s) cJSON_AddStringToObject(choice, "finish_reason", s);
    else cJSON_AddNullToObject(choice, "finish_reason");
}

cJSON *out_response(gen_output *o) {
    if (o->kind == GEN_RESPONSES) return responses_object(o, NULL);
    cJSON *r = envelope(o, false, rl_response_gen(o));
    cJSON *choices = cJSON_AddArrayToObject(r, "choices");
    for (int i = 0; i < o->n_choices; i++) {
        out_choice *c = &o->choices[i];
        cJSON *ch = cJSON_CreateObject();
        cJSON_AddNumberToObject(ch, "index", i);
        const char *text = c->text.data ? c->text.data : "";
        if (o->kind == GEN_CHAT) {
            cJSON *m = cJSON_AddObjectToObject(ch, "message");
            cJSON_AddStringToObject(m, "role", "assistant");
            cJSON_AddStringToObject(m, "content", text);
            cJSON_AddNullToObject(m, "refusal");
        } else {
            cJSON_AddStringToObject(ch, "text", text);
        }
        if (c->logprobs) {
            cJSON_AddItemToObject(ch, "logprobs", c->logprobs);
            c->logprobs = NULL;
        } else if (o->p->logprobs) {
            cJSON_AddItemToObject(ch, "logprobs", empty_logprobs(o->kind));
        } else {
            cJSON_AddNullToObject(ch, "logprobs");
        }
        add_finish(ch, c->finish, true);
        rl_choice_fields(o, i, ch);
        if (o->tools) tools_out_fix_choice(o->tools, i, cJSON_GetObjectItemCaseSensitive(ch, "message"), ch);
        cJSON_AddItemToArray(choices, ch);
    }
    rl_response_fields(o, r);
    cJSON_AddItemToObject(r, "usage", usage_json(o));
    return r;
}

static cJSON *chunk_with_choice(gen_output *o, int index, cJSON **choice, uint64_t gen) {
    cJSON *r = envelope(o, true, gen);
    cJSON *choices = cJSON_AddArrayToObject(r, "choices");
    *choice = cJSON_CreateObject();
    cJSON_AddNumberToObject(*choice, "index", index);
    cJSON_AddItemToArray(choices, *choice);
    return r;
}

cJSON *out_chunk(gen_output *o, const job_event *ev, bool *oom) {
    out_choice *c = &o->choices[ev->choice];
    bool consumed;
    cJSON *special = rl_stream_event(o, ev, &consumed, oom);
    if (consumed) return special;
    bool want_lp = ev->has_logprob && o->p->logprobs && ev->token >= 0;
    size_t offset = c->text_offset;
    c->text_offset += ev->text_len;
    if (ev->final) {
        c->done = true;
        c->finish = ev->finish;
        c->usage = ev->usage;
    }
    if (!ev->final && !ev->text_len && !want_lp && !rl_wants_chunk(o, ev)) return NULL;
    cJSON *choice;
    cJSON *r = chunk_with_choice(o, ev->choice, &choice, ev->weight_generation);
    const char *text = ev->text ? ev->text : "";
    if (o->kind == GEN_CHAT) {
        cJSON *delta = cJSON_AddObjectToObject(choice, "delta");
        if (ev->text_len || !ev->final) cJSON_AddStringToObject(delta, "content", text);
    } else {
        cJSON_AddStringToObject(choice, "text", text);
    }
    if (want_lp) {
        cJSON *lp = empty_logprobs(o->kind);
        add_logprob(o, lp, ev, offset);
        cJSON_AddItemToObject(choice, "logprobs", lp);
    } else {
        cJSON_AddNullToObject(choice, "logprobs");
    }
    add_finish(choice, ev->finish, ev->final);
    rl_chunk_fields(o, ev, r, choice);
    if (!r || !choice) *oom = true;
    return r;
}

cJSON *out_role_chunk(gen_output *o, int index, uint64_t gen) {
    cJSON *choice;
    cJSON *r = chunk_with_choice(o, index, &choice, gen);
    if (index == 0) rl_role_fields(o, r);
    cJSON *delta = cJSON_AddObjectToObject(choice, "delta");
    cJSON_AddStringToObject(delta, "role", "assistant");
    cJSON_AddStringToObject(delta, "content", "");
    cJSON_AddNullToObject(choice, "logprobs");
    cJSON_AddNullToObject(choice, "finish_reason");
    return r;
}

cJSON *out_usage_chunk(gen_output *o) {
    cJSON *r = envelope(o, true, rl_response_gen(o));
    cJSON_AddArrayToObject(r, "choices");
    cJSON_AddItemToObject(r, "usage", usage_json(o));
    return r;
}
