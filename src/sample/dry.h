/* DRY (llama.cpp's "don't repeat yourself" penalty), internal to the sampler (sampler.c): restart
 * sequences (sequence breakers as token ids), their resolution from breaker strings against a
 * tokenizer, and the penalty itself. Every pass is linear in the history window; nothing is quadratic
 * in it or proportional to the vocabulary per token (the per-token maximum lives in an n_vocab array
 * whose touched entries alone are reset). */
#ifndef PITH_SAMPLE_DRY_H
#define PITH_SAMPLE_DRY_H

#include <stdbool.h>
#include <stdint.h>

#include "pith/sampler.h"
#include "pith/tokenizer.h"

enum { DRY_MAX_TAIL = 20 }; /* llama.cpp's MAX_SEQ_LEN: tail tokens kept of a restart sequence */

typedef struct dry_restart {
    int32_t head;
    int n_tail;
    int32_t tail[DRY_MAX_TAIL];
} dry_restart;

typedef struct pith_dry {
    int n_vocab;
    uint8_t *flags;        /* [n_vocab] DRY_ONE: a one-token breaker; DRY_HEAD: heads a longer restart */
    dry_restart *seqs;     /* the longer restart sequences, sorted by head (then tail) once sorted */
    int n_seqs, cap_seqs;
    bool sorted;
    int32_t *win;          /* [cap] the window, most recent first */
    int *z;                /* [cap] its Z-function */
    int32_t *touched;      /* [cap] ids whose maxrep is set */
    int cap;
    int *maxrep;           /* [n_vocab] 1 + the longest repeat the token would extend; 0: none */
} pith_dry;

enum { DRY_ONE = 1, DRY_HEAD = 2 };

int dry_init(pith_dry *d, int n_vocab);
void dry_free(pith_dry *d);
/* A restart sequence ids[0..n) (n >= 1; tail cut to DRY_MAX_TAIL). -1: a bad id or out of memory. */
int dry_add_restart(pith_dry *d, const int32_t *ids, int n);
/* The restart sequences of p's breaker strings over tok's vocabulary (sampler.h describes the rule). */
int dry_resolve(pith_dry *d, const pith_sampling_params *p, const pith_tokenizer *tok, pith_err *err);
/* Subtracts the DRY penalties from logits[n_vocab] given the history (oldest first). */
void dry_apply(pith_dry *d, const pith_sampling_params *p, float *logits, const int32_t *history, int n_history);

#endif
