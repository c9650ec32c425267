/* Images in chat requests: the image parts of the messages (OpenAI {"type": "image_url", "image_url":
 * {"url": ...}} or "image_url": "..."), fetched (media.h), decoded and prepared as the served model's
 * processor does, then the prompt with their spans (model/vision.h) for the engine.
 *
 * Invariants: images are taken in the order their parts appear, message by message, which is the order
 * the chat template writes their markers; a request has at most SERVER_MAX_IMAGES, whose tokens together
 * stay below the context length (checked as each is prepared, so a request holds at most about a context's
 * worth of prepared pixels); every failure is a 4xx naming the message and part (never a library's or a
 * remote's text) and leaves nothing allocated. */
#ifndef PITH_SERVER_IMAGES_H
#define PITH_SERVER_IMAGES_H

#include <stdbool.h>

#include <cjson/cJSON.h>

#include "model/vision.h"
#include "pith/engine.h"
#include "server/api_error.h"

struct pith_server;

#define SERVER_MAX_IMAGES 16

typedef struct server_images {
    pith_vision_input images[SERVER_MAX_IMAGES];
    pith_media media[SERVER_MAX_IMAGES];
    int n;
} server_images;

/* Whether part is an image part; then *url is its URL (or NULL when the part is malformed). */
bool server_image_part(const cJSON *part, const char **url);
/* Fetches, decodes and prepares every image part of msgs. 0, or -1 with err (*out then empty). */
int server_images_load(struct pith_server *srv, const cJSON *msgs, server_images *out, api_error *err);
/* Tokenizes text (the rendered conversation, one image marker per image) with the images' spans into
 * ids (malloc'd) and im->media. */
int server_images_prompt(struct pith_server *srv, server_images *im, const char *text, size_t len, int32_t **ids,
                         int *n_ids, api_error *err);
void server_images_free(server_images *im);

#endif
