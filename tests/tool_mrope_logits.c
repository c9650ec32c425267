/* Test helper for tests/test_ref_qwen35_vision.py: a model with M-RoPE (Qwen3.5) and images of any size
 * through the engine (engine.h: pith_media spans with their grids, the encoder inside the steps, the
 * M-RoPE positions the engine derives from the spans), for the float64 reference.
 *
 *   tool_mrope_logits MODEL MMPROJ PIXELS SIZES B:K N_GEN OUT SEQ [SEQ ...]
 *
 * PIXELS holds the images one after another, float32 [3][H][W] each, prepared; SIZES says their
 * HxW[,HxW...]. Each SEQ is comma-separated token ids where -k stands for image k (1-based): its
 * (H / 32) x (W / 32) placeholder tokens (id 0). Every SEQ is one request of one engine with
 * max_batch_tokens B and K KV blocks of 16 (0: the default), greedy, N_GEN tokens, all submitted at once;
 * then all again (a second turn: prefix-cache hits). OUT gets, as float32, each request's N_GEN logits
 * rows (the last prompt row, then the row after each generated token but the last), first round then
 * second. stdout: "tokens R I t0 t1 ..." per round R and request I, "cached I N" for the second round,
 * and "encoded N preemptions P" at the end. Exit 0, or 1 with a message. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/vision.h"
#include "pith/engine.h"
#include "pith/model.h"

#define MAX_SEQS 4
#define MAX_LEN 2048
#define MAX_IMAGES 8
#define MAX_GEN 16
#define BLOCK 16

static int fail(const char *what, const pith_err *err) {
    fprintf(stderr, "tool_mrope_logits: %s%s%s\n", what, err ? ": " : "", err ? err->msg : "");
    return 1;
}

typedef struct rows_of {
    float *rows;
    int n_vocab, n, cached, finals;
    int32_t tokens[MAX_GEN];
    pith_finish_reason why;
    char error[200];
} rows_of;

static void on_event(const pith_token_event *ev, void *user) {
    rows_of *r = user;
    if (ev->final) {
        r->finals++;
        r->why = ev->finish_reason;
        r->cached = ev->usage.cached_tokens;
        snprintf(r->error, sizeof r->error, "%s", ev->error);
        return;
    }
    if (r->n < MAX_GEN && ev->logits) {
        memcpy(r->rows + (size_t)r->n * r->n_vocab, ev->logits, (size_t)r->n_vocab * sizeof *r->rows);
        r->tokens[r->n++] = ev->token;
    }
}

int main(int argc, char **argv) {
    if (argc < 9) return fail("usage: tool_mrope_logits MODEL MMPROJ PIXELS SIZES B:K N_GEN OUT SEQ [SEQ ...]", NULL);
    int batch = 0, blocks = 0, n_gen = atoi(argv[6]), n_seqs = argc - 8, n_img = 0;
    if (sscanf(argv[5], "%d:%d", &batch, &blocks) != 2) return fail("B:K expected", NULL);
    if (n_gen < 1 || n_gen > MAX_GEN || n_seqs > MAX_SEQS) return fail("N_GEN or SEQ count out of range", NULL);
    pith_err err = {{0}};
    int h[MAX_IMAGES], w[MAX_IMAGES];
    for (const char *s = argv[4]; *s && n_img < MAX_IMAGES; n_img++) {
        int used;
        if (sscanf(s, "%dx%d%n", &h[n_img], &w[n_img], &used) != 2) return fail("SIZES: HxW[,HxW...]", NULL);
        s += used + (s[used] == ',');
    }
    static float *px[MAX_IMAGES];
    FILE *f = fopen(argv[3], "rb");
    if (!f) return fail("cannot open PIXELS", NULL);
    for (int i = 0; i < n_img; i++) {
        size_t n = (size_t)3 * h[i] * w[i];
        if (!(px[i] = malloc(n * sizeof *px[i])) || fread(px[i], sizeof *px[i], n, f) != n) return fail("PIXELS", NULL);
    }
    fclose(f);
    pith_vision *v;
    if (pith_vision_load(argv[2], 2, &v, &err)) return fail("mmproj", &err);
    const pith_vision_hparams *vh = pith_vision_hparams_of(v);
    const int unit = vh->patch_size * vh->merge;
    static int32_t toks[MAX_SEQS][MAX_LEN];
    static pith_media media[MAX_SEQS][MAX_IMAGES];
    int len[MAX_SEQS] = {0}, n_media[MAX_SEQS] = {0};
    for (int s = 0; s < n_seqs; s++) {
        for (char *p = argv[8 + s]; *p;) {
            long t = strtol(p, &p, 10);
            if (*p == ',') p++;
            if (t >= 0) {
                if (len[s] == MAX_LEN) return fail("a SEQ is too long", NULL);
                toks[s][len[s]++] = (int32_t)t;
                continue;
            }
            int k = (int)-t - 1;
            if (k >= n_img || n_media[s] == MAX_IMAGES) return fail("a SEQ names an image SIZES lacks", NULL);
            int rows = h[k] / unit, cols = w[k] / unit;
            if (len[s] + rows * cols > MAX_LEN) return fail("a SEQ is too long", NULL);
            media[s][n_media[s]++] = (pith_media){.pos = len[s], .n_tokens = rows * cols, .input = px[k],
                                                  .n_input = (size_t)3 * h[k] * w[k], .rows = rows, .cols = cols};
            for (int i = 0; i < rows * cols; i++) toks[s][len[s]++] = 0;
        }
    }
    pith_model *m;
    pith_model_options mo = {.n_threads = 2};
    if (pith_model_load(argv[1], &mo, &m, &err)) return fail("load", &err);
    pith_encoder enc;
    pith_vision_encoder(v, &enc);
    pith_engine_options eo = {.block_size = BLOCK, .kv_blocks = blocks, .max_batch_tokens = batch, .kv_type = PITH_KV_F32,
                              .max_seq_len = MAX_LEN, .encoder = &enc};
    pith_engine *e;
    if (pith_engine_create(m, NULL, &eo, &e, &err)) return fail("engine", &err);
    const int V = m->hp.n_vocab;
    const size_t per = (size_t)n_gen * V;
    float *rows = malloc(2 * n_seqs * per * sizeof *rows);
    static rows_of ro[2 * MAX_SEQS];
    if (!rows) return fail("out of memory", NULL);
    for (int round = 0; round < 2; round++) {
        for (int s = 0; s < n_seqs; s++) {
            rows_of *r = &ro[round * n_seqs + s];
            *r = (rows_of){.rows = rows + (size_t)(round * n_seqs + s) * per, .n_vocab = V};
            pith_request q = {.prompt = toks[s], .n_prompt = len[s], .sampling = pith_sampling_defaults(),
                              .max_tokens = n_gen, .return_logits = true, .ignore_eos = true, .media = media[s],
                              .n_media = n_media[s], .on_token = on_event, .user = r};
            q.sampling.temperature = 0;
            if (pith_engine_submit(e, &q, NULL, &err)) return fail("submit", &err);
        }
        if (pith_engine_run(e, &err)) return fail("run", &err);
        for (int s = 0; s < n_seqs; s++) {
            rows_of *r = &ro[round * n_seqs + s];
            if (r->finals != 1 || r->why != PITH_FINISH_LENGTH || r->n != n_gen)
                return fail(r->error[0] ? r->error : "a request did not finish", NULL);
            printf("tokens %d %d", round, s);
            for (int i = 0; i < r->n; i++) printf(" %d", r->tokens[i]);
            printf("\n");
            if (round) printf("cached %d %d\n", s, r->cached);
        }
    }
    pith_engine_stats st;
    pith_engine_get_stats(e, &st);
    printf("encoded %llu preemptions %llu\n", (unsigned long long)st.media_encoded, (unsigned long long)st.preemptions);
    FILE *out = fopen(argv[7], "wb");
    size_t total = 2 * n_seqs * per;
    if (!out || fwrite(rows, sizeof(float), total, out) != total || fclose(out)) return fail("cannot write OUT", NULL);
    free(rows);
    pith_engine_free(e);
    pith_model_free(m);
    pith_vision_free(v);
    for (int i = 0; i < n_img; i++) free(px[i]);
    return 0;
}
