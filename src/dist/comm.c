/* The communicator's common entry points (pith/dist.h). */
#include "dist/comm.h"

int pith_comm_rank(const pith_comm *c) { return c ? c->rank : 0; }
int pith_comm_size(const pith_comm *c) { return c ? c->size : 1; }

void pith_comm_free(pith_comm *c) {
    if (c) c->vt->free(c);
}

void pith_dist_vocab_share(int n_vocab, int size, int rank, int *v0, int *nv) {
    int per = size > 0 ? (n_vocab + size - 1) / size : n_vocab;
    int start = rank * per;
    if (start > n_vocab) start = n_vocab;
    *v0 = start;
    *nv = n_vocab - start < per ? n_vocab - start : per;
}

void pith_comm_abort_job(pith_comm *c, int code) {
    if (c) c->vt->abort(c, code);
}
