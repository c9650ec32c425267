/* The image module from the command line, for tests/test_image_pillow.py (not a test itself).
 *
 *   image_dump IN OUT [--max-pixels N] [--resize W H FILTER] [--tensor M0 M1 M2 S0 S1 S2 RESCALE]
 *       decodes IN, optionally resizes it (FILTER: nearest, bilinear, bicubic, lanczos), and writes the
 *       RGB bytes (or, with --tensor, the CHW float32 tensor) to OUT; prints "W H" on stdout.
 *   image_dump --smart-sizes
 *       reads lines "h w factor min_pixels max_pixels" on stdin and prints "oh ow" or "error" for each.
 *
 * Exit 0 on success, 1 with the library's one-line error on stderr, 2 for bad arguments. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "image/image.h"

static int usage(void) {
    fprintf(stderr, "usage: image_dump IN OUT [--max-pixels N] [--resize W H FILTER] [--tensor M0 M1 M2 S0 S1 S2 R]\n"
                    "       image_dump --smart-sizes < lines of 'h w factor min max'\n");
    return 2;
}

static int smart_sizes(void) {
    int h, w, f;
    long lo, hi;
    while (scanf("%d %d %d %ld %ld", &h, &w, &f, &lo, &hi) == 5) {
        int oh, ow;
        pith_err err;
        if (pith_image_smart_size(h, w, f, lo, hi, &oh, &ow, &err) == 0) printf("%d %d\n", oh, ow);
        else printf("error %s\n", err.msg);
    }
    return 0;
}

static uint8_t *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, len = 0;
    uint8_t *b = malloc(cap);
    for (size_t got; b && (got = fread(b + len, 1, cap - len, f)) > 0;) {
        len += got;
        if (len == cap) {
            uint8_t *nb = realloc(b, cap *= 2);
            if (!nb) free(b);
            b = nb;
        }
    }
    fclose(f);
    *n = len;
    return b;
}

int main(int argc, char **argv) {
    if (argc == 2 && strcmp(argv[1], "--smart-sizes") == 0) return smart_sizes();
    if (argc < 3) return usage();
    pith_image_limits lim = {0, 0};
    int rw = 0, rh = 0, filter = -1, tensor = 0;
    float mean[3], std[3], rescale = 1;
    for (int i = 3; i < argc; i++) {
        if (strcmp(argv[i], "--max-pixels") == 0 && i + 1 < argc) {
            lim.max_pixels = strtoull(argv[++i], NULL, 10);
        } else if (strcmp(argv[i], "--resize") == 0 && i + 3 < argc) {
            rw = atoi(argv[++i]);
            rh = atoi(argv[++i]);
            const char *f = argv[++i];
            filter = !strcmp(f, "nearest")    ? PITH_RESIZE_NEAREST
                     : !strcmp(f, "bilinear") ? PITH_RESIZE_BILINEAR
                     : !strcmp(f, "bicubic")  ? PITH_RESIZE_BICUBIC
                     : !strcmp(f, "lanczos")  ? PITH_RESIZE_LANCZOS
                                              : -1;
            if (filter < 0) return usage();
        } else if (strcmp(argv[i], "--tensor") == 0 && i + 7 < argc) {
            for (int c = 0; c < 3; c++) mean[c] = strtof(argv[++i], NULL);
            for (int c = 0; c < 3; c++) std[c] = strtof(argv[++i], NULL);
            rescale = strtof(argv[++i], NULL);
            tensor = 1;
        } else {
            return usage();
        }
    }
    size_t n = 0;
    uint8_t *bytes = read_all(argv[1], &n);
    if (!bytes) {
        fprintf(stderr, "image_dump: cannot read %s\n", argv[1]);
        return 1;
    }
    pith_image img;
    pith_err err;
    int rc = pith_image_decode(bytes, n, &lim, &img, &err);
    free(bytes);
    if (rc != 0) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    if (filter >= 0) {
        pith_image r;
        if (pith_image_resize(&img, rw, rh, filter, &r, &err) != 0) {
            fprintf(stderr, "%s\n", err.msg);
            pith_image_free(&img);
            return 1;
        }
        pith_image_free(&img);
        img = r;
    }
    FILE *f = fopen(argv[2], "wb");
    size_t px = (size_t)img.width * img.height;
    int ok = f != NULL;
    if (ok && tensor) {
        float *t = malloc(sizeof(float) * px * 3);
        ok = t != NULL;
        if (ok) {
            pith_image_to_tensor(&img, mean, std, rescale, t);
            ok = fwrite(t, sizeof(float), px * 3, f) == px * 3;
        }
        free(t);
    } else if (ok) {
        ok = fwrite(img.data, 1, px * 3, f) == px * 3;
    }
    if (f && fclose(f) != 0) ok = 0;
    if (!ok) {
        fprintf(stderr, "image_dump: cannot write %s\n", argv[2]);
        pith_image_free(&img);
        return 1;
    }
    printf("%d %d\n", img.width, img.height);
    pith_image_free(&img);
    return 0;
}
