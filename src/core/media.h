/* A request's media spans (engine.h: pith_media) as the engine keeps them: one copy of the spans and
 * their encoder inputs, shared by reference between a request's siblings (n > 1), with each span's
 * content hash resolved.
 *
 * Invariants: spans are sorted by pos, do not overlap and lie inside the prompt; every hash is set
 * (nonzero); the inputs never change after creation, so sharing them between threads needs only the
 * atomic reference count. The helpers answer the two questions the core asks of spans: which hash a
 * KV block's name must include (the prefix cache), and where a prompt chunk may end (a span the model
 * attends to both ways is computed in one batch). */
#ifndef PITH_CORE_MEDIA_H
#define PITH_CORE_MEDIA_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pith/engine.h"

typedef struct media_span {
    int pos, n_tokens;
    int rows, cols;            /* the grid, or 0, 0 */
    uint64_t hash;
    const float *input;        /* into the set's own copy */
    size_t n_input;
} media_span;

typedef struct media_set {
    atomic_int refs;
    int n;
    media_span *spans;
    float *inputs;             /* every span's input, back to back */
} media_set;

/* Validates (against a prompt of n_prompt tokens) and copies. 0, or -1 with err. */
int media_set_create(const pith_media *m, int n, int n_prompt, media_set **out, pith_err *err);
media_set *media_set_ref(media_set *ms);
void media_set_unref(media_set *ms);

/* The hash of a span's content when the caller gave none: 64 bits over the input's bytes, never 0. */
uint64_t media_hash_input(const float *input, size_t n);

/* What block [a, b) of positions must add to its name: a hash of every span it overlaps (its content
 * hash and where in the block it starts and ends), or 0 when it overlaps none. ms may be NULL. */
uint64_t media_block_key(const media_set *ms, int a, int b);

/* Position p's three M-RoPE positions (batch.h: rope_pos): on its span's grid inside one, else p plus
 * what the grids before it saved (each span of n tokens on an r x c grid advances the positions by
 * max(r, c) instead of n). ms may be NULL (then all three are p). */
void media_rope_pos(const media_set *ms, int p, int32_t out[3]);

/* The index of the span holding position p, or -1. ms may be NULL. */
int media_span_at(const media_set *ms, int p);

/* Where a chunk of positions [c, end) may end when spans must stay whole: end itself when it is not
 * inside a span; else the span's start when that is past c; else (c is inside or at the start of the span) the span's
 * end when that is at most limit, otherwise c (nothing fits now). ms may be NULL. */
int media_chunk_end(const media_set *ms, int c, int end, int limit);

#endif
