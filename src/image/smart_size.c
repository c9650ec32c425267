/* Qwen2-VL's smart_resize (transformers, models/qwen2_vl/image_processing_qwen2_vl.py): the target size
 * for an image of h x w, both sides multiples of factor (the patch size times the merge size), about the
 * same aspect ratio, and the area within [min_pixels, max_pixels].
 *
 * The arithmetic follows the Python step by step in double precision so that the sizes agree exactly:
 * round() there rounds halves to even (rint here, in the default rounding mode), and h * w / max_pixels
 * is a correctly rounded division of two exact integers in both (hence the 2^53 bounds). */
#include <math.h>
#include <stdint.h>

#include "image/image.h"

int pith_image_smart_size(int h, int w, int factor, long min_pixels, long max_pixels, int *out_h, int *out_w,
                          pith_err *err) {
    if (h < 1 || w < 1) return pith_errf(err, "smart resize: bad image size %dx%d", w, h);
    const double exact = 9007199254740992.0; /* 2^53 */
    if (factor < 1 || min_pixels < 0 || max_pixels < 1 || min_pixels > max_pixels || (double)max_pixels > exact)
        return pith_errf(err, "smart resize: bad parameters (factor %d, pixels %ld..%ld)", factor, min_pixels,
                         max_pixels);
    double big = h > w ? h : w, small = h > w ? w : h;
    if (big / small > 200)
        return pith_errf(err, "smart resize: the aspect ratio of %dx%d is %.1f, more than 200", w, h, big / small);
    double hb = rint((double)h / factor) * factor, wb = rint((double)w / factor) * factor;
    double area = (double)h * (double)w;
    if (area > exact) return pith_errf(err, "smart resize: the image size %dx%d is too large", w, h);
    if ((int64_t)hb * (int64_t)wb > max_pixels) {
        double beta = sqrt(area / (double)max_pixels);
        hb = fmax(factor, floor((double)h / beta / factor) * factor);
        wb = fmax(factor, floor((double)w / beta / factor) * factor);
    } else if ((int64_t)hb * (int64_t)wb < min_pixels) {
        double beta = sqrt((double)min_pixels / area);
        hb = ceil((double)h * beta / factor) * factor;
        wb = ceil((double)w * beta / factor) * factor;
    }
    if (hb < 1 || wb < 1 || hb * wb > (double)PITH_IMAGE_HARD_MAX_PIXELS)
        return pith_errf(err, "smart resize: %dx%d gives no usable size (%.0fx%.0f)", w, h, wb, hb);
    *out_h = (int)hb;
    *out_w = (int)wb;
    return 0;
}
