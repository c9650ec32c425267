/* The route handlers (see http.h for their contract). */
#ifndef PITH_SERVER_HANDLERS_H
#define PITH_SERVER_HANDLERS_H

#include "server/http.h"

enum MHD_Result handle_completions(http_request *r);      /* completions.c */
enum MHD_Result handle_chat_completions(http_request *r); /* chat_completions.c */
enum MHD_Result handle_responses(http_request *r);        /* responses.c */
enum MHD_Result handle_messages(http_request *r);         /* messages.c */
enum MHD_Result handle_messages_count_tokens(http_request *r);
enum MHD_Result handle_messages(http_request *r);         /* messages.c */
enum MHD_Result handle_messages_count_tokens(http_request *r);
enum MHD_Result handle_embeddings(http_request *r);       /* embeddings.c */
enum MHD_Result handle_health(http_request *r);           /* routes_info.c */
enum MHD_Result handle_health_live(http_request *r);
enum MHD_Result handle_models(http_request *r);
enum MHD_Result handle_metrics(http_request *r);
enum MHD_Result handle_tokenize(http_request *r);         /* tokenize.c */
enum MHD_Result handle_detokenize(http_request *r);
enum MHD_Result handle_apply_template(http_request *r);   /* apply_template.c */
enum MHD_Result handle_render_completions(http_request *r); /* render.c */
enum MHD_Result handle_render_chat_completions(http_request *r);
enum MHD_Result handle_rerank(http_request *r);           /* rerank.c */
enum MHD_Result handle_infill(http_request *r);           /* infill.c */

/* chat_completions.c: renders body.messages (with tools, chat_template_kwargs, add_generation_prompt...)
 * with the chat template into *text (malloc'd), as chat_build_prompt does before encoding. */
int chat_render_text(pith_server *srv, const cJSON *body, char **text, size_t *len, api_error *err);

/* completions.c: fill-in-the-middle. fim_check: 400 naming param when the vocabulary lacks the prefix,
 * suffix or middle token. fim_build: the prompt [BOS] [extra files] <PRE> prefix <SUF> suffix <MID>
 * [middle] (PSM), each text encoded without BOS and with special-token texts read as plain text; extra
 * (NULL or a list of {filename, text}, checked by the caller) goes first, in the repo-level pattern
 * (<repo>myproject\n <sep>filename\n text ... <sep>filename\n) where the vocabulary has both tokens,
 * else as "--- filename ---\n" text "\n". *out is owned by the caller even on failure. */
struct gen_prompt;
int fim_check(pith_server *srv, const char *param, api_error *err);
int fim_build(pith_server *srv, const char *prefix, const char *suffix, const cJSON *extra, const char *middle,
              struct gen_prompt *out, api_error *err);

/* The checks and the prompt of a /v1/completions (completions.c) or /v1/chat/completions
 * (chat_completions.c) body, everything the handler does before gen_run: parameters, model, structured
 * output, tools, then the prompts' token ids. Shared with the render endpoints (render.c) so that their ids
 * are the ones generation would run by construction. p is freed by gen_params_free and the prompts by
 * gen_prompts_free even on failure (-1 with err). */
struct gen_params;
int completions_prepare(pith_server *srv, const cJSON *body, struct gen_params *p, struct gen_prompt **prompts,
                        int *n_prompts, api_error *err);
int chat_prepare(pith_server *srv, const cJSON *body, struct gen_params *p, struct gen_prompt *prompt, api_error *err);

#endif
