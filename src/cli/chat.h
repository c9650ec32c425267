/* `pith run --chat`: an interactive chat in the terminal.
 *
 * Each line read from `in` is one user turn (an empty line is ignored; end of input ends the chat).
 * The conversation so far is rendered with the model's chat template and generated through the engine,
 * so every turn reuses the previous turns' KV blocks from the prefix cache. The reply streams to `out`.
 * With a system prompt (-p), it opens the conversation. With a projector (--mmproj), a line "/image FILE"
 * attaches an image to the next user turn (the model's image marker goes before its text); the images
 * stay in the conversation, so later turns find them in the prefix cache. */
#ifndef PITH_CLI_CHAT_H
#define PITH_CLI_CHAT_H

#include <stdio.h>

#include "pith/chat.h"
#include "pith/engine.h"

typedef struct cli_chat_opts {
    const char *system_prompt;        /* NULL or "": none */
    const char *bos_text, *eos_text;  /* the tokenizer's BOS/EOS text for the template; may be NULL */
    pith_sampling_params sampling;
    int n_predict;                    /* most tokens per reply */
    pith_engine_options engine;
    bool interactive;                 /* print a "> " prompt on stderr before each turn */
    const char *mmproj;               /* the vision projector, or NULL: /image is refused */
    int n_threads;                    /* the projector's threads */
    int image_max_tokens;             /* each image's tokens at most (cli_images_open) */
} cli_chat_opts;

/* Returns 0 at the end of input, 130 after Ctrl-C (cli_sigint_install: the reply so far stays
 * written), or -1 with err. A conversation that outgrows the context loses its oldest turns (the system
 * prompt stays), with a notice on stderr. */
int cli_chat(pith_model *m, const pith_tokenizer *tok, const pith_chat_template *tmpl, const cli_chat_opts *o,
             FILE *in, FILE *out, pith_err *err);

#endif
