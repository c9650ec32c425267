/* The pushdown automaton over bytes.
 *
 * A stack is a chain of frames; a frame is a position in an alternative (the next element to match).
 * Stacks are interned as nodes (parent node, position), so equal stacks are equal ids and sharing is
 * free; node 0 is the empty stack (the grammar is complete) and node 1 stands for an unknown context
 * below the top frame (used to precompute masks per position). Every stack in a set has a byte set on
 * top: rule references are expanded as soon as they reach the top (a reference at the end of an
 * alternative replaces its frame, so right recursion does not grow the stack). A matcher's state is an
 * interned set of such stacks; its transitions over each byte class are computed on first use and
 * kept, so the automaton grows into the lazily built DFA of the states actually visited. */
#include <stdlib.h>
#include <string.h>

#include "grammar/gr_internal.h"

#define PDA_MAX_NODES (1 << 24)
/* Stacks in one state. Real grammars hold a few hundred at most; one that recurses before a choice it
 * never closes multiplies them by the choice's width every byte (fuzz_grammar found one at x9), and
 * reaching the byte limit that way took 18 s under ASan: this cap reports it after ~65 thousand. */
#define PDA_MAX_SET_STACKS (1 << 16)

static uint32_t hash2(uint32_t a, uint32_t b) {
    uint64_t x = ((uint64_t)a << 32) | b;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return (uint32_t)x;
}

static uint32_t hash_arr(const int32_t *a, int n) {
    uint32_t h = 2166136261u;
    for (int i = 0; i < n; i++) h = hash2(h, (uint32_t)a[i]);
    return h ^ (uint32_t)n;
}

static bool charge_work(gr_pda *p, uint64_t visits) {
    p->visits += visits;
    if (p->visits > GR_MAX_WORK) p->overflow = true;
    return !p->overflow;
}

bool gr_pda_charge(gr_pda *p, size_t bytes) {
    p->bytes_used += bytes;
    if (p->bytes_used > GR_MAX_BYTES) p->overflow = true;
    return !p->overflow;
}

static bool charge(gr_pda *p, size_t bytes) { return gr_pda_charge(p, bytes); }

static int node_hash_grow(gr_pda *p) {
    size_t cap = p->node_hash_cap ? p->node_hash_cap * 2 : 1024;
    int32_t *h = malloc(cap * sizeof *h);
    if (!h || !charge(p, cap * sizeof *h / 2)) { free(h); p->overflow = true; return -1; }
    memset(h, 0xff, cap * sizeof *h);
    for (int i = 2; i < p->n_nodes; i++) {
        size_t k = hash2((uint32_t)p->node_parent[i], (uint32_t)p->node_pos[i]) & (cap - 1);
        while (h[k] >= 0) k = (k + 1) & (cap - 1);
        h[k] = i;
    }
    free(p->node_hash);
    p->node_hash = h;
    p->node_hash_cap = cap;
    return 0;
}

static int32_t intern_node(gr_pda *p, int32_t parent, int32_t pos) {
    if (parent < 0 || p->overflow) return -1;
    if ((size_t)p->n_nodes * 2 >= p->node_hash_cap && node_hash_grow(p)) return -1;
    size_t mask = p->node_hash_cap - 1;
    size_t k = hash2((uint32_t)parent, (uint32_t)pos) & mask;
    for (int32_t id; (id = p->node_hash[k]) >= 0; k = (k + 1) & mask)
        if (p->node_parent[id] == parent && p->node_pos[id] == pos) return id;
    if (p->n_nodes == p->cap_nodes) {
        int cap = p->cap_nodes * 2;
        if (cap > PDA_MAX_NODES || !charge(p, (size_t)p->cap_nodes * 12)) { p->overflow = true; return -1; }
        int32_t *a = realloc(p->node_parent, (size_t)cap * sizeof *a);
        if (a) p->node_parent = a;
        int32_t *b = realloc(p->node_pos, (size_t)cap * sizeof *b);
        if (b) p->node_pos = b;
        uint32_t *c = realloc(p->node_mark, (size_t)cap * sizeof *c);
        if (c) p->node_mark = c;
        if (!a || !b || !c) { p->overflow = true; return -1; }
        memset(p->node_mark + p->cap_nodes, 0, (size_t)(cap - p->cap_nodes) * sizeof *c);
        p->cap_nodes = cap;
    }
    int32_t id = p->n_nodes++;
    p->node_parent[id] = parent;
    p->node_pos[id] = pos;
    p->node_hash[k] = id;
    return id;
}

/* The frame at pos over parent: the parent itself when pos ends its alternative. */
static int32_t frame(gr_pda *p, int32_t parent, int32_t pos) {
    if (p->elems[pos].kind == GR_END) return parent;
    return intern_node(p, parent, pos);
}

static int push_work(gr_pda *p, int32_t x) {
    if (p->n_work == p->cap_work) {
        int cap = p->cap_work ? p->cap_work * 2 : 256;
        int32_t *w = realloc(p->work, (size_t)cap * sizeof *w);
        if (!w) { p->overflow = true; return -1; }
        p->work = w;
        p->cap_work = cap;
    }
    p->work[p->n_work++] = x;
    return 0;
}

static int push_out(gr_pda *p, int32_t x) {
    if (p->n_out == p->cap_out) {
        int cap = p->cap_out ? p->cap_out * 2 : 256;
        if (cap > PDA_MAX_SET_STACKS) { p->overflow = true; return -1; }
        int32_t *w = realloc(p->out, (size_t)cap * sizeof *w);
        if (!w) { p->overflow = true; return -1; }
        p->out = w;
        p->cap_out = cap;
    }
    p->out[p->n_out++] = x;
    return 0;
}

static void new_stamp(gr_pda *p) {
    if (++p->stamp == 0) {
        memset(p->node_mark, 0, (size_t)p->cap_nodes * sizeof *p->node_mark);
        p->stamp = 1;
    }
    p->n_out = 0;
    p->n_work = 0;
}

/* Expands the work list into p->out: stacks with a byte set on top (or nodes 0 / 1). */
static void expand(gr_pda *p) {
    while (p->n_work && !p->overflow) {
        int32_t x = p->work[--p->n_work];
        if (x < 0) { p->overflow = true; return; }
        if (p->node_mark[x] == p->stamp) continue;
        p->node_mark[x] = p->stamp;
        if (!charge_work(p, 1)) return;
        if (x <= GR_NODE_CTX) { push_out(p, x); continue; }
        int32_t pos = p->node_pos[x];
        const gr_elem *e = &p->elems[pos];
        if (e->kind == GR_BYTES) { push_out(p, x); continue; }
        int32_t c = frame(p, p->node_parent[x], pos + 1);
        if (c < 0) { p->overflow = true; return; }
        for (int32_t a = p->rule_alt_off[e->val]; a < p->rule_alt_off[e->val + 1]; a++)
            push_work(p, frame(p, c, p->rule_alts[a]));
    }
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return x < y ? -1 : x > y;
}

static int set_hash_grow(gr_pda *p) {
    size_t cap = p->set_hash_cap ? p->set_hash_cap * 2 : 1024;
    int32_t *h = malloc(cap * sizeof *h);
    if (!h || !charge(p, cap * sizeof *h / 2)) { free(h); p->overflow = true; return -1; }
    memset(h, 0xff, cap * sizeof *h);
    for (int i = 0; i < p->n_sets; i++) {
        size_t k = hash_arr(p->set_pool + p->set_off[i], p->set_len[i]) & (cap - 1);
        while (h[k] >= 0) k = (k + 1) & (cap - 1);
        h[k] = i;
    }
    free(p->set_hash);
    p->set_hash = h;
    p->set_hash_cap = cap;
    return 0;
}

static int32_t intern_set(gr_pda *p, const int32_t *m, int n) {
    if (p->overflow) return GR_DEAD;
    if (n == 0) return GR_DEAD;
    if ((size_t)p->n_sets * 2 >= p->set_hash_cap && set_hash_grow(p)) return GR_DEAD;
    size_t mask = p->set_hash_cap - 1;
    size_t k = hash_arr(m, n) & mask;
    for (int32_t id; (id = p->set_hash[k]) >= 0; k = (k + 1) & mask)
        if (p->set_len[id] == n && memcmp(p->set_pool + p->set_off[id], m, (size_t)n * sizeof *m) == 0) return id;
    if (p->n_sets == p->cap_sets) {
        int cap = p->cap_sets ? p->cap_sets * 2 : 256;
        if (!charge(p, (size_t)(cap - p->cap_sets) * (sizeof(int32_t) * 2 + 1 + sizeof(int32_t *)))) return GR_DEAD;
        int32_t *a = realloc(p->set_off, (size_t)cap * sizeof *a);
        if (a) p->set_off = a;
        int32_t *b = realloc(p->set_len, (size_t)cap * sizeof *b);
        if (b) p->set_len = b;
        uint8_t *c = realloc(p->set_flags, (size_t)cap);
        if (c) p->set_flags = c;
        int32_t **d = realloc(p->set_trans, (size_t)cap * sizeof *d);
        if (d) p->set_trans = d;
        if (!a || !b || !c || !d) { p->overflow = true; return GR_DEAD; }
        p->cap_sets = cap;
    }
    if (p->n_pool + (size_t)n > p->cap_pool) {
        size_t cap = p->cap_pool ? p->cap_pool * 2 : 4096;
        while (cap < p->n_pool + (size_t)n) cap *= 2;
        if (cap > (size_t)INT32_MAX || !charge(p, (cap - p->cap_pool) * sizeof(int32_t))) { p->overflow = true; return GR_DEAD; }
        int32_t *q = realloc(p->set_pool, cap * sizeof *q);
        if (!q) { p->overflow = true; return GR_DEAD; }
        p->set_pool = q;
        p->cap_pool = cap;
    }
    int32_t id = p->n_sets++;
    p->set_off[id] = (int32_t)p->n_pool;
    p->set_len[id] = n;
    memcpy(p->set_pool + p->n_pool, m, (size_t)n * sizeof *m);
    p->n_pool += (size_t)n;
    uint8_t f = 0;
    for (int i = 0; i < n && m[i] <= GR_NODE_CTX; i++) f |= m[i] == GR_NODE_ACCEPT ? GR_SET_ACCEPT : GR_SET_CTX;
    p->set_flags[id] = f;
    p->set_trans[id] = NULL;
    p->set_hash[k] = id;
    return id;
}

static int32_t finish_set(gr_pda *p) {
    expand(p);
    if (p->overflow) return GR_DEAD;
    qsort(p->out, (size_t)p->n_out, sizeof *p->out, cmp_i32);
    return intern_set(p, p->out, p->n_out);
}

int32_t gr_pda_step_slow(gr_pda *p, int32_t set, int bc) {
    if (p->overflow) return GR_DEAD;
    int32_t *t = p->set_trans[set];
    if (!t) {
        if (!charge(p, (size_t)p->n_bclasses * sizeof *t)) return GR_DEAD;
        t = malloc((size_t)p->n_bclasses * sizeof *t);
        if (!t) { p->overflow = true; return GR_DEAD; }
        for (int i = 0; i < p->n_bclasses; i++) t[i] = -2;
        p->set_trans[set] = t;
    }
    unsigned byte = p->bclass_rep[bc];
    new_stamp(p);
    int n = p->set_len[set];
    if (!charge_work(p, (uint64_t)n)) return GR_DEAD;
    for (int i = 0; i < n; i++) {
        int32_t x = p->set_pool[p->set_off[set] + i];
        if (x <= GR_NODE_CTX) continue;
        int32_t pos = p->node_pos[x];
        if (!gr_bytes_has(&p->classes[p->elems[pos].val], byte)) continue;
        push_work(p, frame(p, p->node_parent[x], pos + 1));
    }
    int32_t r = finish_set(p);
    if (p->overflow) return GR_DEAD;
    p->set_trans[set][bc] = r; /* set_trans may have moved */
    return r;
}

int32_t gr_pda_singleton(gr_pda *p, int32_t node) {
    if (node < 0) return GR_DEAD;
    return intern_set(p, &node, 1);
}

static int32_t context_below(gr_pda *p, int32_t rule, int depth) {
    if (rule < 0) return GR_NODE_CTX;
    int32_t r = p->rule_ret[rule];
    if (r == GR_RET_BOTTOM) return GR_NODE_ACCEPT;
    if (r < 0 || depth <= 0) return GR_NODE_CTX;
    int32_t below = context_below(p, p->owner[r], depth - 1);
    return intern_node(p, below, r);
}

int32_t gr_pda_ctx_node(gr_pda *p, int32_t pos, int depth) {
    int32_t below = context_below(p, p->owner[pos], depth);
    return below < 0 ? -1 : intern_node(p, below, pos);
}

static void add_ret(int32_t *cur, int32_t v, bool *changed) {
    if (v == GR_RET_NONE || *cur == GR_RET_MANY || *cur == v) return;
    *cur = *cur == GR_RET_NONE ? v : GR_RET_MANY;
    *changed = true;
}

/* The rule of depth k in the chain that begins at rule r, or -1: gbnf.c creates a chain's rules one after
 * another, so it is rule r + k - 1 when that one says so (a chain found elsewhere is left unaliased). */
static int chain_rule(const gr_pda *p, int r, int k) {
    int q = r + k - 1;
    return q < p->n_rules && p->rule_chain_first[q] == r && p->rule_chain_k[q] == k ? q : -1;
}

int gr_pda_alias_chains(gr_pda *p, const int *class_run) {
    if (!charge(p, ((size_t)p->n_elems + 1) * sizeof *p->alias)) return -1;
    p->alias = malloc(((size_t)p->n_elems + 1) * sizeof *p->alias);
    if (!p->alias) return -1;
    for (int i = 0; i < p->n_elems; i++) p->alias[i] = i;
    /* per chain: the longest leading run of its byte set in any token (region.c); rule of each depth */
    for (int r = 0; r < p->n_rules; r++) {
        if (p->rule_chain_k[r] != 1 || p->rule_alt_off[r + 1] - p->rule_alt_off[r] != 2) continue;
        int32_t pos0 = p->rule_alts[p->rule_alt_off[r]];
        if (p->elems[pos0].kind != GR_BYTES) continue;
        int run_max = class_run[p->elems[pos0].val];
        int depth = run_max + 1; /* rules deeper than this behave as this one for every token */
        int t = chain_rule(p, r, depth);
        if (t < 0) continue;
        int32_t target = p->rule_alts[p->rule_alt_off[t]];
        for (int k = depth + 1, q; (q = chain_rule(p, r, k)) >= 0; k++)
            if (p->rule_alt_off[q + 1] - p->rule_alt_off[q] == 2) p->alias[p->rule_alts[p->rule_alt_off[q]]] = target;
    }
    return 0;
}

static int static_returns(gr_pda *p) {
    p->owner = malloc(((size_t)p->n_elems + 1) * sizeof *p->owner);
    p->rule_ret = malloc(((size_t)p->n_rules + 1) * sizeof *p->rule_ret);
    if (!p->owner || !p->rule_ret) return -1;
    for (int i = 0; i < p->n_elems; i++) p->owner[i] = -1;
    for (int r = 0; r < p->n_rules; r++) {
        p->rule_ret[r] = GR_RET_NONE;
        for (int32_t a = p->rule_alt_off[r]; a < p->rule_alt_off[r + 1]; a++)
            for (int32_t e = p->rule_alts[a]; e < p->n_elems; e++) {
                p->owner[e] = r;
                if (p->elems[e].kind == GR_END) break;
            }
    }
    p->rule_ret[p->root] = GR_RET_BOTTOM;
    /* A call not last in its alternative returns to the element after it; a last one to wherever its
     * caller returns, which is propagated along those tail calls from a work list: a rule's value only
     * rises (none, one position, many), so each rule is revisited at most twice and the whole is linear
     * (sweeping every element to a fixed point took one sweep per link of a chain of x{0,n} rules). */
    int32_t *work = malloc(((size_t)p->n_rules * 2 + 1) * sizeof *work);
    bool *queued = calloc((size_t)p->n_rules + 1, 1);
    if (!work || !queued) { free(work); free(queued); return -1; }
    int n_work = 0;
    bool changed = false;
    for (int32_t q = 0; q < p->n_elems; q++) {
        if (p->elems[q].kind != GR_REF || p->owner[q] < 0 || p->elems[q + 1].kind == GR_END) continue;
        add_ret(&p->rule_ret[p->elems[q].val], q + 1, &changed);
    }
    for (int r = 0; r < p->n_rules; r++)
        if (p->rule_ret[r] != GR_RET_NONE) { work[n_work++] = r; queued[r] = true; }
    while (n_work) {
        int r = work[--n_work];
        queued[r] = false;
        for (int32_t a = p->rule_alt_off[r]; a < p->rule_alt_off[r + 1]; a++) {
            int32_t e = p->rule_alts[a];
            while (p->elems[e].kind != GR_END) e++;
            if (e == p->rule_alts[a] || p->elems[e - 1].kind != GR_REF) continue;
            int32_t callee = p->elems[e - 1].val;
            changed = false;
            add_ret(&p->rule_ret[callee], p->rule_ret[r], &changed);
            if (changed && !queued[callee]) { work[n_work++] = callee; queued[callee] = true; }
        }
    }
    free(work);
    free(queued);
    return 0;
}

int gr_pda_init(gr_pda *p, const gr_ir *ir, int root, pith_err *err) {
    memset(p, 0, sizeof *p);
    p->n_elems = ir->n_elems;
    p->n_rules = ir->n_rules;
    p->n_classes = ir->n_classes;
    p->root = root;
    size_t n_alts = 0;
    for (int i = 0; i < ir->n_rules; i++) n_alts += (size_t)ir->rules[i].n_alts;
    /* the tables below, before they are allocated: per element its copy and owner; per rule its
     * alternatives' offsets, return and chain; the first node tables */
    size_t fixed = ((size_t)ir->n_elems + 1) * (sizeof *p->elems + sizeof *p->owner) +
                   ((size_t)ir->n_classes + 1) * sizeof *p->classes + (n_alts + 1) * sizeof *p->rule_alts +
                   ((size_t)ir->n_rules + 1) * 4 * sizeof(int32_t) + 1024 * 3 * sizeof(int32_t);
    if (!charge(p, fixed)) return gr_too_large(err);
    p->elems = malloc(((size_t)ir->n_elems + 1) * sizeof *p->elems);
    p->classes = malloc(((size_t)ir->n_classes + 1) * sizeof *p->classes);
    p->rule_alt_off = malloc(((size_t)ir->n_rules + 1) * sizeof *p->rule_alt_off);
    p->rule_alts = malloc((n_alts + 1) * sizeof *p->rule_alts);
    p->cap_nodes = 1024;
    p->node_parent = malloc((size_t)p->cap_nodes * sizeof *p->node_parent);
    p->node_pos = malloc((size_t)p->cap_nodes * sizeof *p->node_pos);
    p->node_mark = calloc((size_t)p->cap_nodes, sizeof *p->node_mark);
    if (!p->elems || !p->classes || !p->rule_alt_off || !p->rule_alts || !p->node_parent || !p->node_pos ||
        !p->node_mark) {
        gr_pda_free(p);
        return pith_errf(err, "out of memory");
    }
    if (ir->n_elems) memcpy(p->elems, ir->elems, (size_t)ir->n_elems * sizeof *p->elems);
    if (ir->n_classes) memcpy(p->classes, ir->classes, (size_t)ir->n_classes * sizeof *p->classes);
    size_t k = 0;
    for (int i = 0; i < ir->n_rules; i++) {
        p->rule_alt_off[i] = (int32_t)k;
        for (int a = 0; a < ir->rules[i].n_alts; a++) p->rule_alts[k++] = ir->rules[i].alts[a];
    }
    p->rule_alt_off[ir->n_rules] = (int32_t)k;
    p->rule_chain_first = malloc(((size_t)ir->n_rules + 1) * sizeof *p->rule_chain_first);
    p->rule_chain_k = malloc(((size_t)ir->n_rules + 1) * sizeof *p->rule_chain_k);
    if (!p->rule_chain_first || !p->rule_chain_k) {
        gr_pda_free(p);
        return pith_errf(err, "out of memory");
    }
    for (int i = 0; i < ir->n_rules; i++) {
        p->rule_chain_first[i] = ir->rules[i].chain_k ? ir->rules[i].chain_first : -1;
        p->rule_chain_k[i] = ir->rules[i].chain_k;
    }
    if (static_returns(p)) {
        gr_pda_free(p);
        return pith_errf(err, "out of memory");
    }
    /* byte classes: refine the partition of the 256 bytes by every byte set */
    uint8_t bc[256] = {0};
    int n_bc = 1;
    for (int c = 0; c < ir->n_classes; c++) {
        int16_t remap[512];
        memset(remap, 0xff, sizeof remap);
        int n_new = 0;
        uint8_t nb[256];
        for (int b = 0; b < 256; b++) {
            int key = bc[b] * 2 + gr_bytes_has(&ir->classes[c], (unsigned)b);
            if (remap[key] < 0) remap[key] = (int16_t)n_new++;
            nb[b] = (uint8_t)remap[key];
        }
        memcpy(bc, nb, sizeof bc);
        n_bc = n_new;
    }
    p->n_bclasses = n_bc;
    memcpy(p->bclass, bc, sizeof bc);
    for (int b = 255; b >= 0; b--) p->bclass_rep[bc[b]] = (uint8_t)b;
    /* nodes 0 (empty stack) and 1 (unknown context) */
    p->node_parent[0] = p->node_parent[1] = -1;
    p->node_pos[0] = p->node_pos[1] = -1;
    p->n_nodes = 2;
    if (node_hash_grow(p) || set_hash_grow(p)) {
        gr_pda_free(p);
        return pith_errf(err, "out of memory");
    }
    new_stamp(p);
    for (int32_t a = p->rule_alt_off[root]; a < p->rule_alt_off[root + 1]; a++)
        push_work(p, frame(p, GR_NODE_ACCEPT, p->rule_alts[a]));
    p->start_set = finish_set(p);
    if (p->overflow || p->start_set < 0) {
        gr_pda_free(p);
        return pith_errf(err, "grammar: the start rule matches nothing or is too large");
    }
    return 0;
}

void gr_pda_free(gr_pda *p) {
    free(p->elems);
    free(p->classes);
    free(p->rule_alt_off);
    free(p->rule_alts);
    free(p->owner);
    free(p->rule_ret);
    free(p->alias);
    free(p->rule_chain_first);
    free(p->rule_chain_k);
    free(p->node_parent);
    free(p->node_pos);
    free(p->node_mark);
    free(p->node_hash);
    for (int i = 0; i < p->n_sets; i++) free(p->set_trans[i]);
    free(p->set_trans);
    free(p->set_off);
    free(p->set_len);
    free(p->set_flags);
    free(p->set_pool);
    free(p->set_hash);
    free(p->work);
    free(p->out);
    memset(p, 0, sizeof *p);
}
