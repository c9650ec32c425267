/* Test helper for tests/test_ref_siglip.py: a projector file's vision encoder over raw pixels, for the
 * float64 reference to check.
 *
 *   tool_vision_encode MMPROJ PIXELS N_IMAGES OUT [THREADS]
 *
 * PIXELS holds N_IMAGES images of [3][image_size][image_size] float32, already normalized; all of them go
 * through one encoder step. OUT gets the N_IMAGES * tokens_per_image rows of the text model's width, as
 * float32. The first line of stdout says the encoder's shape. Exit 0, or 1 with a message. */
#include <stdio.h>
#include <stdlib.h>

#include "backend/backend.h"
#include "model/vision.h"

static int fail(const char *what, const pith_err *err) {
    fprintf(stderr, "tool_vision_encode: %s%s%s\n", what, err ? ": " : "", err ? err->msg : "");
    return 1;
}

int main(int argc, char **argv) {
    if (argc < 5) return fail("usage: tool_vision_encode MMPROJ PIXELS N_IMAGES OUT [THREADS]", NULL);
    int n_images = atoi(argv[3]), threads = argc > 5 ? atoi(argv[5]) : 1;
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
    FILE *f = fopen(argv[2], "rb");
    int rc = 1;
    if (!px || !out || !f || fread(px, sizeof *px, in_n, f) != in_n) {
        fail("cannot read the pixels (or out of memory)", NULL);
    } else if (pith_vision_encode(v, px, n_images, out, &err)) {
        fail("encode", &err);
    } else {
        FILE *o = fopen(argv[4], "wb");
        rc = !o || fwrite(out, sizeof *out, out_n, o) != out_n;
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
