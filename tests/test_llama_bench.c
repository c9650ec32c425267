/* Decode and prefill speed on a TinyLlama-shaped model (dim 2048, 22 layers, 32 heads, 4 KV heads,
 * FFN 5632, vocabulary 32000) with random weights, against the machine's measured read bandwidth.
 *
 * Opt-in: runs only when PITH_BENCH is set (it writes a GGUF of 0.6 to 2.2 GB and reads it for tens of
 * seconds), otherwise skips. PITH_BENCH=Q8_0,Q4_0 (or F16, Q4_K, ...) picks the weight types,
 * PITH_BENCH_THREADS=1,2 the thread counts; PITH_BENCH_MODEL=a.gguf,b.gguf benchmarks existing model
 * files instead of writing any. Decode reads every weight once per token, so
 *   bandwidth use = weight bytes per token * tokens/s / (read bandwidth of the same thread count),
 * with the bandwidth probed right before and after each measurement (the machine is shared and noisy)
 * and the median of 5 repetitions reported. Nothing is asserted beyond the runs succeeding. */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "pith/batch.h"
#include "pith/kv.h"
#include "pith/model.h"
#include "pith/modelfile.h"
#include "test_formats_util.h"

#define DIM 2048
#define LAYERS 22
#define HEADS 32
#define KV_HEADS 4
#define HEAD_DIM 64
#define FFN 5632
#define VOCAB 32000

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median5(double *v) {
    qsort(v, 5, sizeof *v, cmp_double);
    return v[2];
}

/* ---- read bandwidth ---- */

typedef struct bw_arg {
    const uint64_t *p;
    size_t n;
    uint64_t sum;
} bw_arg;

#if defined(__x86_64__)
#include <immintrin.h>
__attribute__((target("avx2"))) static uint64_t sum_words(const uint64_t *p, size_t n) {
    __m256i a = _mm256_setzero_si256(), b = _mm256_setzero_si256();
    for (size_t i = 0; i + 8 <= n; i += 8) {
        a = _mm256_add_epi64(a, _mm256_loadu_si256((const __m256i *)(p + i)));
        b = _mm256_add_epi64(b, _mm256_loadu_si256((const __m256i *)(p + i + 4)));
    }
    a = _mm256_add_epi64(a, b);
    uint64_t out[4];
    _mm256_storeu_si256((__m256i *)out, a);
    return out[0] + out[1] + out[2] + out[3];
}
#else
static uint64_t sum_words(const uint64_t *p, size_t n) {
    uint64_t s = 0;
    for (size_t i = 0; i < n; i++) s += p[i];
    return s;
}
#endif

static void *bw_thread(void *a_) {
    bw_arg *a = a_;
    a->sum = sum_words(a->p, a->n);
    return NULL;
}

/* GB/s reading `bytes` with `threads` threads (best of 3). */
static double read_bandwidth(const uint64_t *buf_, size_t bytes, int threads) {
    double best = 0;
    for (int rep = 0; rep < 3; rep++) {
        pthread_t th[8];
        bw_arg args[8];
        size_t per = bytes / 8 / threads;
        double t0 = now_s();
        for (int i = 0; i < threads; i++) {
            args[i] = (bw_arg){buf_ + per * i, per, 0};
            pthread_create(&th[i], NULL, bw_thread, &args[i]);
        }
        for (int i = 0; i < threads; i++) pthread_join(th[i], NULL);
        double gbs = bytes / (now_s() - t0) / 1e9;
        if (gbs > best) best = gbs;
    }
    return best;
}

/* ---- model file ---- */

static uint64_t rng = 88172645463325252ull;

static void random_payload(buf *out, pith_dtype t, uint64_t nel) {
    size_t be = pith_dtype_block_elems(t), bb = pith_dtype_block_bytes(t);
    uint64_t nb = nel / be;
    size_t start = out->n;
    for (uint64_t i = 0; i < nb * bb; i += 8) {
        uint64_t r = test_rng(&rng);
        buf_put(out, &r, nb * bb - i < 8 ? nb * bb - i : 8);
    }
    uint8_t *p = out->p + start;
    /* make every scale a small finite f16 (0.01 .. 0.02) so activations stay sane */
    for (uint64_t b = 0; b < nb; b++, p += bb) {
        uint16_t h = (uint16_t)(0x2000 | (test_rng(&rng) & 0x3ff));
        switch (t) {
        case PITH_F16:
            h |= (uint16_t)(test_rng(&rng) & 0x8000);
            memcpy(p, &h, 2);
            break;
        case PITH_BF16: {
            uint16_t bf = (uint16_t)(0x3c00 | (test_rng(&rng) & 0x807f));
            memcpy(p, &bf, 2);
            break;
        }
        case PITH_F32: {
            float f = (float)((test_rng(&rng) >> 40) * (1.0 / 16777216.0) - 0.5) * 0.05f;
            memcpy(p, &f, 4);
            break;
        }
        case PITH_Q8_0: case PITH_Q4_0: memcpy(p, &h, 2); break;
        case PITH_Q4_K: memcpy(p, &h, 2), memcpy(p + 2, &h, 2); break;
        case PITH_Q6_K: memcpy(p + 208, &h, 2); break;
        }
    }
}

typedef struct tinfo {
    char name[64];
    pith_dtype type;
    uint64_t ne0, ne1;
} tinfo;

static int write_model(const char *path, pith_dtype wt, uint64_t *weight_bytes) {
    tinfo ts[4 + 9 * LAYERS];
    int n = 0;
    uint64_t q = HEADS * HEAD_DIM, kv = KV_HEADS * HEAD_DIM;
#define T(nm, ty, a, b) (snprintf(ts[n].name, 64, "%s", nm), ts[n].type = ty, ts[n].ne0 = a, ts[n].ne1 = b, n++)
    T("token_embd.weight", wt, DIM, VOCAB);
    T("output_norm.weight", PITH_F32, DIM, 0);
    T("output.weight", wt, DIM, VOCAB);
    for (int l = 0; l < LAYERS; l++) {
        char nm[64];
#define LT(s, ty, a, b) (snprintf(nm, 64, "blk.%d.%s", l, s), T(nm, ty, a, b))
        LT("attn_norm.weight", PITH_F32, DIM, 0);
        LT("attn_q.weight", wt, DIM, q);
        LT("attn_k.weight", wt, DIM, kv);
        LT("attn_v.weight", wt, DIM, kv);
        LT("attn_output.weight", wt, q, DIM);
        LT("ffn_norm.weight", PITH_F32, DIM, 0);
        LT("ffn_gate.weight", wt, DIM, FFN);
        LT("ffn_up.weight", wt, DIM, FFN);
        LT("ffn_down.weight", wt, FFN, DIM);
#undef LT
    }
#undef T
    buf kvs = {0}, out = {0};
    int n_kv = 0;
    gguf_kv_str(&kvs, "general.architecture", "llama"), n_kv++;
    gguf_kv_u32(&kvs, "llama.context_length", 2048), n_kv++;
    gguf_kv_u32(&kvs, "llama.embedding_length", DIM), n_kv++;
    gguf_kv_u32(&kvs, "llama.block_count", LAYERS), n_kv++;
    gguf_kv_u32(&kvs, "llama.feed_forward_length", FFN), n_kv++;
    gguf_kv_u32(&kvs, "llama.attention.head_count", HEADS), n_kv++;
    gguf_kv_u32(&kvs, "llama.attention.head_count_kv", KV_HEADS), n_kv++;
    gguf_kv_f32(&kvs, "llama.attention.layer_norm_rms_epsilon", 1e-5f), n_kv++;
    gguf_kv_f32(&kvs, "llama.rope.freq_base", 10000.0f), n_kv++;
    gguf_header(&out, 3, (uint64_t)n, (uint64_t)n_kv);
    buf_put(&out, kvs.p, kvs.n);
    uint64_t off = 0;
    *weight_bytes = 0;
    for (int i = 0; i < n; i++) {
        uint64_t ne[2] = {ts[i].ne0, ts[i].ne1};
        gguf_tensor_info(&out, ts[i].name, ts[i].ne1 ? 2 : 1, ne, (uint32_t)ts[i].type, off);
        uint64_t bytes = pith_dtype_row_bytes(ts[i].type, (int64_t)ts[i].ne0) * (ts[i].ne1 ? ts[i].ne1 : 1);
        if (strcmp(ts[i].name, "token_embd.weight")) *weight_bytes += bytes; /* decode reads one row of it */
        off = (off + bytes + 31) / 32 * 32;
    }
    put_pad(&out, 32);
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    fwrite(out.p, 1, out.n, f);
    for (int i = 0; i < n; i++) {
        buf payload = {0};
        if (ts[i].ne1) {
            random_payload(&payload, ts[i].type, ts[i].ne0 * ts[i].ne1);
        } else {
            for (uint64_t k = 0; k < ts[i].ne0; k++) put_f32(&payload, 1.0f);
        }
        put_pad(&payload, 32);
        fwrite(payload.p, 1, payload.n, f);
        buf_free(&payload);
    }
    buf_free(&kvs);
    buf_free(&out);
    return fclose(f);
}

/* ---- runs ---- */

/* Prefill `n` tokens at positions start.., logits for the last only. Returns seconds. */
static double run_tokens(pith_model *m, pith_kv_cache *kv, int32_t *table, int max_blocks, int start, int n, float *logits) {
    const int vocab = m->hp.n_vocab;
    int32_t *tok = malloc(n * sizeof *tok), *pos = malloc(n * sizeof *pos), *seq = calloc(n, sizeof *seq);
    int32_t *slot = malloc(n * sizeof *slot);
    uint8_t *want = calloc(n, 1);
    for (int i = 0; i < n; i++) {
        int p = start + i;
        tok[i] = (int32_t)((p * 7919) % vocab);
        pos[i] = p;
        slot[i] = table[p / kv->block_size] * kv->block_size + p % kv->block_size;
    }
    want[n - 1] = 1;
    pith_batch b = {n, tok, pos, seq, slot, want, 1, max_blocks, table};
    pith_err err;
    double t0 = now_s();
    int rc = pith_model_forward(m, kv, &b, logits, &err);
    double t = now_s() - t0;
    if (rc) fprintf(stderr, "forward: %s\n", err.msg);
    free(tok), free(pos), free(seq), free(slot), free(want);
    return rc ? -1 : t;
}

static void bench(const char *path, const char *tname, uint64_t weight_bytes, int threads, const uint64_t *probe,
                  size_t probe_bytes) {
    pith_model_options opt = {threads};
    pith_model *m;
    pith_err err;
    if (pith_model_load(path, &opt, &m, &err)) {
        CHECKF(0, "load: %s", err.msg);
        return;
    }
    const int bs = 16, ctx = 1024, max_blocks = ctx / bs;
    pith_kv_cache kv;
    if (pith_kv_cache_init(&kv, m->hp.n_layers, m->kv_dim, bs, max_blocks, PITH_F16, &err)) {
        CHECKF(0, "%s", err.msg);
        pith_model_free(m);
        return;
    }
    int32_t table[64];
    for (int i = 0; i < max_blocks; i++) table[i] = i;
    float *logits = malloc(m->hp.n_vocab * sizeof *logits);

    /* warm-up (pages in the mapping), then 5 x 16 decode steps after a 64-token prompt */
    CHECK(run_tokens(m, &kv, table, max_blocks, 0, 64, logits) >= 0);
    double tps[5], bw[5];
    for (int r = 0; r < 5; r++) {
        double b0 = read_bandwidth(probe, probe_bytes, threads);
        double t = 0;
        for (int i = 0; i < 16; i++) t += run_tokens(m, &kv, table, max_blocks, 64 + i, 1, logits);
        double b1 = read_bandwidth(probe, probe_bytes, threads);
        tps[r] = 16 / t;
        bw[r] = (b0 + b1) / 2;
    }
    double pp[5];
    for (int r = 0; r < 5; r++) pp[r] = 64 / run_tokens(m, &kv, table, max_blocks, 128 + 64 * r, 64, logits);
    double used[5];
    for (int r = 0; r < 5; r++) used[r] = weight_bytes * tps[r] / 1e9 / bw[r];
    printf("%s %d thread%s: decode %.2f tok/s (%.2f GB/s of weights), read bandwidth %.1f GB/s, "
           "%.0f%% of bandwidth; prefill (64-token chunks) %.1f tok/s\n",
           tname, threads, threads > 1 ? "s" : " ", median5(tps), median5(tps) * weight_bytes / 1e9, median5(bw),
           100 * median5(used), median5(pp));
    fflush(stdout);
    free(logits);
    pith_kv_cache_free(&kv);
    pith_model_free(m);
}

int main(void) {
    const char *sel = getenv("PITH_BENCH");
    if (!sel || !*sel) {
        printf("SKIP: benchmark runs only with PITH_BENCH set (e.g. PITH_BENCH=Q8_0,Q4_0)\n");
        return CHECK_SKIP;
    }
    const char *th = getenv("PITH_BENCH_THREADS");
    if (!th || !*th) th = "1,2";
    size_t probe_bytes = (size_t)512 << 20;
    uint64_t *probe = malloc(probe_bytes);
    for (size_t i = 0; i < probe_bytes / 8; i++) probe[i] = i;
    static const struct { const char *name; pith_dtype t; } types[] = {
        {"F32", PITH_F32}, {"F16", PITH_F16}, {"BF16", PITH_BF16}, {"Q8_0", PITH_Q8_0},
        {"Q4_0", PITH_Q4_0}, {"Q4_K", PITH_Q4_K}, {"Q6_K", PITH_Q6_K},
    };
    const char *models = getenv("PITH_BENCH_MODEL");
    for (const char *p = models; p && *p;) {
        char path[4096];
        size_t len = strcspn(p, ",");
        snprintf(path, sizeof path, "%.*s", (int)len, p);
        pith_model_file *f;
        pith_err err;
        if (pith_model_file_open(path, &f, &err)) {
            CHECKF(0, "%s", err.msg);
        } else {
            uint64_t wbytes = 0;
            for (int i = 0; i < pith_model_file_n_tensors(f); i++) {
                const pith_tensor *t = pith_model_file_tensor_at(f, i);
                if (strcmp(t->name, "token_embd.weight") || !pith_model_file_tensor(f, "output.weight"))
                    wbytes += t->nbytes; /* decode reads one row of the embedding, unless it is the output too */
            }
            pith_model_file_close(f);
            const char *base = strrchr(path, '/');
            for (const char *q = th; *q;) {
                int n = atoi(q);
                if (n > 0) bench(path, base ? base + 1 : path, wbytes, n, probe, probe_bytes);
                q = strchr(q, ',');
                if (!q) break;
                q++;
            }
        }
        p += len;
        if (*p == ',') p++;
    }
    for (size_t i = 0; models == NULL && i < sizeof types / sizeof types[0]; i++) {
        char pat[16];
        snprintf(pat, sizeof pat, "%s", types[i].name);
        const char *hit = strstr(sel, pat);
        size_t len = strlen(pat);
        if (!hit || (hit[len] && hit[len] != ',')) continue;
        const char *path = tmp_path("bench_tinyllama.gguf");
        uint64_t wbytes;
        double t0 = now_s();
        if (write_model(path, types[i].t, &wbytes)) {
            CHECKF(0, "cannot write %s", path);
            continue;
        }
        printf("%s: wrote %.2f GB in %.1f s\n", types[i].name, wbytes / 1e9, now_s() - t0);
        for (const char *p = th; *p;) {
            int n = atoi(p);
            if (n > 0) bench(path, types[i].name, wbytes, n, probe, probe_bytes);
            p = strchr(p, ',');
            if (!p) break;
            p++;
        }
        remove(path);
    }
    free(probe);
    return check_summary("test_llama_bench");
}
