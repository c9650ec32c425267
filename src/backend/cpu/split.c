#include "backend/cpu/split.h"

static uint64_t pack_range(uint32_t front, uint32_t back) { return (uint64_t)front | (uint64_t)back << 32; }
static uint32_t front_of(uint64_t v) { return (uint32_t)v; }
static uint32_t back_of(uint64_t v) { return (uint32_t)(v >> 32); }

void pith_split_init(pith_split *s, int n_items, int n_threads, int min_unit, int max_unit) {
    int n = n_threads < 1 ? 1 : n_threads > PITH_SPLIT_MAX_RANGES ? PITH_SPLIT_MAX_RANGES : n_threads;
    s->n_ranges = n;
    s->min_unit = min_unit < 1 ? 1 : min_unit;
    s->max_unit = max_unit < s->min_unit ? s->min_unit : max_unit;
    for (int i = 0; i < n; i++) {
        uint32_t f = (uint32_t)((int64_t)n_items * i / n), b = (uint32_t)((int64_t)n_items * (i + 1) / n);
        atomic_init(&s->range[i].front_back, pack_range(f, b));
    }
}

/* A quarter of the `left` items of a range, within the unit bounds (and never more than left). */
static uint32_t unit_of(const pith_split *s, uint32_t left) {
    uint32_t n = left / 4;
    n = n < (uint32_t)s->min_unit ? (uint32_t)s->min_unit : n > (uint32_t)s->max_unit ? (uint32_t)s->max_unit : n;
    return n < left ? n : left;
}

/* Takes the next unit from the front of range i. */
static bool take_front(pith_split *s, int i, int *begin, int *end) {
    uint64_t v = atomic_load_explicit(&s->range[i].front_back, memory_order_relaxed);
    for (;;) {
        uint32_t f = front_of(v), b = back_of(v);
        if (f >= b) return false;
        uint32_t n = unit_of(s, b - f);
        if (atomic_compare_exchange_weak_explicit(&s->range[i].front_back, &v, pack_range(f + n, b),
                                                  memory_order_relaxed, memory_order_relaxed)) {
            *begin = (int)f;
            *end = (int)(f + n);
            return true;
        }
    }
}

/* Moves the back half (at most cap items) of the fullest range other than `own` out of it. */
static bool steal_half(pith_split *s, int own, uint32_t cap, int *begin, int *end) {
    for (;;) {
        int victim = -1;
        uint32_t most = 0;
        uint64_t seen = 0;
        for (int i = 0; i < s->n_ranges; i++) {
            if (i == own) continue;
            uint64_t v = atomic_load_explicit(&s->range[i].front_back, memory_order_relaxed);
            uint32_t left = back_of(v) > front_of(v) ? back_of(v) - front_of(v) : 0;
            if (left > most) most = left, victim = i, seen = v;
        }
        if (victim < 0) return false;
        uint32_t f = front_of(seen), b = back_of(seen), take = (b - f + 1) / 2;
        if (take > cap) take = cap;
        if (atomic_compare_exchange_strong_explicit(&s->range[victim].front_back, &seen, pack_range(f, b - take),
                                                    memory_order_relaxed, memory_order_relaxed)) {
            *begin = (int)(b - take);
            *end = (int)b;
            return true;
        }
    }
}

bool pith_split_next(pith_split *s, int ith, int *begin, int *end) {
    int own = ith < s->n_ranges ? ith : -1;
    if (own >= 0 && take_front(s, own, begin, end)) return true;
    int b, e;
    if (!steal_half(s, own, own >= 0 ? UINT32_MAX : (uint32_t)s->max_unit, &b, &e)) return false;
    /* without a range of our own, the whole piece (at most max_unit) is the unit */
    uint32_t n = own >= 0 ? unit_of(s, (uint32_t)(e - b)) : (uint32_t)(e - b);
    /* Our range is empty and only we refill it: a plain store publishes the stolen rest. */
    if (own >= 0) atomic_store_explicit(&s->range[own].front_back, pack_range((uint32_t)b + n, (uint32_t)e),
                                        memory_order_relaxed);
    *begin = b;
    *end = b + (int)n;
    return true;
}
