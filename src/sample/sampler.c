/* Sampling pipeline: penalties -> DRY -> (greedy | top-n-sigma -> top-k -> temperature -> softmax ->
 * typical-p -> top-p -> min-p -> XTC -> draw). Candidates are kept as (id, logit) pairs; sorting happens
 * only when a filter needs order, and never of the whole vocabulary unless recording asks for the whole
 * distribution (or typical-p or XTC runs without top-k). A constraint (structured output) masks tokens
 * to -inf first. DRY lives in dry.c. */
#include "pith/sampler.h"

#include "sample/dry.h"
#include "util/rows.h"

#include <float.h>
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
    candidate *tmp;         /* [n_vocab] scratch for sorting */
    float *prob;            /* [n_vocab] scratch: a whole row's softmax terms */
    double *bsum;           /* [n_vocab / PITH_ROW_BLOCK + 1] scratch: their sums per block */
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
    bool dry_on;            /* DRY enabled: dry holds its tables */
    pith_dry dry;
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

/* llama.cpp's default breakers: "\n", ":", "\"", "*", in the list form of dry_sequence_breakers. */
static const char default_breakers[] = "\n\0:\0\"\0*\0";

pith_sampling_params pith_sampling_defaults(void) {
    pith_sampling_params p = {
        .temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f,
        .repetition_penalty = 1.0f, .presence_penalty = 0.0f, .frequency_penalty = 0.0f, .seed = 0,
        .dry_multiplier = 0.0f, .dry_base = 1.75f, .dry_allowed_length = 2, .dry_penalty_last_n = -1,
        .xtc_probability = 0.0f, .xtc_threshold = 0.1f, .typical_p = 1.0f, .top_n_sigma = -1.0f,
    };
    memcpy(p.dry_sequence_breakers, default_breakers, sizeof default_breakers);
    return p;
}

int pith_sampling_set_dry_breakers(pith_sampling_params *p, const char *const *breakers, int n, pith_err *err) {
    char buf[PITH_DRY_BREAKERS_BYTES];
    size_t at = 0;
    if (n < 0 || (n > 0 && !breakers)) return pith_errf(err, "dry_sequence_breakers: bad list");
    for (int i = 0; i < n; i++) {
        size_t len = breakers[i] ? strlen(breakers[i]) : 0;
        if (len == 0) return pith_errf(err, "dry_sequence_breakers: breaker %d is empty", i);
        if (len > PITH_DRY_BREAKER_MAX) len = PITH_DRY_BREAKER_MAX; /* as llama.cpp cuts them */
        if (at + len + 2 > sizeof buf)
            return pith_errf(err, "dry_sequence_breakers: at most %d bytes together", PITH_DRY_BREAKERS_BYTES - 1 - n);
        memcpy(buf + at, breakers[i], len);
        at += len;
        buf[at++] = '\0';
    }
    buf[at++] = '\0';
    memset(p->dry_sequence_breakers, 0, sizeof p->dry_sequence_breakers);
    memcpy(p->dry_sequence_breakers, buf, at);
    return 0;
}

/* Where breaker i starts in p's list (i up to the count: the final empty string); -1 when the list is
 * malformed (runs past the buffer) before it. */
static int breaker_at(const pith_sampling_params *p, int i) {
    const char *b = p->dry_sequence_breakers;
    int at = 0;
    for (int k = 0; k < i; k++) {
        const char *nul = memchr(b + at, '\0', PITH_DRY_BREAKERS_BYTES - (size_t)at);
        if (!nul || nul == b + at) return -1;
        at = (int)(nul - b) + 1;
        if (at >= PITH_DRY_BREAKERS_BYTES) return -1;
    }
    return at;
}

int pith_sampling_dry_breaker_count(const pith_sampling_params *p) {
    int n = 0;
    for (int at; (at = breaker_at(p, n)) >= 0 && p->dry_sequence_breakers[at];) n++;
    return n;
}

const char *pith_sampling_dry_breaker(const pith_sampling_params *p, int i) {
    int at = breaker_at(p, i);
    return at < 0 ? "" : p->dry_sequence_breakers + at;
}

/* Whether the breaker list ends inside its buffer and every breaker is at most PITH_DRY_BREAKER_MAX. */
static bool breakers_ok(const pith_sampling_params *p) {
    for (int i = 0;; i++) {
        int at = breaker_at(p, i);
        if (at < 0) return false;
        const char *b = p->dry_sequence_breakers + at;
        const char *nul = memchr(b, '\0', PITH_DRY_BREAKERS_BYTES - (size_t)at);
        if (!nul) return false;
        if (nul == b) return true;
        if (nul - b > PITH_DRY_BREAKER_MAX) return false;
    }
}

static bool dry_enabled(const pith_sampling_params *p) {
    return p->dry_multiplier > 0.0f && p->dry_base >= 1.0f && p->dry_penalty_last_n != 0;
}

static bool xtc_enabled(const pith_sampling_params *p) {
    return p->xtc_probability > 0.0f && p->xtc_threshold <= 0.5f;
}

static bool typical_enabled(const pith_sampling_params *p) { return p->typical_p > 0.0f && p->typical_p < 1.0f; }

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
    if (!(p->dry_multiplier >= 0.0f && isfinite(p->dry_multiplier)))
        return pith_errf(err, "dry_multiplier must be a finite number >= 0 (0 disables DRY)");
    if (!(isfinite(p->dry_base) && (p->dry_base >= 1.0f || p->dry_multiplier == 0.0f)))
        return pith_errf(err, "dry_base must be >= 1");
    if (p->dry_allowed_length < 0) return pith_errf(err, "dry_allowed_length must be >= 0");
    if (p->dry_penalty_last_n < -1)
        return pith_errf(err, "dry_penalty_last_n must be >= -1 (-1: the whole context, 0: off)");
    if (!breakers_ok(p))
        return pith_errf(err, "dry_sequence_breakers: malformed list (each breaker 1 to %d bytes)", PITH_DRY_BREAKER_MAX);
    if (!(p->xtc_probability >= 0.0f && p->xtc_probability <= 1.0f))
        return pith_errf(err, "xtc_probability must be in [0, 1]");
    if (!(p->xtc_threshold >= 0.0f && p->xtc_threshold <= 1.0f))
        return pith_errf(err, "xtc_threshold must be in [0, 1] (above 0.5 disables XTC)");
    if (!(p->typical_p >= 0.0f && p->typical_p <= 1.0f))
        return pith_errf(err, "typical_p must be in [0, 1] (1 disables it)");
    if (!(p->top_n_sigma >= -1.0f && p->top_n_sigma <= 100.0f))
        return pith_errf(err, "top_n_sigma must be between -1 and 100 (<= 0 disables it)");
    return 0;
}

int pith_sampler_new(const pith_sampling_params *p, int n_vocab, pith_sampler **out, pith_err *err) {
    return pith_sampler_new_vocab(p, NULL, n_vocab, out, err);
}

int pith_sampler_new_vocab(const pith_sampling_params *p, const pith_tokenizer *tok, int n_vocab,
                           pith_sampler **out, pith_err *err) {
    *out = NULL;
    if (pith_sampling_validate(p, err)) return -1;
    if (n_vocab <= 0) return pith_errf(err, "sampler: vocabulary size must be positive");
    pith_sampler *s = calloc(1, sizeof *s);
    if (!s) return pith_errf(err, "out of memory");
    s->cand = malloc((size_t)n_vocab * sizeof *s->cand);
    s->counts = calloc((size_t)n_vocab, sizeof *s->counts);
    s->tmp = malloc((size_t)n_vocab * sizeof *s->tmp);
    s->prob = malloc((size_t)n_vocab * sizeof *s->prob);
    s->bsum = malloc(((size_t)n_vocab / PITH_ROW_BLOCK + 1) * sizeof *s->bsum);
    if (!s->cand || !s->counts || !s->prob || !s->bsum || !s->tmp) {
        pith_sampler_free(s);
        return pith_errf(err, "out of memory");
    }
    s->p = *p;
    s->n_vocab = n_vocab;
    if (dry_enabled(p)) {
        if (dry_init(&s->dry, n_vocab)) {
            pith_sampler_free(s);
            return pith_errf(err, "out of memory");
        }
        s->dry_on = true;
        if (dry_resolve(&s->dry, p, tok, err)) {
            pith_sampler_free(s);
            return pith_err_prefix(err, "dry_sequence_breakers");
        }
    }
    uint64_t x = p->seed;
    for (int i = 0; i < 4; i++) s->rng[i] = splitmix64(&x);
    *out = s;
    return 0;
}

void pith_sampler_free(pith_sampler *s) {
    if (!s) return;
    free(s->cand);
    free(s->counts);
    free(s->prob);
    free(s->tmp);
    free(s->bsum);
    free(s->mask);
    if (s->dry_on) dry_free(&s->dry);
    free(s);
}

int pith_sampler_add_dry_restart(pith_sampler *s, const int32_t *ids, int n) {
    if (!s->dry_on || !ids) return s->dry_on ? -1 : 0; /* DRY off: nothing to restart */
    return dry_add_restart(&s->dry, ids, n);
}

/* Penalties, then DRY: what every path (greedy too) applies to the row first. */
static void apply_history(pith_sampler *s, float *logits, const int32_t *history, int n_history);

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

static void apply_history(pith_sampler *s, float *logits, const int32_t *history, int n_history) {
    apply_penalties(s, logits, history, n_history);
    if (s->dry_on) dry_apply(&s->dry, &s->p, logits, history, n_history);
}

/* Top-n-sigma (llama.cpp's): logits below max - n * sigma become -inf, sigma the standard deviation
 * (over their count) of the finite logits (NaN and -inf left out). Returns whether it ran: false when
 * no logit is finite (or an infinite one makes sigma meaningless), the row then as it was. */
static bool apply_top_n_sigma(pith_sampler *s, float *logits) {
    const int n = s->n_vocab;
    double sum = 0.0;
    float mx = -INFINITY;
    int cnt = 0;
    for (int i = 0; i < n; i++) {
        float l = logits[i];
        if (isnan(l) || l == -INFINITY) continue;
        sum += l;
        cnt++;
        if (l > mx) mx = l;
    }
    if (cnt == 0 || !isfinite(sum)) return false;
    const double mean = sum / cnt;
    double acc = 0.0;
    for (int i = 0; i < n; i++) {
        float l = logits[i];
        if (isnan(l) || l == -INFINITY) continue;
        acc += ((double)l - mean) * ((double)l - mean);
    }
    const double floor_l = (double)mx - (double)s->p.top_n_sigma * sqrt(acc / cnt);
    for (int i = 0; i < n; i++)
        if ((double)logits[i] < floor_l) logits[i] = -INFINITY;
    return true;
}

static int cmp_desc(const void *a, const void *b) {
    const candidate *x = a, *y = b;
    if (x->logit != y->logit) return x->logit < y->logit ? 1 : -1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* The order of cmp_desc as an unsigned key, smallest first: larger floats give smaller keys (-0 as +0). */
static uint32_t desc_key(float f) {
    uint32_t u;
    if (f == 0.0f) f = 0.0f;
    memcpy(&u, &f, sizeof u);
    return (u & 0x80000000u) ? u : ~(u | 0x80000000u);
}

/* Sorts c[0..m), given in increasing id order, into cmp_desc's order: a stable radix sort on desc_key
 * (4 passes of 8 bits, those where every key has the same digit skipped), so equal logits stay in id
 * order. tmp holds m. About 20x qsort on 40k candidates (qsort calls its comparator per step). */
static void sort_desc_by_id(candidate *c, int m, candidate *tmp) {
    if (m < 64) {
        qsort(c, (size_t)m, sizeof *c, cmp_desc);
        return;
    }
    uint32_t count[4][256] = {{0}};
    for (int i = 0; i < m; i++) {
        uint32_t k = desc_key(c[i].logit);
        for (int d = 0; d < 4; d++) count[d][(k >> (8 * d)) & 255]++;
    }
    candidate *src = c, *dst = tmp;
    for (int d = 0; d < 4; d++) {
        uint32_t *cnt = count[d];
        if (cnt[(desc_key(c[0].logit) >> (8 * d)) & 255] == (uint32_t)m) continue;
        uint32_t at = 0;
        for (int v = 0; v < 256; v++) {
            uint32_t x = cnt[v];
            cnt[v] = at;
            at += x;
        }
        for (int i = 0; i < m; i++) dst[cnt[(desc_key(src[i].logit) >> (8 * d)) & 255]++] = src[i];
        candidate *t = src;
        src = dst;
        dst = t;
    }
    if (src != c) memcpy(c, src, (size_t)m * sizeof *c);
}

/* A candidate: not NaN, and with a mask, not -inf. */
static bool usable(float l, bool masked) { return !isnan(l) && (!masked || l != -INFINITY); }

/* Every candidate of logits[0..n) into c, in id order (sort_desc_by_id's input); returns how many. */
static int collect(const float *logits, int n, bool masked, candidate *c) {
    int m = 0;
    for (int i = 0; i < n; i++)
        if (usable(logits[i], masked)) c[m++] = (candidate){i, logits[i]};
    return m;
}

/* Greedy's recorded distribution: log-softmax of the (penalised) logits, candidates sorted. */
static void record_greedy(pith_sampler *s, const float *logits) {
    candidate *c = s->cand;
    int m = collect(logits, s->n_vocab, false, c);
    sort_desc_by_id(c, m, s->tmp);
    s->dist_greedy = true;
    s->n_dist = m;
    s->dist_lse = pith_row_logsumexp(logits, s->n_vocab);
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

/* Top-k asks of blocks of 64 logits whether any beats the heap's worst: small blocks, so that few
 * logits are re-read one by one around each of the heap's few insertions. Independent lanes, as in
 * rows.c: one compare per element. */
enum { TOPK_BLOCK = 64, TOPK_LANES = 16 };
/* Above this k the heap's insertions cost more than sorting every candidate. */
enum { TOPK_HEAP_MAX = 2048 };

/* Whether some logit of x[0..TOPK_BLOCK) is above t (NaN is not). */
static bool block_beats(const float *x, float t) {
    int any[TOPK_LANES] = {0};
    for (int i = 0; i < TOPK_BLOCK; i += TOPK_LANES)
        for (int j = 0; j < TOPK_LANES; j++) any[j] |= x[i + j] > t;
    int r = 0;
    for (int j = 0; j < TOPK_LANES; j++) r |= any[j];
    return r != 0;
}

static bool better(candidate a, candidate b) { return a.logit > b.logit || (a.logit == b.logit && a.id < b.id); }

/* Heap of the k best candidates seen so far, the worst at the root. */
static void heap_down(candidate *h, int n, int i) {
    for (;;) {
        int w = i, l = 2 * i + 1, r = l + 1;
        if (l < n && better(h[w], h[l])) w = l;
        if (r < n && better(h[w], h[r])) w = r;
        if (w == i) return;
        candidate t = h[i];
        h[i] = h[w];
        h[w] = t;
        i = w;
    }
}

static void heap_up(candidate *h, int i) {
    while (i > 0) {
        int up = (i - 1) / 2;
        if (!better(h[up], h[i])) return;
        candidate t = h[i];
        h[i] = h[up];
        h[up] = t;
        i = up;
    }
}

/* Offers logit x[i] to the heap h of at most k. */
static void heap_offer(candidate *h, int *m, int k, int32_t i, float l) {
    candidate c = {i, l};
    if (*m < k) {
        h[*m] = c;
        heap_up(h, (*m)++);
    } else if (better(c, h[0])) {
        h[0] = c;
        heap_down(h, k, 0);
    }
}

/* The k best candidates of logits (by logit, ties to the lower id) into c, unordered; returns how many
 * (fewer than k when fewer are usable). One pass: once k are held, a block none of whose logits beats
 * the worst of them is skipped whole, so the heap sees few of a large vocabulary's logits. */
static int select_top_k(const float *x, int n, int k, bool masked, candidate *c) {
    int m = 0, nb = n / TOPK_BLOCK;
    for (int b = 0; b < nb; b++) {
        const float *p = x + (size_t)b * TOPK_BLOCK;
        if (m == k && !block_beats(p, c[0].logit)) continue;
        for (int i = 0; i < TOPK_BLOCK; i++)
            if (usable(p[i], masked)) heap_offer(c, &m, k, b * TOPK_BLOCK + i, p[i]);
    }
    for (int i = nb * TOPK_BLOCK; i < n; i++)
        if (usable(x[i], masked)) heap_offer(c, &m, k, i, x[i]);
    return m;
}

/* Top-p over sorted probabilities c[0..g): the length of the smallest prefix whose mass reaches top_p,
 * or 0 when all g together fall short. */
static int top_p_prefix(const candidate *c, int g, float top_p) {
    double cum = 0.0;
    for (int i = 0; i < g; i++) {
        cum += c[i].logit;
        if (cum >= top_p) return i + 1;
    }
    return 0;
}

/* Min-p over sorted probabilities c[0..m): the first, and those after it down to min_p times it. */
static int min_p_prefix(const candidate *c, int m, float min_p) {
    float floor_p = c[0].logit * min_p;
    int k = 1;
    while (k < m && c[k].logit >= floor_p) k++;
    return k;
}

/* The draw over probabilities c[0..m) in their order, r uniform in [0, total). */
static int32_t draw_sorted(const candidate *c, int m, double r) {
    double acc = 0.0;
    for (int i = 0; i < m; i++) {
        acc += c[i].logit;
        if (r < acc) return c[i].id;
    }
    return c[m - 1].id;
}

/* Locally typical sampling over probabilities c[0..m) sorted best first and summing to 1: ordered by
 * |-log p - H| (H the entropy), the fewest whose probability sums to more than typical_p are kept, moved
 * to the front in their order and renormalised; returns how many. Surprise grows along the sorted order,
 * so the tokens less surprising than H form a prefix whose scores fall towards its end and the others a
 * suffix whose scores rise: the kept tokens are one run around that split, found by merging the two
 * (ties to the more likely side). */
static int typical_prefix(candidate *c, int m, float typical_p) {
    double h = 0.0;
    for (int i = 0; i < m; i++)
        if (c[i].logit > 0.0f) h -= c[i].logit * log(c[i].logit);
    int split = 0;
    while (split < m && c[split].logit > 0.0f && -log(c[split].logit) < h) split++;
    int lo = split, hi = split;
    double cum = 0.0;
    while (lo > 0 || hi < m) {
        bool left = lo > 0;
        if (left && hi < m) {
            double sl = h + log(c[lo - 1].logit);
            double sr = c[hi].logit > 0.0f ? -log(c[hi].logit) - h : INFINITY;
            left = sl <= sr;
        }
        cum += left ? c[--lo].logit : c[hi++].logit;
        if (cum > typical_p) break;
    }
    if (lo > 0 && hi - lo < m) memmove(c, c + lo, (size_t)(hi - lo) * sizeof *c);
    m = hi - lo;
    double sum = 0.0;
    for (int i = 0; i < m; i++) sum += c[i].logit;
    for (int i = 0; i < m && sum > 0.0; i++) c[i].logit = (float)(c[i].logit / sum);
    return m;
}

/* Typical-p, top-p and min-p over probabilities c[0..m) sorted best first, summing to 1; returns how
 * many are kept (a prefix of c). */
static int truncate_sorted(pith_sampler *s, int m) {
    const pith_sampling_params *p = &s->p;
    candidate *c = s->cand;
    if (typical_enabled(p)) m = typical_prefix(c, m, p->typical_p);
    if (p->top_p < 1.0f) {
        int keep = top_p_prefix(c, m, p->top_p);
        if (keep) m = keep;
    }
    if (p->min_p > 0.0f) m = min_p_prefix(c, m, p->min_p);
    return m;
}

/* XTC over the kept c[0..m) (best first, summing to *total): with probability xtc_probability, when
 * at least two have probability >= xtc_threshold, all of those but the last (least likely) are dropped.
 * Returns how many are left, at the front of c; *total follows. */
static int apply_xtc(pith_sampler *s, int m, double *total) {
    const pith_sampling_params *p = &s->p;
    candidate *c = s->cand;
    if (m < 2 || rng_uniform(s->rng) > p->xtc_probability) return m;
    int above = 0;
    while (above < m && c[above].logit / *total >= (double)p->xtc_threshold) above++;
    if (above < 2) return m;
    memmove(c, c + above - 1, (size_t)(m - above + 1) * sizeof *c);
    m -= above - 1;
    *total = 0.0;
    for (int i = 0; i < m; i++) *total += c[i].logit;
    return m;
}

/* The recorded distribution (pith_sampler_record): c[0..m) with probabilities summing to total. */
static void keep_dist(pith_sampler *s, int m, double total) {
    if (!s->record) return;
    s->dist_greedy = false;
    s->n_dist = m;
    s->dist_total = total;
}

/* XTC, then the draw over the kept prefix c[0..m) of the candidates, best first, renormalised;
 * recorded if asked. */
static int32_t draw_kept(pith_sampler *s, int m) {
    const candidate *c = s->cand;
    double total = 0.0;
    for (int i = 0; i < m; i++) total += c[i].logit;
    if (xtc_enabled(&s->p)) m = apply_xtc(s, m, &total);
    int32_t tok = draw_sorted(c, m, rng_uniform(s->rng) * total);
    keep_dist(s, m, total);
    return tok;
}

/* Top-k (k below the vocabulary): the k best by heap, sorted, then softmax, top-p, min-p and the draw
 * over those k best first. */
static int32_t pick_top_k(pith_sampler *s, float *logits, bool masked) {
    const pith_sampling_params *p = &s->p;
    candidate *c = s->cand;
    int m;
    if (p->top_k <= TOPK_HEAP_MAX) {
        m = select_top_k(logits, s->n_vocab, p->top_k, masked, c);
        qsort(c, (size_t)m, sizeof *c, cmp_desc);
    } else {
        /* a large k: every candidate sorted (radix, a few passes) beats k log k heap steps */
        m = collect(logits, s->n_vocab, masked, c);
        sort_desc_by_id(c, m, s->tmp);
        if (m > p->top_k) m = p->top_k;
    }
    if (m == 0) return masked ? -1 : 0;
    const float maxl = c[0].logit;
    double sum = 0.0;
    for (int i = 0; i < m; i++) {
        logits[c[i].id] = c[i].logit / p->temperature;
        c[i].logit = expf((c[i].logit - maxl) / p->temperature);
        sum += c[i].logit;
    }
    for (int i = 0; i < m; i++) c[i].logit = (float)(c[i].logit / sum);
    return draw_kept(s, truncate_sorted(s, m));
}

/* The draw over the whole row in id order: r in [0, total), found block by block. */
static int32_t draw_row(const float *e, int n, const double *bsum, double r) {
    double acc = 0.0;
    for (int b = 0; b * PITH_ROW_BLOCK < n; b++) {
        if (r >= acc + bsum[b]) {
            acc += bsum[b];
            continue;
        }
        const int lo = b * PITH_ROW_BLOCK, hi = n - lo < PITH_ROW_BLOCK ? n : lo + PITH_ROW_BLOCK;
        int32_t last = lo;
        for (int i = lo; i < hi; i++) {
            if (e[i] <= 0.0f) continue;
            acc += e[i];
            last = i;
            if (r < acc) return i;
        }
        return last; /* rounding: the block's terms summed one by one fell short of its float sum */
    }
    for (int i = n - 1; i > 0; i--)
        if (e[i] > 0.0f) return i;
    return 0;
}

/* Candidates with probability e[i] / total at least t (in float, as the filters see them) into c,
 * sorted best first; returns how many. t 0: every usable token. */
static int gather_sorted(pith_sampler *s, const float *logits, const float *e, int n, double total, float t,
                         bool masked) {
    candidate *c = s->cand;
    /* e[i] below this cannot reach t after the division (a margin far above the rounding of either) */
    const float e_min = (float)((double)t * total * (1.0 - 1e-5));
    int g = 0;
    for (int i = 0; i < n; i++) {
        if (e[i] < e_min || !usable(logits[i], masked)) continue;
        float pi = (float)(e[i] / total);
        if (pi >= t) c[g++] = (candidate){i, pi};
    }
    sort_desc_by_id(c, g, s->tmp);
    return g;
}

/* The sum of the terms e[i] >= thr (NaN and -inf tokens have 0). */
static double mass_above(const float *e, int n, float thr) {
    double mass = 0.0;
    for (int i = 0; i < n; i++)
        if (e[i] >= thr) mass += e[i];
    return mass;
}

/* No top-k: softmax over the whole row; without top-p and min-p the draw runs in id order and nothing is
 * sorted (sorting 152k candidates cost 20-26 ms a token). Top-p and min-p keep a prefix of the order best
 * first, so only candidates above a threshold are sorted: min-p's floor bounds the prefix at once;
 * top-p alone lowers a threshold 16-fold until the candidates above it reach top_p. */
static int32_t pick_row(pith_sampler *s, float *logits, bool masked) {
    const pith_sampling_params *p = &s->p;
    const int n = s->n_vocab;
    const float maxl = pith_row_max(logits, n);
    if (!(maxl > -INFINITY)) return masked ? -1 : 0;
    const double total = pith_row_softmax(logits, n, p->temperature, maxl, s->prob, s->bsum);
    candidate *c = s->cand;
    const bool plain = p->top_p >= 1.0f && p->min_p <= 0.0f;
    if (typical_enabled(p) || (plain && xtc_enabled(p))) {
        /* typical-p's order starts mid-distribution, and XTC alone may cut anywhere: every candidate */
        int g = gather_sorted(s, logits, s->prob, n, total, 0.0f, masked);
        return draw_kept(s, truncate_sorted(s, g));
    }
    if (plain) {
        int32_t tok = draw_row(s->prob, n, s->bsum, rng_uniform(s->rng) * total);
        if (s->record) {
            int g = gather_sorted(s, logits, s->prob, n, total, 0.0f, masked);
            double sum = 0.0;
            for (int i = 0; i < g; i++) sum += c[i].logit;
            keep_dist(s, g, sum);
        }
        return tok;
    }
    const float p_max = (float)(1.0 / total); /* the best token's term is exactly 1 */
    int m;
    if (p->min_p > 0.0f) {
        int g = gather_sorted(s, logits, s->prob, n, total, p_max * p->min_p, masked);
        m = p->top_p < 1.0f ? top_p_prefix(c, g, p->top_p) : 0;
        if (!m) m = g;
        m = min_p_prefix(c, m, p->min_p);
    } else {
        for (float t = p_max / 16;; t /= 16) {
            if (t < FLT_MIN) t = 0.0f; /* the last round takes every candidate */
            /* the mass above t first (one pass, no sort); the sorted prefix decides, as rounding may
             * leave it just short of the unordered sum */
            if (t > 0.0f && mass_above(s->prob, n, (float)(t * total)) < p->top_p * total) continue;
            int g = gather_sorted(s, logits, s->prob, n, total, t, masked);
            m = top_p_prefix(c, g, p->top_p);
            if (m || t == 0.0f) {
                if (!m) m = g;
                break;
            }
        }
    }
    return draw_kept(s, m);
}

/* After penalties: greedy, or the filters and a draw. masked: only tokens with a finite logit (the
 * mask set the others to -inf) are candidates; -1 when there is none. */
static int32_t pick(pith_sampler *s, float *logits, bool masked) {
    const pith_sampling_params *p = &s->p;
    if (p->temperature == 0.0f) {
        int32_t best = pith_row_argmax(logits, s->n_vocab);
        if (masked && logits[best] == -INFINITY) return -1;
        if (s->record) record_greedy(s, logits);
        return best;
    }
    /* top-n-sigma's -inf logits are no candidates (a mask of its own; it always keeps the best) */
    if (p->top_n_sigma > 0.0f && apply_top_n_sigma(s, logits) && !masked) {
        int32_t tok = p->top_k > 0 && p->top_k < s->n_vocab ? pick_top_k(s, logits, true) : pick_row(s, logits, true);
        return tok < 0 ? 0 : tok;
    }
    return p->top_k > 0 && p->top_k < s->n_vocab ? pick_top_k(s, logits, masked) : pick_row(s, logits, masked);
}

int32_t pith_sampler_sample(pith_sampler *s, float *logits, const int32_t *history, int n_history) {
    apply_history(s, logits, history, n_history);
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
    /* Masked tokens are -inf before and after the penalties and DRY (which scale or shift a logit), so
     * they may run first; greedy then tries the unconstrained best token before building a mask. */
    apply_history(s, logits, history, n_history);
    if (s->p.temperature == 0.0f && c->allows && !s->record) { /* recording needs the whole distribution */
        int32_t best = pith_row_argmax(logits, s->n_vocab);
        if (c->allows(c->ctx, best)) return best;
    }
    if (!s->mask && !(s->mask = malloc(((size_t)s->n_vocab + 31) / 32 * sizeof *s->mask))) return -1;
    if (c->fill(c->ctx, s->mask) <= 0) return -1;
    pith_sampler_apply_mask(logits, s->n_vocab, s->mask);
    return pick(s, logits, true);
}
