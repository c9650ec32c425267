#include "cli/chat.h"

#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/images.h"

typedef struct reply {
    FILE *out;
    char *text;     /* the whole reply, kept for the conversation */
    size_t len, cap;
    bool failed, out_failed;
    int n_tokens;
    pith_finish_reason finish;
    char error[256];
} reply;

static void on_token(const pith_token_event *ev, void *user) {
    reply *r = user;
    if (!ev->final) r->n_tokens++;
    if (ev->text_len) {
        if (fwrite(ev->text, 1, ev->text_len, r->out) != ev->text_len || fflush(r->out)) r->out_failed = true;
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

/* Renders the conversation and encodes it; with images (ci not NULL), their spans in ci->media
 * (*n_media of them). */
static int render(const pith_tokenizer *tok, const pith_chat_template *tmpl, const cli_chat_opts *o,
                  cJSON *messages, cli_images *ci, int32_t **ids, int *n_ids, int *n_media, pith_err *err) {
    *n_media = 0;
    pith_chat_options co = {.add_generation_prompt = true, .bos_token = o->bos_text, .eos_token = o->eos_text};
    char *prompt = NULL;
    size_t prompt_len = 0;
    if (pith_chat_template_render(tmpl, messages, &co, &prompt, &prompt_len, err)) return -1;
    /* Templates usually write the BOS token themselves; add one only when they do not. */
    int flags = PITH_TOK_PARSE_SPECIAL;
    if (!o->bos_text || strncmp(prompt, o->bos_text, strlen(o->bos_text))) flags |= PITH_TOK_ADD_BOS;
    int rc = ci && ci->n ? cli_images_text(ci, tok, prompt, prompt_len, flags, ids, n_ids, n_media, err)
                         : pith_tokenizer_encode(tok, prompt, prompt_len, flags, ids, n_ids, err);
    free(prompt);
    return rc;
}

/* Index of the oldest message that may be dropped (not the system prompt), or -1. Never the last
 * message: the user turn being answered. */
static bool has_system(cJSON *messages) {
    cJSON *first = cJSON_GetArrayItem(messages, 0);
    cJSON *role = first ? cJSON_GetObjectItem(first, "role") : NULL;
    return cJSON_IsString(role) && !strcmp(role->valuestring, "system");
}

static int oldest_droppable(cJSON *messages) {
    int at = has_system(messages) ? 1 : 0;
    return at < cJSON_GetArraySize(messages) - 1 ? at : -1;
}

/* Drops the oldest turn: the oldest user message and the assistant reply after it. */
static void drop_oldest_turn(cJSON *messages, int at) {
    cJSON_DeleteItemFromArray(messages, at);
    cJSON *next = cJSON_GetArrayItem(messages, at);
    cJSON *role = next ? cJSON_GetObjectItem(next, "role") : NULL;
    if (at < cJSON_GetArraySize(messages) - 1 && cJSON_IsString(role) && !strcmp(role->valuestring, "assistant"))
        cJSON_DeleteItemFromArray(messages, at);
}

/* Runs one reply through the engine. When the conversation no longer fits in the context (with room for
 * the reply: -n tokens, at most half the context), the oldest turns are dropped (the system prompt
 * stays) with a notice on stderr. Returns 0, 1 when even the newest turn alone does not fit (said on
 * stderr; the turn is removed and the chat goes on), 2 when interrupted (Ctrl-C: the reply is cut
 * short), or -1 with err. */
static int one_turn(pith_engine *e, const pith_tokenizer *tok, const pith_chat_template *tmpl,
                    const cli_chat_opts *o, cJSON *messages, cli_images *ci, reply *r, pith_err *err) {
    int ctx = pith_engine_max_seq_len(e);
    int room = o->n_predict > 0 && o->n_predict < ctx / 2 ? o->n_predict : ctx / 2;
    int dropped = 0;
    for (;;) {
        int32_t *ids = NULL;
        int n_ids = 0, n_media = 0;
        if (render(tok, tmpl, o, messages, ci, &ids, &n_ids, &n_media, err)) return -1;
        int rc = -1;
        pith_err why = {{0}};
        if (n_ids + room <= ctx) {
            pith_request req = {
                .prompt = ids, .n_prompt = n_ids, .sampling = o->sampling,
                .max_tokens = o->n_predict < 0 ? 0 : o->n_predict, .on_token = on_token, .user = r,
                .media = n_media ? ci->media : NULL, .n_media = n_media,
            };
            rc = pith_engine_submit(e, &req, NULL, &why);
        } else {
            snprintf(why.msg, sizeof why.msg, "the conversation (%d tokens) leaves less than %d of the %d-token context "
                     "for the reply", n_ids, room, ctx);
        }
        free(ids);
        if (rc == 0) break;
        if (rc == PITH_SUBMIT_BUSY) return pith_errf(err, "%s", why.msg);
        int at = oldest_droppable(messages);
        if (at < 0) {
            fprintf(stderr, "pith run: this turn does not fit in the context: %s; it is skipped\n", why.msg);
            cJSON_DeleteItemFromArray(messages, cJSON_GetArraySize(messages) - 1);
            return 1;
        }
        drop_oldest_turn(messages, at);
        dropped++;
    }
    if (dropped)
        fprintf(stderr, "pith run: the conversation outgrew the %d-token context: dropped the oldest %d turn%s%s\n",
                ctx, dropped, dropped == 1 ? "" : "s", has_system(messages) ? " (the system prompt stays)" : "");
    bool interrupted = false;
    if (pith_engine_run_until(e, cli_run_check, &interrupted, err)) return -1;
    if (interrupted) return 2;
    if (r->out_failed) return pith_errf(err, "writing the output failed");
    if (r->finish == PITH_FINISH_ERROR) return pith_errf(err, "generation failed: %s", r->error);
    if (r->failed) return pith_errf(err, "out of memory");
    if (r->finish == PITH_FINISH_LENGTH && (o->n_predict < 0 || r->n_tokens < o->n_predict))
        fprintf(stderr, "pith run: the reply stopped after %d tokens: the context is full (%d tokens; see "
                "-c/--max-seq-len)\n", r->n_tokens, ctx);
    return 0;
}

int cli_chat(pith_model *m, const pith_tokenizer *tok, const pith_chat_template *tmpl, const cli_chat_opts *o,
             FILE *in, FILE *out, pith_err *err) {
    pith_engine *e = NULL;
    cli_images ci = {0};
    int pending = 0; /* images attached to the next user turn */
    pith_engine_options eo = o->engine;
    if (o->mmproj) {
        if (cli_images_open(&ci, o->mmproj, NULL, 0, o->n_threads, o->image_max_tokens, err)) return -1;
        eo.encoder = &ci.enc;
    }
    if (pith_engine_create(m, tok, &eo, &e, err)) {
        cli_images_free(&ci);
        return -1;
    }
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
        if (n < 0 && cli_interrupted()) { /* Ctrl-C at the prompt */
            rc = 130;
            goto done;
        }
        if (n < 0) break;
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = 0;
        if (n == 0) continue;
        if (!strncmp(line, "/image ", 7) || !strcmp(line, "/image")) {
            const char *path = line + 6;
            while (*path == ' ') path++;
            pith_err why;
            if (!o->mmproj) fprintf(stderr, "pith run: /image needs the model's projector (--mmproj FILE)\n");
            else if (!*path) fprintf(stderr, "pith run: /image FILE\n");
            else if (cli_images_add(&ci, path, &why)) fprintf(stderr, "pith run: %s\n", why.msg);
            else pending++, fprintf(stderr, "pith run: %s goes with your next message\n", path);
            turn--;
            continue;
        }
        char *content = line;
        if (pending) { /* the images' markers before the text, as a chat client sends image parts first */
            if (!(content = cli_images_marked(&ci, pending, line))) {
                pith_errf(err, "out of memory");
                goto done;
            }
            pending = 0;
        }
        bool added = append_message(messages, "user", content);
        if (content != line) free(content);
        if (!added) {
            pith_errf(err, "out of memory");
            goto done;
        }
        /* Each turn gets its own seed so a fixed --seed replays the whole conversation. */
        cli_chat_opts turn_opts = *o;
        turn_opts.sampling.seed = o->sampling.seed + (uint64_t)turn;
        reply r = {.out = out};
        int trc = one_turn(e, tok, tmpl, &turn_opts, messages, o->mmproj ? &ci : NULL, &r, err);
        if (trc == 2) { /* Ctrl-C: end the chat after what was written */
            fputc('\n', out);
            fflush(out);
            free(r.text);
            rc = 130;
            goto done;
        }
        if (trc == 1) {
            free(r.text);
            continue;
        }
        if (trc == 0 && (fputc('\n', out) == EOF || fflush(out))) trc = pith_errf(err, "writing the output failed");
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
    cli_images_free(&ci);
    return rc;
}
