/* Prompts with images: the processor's expansion of each image marker into the image's tokens, then one
 * tokenization of the whole text, so the ids around an image are what the model's own processor makes
 * (Hugging Face expands the text, not the ids: "\n\n" next to a newline of the template merges). */
#include <stdlib.h>
#include <string.h>

#include "model/vision.h"

#define GEMMA3_BOI "<start_of_image>"
#define GEMMA3_EOI "<end_of_image>"
#define GEMMA3_SOFT "<image_soft_token>"

const char *pith_vision_marker(const pith_vision *v) {
    (void)v; /* Gemma 3 is the one projector today */
    return GEMMA3_BOI;
}

/* Occurrences of needle in text[0..len). */
static int count_of(const char *text, size_t len, const char *needle) {
    size_t n = strlen(needle);
    int c = 0;
    for (size_t i = 0; i + n <= len; i++)
        if (!memcmp(text + i, needle, n)) c++, i += n - 1;
    return c;
}

int pith_vision_prompt(const pith_vision *v, const pith_tokenizer *tok, const char *text, size_t len, int flags,
                       float *const *pixels, int n_images, int32_t **ids, int *n_ids, pith_media *media, pith_err *err) {
    *ids = NULL;
    *n_ids = 0;
    const pith_vision_hparams *hp = pith_vision_hparams_of(v);
    int32_t soft = pith_tokenizer_token_id(tok, GEMMA3_SOFT, strlen(GEMMA3_SOFT));
    if (soft < 0 || pith_tokenizer_token_id(tok, GEMMA3_BOI, strlen(GEMMA3_BOI)) < 0 ||
        pith_tokenizer_token_id(tok, GEMMA3_EOI, strlen(GEMMA3_EOI)) < 0)
        return pith_errf(err, "the tokenizer has no %s / %s / %s tokens: it is not Gemma 3's", GEMMA3_BOI, GEMMA3_SOFT, GEMMA3_EOI);
    int markers = count_of(text, len, GEMMA3_BOI);
    if (markers != n_images)
        return pith_errf(err, "the prompt has %d image marker%s (%s) for %d image%s", markers, markers == 1 ? "" : "s",
                         GEMMA3_BOI, n_images, n_images == 1 ? "" : "s");
    if (count_of(text, len, GEMMA3_SOFT) > 0) return pith_errf(err, "the prompt holds %s tokens of its own", GEMMA3_SOFT);
    const size_t boi = strlen(GEMMA3_BOI), soft_len = strlen(GEMMA3_SOFT);
    const char *pre = "\n\n" GEMMA3_BOI, *post = GEMMA3_EOI "\n\n";
    size_t grow = strlen(pre) + (size_t)hp->tokens_per_image * soft_len + strlen(post) - boi;
    char *x = malloc(len + (size_t)n_images * grow + 1), *o = x;
    if (!x) return pith_errf(err, "out of memory for the prompt");
    for (size_t i = 0; i < len;) {
        if (i + boi <= len && !memcmp(text + i, GEMMA3_BOI, boi)) {
            o = memcpy(o, pre, strlen(pre)), o += strlen(pre);
            for (int k = 0; k < hp->tokens_per_image; k++) o = memcpy(o, GEMMA3_SOFT, soft_len), o += soft_len;
            o = memcpy(o, post, strlen(post)), o += strlen(post);
            i += boi;
        } else {
            *o++ = text[i++];
        }
    }
    int rc = pith_tokenizer_encode(tok, x, (size_t)(o - x), flags | PITH_TOK_PARSE_SPECIAL, ids, n_ids, err);
    free(x);
    if (rc) return -1;
    int k = 0;
    for (int i = 0; i < *n_ids && k <= n_images;) {
        if ((*ids)[i] != soft) {
            i++;
            continue;
        }
        int j = i;
        while (j < *n_ids && (*ids)[j] == soft) j++;
        if (k == n_images || j - i != hp->tokens_per_image) break;
        media[k] = (pith_media){.pos = i, .n_tokens = j - i, .input = pixels[k],
                                .n_input = pith_vision_input_floats(v)};
        k++;
        i = j;
    }
    if (k != n_images) {
        free(*ids);
        *ids = NULL;
        *n_ids = 0;
        return pith_errf(err, "the tokenized prompt does not hold %d images of %d tokens", n_images, hp->tokens_per_image);
    }
    return 0;
}
