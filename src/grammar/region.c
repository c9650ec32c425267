/* Class regions: for one byte set C, the part of the token trie whose paths are all in C.
 *
 * A position whose byte set is wide (JSON string characters, [a-z]{1,64}, hex digits) has most of the
 * trie in its region, and walking it node by node is what made the first use of such a position slow
 * (a few ms on a 128k vocabulary). But along a run of C bytes the automaton is usually deterministic:
 * from the position's own stack every byte of C leads to the same state, and from there again (a loop
 * such as a string's characters returns to one state; a counted chain steps down one count per byte).
 * When it is, a token made only of C bytes is allowed exactly when the state after its length is alive,
 * whichever bytes it has, so the region is summarized once per grammar and class (compile time): its
 * tokens grouped by length, and its exits (the trie nodes whose path is in C but whose own byte is not)
 * grouped by depth. A mask walk then costs the states along one run plus a normal walk below each exit
 * (mask.c); where the run is not deterministic it walks the whole trie as before. */
#include <stdlib.h>
#include <string.h>

#include "grammar/gr_internal.h"

/* regions of fewer nodes are walked node by node (it is as fast); regions of more tokens keep bitmaps
 * of the tokens up to lengths 1, 2, 4, ... 64 (tests lower both) */
int gr_region_min_nodes = 512;
int gr_region_bitmap_tokens = 4096;

static void region_free(gr_region *r) {
    if (!r) return;
    free(r->full);
    free(r->full_off);
    free(r->exit);
    free(r->exit_off);
    free(r->node);
    free(r->node_off);
    free(r->upto);
    free(r);
}

void gr_regions_free(pith_grammar *g) {
    if (g->regions)
        for (int c = 0; c < g->pda.n_classes; c++) region_free(g->regions[c]);
    free(g->regions);
    free(g->class_run);
    free(g->class_uses);
    free(g->class_same);
    g->regions = NULL;
    g->class_run = NULL;
    g->class_uses = NULL;
    g->class_same = NULL;
}

typedef struct pairs {
    int32_t *a; /* (id, depth) pairs */
    size_t n, cap;
} pairs;

static int pairs_push(pairs *p, int32_t id, int32_t depth) {
    if (p->n + 2 > p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 4096;
        int32_t *q = realloc(p->a, cap * sizeof *q);
        if (!q) return -1;
        p->a = q;
        p->cap = cap;
    }
    p->a[p->n++] = id;
    p->a[p->n++] = depth;
    return 0;
}

/* Groups the (id, depth) pairs by depth (1 .. L) into *ids and *off[L + 2]; ids of depth d at
 * [off[d], off[d + 1]), in their order. */
static int group_by_depth(const pairs *p, int L, int32_t **ids, int32_t **off) {
    *off = calloc((size_t)L + 2, sizeof **off);
    *ids = malloc((p->n / 2 + 1) * sizeof **ids);
    if (!*off || !*ids) return -1;
    for (size_t k = 0; k < p->n; k += 2) (*off)[p->a[k + 1] + 1]++;
    for (int d = 0; d <= L; d++) (*off)[d + 1] += (*off)[d];
    int32_t *fill = malloc(((size_t)L + 2) * sizeof *fill);
    if (!fill) return -1;
    memcpy(fill, *off, ((size_t)L + 2) * sizeof *fill);
    for (size_t k = 0; k < p->n; k += 2) (*ids)[fill[p->a[k + 1]]++] = p->a[k];
    free(fill);
    return 0;
}

/* The region of class c from one pruned walk of the trie (NULL when small, or when keeping it would take
 * the grammar past GR_MAX_BYTES: masks then walk the trie); *run_max: its deepest node. Returns -1 when
 * out of memory. */
static int region_build(gr_pda *p, const pith_grammar_vocab *v, size_t mask_words, int c, int *run_max,
                        gr_region **out) {
    const gr_bytes *cls = &p->classes[c];
    *out = NULL;
    *run_max = 0;
    pairs nodes = {0}, toks = {0}, exits = {0};
    int L = 0, bad = 0;
    for (int i = 0; i < v->n_nodes && !bad;) {
        int d = v->td[i];
        if (gr_bytes_has(cls, v->tb[i])) {
            if (d > L) L = d;
            bad |= pairs_push(&nodes, i, d);
            for (int32_t k = v->ttok_off[i]; k < v->ttok_off[i + 1] && !bad; k++) bad |= pairs_push(&toks, v->ttok[k], d);
            i++;
        } else {
            /* an exit after d - 1 >= 1 bytes of the class (every trie node has a token below it) */
            if (d >= 2) bad |= pairs_push(&exits, i, d - 1);
            i = v->tskip[i];
        }
    }
    *run_max = L;
    gr_region *r = NULL;
    size_t keep = sizeof *r + (nodes.n + toks.n + exits.n) / 2 * sizeof(int32_t) + 3 * ((size_t)L + 2) * sizeof(int32_t) +
                  (toks.n / 2 >= (size_t)gr_region_bitmap_tokens ? GR_REGION_N_UPTO * mask_words * sizeof(uint32_t) : 0);
    bool fits = p->bytes_used + keep <= GR_MAX_BYTES;
    if (!bad && fits && nodes.n / 2 >= (size_t)gr_region_min_nodes) {
        gr_pda_charge(p, keep);
        r = calloc(1, sizeof *r);
        bad = !r;
        if (r) {
            r->max_len = L;
            bad = group_by_depth(&nodes, L, &r->node, &r->node_off) || group_by_depth(&toks, L, &r->full, &r->full_off) ||
                  group_by_depth(&exits, L, &r->exit, &r->exit_off);
        }
        if (!bad && r->full_off[L + 1] >= gr_region_bitmap_tokens) {
            r->mask_words = mask_words;
            r->upto = calloc(GR_REGION_N_UPTO * mask_words, sizeof *r->upto);
            bad = !r->upto;
            for (int j = 0; !bad && j < GR_REGION_N_UPTO; j++) {
                uint32_t *bm = r->upto + (size_t)j * mask_words;
                int lim = 1 << j;
                if (j > 0) memcpy(bm, bm - mask_words, mask_words * sizeof *bm);
                for (int n = (j ? (1 << (j - 1)) + 1 : 1); n <= lim && n <= L; n++)
                    for (int32_t k = r->full_off[n]; k < r->full_off[n + 1]; k++) bm[r->full[k] >> 5] |= 1u << (r->full[k] & 31);
            }
        }
        if (!bad)
            for (int b = 0; b < p->n_bclasses; b++)
                if (gr_bytes_has(cls, p->bclass_rep[b])) r->bcs[r->n_bcs++] = (uint8_t)b;
    }
    free(nodes.a);
    free(toks.a);
    free(exits.a);
    if (bad) {
        region_free(r);
        return -1;
    }
    *out = r;
    return 0;
}

/* Same bytes: a hash of a byte set's words, for class_same (comparing each set with every earlier one
 * was quadratic in the grammar's byte sets). */
static uint32_t bytes_hash(const gr_bytes *b) {
    uint32_t h = 2166136261u;
    for (int i = 0; i < 8; i++) h = (h ^ b->w[i]) * 16777619u;
    return h ^ (h >> 15);
}

static int find_same(const gr_pda *p, int *same) {
    size_t cap = 64;
    while (cap < (size_t)p->n_classes * 2) cap *= 2;
    int *h = malloc(cap * sizeof *h);
    if (!h) return -1;
    memset(h, 0xff, cap * sizeof *h);
    for (int c = 0; c < p->n_classes; c++) {
        size_t k = bytes_hash(&p->classes[c]) & (cap - 1);
        for (; h[k] >= 0; k = (k + 1) & (cap - 1))
            if (memcmp(&p->classes[h[k]], &p->classes[c], sizeof p->classes[c]) == 0) break;
        if (h[k] < 0) h[k] = c;
        same[c] = h[k];
    }
    free(h);
    return 0;
}

int gr_regions_build(pith_grammar *g) {
    gr_pda *p = &g->pda;
    /* four tables per byte set */
    if (!gr_pda_charge(p, ((size_t)p->n_classes + 1) * (sizeof *g->regions + 3 * sizeof(int)))) return -1;
    g->regions = calloc((size_t)p->n_classes + 1, sizeof *g->regions);
    g->class_run = calloc((size_t)p->n_classes + 1, sizeof *g->class_run);
    g->class_uses = calloc((size_t)p->n_classes + 1, sizeof *g->class_uses);
    g->class_same = malloc(((size_t)p->n_classes + 1) * sizeof *g->class_same);
    if (!g->regions || !g->class_run || !g->class_uses || !g->class_same) return -1;
    /* how many positions use each byte set, counted under the first index that has it */
    int *same = g->class_same, *uses = g->class_uses;
    if (find_same(p, same)) return -1;
    for (int i = 0; i < p->n_elems; i++)
        if (p->elems[i].kind == GR_BYTES) uses[same[p->elems[i].val]]++;
    /* A byte set used at one position is walked once for that position's mask: a region would cost as
     * much. Used at three or more (a repetition, a loop shared by several strings) the region is built
     * now; used at two, on the first use (gr_region_get). */
    for (int c = 0; c < p->n_classes; c++)
        if (same[c] == c && uses[c] >= 3 &&
            region_build(p, g->vocab, g->mask_words, c, &g->class_run[c], &g->regions[c]))
            return -1;
    for (int c = 0; c < p->n_classes; c++)
        if (same[c] != c) g->class_run[c] = g->class_run[same[c]];
    /* class_run of the byte set of every x{m,n} chain (gr_pda_alias_chains) not built above */
    for (int r = 0; r < p->n_rules; r++) {
        if (p->rule_chain_k[r] != 1) continue;
        int32_t pos0 = p->rule_alts[p->rule_alt_off[r]];
        if (p->elems[pos0].kind != GR_BYTES) continue;
        int c = same[p->elems[pos0].val];
        if (uses[c] != 2 || g->class_run[c] > 0) continue;
        int run = 0;
        for (int i = 0; i < g->vocab->n_nodes;) {
            if (gr_bytes_has(&p->classes[c], g->vocab->tb[i])) {
                if (g->vocab->td[i] > run) run = g->vocab->td[i];
                i++;
            } else {
                i = g->vocab->tskip[i];
            }
        }
        g->class_run[c] = run;
    }
    for (int c = 0; c < p->n_classes; c++)
        if (same[c] != c) g->class_run[c] = g->class_run[same[c]];
    return 0;
}

const gr_region *gr_region_get(pith_grammar *g, int c) {
    int o = g->class_same[c];
    if (!g->regions[o] && g->class_uses[o] == 2) {
        int run;
        g->class_uses[o] = -2; /* built (or too small, or out of memory): not again */
        if (region_build(&g->pda, g->vocab, g->mask_words, o, &run, &g->regions[o])) g->regions[o] = NULL;
    }
    return g->regions[o];
}
