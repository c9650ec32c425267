/* The grammar representation: rules of alternatives of element sequences over byte sets. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/gr_internal.h"

void gr_bytes_range(gr_bytes *b, unsigned lo, unsigned hi) {
    for (unsigned c = lo; c <= hi && c < 256; c++) gr_bytes_set(b, c);
}

void gr_ir_free(gr_ir *ir) {
    for (int i = 0; i < ir->n_rules; i++) {
        free(ir->rules[i].name);
        free(ir->rules[i].alts);
    }
    free(ir->rules);
    free(ir->elems);
    free(ir->classes);
    memset(ir, 0, sizeof *ir);
}

static int grow(void **p, int *cap, int need, size_t elem) {
    if (need <= *cap) return 0;
    int nc = *cap ? *cap * 2 : 16;
    while (nc < need) nc *= 2;
    void *q = realloc(*p, (size_t)nc * elem);
    if (!q) return -1;
    *p = q;
    *cap = nc;
    return 0;
}

int gr_seq_push(gr_seq *s, int kind, int val) {
    if (grow((void **)&s->e, &s->cap, s->n + 1, sizeof *s->e)) return -1;
    s->e[s->n].kind = kind;
    s->e[s->n].val = val;
    s->n++;
    return 0;
}

void gr_seq_free(gr_seq *s) {
    free(s->e);
    memset(s, 0, sizeof *s);
}

int gr_too_large(pith_err *err) {
    return pith_errf(err,
                     "grammar: too large: it expands to more than %d elements, the limit (a repetition counts "
                     "unrolled: x{n} as n elements, x{m,n} as about 4n); reduce the repetition counts",
                     GR_MAX_ELEMS);
}

static int new_rule(gr_ir *ir, const char *name, size_t len) {
    /* every rule gets at least one alternative, so rules are bounded with the elements */
    if (ir->n_rules >= GR_MAX_ELEMS) { ir->too_large = true; return -1; }
    if (grow((void **)&ir->rules, &ir->cap_rules, ir->n_rules + 1, sizeof *ir->rules)) return -1;
    gr_rule *r = &ir->rules[ir->n_rules];
    memset(r, 0, sizeof *r);
    r->name = malloc(len + 1);
    if (!r->name) return -1;
    memcpy(r->name, name, len);
    r->name[len] = 0;
    return ir->n_rules++;
}

int gr_ir_rule(gr_ir *ir, const char *name, size_t len) {
    for (int i = 0; i < ir->n_rules; i++)
        if (strlen(ir->rules[i].name) == len && memcmp(ir->rules[i].name, name, len) == 0) return i;
    return new_rule(ir, name, len);
}

int gr_ir_anon_rule(gr_ir *ir, const char *base) {
    char name[96];
    int n = snprintf(name, sizeof name, "%.60s~%d", base, ++ir->n_anon);
    int r = new_rule(ir, name, (size_t)n);
    if (r >= 0) ir->rules[r].defined = true;
    return r;
}

int gr_ir_add_alt(gr_ir *ir, int rule, const gr_seq *seq) {
    if ((int64_t)ir->n_elems + seq->n + 1 > GR_MAX_ELEMS) { ir->too_large = true; return -1; }
    if (grow((void **)&ir->elems, &ir->cap_elems, ir->n_elems + seq->n + 1, sizeof *ir->elems)) return -1;
    gr_rule *r = &ir->rules[rule];
    if (grow((void **)&r->alts, &r->cap_alts, r->n_alts + 1, sizeof *r->alts)) return -1;
    r->alts[r->n_alts++] = ir->n_elems;
    if (seq->n) memcpy(ir->elems + ir->n_elems, seq->e, (size_t)seq->n * sizeof *seq->e);
    ir->n_elems += seq->n;
    ir->elems[ir->n_elems].kind = GR_END;
    ir->elems[ir->n_elems].val = 0;
    ir->n_elems++;
    return 0;
}

int gr_ir_class(gr_ir *ir, const gr_bytes *b) {
    for (int i = ir->n_classes - 1; i >= 0 && i >= ir->n_classes - 64; i--)
        if (memcmp(&ir->classes[i], b, sizeof *b) == 0) return i;
    if (grow((void **)&ir->classes, &ir->cap_classes, ir->n_classes + 1, sizeof *ir->classes)) return -1;
    ir->classes[ir->n_classes] = *b;
    return ir->n_classes++;
}

/* ---- code point ranges to UTF-8 byte sequences ---- */

static int utf8_encode(uint32_t cp, uint8_t out[4]) {
    if (cp < 0x80) { out[0] = (uint8_t)cp; return 1; }
    if (cp < 0x800) { out[0] = (uint8_t)(0xC0 | (cp >> 6)); out[1] = (uint8_t)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        out[0] = (uint8_t)(0xE0 | (cp >> 12));
        out[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (uint8_t)(0xF0 | (cp >> 18));
    out[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

typedef struct cp_ctx {
    gr_ir *ir;
    int rule;
    gr_bytes ascii;
    bool has_ascii;
    int fail;
} cp_ctx;

/* lo..hi encode to the same length; split until every byte position ranges independently. */
static void emit_same_len(cp_ctx *c, uint32_t lo, uint32_t hi) {
    if (c->fail) return;
    uint8_t a[4], b[4];
    int n = utf8_encode(lo, a);
    if (n == 1) {
        gr_bytes_range(&c->ascii, lo, hi);
        c->has_ascii = true;
        return;
    }
    for (int i = 1; i < n; i++) {
        uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if ((lo & m) != 0) {
                emit_same_len(c, lo, lo | m);
                emit_same_len(c, (lo | m) + 1, hi);
                return;
            }
            if ((hi & m) != m) {
                emit_same_len(c, lo, (hi & ~m) - 1);
                emit_same_len(c, hi & ~m, hi);
                return;
            }
        }
    }
    utf8_encode(hi, b);
    gr_seq s = {0};
    for (int i = 0; i < n; i++) {
        gr_bytes set = {{0}};
        gr_bytes_range(&set, a[i], b[i]);
        int k = gr_ir_class(c->ir, &set);
        if (k < 0 || gr_seq_push(&s, GR_BYTES, k)) { c->fail = 1; gr_seq_free(&s); return; }
    }
    if (gr_ir_add_alt(c->ir, c->rule, &s)) c->fail = 1;
    gr_seq_free(&s);
}

static void emit_range(cp_ctx *c, uint32_t lo, uint32_t hi) {
    static const uint32_t bounds[] = {0x7F, 0x7FF, 0xFFFF, 0x10FFFF};
    for (int i = 0; i < 4 && lo <= hi; i++) {
        if (lo > bounds[i]) continue;
        uint32_t top = hi < bounds[i] ? hi : bounds[i];
        emit_same_len(c, lo, top);
        lo = top + 1;
    }
}

static int cmp_u32pair(const void *a, const void *b) {
    const uint32_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0];
}

int gr_ir_push_codepoints(gr_ir *ir, gr_seq *seq, const uint32_t *ranges, int n_pairs, bool negate) {
    /* normalise: sorted, merged, surrogates removed, then complemented if asked */
    uint32_t *r = malloc(((size_t)n_pairs * 2 + 8) * 2 * sizeof *r);
    if (!r) return -1;
    int n = 0;
    for (int i = 0; i < n_pairs; i++) {
        uint32_t lo = ranges[2 * i], hi = ranges[2 * i + 1];
        if (lo > hi) { uint32_t t = lo; lo = hi; hi = t; }
        if (lo > 0x10FFFF) continue;
        if (hi > 0x10FFFF) hi = 0x10FFFF;
        r[2 * n] = lo;
        r[2 * n + 1] = hi;
        n++;
    }
    qsort(r, (size_t)n, 2 * sizeof *r, cmp_u32pair);
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (m && r[2 * i] <= r[2 * (m - 1) + 1] + 1) {
            if (r[2 * i + 1] > r[2 * (m - 1) + 1]) r[2 * (m - 1) + 1] = r[2 * i + 1];
        } else {
            r[2 * m] = r[2 * i];
            r[2 * m + 1] = r[2 * i + 1];
            m++;
        }
    }
    uint32_t *q = malloc(((size_t)m * 2 + 8) * 2 * sizeof *q);
    if (!q) { free(r); return -1; }
    int k = 0;
    if (negate) {
        uint32_t next = 0;
        for (int i = 0; i < m; i++) {
            if (r[2 * i] > next) { q[2 * k] = next; q[2 * k + 1] = r[2 * i] - 1; k++; }
            next = r[2 * i + 1] + 1;
        }
        if (next <= 0x10FFFF) { q[2 * k] = next; q[2 * k + 1] = 0x10FFFF; k++; }
    } else {
        memcpy(q, r, (size_t)m * 2 * sizeof *q);
        k = m;
    }
    free(r);
    /* cut out the surrogates */
    uint32_t *s = malloc(((size_t)k * 2 + 8) * 2 * sizeof *s);
    if (!s) { free(q); return -1; }
    int ns = 0;
    for (int i = 0; i < k; i++) {
        uint32_t lo = q[2 * i], hi = q[2 * i + 1];
        if (hi < 0xD800 || lo > 0xDFFF) { s[2 * ns] = lo; s[2 * ns + 1] = hi; ns++; continue; }
        if (lo < 0xD800) { s[2 * ns] = lo; s[2 * ns + 1] = 0xD7FF; ns++; }
        if (hi > 0xDFFF) { s[2 * ns] = 0xE000; s[2 * ns + 1] = hi; ns++; }
    }
    free(q);
    bool all_ascii = true;
    for (int i = 0; i < ns; i++)
        if (s[2 * i + 1] >= 0x80) all_ascii = false;
    int rc = 0;
    if (all_ascii) {
        gr_bytes b = {{0}};
        for (int i = 0; i < ns; i++) gr_bytes_range(&b, s[2 * i], s[2 * i + 1]);
        int c = gr_ir_class(ir, &b);
        rc = c < 0 ? -1 : gr_seq_push(seq, GR_BYTES, c);
    } else {
        cp_ctx c = {.ir = ir};
        c.rule = gr_ir_anon_rule(ir, "char");
        if (c.rule < 0) { free(s); return -1; }
        for (int i = 0; i < ns; i++) emit_range(&c, s[2 * i], s[2 * i + 1]);
        if (!c.fail && c.has_ascii) {
            gr_seq one = {0};
            int cl = gr_ir_class(ir, &c.ascii);
            if (cl < 0 || gr_seq_push(&one, GR_BYTES, cl) || gr_ir_add_alt(ir, c.rule, &one)) c.fail = 1;
            gr_seq_free(&one);
        }
        rc = c.fail ? -1 : gr_seq_push(seq, GR_REF, c.rule);
    }
    free(s);
    return rc;
}

/* ---- checks ---- */

int gr_ir_check(gr_ir *ir, pith_err *err) {
    int n = ir->n_rules;
    for (int i = 0; i < n; i++)
        if (!ir->rules[i].defined) {
            if (ir->rules[i].line)
                return pith_errf(err, "grammar: rule '%s' is used (line %d) but never defined",
                                 ir->rules[i].name, ir->rules[i].line);
            return pith_errf(err, "grammar: rule '%s' is used but never defined", ir->rules[i].name);
        }
    /* nullable rules, to a fixed point */
    bool *nullable = calloc((size_t)n + 1, 1);
    int *state = calloc((size_t)n + 1, sizeof *state);
    int *stack = malloc(((size_t)n + 1) * 2 * sizeof *stack);
    if (!nullable || !state || !stack) {
        free(nullable); free(state); free(stack);
        return pith_errf(err, "out of memory");
    }
    for (bool changed = true; changed;) {
        changed = false;
        for (int i = 0; i < n; i++) {
            if (nullable[i]) continue;
            gr_rule *r = &ir->rules[i];
            for (int a = 0; a < r->n_alts && !nullable[i]; a++) {
                bool all = true;
                for (const gr_elem *e = ir->elems + r->alts[a]; e->kind != GR_END; e++)
                    if (e->kind == GR_BYTES || !nullable[e->val]) { all = false; break; }
                if (all) { nullable[i] = true; changed = true; }
            }
        }
    }
    /* left recursion: a cycle in "rule A can begin with rule B"; iterative DFS */
    int rc = 0;
    for (int s = 0; s < n && !rc; s++) {
        if (state[s]) continue;
        int sp = 0;
        stack[sp++] = s; /* pairs (rule, next edge index) encoded: we re-scan edges each time */
        stack[sp++] = 0;
        state[s] = 1;
        while (sp && !rc) {
            int edge = stack[sp - 1], rule = stack[sp - 2];
            gr_rule *r = &ir->rules[rule];
            /* enumerate the rules rule can begin with, as a flat index over (alt, element) */
            int idx = 0, found = -1;
            for (int a = 0; a < r->n_alts && found < 0; a++)
                for (const gr_elem *e = ir->elems + r->alts[a]; e->kind == GR_REF; e++) {
                    if (idx++ == edge) { found = e->val; break; }
                    if (!nullable[e->val]) break;
                }
            if (found < 0) {
                state[rule] = 2;
                sp -= 2;
                continue;
            }
            stack[sp - 1] = edge + 1;
            if (state[found] == 1) {
                rc = pith_errf(err, "grammar: rule '%s' is left-recursive (it can begin with itself)%s",
                               ir->rules[found].name,
                               found == rule ? "" : " through other rules");
            } else if (state[found] == 0) {
                state[found] = 1;
                stack[sp++] = found;
                stack[sp++] = 0;
            }
        }
    }
    /* a repetition of something that can match nothing loops: x* with x nullable is x-star ::= x x-star
     * | "", which is left-recursive above, so it is already caught. */
    free(nullable);
    free(state);
    free(stack);
    return rc;
}

/* ---- inlining ----
 * A reference to a rule made only of byte sets ("a leaf") is replaced by that rule's alternatives, so
 * that a character class, an escape or a short literal becomes part of the alternative that uses it.
 * Then the frame on top of a stack lives longer: a token running through many characters of a string
 * stays in one frame (the repetition's), and the masks precomputed per position need the stack below
 * far less often. Repeated to a fixed point within size limits, and only while the grammar stays under
 * GR_MAX_ELEMS: inlining a character class into each rule of a long x{0,n} chain multiplies the chain's
 * size by the class's alternatives, so where that would pass the limit the rest is left as references
 * (the same language, masks that consult the stack more often) rather than refused. */
#define INLINE_MAX_ALTS 64
#define INLINE_MAX_LEN 64

static bool alt_is_leaf(const gr_ir *ir, int32_t a) {
    for (const gr_elem *e = ir->elems + a; e->kind != GR_END; e++)
        if (e->kind == GR_REF) return false;
    return true;
}

static int alt_len(const gr_ir *ir, int32_t a) {
    int n = 0;
    while (ir->elems[a + n].kind != GR_END) n++;
    return n;
}

int gr_ir_inline(gr_ir *ir) {
    int n = ir->n_rules;
    bool *leaf = calloc((size_t)n + 1, 1);
    int32_t *work = malloc(INLINE_MAX_ALTS * 4 * sizeof *work);
    gr_seq tmp = {0};
    if (!leaf || !work) { free(leaf); free(work); return -1; }
    int rc = 0;
    bool full = false;
    for (int pass = 0; pass < 8 && !rc && !full; pass++) {
        for (int r = 0; r < n; r++) {
            leaf[r] = ir->rules[r].chain_k == 0;
            for (int a = 0; a < ir->rules[r].n_alts; a++)
                if (!alt_is_leaf(ir, ir->rules[r].alts[a])) leaf[r] = false;
        }
        bool changed = false;
        for (int r = 0; r < n && !rc && !full; r++) {
            gr_rule *R = &ir->rules[r];
            if (leaf[r] || R->n_alts > INLINE_MAX_ALTS || R->chain_k) continue;
            /* expand alternatives one reference at a time */
            int n_work = 0;
            bool too_big = false;
            for (int a = 0; a < R->n_alts; a++) work[n_work++] = R->alts[a];
            bool any = false;
            for (int w = 0; w < n_work && !too_big && !rc; w++) {
                int32_t a = work[w];
                int len = alt_len(ir, a), at = -1;
                for (int i = 0; i < len; i++) {
                    gr_elem e = ir->elems[a + i];
                    if (e.kind == GR_REF && e.val != r && leaf[e.val] && ir->rules[e.val].n_alts > 0) { at = i; break; }
                }
                if (at < 0) continue;
                const gr_rule *L = &ir->rules[ir->elems[a + at].val];
                if (n_work - 1 + L->n_alts > INLINE_MAX_ALTS) { too_big = true; break; }
                bool fits = true;
                for (int b = 0; b < L->n_alts; b++)
                    if (len - 1 + alt_len(ir, L->alts[b]) > INLINE_MAX_LEN) fits = false;
                if (!fits) continue;
                /* replace work[w] by one alternative per alternative of L */
                int32_t new_alts[INLINE_MAX_ALTS] = {0};
                int nn = 0;
                for (int b = 0; b < L->n_alts && !rc; b++) {
                    tmp.n = 0;
                    for (int i = 0; i < at; i++) rc |= gr_seq_push(&tmp, ir->elems[a + i].kind, ir->elems[a + i].val);
                    for (const gr_elem *e = ir->elems + L->alts[b]; e->kind != GR_END; e++)
                        rc |= gr_seq_push(&tmp, e->kind, e->val);
                    for (int i = at + 1; i < len; i++) rc |= gr_seq_push(&tmp, ir->elems[a + i].kind, ir->elems[a + i].val);
                    /* append as a detached alternative: add to rule r temporarily, then take it back */
                    if (!rc) rc = gr_ir_add_alt(ir, r, &tmp);
                    if (rc && ir->too_large) { /* the limit: this rule stays as it was, and the rest */
                        ir->too_large = false;
                        rc = 0;
                        full = true;
                        break;
                    }
                    R = &ir->rules[r];
                    if (!rc) new_alts[nn++] = R->alts[--R->n_alts];
                }
                if (rc || full || nn == 0) break;
                work[w] = new_alts[0];
                for (int b = 1; b < nn; b++) work[n_work++] = new_alts[b];
                w--; /* look at the replaced alternative again */
                any = true;
            }
            if (rc || full || too_big || !any) continue;
            R = &ir->rules[r];
            if (R->cap_alts < n_work) {
                int32_t *q = realloc(R->alts, (size_t)n_work * sizeof *q);
                if (!q) { rc = -1; break; }
                R->alts = q;
                R->cap_alts = n_work;
            }
            memcpy(R->alts, work, (size_t)n_work * sizeof *work);
            R->n_alts = n_work;
            changed = true;
        }
        if (!changed) break;
    }
    gr_seq_free(&tmp);
    free(leaf);
    free(work);
    return rc;
}
