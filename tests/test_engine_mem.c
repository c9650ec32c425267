/* The engine's memory bookkeeping per group, over fake models that declare Gemma 3-like and other memory
 * specs (engine_fake_model.h): how many blocks each group holds for long sequences (window groups only
 * their window), prefix-cache hits that take only the window's blocks, pool sizing from a byte budget,
 * refusals of specs and sizes that cannot work, copy_blocks, and the limits given to prepare. The
 * randomized simulation (test_sched_sim.c) covers preemption and batching with these specs. */
#include <stdint.h>

#include "check.h"
#include "core/engine_internal.h"
#include "engine_fake_model.h"

enum { V = 101 };

typedef struct out {
    int32_t toks[64];
    int n, n_final;
    pith_finish_reason why;
    pith_usage usage;
} out;

static void collect(const pith_token_event *ev, void *user) {
    out *o = user;
    if (ev->final) {
        o->n_final++;
        o->why = ev->finish_reason;
        o->usage = ev->usage;
    } else if (o->n < 64) {
        o->toks[o->n++] = ev->token;
    }
}

static pith_request greedy(const int32_t *prompt, int n, int max_tokens, out *o) {
    pith_request r = {.prompt = prompt, .n_prompt = n, .sampling = pith_sampling_defaults(),
                      .max_tokens = max_tokens, .on_token = collect, .user = o, .ignore_eos = true};
    r.sampling.temperature = 0;
    return r;
}

static void fill(int32_t *t, int n, uint32_t seed) {
    for (int i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        t[i] = (int32_t)((seed >> 16) % V);
    }
}

static void step_checked(pith_engine *e) {
    pith_err err;
    CHECKF(pith_engine_step(e, &err) == 0, "%s (%s)", err.msg, fake_of(e->model)->first_violation);
    CHECKF(engine_check(e, &err) == 0, "%s", err.msg);
}

static bool matches(const fake_state *fs, const int32_t *prompt, int n_prompt, const out *o) {
    int32_t all[40000];
    memcpy(all, prompt, (size_t)n_prompt * sizeof *all);
    for (int i = 0; i < o->n; i++) {
        if (o->toks[i] != fake_next_for(fs, all, n_prompt + i, V)) return false;
        all[n_prompt + i] = o->toks[i];
    }
    return true;
}

/* Blocks a sequence with c computed tokens holds in a window group of window w (block size bs). */
static int window_blocks(int c, int w, int bs) {
    int first = c - w + 1 > 0 ? (c - w + 1) / bs : 0;
    return (c + bs - 1) / bs - first;
}

/* Gemma 3 4B's layer pattern (34 layers, every sixth global, window 1024) with N long sequences: after
 * every step each group holds exactly what the bookkeeping says, and the window group far less than the
 * full layout would. Prints the bytes the real shape would take. */
static void test_gemma3_accounting(void) {
    const int bs = 16, W = 1024, N = 3, LEN = 5000, GEN = 20;
    fake_group_def defs[2] = {{PITH_MEM_WINDOW, W, 29}, {PITH_MEM_FULL, 0, 5}};
    pith_model *m = fake_model_new_spec(V, 0, defs, 2, 0);
    pith_engine_options o = {.block_size = bs, .max_num_seqs = N, .max_batch_tokens = 512,
                             .max_seq_len = LEN + GEN, .no_prefix_cache = true,
                             .kv_f32 = true /* the fake model stores positions: exact in F32 only past 2048 */};
    pith_engine *e = NULL;
    pith_err err;
    CHECKF(pith_engine_create(m, NULL, &o, &e, &err) == 0, "%s", err.msg);
    if (!e) return;
    int32_t *prompts = malloc((size_t)N * LEN * sizeof *prompts);
    out res[3];
    memset(res, 0, sizeof res);
    for (int i = 0; i < N; i++) {
        fill(prompts + (size_t)i * LEN, LEN, 100 + (uint32_t)i);
        pith_request r = greedy(prompts + (size_t)i * LEN, LEN - 500 * i, GEN, &res[i]);
        CHECK(pith_engine_submit(e, &r, NULL, &err) == 0);
    }
    int max_window_used = 0, steps = 0;
    while (pith_engine_has_work(e) && steps < 10000) {
        step_checked(e);
        steps++;
        int want_window = 0, want_full = 0;
        for (int i = 0; i < e->sc.n_running; i++) {
            const seq *s = e->sc.running[i];
            want_window += window_blocks(s->n_computed, W, bs);
            /* a full group holds every block from 0: the whole prompt was reserved at admission */
            int reserved = s->n_computed > s->n_prompt ? s->n_computed : s->n_prompt;
            want_full += (reserved + bs - 1) / bs;
        }
        pith_engine_stats st;
        pith_engine_get_stats(e, &st);
        CHECKF(st.mem[0].units_used == want_window, "step %d: window group holds %d blocks, expected %d", steps,
               st.mem[0].units_used, want_window);
        CHECKF(st.mem[1].units_used == want_full, "step %d: full group holds %d blocks, expected %d", steps,
               st.mem[1].units_used, want_full);
        if (st.mem[0].units_used > max_window_used) max_window_used = st.mem[0].units_used;
    }
    for (int i = 0; i < N; i++) {
        CHECK(res[i].n_final == 1 && res[i].n == GEN && res[i].why == PITH_FINISH_LENGTH);
        CHECKF(matches(fake_of(m), prompts + (size_t)i * LEN, LEN - 500 * i, &res[i]), "sequence %d differs", i);
    }
    pith_engine_stats st;
    pith_engine_get_stats(e, &st);
    /* The window pool was sized for N windows plus a chunk each, far below N full-length sequences. */
    int per_seq_full = (LEN + GEN + bs - 1) / bs;
    CHECK(st.mem[1].units_total >= N * per_seq_full && st.mem[0].units_total < st.mem[1].units_total / 2);
    CHECK(max_window_used <= N * ((W - 1 + bs - 1) / bs + 1 + 512 / bs));
    pith_engine_free(e);

    /* One 32k-token sequence through the same spec: the blocks each group holds once it decodes, and at
     * most during prefill, priced at the real shape (K and V of 4 heads of 256 per layer, F16). */
    const int T = 32768;
    pith_engine_options o32 = {.block_size = bs, .max_num_seqs = 1, .max_batch_tokens = 2048, .max_seq_len = T + 8,
                               .kv_f32 = true};
    CHECKF(pith_engine_create(m, NULL, &o32, &e, &err) == 0, "%s", err.msg);
    int32_t *big = malloc((size_t)T * sizeof *big);
    fill(big, T, 9);
    out r32 = {0};
    pith_request rq = greedy(big, T - 1, 4, &r32);
    CHECK(e && pith_engine_submit(e, &rq, NULL, &err) == 0);
    int used_w = 0, used_f = 0;
    fake_of(m)->max_held[0] = 0;
    while (e && pith_engine_has_work(e)) {
        step_checked(e);
        pith_engine_stats s32;
        pith_engine_get_stats(e, &s32);
        if (e->sc.n_running == 1 && e->sc.running[0]->n_computed == T) {
            used_w = s32.mem[0].units_used;
            used_f = s32.mem[1].units_used;
        }
    }
    CHECK(r32.n == 4 && matches(fake_of(m), big, T - 1, &r32));
    CHECKF(used_w == window_blocks(T, W, bs) && used_f == T / bs, "at %d tokens: window %d, full %d blocks", T,
           used_w, used_f);
    /* During a 2048-token chunk the window group also holds the chunk's blocks. */
    int peak_w = fake_of(m)->max_held[0];
    CHECK(peak_w <= window_blocks(T, W, bs) + 2048 / bs + 1 && peak_w > window_blocks(T, W, bs));
    pith_engine_free(e);
    free(big);
    pith_mem_group real_w = {.kind = PITH_MEM_WINDOW, .window = W, .n_layers = 29, .type = PITH_F16,
                             .k_dim = 1024, .v_dim = 1024};
    pith_mem_group real_f = real_w;
    real_f.kind = PITH_MEM_FULL;
    real_f.n_layers = 5;
    pith_mem_group all = real_f;
    all.n_layers = 34;
    const double mib = 1048576;
    double wb = (double)pith_mem_unit_bytes(&real_w, PITH_F16, bs) * used_w;
    double fb = (double)pith_mem_unit_bytes(&real_f, PITH_F16, bs) * used_f;
    double full_layout = (double)pith_mem_unit_bytes(&all, PITH_F16, bs) * used_f;
    printf("Gemma 3 4B shape, one %d-token sequence, F16 K/V, as held by the engine: window group %d blocks = "
           "%.1f MiB, full group %d blocks = %.1f MiB, total %.1f MiB; every layer full: %.1f MiB (%.2fx more); "
           "window group at most %d blocks (%.1f MiB) during 2048-token prefill chunks\n", T, used_w, wb / mib,
           used_f, fb / mib, (wb + fb) / mib, full_layout / mib, full_layout / (wb + fb), peak_w,
           (double)pith_mem_unit_bytes(&real_w, PITH_F16, bs) * peak_w / mib);
    CHECK(full_layout / (wb + fb) > 5);
    free(prompts);
    m->ops->destroy(m);
}

/* The cached block holding p's first block in group 0, or -1. */
static int lookup_block0(pith_engine *e, const int32_t *p) {
    uint64_t name = kv_pool_chain_hash(0, p, e->opt.block_size);
    return kv_pool_lookup(&e->mem.g[0].pool, name, 0, p);
}

/* A prefix-cache hit in a window group takes only the blocks the window of the first uncached token
 * touches; a model with window groups alone hits even after the prompt's head was evicted. */
static void test_window_hits(void) {
    const int bs = 4, W = 8;
    fake_group_def defs[2] = {{PITH_MEM_FULL, 0, 2}, {PITH_MEM_WINDOW, W, 3}};
    for (int only_window = 0; only_window < 2; only_window++) {
        pith_model *m = only_window ? fake_model_new_spec(V, 0, &defs[1], 1, 1) : fake_model_new_spec(V, 0, defs, 2, 1);
        const int wg = only_window ? 0 : 1;
        pith_engine_options o = {.block_size = bs, .kv_blocks = 64, .max_num_seqs = 4, .max_seq_len = 200};
        pith_engine *e = NULL;
        pith_err err;
        CHECKF(pith_engine_create(m, NULL, &o, &e, &err) == 0, "%s", err.msg);
        if (!e) continue;
        int32_t p[64];
        fill(p, 64, 7);
        out a = {0}, b = {0};
        pith_request r = greedy(p, 64, 4, &a);
        CHECK(pith_engine_submit(e, &r, NULL, &err) == 0);
        while (pith_engine_has_work(e)) step_checked(e);
        CHECK(a.n == 4 && matches(fake_of(m), p, 64, &a));
        /* Every complete block of the prompt was named before its window moved on, so all of them are
         * cached in the window group now. */
        pith_engine_stats st;
        pith_engine_get_stats(e, &st);
        CHECKF(st.mem[wg].units_cached >= 16, "window group caches %d blocks", st.mem[wg].units_cached);
        r = greedy(p, 64, 30, &b);
        CHECK(pith_engine_submit(e, &r, NULL, &err) == 0);
        step_checked(e); /* admitted: hit of 60 tokens, the last prompt token computed */
        CHECK(e->sc.n_running == 1);
        if (e->sc.n_running == 1) {
            const seq *s = e->sc.running[0];
            CHECKF(s->cached_tokens == 60, "cached %d", s->cached_tokens);
            /* 64 tokens computed; the next one's window [57, 64] starts in block 14, and block 16 is taken
             * when that token is scheduled */
            CHECKF(s->n_computed == 64 && s->lo[wg] == (64 - W + 1) / bs && s->hi[wg] == 16,
                   "window group holds [%d, %d)", s->lo[wg], s->hi[wg]);
            if (!only_window) CHECK(s->lo[0] == 0 && s->hi[0] == 16);
        }
        while (pith_engine_has_work(e)) step_checked(e);
        CHECK(b.n == 30 && b.usage.cached_tokens == 60 && matches(fake_of(m), p, 64, &b));
        if (only_window) {
            /* Evict the head of the prompt: unrelated prompts take every free block, then some cached
             * ones (the oldest first: blocks 0, 1, ... of p). A hit still works: it needs only the
             * window before position 60. */
            /* One 40-token prompt at a time (10 blocks named each) until the 4 oldest cached blocks went:
             * p's blocks 0..3, released first as its window moved; 13 and 14 are much younger. */
            int32_t q[40];
            for (int i = 0; i < 20 && e->mem.g[0].pool.evictions < 4; i++) {
                out c = {0};
                fill(q, 40, 1000 + (uint32_t)i);
                pith_request rq = greedy(q, 40, 1, &c);
                CHECK(pith_engine_submit(e, &rq, NULL, &err) == 0);
                while (pith_engine_has_work(e)) step_checked(e);
            }
            CHECK(e->mem.g[0].pool.evictions >= 4 && e->mem.g[0].pool.evictions <= 13);
            CHECK(lookup_block0(e, p) < 0);

            out d = {0};
            pith_request rd = greedy(p, 64, 2, &d);
            CHECK(pith_engine_submit(e, &rd, NULL, &err) == 0);
            while (pith_engine_has_work(e)) step_checked(e);
            CHECK(matches(fake_of(m), p, 64, &d));
            CHECKF(d.usage.cached_tokens == 60, "%d cached after the head was evicted", d.usage.cached_tokens);
        }
        pith_engine_free(e);
        m->ops->destroy(m);
    }
}

/* Sizing: a byte budget is shared by every group's pool; the refusals are clear. */
static void test_sizing_and_refusals(void) {
    fake_group_def defs[3] = {{PITH_MEM_FULL, 0, 2}, {PITH_MEM_WINDOW, 32, 4}, {PITH_MEM_RECURRENT, 0, 1}};
    pith_model *m = fake_model_new_spec(V, 0, defs, 3, 2);
    pith_err err;
    pith_engine *e = NULL;
    const size_t budget = 1 << 20;
    pith_engine_options o = {.block_size = 8, .kv_mem_bytes = budget, .max_num_seqs = 4, .max_batch_tokens = 64,
                             .max_seq_len = 4096};
    CHECKF(pith_engine_create(m, NULL, &o, &e, &err) == 0, "%s", err.msg);
    if (e) {
        pith_engine_stats st;
        pith_engine_get_stats(e, &st);
        /* State snapshots have a budget of their own (default: two per sequence), outside kv_mem_bytes. */
        const size_t snap_bytes = (size_t)st.mem[2].snapshot_units * st.mem[2].unit_bytes;
        CHECK(st.n_mem_groups == 3 && st.mem[2].snapshot_units == 2 * 4 && st.mem_bytes - snap_bytes <= budget);
        CHECK(st.mem[0].kind == PITH_MEM_FULL && st.mem[1].kind == PITH_MEM_WINDOW && st.mem[2].kind == PITH_MEM_RECURRENT);
        /* F16, k_dim 2 + v_dim 1: 8 slots x 2 layers x 3 x 2 bytes */
        CHECK(st.mem[0].unit_bytes == 96 && st.mem[1].unit_bytes == 192 && st.mem[2].unit_bytes == sizeof(fake_rstate));
        /* windows: 4 sequences x (ceil(31/8) + 1 + 64/8) blocks */
        CHECK(st.mem[1].units_total == 4 * (4 + 1 + 8) && st.mem[2].units_total == 4 + 8);
        /* what is left goes to the full group, and one more block would not fit */
        CHECK(st.mem_bytes - snap_bytes + 96 > budget && st.mem[0].units_total > 1000);
        CHECK(fake_of(m)->prepared == 1 && fake_of(m)->limits.max_batch_tokens == 64 &&
              fake_of(m)->limits.max_num_seqs == 4 && fake_of(m)->limits.max_seq_len == pith_engine_max_seq_len(e));
        /* The model's memory belongs to this engine: a second one is refused, and the first still works. */
        pith_engine *e2 = NULL;
        CHECK(pith_engine_create(m, NULL, &o, &e2, &err) == -1 && e2 == NULL);
        out a = {0};
        int32_t p[50];
        fill(p, 50, 3);
        pith_request r = greedy(p, 50, 5, &a);
        CHECK(pith_engine_submit(e, &r, NULL, &err) == 0);
        while (pith_engine_has_work(e)) step_checked(e);
        CHECK(a.n == 5 && matches(fake_of(m), p, 50, &a) && a.usage.cached_tokens == 0);
        pith_engine_free(e);
    }
    CHECK(!pith_kv_host_allocated(&fake_of(m)->mem));
    /* Too small for one window of a lone sequence. */
    e = NULL;
    pith_engine_options tiny = {.block_size = 8, .kv_blocks = 2, .max_seq_len = 4096};
    pith_model *mw = fake_model_new_spec(V, 0, &defs[1], 1, 0);
    CHECK(pith_engine_create(mw, NULL, &tiny, &e, &err) == -1 && strstr(err.msg, "window 32") != NULL);
    /* A budget that holds no block. */
    pith_engine_options broke = {.kv_mem_bytes = 10};
    CHECK(pith_engine_create(m, NULL, &broke, &e, &err) == -1 && strstr(err.msg, "holds no block") != NULL);
    /* Bad specs are refused with the reason. */
    m->mem.groups[1].window = 0;
    CHECK(pith_engine_create(m, NULL, NULL, &e, &err) == -1 && strstr(err.msg, "window of 0") != NULL);
    m->mem.groups[1].window = 32;
    m->mem.groups[1].layers = m->mem.groups[0].layers; /* a layer in two groups */
    CHECK(pith_engine_create(m, NULL, NULL, &e, &err) == -1 && strstr(err.msg, "already in group") != NULL);
    m->mem.groups[1].layers = &fake_of(m)->layers[2];
    m->mem.groups[0].type = PITH_Q4_0;
    CHECK(pith_engine_create(m, NULL, NULL, &e, &err) == -1 && strstr(err.msg, "F32, F16, BF16 or Q8_0") != NULL);
    m->mem.groups[0].type = PITH_F16;
    CHECK(pith_engine_create(m, NULL, &o, &e, &err) == 0);
    pith_engine_free(e);
    mw->ops->destroy(mw);
    m->ops->destroy(m);
}

/* copy_blocks copies a block's K and V in every layer of a group, and refuses bad ids and groups. */
static void test_copy_blocks(void) {
    fake_group_def defs[2] = {{PITH_MEM_FULL, 0, 3}, {PITH_MEM_RECURRENT, 0, 1}};
    pith_model *m = fake_model_new_spec(V, 0, defs, 2, 0);
    pith_mem_layout lay = {.block_size = 4, .n_groups = 2, .n_blocks = {6, 2}, .type = {PITH_F32, PITH_F32}};
    pith_err err;
    CHECKF(pith_model_mem_alloc(m, &lay, &err) == 0, "%s", err.msg);
    CHECK(pith_model_mem_alloc(m, &lay, &err) == -1);
    pith_kv_cache *c = &fake_of(m)->mem.groups[0];
    float *k = c->k, *v = c->v;
    for (size_t i = 0; i < (size_t)6 * 4 * 3 * 2; i++) k[i] = (float)i;
    for (size_t i = 0; i < (size_t)6 * 4 * 3 * 1; i++) v[i] = -(float)i;
    int32_t src[2] = {1, 4}, dst[2] = {3, 0};
    CHECKF(pith_model_copy_blocks(m, 0, src, dst, 2, &err) == 0, "%s", err.msg);
    for (int l = 0; l < 3; l++)
        for (int p = 0; p < 2; p++) {
            CHECK(!memcmp(k + pith_kv_k_offset(c, l, dst[p]), k + pith_kv_k_offset(c, l, src[p]), 4 * 2 * sizeof *k));
            CHECK(!memcmp(v + pith_kv_v_offset(c, l, dst[p]), v + pith_kv_v_offset(c, l, src[p]), 4 * 1 * sizeof *v));
            CHECK(k[pith_kv_k_offset(c, l, dst[p])] != (float)pith_kv_k_offset(c, l, dst[p])); /* it did change */
        }
    CHECK(k[pith_kv_k_offset(c, 1, 2)] == (float)pith_kv_k_offset(c, 1, 2)); /* others untouched */
    int32_t bad[1] = {6};
    CHECK(pith_model_copy_blocks(m, 0, bad, dst, 1, &err) == -1);
    CHECK(pith_model_copy_blocks(m, 1, src, dst, 1, &err) == -1); /* a recurrent group has no blocks */
    CHECK(pith_model_copy_blocks(m, 2, src, dst, 1, &err) == -1);
    pith_model_mem_free(m);
    m->ops->destroy(m);
}

int main(void) {
    test_gemma3_accounting();
    test_window_hits();
    test_sizing_and_refusals();
    test_copy_blocks();
    return check_summary("test_engine_mem");
}
