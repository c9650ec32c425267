/* JPEG through libjpeg(-turbo)'s decompressor, with an error manager that turns its fatal errors (and
 * the premature-end warning, after which it would fill the rest with grey) into a longjmp back here.
 *
 * Everything that must be freed after a longjmp lives in struct jdec, not in locals, so nothing is
 * clobbered and nothing leaks: the pixel buffer is allocated only after the header has passed the size
 * check. CMYK/YCCK files are read as CMYK and converted the way PIL converts them; grayscale and YCbCr
 * become RGB inside libjpeg. */
#include "image/codec.h"

#ifdef PITH_HAVE_JPEG

#include <setjmp.h>
#include <stdio.h> /* jpeglib.h needs FILE */
#include <stdlib.h>
#include <string.h>

#include <jerror.h>
#include <jpeglib.h>

/* A progressive file may hold any number of scans, each a pass over the whole coefficient buffer; a
 * small file with thousands of them is a CPU bomb. libjpeg-turbo's documentation suggests a limit of
 * this order. */
#define MAX_SCANS 500

struct jdec {
    struct jpeg_error_mgr pub;
    struct jpeg_progress_mgr progress;
    jmp_buf jmp;
    char msg[JMSG_LENGTH_MAX];
    uint8_t *pixels;
    uint8_t *cmyk_row;
};

static void on_error(j_common_ptr c) {
    struct jdec *d = (struct jdec *)c->err;
    c->err->format_message(c, d->msg);
    longjmp(d->jmp, 1);
}

/* Warnings (level -1) are ignored, as PIL ignores them, except the one for a truncated file: PIL
 * refuses a truncated image, and libjpeg would otherwise make up the missing part. Trace messages
 * (level >= 0) are dropped; the library never prints. */
static void on_message(j_common_ptr c, int level) {
    struct jdec *d = (struct jdec *)c->err;
    if (level >= 0) return;
    if (c->err->msg_code == JWRN_JPEG_EOF) {
        snprintf(d->msg, sizeof d->msg, "the file is truncated");
        longjmp(d->jmp, 1);
    }
    c->err->num_warnings++;
}

static void on_progress(j_common_ptr c) {
    struct jdec *d = (struct jdec *)c->err;
    if (c->is_decompressor && ((j_decompress_ptr)c)->input_scan_number > MAX_SCANS) {
        snprintf(d->msg, sizeof d->msg, "more than %d scans", MAX_SCANS);
        longjmp(d->jmp, 1);
    }
}

/* PIL's CMYK to RGB: (255 - K) - C * (255 - K) / 255 per channel, the product rounded to nearest. */
static uint8_t mul255(unsigned a, unsigned b) {
    unsigned t = a * b + 128;
    return (uint8_t)((t + (t >> 8)) >> 8);
}

/* The samples are taken as stored inverted, the Adobe convention almost every CMYK JPEG follows; PIL
 * assumes it for every CMYK JPEG, APP14 marker or not, and so does this. */
static void cmyk_to_rgb(const uint8_t *in, uint8_t *out, unsigned w) {
    for (unsigned x = 0; x < w; x++, in += 4, out += 3) {
        unsigned c = 255u - in[0], m = 255u - in[1], y = 255u - in[2], nk = in[3];
        out[0] = (uint8_t)(nk - mul255(c, nk));
        out[1] = (uint8_t)(nk - mul255(m, nk));
        out[2] = (uint8_t)(nk - mul255(y, nk));
    }
}

static int exif_orientation(j_decompress_ptr c) {
    for (jpeg_saved_marker_ptr m = c->marker_list; m; m = m->next)
        if (m->marker == JPEG_APP0 + 1 && m->data_length >= 6 && memcmp(m->data, "Exif\0\0", 6) == 0)
            return pith_image_exif_orientation(m->data, m->data_length);
    return 1;
}

int pith_image_decode_jpeg(const uint8_t *bytes, size_t n, uint64_t max_pixels, pith_image *out, int *orientation,
                           pith_err *err) {
    struct jpeg_decompress_struct c;
    struct jdec d;
    memset(&d, 0, sizeof d);
    c.err = jpeg_std_error(&d.pub);
    d.pub.error_exit = on_error;
    d.pub.emit_message = on_message;
    if (setjmp(d.jmp)) {
        jpeg_destroy_decompress(&c);
        free(d.pixels);
        free(d.cmyk_row);
        return pith_errf(err, "%s", d.msg);
    }
    jpeg_create_decompress(&c);
    d.progress.progress_monitor = on_progress;
    c.progress = &d.progress;
    jpeg_mem_src(&c, bytes, (unsigned long)n);
    jpeg_save_markers(&c, JPEG_APP0 + 1, 0xFFFF);
    jpeg_read_header(&c, TRUE);
    if (pith_image_check_size(c.image_width, c.image_height, max_pixels, err) != 0) {
        jpeg_destroy_decompress(&c);
        return -1;
    }
    int cmyk = c.jpeg_color_space == JCS_CMYK || c.jpeg_color_space == JCS_YCCK;
    c.out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
    jpeg_start_decompress(&c);
    unsigned w = c.output_width, h = c.output_height;
    if ((int)c.output_components != (cmyk ? 4 : 3) || w != c.image_width || h != c.image_height) {
        snprintf(d.msg, sizeof d.msg, "unexpected decoder output (%u components)", (unsigned)c.output_components);
        longjmp(d.jmp, 1);
    }
    d.pixels = malloc((size_t)w * h * 3);
    if (cmyk) d.cmyk_row = malloc((size_t)w * 4);
    if (!d.pixels || (cmyk && !d.cmyk_row)) {
        snprintf(d.msg, sizeof d.msg, "out of memory for %ux%u pixels", w, h);
        longjmp(d.jmp, 1);
    }
    while (c.output_scanline < h) {
        uint8_t *row = d.pixels + (size_t)c.output_scanline * w * 3;
        JSAMPROW dst = cmyk ? d.cmyk_row : row;
        if (jpeg_read_scanlines(&c, &dst, 1) != 1) {
            snprintf(d.msg, sizeof d.msg, "the decoder stopped at row %u of %u", c.output_scanline, h);
            longjmp(d.jmp, 1);
        }
        if (cmyk) cmyk_to_rgb(d.cmyk_row, row, w);
    }
    /* Not jpeg_finish_decompress: every row is in, and nothing after the last scan could change them */
    *orientation = exif_orientation(&c);
    jpeg_destroy_decompress(&c);
    free(d.cmyk_row);
    out->width = (int)w;
    out->height = (int)h;
    out->data = d.pixels;
    return 0;
}

#else

int pith_image_decode_jpeg(const uint8_t *bytes, size_t n, uint64_t max_pixels, pith_image *out, int *orientation,
                           pith_err *err) {
    (void)bytes, (void)n, (void)max_pixels, (void)out, (void)orientation;
    return pith_errf(err, "JPEG support not built: install libjpeg-dev (libjpeg-turbo) and rebuild");
}

#endif
