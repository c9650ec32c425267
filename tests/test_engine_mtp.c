/* Speculative decoding with the model's own MTP head (PITH_SPEC_MTP) on random-weight models with an MTP
 * layer (tools/mkmodel.py, Q8_0): Qwen3.5 (model/qwen35_mtp.c), GLM-4.5's nextn layer (model/glm4moe_mtp.c)
 * and DeepSeek-V3's (model/deepseek2_mtp.c; latent rows instead of K/V). For each:
 *   - loading the head changes no output: greedy tokens with the head loaded and speculation off equal
 *     those of the model loaded without it;
 *   - with MTP drafts, the greedy tokens are those of decoding without speculation, alone, all at once,
 *     in a pool that forces preemption, with the prefix cache and chunks of 16, with long drafts, and a
 *     chat's next turn served from a state snapshot (GLM and DeepSeek keep the last hidden state in a
 *     RECURRENT group of no layer);
 *   - every draft the engine asked for is the one the head gives for that sequence's tokens computed
 *     from scratch (the model API on fresh memory, one prefill chunk): the head's memory and its last
 *     hidden state survive chunking, batching, rollback of rejected drafts, preemption and cache hits
 *     bit for bit (its logits against the float64 references: test_reference_mtp.py,
 *     test_ref_glm4moe_mtp.py, test_ref_deepseek2_mtp.py);
 *   - drafts are accepted (in full and in part) with a copying head;
 *   - the engine refuses PITH_SPEC_MTP for a model loaded without its head, and loading the head of a
 *     file that has none is an error.
 * Integrity of the engine is checked after every step.
 *
 * On the Vulkan device (PITH_DEVICE=vulkan: tests/vulkan_run.sh runs it as vulkan_test_engine_mtp;
 * src/backend/vulkan/vk_mtp.c), where lavapipe runs it about a hundred times slower than the CPU: the
 * copying heads of Qwen3.5 and GLM-4.5 (rejected and accepted drafts), all at once: batched, preempted,
 * and with the prefix cache in chunks of 16, up to 12 drafts of each run checked from scratch (the runs of one
 * prompt at a time, long drafts and next turns stay on the CPU; vulkan_test_engine_hybrid checks the
 * state snapshots on the device). DeepSeek's head needs the latent attention the device does not run. */
#include <stdint.h>

#include "check.h"
#include "engine_run.h"
#include "core/engine_internal.h"
#include "model_mem.h"
#include "pith/engine.h"

enum { SN = 6, SGEN = 32, SLEN = 48, TURN = 8, FULL = SLEN + SGEN + TURN + SGEN, MAXLOG = 4096, BS = 16, NB = 16 };

typedef struct out {
    int32_t toks[SGEN];
    int n;
} out;

static void collect(const pith_token_event *ev, void *user) {
    out *o = user;
    if (!ev->final && o->n < SGEN) o->toks[o->n++] = ev->token;
}

/* Every draft the engine asks the head for: position, token, and the drafted tokens. */
typedef struct draft_entry {
    int32_t pos, tok, steps, draft[16];
} draft_entry;
static draft_entry draft_log[MAXLOG];
static int n_log;
static const pith_model_ops *real_ops;
static bool on_device; /* PITH_DEVICE names a Vulkan device: the lighter run the header describes */

static int logged_draft(pith_model *m, const pith_batch *b, int n_steps, int32_t *draft, float *logits, pith_err *err) {
    int rc = real_ops->mtp_draft(m, b, n_steps, draft, logits, err);
    for (int s = 0; rc == 0 && s < b->n_seqs && n_log < MAXLOG; s++) {
        draft_entry *d = &draft_log[n_log++];
        d->pos = b->positions[s], d->tok = b->tokens[s], d->steps = n_steps;
        memcpy(d->draft, draft + s * n_steps, (size_t)n_steps * sizeof(int32_t));
    }
    return rc;
}

/* The token sequences the drafts may belong to: prompt, output (and the next turn and its output). */
static int32_t seqs[2 * SN][FULL];
static int seq_len[2 * SN];

/* The head's 16 greedy drafts after seqs[i][0..p], from scratch on mref's own memory. */
static int direct_draft(pith_model *mref, int i, int p, int32_t *draft) {
    static int32_t tok[BS * NB], pos[BS * NB], sq[BS * NB], slot[BS * NB], tables[NB];
    static uint8_t want[BS * NB];
    for (int k = 0; k < NB; k++) tables[k] = k;
    for (int t = 0; t < p; t++) tok[t] = seqs[i][t], pos[t] = t, sq[t] = 0, slot[t] = t, want[t] = 0;
    tm_batch b;
    tm_batch_init(&b, mref, p, tok, pos, sq, slot, want, 1, NB, tables);
    pith_err err;
    if (pith_model_forward(mref, &b.b, NULL, &err)) {
        CHECKF(0, "direct prefill: %s", err.msg);
        return -1;
    }
    int32_t t1 = seqs[i][p], p1 = p, s1 = 0;
    uint8_t w1 = 0;
    tm_batch_init(&b, mref, 1, &t1, &p1, &s1, NULL, &w1, 1, NB, tables);
    if (pith_model_mtp_draft(mref, &b.b, 16, draft, NULL, &err)) {
        CHECKF(0, "direct draft: %s", err.msg);
        return -1;
    }
    return 0;
}

/* The head's drafts from scratch, per sequence and position, for the model being tested. */
static int32_t cache[2 * SN][FULL][16];
static bool have[2 * SN][FULL];

/* Each logged draft (on the device: at most 12, evenly spaced) must be what the head gives from scratch for a sequence
 * with that token there. Returns how many were checked. */
static int verify_log(pith_model *mref, const char *what) {
    int checked = 0, bad = 0, stride = on_device && n_log > 12 ? (n_log + 11) / 12 : 1; /* the device: at most 12 */
    for (int e = 0; e < n_log; e += stride) {
        const draft_entry *d = &draft_log[e];
        bool ok = false, any = false;
        for (int i = 0; i < 2 * SN && !ok; i++) {
            if (d->pos >= seq_len[i] || seqs[i][d->pos] != d->tok || d->pos < 1) continue;
            any = true;
            if (!have[i][d->pos]) {
                if (direct_draft(mref, i, d->pos, cache[i][d->pos])) return checked;
                have[i][d->pos] = true;
            }
            ok = !memcmp(cache[i][d->pos], d->draft, (size_t)d->steps * sizeof(int32_t));
        }
        checked++;
        if (!ok) bad++;
        if (!ok && bad <= 3) {
            fprintf(stderr, "%s: draft at position %d after token %d (%d steps: %d %d ..) is not the head's from scratch%s\n",
                    what, d->pos, d->tok, d->steps, d->draft[0], d->steps > 1 ? d->draft[1] : -1,
                    any ? "" : " (no sequence has that token there)");
            for (int i = 0; i < 2 * SN; i++)
                if (have[i][d->pos] && seqs[i][d->pos] == d->tok)
                    fprintf(stderr, "  sequence %d (length %d): %d %d ..\n", i, seq_len[i], cache[i][d->pos][0], cache[i][d->pos][1]);
        }
    }
    CHECKF(n_log > 0 && bad == 0, "%s: %d of %d drafts differ from the head's from scratch", what, bad, checked);
    return checked;
}

typedef struct spec_run {
    out res[SN], next[SN];
    pith_engine_stats st;
} spec_run;

/* The SN prompts with these options: alone one after another, or all at once; with turn2, each prompt's
 * next turn (prompt, its output, TURN more tokens) right after it. */
static void generate(pith_model *m, pith_engine_options o, int32_t (*ids)[SLEN], bool together, bool turn2,
                     spec_run *r) {
    pith_err err;
    pith_engine *e = NULL;
    memset(r, 0, sizeof *r);
    if (pith_engine_create(m, NULL, &o, &e, &err)) {
        CHECKF(0, "%s", err.msg);
        return;
    }
    for (int i = 0; i < SN; i++) {
        pith_request q = {.prompt = ids[i], .n_prompt = SLEN - i, .sampling = pith_sampling_defaults(),
                          .max_tokens = SGEN, .ignore_eos = true, .on_token = collect, .user = &r->res[i]};
        q.sampling.temperature = 0;
        CHECKF(pith_engine_submit(e, &q, NULL, &err) == 0, "submit: %s", err.msg);
        if (!together) run(e);
        if (!turn2) continue;
        q.prompt = seqs[SN + i], q.n_prompt = SLEN - i + SGEN + TURN, q.user = &r->next[i];
        CHECKF(pith_engine_submit(e, &q, NULL, &err) == 0, "submit: %s", err.msg);
        run(e);
    }
    run(e);
    pith_engine_get_stats(e, &r->st);
    pith_engine_free(e);
}

static int load(const char *path, bool mtp, pith_model **m) {
    pith_err err;
    pith_model_options mo = {.n_threads = 2, .mtp = mtp};
    int rc = pith_model_load(path, &mo, m, &err);
    CHECKF(rc == 0, "load %s: %s", path, err.msg);
    return rc;
}

static void test_model(const char *path, const char *plain_path, bool accepts) {
    pith_model *mplain = NULL, *m = NULL, *mref = NULL;
    if (load(path, false, &mplain) || load(path, true, &m) || load(path, true, &mref)) goto done;
    CHECK(m->has_mtp && !mplain->has_mtp && m->state_checkpoints);
    memset(have, 0, sizeof have);
    pith_err err;
    CHECKF(tm_alloc(mref, BS, NB, BS * NB, PITH_F16, &err) == 0, "%s", err.msg);
    real_ops = m->ops;
    static pith_model_ops ops;
    ops = *m->ops;
    ops.mtp_draft = logged_draft;
    m->ops = &ops;

    static int32_t ids[SN][SLEN];
    uint32_t x = 977;
    for (int i = 0; i < SN; i++)
        for (int k = 0; k < SLEN; k++) {
            x = x * 1103515245u + 12345u;
            ids[i][k] = k < 20 && (i & 1) ? ids[i - 1][k] : (int32_t)((x >> 8) % (uint32_t)m->hp.n_vocab);
        }
    /* the plain model's tokens: the first turn, then each next turn */
    static spec_run base, got;
    pith_engine_options o0 = {.kv_blocks = 256, .max_num_seqs = 8, .no_prefix_cache = true};
    generate(mplain, o0, ids, on_device, false, &base); /* all at once == alone: test_engine_models */
    for (int i = 0; i < SN; i++) {
        int n = SLEN - i;
        memcpy(seqs[i], ids[i], (size_t)n * sizeof(int32_t));
        memcpy(seqs[i] + n, base.res[i].toks, SGEN * sizeof(int32_t));
        seq_len[i] = n + SGEN;
        memcpy(seqs[SN + i], seqs[i], (size_t)seq_len[i] * sizeof(int32_t));
        for (int k = 0; k < TURN; k++) seqs[SN + i][seq_len[i] + k] = (int32_t)((i * 31 + k * 7 + 3) % m->hp.n_vocab);
        seq_len[SN + i] = seq_len[i] + TURN;
    }
    if (!on_device) {
        generate(mplain, o0, ids, false, true, &base);
        for (int i = 0; i < SN; i++) {
            memcpy(seqs[SN + i] + seq_len[SN + i], base.next[i].toks, SGEN * sizeof(int32_t));
            seq_len[SN + i] += SGEN;
        }
    }
    /* the head loaded, no speculation: the same tokens */
    generate(m, o0, ids, on_device, false, &got);
    for (int i = 0; i < SN; i++)
        CHECKF(!memcmp(got.res[i].toks, base.res[i].toks, SGEN * sizeof(int32_t)), "%s: the head changes prompt %d's tokens",
               path, i);
    /* 0: alone; 1: all at once; 2: all at once in a pool that forces preemption; 3: all at once with the
     * prefix cache (the pairs share 20 tokens) and chunks of 16; 4: alone, long drafts; 5: alone with
     * each prompt's next turn, the prefix cache on (served from the first turn's state snapshot) */
    int per_seq = (SLEN + SGEN + BS - 1) / BS + 1;
    for (int cfg = 0; cfg < 6; cfg++) {
        if (on_device && (cfg == 0 || cfg == 4 || cfg == 5)) continue; /* the runs one prompt at a time */
        pith_engine_options o = {.kv_blocks = cfg == 2 ? 2 * per_seq : 256, .max_num_seqs = 8,
                                 .max_batch_tokens = cfg == 3 ? 16 : 0, .no_prefix_cache = cfg != 3 && cfg != 5,
                                 .spec_type = PITH_SPEC_MTP, .spec_max_draft = cfg == 4 ? 16 : 5, .spec_max_seqs = 8};
        n_log = 0;
        generate(m, o, ids, cfg == 1 || cfg == 2 || cfg == 3, cfg == 5, &got);
        for (int i = 0; i < SN; i++) {
            CHECKF(got.res[i].n == SGEN && !memcmp(got.res[i].toks, base.res[i].toks, SGEN * sizeof(int32_t)),
                   "%s: MTP cfg %d: prompt %d differs", path, cfg, i);
            if (cfg == 5)
                CHECKF(got.next[i].n == SGEN && !memcmp(got.next[i].toks, base.next[i].toks, SGEN * sizeof(int32_t)),
                       "%s: MTP cfg 5: next turn %d differs", path, i);
        }
        CHECKF(got.st.spec_draft_tokens > 0, "%s: cfg %d: no drafts", path, cfg);
        if (accepts) /* drafts accepted in full, in part and not at all */
            CHECKF(got.st.spec_accepted_tokens > 0 && got.st.spec_accepted_tokens < got.st.spec_draft_tokens,
                   "%s: cfg %d: %llu of %llu draft tokens accepted", path, cfg,
                   (unsigned long long)got.st.spec_accepted_tokens, (unsigned long long)got.st.spec_draft_tokens);
        if (cfg == 2) CHECKF(got.st.preemptions > 0, "%s: no preemption with speculation", path);
        if (cfg == 5) CHECKF(got.st.state_restores > 0, "%s: next turns: no state restores", path);
        char what[64];
        snprintf(what, sizeof what, "MTP cfg %d", cfg);
        int checked = verify_log(mref, what);
        printf("%s: MTP drafts, cfg %d: same tokens; %llu/%llu draft tokens accepted, %d of %d drafts checked, %llu steps "
               "(%llu without), %llu preemptions, %llu prefix hits, %llu state restores\n", path, cfg,
               (unsigned long long)got.st.spec_accepted_tokens, (unsigned long long)got.st.spec_draft_tokens, checked, n_log,
               (unsigned long long)got.st.steps, (unsigned long long)base.st.steps, (unsigned long long)got.st.preemptions,
               (unsigned long long)got.st.prefix_cache_hits, (unsigned long long)got.st.state_restores);
    }
    /* refusals */
    pith_engine *e = NULL;
    pith_engine_options bad = {.spec_type = PITH_SPEC_MTP};
    CHECKF(pith_engine_create(mplain, NULL, &bad, &e, &err) != 0 && strstr(err.msg, "MTP"),
           "MTP speculation on a model loaded without its head: %s", e ? "accepted" : err.msg);
    pith_model *none = NULL;
    pith_model_options mo = {.mtp = true};
    CHECKF(pith_model_load(plain_path, &mo, &none, &err) != 0 && strstr(err.msg, "no multi-token-prediction"),
           "loading the head of a file without one: %s", none ? "accepted" : err.msg);
    pith_model_free(none);
done:
    if (m) m->ops = real_ops;
    pith_model_free(mplain);
    pith_model_free(m);
    pith_model_free(mref);
}

int main(void) {
    const char *src = getenv("PITH_SOURCE_DIR"), *tmp = getenv("PITH_TEST_TMP");
    if (!src || !tmp) {
        printf("SKIP: PITH_SOURCE_DIR / PITH_TEST_TMP not set (run through ctest)\n");
        return CHECK_SKIP;
    }
    /* per architecture: a random head (its drafts are rarely taken: the head's memory and hidden state
     * checked through its drafts); a copying head on a model damped so that it often repeats a token
     * (drafts accepted in full and in part: rollback); the first shape without a head */
    static const struct {
        const char *arch, *extra[3];
    } models[] = {
        {"qwen35", {"--preset test-qwen35 --mtp 1", "--preset test-qwen35 --mtp 1 --mtp-copy --damp 0:0.2",
                    "--preset test-qwen35"}},
        {"glm4moe", {"--preset test-glm4moe", "--preset test-glm4moe-mtp-copy", "--preset test-glm4moe --mtp 0"}},
        {"deepseek2", {"--preset test-deepseek2 --mtp 1", "--preset test-deepseek2-mtp-copy",
                       "--preset test-deepseek2"}},
    };
    static const char *names[3] = {"mtp", "mtp-copy", "plain"};
    const char *dev = getenv("PITH_DEVICE");
    on_device = dev && !strncmp(dev, "vulkan", 6);
    setvbuf(stdout, NULL, _IOLBF, 0);
    for (size_t a = 0; a < sizeof models / sizeof *models; a++) {
        if (on_device && !strcmp(models[a].arch, "deepseek2")) {
            printf("== deepseek2: left to the CPU run (its MLA is not on the Vulkan device)\n");
            continue;
        }
        char path[3][4200], cmd[13000];
        for (int i = 0; i < 3; i++) {
            snprintf(path[i], sizeof path[i], "%s/engine-%s-%s-q8.gguf", tmp, models[a].arch, names[i]);
            snprintf(cmd, sizeof cmd,
                     "/usr/bin/python3 '%s/tools/mkmodel.py' %s --dtype Q8_0 --seed 7 --out '%s' >/dev/null 2>&1", src,
                     models[a].extra[i], path[i]);
            int rc = system(cmd);
            CHECKF(rc == 0, "%s failed", cmd);
            if (rc) return check_summary("test_engine_mtp");
        }
        printf("== %s\n", models[a].arch);
        if (!on_device) test_model(path[0], path[2], false);
        test_model(path[1], path[2], true);
    }
    return check_summary("test_engine_mtp");
}
