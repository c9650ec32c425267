/* Splitting a run of work items (matrix row blocks) among the threads of a pool job.
 *
 * Each thread owns one contiguous range (an equal share) and takes units from its front, so it streams
 * its share from memory as one sequential run, which the prefetchers follow; a thread whose range is
 * empty steals the back half of the fullest other range and makes it its own. A unit is a quarter of
 * what is left in the range, within [min_unit, max_unit]: few claims while a range is long (each claim
 * is a locked instruction, which stalls the thread's stream of loads), small ones near its end. So a thread that the OS
 * deschedules, or that never joins the job (see threadpool.h), costs at most the unit it holds: the
 * others take over the rest of its range.
 *
 * Invariant: every item of [0, n_items) is handed out exactly once. A range is one 64-bit word (front,
 * back) changed by compare-and-swap (and by its owner's plain store when it refills its empty range). An
 * item once claimed never reappears in any range, so a compare-and-swap from a stale view always fails
 * and can never hand an item out twice. */
#ifndef PITH_CPU_SPLIT_H
#define PITH_CPU_SPLIT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* Ranges beyond this many threads: the extra threads own nothing and only steal. */
#define PITH_SPLIT_MAX_RANGES 64

typedef struct pith_split {
    /* One cache line per range, and none shared with the fields around the struct: a claim writes its
     * range's line, which must not evict what the other threads read in their loops. */
    struct {
        _Alignas(64) _Atomic uint64_t front_back; /* front | back << 32: items [front, back) are unclaimed */
        char pad[64 - sizeof(uint64_t)];
    } range[PITH_SPLIT_MAX_RANGES];
    int n_ranges;
    int min_unit;
    int max_unit;
} pith_split;

/* n_items >= 0 split into n_threads equal ranges; units of min_unit to max_unit items (both >= 1). */
void pith_split_init(pith_split *s, int n_items, int n_threads, int min_unit, int max_unit);

/* Claims the next items for thread ith: [*begin, *end), at most max_unit of them and never across the
 * end of a range. Returns false when every item has been claimed. */
bool pith_split_next(pith_split *s, int ith, int *begin, int *end);

#endif
