/* Sniffing, limits and dispatch to the per-format decoders; then the EXIF orientation. */
#include <stdlib.h>
#include <string.h>

#include "image/codec.h"

pith_image_format pith_image_sniff(const uint8_t *b, size_t n) {
    if (n >= 3 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF) return PITH_IMAGE_JPEG;
    if (n >= 8 && memcmp(b, "\x89PNG\r\n\x1a\n", 8) == 0) return PITH_IMAGE_PNG;
    if (n >= 12 && memcmp(b, "RIFF", 4) == 0 && memcmp(b + 8, "WEBP", 4) == 0) return PITH_IMAGE_WEBP;
    return PITH_IMAGE_UNKNOWN;
}

/* Names the formats people send most often that are not decoded here, so the error says what the file
 * is rather than only what it is not. */
static const char *unsupported_name(const uint8_t *b, size_t n) {
    if (n >= 6 && (memcmp(b, "GIF87a", 6) == 0 || memcmp(b, "GIF89a", 6) == 0)) return "GIF";
    if (n >= 2 && b[0] == 'B' && b[1] == 'M') return "BMP";
    if (n >= 4 && (memcmp(b, "II*\0", 4) == 0 || memcmp(b, "MM\0*", 4) == 0)) return "TIFF";
    if (n >= 12 && memcmp(b + 4, "ftyp", 4) == 0) {
        if (memcmp(b + 8, "avif", 4) == 0 || memcmp(b + 8, "avis", 4) == 0) return "AVIF";
        if (memcmp(b + 8, "heic", 4) == 0 || memcmp(b + 8, "heix", 4) == 0 || memcmp(b + 8, "mif1", 4) == 0)
            return "HEIF/HEIC";
    }
    if (n >= 12 && memcmp(b, "\0\0\0\x0cjP  \r\n\x87\n", 12) == 0) return "JPEG 2000";
    if (n >= 4 && memcmp(b, "\xff\x4f\xff\x51", 4) == 0) return "JPEG 2000";
    if (n >= 4 && memcmp(b, "qoif", 4) == 0) return "QOI";
    if (n >= 4 && memcmp(b, "8BPS", 4) == 0) return "PSD";
    if (n >= 4 && memcmp(b, "\0\0\1\0", 4) == 0) return "ICO";
    if (n >= 5 && (memcmp(b, "<?xml", 5) == 0 || memcmp(b, "<svg", 4) == 0)) return "SVG";
    if (n >= 12 && memcmp(b, "RIFF", 4) == 0) return "RIFF (not WebP)";
    return NULL;
}

int pith_image_check_size(uint64_t w, uint64_t h, uint64_t max_pixels, pith_err *err) {
    if (w == 0 || h == 0) return pith_errf(err, "the image is empty (%llux%llu)", (unsigned long long)w,
                                           (unsigned long long)h);
    /* w and h come from 32-bit header fields, so the product cannot wrap */
    if (w > UINT32_MAX || h > UINT32_MAX || w * h > max_pixels)
        return pith_errf(err, "the image is %llux%llu, more than the limit of %llu pixels", (unsigned long long)w,
                         (unsigned long long)h, (unsigned long long)max_pixels);
    return 0;
}

void pith_image_free(pith_image *img) {
    if (!img) return;
    free(img->data);
    memset(img, 0, sizeof *img);
}

int pith_image_decode(const uint8_t *bytes, size_t n, const pith_image_limits *lim, pith_image *out,
                      pith_err *err) {
    memset(out, 0, sizeof *out);
    uint64_t max_pixels = lim && lim->max_pixels ? lim->max_pixels : PITH_IMAGE_DEFAULT_MAX_PIXELS;
    if (max_pixels > PITH_IMAGE_HARD_MAX_PIXELS) max_pixels = PITH_IMAGE_HARD_MAX_PIXELS;
    size_t max_bytes = lim && lim->max_bytes ? lim->max_bytes : PITH_IMAGE_DEFAULT_MAX_BYTES;
    if (!bytes || n == 0) return pith_errf(err, "image: the input is empty (0 bytes)");
    if (n > max_bytes)
        return pith_errf(err, "image: the input is %zu bytes, more than the limit of %zu", n, max_bytes);
    int orientation = 1, rc;
    const char *name;
    switch (pith_image_sniff(bytes, n)) {
    case PITH_IMAGE_JPEG:
        name = "JPEG";
        rc = pith_image_decode_jpeg(bytes, n, max_pixels, out, &orientation, err);
        break;
    case PITH_IMAGE_PNG:
        name = "PNG";
        rc = pith_image_decode_png(bytes, n, max_pixels, out, &orientation, err);
        break;
    case PITH_IMAGE_WEBP:
        name = "WebP";
        rc = pith_image_decode_webp(bytes, n, max_pixels, out, &orientation, err);
        break;
    default:
        name = unsupported_name(bytes, n);
        if (name) return pith_errf(err, "image: %s images are not supported (JPEG, PNG and WebP are)", name);
        return pith_errf(err, "image: not a JPEG, PNG or WebP file (unrecognized first bytes)");
    }
    if (rc != 0) {
        pith_image_free(out);
        return pith_err_prefix(err, "image: %s", name);
    }
    if (pith_image_orient(out, orientation, err) != 0) {
        pith_image_free(out);
        return pith_err_prefix(err, "image: %s", name);
    }
    return 0;
}
