/* Test helper for tests/test_ref_siglip.py: a projector file's vision encoder over raw pixels, for the
 * float64 reference to check.
 *
 *   tool_vision_encode MMPROJ PIXELS N_IMAGES OUT [THREADS]
 *   tool_vision_encode MMPROJ --image FILE OUT [THREADS]
 *   tool_vision_encode MMPROJ --sized PIXELS HxW[,HxW...] OUT [THREADS]
 *
 * The second form decodes an image file (JPEG, PNG, WebP) and prepares it as the model's processor does
 * (pith_vision_preprocess); OUT gets the prepared pixels, then the encoder's rows. PIXELS holds N_IMAGES images of [3][image_size][image_size] float32, already normalized; all of them go
 * through one encoder step. OUT gets the N_IMAGES * tokens_per_image rows of the text model's width, as
 * float32. The third form is for encoders of any size (Qwen3-VL): PIXELS holds the images one after
 * another, each [3][H][W]; each is encoded alone (pith_vision_encode_image) and OUT gets their rows in
 * turn (rows of pith_vision_row_floats: with DeepStack, its parts after the merger's). The first line of
 * stdout says the encoder's shape. Exit 0, or 1 with a message. */
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

/* The --sized form. */
static int sized(pith_vision *v, const char *pixels, const char *sizes, const char *out_path) {
    const pith_vision_hparams *hp = pith_vision_hparams_of(v);
    FILE *f = fopen(pixels, "rb"), *o = fopen(out_path, "wb");
    int rc = f && o ? 0 : fail("cannot open the pixels or the output", NULL);
    pith_err err = {{0}};
    for (const char *s = sizes; !rc && *s;) {
        int h, w, used;
        if (sscanf(s, "%dx%d%n", &h, &w, &used) != 2 || h < 1 || w < 1 || h > 8192 || w > 8192) {
            rc = fail("sizes are HxW[,HxW...]", NULL);
            break;
        }
        s += used + (s[used] == ',');
        int unit = hp->patch_size * (hp->merge > 0 ? hp->merge : 1);
        size_t in_n = (size_t)3 * h * w, out_n = (size_t)(h / unit) * (w / unit) * pith_vision_row_floats(v);
        float *px = malloc(in_n * sizeof *px), *out = malloc((out_n ? out_n : 1) * sizeof *out);
        if (!px || !out || fread(px, sizeof *px, in_n, f) != in_n) rc = fail("cannot read the pixels", NULL);
        else if (pith_vision_encode_image(v, px, h, w, out, &err)) rc = fail("encode", &err);
        else if (fwrite(out, sizeof *out, out_n, o) != out_n) rc = fail("cannot write the output", NULL);
        free(px);
        free(out);
    }
    if (f) fclose(f);
    if (o && fclose(o) && !rc) rc = fail("cannot write the output", NULL);
    return rc;
}

int main(int argc, char **argv) {
    if (argc < 5) return fail("usage: tool_vision_encode MMPROJ PIXELS N_IMAGES OUT [THREADS]", NULL);
    if (!strcmp(argv[2], "--sized")) {
        if (argc < 6) return fail("usage: tool_vision_encode MMPROJ --sized PIXELS HxW[,HxW...] OUT [THREADS]", NULL);
        pith_err err = {{0}};
        pith_backend *be = NULL;
        pith_vision *v = NULL;
        if (pith_backend_cpu_create(argc > 6 ? atoi(argv[6]) : 1, &be, &err)) return fail("backend", &err);
        if (pith_vision_open(argv[1], be, &v, &err)) {
            pith_backend_free(be);
            return fail("open", &err);
        }
        const pith_vision_hparams *hp = pith_vision_hparams_of(v);
        printf("patch %d dim %d ffn %d layers %d heads %d merge %d out %d deepstack %d\n", hp->patch_size, hp->dim,
               hp->ffn, hp->n_layers, hp->n_heads, hp->merge, hp->out_dim, hp->n_deepstack);
        int rc = sized(v, argv[3], argv[4], argv[5]);
        pith_vision_free(v);
        pith_backend_free(be);
        return rc;
    }
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
