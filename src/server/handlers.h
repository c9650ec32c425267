/* The route handlers (see http.h for their contract). */
#ifndef PITH_SERVER_HANDLERS_H
#define PITH_SERVER_HANDLERS_H

#include "server/http.h"

enum MHD_Result handle_completions(http_request *r);      /* completions.c */
enum MHD_Result handle_chat_completions(http_request *r); /* chat_completions.c */
enum MHD_Result handle_responses(http_request *r);        /* responses.c */
enum MHD_Result handle_embeddings(http_request *r);       /* embeddings.c */
enum MHD_Result handle_health(http_request *r);           /* routes_info.c */
enum MHD_Result handle_models(http_request *r);
enum MHD_Result handle_metrics(http_request *r);
enum MHD_Result handle_tokenize(http_request *r);         /* tokenize.c */
enum MHD_Result handle_detokenize(http_request *r);

#endif
