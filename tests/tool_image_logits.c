/* Test helper for tests/test_ref_gemma3_vision.py: a text model's logits for a prompt with images in it,
 * straight through the model API (batch.h's embed_rows and attend_last), for the float64 reference.
 *
 *   tool_image_logits MODEL MMPROJ PIXELS CHUNK OUT SEQ [SEQ ...]
 *
 * Each SEQ is comma-separated token ids where -1 stands for an image: tokens_per_image placeholder tokens
 * (id 0) whose inputs are the encoder's rows for the next image of PIXELS (float32, normalized, [3][size]
 * [size] per image, the images of every SEQ in order). The images are encoded in one encoder step; the
 * sequences are prefilled together, CHUNK tokens of each per forward pass, except that a chunk never ends
 * inside an image (it runs on to the image's end, as the engine schedules them), and every token of an
 * image attends to the whole image. OUT gets, as float32, every position's logits row, sequence after
 * sequence. Exit 0, or 1 with a message.
 *
 * CHUNK "engine:B:K" runs the sequences instead as requests of one engine (engine.h: pith_media spans,
 * the encoder inside its steps) with max_batch_tokens B and K KV blocks of 16 (0: the default), all
 * submitted at once, then all again (a second turn: prefix-cache hits). OUT gets each request's last
 * prompt row (the logits its first token is sampled from), first round then second; stdout says
 * "cached I N" for request I of the second round and "encoded N preemptions P" at the end. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "model/vision.h"
#include "model_mem.h"
#include "pith/engine.h"
#include "pith/model.h"

#define MAX_SEQS 4
#define MAX_LEN 512
#define BLOCK 16

static int fail(const char *what, const pith_err *err) {
    fprintf(stderr, "tool_image_logits: %s%s%s\n", what, err ? ": " : "", err ? err->msg : "");
    return 1;
}

typedef struct last_row {
    float *row;
    int n_vocab, cached, finals;
    pith_finish_reason why;
    char error[200];
} last_row;

static void on_event(const pith_token_event *ev, void *user) {
    last_row *r = user;
    if (ev->logits && !ev->final) memcpy(r->row, ev->logits, (size_t)r->n_vocab * sizeof *r->row);
    if (ev->final) {
        r->finals++;
        r->why = ev->finish_reason;
        r->cached = ev->usage.cached_tokens;
        snprintf(r->error, sizeof r->error, "%s", ev->error);
    }
}

/* The engine mode (see the top). */
static int run_engine(pith_vision *v, const char *model_path, const char *mode, const char *out_path, int n_seqs,
                      int32_t (*toks)[MAX_LEN], const int *len, int32_t (*rowof)[MAX_LEN], const float *px) {
    pith_err err;
    int batch = 0, blocks = 0;
    if (sscanf(mode, "engine:%d:%d", &batch, &blocks) != 2) return fail("CHUNK engine:B:K expected", NULL);
    const pith_vision_hparams *vh = pith_vision_hparams_of(v);
    const size_t img = (size_t)3 * vh->image_size * vh->image_size;
    pith_model *m;
    pith_model_options mo = {.n_threads = 2};
    if (pith_model_load(model_path, &mo, &m, &err)) return fail("load", &err);
    pith_encoder enc;
    pith_vision_encoder(v, &enc);
    pith_engine_options eo = {.block_size = BLOCK, .kv_blocks = blocks, .max_batch_tokens = batch, .kv_type = PITH_KV_F32,
                              .max_seq_len = MAX_LEN, .encoder = &enc};
    pith_engine *e;
    if (pith_engine_create(m, NULL, &eo, &e, &err)) return fail("engine", &err);
    const int V = m->hp.n_vocab;
    float *rows = malloc((size_t)2 * n_seqs * V * sizeof *rows);
    last_row lr[2 * MAX_SEQS];
    static pith_media media[MAX_SEQS][MAX_LEN];
    int n_media[MAX_SEQS];
    for (int s = 0; s < n_seqs; s++) { /* a span per image: the positions whose row is its first row */
        n_media[s] = 0;
        for (int p = 0; p < len[s]; p++) {
            if (rowof[s][p] < 0 || rowof[s][p] % vh->tokens_per_image) continue;
            int k = rowof[s][p] / vh->tokens_per_image;
            media[s][n_media[s]++] = (pith_media){.pos = p, .n_tokens = vh->tokens_per_image, .input = px + (size_t)k * img,
                                                  .n_input = img};
        }
    }
    for (int round = 0; round < 2 && rows; round++) {
        for (int s = 0; s < n_seqs; s++) {
            last_row *r = &lr[round * n_seqs + s];
            *r = (last_row){.row = rows + (size_t)(round * n_seqs + s) * V, .n_vocab = V};
            pith_request q = {.prompt = toks[s], .n_prompt = len[s], .sampling = pith_sampling_defaults(), .max_tokens = 1,
                              .return_logits = true, .ignore_eos = true, .media = media[s], .n_media = n_media[s],
                              .on_token = on_event, .user = r};
            q.sampling.temperature = 0;
            if (pith_engine_submit(e, &q, NULL, &err)) return fail("submit", &err);
        }
        if (pith_engine_run(e, &err)) return fail("run", &err);
        for (int s = 0; s < n_seqs; s++) {
            last_row *r = &lr[round * n_seqs + s];
            if (r->finals != 1 || r->why != PITH_FINISH_LENGTH) return fail(r->error[0] ? r->error : "a request did not finish", NULL);
            if (round) printf("cached %d %d\n", s, r->cached);
        }
    }
    pith_engine_stats st;
    pith_engine_get_stats(e, &st);
    printf("encoded %llu preemptions %llu\n", (unsigned long long)st.media_encoded, (unsigned long long)st.preemptions);
    FILE *out = fopen(out_path, "wb");
    size_t total = (size_t)2 * n_seqs * V;
    if (!rows || !out || fwrite(rows, sizeof(float), total, out) != total || fclose(out)) return fail("cannot write OUT", NULL);
    free(rows);
    pith_engine_free(e);
    pith_model_free(m);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 7) return fail("usage: tool_image_logits MODEL MMPROJ PIXELS CHUNK OUT SEQ [SEQ ...]", NULL);
    bool engine = !strncmp(argv[4], "engine:", 7);
    int chunk = engine ? 1 : atoi(argv[4]), n_seqs = argc - 6;
    if (n_seqs > MAX_SEQS || chunk < 1) return fail("bad arguments", NULL);
    pith_err err;
    pith_backend *be;
    pith_vision *v;
    if (pith_backend_cpu_create(1, &be, &err)) return fail("backend", &err);
    if (pith_vision_open(argv[2], be, &v, &err)) return fail("mmproj", &err);
    const pith_vision_hparams *vh = pith_vision_hparams_of(v);
    const int tpi = vh->tokens_per_image;
    /* the sequences, images expanded; span_end[s][p]: one past the last position of p's image, or 0 */
    static int32_t toks[MAX_SEQS][MAX_LEN], rowof[MAX_SEQS][MAX_LEN], span_end[MAX_SEQS][MAX_LEN];
    int len[MAX_SEQS], n_images = 0;
    for (int s = 0; s < n_seqs; s++) {
        len[s] = 0;
        for (char *p = argv[6 + s]; *p;) {
            long id = strtol(p, &p, 10);
            if (*p == ',') p++;
            int n = id < 0 ? tpi : 1;
            if (len[s] + n > MAX_LEN) return fail("a sequence is too long", NULL);
            for (int i = 0; i < n; i++, len[s]++) {
                toks[s][len[s]] = id < 0 ? 0 : (int32_t)id;
                rowof[s][len[s]] = id < 0 ? n_images * tpi + i : -1;
                span_end[s][len[s]] = id < 0 ? len[s] - i + tpi : 0;
            }
            n_images += id < 0;
        }
    }
    size_t img_floats = (size_t)3 * vh->image_size * vh->image_size;
    float *px = malloc((n_images ? n_images : 1) * img_floats * sizeof *px);
    float *embeds = malloc((size_t)(n_images ? n_images : 1) * tpi * vh->out_dim * sizeof *embeds);
    FILE *f = fopen(argv[3], "rb");
    if (!px || !embeds || !f || fread(px, sizeof *px, n_images * img_floats, f) != n_images * img_floats)
        return fail("cannot read the pixels", NULL);
    fclose(f);
    if (engine) {
        int rc = run_engine(v, argv[1], argv[4], argv[5], n_seqs, toks, len, rowof, px);
        free(px);
        free(embeds);
        pith_vision_free(v);
        pith_backend_free(be);
        return rc;
    }
    if (n_images && pith_vision_encode(v, px, n_images, embeds, &err)) return fail("encode", &err);

    pith_model *m;
    pith_model_options mo = {.n_threads = 2};
    if (pith_model_load(argv[1], &mo, &m, &err)) return fail("load", &err);
    if (m->hp.dim != vh->out_dim) return fail("the projector's output width is not the model's", NULL);
    const int V = m->hp.n_vocab, nb = MAX_LEN / BLOCK;
    /* K/V in F32: the reference's float64 differs by float32 rounding only; sequence s owns blocks s * nb.. */
    if (tm_alloc(m, BLOCK, MAX_SEQS * nb, MAX_SEQS * MAX_LEN, PITH_F32, &err)) return fail("memory", &err);
    static int32_t tables[MAX_SEQS * MAX_LEN / BLOCK];
    static int32_t bt[MAX_SEQS * MAX_LEN], bp[MAX_SEQS * MAX_LEN], bs[MAX_SEQS * MAX_LEN], slots[MAX_SEQS * MAX_LEN];
    static int32_t erow[MAX_SEQS * MAX_LEN], last[MAX_SEQS * MAX_LEN];
    static uint8_t want[MAX_SEQS * MAX_LEN];
    tm_batch tb;
    size_t total = 0;
    for (int s = 0; s < n_seqs; s++) total += (size_t)len[s];
    float *logits = malloc(total * V * sizeof(float)), *rows = malloc(total * V * sizeof(float));
    if (!logits || !rows) return fail("out of memory", NULL);
    int done[MAX_SEQS] = {0};
    for (;;) {
        int n = 0, k = 0;
        int32_t map[MAX_SEQS];
        for (int s = 0; s < n_seqs; s++) {
            int end = done[s] + chunk < len[s] ? done[s] + chunk : len[s];
            if (end > 0 && end < len[s] && span_end[s][end - 1] > end) end = span_end[s][end - 1]; /* whole images */
            if (done[s] >= end) continue;
            map[k] = s;
            for (int p = done[s]; p < end; p++, n++) {
                bt[n] = toks[s][p], bp[n] = p, bs[n] = k, slots[n] = (s * nb + p / BLOCK) * BLOCK + p % BLOCK;
                erow[n] = rowof[s][p], last[n] = span_end[s][p] ? span_end[s][p] - 1 : p, want[n] = 1;
            }
            done[s] = end;
            k++;
        }
        if (n == 0) break;
        for (int i = 0; i < k; i++)
            for (int j = 0; j < nb; j++) tables[i * nb + j] = map[i] * nb + j;
        tm_batch_init(&tb, m, n, bt, bp, bs, slots, want, k, nb, tables);
        for (int g = 0; g < m->mem.n_groups; g++) tb.mem[g].state_slots = map; /* sequence s keeps slot s */
        tb.b.embed_rows = erow, tb.b.embeds = embeds, tb.b.n_embeds = n_images * tpi, tb.b.attend_last = last;
        if (pith_model_forward(m, &tb.b, rows, &err)) return fail("forward", &err);
        for (int i = 0; i < n; i++) { /* rows in batch order, to each sequence's place */
            size_t at = (size_t)bp[i];
            for (int s = 0; s < map[bs[i]]; s++) at += (size_t)len[s];
            memcpy(logits + at * V, rows + (size_t)i * V, (size_t)V * sizeof(float));
        }
    }
    FILE *out = fopen(argv[5], "wb");
    if (!out || fwrite(logits, sizeof(float), total * V, out) != total * V || fclose(out)) return fail("cannot write OUT", NULL);
    free(logits);
    free(rows);
    free(px);
    free(embeds);
    pith_model_free(m);
    pith_vision_free(v);
    pith_backend_free(be);
    return 0;
}
