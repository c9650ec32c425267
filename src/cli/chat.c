#include "cli/chat.h"

#include <stdlib.h>
#include <string.h>

typedef struct reply {
    FILE *out;
    char *text;     /* the whole reply, kept for the conversation */
    size_t len, cap;
    bool failed;
    pith_finish_reason finish;
    char error[256];
} reply;

static void on_token(const pith_token_event *ev, void *user) {
    reply *r = user;
    if (ev->text_len) {
        fwrite(ev->text, 1, ev->text_len, r->out);
        fflush(r->out);
        if (r->len + ev->text_len + 1 > r->cap) {
            size_t cap = (r->cap ? r->cap * 2 : 256) + ev->text_len;
            char *t = realloc(r->text, cap);
            if (!t) {
                r->failed = true;
                return;
            }
            r->text = t;
            r->cap = cap;
        }
        memcpy(r->text + r->len, ev->text, ev->text_len);
        r->len += ev->text_len;
        r->text[r->len] = 0;
    }
    if (ev->final) {
        r->finish = ev->finish_reason;
        if (ev->finish_reason == PITH_FINISH_ERROR) snprintf(r->error, sizeof r->error, "%s", ev->error);
    }
}

static bool append_message(cJSON *messages, const char *role, const char *content) {
    cJSON *msg = cJSON_CreateObject();
    if (!msg || !cJSON_AddStringToObject(msg, "role", role) || !cJSON_AddStringToObject(msg, "content", content)) {
        cJSON_Delete(msg);
        return false;
    }
    return cJSON_AddItemToArray(messages, msg);
}

/* Renders the conversation and runs one reply through the engine. */
static int one_turn(pith_engine *e, const pith_tokenizer *tok, const pith_chat_template *tmpl,
                    const cli_chat_opts *o, cJSON *messages, reply *r, pith_err *err) {
    pith_chat_options co = {.add_generation_prompt = true, .bos_token = o->bos_text, .eos_token = o->eos_text};
    char *prompt = NULL;
    size_t prompt_len = 0;
    if (pith_chat_template_render(tmpl, messages, &co, &prompt, &prompt_len, err)) return -1;
    /* Templates usually write the BOS token themselves; add one only when they do not. */
    int flags = PITH_TOK_PARSE_SPECIAL;
    if (!o->bos_text || strncmp(prompt, o->bos_text, strlen(o->bos_text))) flags |= PITH_TOK_ADD_BOS;
    int32_t *ids = NULL;
    int n_ids = 0;
    int rc = pith_tokenizer_encode(tok, prompt, prompt_len, flags, &ids, &n_ids, err);
    free(prompt);
    if (rc) return -1;
    pith_request req = {
        .prompt = ids, .n_prompt = n_ids, .sampling = o->sampling, .max_tokens = o->n_predict,
        .on_token = on_token, .user = r,
    };
    uint64_t id;
    rc = pith_engine_submit(e, &req, &id, err);
    free(ids);
    if (rc) return -1;
    if (pith_engine_run(e, err)) return -1;
    if (r->finish == PITH_FINISH_ERROR) return pith_errf(err, "generation failed: %s", r->error);
    if (r->failed) return pith_errf(err, "out of memory");
    return 0;
}

int cli_chat(pith_model *m, const pith_tokenizer *tok, const pith_chat_template *tmpl, const cli_chat_opts *o,
             FILE *in, FILE *out, pith_err *err) {
    pith_engine *e = NULL;
    if (pith_engine_create(m, tok, &o->engine, &e, err)) return -1;
    cJSON *messages = cJSON_CreateArray();
    char *line = NULL;
    size_t line_cap = 0;
    int rc = -1;
    if (!messages) {
        pith_errf(err, "out of memory");
        goto done;
    }
    if (o->system_prompt && *o->system_prompt && !append_message(messages, "system", o->system_prompt)) {
        pith_errf(err, "out of memory");
        goto done;
    }
    for (int turn = 0;; turn++) {
        if (o->interactive) fputs("> ", stderr);
        ssize_t n = getline(&line, &line_cap, in);
        if (n < 0) break;
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = 0;
        if (n == 0) continue;
        if (!append_message(messages, "user", line)) {
            pith_errf(err, "out of memory");
            goto done;
        }
        /* Each turn gets its own seed so a fixed --seed replays the whole conversation. */
        cli_chat_opts turn_opts = *o;
        turn_opts.sampling.seed = o->sampling.seed + (uint64_t)turn;
        reply r = {.out = out};
        int trc = one_turn(e, tok, tmpl, &turn_opts, messages, &r, err);
        fputc('\n', out);
        fflush(out);
        bool ok = trc == 0 && append_message(messages, "assistant", r.text ? r.text : "");
        free(r.text);
        if (!ok) {
            if (trc == 0) pith_errf(err, "out of memory");
            goto done;
        }
    }
    rc = 0;
done:
    free(line);
    cJSON_Delete(messages);
    pith_engine_free(e);
    return rc;
}
