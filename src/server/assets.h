/* What the server loads before it is ready: the model, its tokenizer, and its chat template (from
 * --chat-template, the GGUF's tokenizer.chat_template, or a Hugging Face directory's chat_template.jinja
 * or tokenizer_config.json; ChatML when the model has none, or when the interpreter cannot compile the
 * model's own template, with a warning in the log). */
#ifndef PITH_SERVER_ASSETS_H
#define PITH_SERVER_ASSETS_H

#include "pith/chat.h"
#include "pith/model.h"
#include "pith/tokenizer.h"
#include "server/server_internal.h"

typedef struct server_assets {
    pith_model *model;
    pith_tokenizer *tok;
    pith_chat_template *chat;
    char *bos_text, *eos_text;   /* the BOS / EOS tokens' text for templates; NULL when none */
} server_assets;

int assets_load(pith_server *s, server_assets *a, pith_err *err);
void assets_free(server_assets *a);

#endif
