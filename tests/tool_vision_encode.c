/* Test helper for tests/test_ref_siglip.py: a projector file's vision encoder over raw pixels, for the
 * float64 reference to check.
 *
 *   tool_vision_encode MMPROJ PIXELS N_IMAGES OUT [THREADS]
 *   tool_vision_encode MMPROJ --image FILE OUT [THREADS]
 *
 * The second form decodes an image file (JPEG, PNG, WebP) and prepares it as the model's processor does
 * (pith_vision_preprocess); OUT gets the prepared pixels, then the encoder's rows. PIXELS holds N_IMAGES images of [3][image_size][image_size] float32, already normalized; all of them go
 * through one encoder step. OUT gets the N_IMAGES * tokens_per_image rows of the text model's width, as
 * float32. The first line of stdout says the encoder's shape. Exit 0, or 1 with a message. */
#include <stdio.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "model/vision.h"

static int fail(const char *what, const pith_err *err) {
    fprintf(stderr, "tool_vision_encode: %s%s%s\n", what, err ? ": " : "", err ? err->msg : "");
    return 1;
}

static int read_image(FILE *f, const pith_vision *v, float *px, pith_err *err) {
    static uint8_t bytes[1 << 24];
    size_t n = fread(bytes, 1, sizeof bytes, f);
    pith_image_limits lim = {.max_pixels = 1u << 26, .max_bytes = sizeof bytes};
    pith_image img = {0};
    if (pith_image_decode(bytes, n, &lim, &img, err)) return -1;
    int rc = pith_vision_preprocess(v, &img, px, err);
    pith_image_free(&img);
    return rc;
}

int main(int argc, char **argv) {
    if (argc < 5) return fail("usage: tool_vision_encode MMPROJ PIXELS N_IMAGES OUT [THREADS]", NULL);
    bool from_file = strcmp(argv[2], "--image") == 0;
    int n_images = from_file ? 1 : atoi(argv[3]), threads = argc > 5 ? atoi(argv[5]) : 1;
    pith_err err = {{0}};
    pith_backend *be = NULL;
    pith_vision *v = NULL;
    if (pith_backend_cpu_create(threads, &be, &err)) return fail("backend", &err);
    if (pith_vision_open(argv[1], be, &v, &err)) {
        pith_backend_free(be);
        return fail("open", &err);
    }
    const pith_vision_hparams *hp = pith_vision_hparams_of(v);
    printf("image %d patch %d dim %d ffn %d layers %d heads %d pool %d tokens %d out %d\n", hp->image_size,
           hp->patch_size, hp->dim, hp->ffn, hp->n_layers, hp->n_heads, hp->pool, hp->tokens_per_image, hp->out_dim);
    size_t in_n = (size_t)n_images * 3 * hp->image_size * hp->image_size;
    size_t out_n = (size_t)n_images * hp->tokens_per_image * hp->out_dim;
    float *px = malloc(in_n * sizeof *px), *out = malloc(out_n * sizeof *out);
    FILE *f = fopen(from_file ? argv[3] : argv[2], "rb");
    int rc = 1;
    if (!px || !out || !f) {
        fail("cannot read the input (or out of memory)", NULL);
    } else if (from_file ? read_image(f, v, px, &err) : fread(px, sizeof *px, in_n, f) != in_n) {
        fail("cannot read the pixels", from_file ? &err : NULL);
    } else if (pith_vision_encode(v, px, n_images, out, &err)) {
        fail("encode", &err);
    } else {
        FILE *o = fopen(argv[4], "wb");
        rc = !o || (from_file && fwrite(px, sizeof *px, in_n, o) != in_n) || fwrite(out, sizeof *out, out_n, o) != out_n;
        if (o && fclose(o)) rc = 1;
        if (rc) fail("cannot write the output", NULL);
    }
    if (f) fclose(f);
    free(px);
    free(out);
    pith_vision_free(v);
    pith_backend_free(be);
    return rc;
}
