/* Logprobs in the step loop: which tokens ask for logits rows (the sampling one, and the prompt rows of
 * prompt_logprobs requests), fitting those rows in the logits buffer, and the prompt events.
 *
 * Prompt row at position p (p < n_prompt - 1) gives the raw logprob of prompt token p + 1 given tokens
 * 0..p. A request's prompt positions below plp_next have been reported; a recompute after preemption
 * never reports them twice (such a request reads only its own cached blocks, named under a salt of its
 * own, and those cover computed, hence reported, positions only). */
#include <math.h>
#include <string.h>

#include "core/engine_internal.h"
#include "util/rows.h"

static bool is_prompt_row(const seq *s, int p) {
    return s->prompt_logprobs && p >= s->plp_next && p < s->n_prompt - 1;
}

bool engine_wants_row(const seq *s, int p) {
    if (s->embed != PITH_EMBED_OFF) return false;
    if (s->n_draft > 0) return true; /* a draft being verified: a row at every position (spec.h) */
    return p == s->n_tokens - 1 || is_prompt_row(s, p);
}

void engine_fit_rows(pith_engine *e) {
    sched *sc = &e->sc;
    /* One row per sequence always fits (the buffer has max_num_seqs of them); prompt rows share the
     * ENGINE_PROMPT_ROWS beyond, first come first served in batch order. */
    int spare = ENGINE_PROMPT_ROWS;
    for (int i = 0; i < sc->n_batch; i++) {
        seq *s = sc->batch[i];
        if (!s->prompt_logprobs) continue;
        int rows = 0, j = 0;
        for (; j < s->n_sched; j++) {
            int p = s->n_computed + j;
            if (!engine_wants_row(s, p)) continue;
            /* The first row rides on the sequence's own; later ones take spares. */
            if (rows >= 1 + spare) break;
            rows++;
        }
        if (j < s->n_sched) {
            sc->n_batch_tokens -= s->n_sched - j; /* the blocks taken for the rest stay held */
            s->n_sched = j;
        }
        spare -= rows > 1 ? rows - 1 : 0;
    }
}

float engine_logprobs(const float *row, int n_vocab, int32_t chosen, pith_logprob *top, int n_top) {
    float lse = (float)pith_row_logsumexp(row, n_vocab);
    int have = 0;
    for (int i = 0; i < n_vocab && n_top > 0; i++) {
        if (have == n_top && row[i] <= top[have - 1].logprob) continue;
        int k = have < n_top ? have++ : have - 1;
        while (k > 0 && top[k - 1].logprob < row[i]) {
            top[k] = top[k - 1];
            k--;
        }
        top[k] = (pith_logprob){.token = i, .logprob = row[i]};
    }
    for (int i = 0; i < have; i++) top[i].logprob -= lse;
    return row[chosen] - lse;
}

void engine_prompt_events(pith_engine *e, seq *s, const float *rows) {
    int r = 0;
    for (int j = 0; j < s->n_sched; j++) {
        int p = s->n_computed + j;
        if (!engine_wants_row(s, p)) continue;
        if (!is_prompt_row(s, p)) break; /* the sampling row: always the last */
        const float *row = &rows[(size_t)r++ * e->n_vocab];
        pith_logprob top[PITH_ENGINE_MAX_TOP_LOGPROBS];
        int n_top = s->prompt_top_logprobs < e->n_vocab ? s->prompt_top_logprobs : e->n_vocab;
        pith_token_event ev = {
            .request_id = s->id, .user = s->user, .token = s->tokens[p + 1], .text = "", .has_logprob = true,
            .n_top = n_top, .top = top, .prompt = true, .prompt_index = p + 1, .weight_generation = e->generation,
        };
        ev.logprob = engine_logprobs(row, e->n_vocab, s->tokens[p + 1], top, n_top);
        ev.prompt_rank = 1;
        for (int v = 0; v < e->n_vocab; v++) ev.prompt_rank += row[v] > row[s->tokens[p + 1]];
        s->plp_next = p + 1;
        if (s->on_token) s->on_token(&ev, s->user);
    }
}
