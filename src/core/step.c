/* The step loop: take in new requests and cancellations, schedule, lay the scheduled tokens out as one
 * flat batch, run the model once, then sample, check stop conditions and report for every sequence
 * whose prompt or decode token completed. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/engine_internal.h"
#include "core/spec.h"
#include "core/spec_model.h"

static void emit(seq *s, const pith_token_event *ev) {
    if (s->on_token) s->on_token(ev, s->user);
}

/* Takes s off the live list and counts it (under the lock); the caller frees it. */
static void retire(pith_engine *e, seq *s) {
    pthread_mutex_lock(&e->lock);
    for (int i = 0; i < e->n_live; i++) {
        if (e->live[i] == s) {
            e->live[i] = e->live[--e->n_live];
            break;
        }
    }
    e->stats.requests_finished++;
    if (s->finish == PITH_FINISH_CANCELLED) e->stats.requests_cancelled++;
    if (s->finish == PITH_FINISH_ERROR) e->stats.requests_failed++;
    if (s->cancel_requested) e->n_cancel_pending--;
    pthread_mutex_unlock(&e->lock);
}

/* s ends: a sibling waiting to fork from it no longer can, and waits like any request instead (its
 * prompt is then mostly in the prefix cache); a waiting sibling that ends leaves its first one's list. */
static void drop_fork_links(pith_engine *e, seq *s) {
    if (s->fork_parent) {
        seq *p = s->fork_parent;
        for (int i = 0; i < p->n_forks; i++) {
            if (p->forks[i] == s) {
                memmove(&p->forks[i], &p->forks[i + 1], (size_t)(p->n_forks - i - 1) * sizeof *p->forks);
                p->n_forks--;
                break;
            }
        }
        s->fork_parent = NULL;
    }
    int n = s->n_forks;
    s->n_forks = 0;
    for (int i = 0; i < n; i++) {
        seq *c = s->forks[i];
        c->fork_parent = NULL;
        if (sched_add(&e->sc, c)) engine_finish(e, c, PITH_FINISH_ERROR, false, "out of memory");
    }
}

void engine_finish(pith_engine *e, seq *s, pith_finish_reason why, bool stop_string, const char *error) {
    drop_fork_links(e, s);
    s->finish = why;
    const char *text = "";
    int len = 0;
    if (s->has_detok && !stop_string) {
        char tail[64];
        size_t n = pith_detok_flush(&s->detok, tail, sizeof tail);
        seq_push_text(s, tail, (int)n, true, &text, &len);
    }
    pith_token_event ev = {
        .request_id = s->id, .user = s->user, .index = s->sibling, .token = -1, .text = text, .text_len = (size_t)len,
        .final = true, .finish_reason = why, .error = error ? error : "",
        .usage = {.prompt_tokens = s->n_prompt, .completion_tokens = s->n_tokens - s->n_prompt,
                  .cached_tokens = s->cached_tokens, .draft_tokens = s->drafted, .accepted_tokens = s->accepted},
        .weight_generation = e->generation,
    };
    if (s->embed != PITH_EMBED_OFF && why == PITH_FINISH_STOP && s->pool && e->emb_out) {
        const int dim = e->model->hp.dim;
        double ss = 0;
        for (int i = 0; i < dim; i++) ss += s->pool[i] * s->pool[i];
        double scale = ss > 0 ? 1.0 / sqrt(ss) : 0; /* the mean's 1/n cancels in the normalisation */
        for (int i = 0; i < dim; i++) e->emb_out[i] = (float)(s->pool[i] * scale);
        ev.embedding = e->emb_out;
        ev.n_embedding = dim;
    }
    /* Stats first: whoever learns from this event that the request is done (a client that then reads
     * /metrics) sees it counted and its blocks released. */
    retire(e, s);
    engine_publish_stats(e);
    emit(s, &ev);
    seq_free(s);
}

/* Moves submitted requests into the scheduler and collects cancelled ones; returns how many were
 * cancelled (in e->cancels). */
static int take_in(pith_engine *e) {
    pthread_mutex_lock(&e->lock);
    seq **in = e->incoming;
    int n_in = 0;
    if (!e->hold) { /* held (paused): requests stay on the incoming list */
        n_in = e->n_incoming;
        int cap_in = e->cap_incoming;
        e->incoming = e->intake;
        e->cap_incoming = e->cap_intake;
        e->n_incoming = 0;
        e->intake = in;
        e->cap_intake = cap_in;
    }
    int n_cancel = 0;
    if (e->n_cancel_pending > 0 && engine_grow_list(&e->cancels, &e->cap_cancels, e->n_cancel_pending) == 0) {
        for (int i = 0; i < e->n_live; i++) {
            seq *s = e->live[i];
            if (s->cancel_requested && s->finish == PITH_FINISH_NONE) {
                s->finish = PITH_FINISH_CANCELLED; /* taken: not collected twice */
                e->cancels[n_cancel++] = s;
                for (int k = 0; k < e->n_incoming; k++) /* a held request leaves the incoming list */
                    if (e->incoming[k] == s) e->incoming[k--] = e->incoming[--e->n_incoming];
            }
        }
    }
    pthread_mutex_unlock(&e->lock);

    for (int i = 0; i < n_in; i++) {
        if (sched_add(&e->sc, in[i])) engine_finish(e, in[i], PITH_FINISH_ERROR, false, "out of memory");
    }
    for (int i = 0; i < n_cancel; i++) {
        sched_remove(&e->sc, e->cancels[i]);
        engine_finish(e, e->cancels[i], PITH_FINISH_CANCELLED, false, NULL);
    }
    return n_cancel;
}

/* KV group g's block tables of seqs[0..n) into e->b_tables[g] (batch.h); returns the row stride. */
static int fill_tables(pith_engine *e, seq *const *seqs, int n, int g) {
    int stride = 1;
    for (int i = 0; i < n; i++)
        if (seqs[i]->hi[g] > stride) stride = seqs[i]->hi[g];
    for (int i = 0; i < n; i++) {
        int32_t *row = &e->b_tables[g][(size_t)i * stride];
        for (int k = 0; k < stride; k++) row[k] = k < seqs[i]->cap_blocks ? *seq_block(seqs[i], g, k) : -1;
    }
    return stride;
}

/* Lays the scheduled tokens out as one flat batch (batch.h) with each memory group's slots and tables;
 * returns the token count. */
static int build_batch(pith_engine *e, pith_batch *b) {
    const sched *sc = &e->sc;
    const int bs = e->opt.block_size;
    int n = 0, rows = 0;
    for (int i = 0; i < sc->n_batch; i++) {
        const seq *s = sc->batch[i];
        e->b_row0[i] = rows;
        for (int j = 0; j < s->n_sched; j++, n++) {
            int p = s->n_computed + j;
            /* a draft follows the last sampled token: n_sched == 1 + n_draft (sched.c) */
            e->b_tokens[n] = s->n_draft > 0 && j > 0 ? s->draft[j - 1] : s->tokens[p];
            e->b_positions[n] = p;
            e->b_seq[n] = i;
            e->b_want[n] = engine_wants_row(s, p);
            rows += e->b_want[n];
            if (e->b_want_hidden)
                e->b_want_hidden[n] = s->embed == PITH_EMBED_MEAN || (s->embed == PITH_EMBED_CLS && p == 0) ||
                                      (s->embed == PITH_EMBED_LAST && p == s->n_tokens - 1);
        }
        e->b_nrows[i] = rows - e->b_row0[i];
    }
    for (int g = 0; g < e->mem.n_groups; g++) {
        pith_batch_mem *bm = &e->b_mem[g];
        memset(bm, 0, sizeof *bm);
        if (e->mem.g[g].kind == PITH_MEM_RECURRENT) {
            bool any = false;
            for (int i = 0, t = 0; i < sc->n_batch; i++) {
                const seq *s = sc->batch[i];
                e->b_states[g][i] = s->state_slot[g];
                for (int j = 0; j < s->n_sched; j++, t++) {
                    e->b_ckpt[g][t] = j < s->n_ckpt ? s->ckpt[g][j] : -1;
                    any |= j < s->n_ckpt;
                }
            }
            bm->state_slots = e->b_states[g];
            bm->checkpoints = any ? e->b_ckpt[g] : NULL;
            continue;
        }
        int stride = fill_tables(e, sc->batch, sc->n_batch, g);
        for (int i = 0, t = 0; i < sc->n_batch; i++) {
            seq *s = sc->batch[i];
            for (int j = 0; j < s->n_sched; j++, t++) {
                int p = s->n_computed + j;
                e->b_slots[g][t] = *seq_block(s, g, p / bs) * bs + p % bs;
            }
        }
        bm->slots = e->b_slots[g];
        bm->block_tables = e->b_tables[g];
        bm->max_blocks = stride;
    }
    *b = (pith_batch){
        .n_tokens = n, .tokens = e->b_tokens, .positions = e->b_positions, .seq = e->b_seq,
        .want_logits = e->b_want, .n_seqs = sc->n_batch, .n_groups = e->mem.n_groups, .mem = e->b_mem,
    };
    if (pith_batch_n_hidden(&(pith_batch){.n_tokens = n, .want_hidden = e->b_want_hidden}) > 0) {
        b->want_hidden = e->b_want_hidden;
        b->hidden = e->hidden;
    }
    return n;
}

/* The hidden-state buffers, at the first batch holding an embedding request. 0 or -1. */
static int embed_buffers(pith_engine *e, pith_err *err) {
    const sched *sc = &e->sc;
    bool any = false;
    for (int i = 0; i < sc->n_batch; i++) any |= sc->batch[i]->embed != PITH_EMBED_OFF;
    if (!any || e->b_want_hidden) return 0;
    size_t nt = (size_t)e->opt.max_batch_tokens, dim = (size_t)e->model->hp.dim;
    e->hidden = malloc(nt * dim * sizeof *e->hidden);
    e->emb_out = malloc(dim * sizeof *e->emb_out);
    e->b_want_hidden = malloc(nt);
    if (e->hidden && e->emb_out && e->b_want_hidden) return 0;
    free(e->hidden);
    free(e->emb_out);
    free(e->b_want_hidden);
    e->hidden = e->emb_out = NULL;
    e->b_want_hidden = NULL;
    return pith_errf(err, "out of memory for the hidden states of embedding requests");
}

/* Adds this step's hidden rows to each embedding request's pool (before sched_commit: positions are
 * n_computed + j). Returns 0, or -1 with err when a request would skip a position (a bug). */
static int pool_hidden(pith_engine *e, const pith_batch *b, pith_err *err) {
    if (!b->want_hidden) return 0;
    const int dim = e->model->hp.dim;
    const sched *sc = &e->sc;
    int row = 0;
    for (int i = 0, t = 0; i < sc->n_batch; i++) {
        seq *s = sc->batch[i];
        for (int j = 0; j < s->n_sched; j++, t++) {
            if (!b->want_hidden[t]) continue;
            const float *h = &b->hidden[(size_t)row++ * dim];
            int p = s->n_computed + j;
            if (!s->pool && !(s->pool = calloc((size_t)dim, sizeof *s->pool)))
                return pith_errf(err, "out of memory for an embedding");
            if (s->embed == PITH_EMBED_MEAN) {
                if (p < s->n_pooled) continue; /* recomputed after a preemption: already counted */
                if (p > s->n_pooled)
                    return pith_errf(err, "embedding request %llu skipped position %d", (unsigned long long)s->id,
                                     s->n_pooled);
                for (int k = 0; k < dim; k++) s->pool[k] += h[k];
                s->n_pooled++;
            } else {
                for (int k = 0; k < dim; k++) s->pool[k] = h[k];
                s->n_pooled = p + 1;
            }
        }
    }
    return 0;
}

/* Runs the copies the memory manager queued (state snapshots taken or restored, mem.h). A copy that
 * fails leaves a slot that does not hold what mem thinks it holds, so prefix caching stops for good
 * (no lookup can return a wrong state) and the caller fails the batch. 0 or -1. */
static int run_copies(pith_engine *e, pith_err *err) {
    for (int g = 0; g < e->mem.n_groups; g++) {
        const int32_t *src, *dst;
        int n = mem_take_copies(&e->mem, g, &src, &dst);
        if (n > 0 && pith_model_copy_blocks(e->model, g, src, dst, n, err)) {
            e->mem.prefix_cache = e->mem.snapshots = false;
            return pith_err_prefix(err, "state snapshot copy");
        }
    }
    return 0;
}

/* Fails every sequence of this step's batch with err (the model or a copy failed). */
static void fail_batch(pith_engine *e, int n_seqs, const pith_err *err) {
    for (int i = 0; i < n_seqs; i++) {
        seq *s = e->step_seqs[i];
        if (s->state == SEQ_DONE) continue;
        sched_remove(&e->sc, s);
        engine_finish(e, s, PITH_FINISH_ERROR, false, err->msg[0] ? err->msg : "the model failed");
    }
    engine_publish_stats(e);
}

static int constraint_fill(void *ctx, uint32_t *mask) {
    pith_err err;
    return pith_grammar_matcher_fill_mask(ctx, mask, &err);
}

static bool constraint_allows(void *ctx, int32_t token) { return pith_grammar_matcher_allows(ctx, token); }

/* Samples s's next token from its logits row, reports it, and finishes s when a stop condition holds.
 * Returns false when s finished (and is freed). */
static bool sample_and_report(pith_engine *e, seq *s, float *row) {
    pith_err err;
    if (!s->sampler && pith_sampler_new_vocab(&s->sampling, e->tok, e->n_vocab, &s->sampler, &err)) {
        sched_remove(&e->sc, s);
        engine_finish(e, s, PITH_FINISH_ERROR, false, err.msg);
        return false;
    }
    if (s->logprobs || s->return_logits) memcpy(e->raw_row, row, (size_t)e->n_vocab * sizeof *row);
    bool processed = s->logprobs && s->logprobs_mode == PITH_LOGPROBS_PROCESSED;
    if (processed) pith_sampler_record(s->sampler, true);
    int32_t tok;
    if (s->matcher) {
        pith_token_constraint c = {.fill = constraint_fill, .allows = constraint_allows, .ctx = s->matcher};
        tok = pith_sampler_sample_constrained(s->sampler, row, s->tokens, s->n_tokens, &c);
        if (tok < 0 || pith_grammar_matcher_accept(s->matcher, tok, &err)) {
            sched_remove(&e->sc, s);
            engine_finish(e, s, PITH_FINISH_ERROR, false,
                          tok < 0 ? "structured output: the grammar allows no token of this vocabulary here"
                                  : err.msg);
            return false;
        }
    } else {
        tok = pith_sampler_sample(s->sampler, row, s->tokens, s->n_tokens);
    }
    if (tok < 0 || tok >= e->n_vocab || seq_append(s, tok)) {
        sched_remove(&e->sc, s);
        engine_finish(e, s, PITH_FINISH_ERROR, false, tok < 0 || tok >= e->n_vocab ? "sampler failed" : "out of memory");
        return false;
    }
    e->n_generated++;

    pith_token_event ev = {.request_id = s->id, .user = s->user, .index = s->sibling, .token = tok, .text = "",
                           .weight_generation = e->generation};
    pith_logprob top[PITH_ENGINE_MAX_TOP_LOGPROBS];
    if (processed) {
        ev.has_logprob = true;
        ev.logprob = pith_sampler_dist_logprob(s->sampler, tok);
        int n_dist = pith_sampler_dist_size(s->sampler);
        ev.n_top = s->top_logprobs < n_dist ? s->top_logprobs : n_dist;
        for (int i = 0; i < ev.n_top; i++) pith_sampler_dist_at(s->sampler, i, &top[i].token, &top[i].logprob);
        ev.top = top;
    } else if (s->logprobs) {
        ev.has_logprob = true;
        ev.logprob = engine_logprobs(e->raw_row, e->n_vocab, tok, top, s->top_logprobs);
        ev.n_top = s->top_logprobs < e->n_vocab ? s->top_logprobs : e->n_vocab;
        ev.top = top;
    }
    if (s->return_logits) ev.logits = e->raw_row;
    pith_finish_reason why = PITH_FINISH_NONE;
    bool stop_string = false;
    if ((!s->ignore_eos && e->tok && pith_tokenizer_is_eog(e->tok, tok)) || seq_is_stop_id(s, tok)) {
        why = PITH_FINISH_STOP;
    } else if (s->has_detok) {
        char piece[1024];
        size_t n = pith_detok_push(&s->detok, tok, piece, sizeof piece);
        int len = 0;
        stop_string = seq_push_text(s, piece, (int)n, false, &ev.text, &len);
        ev.text_len = (size_t)len;
        if (stop_string) why = PITH_FINISH_STOP;
    }
    /* structured output: complete, and nothing may follow */
    if (why == PITH_FINISH_NONE && s->matcher && pith_grammar_matcher_is_done(s->matcher)) {
        why = PITH_FINISH_STOP; /* the final event releases any held-back text */
    }
    if (why == PITH_FINISH_NONE && s->n_tokens >= s->max_len) why = PITH_FINISH_LENGTH;
    emit(s, &ev);
    if (why != PITH_FINISH_NONE) {
        sched_remove(&e->sc, s);
        engine_finish(e, s, why, stop_string, NULL);
        return false;
    }
    return true;
}

/* s ran its last sampled token and a draft of n_draft tokens, with a logits row for each (spec.h):
 * samples row by row, exactly as one-token steps would, while the sampled token is the draft's next
 * one; then keeps what was accepted (K/V past it is left to be overwritten; recurrent state rolls back
 * to its checkpoint) and commits it. */
static void verify_draft(pith_engine *e, seq *s, float *rows) {
    const int k = s->n_draft;
    int32_t draft[PITH_SPEC_MAX_DRAFT];
    memcpy(draft, s->draft, (size_t)k * sizeof *draft);
    s->n_draft = 0;
    s->drafted += k;
    int accepted = 0;
    for (int i = 0;; i++) {
        if (i > 0) accepted++, s->accepted++;
        if (!sample_and_report(e, s, &rows[(size_t)i * e->n_vocab])) break; /* finished: freed */
        if (i == k || s->tokens[s->n_tokens - 1] != draft[i]) {
            spec_update(s, e->opt.spec_max_draft, k, accepted, e->spec_min_rate);
            mem_rollback(&e->mem, s, accepted);
            /* the last sampled token and the accepted ones are computed; the new sample is not */
            sched_commit_seq(&e->sc, s, accepted + 1);
            break;
        }
    }
    e->spec_drafted += (uint64_t)k;
    e->spec_accepted += (uint64_t)accepted;
    e->spec_verifies++;
}

/* At most this many sequences draft with the MTP head in one step (spec_max_seqs beyond it: the first). */
#define MTP_DRAFT_SEQS 8

/* PITH_SPEC_MTP: the model's MTP head drafts for seqs[0..n) (want[i] tokens each) in one call, from
 * each one's last sampled token at position n_computed (model.h: mtp_draft). A failure drafts nothing:
 * drafting never fails a request. */
static void mtp_drafts(pith_engine *e, seq **seqs, const int *want, int n) {
    int steps = 0;
    for (int i = 0; i < n; i++) {
        e->b_tokens[i] = seqs[i]->tokens[seqs[i]->n_computed];
        e->b_positions[i] = seqs[i]->n_computed;
        e->b_seq[i] = i;
        e->b_want[i] = 0;
        if (want[i] > steps) steps = want[i];
    }
    for (int g = 0; g < e->mem.n_groups; g++) {
        pith_batch_mem *bm = &e->b_mem[g];
        memset(bm, 0, sizeof *bm);
        if (e->mem.g[g].kind == PITH_MEM_RECURRENT) {
            for (int i = 0; i < n; i++) e->b_states[g][i] = seqs[i]->state_slot[g];
            bm->state_slots = e->b_states[g];
            continue;
        }
        bm->max_blocks = fill_tables(e, seqs, n, g);
        bm->block_tables = e->b_tables[g];
    }
    pith_batch b = {.n_tokens = n, .tokens = e->b_tokens, .positions = e->b_positions, .seq = e->b_seq,
                    .want_logits = e->b_want, .n_seqs = n, .n_groups = e->mem.n_groups, .mem = e->b_mem};
    int32_t out[MTP_DRAFT_SEQS * PITH_SPEC_MAX_DRAFT];
    pith_err err;
    if (pith_model_mtp_draft(e->model, &b, steps, out, NULL, &err)) return;
    for (int i = 0; i < n; i++) {
        memcpy(seqs[i]->draft, out + (size_t)i * steps, (size_t)want[i] * sizeof(int32_t));
        seqs[i]->n_draft = want[i];
    }
}

/* Drafts for the sequences that will decode this step (spec.h), before scheduling sizes their chunks. */
static void plan_drafts(pith_engine *e) {
    sched *sc = &e->sc;
    /* state that cannot roll back cannot speculate */
    if (e->opt.spec_type == PITH_SPEC_OFF || (e->mem.has_recurrent && !e->model->state_checkpoints)) return;
    int decoding = 0, n_mtp = 0, mtp_want[MTP_DRAFT_SEQS];
    seq *mtp_seqs[MTP_DRAFT_SEQS];
    for (int i = 0; i < sc->n_running; i++) decoding += sc->running[i]->n_tokens - sc->running[i]->n_computed == 1;
    for (int i = 0; i < sc->n_running; i++) {
        seq *s = sc->running[i];
        s->n_draft = 0;
        /* (prompt_logprobs requests count their rows against a budget of their own: no drafts there) */
        if (decoding > e->opt.spec_max_seqs || s->n_tokens - s->n_computed != 1 || s->embed != PITH_EMBED_OFF ||
            s->prompt_logprobs)
            continue;
        int want = spec_want(s, e->opt.spec_max_draft, e->spec_min_rate);
        int room = s->max_len - s->n_tokens; /* positions up to max_len - 1 */
        if (want > room) want = room;
        if (e->draft) { /* queued: the draft model runs them together below */
            if (want > PITH_SPEC_MAX_DRAFT) want = PITH_SPEC_MAX_DRAFT;
            if (want > 0) spec_model_add(e->draft, s->tokens, s->n_tokens, s->draft, want, &s->n_draft);
            continue;
        }
        if (e->opt.spec_type == PITH_SPEC_MTP) { /* the head drafts for all of them together below */
            if (want > PITH_SPEC_MAX_DRAFT) want = PITH_SPEC_MAX_DRAFT;
            if (want > 0 && n_mtp < MTP_DRAFT_SEQS) mtp_seqs[n_mtp] = s, mtp_want[n_mtp++] = want;
            continue;
        }
        s->n_draft = spec_propose(&e->opt, s, want);
        if (s->n_draft > 0 && e->mem.has_recurrent && !mem_take_checkpoints(&e->mem, s, s->n_draft)) s->n_draft = 0;
    }
    if (n_mtp > 0) mtp_drafts(e, mtp_seqs, mtp_want, n_mtp);
    if (!e->draft && n_mtp == 0) return;
    if (e->draft) spec_model_run(e->draft);
    for (int i = 0; i < sc->n_running; i++) {
        seq *s = sc->running[i];
        if (s->n_draft > 0 && e->mem.has_recurrent && !mem_take_checkpoints(&e->mem, s, s->n_draft)) s->n_draft = 0;
    }
}

/* After scheduling: a draft the budget or the pool cut short keeps only the checkpoints it can use. */
static void trim_drafts(pith_engine *e) {
    sched *sc = &e->sc;
    for (int i = 0; i < sc->n_running; i++) {
        seq *s = sc->running[i];
        if (s->n_sched == 0) s->n_draft = 0;
        if (s->n_ckpt > s->n_draft) mem_trim_checkpoints(&e->mem, s, s->n_draft);
    }
}

/* p's prompt is computed and row holds its logits: every sibling waiting for it forks from its memory
 * and samples its first token from the same row, before p samples (and may end, releasing what they
 * share). A sibling with no room waits like any request. */
static void fork_siblings(pith_engine *e, seq *p, const float *row) {
    int n = p->n_forks;
    p->n_forks = 0;
    for (int i = 0; i < n; i++) {
        seq *c = p->forks[i];
        c->fork_parent = NULL;
        if (!sched_fork(&e->sc, p, c)) {
            if (sched_add(&e->sc, c)) engine_finish(e, c, PITH_FINISH_ERROR, false, "out of memory");
            continue;
        }
        pith_err err;
        if (run_copies(e, &err)) {
            sched_remove(&e->sc, c);
            engine_finish(e, c, PITH_FINISH_ERROR, false, err.msg);
            continue;
        }
        e->n_forked++;
        memcpy(e->fork_row, row, (size_t)e->n_vocab * sizeof *row);
        sample_and_report(e, c, e->fork_row);
    }
}

static bool step(pith_engine *e, pith_err *err) {
    err->msg[0] = 0;
    bool progressed = take_in(e) > 0;
    sched *sc = &e->sc;
    if (e->frozen) { /* paused in place or asleep: nothing runs */
        engine_publish_stats(e);
        return progressed;
    }
    plan_drafts(e);
    sched_schedule(sc);
    trim_drafts(e);
    engine_fit_rows(e);
    if (engine_media_prepare(e) > 0) progressed = true;
    if (sc->n_batch == 0) {
        engine_media_done(e);
        if (sc->n_waiting > 0 && sc->n_running == 0) {
            /* Cannot happen (a lone sequence always fits); never leave a request stranded if it does. */
            seq *s = sc->waiting[0];
            sched_remove(sc, s);
            engine_finish(e, s, PITH_FINISH_ERROR, false, "the scheduler could not place this request");
            progressed = true;
        }
        engine_publish_stats(e);
        return progressed;
    }

    pith_batch b;
    int n_seqs = sc->n_batch;
    memcpy(e->step_seqs, sc->batch, (size_t)n_seqs * sizeof *e->step_seqs);
    int rc = run_copies(e, err); /* restores into the slots of sequences admitted with a hit */
    if (!rc) rc = embed_buffers(e, err);
    int n_tokens = build_batch(e, &b);
    if (!rc) rc = engine_media_batch(e, &b, err);
    if (!rc) rc = engine_media_rope(e, &b, err);
    if (!rc) {
        rc = pith_model_forward(e->model, &b, e->logits, err);
        e->n_forwards++;
    }
    engine_media_done(e); /* the batch's rows are copies: the cache may evict from here on */
    if (!rc) rc = pool_hidden(e, &b, err);
    if (rc) {
        fail_batch(e, n_seqs, err);
        return true;
    }
    e->n_computed_tokens += (uint64_t)n_tokens;
    for (int i = 0; i < n_seqs; i++)
        if (e->step_seqs[i]->prompt_logprobs) engine_prompt_events(e, e->step_seqs[i], &e->logits[(size_t)e->b_row0[i] * e->n_vocab]);
    sched_commit(sc);
    if (run_copies(e, err)) { /* snapshots of the states just computed, before anything else runs */
        fail_batch(e, n_seqs, err);
        return true;
    }
    for (int i = 0; i < n_seqs; i++) {
        seq *s = e->step_seqs[i];
        if (s->n_draft > 0) { /* not committed yet: verification commits what it accepts */
            verify_draft(e, s, &e->logits[(size_t)e->b_row0[i] * e->n_vocab]);
            continue;
        }
        if (s->n_computed < s->n_tokens) continue; /* a prompt chunk that is not the last */
        if (s->embed != PITH_EMBED_OFF) {
            sched_remove(sc, s);
            engine_finish(e, s, PITH_FINISH_STOP, false, NULL);
            continue;
        }
        int row = e->b_row0[i] + e->b_nrows[i] - 1; /* the last row: the sampling one */
        float *logits = &e->logits[(size_t)row * e->n_vocab];
        if (s->n_forks > 0) fork_siblings(e, s, logits);
        sample_and_report(e, s, logits);
    }
    engine_publish_stats(e);
    return true;
}

/* The step, then its KV-cache events (if anyone listens) in one call of the sink. */
bool engine_step(pith_engine *e, pith_err *err) {
    bool progressed = step(e, err);
    if (e->kv_log.n || e->kv_log.lost) engine_kv_events_flush(e);
    return progressed;
}

int engine_check(pith_engine *e, pith_err *err) {
    for (int i = 0; i < e->sc.n_running; i++) {
        const seq *s = e->sc.running[i];
        if (s->state != SEQ_RUNNING || s->n_computed > s->n_tokens || s->n_named * e->opt.block_size > s->n_computed ||
            s->n_named > s->n_hashed || s->n_tokens > s->max_len)
            return pith_errf(err, "running request %llu is inconsistent (tokens %d, computed %d, named %d, hashed %d)",
                             (unsigned long long)s->id, s->n_tokens, s->n_computed, s->n_named, s->n_hashed);
    }
    for (int i = 0; i < e->sc.n_waiting; i++) {
        seq *s = e->sc.waiting[i];
        bool holds = s->n_computed != 0;
        for (int g = 0; g < e->mem.n_groups; g++)
            holds |= s->lo[g] != 0 || s->hi[g] != 0 || s->state_slot[g] != -1 || s->snap_held[g] != -1;
        for (int k = 0; k < s->n_groups * s->cap_blocks; k++) holds |= s->blocks[k] != -1;
        if (s->state != SEQ_WAITING || holds)
            return pith_errf(err, "waiting request %llu holds memory or computed tokens", (unsigned long long)s->id);
    }
    if (e->sc.n_running > e->opt.max_num_seqs)
        return pith_errf(err, "%d sequences running, limit %d", e->sc.n_running, e->opt.max_num_seqs);
    if (enc_cache_check(&e->enc, err)) return -1;
    return mem_check(&e->mem, e->sc.running, e->sc.n_running, err);
}
