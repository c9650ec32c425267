#include "pith/assets.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "format/json_file.h"
#include "format/mapped_file.h"

#define MAX_TEMPLATE_BYTES ((size_t)1 << 20)
#define MAX_CONFIG_BYTES ((size_t)16 << 20)

/* Reads the file --chat-template names, with stdio, so that a FIFO or process substitution works too
 * (docs/api.md): the operator named it. Files found in a model directory are read with
 * pith_read_optional_file instead, which refuses anything but a regular file. */
static int read_user_file(const char *path, size_t max, char **out, pith_err *err) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return pith_errf(err, "cannot open %s: %s", path, strerror(errno));
    size_t cap = 4096, n = 0;
    char *b = malloc(cap + 1);
    int rc = b ? 0 : pith_errf(err, "out of memory reading %s", path);
    while (rc == 0) {
        n += fread(b + n, 1, cap - n, f);
        if (n < cap) break;
        if (cap >= max) {
            if (fgetc(f) != EOF) rc = pith_errf(err, "%s is larger than %zu bytes", path, max);
            break;
        }
        cap = cap * 2 > max ? max : cap * 2;
        char *nb = realloc(b, cap + 1);
        if (!nb) rc = pith_errf(err, "out of memory reading %s", path);
        else b = nb;
    }
    if (rc == 0 && ferror(f)) rc = pith_errf(err, "cannot read %s", path);
    fclose(f);
    if (rc) {
        free(b);
        return -1;
    }
    b[n] = 0;
    *out = b;
    return 0;
}

static char *join_path(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s", dir, name);
    return p;
}

/* tokenizer_config.json's chat_template: a string, or a list of {name, template} (take "default"). */
static int template_from_hf_config(const char *dir, char **out, pith_err *err) {
    *out = NULL;
    char *path = join_path(dir, "tokenizer_config.json"), *text = NULL;
    if (!path) return pith_errf(err, "out of memory");
    size_t len;
    int rc = pith_read_optional_file(path, MAX_CONFIG_BYTES, &text, &len, err);
    if (rc == 0 && text && pith_json_count_values(text, len) > PITH_JSON_MAX_VALUES)
        rc = pith_errf(err, "%s: more than %zu JSON values", path, PITH_JSON_MAX_VALUES);
    free(path);
    if (rc || !text) {
        free(text);
        return rc;
    }
    cJSON *cfg = cJSON_ParseWithLength(text, len); /* not JSON: no template here (the tokenizer load says why) */
    free(text);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(cfg, "chat_template");
    const char *found = NULL;
    if (cJSON_IsString(t)) {
        found = t->valuestring;
    } else if (cJSON_IsArray(t)) {
        const cJSON *item;
        cJSON_ArrayForEach(item, t) {
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(item, "name");
            const cJSON *tmpl = cJSON_GetObjectItemCaseSensitive(item, "template");
            if (!cJSON_IsString(tmpl)) continue;
            if (!found || (cJSON_IsString(name) && !strcmp(name->valuestring, "default"))) found = tmpl->valuestring;
        }
    }
    if (found && !(*out = strdup(found))) rc = pith_errf(err, "out of memory");
    cJSON_Delete(cfg);
    return rc;
}

/* The model's own template, or NULL. */
static int model_template(const pith_model *m, char **out, pith_err *err) {
    *out = NULL;
    const pith_gguf *g = pith_model_file_gguf(m->file);
    if (g) {
        pith_str s;
        if (pith_gguf_get_str(g, "tokenizer.chat_template", &s) && s.len > 0) {
            if (s.len > MAX_TEMPLATE_BYTES) return pith_errf(err, "the model's chat template is too large");
            if (!(*out = malloc(s.len + 1))) return pith_errf(err, "out of memory");
            memcpy(*out, s.ptr, s.len);
            (*out)[s.len] = 0;
        }
        return 0;
    }
    const char *dir = pith_model_file_dir(m->file);
    if (!dir) return 0;
    char *path = join_path(dir, "chat_template.jinja");
    if (!path) return pith_errf(err, "out of memory");
    size_t len;
    int rc = pith_read_optional_file(path, MAX_TEMPLATE_BYTES, out, &len, err);
    free(path);
    if (rc || *out) return rc;
    return template_from_hf_config(dir, out, err);
}

static void notice(const pith_assets_options *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void notice(const pith_assets_options *o, const char *fmt, ...) {
    if (!o->log) return;
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    o->log(o->log_ctx, msg);
}

static int load_tokenizer(const pith_assets_options *o, const pith_model *m, pith_tokenizer **tok, pith_err *err) {
    if (o->tokenizer_path) return pith_tokenizer_load(o->tokenizer_path, m->hp.n_vocab, tok, err);
    const pith_gguf *g = pith_model_file_gguf(m->file);
    if (g) return pith_tokenizer_from_gguf(g, tok, err);
    const char *dir = pith_model_file_dir(m->file);
    if (dir) return pith_tokenizer_load(dir, m->hp.n_vocab, tok, err);
    return pith_errf(err, "%s: this model format carries no tokenizer; pass --tokenizer FILE", pith_model_file_path(m->file));
}

static char *token_text(const pith_tokenizer *t, int id) {
    size_t len = 0;
    const char *s = id >= 0 ? pith_tokenizer_token_text(t, id, &len) : NULL;
    if (!s) return NULL;
    char *c = malloc(len + 1);
    if (c) {
        memcpy(c, s, len);
        c[len] = 0;
    }
    return c;
}

static int load_template(const pith_assets_options *o, pith_assets *a, pith_err *err) {
    char *src = NULL;
    if (o->chat_template_path) {
        if (read_user_file(o->chat_template_path, MAX_TEMPLATE_BYTES, &src, err)) return -1;
        int rc = pith_chat_template_compile(src, &a->chat, err);
        free(src);
        return rc ? pith_err_prefix(err, "%s", o->chat_template_path) : 0;
    }
    if (model_template(a->model, &src, err)) return -1;
    pith_err why;
    if (pith_chat_template_compile(src, &a->chat, &why)) {
        notice(o, "warning: the model's chat template cannot be used (%s); chat uses ChatML", why.msg);
        if (pith_chat_template_compile(NULL, &a->chat, err)) {
            free(src);
            return -1;
        }
    } else if (!src) {
        notice(o, "the model has no chat template; chat uses ChatML");
    }
    free(src);
    return 0;
}

int pith_assets_load(const pith_assets_options *o, pith_assets *a, pith_err *err) {
    memset(a, 0, sizeof *a);
    pith_model_options mo = {.n_threads = o->n_threads, .progress = o->progress, .progress_user = o->progress_user,
                             .mtp = o->mtp, .device = o->device,
                             .gpu_layers = o->gpu_layers, .n_cpu_moe = o->n_cpu_moe, .comm = o->comm,
                             .tp = o->tp, .pp = o->pp, .no_ep = o->no_ep};
    if (pith_model_load(o->model_path, &mo, &a->model, err)) return -1;
    if (load_tokenizer(o, a->model, &a->tok, err)) goto fail;
    if (pith_tokenizer_n_vocab(a->tok) > a->model->hp.n_vocab) {
        pith_errf(err, "the tokenizer has %d tokens but the model only %d", pith_tokenizer_n_vocab(a->tok),
                  a->model->hp.n_vocab);
        goto fail;
    }
    if (load_template(o, a, err)) goto fail;
    a->bos_text = token_text(a->tok, pith_tokenizer_bos(a->tok));
    a->eos_text = token_text(a->tok, pith_tokenizer_eos(a->tok));
    return 0;
fail:
    pith_assets_free(a);
    return -1;
}

void pith_assets_free(pith_assets *a) {
    pith_chat_template_free(a->chat);
    pith_tokenizer_free(a->tok);
    pith_model_free(a->model);
    free(a->bos_text);
    free(a->eos_text);
    memset(a, 0, sizeof *a);
}
