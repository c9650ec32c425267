#include "cli/bench_image.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "image/image.h"
#include "model/vision.h"
#include "pith/bench.h"
#include "pith/engine.h"
#include "pith/model.h"

#define PEAK_REPS 5
#define TEXT_AFTER 8 /* text tokens after the image: the prompt a chat turn makes of it, roughly */

/* Operations of one encoder step of one image (2 per multiply-add): the patch embedding, per layer the
 * four attention projections, the scores and the weighted sum, the MLP, then the projector (Gemma 3's
 * product, or Qwen3-VL's merger of two products of merge^2 times the width, and as many for each
 * DeepStack merger). */
static double encoder_ops(const pith_vision_hparams *hp, const pith_vision_input *in) {
    double n = (double)(in->height / hp->patch_size) * (in->width / hp->patch_size), d = hp->dim, f = hp->ffn;
    double tokens = (double)in->rows * in->cols;
    double patch = 2 * n * (3.0 * hp->patch_size * hp->patch_size) * d;
    double layer = 2 * n * d * 4 * d + 2 * 2 * n * n * d + 2 * 2 * n * d * f;
    double wide = d * hp->merge * hp->merge;
    double merger = 2 * tokens * wide * (wide + hp->out_dim);
    double proj = hp->projector == PITH_VISION_QWEN3VL ? merger * (1 + hp->n_deepstack) : 2.0 * tokens * d * hp->out_dim;
    return patch + hp->n_layers * layer + proj;
}

/* The image to encode, prepared as the model's processor does. */
static int pixels_of(const bench_image_opts *o, const pith_vision *v, pith_vision_input *px, pith_err *err) {
    *px = (pith_vision_input){0};
    if (o->image) {
        char *bytes;
        size_t len;
        if (cli_read_file(o->image, &bytes, &len, err)) return -1;
        int rc = pith_vision_prepare_bytes(v, (const uint8_t *)bytes, len, NULL, px, err);
        free(bytes);
        return rc ? pith_err_prefix(err, "%s", o->image) : 0;
    }
    pith_image img = {.width = 640, .height = 480};
    if (!(img.data = malloc((size_t)640 * 480 * 3))) return pith_errf(err, "out of memory");
    for (int y = 0; y < 480; y++)
        for (int x = 0; x < 640; x++) {
            uint8_t *p = &img.data[((size_t)y * 640 + x) * 3];
            p[0] = (uint8_t)(x * 255 / 639), p[1] = (uint8_t)(y * 255 / 479), p[2] = (uint8_t)((x + y) & 255);
        }
    int rc = pith_vision_prepare(v, &img, px, err);
    pith_image_free(&img);
    return rc;
}

typedef struct one_row {
    float *row;
    bool done, failed;
    char error[200];
} one_row;

static void on_event(const pith_token_event *ev, void *user) {
    one_row *r = user;
    if (!ev->final) return;
    r->done = true;
    r->failed = ev->finish_reason == PITH_FINISH_ERROR || ev->finish_reason == PITH_FINISH_CANCELLED;
    snprintf(r->error, sizeof r->error, "%s", ev->error);
}

/* One request of BOS, one image's tokens and TEXT_AFTER ids, max_tokens 1, timed from submit to its final
 * event. */
static int prefill_once(pith_engine *e, const int32_t *ids, int n, const pith_media *m, double *s, pith_err *err) {
    one_row r = {0};
    pith_request q = {.prompt = ids, .n_prompt = n, .sampling = pith_sampling_defaults(), .max_tokens = 1,
                      .ignore_eos = true, .media = m, .n_media = 1, .on_token = on_event, .user = &r};
    q.sampling.temperature = 0;
    double t0 = pith_bench_now();
    if (pith_engine_submit(e, &q, NULL, err) || pith_engine_run(e, err)) return -1;
    *s = pith_bench_now() - t0;
    if (!r.done || r.failed) return pith_errf(err, "the image prompt failed: %s", r.error[0] ? r.error : "no final event");
    return 0;
}

static int bench_threads(const bench_image_opts *o, int threads, pith_err *err) {
    int rc = -1;
    pith_model *m = NULL;
    pith_vision *v = NULL;
    pith_probe *probe = NULL;
    pith_engine *e = NULL;
    pith_vision_input px = {0};
    float *rows = NULL;
    double *enc_s = calloc((size_t)o->reps, sizeof *enc_s), *pp_s = calloc((size_t)o->reps, sizeof *pp_s);
    int32_t *ids = NULL;
    pith_model_options mo = {.n_threads = threads};
    if (!enc_s || !pp_s) {
        pith_errf(err, "out of memory");
        goto done;
    }
    if (pith_model_load(o->model, &mo, &m, err) || pith_vision_load(o->mmproj, threads, &v, err)) goto done;
    const pith_vision_hparams *vh = pith_vision_hparams_of(v);
    if (vh->out_dim != m->hp.dim) {
        pith_errf(err, "the projector makes rows of %d, the model's width is %d", vh->out_dim, m->hp.dim);
        goto done;
    }
    pith_bench_weights w;
    if (pith_bench_weights_of(m, &w, err) || pith_probe_new(threads, (size_t)256 << 20, o->force_scalar, &probe, err))
        goto done;
    if (pixels_of(o, v, &px, err)) goto done;
    const int tokens = px.rows * px.cols;
    rows = malloc((size_t)tokens * pith_vision_row_floats(v) * sizeof *rows); /* DeepStack: more parts a row */
    int n = 1 + tokens + TEXT_AFTER;
    ids = malloc((size_t)n * sizeof *ids);
    if (!rows || !ids) {
        pith_errf(err, "out of memory");
        goto done;
    }
    /* the encoder */
    double enc_peak, model_peak;
    if (pith_probe_fma_peak(probe, vh->weight_type, PEAK_REPS, &enc_peak, err)) goto done;
    if (o->warmup && pith_vision_encode_image(v, px.pixels, px.height, px.width, rows, err)) goto done;
    for (int i = 0; i < o->reps; i++) {
        double t0 = pith_bench_now();
        if (pith_vision_encode_image(v, px.pixels, px.height, px.width, rows, err)) goto done;
        enc_s[i] = pith_bench_now() - t0;
    }
    /* the text model over the image's tokens: the encoder cache holds the rows after the first request */
    if (w.quantized ? pith_probe_int8_peak(probe, w.type, PEAK_REPS, &model_peak, err)
                    : pith_probe_fma_peak(probe, w.type, PEAK_REPS, &model_peak, err))
        goto done;
    pith_encoder enc;
    pith_vision_encoder(v, &enc);
    pith_engine_options eo = {.max_num_seqs = 1, .max_batch_tokens = n, .max_seq_len = n + 2, .no_prefix_cache = true,
                              .encoder = &enc};
    if (pith_engine_create(m, NULL, &eo, &e, err)) goto done;
    ids[0] = 2 % m->hp.n_vocab; /* the ids do not change the work: Gemma's BOS, text ids spread over the vocabulary */
    for (int i = 1; i < n; i++) ids[i] = i <= tokens ? 0 : (int32_t)(i * 7919 % m->hp.n_vocab);
    pith_media media = {.pos = 1, .n_tokens = tokens, .input = px.pixels, .n_input = px.n, .rows = px.rows,
                        .cols = px.cols};
    double untimed;
    if (prefill_once(e, ids, n, &media, &untimed, err)) goto done; /* encodes the image: the cache has it */
    for (int i = 0; i < o->reps; i++)
        if (prefill_once(e, ids, n, &media, &pp_s[i], err)) goto done;
    pith_engine_stats st;
    pith_engine_get_stats(e, &st);
    if (st.media_encoded != 1) {
        pith_errf(err, "the image was encoded %llu times, not once", (unsigned long long)st.media_encoded);
        goto done;
    }
    pith_bench_stats es, ps;
    pith_bench_stats_of(enc_s, o->reps, &es);
    pith_bench_stats_of(pp_s, o->reps, &ps);
    double e_ops = encoder_ops(vh, &px), p_ops = 2.0 * (double)w.layer_params * n + 2.0 * (double)w.output_params;
    if (o->json) {
        printf("{\"test\":\"image-encode\",\"mmproj\":\"%s\",\"width\":%d,\"height\":%d,\"patches\":%d,\"layers\":%d,"
               "\"dim\":%d,\"tokens\":%d,\"threads\":%d,\"isa\":\"%s\",\"ms_mean\":%.3f,\"ms_stddev\":%.3f,\"gflops\":%.2f,"
               "\"peak_gflops\":%.2f,\"of_peak\":%.4f}\n",
               o->mmproj, px.width, px.height, (px.height / vh->patch_size) * (px.width / vh->patch_size), vh->n_layers,
               vh->dim, tokens, threads, pith_probe_fma_isa(probe, vh->weight_type), es.mean * 1e3, es.stddev * 1e3,
               e_ops / es.mean / 1e9, enc_peak / 1e9, e_ops / es.mean / enc_peak);
        printf("{\"test\":\"image-prefill\",\"model\":\"%s\",\"format\":\"%s\",\"tokens\":%d,\"image_tokens\":%d,"
               "\"threads\":%d,\"tok_s_mean\":%.2f,\"ms_mean\":%.3f,\"ms_stddev\":%.3f,\"peak_gops\":%.2f,\"of_peak\":%.4f}\n",
               o->model, w.format, n, tokens, threads, n / ps.mean, ps.mean * 1e3, ps.stddev * 1e3,
               model_peak / 1e9, p_ops / ps.mean / model_peak);
    } else {
        printf("image encoder: %s: %s, %dx%d pixels, %d patches, %d layers of width %d (ffn %d), %d tokens of %d; "
               "%d thread%s, peak %.1f GFLOP/s (%s, measured now)\n",
               o->mmproj, pith_dtype_name(vh->weight_type), px.width, px.height,
               (px.height / vh->patch_size) * (px.width / vh->patch_size), vh->n_layers, vh->dim, vh->ffn, tokens, vh->out_dim, threads, threads == 1 ? "" : "s", enc_peak / 1e9,
               pith_probe_fma_isa(probe, vh->weight_type));
        printf("  encode one image:   %9.2f ms +- %.2f   %8.1f GFLOP/s   %5.1f %% of peak\n", es.mean * 1e3,
               es.stddev * 1e3, e_ops / es.mean / 1e9, 100 * e_ops / es.mean / enc_peak);
        printf("text model: %s: %s, dim %d, %d layers; peak %.1f G%s/s (%s)\n", o->model, w.format, m->hp.dim,
               m->hp.n_layers, model_peak / 1e9, w.quantized ? "op" : "FLOP",
               w.quantized ? pith_probe_int8_isa(probe, w.type) : pith_probe_fma_isa(probe, w.type));
        printf("  prefill BOS + %d image tokens + %d text (rows from the encoder cache): %8.2f ms +- %.2f   "
               "%8.1f tok/s   %5.1f %% of peak\n",
               tokens, TEXT_AFTER, ps.mean * 1e3, ps.stddev * 1e3, n / ps.mean,
               100 * p_ops / ps.mean / model_peak);
    }
    rc = 0;
done:
    pith_engine_free(e);
    pith_probe_free(probe);
    pith_vision_free(v);
    pith_model_free(m);
    pith_vision_input_free(&px);
    free(rows);
    free(ids);
    free(enc_s);
    free(pp_s);
    return rc;
}

int cli_bench_image(const bench_image_opts *o, pith_err *err) {
    for (int i = 0; i < o->n_thread_counts; i++)
        if (bench_threads(o, o->threads[i], err)) return -1;
    return 0;
}
