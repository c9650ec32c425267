/* Images in: decoding an untrusted encoded image into RGB pixels, and the preprocessing a vision model's
 * image processor applies before the encoder (resize, rescale + normalize, Qwen-VL's smart resize).
 *
 * The module owns src/image/: format sniffing and the JPEG (libjpeg), PNG (libpng) and WebP (libwebp,
 * libwebpdemux for the first frame of an animation) decoders, the EXIF orientation, the resampling
 * filters and the float conversion. The reference throughout is what Hugging Face processors see:
 * transformers' load_image (PIL: ImageOps.exif_transpose, then convert("RGB")) and PIL Image.resize.
 *
 * Invariants:
 * - A pith_image is always 3 channels of 8 bits, RGB, rows top to bottom, no padding between rows:
 *   pixel (x, y) channel c is data[(y * width + x) * 3 + c]. data is owned by the image (malloc) and
 *   released by pith_image_free; width and height are >= 1 for a decoded or resized image.
 * - Alpha is dropped, never composited (PIL convert("RGB")); grayscale, palette and 16-bit inputs become
 *   8-bit RGB. The EXIF orientation (tags 1-8) has been applied.
 * - Every input byte is untrusted: size limits are checked from the header before any pixel buffer is
 *   allocated, a truncated or corrupt file is an error (never a grey-filled image), and on error *out is
 *   left empty (data NULL) with nothing leaked. Nothing here prints, exits, or keeps global state.
 * - A format whose library was not found at build time decodes to an error naming the package. */
#ifndef PITH_IMAGE_IMAGE_H
#define PITH_IMAGE_IMAGE_H

#include <stddef.h>
#include <stdint.h>

#include "pith/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pith_image {
    int width, height;
    uint8_t *data; /* width * height * 3 bytes, RGB */
} pith_image;

/* The decoder's limits; a zero field (or a NULL limits pointer) means the default. max_pixels is the
 * decompression-bomb guard (width * height from the header, checked before allocating); it is clamped
 * to PITH_IMAGE_HARD_MAX_PIXELS. max_bytes bounds the encoded input. */
typedef struct pith_image_limits {
    uint64_t max_pixels;
    size_t max_bytes;
} pith_image_limits;

#define PITH_IMAGE_DEFAULT_MAX_PIXELS (64ull * 1024 * 1024)
#define PITH_IMAGE_DEFAULT_MAX_BYTES ((size_t)64 * 1024 * 1024)
/* No image, decoded or resized, has more pixels than this (3 bytes each stay far below SIZE_MAX and
 * every coordinate fits an int). */
#define PITH_IMAGE_HARD_MAX_PIXELS (1ull << 28)

typedef enum pith_image_format {
    PITH_IMAGE_UNKNOWN = 0,
    PITH_IMAGE_JPEG,
    PITH_IMAGE_PNG,
    PITH_IMAGE_WEBP,
} pith_image_format;

/* The format from the first bytes (JPEG FF D8 FF, the PNG signature, RIFF....WEBP). */
pith_image_format pith_image_sniff(const uint8_t *bytes, size_t n);

/* Decodes bytes into *out (see the invariants above). */
int pith_image_decode(const uint8_t *bytes, size_t n, const pith_image_limits *lim, pith_image *out,
                      pith_err *err);

/* Frees out->data and zeroes *img; safe on a zeroed image and on NULL. */
void pith_image_free(pith_image *img);

/* The EXIF orientation (1-8) in an EXIF blob: a TIFF header and IFD0, optionally after "Exif\0\0".
 * 1 (as stored) when the blob is malformed, has no orientation tag, or its value is outside 1-8. */
int pith_image_exif_orientation(const uint8_t *exif, size_t n);

/* Applies an EXIF orientation in place, as PIL ImageOps.exif_transpose does (5-8 swap width and
 * height). 1 or an unknown value leaves the image as it is. */
int pith_image_orient(pith_image *img, int orientation, pith_err *err);

/* The resampling filters of PIL Image.resize, with PIL's numbering. */
enum {
    PITH_RESIZE_NEAREST = 0,
    PITH_RESIZE_LANCZOS = 1,
    PITH_RESIZE_BILINEAR = 2,
    PITH_RESIZE_BICUBIC = 3,
};

/* Resizes in to w x h into *out (a new image; in is unchanged), as PIL Image.resize does on an RGB
 * image: separable, horizontal pass then vertical, the filter widened by the downscale factor
 * (antialiasing), weights normalized per output pixel and rounded to uint8 after each pass. */
int pith_image_resize(const pith_image *in, int w, int h, int filter, pith_image *out, pith_err *err);

/* CHW floats, out_chw[c * H * W + y * W + x] = (px * rescale - mean[c]) / std[c]: transformers' rescale
 * (to float32) then normalize. out_chw holds 3 * width * height floats. */
void pith_image_to_tensor(const pith_image *img, const float mean[3], const float std[3], float rescale,
                          float *out_chw);

/* Qwen2-VL / Qwen3-VL's smart_resize (transformers, qwen2_vl image processing): h and w rounded to
 * multiples of factor, then scaled (keeping the aspect ratio) so that out_h * out_w lies in
 * [min_pixels, max_pixels]. Refuses an aspect ratio above 200 as transformers does. */
int pith_image_smart_size(int h, int w, int factor, long min_pixels, long max_pixels, int *out_h, int *out_w,
                          pith_err *err);

#ifdef __cplusplus
}
#endif

#endif
