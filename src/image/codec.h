/* The per-format decoders behind pith_image_decode (decode.c), private to src/image/.
 *
 * Each is called with the format already sniffed, n within the byte limit and max_pixels already
 * clamped. On success *out holds RGB pixels as stored in the file (orientation not yet applied) and
 * *orientation the EXIF orientation found in the file (1 when none). On failure *out is empty, nothing
 * is leaked, and err says why in one line without a format prefix (decode.c adds it). */
#ifndef PITH_IMAGE_CODEC_H
#define PITH_IMAGE_CODEC_H

#include "image/image.h"

int pith_image_decode_jpeg(const uint8_t *bytes, size_t n, uint64_t max_pixels, pith_image *out, int *orientation,
                           pith_err *err);
int pith_image_decode_png(const uint8_t *bytes, size_t n, uint64_t max_pixels, pith_image *out, int *orientation,
                          pith_err *err);
int pith_image_decode_webp(const uint8_t *bytes, size_t n, uint64_t max_pixels, pith_image *out, int *orientation,
                           pith_err *err);

/* The shared refusal for a header's dimensions: zero sizes and more than max_pixels pixels. */
int pith_image_check_size(uint64_t w, uint64_t h, uint64_t max_pixels, pith_err *err);

#endif
