/* Public chat-template API (include/pith/chat.h): compile a template once, render it per conversation.
 * A compiled template owns one arena holding its tokens and AST and is never written after compiling;
 * each render gets its own arena bounded by the caller's limits, freed before returning. */
#include <stdlib.h>
#include <string.h>

#include "chat/jinja.h"
#include "pith/chat.h"

struct pith_chat_template {
    jarena arena;
    jnode *root;
    char *source;
};

enum { DEFAULT_DEPTH = 100 };

static pith_chat_limits effective_limits(const pith_chat_limits *in) {
    pith_chat_limits l = in ? *in : (pith_chat_limits){0};
    if (!l.max_output_bytes) l.max_output_bytes = (size_t)8 << 20;
    if (!l.max_memory_bytes) l.max_memory_bytes = (size_t)256 << 20;
    if (!l.max_steps) l.max_steps = 20000000;
    if (l.max_depth <= 0) l.max_depth = DEFAULT_DEPTH;
    return l;
}

int pith_chat_template_compile(const char *tmpl, pith_chat_template **out, pith_err *err) {
    *out = NULL;
    if (!tmpl || !*tmpl) tmpl = PITH_CHAT_TEMPLATE_CHATML;
    size_t len = strlen(tmpl);
    pith_chat_template *t = calloc(1, sizeof *t);
    if (!t || !(t->source = strdup(tmpl))) {
        free(t);
        return pith_errf(err, "chat template: out of memory");
    }
    /* Tokens and nodes take a few hundred bytes per template byte at worst. */
    size_t limit = (size_t)64 << 20;
    if (len < ((size_t)4 << 30) / 512 && len * 512 > limit) limit = len * 512;
    jarena_init(&t->arena, limit);
    jtokens toks;
    if (jinja_lex(&t->arena, tmpl, len, &toks, err) < 0 ||
        jinja_parse(&t->arena, &toks, DEFAULT_DEPTH * 2, &t->root, err) < 0) {
        pith_chat_template_free(t);
        return -1;
    }
    *out = t;
    return 0;
}

void pith_chat_template_free(pith_chat_template *t) {
    if (!t) return;
    jarena_free(&t->arena);
    free(t->source);
    free(t);
}

const char *pith_chat_template_source(const pith_chat_template *t) { return t ? t->source : NULL; }

static int set_var(jctx *c, jframe *f, const char *name, jv v) {
    return jframe_set(c, f, (jstr){name, strlen(name)}, v);
}

int pith_chat_template_render(const pith_chat_template *t, const cJSON *messages, const pith_chat_options *opts,
                              char **out, size_t *out_len, pith_err *err) {
    *out = NULL;
    if (out_len) *out_len = 0;
    if (!t) return pith_errf(err, "chat template: no template");
    pith_chat_options none = {0};
    if (!opts) opts = &none;
    if (messages && !cJSON_IsArray(messages)) return pith_errf(err, "chat template: messages must be a JSON array");
    if (opts->vars && !cJSON_IsObject(opts->vars)) return pith_errf(err, "chat template: vars must be a JSON object");

    jarena arena;
    jctx c = {.err = err, .lim = effective_limits(&opts->limits)};
    jarena_init(&arena, c.lim.max_memory_bytes);
    c.arena = &arena;
    jframe context = {0}, root = {.parent = &context};
    jbuf buf = {0};
    c.frame = c.root = &root;
    c.out = &buf;

    jv msgs = {0};
    int r = messages ? jv_from_cjson(&c, messages, 0, &msgs) : jlist_new(&c, 0, false, &msgs);
    if (r == 0) r = set_var(&c, &context, "messages", msgs);
    if (r == 0) r = set_var(&c, &context, "add_generation_prompt", jv_bool(opts->add_generation_prompt));
    if (r == 0 && opts->bos_token)
        r = set_var(&c, &context, "bos_token", jv_str((jstr){opts->bos_token, strlen(opts->bos_token)}));
    if (r == 0 && opts->eos_token)
        r = set_var(&c, &context, "eos_token", jv_str((jstr){opts->eos_token, strlen(opts->eos_token)}));
    for (const cJSON *v = opts->vars ? opts->vars->child : NULL; v && r == 0; v = v->next) {
        jv val;
        r = jv_from_cjson(&c, v, 0, &val);
        if (r == 0 && v->string) r = set_var(&c, &context, v->string, val);
    }
    if (r == 0) r = jinja_exec(&c, t->root);
    if (r == 0) {
        *out = malloc(buf.n + 1);
        if (!*out) {
            r = pith_errf(err, "chat template: out of memory");
        } else {
            if (buf.n) memcpy(*out, buf.p, buf.n);
            (*out)[buf.n] = 0;
            if (out_len) *out_len = buf.n;
        }
    }
    jarena_free(&arena);
    return r;
}

int pith_chat_render_json(const char *tmpl, const cJSON *messages, const pith_chat_options *opts, char **out,
                          size_t *out_len, pith_err *err) {
    pith_chat_template *t;
    *out = NULL;
    if (pith_chat_template_compile(tmpl, &t, err) < 0) return -1;
    int r = pith_chat_template_render(t, messages, opts, out, out_len, err);
    pith_chat_template_free(t);
    return r;
}

int pith_chat_render(const char *tmpl, const pith_chat_message *msgs, int n, bool add_generation_prompt,
                     const char *bos_token, const char *eos_token, char **out, pith_err *err) {
    *out = NULL;
    if (n < 0 || (n > 0 && !msgs)) return pith_errf(err, "chat template: bad message list");
    cJSON *arr = cJSON_CreateArray();
    if (!arr) return pith_errf(err, "chat template: out of memory");
    for (int i = 0; i < n; i++) {
        cJSON *m = cJSON_CreateObject();
        if (!m) goto oom;
        cJSON_AddItemToArray(arr, m);
        cJSON *role = msgs[i].role ? cJSON_CreateString(msgs[i].role) : cJSON_CreateNull();
        cJSON *content = msgs[i].content ? cJSON_CreateString(msgs[i].content) : cJSON_CreateNull();
        if (role) cJSON_AddItemToObject(m, "role", role);
        if (content) cJSON_AddItemToObject(m, "content", content);
        if (!role || !content) goto oom;
    }
    pith_chat_options opts = {
        .add_generation_prompt = add_generation_prompt, .bos_token = bos_token, .eos_token = eos_token};
    int r = pith_chat_render_json(tmpl, arr, &opts, out, NULL, err);
    cJSON_Delete(arr);
    return r;
oom:
    cJSON_Delete(arr);
    return pith_errf(err, "chat template: out of memory");
}
