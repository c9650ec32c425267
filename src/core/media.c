#include "core/media.h"

#include <stdlib.h>
#include <string.h>

uint64_t media_hash_input(const float *input, size_t n) {
    /* FNV-1a over 64-bit words with a final avalanche: the bytes decide the name, and a hash is
     * computed once per request, so plain and fast is enough (a collision can only make two images
     * share cached rows, at 2^-64). */
    uint64_t h = 0xcbf29ce484222325ull ^ (uint64_t)n;
    const unsigned char *p = (const unsigned char *)input;
    size_t bytes = n * sizeof *input, i = 0;
    for (; i + 8 <= bytes; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h = (h ^ w) * 0x100000001b3ull;
    }
    for (; i < bytes; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return h ? h : 1;
}

int media_set_create(const pith_media *m, int n, int n_prompt, media_set **out, pith_err *err) {
    *out = NULL;
    if (n < 0 || n > 4096) return pith_errf(err, "media items: between 0 and 4096 expected, not %d", n);
    if (n > 0 && !m) return pith_errf(err, "media items: %d given without the array", n);
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        const pith_media *x = &m[i];
        if (x->n_tokens < 1 || x->pos < 0 || x->pos > n_prompt - x->n_tokens)
            return pith_errf(err, "media item %d covers positions %d..%d, outside the prompt of %d tokens", i, x->pos,
                             x->pos + x->n_tokens - 1, n_prompt);
        if (i > 0 && x->pos < m[i - 1].pos + m[i - 1].n_tokens)
            return pith_errf(err, "media item %d starts at %d, inside or before item %d", i, x->pos, i - 1);
        if (!x->input || x->n_input == 0 || x->n_input > ((size_t)1 << 32))
            return pith_errf(err, "media item %d has no encoder input", i);
        if ((x->rows || x->cols) && (x->rows < 1 || x->cols < 1 || (int64_t)x->rows * x->cols != x->n_tokens))
            return pith_errf(err, "media item %d: a grid of %d x %d does not hold its %d tokens", i, x->rows, x->cols,
                             x->n_tokens);
        total += x->n_input;
    }
    media_set *ms = calloc(1, sizeof *ms);
    if (!ms) return pith_errf(err, "out of memory");
    ms->spans = calloc((size_t)(n ? n : 1), sizeof *ms->spans);
    ms->inputs = malloc((total ? total : 1) * sizeof *ms->inputs);
    if (!ms->spans || !ms->inputs) {
        free(ms->spans);
        free(ms->inputs);
        free(ms);
        return pith_errf(err, "out of memory for %zu floats of media input", total);
    }
    atomic_init(&ms->refs, 1);
    ms->n = n;
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        memcpy(ms->inputs + off, m[i].input, m[i].n_input * sizeof *ms->inputs);
        uint64_t h = m[i].hash ? m[i].hash : media_hash_input(m[i].input, m[i].n_input);
        /* the same floats laid out as another grid (a constant 64 x 96 image and a 96 x 64 one) are
         * another input */
        if (m[i].rows) h = (h ^ ((uint64_t)m[i].rows << 32 | (uint32_t)m[i].cols)) * 0x9e3779b97f4a7c15ull;
        ms->spans[i] = (media_span){.pos = m[i].pos, .n_tokens = m[i].n_tokens, .rows = m[i].rows, .cols = m[i].cols,
                                    .input = ms->inputs + off, .n_input = m[i].n_input, .hash = h ? h : 1};
        off += m[i].n_input;
    }
    *out = ms;
    return 0;
}

media_set *media_set_ref(media_set *ms) {
    if (ms) atomic_fetch_add(&ms->refs, 1);
    return ms;
}

void media_set_unref(media_set *ms) {
    if (!ms || atomic_fetch_sub(&ms->refs, 1) != 1) return;
    free(ms->spans);
    free(ms->inputs);
    free(ms);
}

uint64_t media_block_key(const media_set *ms, int a, int b) {
    if (!ms) return 0;
    uint64_t key = 0;
    bool any = false;
    for (int i = 0; i < ms->n; i++) {
        const media_span *sp = &ms->spans[i];
        if (sp->pos >= b) break;
        if (sp->pos + sp->n_tokens <= a) continue;
        /* the span's content and which of its rows fall in this block (relative to the span's start, so
         * a span at another position gives the other rows their own names) */
        uint64_t h = sp->hash ^ ((uint64_t)(uint32_t)(a - sp->pos) << 32 | (uint32_t)(sp->pos + sp->n_tokens - a));
        h *= 0x9e3779b97f4a7c15ull;
        any = true;
        key = (key ^ h ^ (h >> 29)) * 0xbf58476d1ce4e5b9ull;
    }
    return any && !key ? 1 : key;
}

int media_span_at(const media_set *ms, int p) {
    if (!ms) return -1;
    int lo = 0, hi = ms->n;
    while (lo < hi) { /* first span ending after p */
        int mid = (lo + hi) / 2;
        if (ms->spans[mid].pos + ms->spans[mid].n_tokens <= p) lo = mid + 1;
        else hi = mid;
    }
    return lo < ms->n && ms->spans[lo].pos <= p ? lo : -1;
}

int media_chunk_end(const media_set *ms, int c, int end, int limit) {
    if (end <= c) return end;
    int i = media_span_at(ms, end - 1);
    if (i < 0) return end;
    const media_span *sp = &ms->spans[i];
    int stop = sp->pos + sp->n_tokens;
    if (end >= stop) return end;
    if (sp->pos > c) return sp->pos;
    return stop <= limit ? stop : c;
}

void media_rope_pos(const media_set *ms, int p, int32_t out[3]) {
    int delta = 0;
    for (int i = 0; ms && i < ms->n && ms->spans[i].pos <= p; i++) {
        const media_span *sp = &ms->spans[i];
        if (p < sp->pos + sp->n_tokens && sp->cols > 0) {
            int base = sp->pos + delta, k = p - sp->pos;
            out[0] = base, out[1] = base + k / sp->cols, out[2] = base + k % sp->cols;
            return;
        }
        if (sp->cols > 0) delta += (sp->rows > sp->cols ? sp->rows : sp->cols) - sp->n_tokens;
    }
    out[0] = out[1] = out[2] = p + delta;
}
