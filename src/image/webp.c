/* WebP through libwebp: lossy and lossless stills with WebPDecodeRGBInto (into a buffer allocated here,
 * after the size check), the first frame of an animation with libwebpdemux's WebPAnimDecoder (the frame
 * composited on the canvas, as PIL shows it). Alpha is dropped. The EXIF chunk is found by walking the
 * RIFF chunks here. */
#include "image/codec.h"

#include <stdlib.h>
#include <string.h>

static uint32_t le32(const uint8_t *p) { return (uint32_t)p[3] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[1] << 8 | p[0]; }

/* RIFF: "RIFF", size, "WEBP", then chunks of fourcc, little-endian size, data padded to an even length. */
static int webp_orientation(const uint8_t *b, size_t n) {
    size_t at = 12;
    while (at <= n && n - at >= 8) {
        uint32_t len = le32(b + at + 4);
        if (len > n - at - 8) return 1;
        if (memcmp(b + at, "EXIF", 4) == 0) return pith_image_exif_orientation(b + at + 8, len);
        at += 8 + (size_t)len + (len & 1);
    }
    return 1;
}

#ifdef PITH_HAVE_WEBP

#include <webp/decode.h>
#ifdef PITH_HAVE_WEBPDEMUX
#include <webp/demux.h>
#endif

static const char *status_text(VP8StatusCode s) {
    switch (s) {
    case VP8_STATUS_OUT_OF_MEMORY: return "out of memory";
    case VP8_STATUS_INVALID_PARAM: return "invalid parameter";
    case VP8_STATUS_BITSTREAM_ERROR: return "corrupt bitstream";
    case VP8_STATUS_UNSUPPORTED_FEATURE: return "unsupported feature";
    case VP8_STATUS_SUSPENDED: return "decoding suspended";
    case VP8_STATUS_USER_ABORT: return "decoding aborted";
    case VP8_STATUS_NOT_ENOUGH_DATA: return "the file is truncated";
    default: return "unknown error";
    }
}

static int first_frame(const uint8_t *bytes, size_t n, int w, int h, uint8_t *rgb, pith_err *err) {
#ifdef PITH_HAVE_WEBPDEMUX
    WebPAnimDecoderOptions opt;
    if (!WebPAnimDecoderOptionsInit(&opt)) return pith_errf(err, "libwebpdemux version mismatch");
    opt.color_mode = MODE_RGBA;
    opt.use_threads = 0;
    WebPData data = {bytes, n};
    WebPAnimDecoder *dec = WebPAnimDecoderNew(&data, &opt);
    if (!dec) return pith_errf(err, "corrupt animation");
    WebPAnimInfo info;
    uint8_t *canvas = NULL;
    int ts = 0;
    if (!WebPAnimDecoderGetInfo(dec, &info) || (int)info.canvas_width != w || (int)info.canvas_height != h ||
        !WebPAnimDecoderGetNext(dec, &canvas, &ts)) {
        WebPAnimDecoderDelete(dec);
        return pith_errf(err, "corrupt or truncated animation");
    }
    size_t px = (size_t)w * h;
    for (size_t i = 0; i < px; i++) memcpy(rgb + i * 3, canvas + i * 4, 3);
    WebPAnimDecoderDelete(dec);
    return 0;
#else
    (void)bytes, (void)n, (void)w, (void)h, (void)rgb;
    return pith_errf(err, "animated WebP needs libwebpdemux, which was not found at build time (libwebp-dev)");
#endif
}

/* WebPDecodeRGBInto with the status kept: it only says whether it failed */
static VP8StatusCode decode_still(const uint8_t *bytes, size_t n, uint8_t *rgb, size_t size, int w) {
    WebPDecoderConfig cfg;
    if (!WebPInitDecoderConfig(&cfg)) return VP8_STATUS_INVALID_PARAM;
    cfg.output.colorspace = MODE_RGB;
    cfg.output.is_external_memory = 1;
    cfg.output.u.RGBA.rgba = rgb;
    cfg.output.u.RGBA.stride = w * 3;
    cfg.output.u.RGBA.size = size;
    VP8StatusCode s = WebPDecode(bytes, n, &cfg);
    WebPFreeDecBuffer(&cfg.output);
    return s;
}

int pith_image_decode_webp(const uint8_t *bytes, size_t n, uint64_t max_pixels, pith_image *out, int *orientation,
                           pith_err *err) {
    WebPBitstreamFeatures f;
    VP8StatusCode s = WebPGetFeatures(bytes, n, &f);
    if (s != VP8_STATUS_OK) return pith_errf(err, "%s", status_text(s));
    /* For an animation these are the canvas's, which the animation decoder allocates at once */
    if (pith_image_check_size((uint64_t)(f.width > 0 ? f.width : 0), (uint64_t)(f.height > 0 ? f.height : 0),
                              max_pixels, err) != 0)
        return -1;
    size_t size = (size_t)f.width * (size_t)f.height * 3;
    uint8_t *rgb = malloc(size);
    if (!rgb) return pith_errf(err, "out of memory for %dx%d pixels", f.width, f.height);
    if (f.has_animation) {
        if (first_frame(bytes, n, f.width, f.height, rgb, err) != 0) {
            free(rgb);
            return -1;
        }
    } else if ((s = decode_still(bytes, n, rgb, size, f.width)) != VP8_STATUS_OK) {
        free(rgb);
        return pith_errf(err, "%s", status_text(s));
    }
    *orientation = webp_orientation(bytes, n);
    out->width = f.width;
    out->height = f.height;
    out->data = rgb;
    return 0;
}

#else

int pith_image_decode_webp(const uint8_t *bytes, size_t n, uint64_t max_pixels, pith_image *out, int *orientation,
                           pith_err *err) {
    (void)bytes, (void)n, (void)max_pixels, (void)out, (void)orientation, (void)webp_orientation;
    return pith_errf(err, "WebP support not built: install libwebp-dev and rebuild");
}

#endif
