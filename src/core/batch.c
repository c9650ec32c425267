#include "pith/batch.h"

int pith_batch_n_logits(const pith_batch *b) {
    int n = 0;
    for (int i = 0; i < b->n_tokens; i++) n += b->want_logits[i] != 0;
    return n;
}

int pith_batch_n_hidden(const pith_batch *b) {
    int n = 0;
    for (int i = 0; b->want_hidden && i < b->n_tokens; i++) n += b->want_hidden[i] != 0;
    return n;
}
