/* `pith bench --mmproj FILE [--image FILE]`: prompts with an image. Encoder time per image (the vision
 * tower and its projector, one image per encoder step), and the text model's prefill of a prompt made of
 * one image's tokens (the encoder cache serving the rows: the model's time alone), each with its share of
 * the compute peak measured with the same threads just before. */
#ifndef PITH_CLI_BENCH_IMAGE_H
#define PITH_CLI_BENCH_IMAGE_H

#include <stdbool.h>

#include "pith/status.h"

typedef struct bench_image_opts {
    const char *model, *mmproj;
    const char *image;            /* NULL: a synthetic image (a colour gradient) */
    const int *threads;
    int n_thread_counts;
    int reps;
    bool json, warmup, force_scalar;
} bench_image_opts;

/* 0, -1 on a failure (err says why). */
int cli_bench_image(const bench_image_opts *o, pith_err *err);

#endif
