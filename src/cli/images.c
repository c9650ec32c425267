#include "cli/images.h"

#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "model/vision.h"

void cli_images_free(cli_images *ci) {
    for (int i = 0; i < ci->n; i++) pith_vision_input_free(&ci->images[i]);
    pith_vision_free(ci->v);
    memset(ci, 0, sizeof *ci);
}

/* Decodes and prepares one file. */
static int prepare(const pith_vision *v, const char *path, pith_vision_input *image, pith_err *err) {
    char *bytes;
    size_t len;
    if (cli_read_file(path, &bytes, &len, err)) return -1;
    int rc = pith_vision_prepare_bytes(v, (const uint8_t *)bytes, len, NULL, image, err);
    free(bytes);
    return rc ? pith_err_prefix(err, "%s", path) : 0;
}

const char *cli_images_projector(const char *mmproj, const char *model) {
    if (mmproj) return mmproj;
    return model && pith_vision_in_model(model) ? model : NULL;
}

int cli_images_open(cli_images *ci, const char *mmproj, const char *const *paths, int n, int n_threads, int max_tokens,
                    pith_err *err) {
    memset(ci, 0, sizeof *ci);
    if (n > CLI_MAX_IMAGES) return pith_errf(err, "%d images: at most %d", n, CLI_MAX_IMAGES);
    if (!mmproj) return pith_errf(err, "--image needs the model's projector file (--mmproj FILE), or a model directory with its vision tower");
    if (pith_vision_load(mmproj, n_threads, &ci->v, err)) { /* the error names the file */
        cli_images_free(ci);
        return -1;
    }
    if (pith_vision_set_max_tokens(ci->v, max_tokens, err)) {
        cli_images_free(ci);
        return pith_err_prefix(err, "--image-max-tokens");
    }
    pith_vision_encoder(ci->v, &ci->enc);
    for (; ci->n < n; ci->n++) {
        if (prepare(ci->v, paths[ci->n], &ci->images[ci->n], err)) {
            cli_images_free(ci);
            return -1;
        }
    }
    return 0;
}

int cli_images_prompt(cli_images *ci, const pith_tokenizer *tok, const char *prompt, int32_t **ids, int *n_ids,
                      pith_err *err) {
    bool has = strstr(prompt, pith_vision_marker(ci->v)) != NULL;
    char *text = cli_images_marked(ci, has ? 0 : ci->n, prompt);
    if (!text) return pith_errf(err, "out of memory");
    int rc = pith_vision_prompt(ci->v, tok, text, strlen(text), PITH_TOK_ADD_BOS, ci->images, ci->n, ids, n_ids,
                                ci->media, err);
    free(text);
    return rc;
}

int cli_images_add(cli_images *ci, const char *path, pith_err *err) {
    if (ci->n == CLI_MAX_IMAGES) return pith_errf(err, "at most %d images in a conversation", CLI_MAX_IMAGES);
    if (prepare(ci->v, path, &ci->images[ci->n], err)) return -1;
    ci->n++;
    return 0;
}

char *cli_images_marked(const cli_images *ci, int n, const char *text) {
    const char *marker = pith_vision_marker(ci->v);
    size_t ml = strlen(marker), tl = strlen(text);
    char *out = malloc((size_t)n * ml + tl + 1);
    if (!out) return NULL;
    for (int i = 0; i < n; i++) memcpy(out + (size_t)i * ml, marker, ml);
    memcpy(out + (size_t)n * ml, text, tl + 1);
    return out;
}

int cli_images_text(cli_images *ci, const pith_tokenizer *tok, const char *text, size_t len, int flags, int32_t **ids,
                    int *n_ids, int *n_media, pith_err *err) {
    const char *marker = pith_vision_marker(ci->v);
    size_t ml = strlen(marker);
    int k = 0;
    for (const char *p = text; (p = strstr(p, marker)) && p < text + len; p += ml) k++;
    if (k > ci->n) return pith_errf(err, "the conversation holds %d image markers for %d images", k, ci->n);
    *n_media = k;
    return pith_vision_prompt(ci->v, tok, text, len, flags, ci->images + (ci->n - k), k, ids, n_ids, ci->media, err);
}
