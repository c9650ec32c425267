/* Held-out perplexity of a model with a given K/V cache type: what each cache type costs in accuracy
 * (docs/performance.md). Not part of the build; compile against the library:
 *
 *   cc -std=c11 -O2 -Iinclude tools/kv_perplexity.c build/libpith.a $(pkg-config --libs libcjson libpcre2-8 libmicrohttpd) -lm -lpthread -o build/kv_perplexity
 *   build/kv_perplexity MODEL IDS_FILE f32|f16|bf16|q8_0
 *
 * IDS_FILE: token ids separated by spaces or newlines (`pith tokenize` of each document, BOS first, with
 * its EOS appended), read as one stream and scored as tools/train_default.py scores the held-out text:
 * windows of 256 positions every 128, each token but BOS scored once, with at least 128 tokens of context
 * after the first window. Prints the tokens scored and the perplexity per token. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pith/batch.h"
#include "pith/engine.h"
#include "pith/model.h"

#define WIN 256
#define STRIDE 128
#define BS 16

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: kv_perplexity MODEL IDS_FILE f32|f16|bf16|q8_0\n");
        return 2;
    }
    int kt = pith_kv_type_parse(argv[3]);
    if (kt < 0) return fprintf(stderr, "unknown KV type %s\n", argv[3]), 2;
    static const pith_dtype dt[] = {PITH_F16, PITH_F32, PITH_F16, PITH_BF16, PITH_Q8_0};
    pith_err err = {{0}};
    pith_model *m;
    pith_model_options mo = {.n_threads = 2};
    if (pith_model_load(argv[1], &mo, &m, &err)) return fprintf(stderr, "%s\n", err.msg), 1;
    pith_model_limits lim = {.max_batch_tokens = WIN, .max_num_seqs = 1, .max_seq_len = WIN, .max_logits = WIN};
    pith_mem_layout lay = {.block_size = BS, .n_groups = m->mem.n_groups};
    for (int g = 0; g < lay.n_groups; g++) lay.n_blocks[g] = WIN / BS, lay.type[g] = dt[kt];
    if ((m->ops->prepare && m->ops->prepare(m, &lim, &err)) || m->ops->mem_alloc(m, &lay, &err))
        return fprintf(stderr, "%s\n", err.msg), 1;
    FILE *f = fopen(argv[2], "r");
    if (!f) return perror(argv[2]), 1;
    int V = m->hp.n_vocab;
    float *logits = malloc(sizeof(float) * WIN * V);
    int32_t pos[WIN], seq[WIN] = {0}, bt[WIN / BS], *ids = malloc(sizeof(int32_t) * (1 << 20));
    uint8_t want[WIN];
    for (int i = 0; i < WIN; i++) pos[i] = i, want[i] = 1;
    for (int i = 0; i < WIN / BS; i++) bt[i] = i;
    pith_batch_mem mem[8];
    for (int g = 0; g < 8; g++) mem[g] = (pith_batch_mem){.slots = pos, .block_tables = bt, .max_blocks = WIN / BS};
    double nll = 0;
    long scored = 0, n = 0;
    static char line[1 << 22];
    while (fgets(line, sizeof line, f))
        for (char *p = strtok(line, " \n"); p && n < (1 << 20); p = strtok(NULL, " \n")) ids[n++] = atoi(p);
    /* windows of WIN inputs predicting the next WIN tokens, every STRIDE; each target scored once */
    for (long begin = 0, done = 1;; begin += STRIDE) {
        long end = begin + WIN + 1 < n ? begin + WIN + 1 : n;
        int len = (int)(end - 1 - begin);
        pith_batch b = {.n_tokens = len, .tokens = ids + begin, .positions = pos, .seq = seq, .want_logits = want,
                        .n_seqs = 1, .n_groups = m->mem.n_groups, .mem = mem};
        if (pith_model_forward(m, &b, logits, &err)) return fprintf(stderr, "%s\n", err.msg), 1;
        for (long t = done > begin + 1 ? done : begin + 1; t < end; t++) {
            if (ids[t] == m->hp.bos_id) continue;
            const float *r = logits + (size_t)(t - begin - 1) * V;
            double mx = r[0], z = 0;
            for (int v = 1; v < V; v++) mx = r[v] > mx ? r[v] : mx;
            for (int v = 0; v < V; v++) z += exp(r[v] - mx);
            nll += mx + log(z) - r[ids[t]];
            scored++;
        }
        done = end;
        if (end == n) break;
    }
    printf("%s: %ld tokens, perplexity %.4f per token (mean NLL %.6f nats)\n", argv[3], scored, exp(nll / scored),
           nll / scored);
    fclose(f);
    free(logits);
    free(ids);
    pith_model_free(m);
    return 0;
}
