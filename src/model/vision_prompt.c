/* Prompts with images: the processor's expansion of each image marker into the image's tokens, then one
 * tokenization of the whole text, so the ids around an image are what the model's own processor makes
 * (Hugging Face expands the text, not the ids: "\n\n" next to a newline of the template merges).
 *
 * Gemma 3 (Gemma3Processor): each "<start_of_image>" becomes "\n\n<start_of_image>", tokens_per_image
 * "<image_soft_token>", "<end_of_image>\n\n". Qwen3.5 (Qwen3VLProcessor): each "<|image_pad|>" (the chat
 * template writes "<|vision_start|><|image_pad|><|vision_end|>" for an image) becomes as many
 * "<|image_pad|>" as the image has tokens. */
#include <stdlib.h>
#include <string.h>

#include "model/vision.h"

typedef struct prompt_format {
    const char *marker;  /* what a chat message's image part becomes in the text */
    const char *target;  /* what the processor expands, once per image */
    const char *pre, *pad, *post;
    const char *also[2]; /* tokens the tokenizer must have besides pad */
} prompt_format;

static const prompt_format gemma3 = {"<start_of_image>", "<start_of_image>", "\n\n<start_of_image>", "<image_soft_token>",
                                     "<end_of_image>\n\n", {"<start_of_image>", "<end_of_image>"}};
static const prompt_format qwen3vl = {"<|vision_start|><|image_pad|><|vision_end|>", "<|image_pad|>", "", "<|image_pad|>",
                                      "", {"<|vision_start|>", "<|vision_end|>"}};

static const prompt_format *format_of(const pith_vision *v) {
    return pith_vision_hparams_of(v)->projector == PITH_VISION_QWEN3VL ? &qwen3vl : &gemma3;
}

const char *pith_vision_marker(const pith_vision *v) { return format_of(v)->marker; }

/* Occurrences of needle in text[0..len). */
static int count_of(const char *text, size_t len, const char *needle) {
    size_t n = strlen(needle);
    int c = 0;
    for (size_t i = 0; i + n <= len; i++)
        if (!memcmp(text + i, needle, n)) c++, i += n - 1;
    return c;
}

static char *put(char *o, const char *s) {
    size_t n = strlen(s);
    memcpy(o, s, n);
    return o + n;
}

int pith_vision_prompt(const pith_vision *v, const pith_tokenizer *tok, const char *text, size_t len, int flags,
                       const pith_vision_input *images, int n_images, int32_t **ids, int *n_ids, pith_media *media,
                       pith_err *err) {
    *ids = NULL;
    *n_ids = 0;
    const prompt_format *f = format_of(v);
    int32_t pad = pith_tokenizer_token_id(tok, f->pad, strlen(f->pad));
    if (pad < 0 || pith_tokenizer_token_id(tok, f->also[0], strlen(f->also[0])) < 0 ||
        pith_tokenizer_token_id(tok, f->also[1], strlen(f->also[1])) < 0)
        return pith_errf(err, "the tokenizer has no %s / %s / %s tokens: it is not the vision model's", f->also[0], f->pad,
                         f->also[1]);
    int markers = count_of(text, len, f->target);
    if (markers != n_images)
        return pith_errf(err, "the prompt has %d image marker%s (%s) for %d image%s", markers, markers == 1 ? "" : "s",
                         f->target, n_images, n_images == 1 ? "" : "s");
    if (strcmp(f->target, f->pad) && count_of(text, len, f->pad) > 0)
        return pith_errf(err, "the prompt holds %s tokens of its own", f->pad);
    size_t target = strlen(f->target), grow = 0;
    for (int k = 0; k < n_images; k++) {
        if (images[k].rows < 1 || images[k].cols < 1 || (int64_t)images[k].rows * images[k].cols > (1 << 20))
            return pith_errf(err, "image %d has no tokens", k);
        grow += strlen(f->pre) + (size_t)images[k].rows * images[k].cols * strlen(f->pad) + strlen(f->post);
    }
    char *x = malloc(len + grow + 1), *o = x;
    if (!x) return pith_errf(err, "out of memory for the prompt");
    for (size_t i = 0, k = 0; i < len;) {
        if (i + target <= len && !memcmp(text + i, f->target, target)) {
            o = put(o, f->pre);
            for (int t = 0; t < images[k].rows * images[k].cols; t++) o = put(o, f->pad);
            o = put(o, f->post);
            i += target, k++;
        } else {
            *o++ = text[i++];
        }
    }
    int rc = pith_tokenizer_encode(tok, x, (size_t)(o - x), flags | PITH_TOK_PARSE_SPECIAL, ids, n_ids, err);
    free(x);
    if (rc) return -1;
    int k = 0;
    for (int i = 0; i < *n_ids && k <= n_images;) {
        if ((*ids)[i] != pad) {
            i++;
            continue;
        }
        int j = i;
        while (j < *n_ids && (*ids)[j] == pad) j++;
        if (k == n_images || j - i != images[k].rows * images[k].cols) break;
        media[k] = (pith_media){.pos = i, .n_tokens = j - i, .input = images[k].pixels, .n_input = images[k].n,
                                .rows = images[k].rows, .cols = images[k].cols};
        k++;
        i = j;
    }
    if (k != n_images) {
        free(*ids);
        *ids = NULL;
        *n_ids = 0;
        return pith_errf(err, "the tokenized prompt does not hold the %d images' tokens where their markers are", n_images);
    }
    return 0;
}
