#include "server/images.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "image/image.h"
#include "model/vision.h"
#include "server/server_internal.h"

bool server_image_part(const cJSON *part, const char **url) {
    *url = NULL;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
    if (!cJSON_IsString(type) || strcmp(type->valuestring, "image_url")) return false;
    const cJSON *iu = cJSON_GetObjectItemCaseSensitive(part, "image_url");
    if (cJSON_IsString(iu)) {
        *url = iu->valuestring;
    } else {
        const cJSON *u = cJSON_GetObjectItemCaseSensitive(iu, "url");
        if (cJSON_IsString(u)) *url = u->valuestring;
    }
    return true;
}

void server_images_free(server_images *im) {
    for (int i = 0; i < im->n; i++) pith_vision_input_free(&im->images[i]);
    memset(im, 0, sizeof *im);
}

/* One image: bytes, decoded, prepared into *image. */
static int load_one(pith_server *srv, const char *url, int i, int k, pith_vision_input *image, api_error *err) {
    uint8_t *bytes;
    size_t n;
    if (media_fetch(&srv->media, url, "messages", &bytes, &n, err)) return -1;
    pith_image_limits lim = {.max_bytes = srv->media.max_bytes ? srv->media.max_bytes : MEDIA_DEFAULT_MAX_BYTES};
    pith_err why;
    int rc = pith_vision_prepare_bytes(srv->vision, bytes, n, &lim, image, &why);
    free(bytes);
    if (rc == -1) /* the decoder's messages are Pith's own: the format, the size, where the file is broken */
        return api_errorf(err, 400, "invalid_image", "messages", "messages[%d].content[%d]: %s", i, k, why.msg);
    if (rc) return api_errorf(err, 500, "internal_error", NULL, "out of memory for an image");
    return 0;
}

int server_images_load(pith_server *srv, const cJSON *msgs, server_images *out, api_error *err) {
    memset(out, 0, sizeof *out);
    int i = 0;
    long tokens = 0; /* the images' so far: prepared pixels are held until the request ends */
    const cJSON *m;
    const cJSON *list = cJSON_IsArray(msgs) ? msgs : NULL; /* the messages' shape is checked after */
    cJSON_ArrayForEach(m, list) {
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content"), *part;
        const cJSON *parts = cJSON_IsArray(content) ? content : NULL;
        int k = 0;
        cJSON_ArrayForEach(part, parts) {
            const char *url;
            if (server_image_part(part, &url)) {
                if (!srv->vision) {
                    server_images_free(out);
                    if (srv->model_server) /* one of several: say which, and how it gets a projector */
                        return api_errorf(err, 400, "unsupported_content", "messages",
                                          "messages[%d].content[%d]: the model '%.100s' takes no images (it has no "
                                          "vision projector: --mmproj %.100s=FILE, or a mmproj*.gguf in its "
                                          "--models-dir directory)", i, k, srv->model_name, srv->model_name);
                    return api_errorf(err, 400, "unsupported_content", "messages",
                                      "messages[%d].content[%d]: images need a vision model: the served model takes none "
                                      "(start the server with --mmproj)", i, k);
                }
                if (out->n == SERVER_MAX_IMAGES) {
                    server_images_free(out);
                    return api_errorf(err, 400, "invalid_value", "messages", "at most %d images in a request", SERVER_MAX_IMAGES);
                }
                if (!url) {
                    server_images_free(out);
                    return api_errorf(err, 400, "invalid_value", "messages",
                                      "messages[%d].content[%d]: an image_url part needs image_url.url", i, k);
                }
                if (load_one(srv, url, i, k, &out->images[out->n], err)) {
                    if (err->message[0] && !strstr(err->message, "messages[")) { /* say which part */
                        char m2[sizeof err->message];
                        snprintf(m2, sizeof m2, "messages[%d].content[%d]: %.300s", i, k, err->message);
                        memcpy(err->message, m2, sizeof m2);
                    }
                    server_images_free(out);
                    return -1;
                }
                tokens += (long)out->images[out->n].rows * out->images[out->n].cols;
                out->n++;
                if (tokens >= srv->max_seq_len) { /* refused before more pixels are prepared */
                    server_images_free(out);
                    return api_errorf(err, 400, "context_length_exceeded", "messages",
                                      "messages[%d].content[%d]: this model's maximum context length is %d tokens, "
                                      "but the images up to this one take %ld", i, k, srv->max_seq_len, tokens);
                }
            }
            k++;
        }
        i++;
    }
    return 0;
}

int server_images_prompt(pith_server *srv, server_images *im, const char *text, size_t len, int32_t **ids, int *n_ids,
                         api_error *err) {
    pith_err why;
    if (pith_vision_prompt(srv->vision, srv->tok, text, len, PITH_TOK_ADD_BOS, im->images, im->n, ids, n_ids, im->media,
                           &why)) {
        server_log(srv, PITH_LOG_WARN, "image prompt: %s", why.msg);
        return api_errorf(err, 400, "invalid_value", "messages",
                          "the images cannot be placed in this conversation: %s", why.msg);
    }
    return 0;
}
