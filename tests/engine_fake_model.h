/* A fake pith_model for engine tests: no weights, deterministic logits, any memory spec, and strict
 * checks of every batch the engine hands it.
 *
 * It declares the memory groups it is built with (fake_model_new_spec): FULL and WINDOW groups of any
 * number of layers, RECURRENT groups, and layers with no memory at all. For each token it writes
 * K = (token id, position), V = -token id into the token's slot of every KV group (one layer of each
 * group, chosen per call, is checked later), and folds the token into its sequence's recurrent state
 * (a count and a running hash). For each token that wants logits, at position p of sequence s, it reads
 * back through s's block tables every position the group lets it see (FULL: 0..p, WINDOW: the last W),
 * checks each slot holds the position it should, and hashes the token ids it read, group by group,
 * with the recurrent state's hash. The logits are a fixed pseudo-random function of that hash. So the
 * next token is a function of the sequence's contents *as stored in the model's memory*: a wrong block
 * table, a prefix-cache block with the wrong content, a window block released too early, a state that
 * was not reset or lost a token changes the output, which fake_next_for (computed from the token list,
 * without any cache) predicts independently.
 *
 * Media (batch.h embed_rows): on a model with has_embeds, a token entering as an embedding row counts
 * as the id in the row's first float, so an image's rows reach the cache and the logits as tokens
 * would (a missing or wrong row changes the output). With
 * bidirectional_spans it checks attend_last against the batch (a span cut between batches shows).
 *
 * Values are small integers (ids < 2048, positions < 2048), exact in F16 as in F32. */
#ifndef PITH_TEST_ENGINE_FAKE_MODEL_H
#define PITH_TEST_ENGINE_FAKE_MODEL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pith/kv.h"
#include "pith/model.h"
#include "pith/tensor.h"

static uint64_t fake_mix(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t fake_hash_step(uint64_t h, int32_t token) { return fake_mix(h ^ ((uint64_t)(uint32_t)token + 1)); }

static float fake_logit(uint64_t h, int v) {
    return (float)(fake_mix(h ^ ((uint64_t)v * 0x632be59bd9b4e019ull)) >> 40) * (1.0f / 16777216.0f);
}

static void fake_logits_row(uint64_t h, int n_vocab, float *row) {
    for (int v = 0; v < n_vocab; v++) row[v] = fake_logit(h, v);
}

#define FAKE_MAX_GROUPS PITH_MAX_MEM_GROUPS

typedef struct fake_group_def {
    pith_mem_kind kind;
    int window;               /* WINDOW */
    int n_layers;
} fake_group_def;

typedef struct fake_state {
    int max_batch_tokens;     /* limits the engine promised, checked on every batch */
    int max_num_seqs;
    int fail_at_call;         /* forward call number (1-based) that fails; 0: never */
    uint64_t calls;
    uint64_t tokens;          /* tokens of successful calls */
    int max_seqs_seen;
    int violations;
    char first_violation[256];
    int n_groups;
    fake_group_def defs[FAKE_MAX_GROUPS];
    int layers[4096];         /* storage for the spec's layer lists */
    pith_kv_host mem;
    uint32_t *slot_stamp[FAKE_MAX_GROUPS]; /* per slot: the call number that last wrote it */
    int max_held[FAKE_MAX_GROUPS]; /* most blocks one batch's tables named in a KV group (all sequences) */
    int prepared;             /* prepare calls */
    uint64_t embed_rows_seen; /* tokens that entered as embedding rows */
    int32_t *eff;             /* [cap_eff] scratch: the id each batch token counts as */
    int cap_eff;
    pith_model_limits limits;
} fake_state;

/* A recurrent state slot: how many tokens it has seen and their running hash. */
typedef struct fake_rstate {
    uint64_t count, hash;
} fake_rstate;

/* The hash a FULL, WINDOW or RECURRENT group contributes for a token at position p (0-based) of a
 * sequence whose tokens are tokens[0..p]. */
static uint64_t fake_group_hash(const fake_group_def *d, const int32_t *tokens, int p) {
    uint64_t h = 0;
    int first = d->kind == PITH_MEM_WINDOW && p - d->window + 1 > 0 ? p - d->window + 1 : 0;
    for (int q = first; q <= p; q++) h = fake_hash_step(h, tokens[q]);
    return h;
}

static uint64_t fake_combine(uint64_t h, int g, uint64_t gh) { return fake_mix(h ^ fake_mix(gh + (uint64_t)g * 0x9e37u)); }

/* The hash the logits after tokens[0..n) come from, for a fake model with these groups. */
static uint64_t fake_hash_for(const fake_state *st, const int32_t *tokens, int n) {
    uint64_t h = 0;
    for (int g = 0; g < st->n_groups; g++) h = fake_combine(h, g, fake_group_hash(&st->defs[g], tokens, n - 1));
    return h;
}

/* The greedy next token after tokens[0..n) for a fake model with these groups, without any cache. */
static int32_t fake_next_for(const fake_state *st, const int32_t *tokens, int n, int n_vocab) {
    uint64_t h = fake_hash_for(st, tokens, n);
    int32_t best = 0;
    float bv = fake_logit(h, 0);
    for (int v = 1; v < n_vocab; v++) {
        float x = fake_logit(h, v);
        if (x > bv) {
            bv = x;
            best = v;
        }
    }
    return best;
}

#define FAKE_VIOLATION(st, ...)                                                                   \
    do {                                                                                          \
        if ((st)->violations++ == 0) snprintf((st)->first_violation, sizeof (st)->first_violation, __VA_ARGS__); \
        return pith_errf(err, "fake model: batch violates the contract");                          \
    } while (0)

static float fake_load(const pith_kv_cache *kv, const void *base, size_t idx) {
    if (kv->type == PITH_F32) return ((const float *)base)[idx];
    return pith_f16_to_f32(((const uint16_t *)base)[idx]);
}

static void fake_store(const pith_kv_cache *kv, void *base, size_t idx, float x) {
    if (kv->type == PITH_F32) ((float *)base)[idx] = x;
    else ((uint16_t *)base)[idx] = pith_f32_to_f16(x);
}

/* Element index of a slot's K (v false) or V row in a layer of group cache c. */
static size_t fake_slot_index(const pith_kv_cache *c, int layer, int slot, bool v) {
    int b = slot / c->block_size, off = slot % c->block_size;
    return v ? pith_kv_v_offset(c, layer, b) + (size_t)off * (size_t)c->v_dim
             : pith_kv_k_offset(c, layer, b) + (size_t)off * (size_t)c->k_dim;
}

static int fake_forward(pith_model *m, const pith_batch *b, float *logits, pith_err *err) {
    fake_state *st = m->impl;
    st->calls++;
    if (!pith_kv_host_allocated(&st->mem) && st->n_groups) FAKE_VIOLATION(st, "forward before mem_alloc");
    if (b->n_tokens < 1 || b->n_tokens > st->max_batch_tokens) FAKE_VIOLATION(st, "batch of %d tokens", b->n_tokens);
    if (b->n_seqs < 1 || b->n_seqs > st->max_num_seqs) FAKE_VIOLATION(st, "batch of %d sequences", b->n_seqs);
    if (st->prepared && (b->n_tokens > st->limits.max_batch_tokens || b->n_seqs > st->limits.max_num_seqs ||
                         pith_batch_n_logits(b) > st->limits.max_logits))
        FAKE_VIOLATION(st, "batch beyond the limits given to prepare");
    if (b->n_groups != st->n_groups) FAKE_VIOLATION(st, "batch with %d groups", b->n_groups);
    if (b->n_seqs > st->max_seqs_seen) st->max_seqs_seen = b->n_seqs;
    int32_t last_pos[1024], first_tok[1024];
    if (b->n_seqs > 1024) FAKE_VIOLATION(st, "batch of %d sequences", b->n_seqs);
    for (int s = 0; s < b->n_seqs; s++) last_pos[s] = -1, first_tok[s] = -1;
    /* Positions first, then writes: a token attends to the batch's earlier tokens of its sequence. */
    for (int i = 0; i < b->n_tokens; i++) {
        int s = b->seq[i], p = b->positions[i];
        if (s < 0 || s >= b->n_seqs) FAKE_VIOLATION(st, "token %d: sequence %d", i, s);
        if (last_pos[s] >= 0 && (p != last_pos[s] + 1 || b->seq[i - 1] != s))
            FAKE_VIOLATION(st, "token %d: position %d after %d, not contiguous", i, p, last_pos[s]);
        if (first_tok[s] < 0) first_tok[s] = i;
        last_pos[s] = p;
        if (b->tokens[i] < 0 || b->tokens[i] >= m->hp.n_vocab) FAKE_VIOLATION(st, "token id %d", b->tokens[i]);
    }
    /* The id each token counts as: its own, or its embedding row's first float (batch.h: embed_rows). */
    if (b->n_tokens > st->cap_eff) {
        free(st->eff);
        st->cap_eff = 0;
        if (!(st->eff = malloc((size_t)b->n_tokens * sizeof *st->eff))) return pith_errf(err, "out of memory");
        st->cap_eff = b->n_tokens;
    }
    int32_t *eff = st->eff;
    for (int i = 0; i < b->n_tokens; i++) {
        int r = b->embed_rows ? b->embed_rows[i] : -1;
        eff[i] = b->tokens[i];
        if ((b->embed_rows && !m->has_embeds) || (b->attend_last && !m->bidirectional_spans)) {
            FAKE_VIOLATION(st, "media fields for a model without them");
        }
        if (r >= b->n_embeds || (r >= 0 && !b->embeds)) {
            FAKE_VIOLATION(st, "token %d (id %d): embedding row %d of %d", i, b->tokens[i], r, b->n_embeds);
        }
        if (r >= 0) {
            eff[i] = (int32_t)b->embeds[(size_t)r * (size_t)m->hp.dim];
            st->embed_rows_seen++;
        }
        int s = b->seq[i], p = b->positions[i];
        if (b->attend_last && (b->attend_last[i] < p || b->attend_last[i] > last_pos[s])) {
            FAKE_VIOLATION(st, "token %d at %d attends to %d, past its sequence's last position %d in the batch", i, p,
                           b->attend_last[i], last_pos[s]);
        }
    }
    for (int g = 0; g < st->n_groups; g++) {
        const fake_group_def *d = &st->defs[g];
        pith_kv_cache *c = &st->mem.groups[g];
        const pith_batch_mem *bm = &b->mem[g];
        if (d->kind == PITH_MEM_RECURRENT) {
            for (int s = 0; s < b->n_seqs; s++) {
                int slot = bm->state_slots[s];
                if (slot < 0 || slot >= c->n_slots) FAKE_VIOLATION(st, "sequence %d: state slot %d", s, slot);
                for (int s2 = 0; s2 < s; s2++)
                    if (bm->state_slots[s2] == slot) FAKE_VIOLATION(st, "state slot %d shared", slot);
                fake_rstate *rs = (fake_rstate *)(c->state + (size_t)slot * c->state_bytes);
                int p0 = b->positions[first_tok[s]];
                if (p0 == 0) rs->count = rs->hash = 0; /* batch.h: position 0 starts from zero state */
                else if (rs->count != (uint64_t)p0) FAKE_VIOLATION(st, "sequence %d at %d: state has seen %llu tokens", s, p0, (unsigned long long)rs->count);
            }
            continue;
        }
        const int bs = c->block_size, n_slots = c->n_blocks * bs;
        int held = 0;
        for (int k = 0; k < b->n_seqs * bm->max_blocks; k++) held += bm->block_tables[k] >= 0;
        if (held > st->max_held[g]) st->max_held[g] = held;
        if (!st->slot_stamp[g]) st->slot_stamp[g] = calloc((size_t)n_slots, sizeof **st->slot_stamp);
        for (int i = 0; i < b->n_tokens; i++) {
            int s = b->seq[i], p = b->positions[i], slot = bm->slots[i];
            if (p / bs >= bm->max_blocks) FAKE_VIOLATION(st, "group %d token %d: position %d beyond the block table", g, i, p);
            int blk = bm->block_tables[(size_t)s * bm->max_blocks + p / bs];
            if (blk < 0 || blk >= c->n_blocks || slot != blk * bs + p % bs) FAKE_VIOLATION(st, "group %d token %d: slot %d, block %d", g, i, slot, blk);
            if (st->slot_stamp[g][slot] == (uint32_t)st->calls) FAKE_VIOLATION(st, "group %d: slot %d written twice", g, slot);
            st->slot_stamp[g][slot] = (uint32_t)st->calls;
            for (int l = 0; l < c->n_layers; l++) {
                fake_store(c, c->k, fake_slot_index(c, l, slot, false), (float)eff[i]);
                fake_store(c, c->k, fake_slot_index(c, l, slot, false) + 1, (float)p);
                fake_store(c, c->v, fake_slot_index(c, l, slot, true), -(float)eff[i]);
            }
        }
    }
    int row = 0;
    for (int i = 0; i < b->n_tokens; i++) {
        int s = b->seq[i], p = b->positions[i];
        uint64_t h = 0;
        for (int g = 0; g < st->n_groups; g++) {
            const fake_group_def *d = &st->defs[g];
            pith_kv_cache *c = &st->mem.groups[g];
            const pith_batch_mem *bm = &b->mem[g];
            if (d->kind == PITH_MEM_RECURRENT) {
                fake_rstate *rs = (fake_rstate *)(c->state + (size_t)bm->state_slots[s] * c->state_bytes);
                rs->hash = fake_hash_step(rs->hash, eff[i]);
                rs->count++;
                h = fake_combine(h, g, rs->hash);
                if (bm->checkpoints && bm->checkpoints[i] >= 0) { /* batch.h: the state right after token i */
                    int ck = bm->checkpoints[i];
                    if (!m->state_checkpoints || ck >= c->n_slots) FAKE_VIOLATION(st, "checkpoint slot %d", ck);
                    for (int s2 = 0; s2 < b->n_seqs; s2++)
                        if (bm->state_slots[s2] == ck) FAKE_VIOLATION(st, "checkpoint slot %d is a sequence's", ck);
                    memcpy(c->state + (size_t)ck * c->state_bytes, rs, sizeof *rs);
                }
                continue;
            }
            if (!b->want_logits[i]) continue;
            const int bs = c->block_size;
            int layer = (int)(st->calls % (uint64_t)c->n_layers);
            int first = d->kind == PITH_MEM_WINDOW && p - d->window + 1 > 0 ? p - d->window + 1 : 0;
            uint64_t gh = 0;
            for (int q = first; q <= p; q++) {
                int blk = bm->block_tables[(size_t)s * bm->max_blocks + q / bs];
                if (blk < 0 || blk >= c->n_blocks) FAKE_VIOLATION(st, "group %d: position %d of sequence %d: block %d", g, q, s, blk);
                int slot = blk * bs + q % bs;
                float tok = fake_load(c, c->k, fake_slot_index(c, layer, slot, false));
                float pos = fake_load(c, c->k, fake_slot_index(c, layer, slot, false) + 1);
                if (pos != (float)q || fake_load(c, c->v, fake_slot_index(c, layer, slot, true)) != -tok)
                    FAKE_VIOLATION(st, "group %d: position %d of sequence %d holds position %g", g, q, s, (double)pos);
                gh = fake_hash_step(gh, (int32_t)tok);
            }
            h = fake_combine(h, g, gh);
        }
        if (b->want_logits[i]) fake_logits_row(h, m->hp.n_vocab, &logits[(size_t)row++ * m->hp.n_vocab]);
    }
    if (st->fail_at_call && st->calls == (uint64_t)st->fail_at_call) return pith_errf(err, "fake model: planned failure");
    st->tokens += (uint64_t)b->n_tokens;
    return 0;
}

static int fake_prepare(pith_model *m, const pith_model_limits *lim, pith_err *err) {
    (void)err;
    fake_state *st = m->impl;
    st->prepared++;
    st->limits = *lim;
    return 0;
}

static int fake_mem_alloc(pith_model *m, const pith_mem_layout *lay, pith_err *err) {
    fake_state *st = m->impl;
    if (pith_kv_host_allocated(&st->mem)) return pith_errf(err, "fake model: memory already allocated");
    return pith_kv_host_alloc(&st->mem, &m->mem, lay, err);
}

static void fake_mem_free(pith_model *m) {
    fake_state *st = m->impl;
    pith_kv_host_free(&st->mem);
    for (int g = 0; g < FAKE_MAX_GROUPS; g++) {
        free(st->slot_stamp[g]);
        st->slot_stamp[g] = NULL;
    }
}

static int fake_copy_blocks(pith_model *m, int g, const int32_t *src, const int32_t *dst, int n, pith_err *err) {
    return pith_kv_host_copy_blocks(&((fake_state *)m->impl)->mem, g, src, dst, n, err);
}

static void fake_destroy(pith_model *m) {
    fake_mem_free(m);
    free(((fake_state *)m->impl)->eff);
    free(m->impl);
    free(m);
}

static const pith_model_ops fake_ops = {
    .prepare = fake_prepare, .mem_alloc = fake_mem_alloc, .mem_free = fake_mem_free,
    .copy_blocks = fake_copy_blocks, .forward = fake_forward, .destroy = fake_destroy,
};

/* Groups as given (layers assigned in order), then n_free_layers layers with no memory. ctx_len 0: the
 * engine's max_seq_len decides. */
static pith_model *fake_model_new_spec(int n_vocab, int ctx_len, const fake_group_def *defs, int n_groups,
                                       int n_free_layers) {
    pith_model *m = calloc(1, sizeof *m);
    fake_state *st = calloc(1, sizeof *st);
    m->ops = &fake_ops;
    m->impl = st;
    m->hp.n_vocab = n_vocab;
    m->hp.ctx_len = ctx_len;
    snprintf(m->hp.arch, sizeof m->hp.arch, "fake");
    st->max_batch_tokens = 1 << 30;
    st->max_num_seqs = 1 << 30;
    st->n_groups = n_groups;
    int l = 0;
    m->mem.n_groups = n_groups;
    for (int g = 0; g < n_groups; g++) {
        st->defs[g] = defs[g];
        pith_mem_group *mg = &m->mem.groups[g];
        mg->kind = defs[g].kind;
        mg->window = defs[g].window;
        mg->n_layers = defs[g].n_layers;
        mg->layers = &st->layers[l];
        for (int i = 0; i < defs[g].n_layers; i++, l++) st->layers[l] = l;
        mg->type = PITH_F16;
        mg->k_dim = 2;
        mg->v_dim = 1; /* K and V widths differ, as the spec allows */
        mg->state_bytes = sizeof(fake_rstate);
    }
    m->hp.n_layers = l + n_free_layers;
    m->state_checkpoints = true; /* forward honours batch checkpoints */
    return m;
}

/* One FULL group of n_layers layers. */
static inline pith_model *fake_model_new(int n_vocab, int n_layers, int ctx_len) {
    fake_group_def d = {PITH_MEM_FULL, 0, n_layers};
    return fake_model_new_spec(n_vocab, ctx_len, &d, 1, 0);
}

static inline fake_state *fake_of(pith_model *m) { return m->impl; }

/* The greedy next token of a one-FULL-group fake model. */
static inline int32_t fake_next(const int32_t *tokens, int n, int n_vocab) {
    fake_state st = {.n_groups = 1, .defs = {{PITH_MEM_FULL, 0, 1}}};
    return fake_next_for(&st, tokens, n, n_vocab);
}

#endif
