#include "server/format_rl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

double rl_logprob_value(float lp) { return isfinite(lp) ? (double)lp : -9999.0; }

void rl_envelope(gen_output *o, cJSON *r, uint64_t gen) {
    char v[160], fp[170];
    server_weight_version(o->srv, gen, v, sizeof v);
    snprintf(fp, sizeof fp, "pith-%s", v);
    cJSON_ReplaceItemInObjectCaseSensitive(r, "system_fingerprint", cJSON_CreateString(fp));
    cJSON_AddStringToObject(r, "weight_version", v);
}

/* A token's text in the middle of a sequence (as format.c's logprob entries show it). */
static void decoded(const pith_tokenizer *t, int32_t id, char text[1024]) {
    pith_detok d;
    pith_detok_init(&d, t, true);
    d.at_start = false;
    size_t n = pith_detok_push(&d, id, text, 1024);
    pith_detok_flush(&d, text + n, 1024 - n);
}

static cJSON *ids_array(const int32_t *ids, int n) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; a && i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(ids[i]));
    return a;
}

/* {"<id>": {"logprob", "rank", "decoded_token"}} for one prompt event. */
static cJSON *prompt_entry(const gen_output *o, const job_event *ev) {
    cJSON *entry = cJSON_CreateObject();
    char key[16], text[1024];
    for (int i = -1; i < ev->n_top; i++) {
        int32_t id = i < 0 ? ev->token : ev->top[i].token;
        if (i >= 0 && id == ev->token) continue; /* the prompt token is listed once, with its own rank */
        snprintf(key, sizeof key, "%d", (int)id);
        cJSON *x = cJSON_CreateObject();
        cJSON_AddNumberToObject(x, "logprob", rl_logprob_value(i < 0 ? ev->logprob : ev->top[i].logprob));
        cJSON_AddNumberToObject(x, "rank", i < 0 ? ev->prompt_rank : i + 1);
        decoded(o->srv->tok, id, text);
        cJSON_AddStringToObject(x, "decoded_token", text);
        cJSON_AddItemToObject(entry, key, x);
    }
    return entry;
}

static int add_prompt_event(const gen_output *o, out_choice *c, const job_event *ev) {
    if (!c->prompt_lp) {
        if (!(c->prompt_lp = cJSON_CreateArray())) return -1;
        cJSON_AddItemToArray(c->prompt_lp, cJSON_CreateNull()); /* the first prompt token has none */
    }
    cJSON *entry = prompt_entry(o, ev);
    if (!entry) return -1;
    cJSON_AddItemToArray(c->prompt_lp, entry);
    return 0;
}

static void restart_choice(out_choice *c, const job_event *ev) {
    buf_free(&c->text);
    c->text_offset = 0;
    cJSON_Delete(c->logprobs);
    c->logprobs = NULL;
    cJSON_Delete(c->prompt_lp);
    c->prompt_lp = NULL;
    c->n_ids = 0;
    c->restarted = true;
    c->gen = ev->weight_generation;
}

int rl_apply(gen_output *o, out_choice *c, const job_event *ev) {
    if (ev->restart) {
        restart_choice(c, ev);
        return 1;
    }
    if (ev->prompt) return o->p->prompt_logprobs >= 0 && add_prompt_event(o, c, ev) ? -1 : 1;
    c->gen = ev->weight_generation;
    if (ev->final || ev->token < 0 || !o->p->return_token_ids) return 0;
    if (c->n_ids == c->cap_ids) {
        int cap = c->cap_ids ? c->cap_ids * 2 : 64;
        int32_t *ids = realloc(c->ids, (size_t)cap * sizeof *ids);
        if (!ids) return -1;
        c->ids = ids;
        c->cap_ids = cap;
    }
    c->ids[c->n_ids++] = ev->token;
    return 0;
}

uint64_t rl_response_gen(const gen_output *o) {
    uint64_t g = 0;
    for (int i = 0; i < o->n_choices; i++)
        if (o->choices[i].gen > g) g = o->choices[i].gen;
    return g;
}

/* The choice that computed prompt i / n's logprobs (gen_run asks the first of each prompt's n). */
static const out_choice *prompt_owner(const gen_output *o, int i) {
    int n = o->p->n > 0 ? o->p->n : 1;
    return &o->choices[i / n * n];
}

void rl_choice_fields(gen_output *o, int i, cJSON *ch) {
    const gen_params *p = o->p;
    out_choice *c = &o->choices[i];
    int n = p->n > 0 ? p->n : 1;
    if (p->return_token_ids) {
        cJSON_AddItemToObject(ch, "token_ids", ids_array(c->ids, c->n_ids));
        if (o->kind == GEN_COMPLETION && i / n < p->n_prompt_ids)
            cJSON_AddItemToObject(ch, "prompt_token_ids", ids_array(p->prompt_ids[i / n], p->prompt_n[i / n]));
    }
    if (o->kind == GEN_COMPLETION && p->prompt_logprobs >= 0) {
        const out_choice *own = prompt_owner(o, i);
        cJSON_AddItemToObject(ch, "prompt_logprobs", own->prompt_lp ? cJSON_Duplicate(own->prompt_lp, true) : cJSON_CreateNull());
    }
    if (c->restarted) cJSON_AddTrueToObject(ch, "restarted");
}

void rl_response_fields(gen_output *o, cJSON *r) {
    const gen_params *p = o->p;
    if (p->return_token_ids && p->n_prompt_ids == 1)
        cJSON_AddItemToObject(r, "prompt_token_ids", ids_array(p->prompt_ids[0], p->prompt_n[0]));
    if (o->kind == GEN_CHAT && p->prompt_logprobs >= 0 && o->n_choices > 0) {
        out_choice *own = &o->choices[0];
        cJSON_AddItemToObject(r, "prompt_logprobs", own->prompt_lp ? own->prompt_lp : cJSON_CreateNull());
        own->prompt_lp = NULL;
    }
}

cJSON *rl_stream_event(gen_output *o, const job_event *ev, bool *consumed, bool *oom) {
    *consumed = false;
    out_choice *c = &o->choices[ev->choice];
    if (ev->prompt) {
        *consumed = true;
        if (o->p->prompt_logprobs >= 0 && add_prompt_event(o, c, ev)) *oom = true;
        return NULL;
    }
    if (!ev->restart) return NULL;
    *consumed = true;
    restart_choice(c, ev);
    cJSON *r = cJSON_CreateObject();
    cJSON_AddStringToObject(r, "id", o->id);
    cJSON_AddStringToObject(r, "object", o->kind == GEN_CHAT ? "chat.completion.chunk" : "text_completion");
    cJSON_AddNumberToObject(r, "created", (double)o->created);
    cJSON_AddStringToObject(r, "model", o->srv->model_name);
    cJSON_AddNullToObject(r, "system_fingerprint");
    rl_envelope(o, r, ev->weight_generation);
    cJSON *choice = cJSON_CreateObject();
    cJSON_AddNumberToObject(choice, "index", ev->choice);
    if (o->kind == GEN_CHAT) cJSON_AddObjectToObject(choice, "delta");
    else cJSON_AddStringToObject(choice, "text", "");
    cJSON_AddNullToObject(choice, "logprobs");
    cJSON_AddNullToObject(choice, "finish_reason");
    cJSON_AddTrueToObject(choice, "restarted");
    cJSON_AddItemToArray(cJSON_AddArrayToObject(r, "choices"), choice);
    if (!r || !choice) *oom = true;
    return r;
}

void rl_chunk_fields(gen_output *o, const job_event *ev, cJSON *r, cJSON *choice) {
    const gen_params *p = o->p;
    out_choice *c = &o->choices[ev->choice];
    c->gen = ev->weight_generation;
    if (p->return_token_ids && !ev->final && ev->token >= 0)
        cJSON_AddItemToObject(choice, "token_ids", ids_array(&ev->token, 1));
    int n = p->n > 0 ? p->n : 1;
    if (o->kind == GEN_COMPLETION && p->return_token_ids && !c->sent_prompt_ids && ev->choice / n < p->n_prompt_ids) {
        cJSON_AddItemToObject(choice, "prompt_token_ids", ids_array(p->prompt_ids[ev->choice / n], p->prompt_n[ev->choice / n]));
        c->sent_prompt_ids = true;
    }
    if (c->prompt_lp) { /* chat: on the response object, as in the non-streamed response */
        cJSON_AddItemToObject(o->kind == GEN_CHAT ? r : choice, "prompt_logprobs", c->prompt_lp);
        c->prompt_lp = NULL;
    }
}

void rl_role_fields(gen_output *o, cJSON *r) {
    const gen_params *p = o->p;
    if (p->return_token_ids && p->n_prompt_ids > 0 && !cJSON_GetObjectItemCaseSensitive(r, "prompt_token_ids"))
        cJSON_AddItemToObject(r, "prompt_token_ids", ids_array(p->prompt_ids[0], p->prompt_n[0]));
}

bool rl_wants_chunk(const gen_output *o, const job_event *ev) {
    return !ev->final && ev->token >= 0 && (o->p->return_token_ids || o->choices[ev->choice].prompt_lp);
}
