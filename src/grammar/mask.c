/* Token masks and matchers.
 *
 * For each byte-set position of the grammar, the trie of the vocabulary is walked once from the stack
 * made of that position's frame alone over an unknown context (node 1). A token whose bytes all match
 * without leaving the frame (or that leaves it exactly at its last byte) is accepted whatever lies
 * below: it goes into the position's accepted set. A token that dies without ever leaving the frame is
 * rejected whatever lies below. The others left the frame with bytes to go: whether they match depends
 * on the stack below, so they are listed as context-dependent. A state's mask is then the union, over
 * its stacks, of the accepted set of the stack's top position plus the context-dependent tokens that
 * match from that very stack (checked byte by byte through the automaton's cached transitions). The
 * last 64 masks are kept per grammar, keyed by state. */
#include <stdlib.h>
#include <string.h>

#include "grammar/gr_internal.h"

typedef struct ibuf {
    int32_t *a;
    int n, cap;
} ibuf;

static int ibuf_push(ibuf *b, int32_t x) {
    if (b->n == b->cap) {
        int cap = b->cap ? b->cap * 2 : 256;
        int32_t *q = realloc(b->a, (size_t)cap * sizeof *q);
        if (!q) return -1;
        b->a = q;
        b->cap = cap;
    }
    b->a[b->n++] = x;
    return 0;
}

/* The trie walk over the preorder nodes [begin, end) (a subtree or the whole trie; the state of each
 * first node's parent in st[depth - 1], cx likewise): allowed tokens into acc, roots of the subtrees
 * that depend on the context into dep. Returns -1 on overflow. */
static int walk_range(gr_pda *p, const pith_grammar_vocab *v, int32_t begin, int32_t end, int32_t *st, uint8_t *cx,
                      uint32_t *acc, int *n_acc, ibuf *dep) {
    const uint8_t *tb = v->tb;
    const uint16_t *td = v->td;
    const int32_t *tskip = v->tskip, *toff = v->ttok_off, *ttok = v->ttok;
    for (int32_t i = begin; i < end;) {
        int d = td[i];
        int32_t ps = st[d - 1];
        int32_t ns = gr_pda_step(p, ps, tb[i]);
        if (ns < 0) {
            if (p->overflow) return -1;
            uint8_t c = cx[d - 1] | ((p->set_flags[ps] & GR_SET_CTX) != 0);
            if (c && toff[i] < toff[tskip[i]] && ibuf_push(dep, i)) return -1;
            i = tskip[i];
            continue;
        }
        st[d] = ns;
        cx[d] = cx[d - 1] | ((p->set_flags[ps] & GR_SET_CTX) != 0);
        for (int32_t k = toff[i]; k < toff[i + 1]; k++) {
            acc[ttok[k] >> 5] |= 1u << (ttok[k] & 31);
            (*n_acc)++;
        }
        i++;
    }
    return 0;
}

/* The walk from s0 = st[0] through the region of the position's byte set (region.c): 1 done, 0 when the
 * run of the set's bytes is not deterministic (walk the whole trie instead), -1 on overflow. */
static int walk_region(gr_pda *p, const pith_grammar_vocab *v, const gr_region *r, int32_t *st, uint8_t *cx,
                       uint32_t *acc, int *n_acc, ibuf *dep) {
    int n = 0; /* st[0..n] are the states after 0..n bytes of the set, all alive */
    while (n < r->max_len) {
        int32_t nx = -3;
        for (int b = 0; b < r->n_bcs; b++) {
            int32_t t = gr_pda_step(p, st[n], p->bclass_rep[r->bcs[b]]);
            if (p->overflow) return -1;
            if (nx == -3) nx = t;
            else if (nx != t) return 0;
        }
        uint8_t c = cx[n] | ((p->set_flags[st[n]] & GR_SET_CTX) != 0);
        if (nx < 0) {
            /* every longer run dies here; that depends on the context when the stack left the frame:
             * the region's nodes one deeper are then the roots to check from the real stack */
            if (c)
                for (int32_t k = r->node_off[n + 1]; k < r->node_off[n + 2]; k++)
                    if (ibuf_push(dep, r->node[k])) return -1;
            break;
        }
        st[n + 1] = nx;
        cx[n + 1] = c;
        n++;
        if (nx == st[n - 1] && cx[n] == cx[n - 1]) { /* a loop: every longer run ends here too */
            while (n < r->max_len) {
                st[n + 1] = nx;
                cx[n + 1] = c;
                n++;
            }
        }
    }
    /* the tokens made only of the set's bytes, of lengths 1 .. n */
    int from = 1;
    if (r->upto && n >= 1) {
        int j = 0;
        while (j + 1 < GR_REGION_N_UPTO && (1 << (j + 1)) <= n) j++;
        const uint32_t *bm = r->upto + (size_t)j * r->mask_words;
        for (size_t w = 0; w < r->mask_words; w++) acc[w] |= bm[w];
        from = (1 << j) + 1;
    }
    for (int32_t k = r->full_off[from]; k < r->full_off[n + 1]; k++) acc[r->full[k] >> 5] |= 1u << (r->full[k] & 31);
    *n_acc += r->full_off[n + 1] - r->full_off[1];
    /* the walks below the exits overwrite st and cx past their own depth: keep the run's states */
    int32_t *rs = malloc(((size_t)n + 1) * sizeof *rs);
    uint8_t *rc = malloc((size_t)n + 1);
    if (!rs || !rc) { free(rs); free(rc); return -1; }
    memcpy(rs, st, ((size_t)n + 1) * sizeof *rs);
    memcpy(rc, cx, (size_t)n + 1);
    int rcode = 1;
    for (int m = 1; m <= n && rcode > 0; m++)
        for (int32_t k = r->exit_off[m]; k < r->exit_off[m + 1]; k++) {
            st[m] = rs[m];
            cx[m] = rc[m];
            if (walk_range(p, v, r->exit[k], v->tskip[r->exit[k]], st, cx, acc, n_acc, dep)) { rcode = -1; break; }
        }
    free(rs);
    free(rc);
    return rcode;
}

static int cmp_i32m(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return x < y ? -1 : x > y;
}

/* The mask parts of position pos, computed now (g->mu held); NULL on overflow or out of memory. */
static gr_poscache *compute_poscache(pith_grammar *g, int32_t pos) {
    gr_pda *p = &g->pda;
    const pith_grammar_vocab *v = g->vocab;
    if (!gr_pda_charge(p, sizeof(gr_poscache))) return NULL;
    gr_poscache *pc = calloc(1, sizeof *pc);
    if (!pc) return NULL;
    g->poscache[pos] = pc; /* freed with the grammar, whatever follows */
    g->n_poscache++;

    int32_t s0 = gr_pda_singleton(p, gr_pda_ctx_node(p, pos, 12));
    if (s0 < 0) return NULL;
    int32_t *st = malloc(((size_t)v->max_depth + 2) * sizeof *st);
    uint8_t *cx = malloc((size_t)v->max_depth + 2);
    uint32_t *acc = calloc(g->mask_words, sizeof *acc);
    ibuf dep = {0};
    int n_acc = 0;
    int bad = !st || !cx || !acc;
    if (!bad) {
        st[0] = s0;
        cx[0] = 0;
        const gr_region *r = gr_region_get(g, p->elems[pos].val);
        int done = 0;
        if (r) {
            done = walk_region(p, v, r, st, cx, acc, &n_acc, &dep);
            if (done < 0) bad = 1;
            else if (done) g->n_region_walks++;
            else { /* start again from nothing */
                memset(acc, 0, g->mask_words * sizeof *acc);
                n_acc = 0;
                dep.n = 0;
            }
        }
        if (!bad && !done) {
            g->n_full_walks++;
            if (walk_range(p, v, 0, v->n_nodes, st, cx, acc, &n_acc, &dep)) bad = 1;
        }
        /* the region walk lists roots by depth: back to preorder, so consecutive ones share prefixes */
        if (!bad && done && dep.n > 1) qsort(dep.a, (size_t)dep.n, sizeof *dep.a, cmp_i32m);
    }
    free(st);
    free(cx);
    size_t n_bytes = 0;
    for (int k = 0; !bad && k < dep.n; k++) n_bytes += v->td[dep.a[k]] - 1u;
    bool sparse = (size_t)n_acc * 4 < g->mask_words;
    /* what this position keeps, counted before it is kept (the walk's scratch is freed here) */
    size_t keep = (sparse ? (size_t)n_acc + 1 : g->mask_words) * sizeof(uint32_t) +
                  ((size_t)dep.n + 1) * (2 * sizeof(int32_t) + 2 * sizeof(uint16_t)) + n_bytes + 1;
    if (bad || p->overflow || !gr_pda_charge(p, keep)) {
        free(acc);
        free(dep.a);
        return NULL;
    }
    if (sparse) { /* keep a list */
        int32_t *list = malloc(((size_t)n_acc + 1) * sizeof *list);
        if (!list) { free(acc); free(dep.a); return NULL; }
        int k = 0;
        for (size_t w = 0; w < g->mask_words; w++)
            for (uint32_t bits = acc[w]; bits; bits &= bits - 1) list[k++] = (int32_t)(w * 32 + (size_t)__builtin_ctz(bits));
        free(acc);
        pc->acc = (uint32_t *)list;
        pc->acc_bitmap = false;
    } else {
        pc->acc = acc;
        pc->acc_bitmap = true;
    }
    pc->n_acc = n_acc;
    /* dep holds the roots of the trie subtrees whose tokens depend on the context, in preorder; keep
     * how many bytes each root's path shares with the one before, so the check resumes from there */
    pc->dep = dep.a;
    pc->n_dep = dep.n;
    /* and, so that checking them streams through memory: each root's depth and the bytes of its path
     * past that shared prefix */
    pc->dep_lcp = malloc(((size_t)dep.n + 1) * sizeof *pc->dep_lcp);
    pc->dep_depth = malloc(((size_t)dep.n + 1) * sizeof *pc->dep_depth);
    pc->dep_boff = malloc(((size_t)dep.n + 1) * sizeof *pc->dep_boff);
    pc->dep_bytes = malloc(n_bytes + 1);
    if (!pc->dep_lcp || !pc->dep_depth || !pc->dep_boff || !pc->dep_bytes) return NULL; /* freed with the grammar */
    size_t at = 0;
    for (int k = 0; k < dep.n; k++) {
        int32_t t = v->ttok[v->ttok_off[dep.a[k]]];
        size_t lt = v->td[dep.a[k]] - 1u, l = 0;
        const char *bt = v->bytes + v->off[t];
        if (k > 0) {
            int32_t u = v->ttok[v->ttok_off[dep.a[k - 1]]];
            size_t lu = v->td[dep.a[k - 1]] - 1u;
            const char *bu = v->bytes + v->off[u];
            while (l < lt && l < lu && l < 65535 && bt[l] == bu[l]) l++;
        }
        pc->dep_lcp[k] = (uint16_t)l;
        pc->dep_depth[k] = v->td[dep.a[k]];
        pc->dep_boff[k] = (int32_t)at;
        memcpy(pc->dep_bytes + at, bt + l, lt - l);
        at += lt - l;
    }
    pc->ready = true;
    return pc;
}

int gr_precompute(pith_grammar *g, pith_err *err) {
    if (!getenv("PITH_GRAMMAR_EAGER")) return 0;
    for (int32_t pos = 0; pos < g->pda.n_elems; pos++)
        if (g->pda.elems[pos].kind == GR_BYTES && !g->poscache[pos] && !compute_poscache(g, pos))
            return pith_errf(err, "grammar: the automaton is too large (memory limit reached)");
    return 0;
}

static int32_t run_bytes(gr_pda *p, int32_t set, const unsigned char *b, size_t n) {
    for (size_t i = 0; i < n && set >= 0; i++) set = gr_pda_step(p, set, b[i]);
    return set;
}

static inline void bit_set(uint32_t *m, int32_t t) { m[t >> 5] |= 1u << (t & 31); }

/* bits set in n words (a plain loop: __builtin_popcount is a library call without -mpopcnt) */
static int count_bits(const uint32_t *m, size_t n) {
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t x = m[i];
        x = x - ((x >> 1) & 0x55555555u);
        x = (x & 0x33333333u) + ((x >> 2) & 0x33333333u);
        x = (x + (x >> 4)) & 0x0f0f0f0fu;
        total += (x * 0x01010101u) >> 24;
    }
    return (int)total;
}

/* The mask of state `set` (g->mu held). Returns allowed count or -1. */
static int state_mask(pith_grammar *g, int32_t set, uint32_t *mask) {
    gr_pda *p = &g->pda;
    const pith_grammar_vocab *v = g->vocab;
    gr_mask_slot *slot = &g->slots[(uint32_t)set % (sizeof g->slots / sizeof g->slots[0])];
    g->n_masks++;
    if (slot->set == set && slot->mask) {
        g->n_mask_hits++;
        memcpy(mask, slot->mask, g->mask_words * sizeof *mask);
        return slot->n_allowed;
    }
    memset(mask, 0, g->mask_words * sizeof *mask);
    if (p->set_flags[set] & GR_SET_ACCEPT)
        for (int i = 0; i < v->n_end; i++) bit_set(mask, v->end_tokens[i]);
    int n;
    const int32_t *mem = gr_pda_members(p, set, &n);
    for (int i = 0; i < n; i++) {
        int32_t x = mem[i];
        if (x <= GR_NODE_CTX) continue;
        int32_t pos = p->alias[p->node_pos[x]];
        gr_poscache *pc = g->poscache[pos];
        if (!pc) pc = compute_poscache(g, pos);
        else if (!pc->ready) pc = NULL; /* an earlier attempt failed */
        if (!pc) return -1;
        mem = gr_pda_members(p, set, &n); /* the pool may have moved */
        if (pc->acc_bitmap)
            for (size_t w = 0; w < g->mask_words; w++) mask[w] |= pc->acc[w];
        else
            for (int32_t k = 0; k < pc->n_acc; k++) bit_set(mask, (int32_t)pc->acc[k]);
        if (pc->n_dep) {
            int32_t single = gr_pda_singleton(p, x);
            if (single < 0) return -1;
            mem = gr_pda_members(p, set, &n);
            /* st[d]: the state after the first d bytes of the previous token (GR_DEAD past `alive`) */
            int32_t *st = g->scratch_states;
            st[0] = single;
            int valid = 0; /* st[0..valid] hold the previous token's states (the last may be dead) */
            g->n_dep_checks += (uint64_t)pc->n_dep;
            const uint8_t *tb = v->tb;
            const uint16_t *td = v->td;
            const int32_t *tskip = v->tskip, *toff = v->ttok_off, *ttok = v->ttok;
            for (int32_t k = 0; k < pc->n_dep; k++) {
                int32_t root = pc->dep[k];
                int D = pc->dep_depth[k]; /* the root's depth: its path is D - 1 bytes, then its own byte */
                int l = pc->dep_lcp[k];
                /* the previous path died within the prefix this one shares with it: so does this one */
                if (valid < l) continue;
                int d = l;
                const unsigned char *b = pc->dep_bytes + pc->dep_boff[k] - l; /* b[d] for d >= l */
                while (d < D - 1 && st[d] >= 0) {
                    st[d + 1] = gr_pda_step(p, st[d], b[d]);
                    d++;
                }
                valid = d;
                if (d < D - 1 || st[D - 1] < 0) continue; /* the path itself dies from this stack */
                /* walk the subtree from the real stack */
                for (int j = root; j < tskip[root];) {
                    int dj = td[j];
                    int32_t ns = gr_pda_step(p, st[dj - 1], tb[j]);
                    if (ns < 0) { j = tskip[j]; continue; }
                    st[dj] = ns;
                    for (int32_t q = toff[j]; q < toff[j + 1]; q++) bit_set(mask, ttok[q]);
                    j++;
                }
                valid = D - 1; /* deeper entries now hold the subtree walk's states */
            }
            mem = gr_pda_members(p, set, &n);
        }
        if (p->overflow) return -1;
    }
    int count = count_bits(mask, g->mask_words);
    if (!slot->mask && gr_pda_charge(p, g->mask_words * sizeof *slot->mask))
        slot->mask = malloc(g->mask_words * sizeof *slot->mask);
    if (slot->mask) {
        memcpy(slot->mask, mask, g->mask_words * sizeof *mask);
        slot->set = set;
        slot->n_allowed = count;
    }
    return count;
}

/* ---- matchers ---- */

struct pith_grammar_matcher {
    pith_grammar *g;
    int32_t set;
    bool done;
};

int pith_grammar_matcher_new(pith_grammar *g, pith_grammar_matcher **out, pith_err *err) {
    *out = NULL;
    if (!g) return pith_errf(err, "grammar matcher: no grammar");
    pith_grammar_matcher *m = calloc(1, sizeof *m);
    if (!m) return pith_errf(err, "out of memory");
    m->g = pith_grammar_retain(g);
    m->set = g->pda.start_set;
    *out = m;
    return 0;
}

void pith_grammar_matcher_free(pith_grammar_matcher *m) {
    if (!m) return;
    pith_grammar_release(m->g);
    free(m);
}

size_t pith_grammar_mask_words(const pith_grammar *g) { return g->mask_words; }

static const char *TOO_LARGE = "grammar: the automaton outgrew its limits (512 MiB of tables, 2 million stack visits)";

int pith_grammar_matcher_fill_mask(pith_grammar_matcher *m, uint32_t *mask, pith_err *err) {
    pith_grammar *g = m->g;
    if (m->done) {
        memset(mask, 0, g->mask_words * sizeof *mask);
        return 0;
    }
    pthread_mutex_lock(&g->mu);
    int n = g->pda.overflow ? -1 : state_mask(g, m->set, mask);
    pthread_mutex_unlock(&g->mu);
    if (n < 0) return pith_errf(err, "%s", TOO_LARGE);
    return n;
}

/* The state after token (g->mu held); GR_DEAD when not allowed. *ends: an end token. */
static int32_t after_token(pith_grammar_matcher *m, int32_t token, bool *ends) {
    pith_grammar *g = m->g;
    const pith_grammar_vocab *v = g->vocab;
    *ends = false;
    if (m->done || token < 0 || token >= v->n_vocab) return GR_DEAD;
    if (v->kind[token] == PITH_GRAMMAR_TOKEN_END) {
        *ends = true;
        return (g->pda.set_flags[m->set] & GR_SET_ACCEPT) ? m->set : GR_DEAD;
    }
    size_t len = v->off[token + 1] - v->off[token];
    if (v->kind[token] != PITH_GRAMMAR_TOKEN_NORMAL || len == 0 || len > 4096) return GR_DEAD;
    return run_bytes(&g->pda, m->set, (const unsigned char *)v->bytes + v->off[token], len);
}

bool pith_grammar_outgrown(pith_grammar *g) {
    pthread_mutex_lock(&g->mu);
    bool over = g->pda.overflow;
    pthread_mutex_unlock(&g->mu);
    return over;
}

bool pith_grammar_matcher_allows(pith_grammar_matcher *m, int32_t token) {
    bool ends;
    pthread_mutex_lock(&m->g->mu);
    int32_t s = after_token(m, token, &ends);
    pthread_mutex_unlock(&m->g->mu);
    return s >= 0;
}

int pith_grammar_matcher_accept(pith_grammar_matcher *m, int32_t token, pith_err *err) {
    bool ends;
    pthread_mutex_lock(&m->g->mu);
    int32_t s = after_token(m, token, &ends);
    bool over = m->g->pda.overflow;
    pthread_mutex_unlock(&m->g->mu);
    if (s < 0) {
        if (over) return pith_errf(err, "%s", TOO_LARGE);
        if (m->done) return pith_errf(err, "grammar: token %d after the grammar ended", (int)token);
        return pith_errf(err, "grammar: token %d is not allowed here", (int)token);
    }
    m->set = s;
    if (ends) m->done = true;
    return 0;
}

int pith_grammar_matcher_accept_bytes(pith_grammar_matcher *m, const char *bytes, size_t len, pith_err *err) {
    if (m->done) return pith_errf(err, "grammar: bytes after the grammar ended");
    pthread_mutex_lock(&m->g->mu);
    int32_t s = run_bytes(&m->g->pda, m->set, (const unsigned char *)bytes, len);
    bool over = m->g->pda.overflow;
    pthread_mutex_unlock(&m->g->mu);
    if (s < 0) return pith_errf(err, "%s", over ? TOO_LARGE : "grammar: the bytes are not allowed here");
    m->set = s;
    return 0;
}

/* set_flags and set_len of an existing set never change, but the arrays may be reallocated by another
 * matcher of the same grammar: read them under the lock. */
bool pith_grammar_matcher_can_end(const pith_grammar_matcher *m) {
    if (m->done) return false;
    pthread_mutex_lock(&m->g->mu);
    bool r = (m->g->pda.set_flags[m->set] & GR_SET_ACCEPT) != 0;
    pthread_mutex_unlock(&m->g->mu);
    return r;
}

bool pith_grammar_matcher_is_done(const pith_grammar_matcher *m) {
    if (m->done) return true;
    pthread_mutex_lock(&m->g->mu);
    int n;
    const int32_t *mem = gr_pda_members(&m->g->pda, m->set, &n);
    bool r = n == 1 && mem[0] == GR_NODE_ACCEPT;
    pthread_mutex_unlock(&m->g->mu);
    return r;
}
