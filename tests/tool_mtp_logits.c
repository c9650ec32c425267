/* Test helper for tests/test_reference_mtp.py: the logits of a model's MTP head (model.h: mtp_draft),
 * straight through the model API, for the float64 reference to check.
 *
 *   tool_mtp_logits MODEL STEPS CHUNK OUT SEQ [SEQ ...]
 *
 * Each SEQ is comma-separated token ids x_0..x_n. The model (loaded with its MTP head) prefills
 * x_0..x_{n-1} of every sequence together, CHUNK tokens of each per forward pass (so the head's last
 * hidden state crosses batches), then drafts STEPS tokens for all sequences in one mtp_draft call from
 * x_n at position n. OUT gets, as float32, for each sequence: the target's logits row of position n - 1,
 * then the STEPS draft rows. Exit 0, or 1 with a message. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pith/model.h"

#define MAX_SEQS 4
#define MAX_LEN 512
#define BLOCK 16

static int fail(const char *what, const pith_err *err) {
    fprintf(stderr, "tool_mtp_logits: %s%s%s\n", what, err ? ": " : "", err ? err->msg : "");
    return 1;
}

int main(int argc, char **argv) {
    if (argc < 6) return fail("usage: tool_mtp_logits MODEL STEPS CHUNK OUT SEQ [SEQ ...]", NULL);
    int steps = atoi(argv[2]), chunk = atoi(argv[3]), n_seqs = argc - 5;
    if (n_seqs > MAX_SEQS || steps < 1 || steps > 16 || chunk < 1) return fail("bad arguments", NULL);
    static int32_t toks[MAX_SEQS][MAX_LEN];
    int len[MAX_SEQS];
    for (int s = 0; s < n_seqs; s++) {
        len[s] = 0;
        for (char *p = argv[5 + s]; *p && len[s] < MAX_LEN;) {
            toks[s][len[s]++] = (int32_t)strtol(p, &p, 10);
            if (*p == ',') p++;
        }
        if (len[s] < 2) return fail("a sequence needs two tokens at least", NULL);
    }
    pith_err err;
    pith_model *m;
    pith_model_options mo = {.n_threads = 2, .mtp = true};
    if (pith_model_load(argv[1], &mo, &m, &err)) return fail("load", &err);
    const int V = m->hp.n_vocab, nb = MAX_LEN / BLOCK;
    pith_model_limits lim = {.max_batch_tokens = MAX_SEQS * MAX_LEN, .max_num_seqs = MAX_SEQS, .max_seq_len = MAX_LEN,
                             .max_logits = MAX_SEQS};
    pith_mem_layout lay = {.block_size = BLOCK, .n_groups = m->mem.n_groups};
    for (int g = 0; g < m->mem.n_groups; g++) {
        lay.type[g] = PITH_F32; /* K/V in F32: the reference's float64 differs by float32 rounding only */
        lay.n_blocks[g] = m->mem.groups[g].kind == PITH_MEM_RECURRENT ? MAX_SEQS : MAX_SEQS * nb;
    }
    if (pith_model_prepare(m, &lim, &err) || pith_model_mem_alloc(m, &lay, &err)) return fail("memory", &err);
    /* sequence s owns blocks s * nb .. and state slot s */
    static int32_t tables[PITH_MAX_MEM_GROUPS][MAX_SEQS * MAX_LEN / BLOCK], states[PITH_MAX_MEM_GROUPS][MAX_SEQS];
    static int32_t bt[MAX_SEQS * MAX_LEN], bp[MAX_SEQS * MAX_LEN], bs[MAX_SEQS * MAX_LEN], slots[MAX_SEQS * MAX_LEN];
    static uint8_t want[MAX_SEQS * MAX_LEN];
    pith_batch_mem mem[PITH_MAX_MEM_GROUPS];
    float *logits = malloc((size_t)(MAX_SEQS * (steps + 1)) * V * sizeof(float));
    float *rows = malloc((size_t)MAX_SEQS * V * sizeof(float));
    FILE *out = fopen(argv[4], "wb");
    if (!logits || !rows || !out) return fail("out of memory or cannot write OUT", NULL);
    for (int done = 0;; done += chunk) {
        /* the next chunk of each sequence's prompt x_0..x_{n-1}, sequences in order */
        int n = 0, k = 0, map[MAX_SEQS];
        for (int s = 0; s < n_seqs; s++) {
            int end = done + chunk < len[s] - 1 ? done + chunk : len[s] - 1;
            if (done >= end) continue;
            map[k] = s;
            for (int p = done; p < end; p++, n++) {
                bt[n] = toks[s][p], bp[n] = p, bs[n] = k, slots[n] = (s * nb + p / BLOCK) * BLOCK + p % BLOCK;
                want[n] = p == len[s] - 2;
            }
            k++;
        }
        if (n == 0) break;
        for (int g = 0; g < m->mem.n_groups; g++) {
            mem[g] = (pith_batch_mem){0};
            for (int i = 0; i < k; i++) {
                states[g][i] = map[i];
                for (int j = 0; j < nb; j++) tables[g][i * nb + j] = map[i] * nb + j;
            }
            if (m->mem.groups[g].kind == PITH_MEM_RECURRENT) mem[g].state_slots = states[g];
            else mem[g].slots = slots, mem[g].block_tables = tables[g], mem[g].max_blocks = nb;
        }
        pith_batch b = {.n_tokens = n, .tokens = bt, .positions = bp, .seq = bs, .want_logits = want, .n_seqs = k,
                        .n_groups = m->mem.n_groups, .mem = mem};
        if (pith_model_forward(m, &b, rows, &err)) return fail("forward", &err);
        for (int i = 0, r = 0; i < n; i++)
            if (want[i]) /* rows in batch order */
                memcpy(logits + (size_t)map[bs[i]] * (steps + 1) * V, rows + (size_t)r++ * V, (size_t)V * sizeof(float));
    }
    for (int s = 0; s < n_seqs; s++) bt[s] = toks[s][len[s] - 1], bp[s] = len[s] - 1, bs[s] = s;
    for (int g = 0; g < m->mem.n_groups; g++) {
        mem[g] = (pith_batch_mem){0};
        for (int i = 0; i < n_seqs; i++) {
            states[g][i] = i;
            for (int j = 0; j < nb; j++) tables[g][i * nb + j] = i * nb + j;
        }
        if (m->mem.groups[g].kind == PITH_MEM_RECURRENT) mem[g].state_slots = states[g];
        else mem[g].block_tables = tables[g], mem[g].max_blocks = nb;
    }
    pith_batch d = {.n_tokens = n_seqs, .tokens = bt, .positions = bp, .seq = bs, .want_logits = want,
                    .n_seqs = n_seqs, .n_groups = m->mem.n_groups, .mem = mem};
    int32_t draft[MAX_SEQS * 16];
    float *drows = malloc((size_t)n_seqs * steps * V * sizeof(float));
    if (!drows || pith_model_mtp_draft(m, &d, steps, draft, drows, &err)) return fail("mtp_draft", &err);
    for (int s = 0; s < n_seqs; s++) {
        memcpy(logits + ((size_t)s * (steps + 1) + 1) * V, drows + (size_t)s * steps * V, (size_t)steps * V * sizeof(float));
        for (int i = 0; i < steps; i++) {
            const float *r = drows + ((size_t)s * steps + i) * V;
            int best = 0;
            for (int v = 1; v < V; v++) best = r[v] > r[best] ? v : best;
            if (best != draft[s * steps + i]) return fail("a draft token is not its row's argmax", NULL);
        }
    }
    fwrite(logits, sizeof(float), (size_t)n_seqs * (steps + 1) * V, out);
    fclose(out);
    free(drows);
    free(logits);
    free(rows);
    pith_model_free(m);
    return 0;
}
