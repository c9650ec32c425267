/* DRY: restart sequences, their resolution from breaker strings, and the penalty (dry.h). The method is
 * llama.cpp's (after koboldcpp): find the most recent restart sequence in the window, which bounds how far
 * back a repeat may reach; for every earlier position, the length of the longest suffix of the window
 * that also ends there (the Z-function of the reversed window); the token that followed such a position
 * would extend a repeat of that length, and the longest one per token sets its penalty. */
#include "sample/dry.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int dry_init(pith_dry *d, int n_vocab) {
    memset(d, 0, sizeof *d);
    d->n_vocab = n_vocab;
    d->flags = calloc((size_t)n_vocab, 1);
    d->maxrep = calloc((size_t)n_vocab, sizeof *d->maxrep);
    d->sorted = true;
    if (!d->flags || !d->maxrep) {
        dry_free(d);
        return -1;
    }
    return 0;
}

void dry_free(pith_dry *d) {
    free(d->flags);
    free(d->maxrep);
    free(d->seqs);
    free(d->win);
    free(d->z);
    free(d->touched);
    memset(d, 0, sizeof *d);
}

int dry_add_restart(pith_dry *d, const int32_t *ids, int n) {
    if (n < 1) return -1;
    for (int i = 0; i < n && i <= DRY_MAX_TAIL; i++)
        if (ids[i] < 0 || ids[i] >= d->n_vocab) return -1;
    if (n == 1) {
        d->flags[ids[0]] |= DRY_ONE;
        return 0;
    }
    if (d->n_seqs == d->cap_seqs) {
        int cap = d->cap_seqs ? 2 * d->cap_seqs : 16;
        dry_restart *s = realloc(d->seqs, (size_t)cap * sizeof *s);
        if (!s) return -1;
        d->seqs = s;
        d->cap_seqs = cap;
    }
    dry_restart *r = &d->seqs[d->n_seqs++];
    memset(r, 0, sizeof *r);
    r->head = ids[0];
    r->n_tail = n - 1 < DRY_MAX_TAIL ? n - 1 : DRY_MAX_TAIL;
    memcpy(r->tail, ids + 1, (size_t)r->n_tail * sizeof *r->tail);
    d->flags[ids[0]] |= DRY_HEAD;
    d->sorted = false;
    return 0;
}

static int cmp_restart(const void *a, const void *b) {
    const dry_restart *x = a, *y = b;
    if (x->head != y->head) return x->head < y->head ? -1 : 1;
    if (x->n_tail != y->n_tail) return x->n_tail < y->n_tail ? -1 : 1;
    return memcmp(x->tail, y->tail, (size_t)x->n_tail * sizeof *x->tail);
}

/* Sorts the restart sequences by head and drops duplicates (the same tail for the same head). */
static void sort_restarts(pith_dry *d) {
    if (d->sorted) return;
    qsort(d->seqs, (size_t)d->n_seqs, sizeof *d->seqs, cmp_restart);
    int m = 0;
    for (int i = 0; i < d->n_seqs; i++)
        if (m == 0 || cmp_restart(&d->seqs[m - 1], &d->seqs[i])) d->seqs[m++] = d->seqs[i];
    d->n_seqs = m;
    d->sorted = true;
}

/* The first restart sequence with this head (sorted), or n_seqs. */
static int first_of(const pith_dry *d, int32_t head) {
    int lo = 0, hi = d->n_seqs;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (d->seqs[mid].head < head) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

static bool contains(const char *hay, size_t n, const char *needle, size_t m) {
    if (m > n) return false;
    for (size_t i = 0; i + m <= n; i++)
        if (hay[i] == needle[0] && !memcmp(hay + i, needle, m)) return true;
    return false;
}

int dry_resolve(pith_dry *d, const pith_sampling_params *p, const pith_tokenizer *tok, pith_err *err) {
    int nb = pith_sampling_dry_breaker_count(p);
    if (nb == 0 || !tok) return 0;
    int nv = pith_tokenizer_n_vocab(tok);
    if (nv > d->n_vocab) nv = d->n_vocab;
    size_t cap = pith_detok_max_piece(tok) + 1;
    char *piece = malloc(cap);
    /* tails[b * MAX + i]: the encoding of breaker b from byte i on (1 <= i < its length), made on first use */
    enum { MAX = PITH_DRY_BREAKER_MAX };
    int32_t **tails = calloc((size_t)nb * MAX, sizeof *tails);
    int *n_tails = calloc((size_t)nb * MAX, sizeof *n_tails);
    int rc = 0;
    if (!piece || !tails || !n_tails) {
        free(piece);
        free(tails);
        free(n_tails);
        return pith_errf(err, "out of memory");
    }
    for (int32_t id = 0; id < nv && rc == 0; id++) {
        size_t len = pith_tokenizer_token_bytes(tok, id, piece, cap);
        for (int b = 0; b < nb && rc == 0; b++) {
            const char *br = pith_sampling_dry_breaker(p, b);
            size_t bl = strlen(br);
            if (bl > MAX) bl = MAX;
            if (contains(piece, len, br, bl)) {
                d->flags[id] |= DRY_ONE;
                continue;
            }
            /* the token ends with the breaker's first len - pos bytes: the rest is the tail */
            for (size_t pos = 0; pos < len && rc == 0; pos++) {
                if (piece[pos] != br[0]) continue;
                size_t i = 1;
                while (i < bl && pos + i < len && piece[pos + i] == br[i]) i++;
                if (pos + i < len) continue; /* a mismatch before the token's end */
                if (!tails[b * MAX + i]) {
                    int32_t *ids = NULL;
                    int n = 0;
                    if (pith_tokenizer_encode(tok, br + i, bl - i, 0, &ids, &n, err)) {
                        rc = -1;
                        break;
                    }
                    if (!ids && !(ids = malloc(sizeof *ids))) {
                        rc = pith_errf(err, "out of memory");
                        break;
                    }
                    tails[b * MAX + i] = ids;
                    n_tails[b * MAX + i] = n;
                }
                int32_t seq[1 + DRY_MAX_TAIL];
                const int32_t *tail = tails[b * MAX + i];
                int n = n_tails[b * MAX + i] < DRY_MAX_TAIL ? n_tails[b * MAX + i] : DRY_MAX_TAIL;
                seq[0] = id;
                int k = 0;
                for (; k < n && tail[k] >= 0 && tail[k] < d->n_vocab; k++) seq[1 + k] = tail[k];
                if (k < n) continue; /* a tail token the sampler's vocabulary lacks can never match */
                if (dry_add_restart(d, seq, 1 + n)) rc = pith_errf(err, "out of memory");
            }
        }
    }
    for (int i = 0; i < nb * MAX; i++) free(tails[i]);
    free(tails);
    free(n_tails);
    free(piece);
    sort_restarts(d);
    return rc;
}

/* Grows the window scratch to hold n. */
static int reserve(pith_dry *d, int n) {
    if (n <= d->cap) return 0;
    int cap = d->cap ? d->cap : 256;
    while (cap < n) cap *= 2;
    int32_t *w = realloc(d->win, (size_t)cap * sizeof *w);
    if (w) d->win = w;
    int *z = realloc(d->z, (size_t)cap * sizeof *z);
    if (z) d->z = z;
    int32_t *t = realloc(d->touched, (size_t)cap * sizeof *t);
    if (t) d->touched = t;
    if (!w || !z || !t) return -1;
    d->cap = cap;
    return 0;
}

/* How many of the most recent tokens a repeat may span: the distance back to the end of the most recent
 * restart sequence in the window (its longest match where several start at one token); w when none. */
static int repeat_limit(const pith_dry *d, const int32_t *r, int w) {
    for (int i = 0; i < w; i++) {
        int32_t t = r[i];
        if (t < 0 || t >= d->n_vocab || !d->flags[t]) continue;
        int longest = (d->flags[t] & DRY_ONE) ? 0 : -1;
        if (d->flags[t] & DRY_HEAD) {
            for (int j = first_of(d, t); j < d->n_seqs && d->seqs[j].head == t; j++) {
                const dry_restart *s = &d->seqs[j];
                if (s->n_tail <= longest || s->n_tail > i) continue;
                int o = 0;
                while (o < s->n_tail && s->tail[o] == r[i - 1 - o]) o++;
                if (o == s->n_tail) longest = s->n_tail;
            }
        }
        if (longest >= 0) return i - longest;
    }
    return w;
}

void dry_apply(pith_dry *d, const pith_sampling_params *p, float *logits, const int32_t *history, int n_history) {
    if (!(p->dry_multiplier != 0.0f && p->dry_base >= 1.0f && p->dry_penalty_last_n != 0)) return;
    int w = p->dry_penalty_last_n < 0 || p->dry_penalty_last_n > n_history ? n_history : p->dry_penalty_last_n;
    const int allowed = p->dry_allowed_length;
    if (w <= allowed || w <= 0 || reserve(d, w)) return;
    sort_restarts(d);
    int32_t *r = d->win;
    for (int i = 0; i < w; i++) r[i] = history[n_history - 1 - i];
    const int limit = repeat_limit(d, r, w);
    if (limit < allowed) return;
    /* z[k]: the longest common prefix of r and r[k..] -- how many tokens before and including the one k
     * back match the window's last tokens */
    int *z = d->z;
    z[0] = w;
    for (int k = 1, lo = 0, hi = 0; k < w; k++) {
        int n = 0;
        if (k < hi) {
            n = z[k - lo];
            if (n > hi - k) n = hi - k;
        }
        while (k + n < w && r[n] == r[k + n]) n++;
        z[k] = n;
        if (k + n > hi) {
            lo = k;
            hi = k + n;
        }
    }
    int n_touched = 0;
    for (int k = 1; k < w; k++) {
        int len = z[k] < limit ? z[k] : limit;
        int32_t t = r[k - 1]; /* the token that followed */
        if (len < allowed || t < 0 || t >= d->n_vocab) continue;
        if (d->maxrep[t] == 0) d->touched[n_touched++] = t;
        if (d->maxrep[t] < len + 1) d->maxrep[t] = len + 1;
    }
    int max_exp = 0; /* keeps base^exp finite in float (llama.cpp's bound) */
    if (p->dry_base > 1.000001f) max_exp = (int)(88.7228391f / logf(p->dry_base));
    for (int i = 0; i < n_touched; i++) {
        int32_t t = d->touched[i];
        int e = d->maxrep[t] - 1 - allowed;
        d->maxrep[t] = 0;
        if (d->flags[t] & DRY_ONE) continue;
        if (max_exp > 0 && e > max_exp) e = max_exp;
        logits[t] -= (float)((double)p->dry_multiplier * pow((double)p->dry_base, e));
    }
}
