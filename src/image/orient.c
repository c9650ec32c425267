/* EXIF orientation applied to the pixels, with PIL's transposes (ImageOps.exif_transpose):
 * 2 mirror, 3 rotate 180, 4 flip, 5 transpose, 6 rotate 90 clockwise, 7 transverse, 8 rotate 90
 * counter-clockwise. */
#include <stdlib.h>
#include <string.h>

#include "image/image.h"

int pith_image_orient(pith_image *img, int orientation, pith_err *err) {
    if (orientation < 2 || orientation > 8) return 0;
    int w = img->width, h = img->height;
    int swap = orientation >= 5;
    int ow = swap ? h : w, oh = swap ? w : h;
    uint8_t *o = malloc((size_t)w * (size_t)h * 3);
    if (!o) return pith_errf(err, "out of memory orienting a %dx%d image", w, h);
    for (int y = 0; y < oh; y++) {
        for (int x = 0; x < ow; x++) {
            int sx, sy; /* the source pixel of output (x, y) */
            switch (orientation) {
            case 2: sx = w - 1 - x; sy = y; break;
            case 3: sx = w - 1 - x; sy = h - 1 - y; break;
            case 4: sx = x; sy = h - 1 - y; break;
            case 5: sx = y; sy = x; break;
            case 6: sx = y; sy = h - 1 - x; break;
            case 7: sx = w - 1 - y; sy = h - 1 - x; break;
            default: sx = w - 1 - y; sy = x; break;
            }
            memcpy(o + ((size_t)y * ow + x) * 3, img->data + ((size_t)sy * w + sx) * 3, 3);
        }
    }
    free(img->data);
    img->data = o;
    img->width = ow;
    img->height = oh;
    return 0;
}
