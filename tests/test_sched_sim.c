/* Randomized simulation of the engine over a fake model (engine_fake_model.h) that declares a random
 * memory spec (one FULL group; FULL + WINDOW groups; WINDOW groups alone; FULL + WINDOW + RECURRENT;
 * always with some layers that keep no memory at all): thousands of steps with
 * random arrivals, prompt lengths (sharing prefixes), output lengths, stop tokens, priorities,
 * cancellations (from outside and from inside callbacks), submissions from callbacks, pool sizes, block
 * sizes, batch limits and one planned model failure. After every step the engine's integrity check runs
 * (pool counts and lists, every block's refcount equal to the sequences holding it). At the end: every
 * accepted request got exactly one final event and nothing after it; its tokens are exactly the greedy
 * continuation computed without any cache (or a prefix of it when cancelled or failed); no block is
 * left in use. */
#include <stdint.h>

#include "check.h"
#include "core/engine_internal.h"
#include "engine_fake_model.h"

typedef struct rec {
    uint64_t id;
    int32_t *prompt;
    int n_prompt;
    int max_tokens;
    int32_t stop_id;      /* -1: none */
    int priority;
    int32_t out[2048];
    int n_out;
    int n_final;
    int events_after_final;
    pith_finish_reason why;
    pith_usage usage;
    bool cancel_sent;
    int sibling;          /* index among the n of its request */
} rec;

typedef struct sim {
    pith_engine *e;
    rec *recs;
    int n_recs;
    int cap_recs;
    uint64_t rng;
    int n_vocab;
    int32_t bases[4][48];
    int callback_actions;
} sim;

static uint32_t rnd(sim *S, uint32_t n) {
    S->rng = S->rng * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(S->rng >> 33) % n;
}

static void submit_random(sim *S);

static void on_token(const pith_token_event *ev, void *user) {
    sim *S = ((void **)user)[0];
    rec *r = &S->recs[(intptr_t)((void **)user)[1] + ev->index]; /* siblings (n > 1) follow their first */
    CHECK(ev->request_id == r->id);
    if (r->n_final) {
        r->events_after_final++;
        return;
    }
    if (ev->final) {
        r->n_final++;
        r->why = ev->finish_reason;
        r->usage = ev->usage;
        CHECK(ev->token == -1 && ev->text && ev->text_len == 0);
    } else {
        CHECK(ev->text && ev->text_len == 0 && !ev->has_logprob); /* no tokenizer: no text */
        if (r->n_out < 2048) r->out[r->n_out++] = ev->token;
        /* Callbacks may submit and cancel. */
        uint32_t act = rnd(S, 200);
        if (act == 0) {
            submit_random(S);
            S->callback_actions++;
        } else if (act == 1 && S->n_recs > 0) {
            rec *victim = &S->recs[rnd(S, (uint32_t)S->n_recs)];
            if (victim->id && !victim->n_final && pith_engine_cancel(S->e, victim->id) == 0) victim->cancel_sent = true;
            S->callback_actions++;
        }
    }
}

/* user pointers: a pair (sim, index), kept in a side table so recs can be reallocated. */
static void *user_pairs[20000][2];

static void submit_random(sim *S) {
    /* Sometimes several samples of one prompt (pith_request.n): greedy, so each must equal the rest. */
    int n_sib = rnd(S, 6) == 0 ? 2 + (int)rnd(S, 3) : 1;
    if (S->n_recs + n_sib > 20000) return;
    if (S->n_recs + n_sib > S->cap_recs) return; /* recs never move: cap fixed per run */
    int idx = S->n_recs;
    rec *r = &S->recs[idx];
    memset(r, 0, sizeof *r);
    int max_len = pith_engine_max_seq_len(S->e);
    /* A prefix of one of the shared bases, then a random tail; sometimes longer than allowed. */
    int from_base = (int)rnd(S, 49);
    int tail = (int)rnd(S, 24);
    if (rnd(S, 30) == 0) tail += max_len;
    int n = from_base + tail;
    if (n == 0) n = 1;
    r->prompt = malloc((size_t)n * sizeof *r->prompt);
    const int32_t *base = S->bases[rnd(S, 4)];
    for (int i = 0; i < n; i++) r->prompt[i] = i < from_base ? base[i] : (int32_t)rnd(S, (uint32_t)S->n_vocab);
    r->n_prompt = n;
    r->max_tokens = rnd(S, 8) == 0 ? 0 : 1 + (int)rnd(S, 40);
    r->stop_id = rnd(S, 3) == 0 ? (int32_t)rnd(S, (uint32_t)S->n_vocab) : -1;
    r->priority = (int)rnd(S, 3);
    user_pairs[idx][0] = S;
    user_pairs[idx][1] = (void *)(intptr_t)idx;
    pith_request q = {
        .prompt = r->prompt, .n_prompt = n, .sampling = pith_sampling_defaults(), .max_tokens = r->max_tokens,
        .stop_ids = &r->stop_id, .n_stop_ids = r->stop_id >= 0, .priority = r->priority,
        .on_token = on_token, .user = user_pairs[idx], .n = n_sib,
    };
    q.sampling.temperature = 0;
    for (int k = 1; k < n_sib; k++) {
        rec *c = &S->recs[idx + k];
        *c = *r;
        c->prompt = malloc((size_t)n * sizeof *c->prompt);
        memcpy(c->prompt, r->prompt, (size_t)n * sizeof *c->prompt);
        c->sibling = k;
    }
    pith_err err;
    uint64_t id;
    int rc = pith_engine_submit(S->e, &q, &id, &err);
    S->n_recs += n_sib;
    for (int k = 0; k < n_sib; k++) {
        rec *c = &S->recs[idx + k];
        if (n >= max_len) {
            CHECKF(rc == PITH_SUBMIT_INVALID, "prompt of %d tokens (limit %d) gave %d", n, max_len, rc);
            c->n_final = -1; /* rejected: expects no events */
            c->id = 0;
        } else {
            CHECKF(rc == 0, "submit failed: %s", err.msg);
            c->id = id + (uint64_t)k;
        }
    }
}

/* The greedy continuation must match fake_next step by step. */
static void verify(sim *S, const fake_state *fs, int max_len, int *n_errors, int *n_cancelled) {
    for (int i = 0; i < S->n_recs; i++) {
        rec *r = &S->recs[i];
        if (r->n_final == -1) {
            CHECK(r->n_out == 0);
            continue;
        }
        CHECKF(r->n_final == 1, "request %llu got %d final events", (unsigned long long)r->id, r->n_final);
        CHECK(r->events_after_final == 0);
        int32_t *all = malloc((size_t)(r->n_prompt + r->n_out) * sizeof *all);
        memcpy(all, r->prompt, (size_t)r->n_prompt * sizeof *all);
        int match = 0;
        for (int k = 0; k < r->n_out; k++) {
            if (r->out[k] != fake_next_for(fs, all, r->n_prompt + k, S->n_vocab)) break;
            all[r->n_prompt + k] = r->out[k];
            match++;
        }
        CHECKF(match == r->n_out, "request %llu: token %d differs from the uncached reference",
               (unsigned long long)r->id, match);
        int limit = max_len - r->n_prompt;
        if (r->max_tokens > 0 && r->max_tokens < limit) limit = r->max_tokens;
        bool stopped = r->n_out > 0 && r->out[r->n_out - 1] == r->stop_id;
        for (int k = 0; k + 1 < r->n_out; k++) CHECK(r->out[k] != r->stop_id);
        switch (r->why) {
        case PITH_FINISH_STOP: CHECK(stopped && r->n_out <= limit); break;
        case PITH_FINISH_LENGTH: CHECK(!stopped && r->n_out == limit); break;
        case PITH_FINISH_CANCELLED: CHECK(r->cancel_sent && r->n_out <= limit); (*n_cancelled)++; break;
        case PITH_FINISH_ERROR: CHECK(r->n_out < limit); (*n_errors)++; break;
        default: CHECKF(0, "request %llu: finish reason %d", (unsigned long long)r->id, r->why);
        }
        CHECK(r->usage.prompt_tokens == r->n_prompt && r->usage.completion_tokens == r->n_out);
        /* a forked sibling computed none of its prompt */
        CHECK(r->usage.cached_tokens >= 0 && (r->usage.cached_tokens < r->n_prompt || r->sibling > 0));
        free(all);
    }
}

/* A random memory spec: kind 0 one FULL group, 1 FULL + WINDOW, 2 WINDOW groups only, 3 FULL + WINDOW +
 * RECURRENT, 4 RECURRENT only (a pure state-space model: hits come from snapshots alone). Returns the
 * number of groups. */
static int random_spec(sim *S, int kind, fake_group_def *d, int *n_free) {
    int n = 0;
    *n_free = (int)rnd(S, 3);
    if (kind == 4) {
        d[n++] = (fake_group_def){PITH_MEM_RECURRENT, 0, 1 + (int)rnd(S, 2)};
        return n;
    }
    if (kind != 2) d[n++] = (fake_group_def){PITH_MEM_FULL, 0, 1 + (int)rnd(S, 3)};
    if (kind >= 1) d[n++] = (fake_group_def){PITH_MEM_WINDOW, 1 + (int)rnd(S, 40), 1 + (int)rnd(S, 4)};
    if (kind == 2) d[n++] = (fake_group_def){PITH_MEM_WINDOW, 1 + (int)rnd(S, 70), 1};
    if (kind == 3) d[n++] = (fake_group_def){PITH_MEM_RECURRENT, 0, 1 + (int)rnd(S, 2)};
    return n;
}

static void run_sim(uint64_t seed, int n_steps, bool inject_failure, int spec_kind, uint64_t *preemptions,
                    uint64_t *hits, uint64_t *forked) {
    sim S = {.rng = seed};
    static const int block_sizes[] = {1, 2, 3, 4, 8, 16};
    pith_engine_options o = {
        .block_size = block_sizes[rnd(&S, 6)],
        .max_num_seqs = 1 + (int)rnd(&S, 12),
        .max_batch_tokens = rnd(&S, 5) == 0 ? 1 + (int)rnd(&S, 4) : 8 + (int)rnd(&S, 120),
        .kv_f32 = rnd(&S, 2),
        .no_prefix_cache = rnd(&S, 8) == 0,
        .max_seq_len = 24 + (int)rnd(&S, 200),
    };
    /* State snapshots: from a pool of one (constant eviction) to a roomy one, or none; intervals from
     * one block up, or none. */
    uint32_t snap_kind = rnd(&S, 6);
    o.snapshot_mem_bytes = snap_kind == 0 ? SIZE_MAX : snap_kind == 1 ? 0 : sizeof(fake_rstate) * (1 + rnd(&S, 24));
    uint32_t iv = rnd(&S, 4);
    o.snapshot_interval = iv == 0 ? -1 : iv == 1 ? 0 : o.block_size * (1 + (int)rnd(&S, 6));
    /* From a pool that holds barely one long sequence to a roomy one. */
    int per_seq = (o.max_seq_len + o.block_size - 1) / o.block_size;
    o.kv_blocks = rnd(&S, 3) == 0 ? per_seq * (2 + (int)rnd(&S, 8)) : (per_seq + 1) / 2 + (int)rnd(&S, (uint32_t)per_seq);
    fake_group_def defs[4];
    int n_free = 0, n_groups = random_spec(&S, spec_kind, defs, &n_free);
    /* Window groups alone need at least one sequence's window (the engine refuses less: tested below). */
    for (int g = 0; g < n_groups && spec_kind == 2; g++) {
        int lone = (defs[g].window - 1 + o.block_size - 1) / o.block_size + 2;
        if (o.kv_blocks < lone) o.kv_blocks = lone + (int)rnd(&S, 4);
    }
    S.n_vocab = 16 + (int)rnd(&S, 300);
    pith_model *m = fake_model_new_spec(S.n_vocab, rnd(&S, 2) ? 0 : 4096, defs, n_groups, n_free);
    fake_state *fs = fake_of(m);
    fs->max_batch_tokens = o.max_batch_tokens;
    fs->max_num_seqs = o.max_num_seqs;
    if (inject_failure) fs->fail_at_call = 50 + (int)rnd(&S, 200);
    pith_err err;
    CHECKF(pith_engine_create(m, NULL, &o, &S.e, &err) == 0, "%s", err.msg);
    if (!S.e) return;
    int max_len = pith_engine_max_seq_len(S.e);
    /* A FULL group caps the length at what its pool holds; WINDOW groups alone do not. */
    CHECK(max_len <= o.max_seq_len && (spec_kind == 2 || spec_kind == 4 || max_len <= o.kv_blocks * o.block_size) && max_len > 0);
    S.cap_recs = 20000;
    S.recs = calloc((size_t)S.cap_recs, sizeof *S.recs);
    for (int b = 0; b < 4; b++)
        for (int i = 0; i < 48; i++) S.bases[b][i] = (int32_t)rnd(&S, (uint32_t)S.n_vocab);

    int steps = 0, model_errors = 0;
    bool ok = true;
    for (int t = 0; (t < n_steps || pith_engine_has_work(S.e)) && ok; t++) {
        if (t < n_steps) {
            uint32_t burst = rnd(&S, 10);
            int k = burst == 0 ? 1 + (int)rnd(&S, 12) : burst < 4;
            for (int i = 0; i < k; i++) submit_random(&S);
            if (rnd(&S, 12) == 0 && S.n_recs > 0) {
                rec *r = &S.recs[rnd(&S, (uint32_t)S.n_recs)];
                if (r->id && pith_engine_cancel(S.e, r->id) == 0) {
                    CHECK(r->n_final == 0);
                    r->cancel_sent = true;
                } else if (r->id) {
                    CHECK(r->n_final == 1); /* unknown only once finished */
                }
            }
        }
        if (pith_engine_step(S.e, &err)) model_errors++;
        steps++;
        int rc = engine_check(S.e, &err);
        CHECKF(rc == 0, "seed %llu step %d: %s", (unsigned long long)seed, t, err.msg);
        ok = rc == 0 && t < n_steps + 100000;
    }
    CHECKF(fs->violations == 0, "seed %llu: %s", (unsigned long long)seed, fs->first_violation);
    CHECK(model_errors == (inject_failure && fs->calls >= (uint64_t)fs->fail_at_call));
    int n_errors = 0, n_cancelled = 0;
    verify(&S, fs, max_len, &n_errors, &n_cancelled);
    CHECK(inject_failure || n_errors == 0);

    pith_engine_stats st;
    pith_engine_get_stats(S.e, &st);
    int accepted = 0;
    uint64_t generated = 0, prompt = 0;
    for (int i = 0; i < S.n_recs; i++) {
        if (S.recs[i].n_final == -1) continue;
        accepted++;
        generated += (uint64_t)S.recs[i].n_out;
        prompt += (uint64_t)S.recs[i].n_prompt;
    }
    CHECK(st.running == 0 && st.waiting == 0 && st.kv_blocks_used == 0);
    CHECK(st.kv_blocks_free + st.kv_blocks_cached == st.kv_blocks_total && st.n_mem_groups == n_groups);
    for (int g = 0; g < n_groups; g++) {
        const pith_engine_mem_stats *ms = &st.mem[g];
        CHECK(ms->kind == defs[g].kind && ms->n_layers == defs[g].n_layers && ms->units_used == 0);
        if (ms->kind == PITH_MEM_FULL) CHECK(ms->units_total == o.kv_blocks);
        if (ms->kind == PITH_MEM_WINDOW) CHECK(ms->units_total <= o.kv_blocks && ms->window == defs[g].window);
        if (ms->kind == PITH_MEM_RECURRENT) {
            CHECK(ms->units_total == o.max_num_seqs + ms->snapshot_units);
            CHECK(ms->units_free + ms->units_cached == ms->units_total && ms->units_cached <= ms->snapshot_units);
            if (o.no_prefix_cache || o.snapshot_mem_bytes == SIZE_MAX) CHECK(ms->snapshot_units == 0);
        }
    }
    /* Every hit on a model with state needs a snapshot at exactly its length. */
    if (spec_kind >= 3) CHECK(st.state_restores <= st.state_snapshots && (st.prefix_cache_hits == 0) == (st.state_restores == 0));
    CHECK(st.requests_submitted == (uint64_t)accepted && st.requests_finished == (uint64_t)accepted);
    CHECK(st.requests_rejected == (uint64_t)(S.n_recs - accepted));
    CHECK(st.requests_cancelled == (uint64_t)n_cancelled && st.requests_failed == (uint64_t)n_errors);
    CHECK(st.generation_tokens == generated && st.prompt_tokens == prompt);
    CHECK(st.computed_tokens == fs->tokens && st.steps == fs->calls);
    CHECK(st.prefix_cache_hits <= st.prefix_cache_queries);
    if (o.no_prefix_cache) CHECK(st.prefix_cache_hits == 0);
    *preemptions += st.preemptions;
    *hits += st.prefix_cache_hits;
    printf("seed %llu, spec %d (%d groups): bs %d, %d blocks, max_len %d, seqs %d, batch %d: %d requests (%d cancelled, %d failed), "
           "%d steps, %llu preemptions, %llu/%llu cached tokens, %llu forked, widest batch %d\n",
           (unsigned long long)seed, spec_kind, n_groups, o.block_size, o.kv_blocks, max_len, o.max_num_seqs, o.max_batch_tokens,
           accepted, n_cancelled, n_errors, steps, (unsigned long long)st.preemptions,
           (unsigned long long)st.prefix_cache_hits, (unsigned long long)st.prefix_cache_queries,
           (unsigned long long)st.forked_sequences, fs->max_seqs_seen);
    *forked += st.forked_sequences;
    pith_engine_free(S.e);
    for (int i = 0; i < S.n_recs; i++) free(S.recs[i].prompt);
    free(S.recs);
    m->ops->destroy(m);
}

int main(void) {
    /* Per spec kind: across its runs, small pools must have forced preemption and shared prefixes must
     * have hit (through window groups too: a hit there holds only the window's blocks). */
    for (int kind = 0; kind < 5; kind++) {
        uint64_t preemptions = 0, hits = 0, forked = 0;
        for (uint64_t seed = 1; seed <= 8; seed++)
            run_sim(seed * 4 + (uint64_t)kind, 600, seed % 4 == 0, kind, &preemptions, &hits, &forked);
        CHECKF(forked > 0, "spec %d: no sibling forked", kind);
        CHECKF(preemptions > 0, "spec %d: no preemption", kind);
        CHECKF(hits > 0, "spec %d: no prefix cache hit", kind);
    }
    return check_summary("test_sched_sim");
}
