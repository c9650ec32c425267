/* The Mamba2 models' state checkpoints (batch.h, model.h: state_checkpoints; model/mamba2.c) on
 * random-weight models written by tools/mkmodel.py (test-granitehybrid, its MoE variant and
 * test-nemotronh, Q8_0):
 *
 * - at the model: a 20-token prefill asking for checkpoints after tokens 4, 11 and 19 (into spare state
 *   slots) and for every token's logits; decoding token c + 1 from checkpoint c must give that token's
 *   logits in the prefill, bit for bit (the checkpoint holds the conv and SSM state right after c, and a
 *   run is cut at a checkpoint into pieces computed exactly as the whole: the kernels carry state), and a
 *   checkpoint slot outside the pool is refused;
 * - through the engine: speculative decoding with drafts that are right for two tokens and then wrong
 *   (so every verify step rejects a tail and the state rolls back through a checkpoint) gives the same
 *   greedy tokens as decoding one token at a time, alone and batched. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "engine_run.h"
#include "core/engine_internal.h"
#include "model_mem.h"
#include "pith/engine.h"

enum { N = 4, LEN = 30, GEN = 24 };

static int32_t prompts[N][LEN], ref[N][GEN];

typedef struct out {
    int32_t toks[GEN];
    int n;
} out;

static void collect(const pith_token_event *ev, void *user) {
    out *o = user;
    if (!ev->final && o->n < GEN) o->toks[o->n++] = ev->token;
}

static void test_checkpoints(pith_model *m, const char *path) {
    enum { BS = 16, NB = 12, P = 20 };
    pith_err err;
    if (tm_alloc(m, BS, NB, 64, PITH_F32, &err)) {
        CHECKF(0, "%s: %s", path, err.msg);
        return;
    }
    int rg = -1;
    for (int g = 0; g < m->mem.n_groups; g++)
        if (m->mem.groups[g].kind == PITH_MEM_RECURRENT) rg = g;
    CHECKF(rg >= 0 && m->state_checkpoints, "%s: no recurrent group with checkpoints", path);
    const int V = m->hp.n_vocab;
    int32_t tok[P], pos[P], seq[P], slot[P], ck[P], table[2] = {0, 1}, state[1] = {2};
    uint8_t want[P];
    for (int i = 0; i < P; i++)
        tok[i] = (i * 53 + 7) % V, pos[i] = i, seq[i] = 0, slot[i] = i, ck[i] = -1, want[i] = 1;
    const int at[3] = {4, 11, 19}, into[3] = {9, 5, 11}; /* slots past max_num_seqs too */
    for (int k = 0; k < 3; k++) ck[at[k]] = into[k];
    float *lg = malloc(((size_t)P + 2) * V * sizeof *lg);
    tm_batch t;
    tm_batch_init(&t, m, P, tok, pos, seq, slot, want, 1, 2, table);
    for (int g = 0; g < m->mem.n_groups; g++) t.mem[g].state_slots = state;
    t.mem[rg].checkpoints = ck;
    CHECKF(pith_model_forward(m, &t.b, lg, &err) == 0, "%s", err.msg);
    for (int k = 0; k < 3; k++) {
        /* token at[k] + 1 from the checkpoint after at[k]: its prefill row; after the last token, the
         * checkpoint and the sequence's own slot give the same next logits */
        int c = at[k];
        int32_t ntok[1] = {c + 1 < P ? tok[c + 1] : 7}, npos[1] = {c + 1}, nseq[1] = {0}, nslot[1] = {c + 1};
        uint8_t nwant[1] = {1};
        for (int from = 0; from < (c + 1 < P ? 1 : 2); from++) {
            int32_t nstate[1] = {from ? state[0] : into[k]};
            tm_batch_init(&t, m, 1, ntok, npos, nseq, nslot, nwant, 1, 2, table);
            for (int g = 0; g < m->mem.n_groups; g++) t.mem[g].state_slots = nstate;
            CHECKF(pith_model_forward(m, &t.b, lg + (size_t)(P + from) * V, &err) == 0, "%s", err.msg);
        }
        const float *want_row = c + 1 < P ? lg + (size_t)(c + 1) * V : lg + (size_t)(P + 1) * V;
        CHECKF(!memcmp(lg + (size_t)P * V, want_row, (size_t)V * sizeof *lg),
               "%s: decoding from the checkpoint after token %d differs", path, c);
    }
    int32_t bad[P];
    memcpy(bad, ck, sizeof bad);
    bad[3] = NB;
    tm_batch_init(&t, m, P, tok, pos, seq, slot, want, 1, 2, table);
    for (int g = 0; g < m->mem.n_groups; g++) t.mem[g].state_slots = state;
    t.mem[rg].checkpoints = bad;
    CHECK(pith_model_forward(m, &t.b, lg, &err) != 0 && strstr(err.msg, "checkpoint"));
    free(lg);
    pith_model_mem_free(m);
}

/* Drafts: the reference continuation, right for two tokens, then a wrong one. */
static int draft(void *user, uint64_t id, const int32_t *tokens, int n, int32_t *d, int max) {
    (void)id;
    int V = *(int *)user;
    for (int i = 0; i < N; i++) {
        if (n < LEN - i || memcmp(tokens, prompts[i], (size_t)(LEN - i) * sizeof *tokens)) continue;
        int done = n - (LEN - i), k = 0;
        for (; k < max && k < 3 && done + k < GEN; k++) d[k] = k < 2 ? ref[i][done + k] : (ref[i][done + k] + 1) % V;
        return k;
    }
    return 0;
}

static void test_spec(pith_model *m, const char *path) {
    pith_err err;
    int V = m->hp.n_vocab;
    uint32_t x = 99;
    for (int i = 0; i < N; i++)
        for (int k = 0; k < LEN; k++) {
            x = x * 1103515245u + 12345u;
            prompts[i][k] = (int32_t)((x >> 8) % (uint32_t)V);
        }
    static out res[3][N];
    memset(res, 0, sizeof res);
    uint64_t drafted = 0, accepted = 0;
    for (int pass = 0; pass < 3; pass++) { /* 0: no speculation; 1: speculation, alone; 2: batched */
        pith_engine_options o = {.kv_blocks = 128, .max_num_seqs = 4, .max_batch_tokens = 64, .no_prefix_cache = true,
                                 .spec_type = pass ? PITH_SPEC_CUSTOM : PITH_SPEC_OFF, .spec_max_draft = 4,
                                 .spec_draft = draft, .spec_user = &V};
        pith_engine *e = NULL;
        if (pith_engine_create(m, NULL, &o, &e, &err)) {
            CHECKF(0, "%s", err.msg);
            return;
        }
        for (int i = 0; i < N; i++) {
            pith_request r = {.prompt = prompts[i], .n_prompt = LEN - i, .sampling = pith_sampling_defaults(),
                              .max_tokens = GEN, .ignore_eos = true, .on_token = collect, .user = &res[pass][i]};
            r.sampling.temperature = 0;
            CHECKF(pith_engine_submit(e, &r, NULL, &err) == 0, "submit: %s", err.msg);
            if (pass < 2) run(e);
        }
        run(e);
        if (pass == 0)
            for (int i = 0; i < N; i++) memcpy(ref[i], res[0][i].toks, sizeof ref[i]);
        pith_engine_stats st;
        pith_engine_get_stats(e, &st);
        if (pass) drafted += st.spec_draft_tokens, accepted += st.spec_accepted_tokens;
        pith_engine_free(e);
    }
    CHECKF(drafted > 0 && accepted > 0 && accepted < drafted, "%s: %llu drafted, %llu accepted", path,
           (unsigned long long)drafted, (unsigned long long)accepted);
    for (int pass = 1; pass < 3; pass++)
        for (int i = 0; i < N; i++)
            CHECKF(res[0][i].n == GEN && res[pass][i].n == GEN && !memcmp(res[0][i].toks, res[pass][i].toks, sizeof ref[i]),
                   "%s: prompt %d differs with speculation (pass %d)", path, i, pass);
    printf("%s: checkpoints hold the state after their token; speculation (%llu drafted, %llu accepted) gives the "
           "same tokens alone and batched\n",
           path, (unsigned long long)drafted, (unsigned long long)accepted);
}

int main(void) {
    const char *src = getenv("PITH_SOURCE_DIR"), *tmp = getenv("PITH_TEST_TMP");
    if (!src || !tmp) {
        printf("SKIP: PITH_SOURCE_DIR / PITH_TEST_TMP not set (run through ctest)\n");
        return CHECK_SKIP;
    }
    static const char *presets[] = {"test-granitehybrid", "test-granitehybrid-moe", "test-nemotronh"};
    for (size_t i = 0; i < sizeof presets / sizeof *presets; i++) {
        char path[4200], cmd[9000];
        snprintf(path, sizeof path, "%s/spec-%s-q8.gguf", tmp, presets[i]);
        snprintf(cmd, sizeof cmd,
                 "/usr/bin/python3 '%s/tools/mkmodel.py' --preset %s --dtype Q8_0 --seed 11 --out '%s' >/dev/null 2>&1",
                 src, presets[i], path);
        int rc = system(cmd);
        CHECKF(rc == 0, "%s failed", cmd);
        if (rc) continue;
        pith_err err;
        pith_model_options mo = {.n_threads = 2};
        pith_model *m;
        if (pith_model_load(path, &mo, &m, &err)) {
            CHECKF(0, "%s", err.msg);
            continue;
        }
        test_checkpoints(m, path);
        test_spec(m, path);
        pith_model_free(m);
    }
    return check_summary("test_granite_spec");
}
