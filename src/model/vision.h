/* Vision encoders: an image's pixels in, the rows a text model reads in place of its image tokens' embeddings
 * out. The encoder is written over the backend interface (backend.h, the vision ops), as the decoders are.
 *
 * Two towers, from llama.cpp's projector files (`--mmproj`) or from a model's Hugging Face directory:
 *  - Gemma 3's (clip.projector_type "gemma3", Gemma3ForConditionalGeneration): a SigLIP vision
 *    transformer (patch embedding as one product over each patch's pixels, learned position embeddings,
 *    pre-LayerNorm blocks of bidirectional attention and a GELU MLP, a final LayerNorm) and Gemma 3's
 *    projector (average pooling of the patch grid by k x k, an RMSNorm of 1 + w, a product to the text
 *    model's width), for square images of image_size;
 *  - Qwen3.5's ("qwen3vl_merger", Qwen3_5ForConditionalGeneration; vision_qwen3vl.c): Qwen3-VL's
 *    transformer for images of any size (interpolated learned positions, a 2-D RoPE, fused QKV) and its
 *    patch merger (2 x 2 patches into one token).
 *
 * Invariants: the encoder owns its file (weights may view it) and its buffers in the backend it was
 * opened on; one encode call is one encoder step of whole images; the output rows are in the image's
 * row-major token order (a rows x cols grid). Nothing here knows about requests or caches. */
#ifndef PITH_MODEL_VISION_H
#define PITH_MODEL_VISION_H

#include "backend/backend.h"
#include "image/image.h"
#include "pith/engine.h"
#include "pith/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum pith_vision_projector {
    PITH_VISION_GEMMA3,
    PITH_VISION_QWEN3VL,        /* Qwen3-VL's tower and patch merger (Qwen3.5: without DeepStack) */
} pith_vision_projector;

#define PITH_VISION_MAX_DEEPSTACK 8

typedef struct pith_vision_hparams {
    pith_vision_projector projector;
    int image_size, patch_size; /* square input of image_size pixels (0: any size, Qwen3-VL), patches of
                                   patch_size */
    int dim, ffn, n_layers, n_heads;
    float eps;                  /* the LayerNorms' (and the projector's RMSNorm's) */
    float mean[3], std[3];      /* the pixel normalization the encoder was trained with (0..1 pixels) */
    int pool;                   /* Gemma 3: the k of the k x k average pooling */
    int out_dim;                /* the text model's hidden width */
    int patches_per_side, tokens_per_image;
    pith_dtype weight_type;     /* the blocks' matrices' (the first block's Q): what the kernels run on */
    int resample;               /* the processor's resize filter (image.h's PITH_RESIZE_*: bilinear) */
    /* Qwen3-VL: an image of any size (within the pixel budget, sides multiples of patch_size * merge)
     * whose k x k blocks of patches (k = merge) become one token each; the patch embedding is a Conv3d over
     * `temporal` copies of the image; the learned positions are a pos_side x pos_side grid, interpolated to
     * the image's; a 2-D RoPE of base rope_theta in the attention; Q, K and V from one fused product. */
    int merge, temporal, pos_side;
    long min_pixels, max_pixels;
    float rope_theta;
    bool fused_qkv;
    /* Qwen3-VL's DeepStack: after each of these blocks a merger of its own makes one more part of every
     * token's row (the text model adds part k + 1 after its layer k: model.h embed_parts) */
    int n_deepstack, deepstack_layer[PITH_VISION_MAX_DEEPSTACK];
} pith_vision_hparams;

typedef struct pith_vision pith_vision;

/* Opens a projector file (llama.cpp's mmproj GGUF) or a Hugging Face checkpoint with a vision tower (a
 * directory, or its config.json: Gemma3ForConditionalGeneration) and binds its weights in be (which must have the vision ops: the CPU backend
 * does). Refuses other projector types, missing or misshapen tensors and inconsistent sizes with a message
 * naming them. */
int pith_vision_open(const char *path, pith_backend *be, pith_vision **out, pith_err *err);
/* pith_vision_open on a CPU backend of its own (n_threads workers; 0: one per online CPU), which
 * pith_vision_free frees: for callers outside the model layer (the CLI, the server). */
int pith_vision_load(const char *path, int n_threads, pith_vision **out, pith_err *err);
void pith_vision_free(pith_vision *v);
/* Whether a model path (what -m names) carries its own vision tower, so that pith_vision_open(model_path)
 * opens it without a separate projector file: a Hugging Face directory (or its config.json) of a
 * multimodal class whose config has a "vision_config" (Gemma3ForConditionalGeneration). Cheap: reads the
 * config only; false for GGUF files and on any error. */
bool pith_vision_in_model(const char *model_path);
const pith_vision_hparams *pith_vision_hparams_of(const pith_vision *v);
/* Caps a dynamic-resolution tower's images (Qwen3-VL's) at max_tokens tokens each: the processor's pixel
 * budget is lowered to max_tokens * (patch_size * merge)^2 when that is less, and pith_vision_prepare's
 * smart resize keeps each image within it (what llama.cpp's --image-max-tokens and vLLM's max_pixels
 * do). 0 keeps the processor's budget. A cap below the processor's minimum is refused; a fixed-size tower
 * (Gemma 3: tokens_per_image) is left as it is. Call before preparing images: it changes the hparams. */
int pith_vision_set_max_tokens(pith_vision *v, int max_tokens, pith_err *err);
/* The cap `pith run` and `pith serve` set unless told otherwise (--image-max-tokens): the budget Qwen's
 * examples use (max_pixels of 1280 tokens' pixels). Qwen3-VL's processor allows 16384 tokens, whose encode
 * takes many minutes on a few CPU cores and stalls every request behind it. */
#define PITH_VISION_DEFAULT_MAX_TOKENS 1280

/* An image as the encoder takes it: its pixels as the model's processor prepares them, and the tokens it
 * becomes (a rows x cols grid, row-major). */
typedef struct pith_vision_input {
    float *pixels;   /* [3][height][width], malloc'd (pith_vision_input_free) */
    size_t n;        /* floats: 3 * height * width */
    int height, width;
    int rows, cols;
} pith_vision_input;

/* An image prepared as the model's processor does (Gemma 3: pith_vision_preprocess below; Qwen3.5,
 * Qwen2VLImageProcessor: smart_resize to sides that are multiples of patch_size * merge with the pixel
 * count within [min_pixels, max_pixels], PIL's bicubic resize, / 255, normalized by mean and std).
 * 0; -1 with err when the image cannot be used (an aspect ratio over 200); -2 when memory ran out. */
int pith_vision_prepare(const pith_vision *v, const pith_image *img, pith_vision_input *out, pith_err *err);
void pith_vision_input_free(pith_vision_input *in);

/* Gemma 3's fixed-size preparation into pixels ([3][image_size][image_size]): Gemma 3
 * (transformers' Gemma3ImageProcessor, pan-and-scan off, its default) resizes to image_size square with
 * PIL's bilinear filter, rescales by 1/255 and normalizes by the file's mean and std. */
int pith_vision_preprocess(const pith_vision *v, const pith_image *img, float *pixels, pith_err *err);

/* Floats of one prepared image of a fixed-size encoder (Gemma 3): 3 * image_size^2; 0 for any size. */
size_t pith_vision_input_floats(const pith_vision *v);

/* An image file's bytes, decoded (lim: pith_image_decode's; NULL: the defaults) and prepared as
 * pith_vision_prepare does into *out. 0; -1 with err (the decoder's message) when the bytes are not an
 * image it can use; -2 with err when memory ran out. out->pixels is NULL on failure. */
int pith_vision_prepare_bytes(const pith_vision *v, const uint8_t *bytes, size_t n, const pith_image_limits *lim,
                              pith_vision_input *out, pith_err *err);

/* Encodes n_images images, each [3][image_size][image_size] floats already normalized (pixels / 255,
 * minus mean, over std, channel-major), into out: n_images * tokens_per_image rows of out_dim. */
int pith_vision_encode(pith_vision *v, const float *pixels, int n_images, float *out, pith_err *err);

/* One image of height x width ([3][height][width] prepared pixels) into its tokens' rows of out_dim:
 * tokens_per_image of them (Gemma 3: height and width must be image_size), or (height / (patch_size *
 * merge)) x (width / ...) in row-major order (Qwen3-VL: sides multiples of patch_size * merge). */
int pith_vision_encode_image(pith_vision *v, const float *pixels, int height, int width, float *out, pith_err *err);

/* Floats of one output row: out_dim, times 1 + n_deepstack (the parts a DeepStack model reads). */
int pith_vision_row_floats(const pith_vision *v);

/* The image marker a chat template writes for an image part (Gemma 3's "<start_of_image>"). */
const char *pith_vision_marker(const pith_vision *v);

/* A prompt with images, as the model's processor makes it: every image marker in text stands for the
 * next of n_images images (from pith_vision_prepare) and is expanded as the processor does (Gemma 3:
 * "\n\n<start_of_image>", tokens_per_image "<image_soft_token>", "<end_of_image>\n\n"; Qwen3.5: each
 * "<|image_pad|>" repeated to the image's tokens), then the whole text is tokenized with tok (flags:
 * pith_tokenizer_encode's; special tokens are always parsed) into *ids (malloc'd), and media[0..n_images)
 * get the spans of image tokens, with their grids and pixels (borrowed from images). Refuses a tokenizer
 * without the model's image tokens, and a marker count other than n_images. */
int pith_vision_prompt(const pith_vision *v, const pith_tokenizer *tok, const char *text, size_t len, int flags,
                       const pith_vision_input *images, int n_images, int32_t **ids, int *n_ids, pith_media *media,
                       pith_err *err);

/* The engine's encoder (engine.h: pith_encoder) over v: items are prepared images (Gemma 3: n_input ==
 * 3 * image_size^2 and n_tokens == tokens_per_image, encoded a few at a time in one encoder step;
 * Qwen3.5: a rows x cols grid, n_input == 3 * height * width for the sides the grid implies, one image
 * per encoder step), else the item is refused with an error. v must outlive the engine. */
void pith_vision_encoder(pith_vision *v, pith_encoder *out);

#ifdef __cplusplus
}
#endif

#endif
