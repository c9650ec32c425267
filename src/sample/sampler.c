/* Sampling pipeline: penalties -> (greedy | top-k -> temperature -> softmax -> top-p -> min-p -> draw).
 * Candidates are kept as (id, logit) pairs; sorting happens only when a filter needs order, and only the
 * first top_k entries are ever sorted in full. A constraint (structured output) masks tokens to -inf first. */
#include "pith/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct candidate {
    int32_t id;
    float logit;
} candidate;

struct pith_sampler {
    pith_sampling_params p;
    int n_vocab;
    uint64_t rng[4];        /* xoshiro256** state */
    candidate *cand;        /* [n_vocab] scratch */
    uint32_t *counts;       /* [n_vocab] scratch for penalties */
    /* The processed distribution of the last sample (pith_sampler_record): cand[0..n_dist) sorted best
     * first, holding probabilities whose sum is dist_total; in greedy mode cand holds the penalised
     * logits sorted, and dist_lse their log-sum-exp. */
    bool record;
    bool dist_greedy;
    int n_dist;
    double dist_total;
    double dist_lse;
    uint32_t *mask;         /* [(n_vocab + 31) / 32] for constrained sampling, allocated on first use */
};

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t rng_next(uint64_t s[4]) {
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

/* Uniform in [0, 1) with 53 random bits. */
static double rng_uniform(uint64_t s[4]) { return (double)(rng_next(s) >> 11) * 0x1.0p-53; }

pith_sampling_params pith_sampling_defaults(void) {
    pith_sampling_params p = {
        .temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f,
        .repetition_penalty = 1.0f, .presence_penalty = 0.0f, .frequency_penalty = 0.0f, .seed = 0,
    };
    return p;
}

int pith_sampling_validate(const pith_sampling_params *p, pith_err *err) {
    if (!(p->temperature >= 0.0f && p->temperature <= 100.0f))
        return pith_errf(err, "temperature must be between 0 and 100");
    if (p->top_k < 0) return pith_errf(err, "top_k must be >= 0 (0 disables it)");
    if (!(p->top_p > 0.0f && p->top_p <= 1.0f)) return pith_errf(err, "top_p must be in (0, 1]");
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f)) return pith_errf(err, "min_p must be in [0, 1]");
    if (!(p->repetition_penalty > 0.0f && p->repetition_penalty <= 100.0f))
        return pith_errf(err, "repetition_penalty must be in (0, 100]");
    if (!(p->presence_penalty >= -2.0f && p->presence_penalty <= 2.0f))
        return pith_errf(err, "presence_penalty must be between -2 and 2");
    if (!(p->frequency_penalty >= -2.0f && p->frequency_penalty <= 2.0f))
        return pith_errf(err, "frequency_penalty must be between -2 and 2");
    return 0;
}

int pith_sampler_new(const pith_sampling_params *p, int n_vocab, pith_sampler **out, pith_err *err) {
    *out = NULL;
    if (pith_sampling_validate(p, err)) return -1;
    if (n_vocab <= 0) return pith_errf(err, "sampler: vocabulary size must be positive");
    pith_sampler *s = calloc(1, sizeof *s);
    if (!s) return pith_errf(err, "out of memory");
    s->cand = malloc((size_t)n_vocab * sizeof *s->cand);
    s->counts = calloc((size_t)n_vocab, sizeof *s->counts);
    if (!s->cand || !s->counts) {
        pith_sampler_free(s);
        return pith_errf(err, "out of memory");
    }
    s->p = *p;
    s->n_vocab = n_vocab;
    uint64_t x = p->seed;
    for (int i = 0; i < 4; i++) s->rng[i] = splitmix64(&x);
    *out = s;
    return 0;
}

void pith_sampler_free(pith_sampler *s) {
    if (!s) return;
    free(s->cand);
    free(s->counts);
    free(s->mask);
    free(s);
}

static void apply_penalties(pith_sampler *s, float *logits, const int32_t *history, int n_history) {
    const pith_sampling_params *p = &s->p;
    if (n_history <= 0 || (p->repetition_penalty == 1.0f && p->presence_penalty == 0.0f &&
                           p->frequency_penalty == 0.0f))
        return;
    for (int i = 0; i < n_history; i++)
        if (history[i] >= 0 && history[i] < s->n_vocab) s->counts[history[i]]++;
    for (int i = 0; i < n_history; i++) {
        int32_t id = history[i];
        if (id < 0 || id >= s->n_vocab || s->counts[id] == 0) continue;
        float l = logits[id];
        if (p->repetition_penalty != 1.0f) l = l > 0 ? l / p->repetition_penalty : l * p->repetition_penalty;
        l -= (float)s->counts[id] * p->frequency_penalty + p->presence_penalty;
        logits[id] = l;
        s->counts[id] = 0; /* each distinct id once; also resets the scratch */
    }
}

static int cmp_desc(const void *a, const void *b) {
    const candidate *x = a, *y = b;
    if (x->logit != y->logit) return x->logit < y->logit ? 1 : -1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* Moves the k largest candidates to the front (unordered), by quickselect. */
static void partial_select(candidate *c, int n, int k) {
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        candidate pivot = c[(lo + hi) / 2];
        int i = lo, j = hi;
        while (i <= j) {
            while (cmp_desc(&c[i], &pivot) < 0) i++;
            while (cmp_desc(&c[j], &pivot) > 0) j--;
            if (i <= j) {
                candidate t = c[i];
                c[i] = c[j];
                c[j] = t;
                i++;
                j--;
            }
        }
        if (k - 1 <= j) hi = j;
        else if (k - 1 >= i) lo = i;
        else break;
    }
}

/* Greedy's recorded distribution: log-softmax of the (penalised) logits, candidates sorted. */
static void record_greedy(pith_sampler *s, const float *logits) {
    candidate *c = s->cand;
    int m = 0;
    float mx = -INFINITY;
    for (int i = 0; i < s->n_vocab; i++) {
        if (isnan(logits[i])) continue;
        c[m++] = (candidate){i, logits[i]};
        if (logits[i] > mx) mx = logits[i];
    }
    double sum = 0;
    for (int i = 0; i < m; i++) sum += exp((double)c[i].logit - mx);
    qsort(c, (size_t)m, sizeof *c, cmp_desc);
    s->dist_greedy = true;
    s->n_dist = m;
    s->dist_lse = mx + log(sum);
}

void pith_sampler_record(pith_sampler *s, bool on) {
    s->record = on;
    s->n_dist = 0;
}

int pith_sampler_dist_size(const pith_sampler *s) { return s->n_dist; }

void pith_sampler_dist_at(const pith_sampler *s, int i, int32_t *id, float *logprob) {
    const candidate *c = &s->cand[i];
    *id = c->id;
    *logprob = s->dist_greedy ? (float)(c->logit - s->dist_lse)
               : c->logit > 0 ? (float)log(c->logit / s->dist_total) : -INFINITY;
}

float pith_sampler_dist_logprob(const pith_sampler *s, int32_t id) {
    for (int i = 0; i < s->n_dist; i++) {
        if (s->cand[i].id != id) continue;
        int32_t got;
        float lp;
        pith_sampler_dist_at(s, i, &got, &lp);
        return lp;
    }
    return -INFINITY;
}

static int32_t argmax(const float *logits, int n) {
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (logits[i] > logits[best]) best = i;
    return best;
}

/* After penalties: greedy, or the filters and a draw. masked: only tokens with a finite logit (the
 * mask set the others to -inf) are candidates; -1 when there is none. */
static int32_t pick(pith_sampler *s, float *logits, bool masked) {
    const pith_sampling_params *p = &s->p;
    int n = s->n_vocab;
    if (p->temperature == 0.0f) {
        int32_t best = argmax(logits, n);
        if (masked && logits[best] == -INFINITY) return -1;
        if (s->record) record_greedy(s, logits);
        return best;
    }

    candidate *c = s->cand;
    int m = 0;
    for (int i = 0; i < n; i++)
        if (!isnan(logits[i]) && (!masked || logits[i] != -INFINITY)) c[m++] = (candidate){i, logits[i]};
    if (m == 0) return masked ? -1 : 0;
    if (p->top_k > 0 && p->top_k < m) {
        partial_select(c, m, p->top_k);
        m = p->top_k;
    }
    qsort(c, (size_t)m, sizeof *c, cmp_desc);

    /* softmax over the survivors, with temperature */
    float maxl = c[0].logit;
    double sum = 0.0;
    for (int i = 0; i < m; i++) {
        logits[c[i].id] = c[i].logit / p->temperature;
        c[i].logit = expf((c[i].logit - maxl) / p->temperature);
        sum += c[i].logit;
    }
    for (int i = 0; i < m; i++) c[i].logit = (float)(c[i].logit / sum);

    if (p->top_p < 1.0f) {
        double cum = 0.0;
        int keep = m;
        for (int i = 0; i < m; i++) {
            cum += c[i].logit;
            if (cum >= p->top_p) {
                keep = i + 1;
                break;
            }
        }
        m = keep;
    }
    if (p->min_p > 0.0f) {
        float floor_p = c[0].logit * p->min_p;
        int keep = 1;
        while (keep < m && c[keep].logit >= floor_p) keep++;
        m = keep;
    }

    double total = 0.0;
    for (int i = 0; i < m; i++) total += c[i].logit;
    if (s->record) {
        s->dist_greedy = false;
        s->n_dist = m;
        s->dist_total = total;
    }
    double r = rng_uniform(s->rng) * total, acc = 0.0;
    for (int i = 0; i < m; i++) {
        acc += c[i].logit;
        if (r < acc) return c[i].id;
    }
    return c[m - 1].id;
}

int32_t pith_sampler_sample(pith_sampler *s, float *logits, const int32_t *history, int n_history) {
    apply_penalties(s, logits, history, n_history);
    return pick(s, logits, false);
}

void pith_sampler_apply_mask(float *logits, int n_vocab, const uint32_t *mask) {
    for (int w = 0; w * 32 < n_vocab; w++) {
        uint32_t m = mask[w];
        if (m == 0xffffffffu) continue;
        int end = w * 32 + 32 < n_vocab ? w * 32 + 32 : n_vocab;
        for (int i = w * 32; i < end; i++)
            if (!((m >> (i & 31)) & 1u)) logits[i] = -INFINITY;
    }
}

int32_t pith_sampler_sample_constrained(pith_sampler *s, float *logits, const int32_t *history, int n_history,
                                        const pith_token_constraint *c) {
    if (!c) return pith_sampler_sample(s, logits, history, n_history);
    /* Masked tokens are -inf before and after the penalties (which scale or shift a logit), so the
     * penalties may run first; greedy then tries the unconstrained best token before building a mask. */
    apply_penalties(s, logits, history, n_history);
    if (s->p.temperature == 0.0f && c->allows && !s->record) { /* recording needs the whole distribution */
        int32_t best = argmax(logits, s->n_vocab);
        if (c->allows(c->ctx, best)) return best;
    }
    if (!s->mask && !(s->mask = malloc(((size_t)s->n_vocab + 31) / 32 * sizeof *s->mask))) return -1;
    if (c->fill(c->ctx, s->mask) <= 0) return -1;
    pith_sampler_apply_mask(logits, s->n_vocab, s->mask);
    return pick(s, logits, true);
}
