/* PNG through libpng's classic reader (the simplified png_image API composites alpha onto a background,
 * which PIL's convert("RGB") does not do).
 *
 * libpng reports errors by longjmp to png_jmpbuf; what must be freed after one lives in struct pdec.
 * The transforms ask for 8-bit RGB or RGBA whatever the input: palette expanded, gray replicated,
 * 1/2/4-bit gray scaled to 8 bits, 16 bits cut to their high byte (PIL reads 16-bit RGB and RGBA that
 * way; its 16-bit gray becomes mode I, which convert("RGB") clips to white, so there the high byte is a
 * deliberate difference). Alpha, and tRNS transparency, are then dropped. Gamma and colour chunks are
 * ignored, as in PIL. The eXIf chunk is found by walking the chunk list here, wherever it is. */
#include "image/codec.h"

#include <string.h>

static uint32_t be32(const uint8_t *p) { return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]; }

/* The orientation from the first eXIf chunk; chunks are length, type, data, CRC. */
static int png_orientation(const uint8_t *b, size_t n) {
    size_t at = 8;
    while (at <= n && n - at >= 12) {
        uint32_t len = be32(b + at);
        if (len > n - at - 12) return 1;
        if (memcmp(b + at + 4, "eXIf", 4) == 0) return pith_image_exif_orientation(b + at + 8, len);
        if (memcmp(b + at + 4, "IEND", 4) == 0) return 1;
        at += 12 + (size_t)len;
    }
    return 1;
}

#ifdef PITH_HAVE_PNG

#include <stdio.h>
#include <stdlib.h>

#include <png.h>

struct pdec {
    const uint8_t *bytes;
    size_t n, pos;
    char msg[200];
    uint8_t *pixels;
    png_bytep *rows;
};

static void on_error(png_structp png, png_const_charp msg) {
    struct pdec *d = png_get_error_ptr(png);
    snprintf(d->msg, sizeof d->msg, "%s", msg);
    png_longjmp(png, 1);
}

static void on_warning(png_structp png, png_const_charp msg) { (void)png, (void)msg; }

static void on_read(png_structp png, png_bytep dst, png_size_t len) {
    struct pdec *d = png_get_io_ptr(png);
    if (len > d->n - d->pos) png_error(png, "the file is truncated");
    memcpy(dst, d->bytes + d->pos, len);
    d->pos += len;
}

int pith_image_decode_png(const uint8_t *bytes, size_t n, uint64_t max_pixels, pith_image *out, int *orientation,
                          pith_err *err) {
    struct pdec d;
    memset(&d, 0, sizeof d);
    d.bytes = bytes;
    d.n = n;
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &d, on_error, on_warning);
    if (!png) return pith_errf(err, "out of memory");
    png_infop info = png_create_info_struct(png);
    if (!info) {
        png_destroy_read_struct(&png, NULL, NULL);
        return pith_errf(err, "out of memory");
    }
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_read_struct(&png, &info, NULL);
        free(d.pixels);
        free(d.rows);
        return pith_errf(err, "%s", d.msg);
    }
    png_set_read_fn(png, &d, on_read);
    png_read_info(png, info);
    png_uint_32 w, h;
    int depth, type, interlace;
    png_get_IHDR(png, info, &w, &h, &depth, &type, &interlace, NULL, NULL);
    if (pith_image_check_size(w, h, max_pixels, err) != 0) {
        png_destroy_read_struct(&png, &info, NULL);
        return -1;
    }
    if (depth == 16) png_set_strip_16(png);
    if (type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
    if (type == PNG_COLOR_TYPE_GRAY || type == PNG_COLOR_TYPE_GRAY_ALPHA) {
        if (depth < 8) png_set_expand_gray_1_2_4_to_8(png);
        png_set_gray_to_rgb(png);
    }
    png_set_interlace_handling(png);
    png_read_update_info(png, info);
    unsigned ch = png_get_channels(png, info);
    if (png_get_bit_depth(png, info) != 8 || (ch != 3 && ch != 4) || png_get_rowbytes(png, info) != (size_t)w * ch) {
        snprintf(d.msg, sizeof d.msg, "unexpected decoder output (%u channels of %d bits)", ch,
                 png_get_bit_depth(png, info));
        png_longjmp(png, 1);
    }
    d.pixels = malloc((size_t)w * h * ch);
    d.rows = malloc(sizeof *d.rows * h);
    if (!d.pixels || !d.rows) {
        snprintf(d.msg, sizeof d.msg, "out of memory for %ux%u pixels", (unsigned)w, (unsigned)h);
        png_longjmp(png, 1);
    }
    for (png_uint_32 y = 0; y < h; y++) d.rows[y] = d.pixels + (size_t)y * w * ch;
    png_read_image(png, d.rows);
    png_destroy_read_struct(&png, &info, NULL);
    free(d.rows);
    if (ch == 4) { /* RGBA to RGB in place: each write lands at or before the bytes already read */
        size_t px = (size_t)w * h;
        for (size_t i = 0; i < px; i++) memmove(d.pixels + i * 3, d.pixels + i * 4, 3);
        uint8_t *shrunk = realloc(d.pixels, px * 3);
        if (shrunk) d.pixels = shrunk;
    }
    *orientation = png_orientation(bytes, n);
    out->width = (int)w;
    out->height = (int)h;
    out->data = d.pixels;
    return 0;
}

#else

int pith_image_decode_png(const uint8_t *bytes, size_t n, uint64_t max_pixels, pith_image *out, int *orientation,
                          pith_err *err) {
    (void)bytes, (void)n, (void)max_pixels, (void)out, (void)orientation, (void)png_orientation;
    return pith_errf(err, "PNG support not built: install libpng-dev and rebuild");
}

#endif
