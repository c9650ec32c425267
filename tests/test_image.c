/* src/image/ on inputs built here, byte by byte: PNGs written with stored (uncompressed) deflate blocks,
 * a small JPEG and a lossless WebP made once with Pillow (the arrays below), EXIF segments, chunks and
 * TIFF blobs put together by hand. Checks: format sniffing and the errors for other formats; exact
 * pixels for each PNG colour type and bit depth; the pixel and byte limits (a 30000x30000 header refused
 * from the header); every truncation of a PNG, a JPEG and a WebP refused; the EXIF parser on good and
 * malformed blobs; each orientation's pixel mapping; resize identities; the tensor; smart_size values
 * from transformers' smart_resize. The comparison with Pillow itself is tests/test_image_pillow.py. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "image/image.h"

/* Pillow 9.4, 16x8, left half (200, 100, 50), right half (20, 40, 220), quality 95, 4:4:4, optimize */
static const uint8_t jpeg_16x8[293] = {
    0xff, 0xd8, 0xff, 0xe0, 0x00, 0x10, 0x4a, 0x46, 0x49, 0x46, 0x00, 0x01, 0x01, 0x00, 0x00, 0x01, 0x00, 0x01,
    0x00, 0x00, 0xff, 0xdb, 0x00, 0x43, 0x00, 0x02, 0x01, 0x01, 0x01, 0x01, 0x01, 0x02, 0x01, 0x01, 0x01, 0x02,
    0x02, 0x02, 0x02, 0x02, 0x04, 0x03, 0x02, 0x02, 0x02, 0x02, 0x05, 0x04, 0x04, 0x03, 0x04, 0x06, 0x05, 0x06,
    0x06, 0x06, 0x05, 0x06, 0x06, 0x06, 0x07, 0x09, 0x08, 0x06, 0x07, 0x09, 0x07, 0x06, 0x06, 0x08, 0x0b, 0x08,
    0x09, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x06, 0x08, 0x0b, 0x0c, 0x0b, 0x0a, 0x0c, 0x09, 0x0a, 0x0a, 0x0a, 0xff,
    0xdb, 0x00, 0x43, 0x01, 0x02, 0x02, 0x02, 0x02, 0x02, 0x02, 0x05, 0x03, 0x03, 0x05, 0x0a, 0x07, 0x06, 0x07,
    0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a,
    0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a,
    0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0x0a, 0xff, 0xc0, 0x00, 0x11,
    0x08, 0x00, 0x08, 0x00, 0x10, 0x03, 0x01, 0x11, 0x00, 0x02, 0x11, 0x01, 0x03, 0x11, 0x01, 0xff, 0xc4, 0x00,
    0x15, 0x00, 0x01, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x05, 0x09, 0xff, 0xc4, 0x00, 0x14, 0x10, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0xc4, 0x00, 0x16, 0x01, 0x01, 0x01, 0x01, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x08, 0x09, 0x0a, 0xff, 0xc4, 0x00, 0x14, 0x11, 0x01,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0xda,
    0x00, 0x0c, 0x03, 0x01, 0x00, 0x02, 0x11, 0x03, 0x11, 0x00, 0x3f, 0x00, 0x3c, 0x57, 0x36, 0x13, 0xad, 0xa1,
    0xc4, 0xc3, 0x7f, 0xff, 0xd9
};
/* Pillow 9.4, lossless, the 4x3 pixels of WEBP_PIXELS below */
static const uint8_t webp_lossless_4x3[100] = {
    0x52, 0x49, 0x46, 0x46, 0x5c, 0x00, 0x00, 0x00, 0x57, 0x45, 0x42, 0x50, 0x56, 0x50, 0x38, 0x4c, 0x50, 0x00,
    0x00, 0x00, 0x2f, 0x03, 0x80, 0x00, 0x00, 0x5f, 0xa0, 0x18, 0x00, 0x1a, 0xa8, 0xe3, 0x1b, 0x43, 0x1a, 0xf3,
    0xa7, 0x19, 0x46, 0x1a, 0x06, 0xd2, 0xb6, 0x29, 0xab, 0x8f, 0x49, 0x98, 0x7f, 0x59, 0x77, 0x70, 0xc5, 0x8c,
    0x24, 0x41, 0x73, 0x29, 0xec, 0x77, 0x59, 0xd6, 0x1f, 0x62, 0x55, 0x66, 0xfe, 0x03, 0x20, 0xa8, 0x41, 0x7c,
    0x18, 0xe5, 0x84, 0x35, 0x6b, 0x71, 0xfc, 0xbd, 0xdb, 0x69, 0x17, 0x08, 0x02, 0x48, 0x60, 0x22, 0x09, 0x66,
    0x8f, 0x2d, 0x76, 0x99, 0x34, 0xa2, 0xff, 0x81, 0x7d, 0x06
};
static const uint8_t WEBP_PIXELS[3][4][3] = {
    {{255, 0, 0}, {0, 255, 0}, {0, 0, 255}, {255, 255, 255}},
    {{0, 0, 0}, {10, 20, 30}, {40, 50, 60}, {70, 80, 90}},
    {{1, 2, 3}, {4, 5, 6}, {7, 8, 9}, {250, 251, 252}},
};

/* ---- building files ---- */

typedef struct {
    uint8_t *p;
    size_t n, cap;
} buf;

static void put(buf *b, const void *data, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        if (!b->p) abort();
    }
    if (n) memcpy(b->p + b->n, data, n);
    b->n += n;
}

static void put8(buf *b, unsigned v) {
    uint8_t c = (uint8_t)v;
    put(b, &c, 1);
}

static void put_be32(buf *b, uint32_t v) {
    uint8_t c[4] = {(uint8_t)(v >> 24), (uint8_t)(v >> 16), (uint8_t)(v >> 8), (uint8_t)v};
    put(b, c, 4);
}

static void put_le32(buf *b, uint32_t v) {
    uint8_t c[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    put(b, c, 4);
}

static uint32_t crc32_of(const uint8_t *p, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    }
    return c ^ 0xFFFFFFFFu;
}

static void png_chunk(buf *b, const char *type, const uint8_t *data, size_t n) {
    put_be32(b, (uint32_t)n);
    size_t at = b->n;
    put(b, type, 4);
    put(b, data, n);
    put_be32(b, crc32_of(b->p + at, n + 4));
}

/* zlib stream of stored blocks: no compressor needed */
static void zlib_stored(buf *z, const uint8_t *raw, size_t n) {
    put8(z, 0x78);
    put8(z, 0x01);
    size_t at = 0;
    do {
        size_t len = n - at > 65535 ? 65535 : n - at;
        put8(z, at + len == n ? 1 : 0);
        put8(z, len & 0xFF);
        put8(z, len >> 8);
        put8(z, ~len & 0xFF);
        put8(z, (~len >> 8) & 0xFF);
        put(z, raw + at, len);
        at += len;
    } while (at < n);
    uint32_t a = 1, s = 0;
    for (size_t i = 0; i < n; i++) {
        a = (a + raw[i]) % 65521;
        s = (s + a) % 65521;
    }
    put_be32(z, s << 16 | a);
}

/* A PNG of w x h from rows of row_bytes each (filter bytes added here); extra chunks (PLTE, tRNS,
 * eXIf) go before IDAT. */
static buf make_png(uint32_t w, uint32_t h, int depth, int ctype, const uint8_t *rows, size_t row_bytes,
                    const buf *extra) {
    buf b = {0}, raw = {0}, z = {0};
    put(&b, "\x89PNG\r\n\x1a\n", 8);
    uint8_t ihdr[13];
    uint8_t *q = ihdr;
    for (int i = 3; i >= 0; i--) *q++ = (uint8_t)(w >> (8 * i));
    for (int i = 3; i >= 0; i--) *q++ = (uint8_t)(h >> (8 * i));
    *q++ = (uint8_t)depth;
    *q++ = (uint8_t)ctype;
    *q++ = 0, *q++ = 0, *q++ = 0;
    png_chunk(&b, "IHDR", ihdr, 13);
    if (extra) put(&b, extra->p, extra->n);
    for (uint32_t y = 0; rows && y < h; y++) {
        put8(&raw, 0);
        put(&raw, rows + y * row_bytes, row_bytes);
    }
    zlib_stored(&z, raw.p ? raw.p : (const uint8_t *)"", raw.n);
    png_chunk(&b, "IDAT", z.p, z.n);
    png_chunk(&b, "IEND", NULL, 0);
    free(raw.p);
    free(z.p);
    return b;
}

/* A TIFF blob whose IFD0 holds one entry: tag, type, count, value (inline) */
static buf tiff_one(int big, unsigned tag, unsigned type, uint32_t count, uint32_t value) {
    buf b = {0};
    uint8_t hdr[8];
    if (big) memcpy(hdr, "MM\0*\0\0\0\x08", 8);
    else memcpy(hdr, "II*\0\x08\0\0\0", 8);
    put(&b, hdr, 8);
    uint8_t e[2 + 12 + 4] = {0};
    uint32_t vals[3] = {tag, type, count};
    if (big) {
        e[1] = 1;
        e[2] = (uint8_t)(vals[0] >> 8), e[3] = (uint8_t)vals[0];
        e[4] = (uint8_t)(vals[1] >> 8), e[5] = (uint8_t)vals[1];
        for (int i = 0; i < 4; i++) e[6 + i] = (uint8_t)(count >> (24 - 8 * i));
        if (type == 3) e[10] = (uint8_t)(value >> 8), e[11] = (uint8_t)value;
        else
            for (int i = 0; i < 4; i++) e[10 + i] = (uint8_t)(value >> (24 - 8 * i));
    } else {
        e[0] = 1;
        e[2] = (uint8_t)vals[0], e[3] = (uint8_t)(vals[0] >> 8);
        e[4] = (uint8_t)vals[1], e[5] = (uint8_t)(vals[1] >> 8);
        for (int i = 0; i < 4; i++) e[6 + i] = (uint8_t)(count >> (8 * i));
        for (int i = 0; i < 4; i++) e[10 + i] = (uint8_t)(value >> (8 * i));
    }
    put(&b, e, sizeof e);
    return b;
}

static int decode(const buf *b, const pith_image_limits *lim, pith_image *img, pith_err *err) {
    return pith_image_decode(b->p, b->n, lim, img, err);
}

static int px_is(const pith_image *img, int x, int y, int r, int g, int b, int tol) {
    const uint8_t *p = img->data + ((size_t)y * img->width + x) * 3;
    return abs(p[0] - r) <= tol && abs(p[1] - g) <= tol && abs(p[2] - b) <= tol;
}

/* Whether a format's library was built in (its error says "not built" otherwise) */
static int built(const uint8_t *bytes, size_t n, const char *name) {
    pith_image img;
    pith_err err;
    if (pith_image_decode(bytes, n, NULL, &img, &err) == 0) {
        pith_image_free(&img);
        return 1;
    }
    if (strstr(err.msg, "not built")) {
        printf("note: %s support not built, its checks skipped: %s\n", name, err.msg);
        return 0;
    }
    return 1;
}

/* ---- tests ---- */

static void test_sniff(void) {
    CHECK(pith_image_sniff(jpeg_16x8, sizeof jpeg_16x8) == PITH_IMAGE_JPEG);
    CHECK(pith_image_sniff(webp_lossless_4x3, sizeof webp_lossless_4x3) == PITH_IMAGE_WEBP);
    CHECK(pith_image_sniff((const uint8_t *)"\x89PNG\r\n\x1a\n", 8) == PITH_IMAGE_PNG);
    CHECK(pith_image_sniff((const uint8_t *)"\x89PNG\r\n\x1a", 7) == PITH_IMAGE_UNKNOWN);
    CHECK(pith_image_sniff((const uint8_t *)"RIFF\0\0\0\0WAVE", 12) == PITH_IMAGE_UNKNOWN);
    CHECK(pith_image_sniff(NULL, 0) == PITH_IMAGE_UNKNOWN);
    struct {
        const char *bytes;
        size_t n;
        const char *needle;
    } other[] = {
        {"GIF89a\1\0\1\0", 10, "GIF images are not supported"},
        {"GIF87a\1\0\1\0", 10, "GIF images are not supported"},
        {"BM\x3a\0\0\0\0\0", 8, "BMP images are not supported"},
        {"II*\0\x08\0\0\0", 8, "TIFF images are not supported"},
        {"\0\0\0\x1c" "ftypavif\0\0\0\0", 16, "AVIF images are not supported"},
        {"\0\0\0\x18" "ftypheic\0\0\0\0", 16, "HEIF/HEIC images are not supported"},
        {"hello, world", 12, "not a JPEG, PNG or WebP file"},
        {"\xff\xd8", 2, "not a JPEG, PNG or WebP file"},
    };
    for (size_t i = 0; i < sizeof other / sizeof *other; i++) {
        pith_image img = {1, 1, (uint8_t *)&img};
        pith_err err = {{0}};
        CHECK(pith_image_decode((const uint8_t *)other[i].bytes, other[i].n, NULL, &img, &err) == -1);
        CHECKF(strstr(err.msg, other[i].needle) != NULL, "%s", err.msg);
        CHECK(img.data == NULL && img.width == 0 && img.height == 0);
    }
    pith_image img;
    pith_err err = {{0}};
    CHECK(pith_image_decode((const uint8_t *)"", 0, NULL, &img, &err) == -1);
    CHECKF(strstr(err.msg, "empty") != NULL, "%s", err.msg);
    CHECK(pith_image_decode(NULL, 0, NULL, &img, &err) == -1);
    pith_image_free(NULL);
    pith_image_free(&img);
}

static void test_png(void) {
    const uint8_t rgb[2][9] = {{255, 0, 0, 0, 255, 0, 0, 0, 255}, {1, 2, 3, 100, 150, 200, 254, 253, 252}};
    buf b = make_png(3, 2, 8, 2, &rgb[0][0], 9, NULL);
    if (!built(b.p, b.n, "PNG")) {
        free(b.p);
        return;
    }
    pith_image img;
    pith_err err = {{0}};
    CHECKF(decode(&b, NULL, &img, &err) == 0, "%s", err.msg);
    CHECK(img.width == 3 && img.height == 2 && memcmp(img.data, rgb, 18) == 0);
    pith_image_free(&img);

    /* every prefix short of IEND fails (IEND itself is not needed, as in PIL), and leaves *out empty */
    size_t iend = b.n - 12;
    for (size_t n = 1; n < iend; n++) {
        img.data = (uint8_t *)&img;
        int rc = pith_image_decode(b.p, n, NULL, &img, &err);
        CHECKF(rc == -1 && img.data == NULL, "prefix %zu of %zu", n, b.n);
        if (rc == 0) pith_image_free(&img);
    }
    CHECK(pith_image_decode(b.p, iend, NULL, &img, &err) == 0);
    pith_image_free(&img);

    /* limits: 6 pixels pass a limit of 6, not of 5; the byte limit */
    pith_image_limits lim = {6, 0};
    CHECK(decode(&b, &lim, &img, &err) == 0);
    pith_image_free(&img);
    lim.max_pixels = 5;
    CHECK(decode(&b, &lim, &img, &err) == -1);
    CHECKF(strstr(err.msg, "image: PNG: the image is 3x2, more than the limit of 5 pixels"), "%s", err.msg);
    lim = (pith_image_limits){0, b.n - 1};
    CHECK(decode(&b, &lim, &img, &err) == -1 && strstr(err.msg, "bytes, more than the limit"));
    free(b.p);

    /* a 30000x30000 header with no pixel data: refused from the header, whatever follows */
    b = make_png(30000, 30000, 8, 2, NULL, 0, NULL);
    CHECK(decode(&b, NULL, &img, &err) == -1);
    CHECKF(strstr(err.msg, "30000x30000, more than the limit of 67108864 pixels") != NULL, "%s", err.msg);
    free(b.p);
    b = make_png(0, 4, 8, 2, NULL, 0, NULL);
    CHECK(decode(&b, NULL, &img, &err) == -1 && img.data == NULL);
    free(b.p);

    /* RGBA: alpha dropped, not composited */
    const uint8_t rgba[8] = {10, 20, 30, 0, 40, 50, 60, 128};
    b = make_png(2, 1, 8, 6, rgba, 8, NULL);
    CHECK(decode(&b, NULL, &img, &err) == 0 && px_is(&img, 0, 0, 10, 20, 30, 0) && px_is(&img, 1, 0, 40, 50, 60, 0));
    pith_image_free(&img);
    free(b.p);

    /* gray, gray + alpha, 2-bit gray (scaled: 0, 85, 170, 255), 16-bit RGB (high byte) */
    const uint8_t gray[3] = {0, 128, 255};
    b = make_png(3, 1, 8, 0, gray, 3, NULL);
    CHECK(decode(&b, NULL, &img, &err) == 0 && px_is(&img, 1, 0, 128, 128, 128, 0) && px_is(&img, 2, 0, 255, 255, 255, 0));
    pith_image_free(&img);
    free(b.p);
    const uint8_t ga[4] = {77, 0, 200, 255};
    b = make_png(2, 1, 8, 4, ga, 4, NULL);
    CHECK(decode(&b, NULL, &img, &err) == 0 && px_is(&img, 0, 0, 77, 77, 77, 0) && px_is(&img, 1, 0, 200, 200, 200, 0));
    pith_image_free(&img);
    free(b.p);
    const uint8_t g2[1] = {0x1B}; /* 00 01 10 11 */
    b = make_png(4, 1, 2, 0, g2, 1, NULL);
    CHECK(decode(&b, NULL, &img, &err) == 0 && px_is(&img, 0, 0, 0, 0, 0, 0) && px_is(&img, 1, 0, 85, 85, 85, 0) &&
          px_is(&img, 2, 0, 170, 170, 170, 0) && px_is(&img, 3, 0, 255, 255, 255, 0));
    pith_image_free(&img);
    free(b.p);
    const uint8_t rgb16[6] = {0x12, 0xFF, 0xAB, 0x00, 0xFF, 0xFF};
    b = make_png(1, 1, 16, 2, rgb16, 6, NULL);
    CHECK(decode(&b, NULL, &img, &err) == 0 && px_is(&img, 0, 0, 0x12, 0xAB, 0xFF, 0));
    pith_image_free(&img);
    free(b.p);

    /* palette with tRNS: the palette colours, transparency ignored (PIL convert("RGB")) */
    buf extra = {0};
    const uint8_t plte[6] = {9, 8, 7, 200, 100, 0}, trns[2] = {0, 0};
    png_chunk(&extra, "PLTE", plte, 6);
    png_chunk(&extra, "tRNS", trns, 2);
    const uint8_t idx[2] = {1, 0};
    b = make_png(2, 1, 8, 3, idx, 2, &extra);
    CHECK(decode(&b, NULL, &img, &err) == 0 && px_is(&img, 0, 0, 200, 100, 0, 0) && px_is(&img, 1, 0, 9, 8, 7, 0));
    pith_image_free(&img);
    free(b.p);
    free(extra.p);

    /* eXIf orientation 6: 3x2 becomes 2x3, out(x, y) = in(y, h - 1 - x) */
    buf t = tiff_one(1, 0x0112, 3, 1, 6);
    extra = (buf){0};
    png_chunk(&extra, "eXIf", t.p, t.n);
    b = make_png(3, 2, 8, 2, &rgb[0][0], 9, &extra);
    CHECKF(decode(&b, NULL, &img, &err) == 0, "%s", err.msg);
    CHECK(img.width == 2 && img.height == 3);
    CHECK(px_is(&img, 0, 0, 1, 2, 3, 0) && px_is(&img, 1, 0, 255, 0, 0, 0) && px_is(&img, 1, 2, 0, 0, 255, 0));
    pith_image_free(&img);
    free(b.p);
    free(extra.p);
    free(t.p);

    /* a CRC error in IHDR, a bad zlib stream */
    b = make_png(3, 2, 8, 2, &rgb[0][0], 9, NULL);
    b.p[29] ^= 1;
    CHECK(decode(&b, NULL, &img, &err) == -1 && strncmp(err.msg, "image: PNG: ", 12) == 0);
    b.p[29] ^= 1;
    b.p[41] ^= 0x40; /* the zlib header */
    CHECK(decode(&b, NULL, &img, &err) == -1 && img.data == NULL);
    free(b.p);
}

/* An APP1 EXIF segment right after SOI */
static buf jpeg_with_exif(const buf *tiff) {
    buf b = {0};
    put(&b, jpeg_16x8, 2);
    put8(&b, 0xFF);
    put8(&b, 0xE1);
    size_t len = 2 + 6 + tiff->n;
    put8(&b, len >> 8);
    put8(&b, len & 0xFF);
    put(&b, "Exif\0\0", 6);
    put(&b, tiff->p, tiff->n);
    put(&b, jpeg_16x8 + 2, sizeof jpeg_16x8 - 2);
    return b;
}

static void test_jpeg(void) {
    if (!built(jpeg_16x8, sizeof jpeg_16x8, "JPEG")) return;
    pith_image img;
    pith_err err = {{0}};
    CHECKF(pith_image_decode(jpeg_16x8, sizeof jpeg_16x8, NULL, &img, &err) == 0, "%s", err.msg);
    CHECK(img.width == 16 && img.height == 8);
    CHECK(px_is(&img, 3, 4, 200, 100, 50, 3) && px_is(&img, 12, 4, 20, 40, 220, 3));
    pith_image_free(&img);
    for (size_t n = 1; n < sizeof jpeg_16x8; n++) {
        img.data = (uint8_t *)&img;
        int rc = pith_image_decode(jpeg_16x8, n, NULL, &img, &err);
        CHECKF(rc == -1 && img.data == NULL, "prefix %zu", n);
        if (rc == 0) pith_image_free(&img);
    }
    CHECK(pith_image_decode(jpeg_16x8, sizeof jpeg_16x8 - 1, NULL, &img, &err) == -1);
    CHECKF(strcmp(err.msg, "image: JPEG: the file is truncated") == 0, "%s", err.msg);
    pith_image_limits lim = {16 * 8 - 1, 0};
    CHECK(pith_image_decode(jpeg_16x8, sizeof jpeg_16x8, &lim, &img, &err) == -1 && strstr(err.msg, "16x8, more than"));

    /* orientations: 6 turns left/right halves into top/bottom, 8 the other way, 3 swaps the halves */
    struct {
        int o, w, h, ax, ay, bx, by;
    } cases[] = {{6, 8, 16, 4, 3, 4, 12}, {8, 8, 16, 4, 12, 4, 3}, {3, 16, 8, 12, 4, 3, 4}, {1, 16, 8, 3, 4, 12, 4}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        for (int big = 0; big < 2; big++) {
            buf t = tiff_one(big, 0x0112, 3, 1, (uint32_t)cases[i].o);
            buf b = jpeg_with_exif(&t);
            CHECKF(decode(&b, NULL, &img, &err) == 0, "%s", err.msg);
            CHECKF(img.width == cases[i].w && img.height == cases[i].h, "orientation %d: %dx%d", cases[i].o,
                   img.width, img.height);
            CHECKF(px_is(&img, cases[i].ax, cases[i].ay, 200, 100, 50, 3) &&
                       px_is(&img, cases[i].bx, cases[i].by, 20, 40, 220, 3),
                   "orientation %d", cases[i].o);
            pith_image_free(&img);
            free(b.p);
            free(t.p);
        }
    }
}

static void test_webp(void) {
    if (!built(webp_lossless_4x3, sizeof webp_lossless_4x3, "WebP")) return;
    pith_image img;
    pith_err err = {{0}};
    CHECKF(pith_image_decode(webp_lossless_4x3, sizeof webp_lossless_4x3, NULL, &img, &err) == 0, "%s", err.msg);
    CHECK(img.width == 4 && img.height == 3 && memcmp(img.data, WEBP_PIXELS, 36) == 0);
    pith_image_free(&img);
    for (size_t n = 1; n < sizeof webp_lossless_4x3; n++) {
        img.data = (uint8_t *)&img;
        int rc = pith_image_decode(webp_lossless_4x3, n, NULL, &img, &err);
        CHECKF(rc == -1 && img.data == NULL, "prefix %zu", n);
        if (rc == 0) pith_image_free(&img);
    }
    /* the extended format: VP8X (EXIF flag, canvas 4x3), the VP8L chunk, then EXIF (orientation 8, the
     * "Exif\0\0" prefix some writers keep) */
    buf t = tiff_one(0, 0x0112, 3, 1, 8), b = {0};
    put(&b, "RIFF\0\0\0\0WEBP", 12);
    put(&b, "VP8X", 4);
    put_le32(&b, 10);
    const uint8_t vp8x[10] = {0x08, 0, 0, 0, 3, 0, 0, 2, 0, 0};
    put(&b, vp8x, 10);
    put(&b, webp_lossless_4x3 + 12, sizeof webp_lossless_4x3 - 12);
    put(&b, "EXIF", 4);
    put_le32(&b, (uint32_t)(6 + t.n));
    put(&b, "Exif\0\0", 6);
    put(&b, t.p, t.n);
    if ((6 + t.n) & 1) put8(&b, 0);
    uint32_t riff = (uint32_t)b.n - 8;
    for (int i = 0; i < 4; i++) b.p[4 + i] = (uint8_t)(riff >> (8 * i));
    CHECKF(decode(&b, NULL, &img, &err) == 0, "%s", err.msg);
    /* rotate 90 counter-clockwise: out(x, y) = in(w - 1 - y, x) */
    CHECK(img.width == 3 && img.height == 4);
    int ok = img.width == 3 && img.height == 4;
    for (int y = 0; ok && y < 4; y++)
        for (int x = 0; x < 3; x++) {
            const uint8_t *s = WEBP_PIXELS[x][3 - y];
            ok &= px_is(&img, x, y, s[0], s[1], s[2], 0);
        }
    CHECK(ok);
    pith_image_free(&img);
    free(b.p);
    free(t.p);
}

static void test_exif(void) {
    for (int big = 0; big < 2; big++) {
        for (uint32_t v = 0; v <= 9; v++) {
            buf t = tiff_one(big, 0x0112, 3, 1, v);
            CHECK(pith_image_exif_orientation(t.p, t.n) == (v >= 1 && v <= 8 ? (int)v : 1));
            /* every truncation of the blob: no orientation, or the whole answer; never a read outside */
            for (size_t n = 0; n < t.n; n++) {
                uint8_t *cut = malloc(n ? n : 1);
                memcpy(cut, t.p, n);
                int o = pith_image_exif_orientation(cut, n);
                CHECK(o == 1 || o == (int)v);
                free(cut);
            }
            free(t.p);
        }
        buf t = tiff_one(big, 0x0112, 4, 1, 6); /* LONG */
        CHECK(pith_image_exif_orientation(t.p, t.n) == 6);
        free(t.p);
        t = tiff_one(big, 0x0112, 3, 2, 6); /* two values */
        CHECK(pith_image_exif_orientation(t.p, t.n) == 1);
        free(t.p);
        t = tiff_one(big, 0x0112, 2, 1, 6); /* ASCII */
        CHECK(pith_image_exif_orientation(t.p, t.n) == 1);
        free(t.p);
        t = tiff_one(big, 0x0110, 3, 1, 6); /* another tag */
        CHECK(pith_image_exif_orientation(t.p, t.n) == 1);
        free(t.p);
        t = tiff_one(big, 0x0112, 4, 1, 0x10006); /* LONG out of range */
        CHECK(pith_image_exif_orientation(t.p, t.n) == 1);
        free(t.p);
    }
    /* one "Exif\0\0" prefix is skipped, not two; a bad byte order; IFD offsets and counts past the end */
    buf t = tiff_one(0, 0x0112, 3, 1, 3), p = {0};
    put(&p, "Exif\0\0", 6);
    put(&p, t.p, t.n);
    CHECK(pith_image_exif_orientation(p.p, p.n) == 3);
    buf pp = {0};
    put(&pp, "Exif\0\0", 6);
    put(&pp, p.p, p.n);
    CHECK(pith_image_exif_orientation(pp.p, pp.n) == 1);
    t.p[0] = 'X';
    CHECK(pith_image_exif_orientation(t.p, t.n) == 1);
    t.p[0] = 'I';
    t.p[4] = 0xF0; /* IFD0 far past the end */
    CHECK(pith_image_exif_orientation(t.p, t.n) == 1);
    t.p[4] = 0xFF, t.p[5] = 0xFF, t.p[6] = 0xFF, t.p[7] = 0xFF;
    CHECK(pith_image_exif_orientation(t.p, t.n) == 1);
    t.p[4] = 8, t.p[5] = 0, t.p[6] = 0, t.p[7] = 0;
    t.p[8] = 0xFF, t.p[9] = 0xFF; /* 65535 entries in a 26-byte blob: the first is still read */
    CHECK(pith_image_exif_orientation(t.p, t.n) == 3);
    t.p[10] = 0x10; /* and when it is another tag, the walk stops at the end of the blob */
    CHECK(pith_image_exif_orientation(t.p, t.n) == 1);
    CHECK(pith_image_exif_orientation(NULL, 0) == 1);
    free(t.p);
    free(p.p);
    free(pp.p);
}

static pith_image numbered(int w, int h) {
    pith_image img = {w, h, malloc((size_t)w * h * 3)};
    for (int i = 0; i < w * h * 3; i++) img.data[i] = (uint8_t)(i * 7 + 1);
    return img;
}

static const uint8_t *at(const pith_image *img, int x, int y) { return img->data + ((size_t)y * img->width + x) * 3; }

static void test_orient(void) {
    const int w = 5, h = 3;
    pith_image src = numbered(w, h);
    pith_err err;
    for (int o = 1; o <= 8; o++) {
        pith_image img = numbered(w, h);
        CHECK(pith_image_orient(&img, o, &err) == 0);
        int swap = o >= 5;
        CHECK(img.width == (swap ? h : w) && img.height == (swap ? w : h));
        int ok = 1;
        for (int y = 0; y < img.height; y++)
            for (int x = 0; x < img.width; x++) {
                int sx, sy;
                switch (o) {
                case 1: sx = x, sy = y; break;
                case 2: sx = w - 1 - x, sy = y; break;                 /* mirror */
                case 3: sx = w - 1 - x, sy = h - 1 - y; break;         /* 180 */
                case 4: sx = x, sy = h - 1 - y; break;                 /* flip */
                case 5: sx = y, sy = x; break;                         /* transpose */
                case 6: sx = y, sy = h - 1 - x; break;                 /* 90 clockwise */
                case 7: sx = w - 1 - y, sy = h - 1 - x; break;         /* transverse */
                default: sx = w - 1 - y, sy = x; break;                /* 90 counter-clockwise */
                }
                ok &= memcmp(at(&img, x, y), at(&src, sx, sy), 3) == 0;
            }
        CHECKF(ok, "orientation %d", o);
        /* and its inverse brings the original back: 6 and 8 undo each other, the rest undo themselves */
        int inv = o == 6 ? 8 : o == 8 ? 6 : o;
        CHECK(pith_image_orient(&img, inv, &err) == 0);
        CHECK(img.width == w && img.height == h && memcmp(img.data, src.data, (size_t)w * h * 3) == 0);
        pith_image_free(&img);
    }
    pith_image img = numbered(w, h);
    CHECK(pith_image_orient(&img, 0, &err) == 0 && pith_image_orient(&img, 9, &err) == 0);
    CHECK(memcmp(img.data, src.data, (size_t)w * h * 3) == 0);
    pith_image_free(&img);
    pith_image_free(&src);
}

static void test_resize(void) {
    const int filters[] = {PITH_RESIZE_NEAREST, PITH_RESIZE_BILINEAR, PITH_RESIZE_BICUBIC, PITH_RESIZE_LANCZOS};
    pith_image src = numbered(7, 5), out;
    pith_err err = {{0}};
    for (int f = 0; f < 4; f++) {
        CHECK(pith_image_resize(&src, 7, 5, filters[f], &out, &err) == 0);
        CHECK(memcmp(out.data, src.data, 7 * 5 * 3) == 0); /* the same size is a copy */
        pith_image_free(&out);
    }
    /* a constant image stays constant through every filter and size: weights sum to one, even where
     * bicubic and lanczos have negative lobes */
    pith_image flat = {9, 6, malloc(9 * 6 * 3)};
    for (int i = 0; i < 9 * 6; i++) memcpy(flat.data + i * 3, "\x21\x80\xfe", 3);
    const int sizes[][2] = {{1, 1}, {2, 3}, {9, 1}, {18, 12}, {31, 7}, {4, 40}, {100, 100}};
    for (int f = 0; f < 4; f++)
        for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
            CHECK(pith_image_resize(&flat, sizes[s][0], sizes[s][1], filters[f], &out, &err) == 0);
            int ok = out.width == sizes[s][0] && out.height == sizes[s][1];
            for (int i = 0; ok && i < out.width * out.height; i++) ok = memcmp(out.data + i * 3, "\x21\x80\xfe", 3) == 0;
            CHECKF(ok, "filter %d size %dx%d", filters[f], sizes[s][0], sizes[s][1]);
            pith_image_free(&out);
        }
    pith_image_free(&flat);
    /* nearest at 2x repeats each pixel twice in each direction; halving picks the odd ones */
    CHECK(pith_image_resize(&src, 14, 10, PITH_RESIZE_NEAREST, &out, &err) == 0);
    int ok = 1;
    for (int y = 0; y < 10; y++)
        for (int x = 0; x < 14; x++) ok &= memcmp(at(&out, x, y), at(&src, x / 2, y / 2), 3) == 0;
    CHECK(ok);
    pith_image_free(&out);
    pith_image big = numbered(8, 6);
    CHECK(pith_image_resize(&big, 4, 3, PITH_RESIZE_NEAREST, &out, &err) == 0);
    ok = 1;
    for (int y = 0; y < 3; y++)
        for (int x = 0; x < 4; x++) ok &= memcmp(at(&out, x, y), at(&big, 2 * x + 1, 2 * y + 1), 3) == 0;
    CHECK(ok);
    pith_image_free(&out);
    /* bilinear halving of a 2-pixel row is their rounded mean */
    pith_image two = {2, 1, malloc(6)};
    memcpy(two.data, "\x00\x0a\xff\x01\x0b\x00", 6);
    CHECK(pith_image_resize(&two, 1, 1, PITH_RESIZE_BILINEAR, &out, &err) == 0);
    CHECK(out.data[0] == 1 && out.data[1] == 11 && out.data[2] == 128);
    pith_image_free(&out);
    pith_image_free(&two);
    pith_image_free(&big);
    /* refusals leave *out empty */
    out.data = (uint8_t *)&out;
    CHECK(pith_image_resize(&src, 0, 5, PITH_RESIZE_BILINEAR, &out, &err) == -1 && out.data == NULL);
    CHECK(pith_image_resize(&src, 5, -1, PITH_RESIZE_BILINEAR, &out, &err) == -1);
    CHECK(pith_image_resize(&src, 1 << 16, 1 << 15, PITH_RESIZE_BILINEAR, &out, &err) == -1);
    CHECK(pith_image_resize(&src, 5, 5, 4, &out, &err) == -1 && strstr(err.msg, "unknown filter"));
    pith_image empty = {0, 0, NULL};
    CHECK(pith_image_resize(&empty, 5, 5, PITH_RESIZE_BICUBIC, &out, &err) == -1);
    pith_image_free(&src);
}

static void test_tensor(void) {
    pith_image img = {2, 1, malloc(6)};
    memcpy(img.data, "\x00\x80\xff\x0a\x14\x1e", 6);
    const float mean[3] = {0.5f, 0.25f, 0.0f}, std[3] = {0.5f, 2.0f, 1.0f};
    float t[6];
    pith_image_to_tensor(&img, mean, std, 1.0f / 255, t);
    /* CHW: channel 0 holds both pixels' red, and so on */
    const float want[6] = {(0 / 255.f - 0.5f) / 0.5f,   (10 / 255.f - 0.5f) / 0.5f, (128 / 255.f - 0.25f) / 2,
                           (20 / 255.f - 0.25f) / 2,    255 / 255.f,                30 / 255.f};
    for (int i = 0; i < 6; i++) CHECKF(fabsf(t[i] - want[i]) < 1e-6f, "%d: %g vs %g", i, t[i], want[i]);
    pith_image_free(&img);
}

static void test_smart_size(void) {
    /* from transformers' smart_resize; (42, 70) shows Python's round-half-to-even: 1.5 -> 2, 2.5 -> 2 */
    const long cases[][7] = {
        {480, 640, 28, 3136, 1003520, 476, 644},       {1080, 1920, 28, 3136, 1003520, 728, 1316},
        {42, 70, 28, 3136, 1003520, 56, 56},           {10, 10, 28, 3136, 1003520, 56, 56},
        {4000, 3000, 32, 65536, 16777216, 4000, 3008}, {1, 200, 28, 3136, 1003520, 28, 812},
        {14, 14, 28, 3136, 1003520, 56, 56},
    };
    pith_err err = {{0}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int h = 0, w = 0;
        CHECKF(pith_image_smart_size((int)cases[i][0], (int)cases[i][1], (int)cases[i][2], cases[i][3], cases[i][4],
                                     &h, &w, &err) == 0,
               "%s", err.msg);
        CHECKF(h == cases[i][5] && w == cases[i][6], "case %zu: %dx%d", i, h, w);
    }
    int h, w;
    CHECK(pith_image_smart_size(1, 201, 28, 3136, 1003520, &h, &w, &err) == -1 && strstr(err.msg, "more than 200"));
    CHECK(pith_image_smart_size(0, 10, 28, 3136, 1003520, &h, &w, &err) == -1);
    CHECK(pith_image_smart_size(10, 10, 0, 3136, 1003520, &h, &w, &err) == -1);
    CHECK(pith_image_smart_size(10, 10, 28, 5000, 4000, &h, &w, &err) == -1);
    CHECK(pith_image_smart_size(10, 10, 28, 0, 1003520, &h, &w, &err) == -1); /* rounds to 0x0 */
}

int main(void) {
    test_sniff();
    test_png();
    test_jpeg();
    test_webp();
    test_exif();
    test_orient();
    test_resize();
    test_tensor();
    test_smart_size();
    fflush(stderr);
    return check_summary("test_image");
}
