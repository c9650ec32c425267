/* Images: the input is an encoded image (JPEG, PNG, WebP, or anything else), decoded under small
 * limits; a decoded image goes through every resize filter to a size taken from its own pixels, and the
 * tensor conversion. The EXIF parser also reads the raw input as a blob, and the smart resize takes its
 * arguments from the first bytes. */
#include "fuzz_util.h"
#include "image/image.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    (void)pith_image_exif_orientation(data, size);
    if (size >= 8) {
        int h = (data[0] | data[1] << 8) - 100, w = (data[2] | data[3] << 8) - 100, oh, ow;
        pith_err err;
        (void)pith_image_smart_size(h, w, data[4] % 64, (long)data[5] * 1000, (long)data[6] * 100000 + 1, &oh, &ow,
                                    &err);
    }
    /* a few megapixels keep every run quick; the limit logic is the same at any size */
    pith_image_limits lim = {1u << 20, 1u << 20};
    pith_image img;
    pith_err err;
    if (pith_image_decode(data, size, &lim, &img, &err) != 0) return 0;
    const uint8_t *p = img.data;
    int w = 1 + p[0] % 97, h = 1 + p[1] % 89;
    const int filters[] = {PITH_RESIZE_NEAREST, PITH_RESIZE_BILINEAR, PITH_RESIZE_BICUBIC, PITH_RESIZE_LANCZOS};
    for (int f = 0; f < 4; f++) {
        pith_image r;
        if (pith_image_resize(&img, w, h, filters[f], &r, &err) == 0) pith_image_free(&r);
    }
    if (img.width * img.height <= 1 << 16) {
        float *t = malloc(sizeof(float) * 3 * (size_t)img.width * img.height);
        const float mean[3] = {0.5f, 0.5f, 0.5f}, std[3] = {0.5f, 0.5f, 0.5f};
        if (t) pith_image_to_tensor(&img, mean, std, 1.0f / 255, t);
        free(t);
    }
    pith_image_free(&img);
    return 0;
}
