/* Draft sources and the per-sequence draft length policy (spec.h). */
#include "core/spec.h"

#include <string.h>

int spec_ngram(const int32_t *tokens, int len, int32_t *draft, int max) {
    for (int n = 4; n >= 2; n--) {
        if (len < n + 1) continue;
        const int32_t *tail = &tokens[len - n];
        /* latest first: the most recent context predicts best */
        for (int at = len - n - 1; at >= 0; at--) {
            if (tokens[at] != tail[0] || memcmp(&tokens[at], tail, (size_t)n * sizeof *tokens)) continue;
            int from = at + n, k = len - from < max ? len - from : max;
            memcpy(draft, &tokens[from], (size_t)k * sizeof *draft);
            return k;
        }
    }
    return 0;
}

int spec_propose(const pith_engine_options *o, seq *s, int max) {
    if (max > PITH_SPEC_MAX_DRAFT) max = PITH_SPEC_MAX_DRAFT;
    if (max <= 0) return 0;
    int k = 0;
    if (o->spec_type == PITH_SPEC_NGRAM) k = spec_ngram(s->tokens, s->n_tokens, s->draft, max);
    else if (o->spec_type == PITH_SPEC_CUSTOM && o->spec_draft)
        k = o->spec_draft(o->spec_user, s->id, s->tokens, s->n_tokens, s->draft, max);
    return k < 0 ? 0 : k > max ? max : k;
}

/* One accepted token per draft step pays the draft; the margin, the verification of the longer chunk. */
float pith_spec_backoff_rate(float draft_cost) { return draft_cost + 0.1f > 0.2f ? draft_cost + 0.1f : 0.2f; }

/* A draft source this expensive starts short and backs off after one failed try. */
static bool expensive(float min_rate) { return min_rate > 0.3f; }

int spec_want(seq *s, int max_draft, float min_rate) {
    if (s->spec_cooldown > 0) {
        if (--s->spec_cooldown == 0) {
            s->spec_k = 2;
            s->spec_rate = min_rate;
            s->spec_tries = 0;
        }
        return 0;
    }
    if (s->spec_k == 0) {
        int k0 = expensive(min_rate) ? 2 : 4;
        s->spec_k = max_draft < k0 ? max_draft : k0;
        s->spec_rate = 0.5f;
    }
    return s->spec_k < max_draft ? s->spec_k : max_draft;
}

void spec_update(seq *s, int max_draft, int drafted, int accepted, float min_rate) {
    if (drafted <= 0) return;
    s->spec_rate = 0.7f * s->spec_rate + 0.3f * (float)accepted / (float)drafted;
    s->spec_tries++;
    s->spec_k = accepted == drafted ? drafted + 2 : accepted + 1;
    if (s->spec_k > max_draft) s->spec_k = max_draft;
    /* three tries at first; after a back-off (which restarts at the threshold) one failed try backs
     * off again, for twice as long */
    if (s->spec_tries >= (s->spec_backoffs ? 1 : 3) && s->spec_rate < min_rate) {
        s->spec_cooldown = 16 << (s->spec_backoffs < 4 ? s->spec_backoffs : 4);
        s->spec_backoffs++;
    } else if (s->spec_rate >= min_rate + 0.1f) {
        s->spec_backoffs = 0;
    }
}
