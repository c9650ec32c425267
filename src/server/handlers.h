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

#endif
