/* A fake pith_model for engine tests: no weights, deterministic logits, and strict checks of every
 * batch the engine hands it.
 *
 * For each token it writes K = (token id, position) into the token's KV slot (V = the same, negated).
 * For each token that wants logits, at position p of sequence s, it reads positions 0..p back through
 * s's block table, checks each slot holds the position it should, and hashes the token ids it read. The
 * logits are a fixed pseudo-random function of that hash. So the next token is a function of the
 * sequence's whole contents *as stored in the paged cache*: a wrong block table, a prefix-cache block
 * with the wrong content, or a lost write changes the output, which fake_next (computed from the token
 * list, without any cache) predicts independently.
 *
 * Values are small integers (ids < 2048, positions < 2048), exact in F16 as in F32. */
#ifndef PITH_TEST_ENGINE_FAKE_MODEL_H
#define PITH_TEST_ENGINE_FAKE_MODEL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pith/model.h"
#include "pith/tensor.h"

typedef struct fake_state {
    int max_batch_tokens;   /* limits the engine promised, checked on every batch */
    int max_num_seqs;
    int fail_at_call;       /* forward call number (1-based) that fails; 0: never */
    uint64_t calls;
    uint64_t tokens;        /* tokens of successful calls */
    int max_seqs_seen;
    int violations;
    char first_violation[256];
    uint32_t *slot_stamp;   /* [n_slots]: call number that last wrote the slot in this batch */
    int n_slots;
} fake_state;

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

/* The greedy next token after tokens[0..n), computed without any cache. */
static int32_t fake_next(const int32_t *tokens, int n, int n_vocab) {
    uint64_t h = 0;
    for (int i = 0; i < n; i++) h = fake_hash_step(h, tokens[i]);
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

static int fake_forward(pith_model *m, pith_kv_cache *kv, const pith_batch *b, float *logits, pith_err *err) {
    fake_state *st = m->impl;
    st->calls++;
    const int bs = kv->block_size, n_slots = kv->n_blocks * kv->block_size;
    if (b->n_tokens < 1 || b->n_tokens > st->max_batch_tokens) FAKE_VIOLATION(st, "batch of %d tokens", b->n_tokens);
    if (b->n_seqs < 1 || b->n_seqs > st->max_num_seqs) FAKE_VIOLATION(st, "batch of %d sequences", b->n_seqs);
    if (b->n_seqs > st->max_seqs_seen) st->max_seqs_seen = b->n_seqs;
    if (!st->slot_stamp) {
        st->slot_stamp = calloc((size_t)n_slots, sizeof *st->slot_stamp);
        st->n_slots = n_slots;
    }
    int32_t last_pos[1024];
    if (b->n_seqs > 1024) FAKE_VIOLATION(st, "batch of %d sequences", b->n_seqs);
    for (int s = 0; s < b->n_seqs; s++) last_pos[s] = -1;
    /* Writes first: a token attends to the batch's earlier tokens of its sequence. */
    for (int i = 0; i < b->n_tokens; i++) {
        int s = b->seq[i], p = b->positions[i], slot = b->kv_slots[i];
        if (s < 0 || s >= b->n_seqs) FAKE_VIOLATION(st, "token %d: sequence %d", i, s);
        if (last_pos[s] >= 0 && p != last_pos[s] + 1) FAKE_VIOLATION(st, "token %d: position %d after %d", i, p, last_pos[s]);
        last_pos[s] = p;
        if (p < 0 || p / bs >= b->max_blocks) FAKE_VIOLATION(st, "token %d: position %d beyond the block table", i, p);
        int blk = b->block_tables[(size_t)s * b->max_blocks + p / bs];
        if (blk < 0 || blk >= kv->n_blocks || slot != blk * bs + p % bs) FAKE_VIOLATION(st, "token %d: slot %d, block %d", i, slot, blk);
        if (st->slot_stamp[slot] == (uint32_t)st->calls) FAKE_VIOLATION(st, "slot %d written twice", slot);
        st->slot_stamp[slot] = (uint32_t)st->calls;
        if (b->tokens[i] < 0 || b->tokens[i] >= m->hp.n_vocab) FAKE_VIOLATION(st, "token id %d", b->tokens[i]);
        for (int l = 0; l < kv->n_layers; l++) {
            size_t at = ((size_t)l * n_slots + slot) * kv->kv_dim;
            fake_store(kv, kv->k, at, (float)b->tokens[i]);
            fake_store(kv, kv->k, at + 1, (float)p);
            fake_store(kv, kv->v, at, -(float)b->tokens[i]);
        }
    }
    int row = 0;
    for (int i = 0; i < b->n_tokens; i++) {
        if (!b->want_logits[i]) continue;
        int s = b->seq[i], p = b->positions[i];
        if (i + 1 < b->n_tokens && b->seq[i + 1] == s) FAKE_VIOLATION(st, "logits wanted before the end of a chunk");
        uint64_t h = 0;
        int layer = (int)(st->calls % (uint64_t)kv->n_layers);
        for (int q = 0; q <= p; q++) {
            int blk = b->block_tables[(size_t)s * b->max_blocks + q / bs];
            if (blk < 0 || blk >= kv->n_blocks) FAKE_VIOLATION(st, "position %d of sequence %d: block %d", q, s, blk);
            size_t at = ((size_t)layer * n_slots + (size_t)blk * bs + q % bs) * kv->kv_dim;
            float tok = fake_load(kv, kv->k, at), pos = fake_load(kv, kv->k, at + 1);
            if (pos != (float)q || fake_load(kv, kv->v, at) != -tok)
                FAKE_VIOLATION(st, "position %d of sequence %d holds position %g", q, s, (double)pos);
            h = fake_hash_step(h, (int32_t)tok);
        }
        fake_logits_row(h, m->hp.n_vocab, &logits[(size_t)row++ * m->hp.n_vocab]);
    }
    if (st->fail_at_call && st->calls == (uint64_t)st->fail_at_call) return pith_errf(err, "fake model: planned failure");
    st->tokens += (uint64_t)b->n_tokens;
    return 0;
}

static void fake_destroy(pith_model *m) {
    fake_state *st = m->impl;
    free(st->slot_stamp);
    free(st);
    free(m);
}

static const pith_model_ops fake_ops = {.forward = fake_forward, .destroy = fake_destroy};

/* ctx_len 0: the engine's max_seq_len decides. */
static pith_model *fake_model_new(int n_vocab, int n_layers, int ctx_len) {
    pith_model *m = calloc(1, sizeof *m);
    fake_state *st = calloc(1, sizeof *st);
    m->ops = &fake_ops;
    m->impl = st;
    m->hp.n_vocab = n_vocab;
    m->hp.n_layers = n_layers;
    m->hp.ctx_len = ctx_len;
    m->kv_dim = 2;
    snprintf(m->hp.arch, sizeof m->hp.arch, "fake");
    st->max_batch_tokens = 1 << 30;
    st->max_num_seqs = 1 << 30;
    return m;
}

static fake_state *fake_of(pith_model *m) { return m->impl; }

#endif
