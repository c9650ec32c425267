/* The EXIF orientation tag (0x0112) from IFD0 of an EXIF blob's TIFF structure.
 *
 * The blob is untrusted: every offset is checked against n before it is read, and anything malformed
 * means "no orientation" (1), as PIL's exif_transpose leaves an image alone when it cannot read the tag. */
#include <string.h>

#include "image/image.h"

static unsigned rd16(const uint8_t *p, int big) { return big ? (unsigned)p[0] << 8 | p[1] : (unsigned)p[1] << 8 | p[0]; }

static uint32_t rd32(const uint8_t *p, int big) {
    return big ? (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]
               : (uint32_t)p[3] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[1] << 8 | p[0];
}

int pith_image_exif_orientation(const uint8_t *exif, size_t n) {
    if (!exif) return 1;
    /* JPEG's APP1 and some WebP writers keep the "Exif\0\0" prefix; PNG's eXIf chunk has none. Only one
     * is stripped, as PIL does. */
    if (n >= 6 && memcmp(exif, "Exif\0\0", 6) == 0) {
        exif += 6;
        n -= 6;
    }
    if (n < 8) return 1;
    int big;
    if (memcmp(exif, "II*\0", 4) == 0) big = 0;
    else if (memcmp(exif, "MM\0*", 4) == 0) big = 1;
    else return 1;
    uint32_t ifd = rd32(exif + 4, big);
    if (ifd > n || n - ifd < 2) return 1;
    unsigned count = rd16(exif + ifd, big);
    size_t entries = ifd + 2;
    for (unsigned i = 0; i < count; i++) {
        size_t at = entries + (size_t)i * 12;
        if (at > n || n - at < 12) return 1;
        const uint8_t *e = exif + at;
        if (rd16(e, big) != 0x0112) continue;
        unsigned type = rd16(e + 2, big);
        /* SHORT as the standard says; LONG from writers that got it wrong. One value fits inline. */
        if ((type != 3 && type != 4) || rd32(e + 4, big) != 1) return 1;
        uint32_t v = type == 3 ? rd16(e + 8, big) : rd32(e + 8, big);
        return v >= 1 && v <= 8 ? (int)v : 1;
    }
    return 1;
}
