/* Images for `pith run` (--mmproj, --image): the projector file (on a CPU backend of its own), each
 * image file decoded and prepared as the model's processor does, and the prompt tokenized with their
 * spans (model/vision.h), ready for one engine request. Owns all of it until cli_images_free. */
#ifndef PITH_CLI_IMAGES_H
#define PITH_CLI_IMAGES_H

#include "model/vision.h"
#include "pith/engine.h"
#include "pith/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CLI_MAX_IMAGES 16

typedef struct cli_images {
    struct pith_vision *v;
    pith_encoder enc;          /* for pith_engine_options.encoder */
    pith_vision_input images[CLI_MAX_IMAGES];
    pith_media media[CLI_MAX_IMAGES];
    int n;
} cli_images;

/* The projector a model's images go through: mmproj when given, else the model itself when it carries
 * its vision tower (model/vision.h: pith_vision_in_model), else NULL. */
const char *cli_images_projector(const char *mmproj, const char *model);

/* Opens mmproj (n_threads worker threads), caps its images at max_tokens tokens each
 * (pith_vision_set_max_tokens: 0, the processor's budget), and prepares the n image files. 0, or -1 with
 * err naming the file that failed; *ci is then empty. */
int cli_images_open(cli_images *ci, const char *mmproj, const char *const *paths, int n, int n_threads, int max_tokens,
                    pith_err *err);
/* The prompt's ids (BOS added, special tokens parsed) with the images' spans in ci->media. A prompt
 * without the model's image marker gets one per image at its start. */
int cli_images_prompt(cli_images *ci, const pith_tokenizer *tok, const char *prompt, int32_t **ids, int *n_ids,
                      pith_err *err);
/* Decodes and prepares one more image file (--chat's /image). */
int cli_images_add(cli_images *ci, const char *path, pith_err *err);
/* text with n of the model's image markers before it (malloc'd; NULL when out of memory): where a
 * prompt or a chat message places n images. */
char *cli_images_marked(const cli_images *ci, int n, const char *text);
/* A rendered conversation (flags: pith_tokenizer_encode's) into ids, its k markers standing for the
 * newest k images (older turns, with their images, may have been dropped): *n_media = k spans in
 * ci->media. */
int cli_images_text(cli_images *ci, const pith_tokenizer *tok, const char *text, size_t len, int flags, int32_t **ids,
                    int *n_ids, int *n_media, pith_err *err);
void cli_images_free(cli_images *ci);

#ifdef __cplusplus
}
#endif

#endif
