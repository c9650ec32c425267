/* Pixels to the float tensor an image encoder takes: transformers' rescale (x * factor, cast to
 * float32) and normalize ((x - mean) / std in float32), laid out channels first. */
#include "image/image.h"

void pith_image_to_tensor(const pith_image *img, const float mean[3], const float std[3], float rescale,
                          float *out_chw) {
    size_t plane = (size_t)img->width * img->height;
    for (int c = 0; c < 3; c++) {
        float *o = out_chw + c * plane;
        const uint8_t *p = img->data + c;
        for (size_t i = 0; i < plane; i++, p += 3) {
            /* the product in double as numpy computes rescale (uint8 -> float64 * scale), then float32 */
            float v = (float)((double)*p * (double)rescale);
            o[i] = (v - mean[c]) / std[c];
        }
    }
}
