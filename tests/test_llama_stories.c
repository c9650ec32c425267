/* The Llama forward pass on a real trained model (stories260K, llama2.c format) against reference logits
 * computed in float64 by an independent implementation.
 *
 *   1. Greedy decoding from BOS, one token per step through the batch API with a paged F32 KV cache
 *      (block size 16): the tokens must equal the reference tokens, and the logits must be within 1e-4
 *      absolute of the reference for the first 150 steps (float32 arithmetic over 5 layers of width 64
 *      keeps errors near 1e-6; the top-2 gap gets as small as 0.004 at step 185, hence the cut-off).
 *   2. The same 200 tokens as ONE prefill batch, as chunked prefills (block size 4, shuffled block
 *      table) and as two sequences interleaved in the same batches, with logits for every row or for
 *      some rows only (some batches then want none): every logits row must equal the step-by-step one
 *      within 1e-5. The kernels sum in the same order whatever the batch, so the
 *      results should agree to the last bit; 1e-5 leaves room for nothing but rounding.
 *   3. An F16 KV cache: same tokens for 150 steps and logits within 0.05. F16 rounds each cached K and V
 *      value by up to 2^-11 relative; through five layers that moved the logits (at most 22 in
 *      magnitude) by 0.022, about 2 F16 roundoffs of the largest logit; 0.05 allows 4.5.
 * Runs with 1 and 2 threads and with the scalar kernels (PITH_FORCE_SCALAR=1, read at model load); on a
 * device (PITH_DEVICE), once. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "model_mem.h"
#include "pith/batch.h"
#include "pith/kv.h"
#include "pith/model.h"

#define STEPS 200
#define CHECKED_STEPS 150
#define BOS 1

static int n_vocab;
static int ref_tokens[STEPS];
static float *ref_logits; /* [STEPS][n_vocab] */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Reads a little-endian float32 C-order .npy of shape (rows, cols). */
static float *read_npy_f32(const char *path, int rows, int cols) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    unsigned char head[10];
    float *data = NULL;
    if (fread(head, 1, 10, f) != 10 || memcmp(head, "\x93NUMPY", 6)) goto out;
    size_t hlen;
    if (head[6] == 1) {
        hlen = head[8] | head[9] << 8;
    } else {
        unsigned char more[2];
        if (fread(more, 1, 2, f) != 2) goto out;
        hlen = head[8] | head[9] << 8 | (size_t)more[0] << 16 | (size_t)more[1] << 24;
    }
    char *dict = calloc(1, hlen + 1);
    if (!dict || fread(dict, 1, hlen, f) != hlen) {
        free(dict);
        goto out;
    }
    char shape[64];
    snprintf(shape, sizeof shape, "(%d, %d)", rows, cols);
    bool ok = strstr(dict, "'descr': '<f4'") && strstr(dict, "'fortran_order': False") && strstr(dict, shape);
    free(dict);
    if (!ok) goto out;
    data = malloc((size_t)rows * cols * sizeof *data);
    if (data && fread(data, sizeof *data, (size_t)rows * cols, f) != (size_t)rows * cols) {
        free(data);
        data = NULL;
    }
out:
    fclose(f);
    return data;
}

static int argmax(const float *v, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[best]) best = i;
    return best;
}

/* The input token at position p of the reference sequence: BOS, then the reference outputs. */
static int input_at(int p) { return p == 0 ? BOS : ref_tokens[p - 1]; }

typedef struct seq_state {
    int32_t *table;  /* block table */
    int next_pos;    /* first position not yet run */
} seq_state;

/* Runs one batch made of chunks of several sequences: seqs[i] advances by len[i] positions. Writes every
 * row's logits into out[seq][pos]. */
static int run_chunks(pith_model *m, int block_size, seq_state *seqs, const int *len, int n_seqs, int max_blocks,
                      int logit_stride, float **out) {
    int n = 0;
    for (int s = 0; s < n_seqs; s++) n += len[s];
    int32_t *tok = malloc(n * sizeof *tok), *pos = malloc(n * sizeof *pos), *seq = malloc(n * sizeof *seq);
    int32_t *slot = malloc(n * sizeof *slot), *tables = malloc((size_t)n_seqs * max_blocks * sizeof *tables);
    uint8_t *want = malloc(n);
    float *logits = malloc((size_t)n * n_vocab * sizeof *logits);
    int i = 0;
    /* the sequences one after the other (batch.h: each one's tokens contiguous), in reverse order so a
     * sequence's index in the batch differs from its place */
    for (int s = n_seqs - 1; s >= 0; s--) {
        for (int d = 0; d < len[s]; d++) {
            int p = seqs[s].next_pos + d;
            tok[i] = input_at(p);
            pos[i] = p;
            seq[i] = s;
            slot[i] = seqs[s].table[p / block_size] * block_size + p % block_size;
            want[i] = p % logit_stride == 0;
            i++;
        }
    }
    for (int s = 0; s < n_seqs; s++) memcpy(tables + s * max_blocks, seqs[s].table, max_blocks * sizeof *tables);
    tm_batch b;
    tm_batch_init(&b, m, n, tok, pos, seq, slot, want, n_seqs, max_blocks, tables);
    pith_err err;
    int rc = pith_model_forward(m, &b.b, logits, &err);
    if (rc) fprintf(stderr, "forward: %s\n", err.msg);
    for (int r = 0, t = 0; !rc && t < n; t++)
        if (want[t]) memcpy(out[seq[t]] + (size_t)pos[t] * n_vocab, logits + (size_t)r++ * n_vocab, n_vocab * sizeof *logits);
    for (int s = 0; s < n_seqs; s++) seqs[s].next_pos += len[s];
    free(tok), free(pos), free(seq), free(slot), free(tables), free(want), free(logits);
    return rc;
}

static float max_abs_diff(const float *a, const float *b, size_t n) {
    float worst = 0;
    for (size_t i = 0; i < n; i++) {
        float d = fabsf(a[i] - b[i]);
        if (!(d <= worst)) worst = d; /* NaN propagates as a failure */
    }
    return worst;
}

/* Step-by-step greedy decode; fills `steps` with the logits. */
static void decode_steps(pith_model *m, pith_dtype kv_type, float *steps, const char *label) {
    const int bs = 16, n_blocks = (STEPS + bs - 1) / bs;
    pith_err err;
    if (tm_alloc(m, bs, n_blocks, 512, kv_type, &err)) {
        CHECKF(0, "%s", err.msg);
        return;
    }
    int32_t table[16];
    for (int i = 0; i < n_blocks; i++) table[i] = n_blocks - 1 - i; /* any permutation will do */
    int mismatches = 0, first_mismatch = -1;
    float worst = 0;
    int token = BOS;
    for (int p = 0; p < STEPS; p++) {
        int32_t pos = p, seq = 0, slot = table[p / bs] * bs + p % bs;
        uint8_t want = 1;
        tm_batch b;
        tm_batch_init(&b, m, 1, &token, &pos, &seq, &slot, &want, 1, n_blocks, table);
        float *lg = steps + (size_t)p * n_vocab;
        if (pith_model_forward(m, &b.b, lg, &err)) {
            CHECKF(0, "%s step %d: %s", label, p, err.msg);
            break;
        }
        int next = argmax(lg, n_vocab);
        if (p < CHECKED_STEPS) {
            if (next != ref_tokens[p]) {
                mismatches++;
                if (first_mismatch < 0) first_mismatch = p;
            }
            float d = max_abs_diff(lg, ref_logits + (size_t)p * n_vocab, n_vocab);
            if (!(d <= worst)) worst = d;
        } else if (kv_type == PITH_F32 && next != ref_tokens[p]) {
            mismatches++;
            if (first_mismatch < 0) first_mismatch = p;
        }
        token = ref_tokens[p]; /* teacher forcing: keep comparing against the reference after a slip */
    }
    float tol = kv_type == PITH_F32 ? 1e-4f : 0.05f;
    CHECKF(mismatches == 0, "%s: %d greedy tokens differ from the reference (first at step %d)", label, mismatches,
           first_mismatch);
    CHECKF(worst <= tol, "%s: logits differ from the reference by %g (tolerance %g)", label, worst, tol);
    printf("%s: max |logit - reference| over %d steps = %.3g\n", label, CHECKED_STEPS, worst);
    pith_model_mem_free(m);
}

#if defined(__SANITIZE_ADDRESS__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SANITIZED 1
#endif
#endif

/* Decode speed: median of 5 runs of 200 single-token steps (information only, nothing asserted; not
 * measured in sanitizer builds, where it would mean nothing and take long). */
static void time_decode(pith_model *m, const char *label) {
#ifdef SANITIZED
    (void)m, (void)label;
    return;
#endif
    const int bs = 16, n_blocks = (STEPS + bs - 1) / bs;
    pith_err err;
    if (tm_alloc(m, bs, n_blocks, 512, PITH_F32, &err)) return;
    int32_t table[16];
    for (int i = 0; i < n_blocks; i++) table[i] = i;
    float *lg = malloc(n_vocab * sizeof *lg);
    double tps[5];
    for (int r = 0; r < 5; r++) {
        double t0 = now_s();
        for (int p = 0; p < STEPS; p++) {
            int32_t token = input_at(p), pos = p, seq = 0, slot = p;
            uint8_t want = 1;
            tm_batch b;
            tm_batch_init(&b, m, 1, &token, &pos, &seq, &slot, &want, 1, n_blocks, table);
            if (pith_model_forward(m, &b.b, lg, &err)) break;
        }
        tps[r] = STEPS / (now_s() - t0);
    }
    for (int i = 0; i < 5; i++)
        for (int k = i + 1; k < 5; k++)
            if (tps[k] < tps[i]) {
                double t = tps[i];
                tps[i] = tps[k];
                tps[k] = t;
            }
    printf("%s: decode %.0f tok/s (median of 5 x %d steps)\n", label, tps[2], STEPS);
    free(lg);
    pith_model_mem_free(m);
}

static void shuffle(int32_t *v, int n, uint64_t *seed) {
    for (int i = n - 1; i > 0; i--) {
        *seed = *seed * 6364136223846793005ull + 1442695040888963407ull;
        int j = (int)((*seed >> 33) % (uint64_t)(i + 1));
        int32_t t = v[i];
        v[i] = v[j];
        v[j] = t;
    }
}

/* Runs the reference sequence as batches: schedule[k][s] positions of sequence s in batch k; logits for
 * every logit_stride-th position only. */
static void batched(pith_model *m, const float *steps, int bs, int n_seqs, const int (*schedule)[2], int n_batches,
                    int logit_stride, const char *label) {
    const int per_seq = (STEPS + bs - 1) / bs, n_blocks = per_seq * n_seqs + 3;
    pith_err err;
    if (tm_alloc(m, bs, n_blocks, 512, PITH_F32, &err)) {
        CHECKF(0, "%s", err.msg);
        return;
    }
    int32_t *pool = malloc(n_blocks * sizeof *pool);
    for (int i = 0; i < n_blocks; i++) pool[i] = i;
    uint64_t seed = 12345;
    shuffle(pool, n_blocks, &seed);
    seq_state seqs[2];
    float *out[2];
    for (int s = 0; s < n_seqs; s++) {
        seqs[s].table = pool + s * per_seq;
        seqs[s].next_pos = 0;
        out[s] = calloc((size_t)STEPS * n_vocab, sizeof(float));
    }
    int ok = 1;
    for (int k = 0; k < n_batches && ok; k++) ok = run_chunks(m, bs, seqs, schedule[k], n_seqs, per_seq, logit_stride, out) == 0;
    CHECKF(ok, "%s: forward failed", label);
    for (int s = 0; s < n_seqs; s++) {
        CHECKF(seqs[s].next_pos == STEPS, "%s: schedule covers %d positions", label, seqs[s].next_pos);
        float d = 0;
        for (int p = 0; p < STEPS; p += logit_stride) {
            float dp = max_abs_diff(out[s] + (size_t)p * n_vocab, steps + (size_t)p * n_vocab, n_vocab);
            if (!(dp <= d)) d = dp;
        }
        CHECKF(d <= 1e-5f, "%s: sequence %d differs from step-by-step decoding by %g", label, s, d);
        printf("%s: sequence %d max |batched - step| = %.3g\n", label, s, d);
        free(out[s]);
    }
    free(pool);
    pith_model_mem_free(m);
}

static void bad_batches(pith_model *m) {
    pith_err err;
    float logits[512 * 2];
    int32_t table[2] = {1, 0};
    int32_t tok = 5, pos = 0, seq = 0, slot = 4;
    uint8_t want = 1;
    tm_batch ok;
    tm_batch_init(&ok, m, 1, &tok, &pos, &seq, &slot, &want, 1, 2, table);
    CHECK(pith_model_forward(m, &ok.b, logits, &err) == -1); /* no memory allocated yet */
    if (tm_alloc(m, 4, 2, 8, PITH_F32, &err)) return;
    CHECK(pith_model_mem_alloc(m, &(pith_mem_layout){.block_size = 4, .n_groups = m->mem.n_groups}, &err) == -1);
    CHECK(pith_model_forward(m, &ok.b, logits, &err) == 0);
    tm_batch b = ok;
    b.b.mem = b.mem;
    int32_t bad_tok = n_vocab;
    b.b.tokens = &bad_tok;
    CHECK(pith_model_forward(m, &b.b, logits, &err) == -1);
    b = ok;
    b.b.mem = b.mem;
    int32_t far = 8; /* block 2 of a 2-block table */
    b.b.positions = &far;
    CHECK(pith_model_forward(m, &b.b, logits, &err) == -1);
    b = ok;
    b.b.mem = b.mem;
    int32_t wrong_slot = 0; /* position 0 lives in block 1 */
    b.mem[0].slots = &wrong_slot;
    CHECK(pith_model_forward(m, &b.b, logits, &err) == -1);
    b = ok;
    b.b.mem = b.mem;
    int32_t bad_table[2] = {7, 0};
    b.mem[0].block_tables = bad_table;
    CHECK(pith_model_forward(m, &b.b, logits, &err) == -1);
    b = ok;
    b.b.mem = b.mem;
    int32_t bad_seq = 1;
    b.b.seq = &bad_seq;
    CHECK(pith_model_forward(m, &b.b, logits, &err) == -1);
    b = ok;
    b.b.mem = b.mem;
    b.b.n_groups = m->mem.n_groups + 1;
    CHECK(pith_model_forward(m, &b.b, logits, &err) == -1);
    pith_model_mem_free(m);
}

static void run_config(const char *dir, int threads, bool scalar) {
    char path[4200], label[64];
    snprintf(path, sizeof path, "%s/models/stories260K/stories260K.bin", dir);
    snprintf(label, sizeof label, "%d thread%s, %s", threads, threads > 1 ? "s" : "", scalar ? "scalar" : "best kernels");
    if (scalar) setenv("PITH_FORCE_SCALAR", "1", 1);
    pith_model_options opt = {.n_threads = threads};
    pith_model *m;
    pith_err err;
    int rc = pith_model_load(path, &opt, &m, &err);
    unsetenv("PITH_FORCE_SCALAR");
    if (rc) {
        CHECKF(0, "load: %s", err.msg);
        return;
    }
    CHECK(m->hp.n_vocab == n_vocab);
    CHECK(m->mem.n_groups == 1 && m->mem.groups[0].kind == PITH_MEM_FULL && m->mem.groups[0].k_dim == 32 &&
          m->mem.groups[0].v_dim == 32 && m->mem.groups[0].n_layers == 5); /* 4 KV heads of 8 */
    float *steps = malloc((size_t)STEPS * n_vocab * sizeof *steps);
    decode_steps(m, PITH_F32, steps, label);

    int one[1][2] = {{STEPS, 0}};
    batched(m, steps, 16, 1, one, 1, 1, "one prefill batch");
    batched(m, steps, 16, 1, one, 1, 3, "one prefill batch, logits for every third row");
    int chunks[][2] = {{1, 0}, {7, 0}, {16, 0}, {33, 0}, {2, 0}, {64, 0}, {1, 0}, {1, 0}, {75, 0}};
    batched(m, steps, 4, 1, chunks, 9, 1, "chunked prefill, block size 4, shuffled table");
    int mixed[][2] = {{50, 1}, {1, 30}, {1, 1}, {60, 9}, {1, 100}, {87, 59}};
    batched(m, steps, 4, 2, mixed, 6, 1, "two sequences mixed in each batch");
    batched(m, steps, 4, 2, mixed, 6, 7, "two sequences mixed, logits for every seventh row");

    char f16label[80];
    snprintf(f16label, sizeof f16label, "%s, F16 KV cache", label);
    decode_steps(m, PITH_F16, steps, f16label);
    if (threads == 1 && !scalar) bad_batches(m);
    time_decode(m, label);
    free(steps);
    pith_model_free(m);
}

int main(void) {
    const char *dir = check_shared_dir();
    if (!dir) return CHECK_SKIP;
    n_vocab = 512;
    char path[4200];
    snprintf(path, sizeof path, "%s/models/stories260K/reference/stories260K_greedy_tokens.txt", dir);
    FILE *f = fopen(path, "r");
    if (!f) {
        printf("SKIP: %s missing\n", path);
        return CHECK_SKIP;
    }
    int n = 0;
    while (n < STEPS && fscanf(f, "%d", &ref_tokens[n]) == 1) n++;
    fclose(f);
    CHECK(n == STEPS);
    snprintf(path, sizeof path, "%s/models/stories260K/reference/stories260K_greedy_logits.npy", dir);
    ref_logits = read_npy_f32(path, STEPS, n_vocab);
    CHECKF(ref_logits != NULL, "cannot read %s as float32 [%d, %d]", path, STEPS, n_vocab);
    if (!ref_logits || n != STEPS) return check_summary("test_llama_stories");

    run_config(dir, 1, false);
    /* the thread counts and the scalar kernels are the CPU backend's: on a device (tests/vulkan_run.sh
     * sets PITH_DEVICE) they would run the same shaders twice more */
    const char *dev = getenv("PITH_DEVICE");
    if (dev && *dev && strcmp(dev, "cpu") != 0) {
        printf("%s: the 2-thread and scalar-kernel runs are the CPU's (not repeated on the device)\n", dev);
    } else {
        run_config(dir, 2, false);
        run_config(dir, 1, true);
    }
    free(ref_logits);
    return check_summary("test_llama_stories");
}
