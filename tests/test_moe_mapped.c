/* Experts kept in the file's mapping (PITH_MOE_EXPERTS=mapped, backend/cpu/moe.h) against experts repacked at
 * load (PITH_MOE_EXPERTS=repacked), on a random-weight Qwen3-MoE file written by tools/mkmodel.py whose
 * experts are most of its bytes (3 layers of 32 experts of 256 x 512, Q8_0: 40 MiB of experts, about
 * 1.5 MiB of the rest):
 *   - the same logits and greedy tokens both ways, from two prompts: to the activation rounding's reach
 *     in Q8_0 (below), and in MXFP4 likewise where the kernel table repacks it (every SIMD table),
 *     exactly where it does not (scalar: the same tile either way);
 *   - the resident memory a load adds (VmRSS from /proc/self/statm, before and after): with the experts
 *     mapped at most the dense weights plus a quarter of the experts plus 8 MiB of slack (allocator,
 *     page tables, the prefaulted headers); repacked at least three quarters of the experts (the packed
 *     copy). Generous margins: what is checked is that the experts' pages are not held after a mapped
 *     load, and are (as anonymous memory) after a repacked one;
 *   - the model says which was chosen (pith_model.experts), and a bad PITH_MOE_EXPERTS is refused.
 * Where the kernel table has no packed layout for Q8_0 (PITH_FORCE_SCALAR) both loads leave the experts
 * in the file and only the tokens are compared. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/cpu/cpu.h"
#include "check.h"
#include "pith/engine.h"
#include "pith/model.h"

#define GEN 24

#define VOCAB 512

typedef struct out {
    int32_t toks[GEN];
    float gap[GEN];      /* best logit minus the second best, per step */
    float first[VOCAB];  /* the logits of the first step */
    int n;
} out;

static void collect(const pith_token_event *ev, void *user) {
    out *o = user;
    if (ev->final || o->n >= GEN || !ev->logits) return;
    float b1 = -1e30f, b2 = -1e30f;
    for (int i = 0; i < VOCAB; i++) {
        float v = ev->logits[i];
        if (v > b1) b2 = b1, b1 = v;
        else if (v > b2) b2 = v;
    }
    if (o->n == 0) memcpy(o->first, ev->logits, sizeof o->first);
    o->gap[o->n] = b1 - b2;
    o->toks[o->n++] = ev->token;
}

static double rss_mib(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    long size = 0, res = 0;
    if (!f) return -1;
    if (fscanf(f, "%ld %ld", &size, &res) != 2) res = -1;
    fclose(f);
    return res < 0 ? -1 : (double)res * (double)sysconf(_SC_PAGESIZE) / (1 << 20);
}

/* Loads path with PITH_MOE_EXPERTS=mode, records the resident memory the load added, generates GEN greedy
 * tokens from each of two prompts. Returns false when the load failed. */
static bool run_mode(const char *path, const char *mode, out res[2], double *rss_added, char *what, size_t what_n) {
    setenv("PITH_MOE_EXPERTS", mode, 1);
    double before = rss_mib();
    pith_model *m = NULL;
    pith_err err = {0};
    pith_model_options mo = {.n_threads = 2};
    int rc = pith_model_load(path, &mo, &m, &err);
    CHECKF(rc == 0, "%s (%s): %s", path, mode, err.msg);
    if (rc) return false;
    *rss_added = rss_mib() - before;
    snprintf(what, what_n, "%s", m->experts);
    pith_engine *e = NULL;
    pith_engine_options eo = {.kv_blocks = 0};
    CHECKF(pith_engine_create(m, NULL, &eo, &e, &err) == 0, "%s", err.msg);
    int32_t p0[] = {1, 17, 300, 42, 9}, p1[] = {1, 5, 5, 5, 480, 77, 3};
    int32_t *ps[2] = {p0, p1};
    int ns[2] = {5, 7};
    for (int i = 0; e && i < 2; i++) {
        memset(&res[i], 0, sizeof res[i]);
        pith_request r = {.prompt = ps[i], .n_prompt = ns[i], .sampling = pith_sampling_defaults(),
                          .max_tokens = GEN, .ignore_eos = true, .on_token = collect, .user = &res[i], .return_logits = true};
        r.sampling.temperature = 0;
        CHECKF(pith_engine_submit(e, &r, NULL, &err) == 0, "submit: %s", err.msg);
    }
    while (e && pith_engine_has_work(e)) {
        rc = pith_engine_step(e, &err);
        CHECKF(rc == 0, "%s", err.msg);
        if (rc) break;
    }
    pith_engine_free(e);
    pith_model_free(m);
    return true;
}

static bool write_model(const char *src, const char *path, const char *dtype) {
    char cmd[9000];
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 '%s/tools/mkmodel.py' --arch qwen3moe --dim 256 --layers 3 --heads 4 --kv-heads 2 "
             "--head-dim 64 --ffn 512 --vocab 512 --ctx 256 --experts 32 --experts-used 4 --expert-ffn 512 "
             "--tied --dtype %s --seed 5 --out '%s' >/dev/null",
             src, dtype, path);
    int rc = system(cmd);
    CHECKF(rc == 0, "%s failed", cmd);
    return rc == 0;
}

static void compare(const char *path, const char *dtype, bool check_rss, bool exact) {
    out mapped[2], repacked[2];
    double rss_mapped = 0, rss_repacked = 0;
    char what_m[160], what_r[160];
    if (!run_mode(path, "mapped", mapped, &rss_mapped, what_m, sizeof what_m) ||
        !run_mode(path, "repacked", repacked, &rss_repacked, what_r, sizeof what_r))
        return;
    /* Packed and file-layout tiles sum in different orders: the same function up to float rounding. But
     * 8-bit activations are coarse where a row has an outlier (steps of max|x| / 127), so a rounding-level
     * change can move an activation by a whole step, and through 3 layers such flips reach a few percent
     * of the logits on some prompts (the scalar and the AVX-512 file-layout tiles differ from each other
     * as much; with all 32 experts used, no routing involved, too). Checked, then: the first step's
     * logits agree to 5e-2 of their largest magnitude (a wrong expert or row moves them by their whole
     * scale), and a run that parts from the other has a near-tie where it parts (a gap below that).
     * MXFP4 too: on the SIMD tables its repacked experts run a packed tile (avx512-vnni: the IQ4_NL-style
     * one; avx2, avx2-vnni: the maddubs lanes tile); on the scalar table it is never repacked, and both
     * loads give the same bits. */
    const double tol = exact ? 0 : 5e-2;
    int differ = 0;
    for (int i = 0; i < 2; i++) {
        CHECKF(mapped[i].n == GEN && repacked[i].n == GEN, "%s: prompt %d: %d and %d tokens", dtype, i, mapped[i].n,
               repacked[i].n);
        double big = 0, diff = 0;
        for (int v = 0; v < VOCAB; v++) {
            big = fmax(big, fabs(mapped[i].first[v]));
            diff = fmax(diff, fabs(mapped[i].first[v] - repacked[i].first[v]));
        }
        CHECKF(diff <= tol * big, "%s: prompt %d: first logits differ by %.3g (largest %.3g)", dtype, i, diff, big);
        int k = 0;
        while (k < mapped[i].n && k < repacked[i].n && mapped[i].toks[k] == repacked[i].toks[k]) k++;
        if (k < GEN) {
            differ++;
            CHECKF(!exact && mapped[i].gap[k] <= tol * big, "%s: prompt %d: tokens part at step %d with a gap of %.3g", dtype,
                   i, k, mapped[i].gap[k]);
            printf("%s: prompt %d: tokens part at step %d, a near-tie (gap %.2g of logits up to %.2g)\n", dtype, i, k,
                   mapped[i].gap[k], big);
        }
        printf("%s: prompt %d: first logits differ by %.2g (largest %.2g)\n", dtype, i, diff, big);
    }
    CHECKF(strncmp(what_m, "mapped from the file", 20) == 0, "%s: mapped load says '%s'", dtype, what_m);
    printf("%s: %s greedy tokens; mapped: %s, +%.1f MiB resident after load; repacked: %s, +%.1f MiB\n", dtype,
           differ ? "different" : "same", what_m, rss_mapped, what_r, rss_repacked);
    if (!check_rss) return;
    const double block_bytes = strcmp(dtype, "MXFP4") == 0 ? 17 : 34; /* per 32 weights */
    const double experts = 3.0 * 32 * 3 * 512 * 256 * block_bytes / 32 / (1 << 20), dense = 2.0;
    if (strncmp(what_r, "repacked", 8) != 0) {
        printf("%s: resident memory not compared: this kernel table keeps %s in the file layout\n", dtype, dtype);
        return;
    }
    CHECKF(rss_mapped <= dense + experts / 4 + 8, "%s: mapped load added %.1f MiB (experts %.1f MiB)", dtype,
           rss_mapped, experts);
    CHECKF(rss_repacked >= 0.75 * experts, "%s: repacked load added only %.1f MiB (experts %.1f MiB)", dtype,
           rss_repacked, experts);
}

int main(void) {
    const char *src = getenv("PITH_SOURCE_DIR"), *tmp = getenv("PITH_TEST_TMP");
    if (!src || !tmp) {
        printf("skipped: PITH_SOURCE_DIR / PITH_TEST_TMP not set (run through ctest)\n");
        return 77;
    }
    char path[4200];
    snprintf(path, sizeof path, "%s/moe-mapped-q8_0.gguf", tmp);
    if (write_model(src, path, "Q8_0")) {
        compare(path, "Q8_0", true, false);
        setenv("PITH_MOE_EXPERTS", "sometimes", 1);
        pith_model *m = NULL;
        pith_err err = {0};
        CHECK(pith_model_load(path, NULL, &m, &err) != 0 && strstr(err.msg, "PITH_MOE_EXPERTS") != NULL);
        printf("PITH_MOE_EXPERTS=sometimes: %s\n", err.msg);
        unsetenv("PITH_MOE_EXPERTS");
        remove(path);
    }
    snprintf(path, sizeof path, "%s/moe-mapped-mxfp4.gguf", tmp);
    if (write_model(src, path, "MXFP4")) {
        /* repacked only where the kernel table has an MXFP4 packer (every SIMD table); elsewhere both
         * loads keep the file layout and must agree exactly */
        pith_cpu probe_cpu;
        pith_err perr = {0};
        bool packs = false;
        if (pith_cpu_init(&probe_cpu, 1, false, &perr) == 0) {
            packs = probe_cpu.k->pack[PITH_W_MXFP4] != NULL;
            pith_cpu_free(&probe_cpu);
        }
        compare(path, "MXFP4", packs, !packs);
        remove(path);
    }
    return check_summary("test_moe_mapped");
}
