/* Replay: for every architecture built on the backend interface, two forwards of the same batch shape
 * (tokens per sequence, sequences, the rows that want logits) but other tokens, positions, block tables
 * and slots issue the same op sequence over the same buffers, through a recording backend
 * (recording_backend.h). This is the property a device backend relies on to record a step once per
 * batch-size bucket and replay it; a forward of another shape must log something else (so the log
 * does see the shape), and every forward must still compute (the logits are finite). A model loaded
 * with its multi-token-prediction head (Qwen3.5's, DeepSeek-V3's) replays its drafts too: two drafts of one shape
 * (sequences, steps) from other tokens, positions and block tables issue the same ops. Models:
 * random-weight files of each architecture in real shapes (tools/mkmodel.py). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "model/decoder.h"
#include "model_mem.h"
#include "recording_backend.h"

enum { BS = 16, N_BLOCKS = 64 };

/* Two sequences, n0 and n1 tokens, from positions p0 and p1, each in its own blocks starting at blk0
 * and blk1; the last token of each wants logits. */
typedef struct shape_batch {
    int32_t tok[16], pos[16], seq[16], slot[16], tables[2 * 8];
    uint8_t want[16];
    tm_batch tb;
} shape_batch;

static void make_batch(shape_batch *s, const pith_model *m, int n0, int n1, int p0, int p1, int blk0, int blk1,
                       int tok_seed) {
    memset(s, 0, sizeof *s);
    int n = n0 + n1;
    for (int i = 0; i < 8; i++) s->tables[i] = blk0 + i, s->tables[8 + i] = blk1 + i;
    for (int t = 0; t < n; t++) {
        int sq = t < n0 ? 0 : 1, p = sq == 0 ? p0 + t : p1 + (t - n0);
        s->seq[t] = sq;
        s->pos[t] = p;
        s->tok[t] = (tok_seed * 31 + t * 7) % m->hp.n_vocab;
        s->slot[t] = s->tables[sq * 8 + p / BS] * BS + p % BS;
        s->want[t] = t == n0 - 1 || t == n - 1;
    }
    tm_batch_init(&s->tb, m, n, s->tok, s->pos, s->seq, s->slot, s->want, 2, 8, s->tables);
}

static bool all_finite(const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return false;
    return true;
}

/* Drafts of the MTP head (model.h: mtp_draft) for n sequences at positions pos[] (in blocks from blk[]),
 * n_steps each, into the log; returns the log (the caller frees it) or NULL on failure. */
static char *draft_log(rec_backend *rec, pith_model *m, int n, const int32_t *pos, const int32_t *blk, int n_steps,
                       int tok_seed, const char *name) {
    int32_t tok[2], seq[2], tables[2 * 8], draft[2 * 16];
    uint8_t want[2] = {0};
    for (int s = 0; s < n; s++) {
        tok[s] = (tok_seed * 13 + s * 5) % m->hp.n_vocab, seq[s] = s;
        for (int i = 0; i < 8; i++) tables[s * 8 + i] = blk[s] + i;
    }
    tm_batch tb;
    tm_batch_init(&tb, m, n, tok, pos, seq, NULL, want, n, 8, tables);
    float *logits = malloc((size_t)n * n_steps * m->hp.n_vocab * sizeof *logits);
    pith_err err;
    rec_clear(rec);
    int rc = logits ? pith_model_mtp_draft(m, &tb.b, n_steps, draft, logits, &err) : -1;
    CHECKF(rc == 0, "%s: draft: %s", name, logits ? err.msg : "out of memory");
    CHECKF(rc != 0 || all_finite(logits, (size_t)n * n_steps * m->hp.n_vocab), "%s: draft logits not finite", name);
    free(logits);
    return rc == 0 && rec->log ? strdup(rec->log) : NULL;
}

static void check_drafts(rec_backend *rec, pith_model *m, const char *name) {
    /* a and b: two sequences, 4 steps, after the forwards' positions; c: another shape */
    const int32_t pa[2] = {5, 3}, ba[2] = {0, 8}, pb[2] = {22, 33}, bb[2] = {16, 24};
    char *a = draft_log(rec, m, 2, pa, ba, 4, 1, name), *b = draft_log(rec, m, 2, pb, bb, 4, 2, name);
    char *c = draft_log(rec, m, 2, pa, ba, 3, 3, name);
    CHECKF(a && (strstr(a, "mtp_attention") || strstr(a, "mtp_mla")) && strstr(a, "mtp_logits"),
           "%s: the draft's log lacks ops", name);
    bool same = a && b && strcmp(a, b) == 0;
    CHECKF(same, "%s: two drafts of one shape issued different ops:\n--- a\n%s--- b\n%s", name, a ? a : "", b ? b : "");
    CHECKF(a && c && strcmp(a, c) != 0, "%s: a draft of another shape logged the same ops", name);
    int n_ops = 0;
    for (const char *l = a; same && *l; l++) n_ops += *l == '\n';
    if (same) printf("%s: %d ops, the same for both drafts of one shape\n", name, n_ops);
    free(a), free(b), free(c);
}

static void check_model(const char *path, const char *name, bool mtp) {
    pith_err err;
    pith_model *m = NULL;
    pith_model_options o = {.n_threads = 2, .mtp = mtp};
    CHECKF(pith_model_load(path, &o, &m, &err) == 0, "%s: %s", name, err.msg);
    if (!m) return;
    if (m->ops->destroy != pith_decoder_destroy) {
        printf("%s: not on the backend interface yet\n", name);
        CHECKF(false, "%s: every architecture listed here must be on the backend interface", name);
        pith_model_free(m);
        return;
    }
    pith_decoder *d = m->impl;
    rec_backend *rec = rec_wrap(d->be);
    d->be = &rec->base;
    CHECKF(tm_alloc(m, BS, N_BLOCKS, 16, PITH_F16, &err) == 0, "%s: %s", name, err.msg);
    size_t nv = (size_t)m->hp.n_vocab;
    float *logits = malloc(2 * nv * sizeof *logits);
    char *logs[3] = {0};
    /* a: prefill 5 + 3 tokens; b: the same shape later in both sequences, other blocks and tokens;
     * c: another shape */
    const int shapes[3][7] = {{5, 3, 0, 0, 0, 8, 1}, {5, 3, 17, 30, 16, 24, 2}, {4, 3, 0, 0, 0, 8, 3}};
    for (int i = 0; i < 3 && logits; i++) {
        shape_batch sb;
        const int *s = shapes[i];
        make_batch(&sb, m, s[0], s[1], s[2], s[3], s[4], s[5], s[6]);
        rec_clear(rec);
        int rc = pith_model_forward(m, &sb.tb.b, logits, &err);
        CHECKF(rc == 0, "%s: forward %d: %s", name, i, err.msg);
        CHECKF(rc != 0 || all_finite(logits, 2 * nv), "%s: forward %d: logits not finite", name, i);
        logs[i] = rec->log ? strdup(rec->log) : NULL;
    }
    CHECKF(logs[0] && strstr(logs[0], "attention") && strstr(logs[0], "head"), "%s: the log lacks ops", name);
    bool same = logs[0] && logs[1] && strcmp(logs[0], logs[1]) == 0;
    CHECKF(same, "%s: two forwards of one shape issued different ops:\n--- a\n%s--- b\n%s", name, logs[0] ? logs[0] : "",
           logs[1] ? logs[1] : "");
    CHECKF(logs[2] && logs[0] && strcmp(logs[0], logs[2]) != 0, "%s: another shape logged the same ops", name);
    if (same) printf("%s: %d ops, the same for both batches of one shape\n", name, rec->n_ops);
    if (mtp) check_drafts(rec, m, name);
    for (int i = 0; i < 3; i++) free(logs[i]);
    free(logits);
    pith_model_free(m);
}

int main(void) {
    const char *src = getenv("PITH_SOURCE_DIR"), *tmp = getenv("PITH_TEST_TMP");
    if (!src || !tmp) {
        printf("skipped: PITH_SOURCE_DIR / PITH_TEST_TMP not set (run through ctest)\n");
        return CHECK_SKIP;
    }
    static const char *presets[] = {"test-llama-gqa", "test-qwen2",     "test-qwen3",   "test-mistral-swa",
                                    "test-smollm3",   "test-gemma3",    "test-gemma3-softcap", "test-qwen3-yarn",
                                    "test-qwen3moe",  "test-mixtral",   "test-gpt-oss", "test-lfm2",
                                    "test-qwen35",    "test-qwen35moe", "test-olmo2",  "test-granitehybrid",
                                    "test-granitehybrid-moe", "test-nemotronh", "test-qwen3next", "test-phi3", "test-phi3-plain",
                                    "test-mistral3", "test-glm4moe", "test-gemma4", "test-gemma4-e", "test-gemma4-moe", "test-deepseek2",
                                    "test-deepseek2-v2"};
    /* the last: test-qwen35 and test-deepseek2 with their MTP heads, loaded with them */
    static const char *mtp_presets[] = {"test-qwen35", "test-deepseek2"};
    int n_presets = (int)(sizeof presets / sizeof *presets);
    for (int i = 0; i < n_presets + 2; i++) {
        bool mtp = i >= n_presets;
        const char *preset = mtp ? mtp_presets[i - n_presets] : presets[i];
        char path[4200], cmd[9000], name[64];
        snprintf(name, sizeof name, "%s%s", preset, mtp ? " (MTP head)" : "");
        snprintf(path, sizeof path, "%s/replay-%s%s.gguf", tmp, preset, mtp ? "-mtp" : "");
        snprintf(cmd, sizeof cmd,
                 "/usr/bin/python3 '%s/tools/mkmodel.py' --preset %s --dtype Q8_0 --seed 7 %s--out '%s' >/dev/null", src,
                 preset, mtp ? "--mtp 1 " : "", path);
        int rc = system(cmd);
        CHECKF(rc == 0, "%s failed", cmd);
        if (rc == 0) check_model(path, name, mtp);
    }
    return check_summary("test_backend_replay");
}
