/* HTTP request bodies: the route handlers of /v1/completions, /v1/chat/completions, /tokenize,
 * /detokenize, /v1/responses, /v1/messages, /v1/messages/count_tokens, /apply-template and /infill
 * (their files in src/server, compiled into this target by scripts/fuzz.sh) called directly on a request that holds the input as its body, no sockets. Input
 * byte 0 picks the endpoint; the rest is the body. The server is a stand-in with the default model's
 * tokenizer, a real chat template (Qwen 2.5's, with tools) and no engine: the HTTP layer and gen_run
 * are stubbed below, gen_run freeing what it is handed as the real one does. */
#include "fuzz_util.h"
#include "pith/chat.h"
#include "server/generate.h"
#include "server/handlers.h"
#include "server/images.h"

static pith_server srv;
static pith_model model;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    pith_err err;
    static char tmpl[1 << 16];
    FILE *f = fopen(FUZZ_SOURCE_DIR "/tests/chat/qwen2.5.jinja", "rb");
    size_t n = f ? fread(tmpl, 1, sizeof tmpl - 1, f) : 0;
    if (f) fclose(f);
    tmpl[n] = 0;
    if (pith_tokenizer_load(FUZZ_SOURCE_DIR "/assets/default.gguf", 0, &srv.tok, &err) ||
        pith_chat_template_compile(tmpl, &srv.chat, &err)) {
        fprintf(stderr, "fuzz_http: %s\n", err.msg);
        exit(1);
    }
    model.hp.n_vocab = pith_tokenizer_n_vocab(srv.tok);
    srv.model = &model;
    srv.model_name = "pith";
    srv.bos_text = "<s>";
    srv.eos_text = "</s>";
    srv.max_seq_len = 256;
    atomic_store(&srv.ready, true);
    return 0;
}

/* Stand-ins for the HTTP layer (http.c) and the generation runner (generate.c). */
void server_log(pith_server *s, int level, const char *fmt, ...) {
    (void)s;
    (void)level;
    (void)fmt;
}
enum MHD_Result http_send_json(http_request *r, int status, cJSON *body) {
    r->responded = true;
    r->status = status;
    cJSON_Delete(body);
    return MHD_YES;
}
enum MHD_Result http_send_text(http_request *r, int status, const char *content_type, const char *data, size_t len) {
    (void)content_type;
    (void)data;
    (void)len;
    r->responded = true;
    r->status = status;
    return MHD_YES;
}
enum MHD_Result http_send_error(http_request *r, const api_error *e) {
    r->responded = true;
    r->status = e->status;
    return MHD_YES;
}
bool gen_refuse_unready(http_request *r, enum MHD_Result *rc) {
    (void)r;
    (void)rc;
    return false;
}
cJSON *gen_parse_body(http_request *r, enum MHD_Result *rc) {
    cJSON *body = cJSON_ParseWithLength(r->body, r->body_len);
    if (!body) *rc = http_send_error(r, &(api_error){.status = 400});
    return body;
}
int gen_check_model(pith_server *s, const char *name, api_error *err) {
    if (!name || !strcmp(name, s->model_name)) return 0;
    return api_errorf(err, 404, "model_not_found", "model", "no such model");
}
void gen_trim_after(const http_request *r) {
    (void)r;
}
void gen_prompt_clear(gen_prompt *p) {
    free(p->ids);
    if (p->images) server_images_free(p->images);
    free(p->images);
    memset(p, 0, sizeof *p);
}
void gen_prompts_free(gen_prompt *prompts, int n) {
    for (int i = 0; prompts && i < n; i++) gen_prompt_clear(&prompts[i]);
    free(prompts);
}
int gen_check_lengths(pith_server *s, gen_kind kind, const gen_params *p, const gen_prompt *pr, int *max_tokens,
                      api_error *err) {
    (void)kind;
    (void)pr;
    *max_tokens = p->max_tokens > 0 ? p->max_tokens : 16;
    if (pr->n > s->max_seq_len) return api_errorf(err, 400, "context_length_exceeded", NULL, "too long");
    return 0;
}
enum MHD_Result gen_run(http_request *r, gen_kind kind, gen_params *p, gen_prompt *prompts, int n_prompts) {
    (void)kind;
    gen_prompts_free(prompts, n_prompts);
    gen_params_free(p);
    r->responded = true;
    r->status = 200;
    return MHD_YES;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    static const http_handler handlers[] = {handle_completions, handle_chat_completions, handle_tokenize,
                                            handle_detokenize, handle_responses, handle_messages,
                                            handle_messages_count_tokens, handle_apply_template, handle_infill,
                                            handle_render_completions, handle_render_chat_completions};
    char *body = malloc(size);
    if (!body) return 0;
    memcpy(body, data + 1, size - 1);
    body[size - 1] = 0;
    http_request r = {.srv = &srv, .method = "POST", .url = "/", .body = body, .body_len = size - 1};
    handlers[data[0] % (sizeof handlers / sizeof *handlers)](&r);
    if (!r.responded) abort(); /* a handler must queue exactly one response */
    free(body);
    return 0;
}
