/* Internals of the grammar engine (include/pith/grammar.h).
 *
 * ir.c      the grammar representation every front end builds: rules, each a list of alternatives,
 *           each a sequence of elements (a set of bytes, or a reference to a rule), ended by GR_END
 * gbnf.c    GBNF text -> ir (the JSON Schema, regex and JSON front ends write GBNF)
 * schema_disjoint.c  whether two JSON Schemas match no common value (oneOf made exact)
 * pda.c     the pushdown automaton: interned stacks (a stack is a chain of frames, a frame a position
 *           in an alternative), interned sets of stacks (the matcher's state) and their transitions
 *           over byte classes, filled lazily
 * vocab.c   token bytes and the token trie
 * region.c  per byte set, the trie's tokens made only of its bytes and where they leave it
 * mask.c    per-position adaptive masks, token masks, matchers
 * grammar.c compile entry points, reference counting */
#ifndef PITH_GR_INTERNAL_H
#define PITH_GR_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pith/grammar.h"

/* ---- size limits ----
 * GR_MAX_ELEMS: the elements (byte sets and rule references, each alternative's end marker included) a
 * grammar may expand to, every repetition unrolled: x{n} is n copies of x, x{m,n} m copies plus a chain of
 * n - m rules of 4 elements. It is checked as the grammar is parsed, before the elements are allocated,
 * so a grammar that would expand past it is refused in milliseconds (gr_too_large names the limit).
 * Every per-element structure that follows (the automaton's copy, its per-position tables and masks) is
 * then bounded by it, and all of them are charged, with the lazily grown tables, to GR_MAX_BYTES. */
#define GR_MAX_ELEMS (1 << 20)
#define GR_MAX_BYTES ((size_t)512 << 20)
/* GR_MAX_WORK: the stacks the automaton may visit while it grows (each new state's expansion and the
 * members each new transition steps), over the grammar's life. Memory alone does not bound the time: an
 * ambiguous grammar (forty [a-z]{0,10000} in a row) makes a new state of thousands of stacks on every
 * byte, and spent 1.5 s of one request (30 s under the fuzzer's sanitizers) before reaching 80 MiB
 * (fuzz_grammar_size). The test suite's schemas and grammars visit at most 53 thousand, the limit test of
 * test_grammar.c 300 thousand; past the budget (0.1 s) the automaton is outgrown, as for memory, and only
 * that grammar's requests fail. */
#define GR_MAX_WORK ((uint64_t)1 << 21)

/* Fills err with the expansion limit's message; returns -1. */
int gr_too_large(pith_err *err);

/* ---- ir ---- */
typedef struct gr_bytes {
    uint32_t w[8];
} gr_bytes;

static inline bool gr_bytes_has(const gr_bytes *b, unsigned c) { return (b->w[c >> 5] >> (c & 31)) & 1u; }
static inline void gr_bytes_set(gr_bytes *b, unsigned c) { b->w[c >> 5] |= 1u << (c & 31); }
void gr_bytes_range(gr_bytes *b, unsigned lo, unsigned hi);

enum { GR_END = 0, GR_BYTES = 1, GR_REF = 2 };
typedef struct gr_elem {
    int32_t kind;
    int32_t val; /* GR_BYTES: class index; GR_REF: rule index */
} gr_elem;

typedef struct gr_seq {
    gr_elem *e;
    int n, cap;
} gr_seq;

typedef struct gr_rule {
    char *name;
    int32_t *alts; /* start index of each alternative in ir.elems */
    int n_alts, cap_alts;
    bool defined;
    int line, col; /* first reference, for "undefined rule" errors */
    /* x{m,n} of one byte set: rule k of the chain (k more may follow, this one included) is
     * `x next | ""`; chain_first: the rule with k = 1 (chain_k 0: not a chain). Never inlined. */
    int chain_first, chain_k;
} gr_rule;

typedef struct gr_ir {
    gr_elem *elems;
    int n_elems, cap_elems;
    gr_bytes *classes;
    int n_classes, cap_classes;
    gr_rule *rules;
    int n_rules, cap_rules;
    int n_anon;
    bool too_large; /* an addition was refused for GR_MAX_ELEMS (not for want of memory) */
} gr_ir;

void gr_ir_free(gr_ir *ir);
/* The rule named name (created undefined when new), or -1 when out of memory. */
int gr_ir_rule(gr_ir *ir, const char *name, size_t len);
int gr_ir_anon_rule(gr_ir *ir, const char *base);
int gr_ir_add_alt(gr_ir *ir, int rule, const gr_seq *seq);
int gr_ir_class(gr_ir *ir, const gr_bytes *b);
int gr_seq_push(gr_seq *s, int kind, int val);
void gr_seq_free(gr_seq *s);
/* Appends to seq what matches one code point of the ranges (pairs lo, hi; inclusive, any order, may
 * overlap; surrogates are never matched): one byte set when all is ASCII, else a reference to a new
 * rule whose alternatives are the UTF-8 byte sequences. */
int gr_ir_push_codepoints(gr_ir *ir, gr_seq *seq, const uint32_t *ranges, int n_pairs, bool negate);
/* Checks that every rule is defined and none is left-recursive; fills err naming the rule. */
int gr_ir_check(gr_ir *ir, pith_err *err);

/* Replaces references to small rules made only of byte sets by their alternatives (see ir.c). */
int gr_ir_inline(gr_ir *ir);

/* GBNF text -> ir; the start rule is `root`. */
int gr_gbnf_parse(const char *src, size_t len, gr_ir *ir, int *root, pith_err *err);

/* Whether no value is valid under both JSON Schemas a and b, by the rules of schema_disjoint.c (false
 * when unsure); root resolves $ref. */
struct cJSON;
bool gr_schema_disjoint(const struct cJSON *root, const struct cJSON *a, const struct cJSON *b);

/* ---- front ends that write GBNF (buffers) ---- */
typedef struct gr_buf {
    char *p;
    size_t n, cap;
    bool oom;
} gr_buf;
void gr_buf_put(gr_buf *b, const char *s, size_t n);
void gr_buf_puts(gr_buf *b, const char *s);
void gr_buf_printf(gr_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A GBNF string literal for bytes s (quotes included). */
void gr_buf_literal(gr_buf *b, const char *s, size_t n);
/* Regex (ECMAScript-like subset) -> GBNF rules; the regex rule is `name`, helpers `name-N`. anchored:
 * the pattern matches the whole text (^ and $ are accepted at its ends); otherwise JSON Schema's
 * search semantics become .* on either unanchored side. */
int gr_regex_to_gbnf(const char *re, size_t len, const char *name, bool json_string, gr_buf *out,
                     int *counter, pith_err *err);

/* ---- vocabulary and trie ---- */
struct pith_grammar_vocab {
    int n_vocab;
    char *bytes;         /* every token's bytes */
    uint64_t *off;       /* [n_vocab + 1] */
    uint8_t *kind;       /* PITH_GRAMMAR_TOKEN_* */
    int32_t *end_tokens; /* ids of END tokens */
    int n_end;
    /* Trie of the normal non-empty tokens in preorder (no root node): node i has byte tb[i] at depth
     * td[i] (1 for the root's children); its subtree is [i, tskip[i]); tokens ending at node i are
     * ttok[ttok_off[i] .. ttok_off[i+1]). */
    int n_nodes;
    uint8_t *tb;
    uint16_t *td;
    int32_t *tskip;
    int32_t *ttok_off;
    int32_t *ttok;
    int max_depth;
};

/* ---- automaton ---- */
enum { GR_NODE_ACCEPT = 0, GR_NODE_CTX = 1 };
enum { GR_SET_ACCEPT = 1, GR_SET_CTX = 2 };
#define GR_DEAD (-1)
enum { GR_RET_NONE = -1, GR_RET_MANY = -2, GR_RET_BOTTOM = -3 };

typedef struct gr_poscache {
    bool ready;
    bool acc_bitmap;     /* acc is a bitmap of mask_words words, else a list of n_acc ids */
    int32_t n_acc, n_dep;
    uint32_t *acc;
    /* roots (preorder trie nodes) of the subtrees whose tokens need the stack below the top frame */
    int32_t *dep;
    uint16_t *dep_lcp;   /* bytes each root's path shares with the one before */
    uint16_t *dep_depth; /* each root's depth */
    int32_t *dep_boff;   /* into dep_bytes: each root's path past dep_lcp */
    uint8_t *dep_bytes;
} gr_poscache;

typedef struct gr_mask_slot {
    int32_t set;         /* -1: empty */
    int32_t n_allowed;
    uint32_t *mask;
} gr_mask_slot;

typedef struct gr_pda {
    /* the grammar, flattened */
    gr_elem *elems;
    int n_elems;
    gr_bytes *classes;
    int n_classes;
    int32_t *rule_alt_off; /* [n_rules + 1] into rule_alts */
    int32_t *rule_alts;
    int n_rules;
    int root;
    /* static return contexts (xgrammar's context expansion): for each rule, where it returns to when
     * that is the same everywhere it is used: GR_RET_BOTTOM (the root: the grammar ends), a position
     * (the element after its only call site, or its callers' return when called last), else
     * GR_RET_MANY. owner: the rule each element belongs to (-1: an alternative inlining replaced). */
    int32_t *owner;
    int32_t *rule_ret;
    /* poscache[alias[pos]] serves pos: positions of x{m,n} chains deeper than any token can reach
     * share one (alias[pos] == pos otherwise); set by gr_pda_alias_chains */
    int32_t *alias;
    int32_t *rule_chain_first, *rule_chain_k;
    /* bytes that no class tells apart share a byte class */
    uint8_t bclass[256];
    uint8_t bclass_rep[256];
    int n_bclasses;

    /* interned stack nodes (parent, pos) */
    int32_t *node_parent, *node_pos;
    int n_nodes, cap_nodes;
    int32_t *node_hash;
    size_t node_hash_cap;
    uint32_t *node_mark;
    uint32_t stamp;

    /* interned sets of nodes (sorted) */
    int32_t *set_off, *set_len;
    uint8_t *set_flags;
    int32_t **set_trans;   /* [n_bclasses] each, lazily; -2: not computed */
    int n_sets, cap_sets;
    int32_t *set_pool;
    size_t n_pool, cap_pool;
    int32_t *set_hash;
    size_t set_hash_cap;
    size_t bytes_used;     /* every table of the grammar (fixed and lazily grown), for GR_MAX_BYTES */
    uint64_t visits;       /* stacks visited growing the automaton, for GR_MAX_WORK */
    bool overflow;

    /* scratch */
    int32_t *work, *out;
    int cap_work, cap_out, n_work, n_out;

    int32_t start_set;
} gr_pda;

/* Adds bytes to the grammar's count before they are allocated: false (and overflow set) past
 * GR_MAX_BYTES. */
bool gr_pda_charge(gr_pda *p, size_t bytes);
/* Builds the flattened automaton from a checked ir. */
int gr_pda_init(gr_pda *p, const gr_ir *ir, int root, pith_err *err);
void gr_pda_free(gr_pda *p);
/* The set after one byte class, or GR_DEAD. On overflow (limits reached) returns GR_DEAD and sets
 * p->overflow. */
int32_t gr_pda_step_slow(gr_pda *p, int32_t set, int bc);
static inline int32_t gr_pda_step(gr_pda *p, int32_t set, uint8_t byte) {
    int bc = p->bclass[byte];
    int32_t *t = p->set_trans[set];
    if (t && t[bc] != -2) return t[bc];
    return gr_pda_step_slow(p, set, bc);
}
/* Points the positions of deep x{m,n} chain rules at the one of the shallowest rule that no token of
 * the vocabulary can tell apart from them (one more than the longest run of x's bytes a token begins
 * with): their masks are equal, so one walk of the trie serves the whole chain. */
int gr_pda_alias_chains(gr_pda *p, const int *class_run);
/* The set holding just one stack. */
int32_t gr_pda_singleton(gr_pda *p, int32_t node);
/* The node for the frame at pos over what is statically known to lie below it (up to depth frames of
 * the callers' return positions), then an unknown context (GR_NODE_CTX) or the empty stack. */
int32_t gr_pda_ctx_node(gr_pda *p, int32_t pos, int depth);
static inline const int32_t *gr_pda_members(const gr_pda *p, int32_t set, int *n) {
    *n = p->set_len[set];
    return p->set_pool + p->set_off[set];
}

/* The region of one byte set C (region.c): the trie nodes whose paths are all in C. */
#define GR_REGION_N_UPTO 7
typedef struct gr_region {
    int max_len;       /* the deepest such node */
    /* grouped by depth n in 1 .. max_len, each group at [x_off[n], x_off[n + 1]) (x_off has max_len + 2):
     * full: the tokens made only of C bytes, of length n; exit: nodes whose own byte is not in C after
     * n bytes of C; node: the region's nodes at depth n */
    int32_t *full, *full_off;
    int32_t *exit, *exit_off;
    int32_t *node, *node_off;
    /* when there are many full tokens: bitmaps (mask_words each) of those of length <= 1, 2, 4, ... 64 */
    uint32_t *upto;
    size_t mask_words;
    int n_bcs;
    uint8_t bcs[256];  /* the automaton's byte classes inside C */
} gr_region;

struct pith_grammar {
    int refs; /* atomic */
    const pith_grammar_vocab *vocab;
    size_t mask_words;
    pthread_mutex_t mu; /* guards pda, poscache and the mask cache */
    gr_pda pda;
    gr_poscache **poscache; /* [n_elems], each allocated when the position's mask is first computed */
    gr_mask_slot slots[64];
    int32_t *scratch_states; /* [vocab max_depth + 2] */
    gr_region **regions;     /* [pda.n_classes], at the first index of each byte set (class_same); NULL
                              * for byte sets used at one position, with small regions, or not built yet */
    int *class_same;         /* [pda.n_classes]: the first class with the same bytes */
    int *class_uses;         /* [pda.n_classes]: positions using the byte set (at its first index) */
    int *class_run;          /* [pda.n_classes]: the longest run of the class's bytes a token begins with
                              * (0 for classes used at one position) */
    /* counters (benchmarks): position masks computed, states masked, masks from the cache, dep checks */
    uint64_t n_poscache, n_masks, n_mask_hits, n_dep_checks;
    uint64_t n_region_walks, n_full_walks; /* position masks from a region summary / a whole-trie walk */
};

/* The JSON rules prefix-ws, -char, -string, -number, -integer, -boolean, -null, -value, -object, -array. */
void gr_json_primitives(gr_buf *b, const char *prefix);
/* The text with each use of PREFIX-ws replaced by its own copy of the whitespace group (json.c). */
char *gr_json_inline_ws(const char *text, const char *prefix);

/* Builds the region of every byte set used at three positions or more (one pruned trie walk each) and
 * class_run. */
int gr_regions_build(pith_grammar *g);
/* Sizes from which a byte set gets a region / a region gets bitmaps (region.c; tests set them to 1). */
extern int gr_region_min_nodes, gr_region_bitmap_tokens;
/* The region of class c, built now when it was left for its first use (g->mu held); NULL: walk the trie. */
const gr_region *gr_region_get(pith_grammar *g, int c);
void gr_regions_free(pith_grammar *g);

/* Computes the adaptive mask of every byte position now (compile time). */
int gr_precompute(pith_grammar *g, pith_err *err);

#endif
