/* Lockstep tensor parallelism: rank 0's model sends each op to the other ranks before running its own
 * shard, and the worker loop on every other rank runs what it receives (pith/dist.h).
 *
 * An op is a fixed header broadcast from rank 0, then, for the ops that carry arrays (copy_blocks,
 * forward), one broadcast of int32s. A forward's payload is the whole batch: tokens, positions, sequence
 * ids, the rows that want logits or hidden states, and each memory group's slots, block tables, state
 * slots and checkpoints. Every rank then runs the op on its shard; the ranks agree on its status (the
 * largest of each rank's, rank + 1 on failure, 0 on success) and, for a forward that succeeded, rank 0
 * gathers each rank's logits columns (its share of the vocabulary, padded to the largest share) and
 * lays them side by side. Hidden rows need no gathering: the residual is the same on every rank.
 *
 * Bytes per step: the batch, about 4 * (4 + groups) * n_tokens int32s plus the block tables, from rank 0;
 * the logits, n_logits * n_vocab floats, to rank 0; and inside the forward two allreduces of n_tokens *
 * dim floats per layer (model/decoder_shard.c). */
#include "dist/lockstep.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/comm.h"

enum { OP_EXIT = 1, OP_PREPARE, OP_MEM_ALLOC, OP_MEM_FREE, OP_COPY, OP_FORWARD, OP_PROBE, OP_LOAD, OP_RELEASE,
       OP_MTP_DRAFT };

/* The link probe (pith_dist_probe_links): allreduces of one float, then of 1 MiB. */
enum { PROBE_SMALL = 200, PROBE_BIG = 20, PROBE_BIG_FLOATS = 1 << 18 };

/* Group flags in a forward's payload: which of the group's arrays follow. */
enum { HAS_SLOTS = 1, HAS_TABLES = 2, HAS_STATE = 4, HAS_CHECKPOINTS = 8 };

typedef struct op_msg {
    int32_t op;
    int32_t model;    /* which of the job's models (the ranks number them alike, in the order they load) */
    int32_t a[6];
    int64_t payload;  /* int32s in the payload broadcast that follows (0: none) */
} op_msg;

/* A scratch array that grows. */
typedef struct scratch {
    void *p;
    size_t cap;
} scratch;

static void *grow(scratch *s, size_t bytes) {
    if (bytes <= s->cap) return s->p;
    void *p = realloc(s->p, bytes);
    if (!p) return NULL;
    s->p = p, s->cap = bytes;
    return p;
}

/* ---- the batch on the wire ---- */

static size_t batch_ints(const pith_batch *b) {
    size_t n = (size_t)b->n_tokens, s = (size_t)b->n_seqs, k = 4 * n + (b->want_hidden ? n : 0);
    for (int g = 0; g < b->n_groups; g++) {
        const pith_batch_mem *m = &b->mem[g];
        k += 2 + (m->slots ? n : 0) + (m->block_tables ? s * (size_t)m->max_blocks : 0) + (m->state_slots ? s : 0) +
             (m->checkpoints ? n : 0);
    }
    return k;
}

static int32_t *put(int32_t *w, const int32_t *src, size_t n) {
    memcpy(w, src, n * sizeof *w);
    return w + n;
}

static void batch_pack(const pith_batch *b, int32_t *w) {
    size_t n = (size_t)b->n_tokens, s = (size_t)b->n_seqs;
    w = put(w, b->tokens, n);
    w = put(w, b->positions, n);
    w = put(w, b->seq, n);
    for (size_t t = 0; t < n; t++) *w++ = b->want_logits[t];
    if (b->want_hidden)
        for (size_t t = 0; t < n; t++) *w++ = b->want_hidden[t];
    for (int g = 0; g < b->n_groups; g++) {
        const pith_batch_mem *m = &b->mem[g];
        *w++ = m->max_blocks;
        *w++ = (m->slots ? HAS_SLOTS : 0) | (m->block_tables ? HAS_TABLES : 0) | (m->state_slots ? HAS_STATE : 0) |
               (m->checkpoints ? HAS_CHECKPOINTS : 0);
        if (m->slots) w = put(w, m->slots, n);
        if (m->block_tables) w = put(w, m->block_tables, s * (size_t)m->max_blocks);
        if (m->state_slots) w = put(w, m->state_slots, s);
        if (m->checkpoints) w = put(w, m->checkpoints, n);
    }
}

/* A batch whose arrays point into the payload r (want_* rewritten as bytes into flags). The payload came
 * from rank 0's batch_pack of a batch the engine built, so its counts are trusted; they are still checked
 * against the payload's length, so a corrupt message fails cleanly. */
static int batch_unpack(pith_batch *b, pith_batch_mem *mem, const op_msg *m, int32_t *r, uint8_t *flags,
                        pith_err *err) {
    const int32_t *end = r + m->payload;
    int n = m->a[0], s = m->a[1], groups = m->a[2];
    bool hidden = m->a[3] != 0;
    if (n < 0 || s < 0 || groups < 0 || groups > PITH_MAX_MEM_GROUPS) return pith_errf(err, "lockstep: a bad batch header");
    memset(b, 0, sizeof *b);
    b->n_tokens = n, b->n_seqs = s, b->n_groups = groups, b->mem = mem;
    if (end - r < (ptrdiff_t)(4 + hidden) * n) return pith_errf(err, "lockstep: a short batch");
    b->tokens = r, r += n;
    b->positions = r, r += n;
    b->seq = r, r += n;
    for (int t = 0; t < n; t++) flags[t] = (uint8_t)(r[t] != 0);
    b->want_logits = flags, r += n;
    if (hidden) {
        for (int t = 0; t < n; t++) flags[n + t] = (uint8_t)(r[t] != 0);
        b->want_hidden = flags + n, r += n;
    }
    for (int g = 0; g < groups; g++) {
        if (end - r < 2) return pith_errf(err, "lockstep: a short batch");
        pith_batch_mem *gm = &mem[g];
        memset(gm, 0, sizeof *gm);
        gm->max_blocks = r[0];
        int has = r[1];
        r += 2;
        size_t need = (has & HAS_SLOTS ? (size_t)n : 0) + (has & HAS_STATE ? (size_t)s : 0) +
                      (has & HAS_CHECKPOINTS ? (size_t)n : 0) +
                      (has & HAS_TABLES ? (size_t)s * (size_t)(gm->max_blocks > 0 ? gm->max_blocks : 0) : 0);
        if (gm->max_blocks < 0 || (size_t)(end - r) < need) return pith_errf(err, "lockstep: a short batch");
        if (has & HAS_SLOTS) gm->slots = r, r += n;
        if (has & HAS_TABLES) gm->block_tables = r, r += (size_t)s * (size_t)gm->max_blocks;
        if (has & HAS_STATE) gm->state_slots = r, r += s;
        if (has & HAS_CHECKPOINTS) gm->checkpoints = r, r += n;
    }
    return 0;
}

/* ---- what every rank runs ---- */

typedef struct rank_state {
    pith_model *shard;
    pith_comm *c;          /* every rank */
    int tp, pp, stage;     /* the layout (pith_model.tp, .pp) and this rank's stage */
    int micro_min;         /* the fewest tokens of a micro-batch (PITH_PP_MIN_TOKENS, default 32) */
    pith_comm *last;       /* the last stage's ranks (the vocabulary's shares), on them; c when pp is 1 */
    scratch payload, flags, logits, gathered, hidden, sub;
} rank_state;

/* The layout and, with stages and tensor parallelism both, the last stage's part of the world
 * (collective: every rank calls it at the same point, right after loading). */
static int rank_state_init(rank_state *st, pith_model *shard, pith_comm *c, pith_err *err) {
    memset(st, 0, sizeof *st);
    st->shard = shard;
    st->c = c;
    st->tp = shard->tp > 1 ? shard->tp : 1;
    st->pp = shard->pp > 1 ? shard->pp : 1;
    st->stage = c->rank / st->tp;
    st->last = c;
    const char *mm = getenv("PITH_PP_MIN_TOKENS");
    st->micro_min = mm && atoi(mm) > 0 ? atoi(mm) : 32;
    if (st->pp > 1 && st->tp > 1 && pith_comm_split(c, st->stage == st->pp - 1, c->rank % st->tp, &st->last, err))
        return -1;
    return 0;
}

/* ---- micro-batches: a batch cut into consecutive token ranges ---- */

/* How many micro-batches a forward of n tokens runs in: with M stages, 4 M (the pipeline's fill and drain
 * leave the stages idle for M - 1 of the 4 M + M - 1 turns: 8 / 9 of a prefill's time busy over two
 * stages, measured 0.85 to 0.89 of one process here; 2 M gave 0.78), each of at least micro_min tokens (each micro-batch
 * reads the stage's weights again: a decode step of a few sequences stays whole). Every rank computes the
 * same count (PITH_PP_MIN_TOKENS must be the same on every rank: mpirun -x). */
static int micro_batches(const rank_state *st, int n) {
    if (st->pp <= 1) return 1;
    int m = 4 * st->pp, most = n / st->micro_min;
    return m < most ? m : most > 1 ? most : 1;
}

/* The tokens [t0, t1) of b as a batch of their own, their sequences numbered anew in order (a sequence
 * cut between micro-batches continues in the next at its next position: the earlier part's memory is
 * written by then, on every stage). scratch holds the sequence ids, tables and slots it makes. */
static int batch_slice(const pith_batch *b, int t0, int t1, scratch *sc, pith_batch *out, pith_batch_mem *mem,
                       pith_err *err) {
    int n = t1 - t0, n_seqs = 0;
    for (int t = t0; t < t1; t++) n_seqs += t == t0 || b->seq[t] != b->seq[t - 1];
    size_t ints = (size_t)n + (size_t)n_seqs;
    for (int g = 0; g < b->n_groups; g++)
        ints += (size_t)n_seqs * ((b->mem[g].block_tables ? (size_t)b->mem[g].max_blocks : 0) + 1);
    int32_t *w = grow(sc, ints * sizeof *w);
    if (!w) return pith_errf(err, "out of memory");
    int32_t *seq = w, *old = w + n; /* the new sequence ids; each new sequence's old id */
    w += n + n_seqs;
    for (int t = t0, s = -1; t < t1; t++) {
        if (t == t0 || b->seq[t] != b->seq[t - 1]) old[++s] = b->seq[t];
        seq[t - t0] = s;
    }
    *out = *b;
    out->n_tokens = n;
    out->n_seqs = n_seqs;
    out->tokens = b->tokens + t0;
    out->positions = b->positions + t0;
    out->seq = seq;
    out->want_logits = b->want_logits + t0;
    if (b->want_hidden) out->want_hidden = b->want_hidden + t0; /* the caller points hidden at its rows */
    if (b->embed_rows) out->embed_rows = b->embed_rows + t0;   /* (images do not reach the ranks yet: the */
    if (b->attend_last) out->attend_last = b->attend_last + t0; /* leader's model takes none) */
    if (b->rope_pos) out->rope_pos = b->rope_pos + 3 * (size_t)t0;
    for (int g = 0; g < b->n_groups; g++) {
        const pith_batch_mem *bm = &b->mem[g];
        mem[g] = *bm;
        if (bm->slots) mem[g].slots = bm->slots + t0;
        if (bm->checkpoints) mem[g].checkpoints = bm->checkpoints + t0;
        if (bm->block_tables) {
            for (int s = 0; s < n_seqs; s++)
                memcpy(w + (size_t)s * bm->max_blocks, bm->block_tables + (size_t)old[s] * bm->max_blocks,
                       (size_t)bm->max_blocks * sizeof *w);
            mem[g].block_tables = w;
            w += (size_t)n_seqs * bm->max_blocks;
        }
        if (bm->state_slots) {
            for (int s = 0; s < n_seqs; s++) w[s] = bm->state_slots[old[s]];
            mem[g].state_slots = w;
            w += n_seqs;
        }
    }
    out->mem = mem;
    return 0;
}

/* The ranks' agreement on an op's status: 0 when every rank succeeded, else the last failing rank + 1. */
static int agree(rank_state *st, int rc, pith_err *err) {
    int v = rc ? st->c->rank + 1 : 0;
    if (pith_comm_allreduce_max(st->c, &v, err)) return -2;
    return v;
}

/* An op's batch: rank 0's own, else read from the payload into local (mem: its groups). A rank that cannot
 * read it ends the job (*rc set): the others are about to run the op's collectives. */
static const pith_batch *op_batch(rank_state *st, const op_msg *m, const pith_batch *leader_batch, pith_batch *local,
                                  pith_batch_mem *mem, int *rc, pith_err *err) {
    if (leader_batch) return leader_batch;
    uint8_t *flags = grow(&st->flags, 2 * (size_t)(m->a[0] > 0 ? m->a[0] : 1));
    *rc = flags ? batch_unpack(local, mem, m, st->payload.p, flags, err) : pith_errf(err, "out of memory");
    if (*rc) pith_comm_fail(st->c, err->msg);
    return local;
}

/* One op on this rank, its status agreed with the others; -2: the communicator failed. */
static int run_op(rank_state *st, const op_msg *m, const pith_batch *leader_batch, float *out_logits, pith_err *err) {
    pith_model *sh = st->shard;
    pith_comm *c = st->c;
    int rc = 0;
    switch (m->op) {
    case OP_PREPARE: {
        pith_model_limits lim = {m->a[0], m->a[1], m->a[2], m->a[3]};
        rc = pith_model_prepare(sh, &lim, err);
        return agree(st, rc, err);
    }
    case OP_MEM_ALLOC: {
        pith_mem_layout lay;
        if ((size_t)m->payload * sizeof(int32_t) < sizeof lay) rc = pith_errf(err, "lockstep: a short layout");
        else memcpy(&lay, st->payload.p, sizeof lay), rc = pith_model_mem_alloc(sh, &lay, err);
        return agree(st, rc, err);
    }
    case OP_MEM_FREE:
        pith_model_mem_free(sh);
        return 0;
    case OP_COPY: {
        int32_t *ids = st->payload.p;
        rc = pith_model_copy_blocks(sh, m->a[0], ids, ids + m->a[1], m->a[1], err);
        return agree(st, rc, err);
    }
    case OP_FORWARD: {
        pith_batch local;
        pith_batch_mem mem[PITH_MAX_MEM_GROUPS];
        const pith_batch *b = op_batch(st, m, leader_batch, &local, mem, &rc, err);
        /* this rank's share of the vocabulary: on the last stage, split over its ranks */
        const int V = sh->hp.n_vocab, on_last = st->stage == st->pp - 1;
        int v0, nv = V, vmax = V;
        if (st->tp > 1) {
            pith_dist_vocab_share(V, st->tp, c->rank % st->tp, &v0, &nv);
            pith_dist_vocab_share(V, st->tp, 0, &v0, &vmax);
        }
        size_t n_logits = rc ? 0 : (size_t)pith_batch_n_logits(b);
        size_t n_hidden = rc || !b->want_hidden ? 0 : (size_t)pith_batch_n_hidden(b);
        float *lg = rc ? NULL : grow(&st->logits, (n_logits ? n_logits : 1) * (size_t)vmax * sizeof(float));
        if (!rc && !lg) rc = pith_errf(err, "out of memory");
        float *hidden = b->hidden;
        if (!rc && n_hidden && (!leader_batch || st->pp > 1)) {
            /* the hidden rows come from the last stage: its ranks (and rank 0's stage) need scratch */
            hidden = grow(&st->hidden, (n_hidden + 1) * (size_t)sh->hp.dim * sizeof(float));
            if (!hidden) rc = pith_errf(err, "out of memory");
        }
        /* the micro-batches in order: each stage passes each on to the next as soon as it is done */
        int mbs = rc ? 0 : micro_batches(st, b->n_tokens);
        c->world->stats.forwards++;
        c->world->stats.micro_batches += (uint64_t)mbs;
        for (int k = 0, rows = 0, hrows = 0; k < mbs && !rc; k++) {
            int t0 = (int)((long long)b->n_tokens * k / mbs), t1 = (int)((long long)b->n_tokens * (k + 1) / mbs);
            pith_batch sub;
            pith_batch_mem sub_mem[PITH_MAX_MEM_GROUPS];
            if (mbs == 1) sub = *b;
            else rc = batch_slice(b, t0, t1, &st->sub, &sub, sub_mem, err);
            if (rc) break;
            sub.hidden = hidden ? hidden + (size_t)hrows * (size_t)sh->hp.dim : NULL;
            rc = pith_model_forward(sh, &sub, lg + (size_t)rows * (size_t)nv, err);
            rows += pith_batch_n_logits(&sub);
            hrows += pith_batch_n_hidden(&sub);
        }
        int v = agree(st, rc, err);
        if (v != 0 || (n_logits == 0 && n_hidden == 0)) return v;
        /* the last stage's ranks gather their vocabulary shares on its first rank */
        pith_comm *lc = st->last;
        const bool assembler = on_last && (st->tp == 1 || lc->rank == 0);
        const bool direct = assembler && c->rank == 0; /* pp 1: rank 0 assembles into the engine's rows */
        float *full = NULL;
        if (n_logits && assembler && !direct) full = grow(&st->gathered, n_logits * (size_t)V * sizeof(float) +
                                                              (st->tp > 1 ? (size_t)st->tp * n_logits * (size_t)vmax * sizeof(float) : 0));
        if (n_logits && assembler && !direct && !full) {
            pith_errf(err, "out of memory gathering the logits");
            pith_comm_fail(c, err->msg);
            return -1;
        }
        float *dst = direct ? out_logits : full;
        if (n_logits && on_last && st->tp > 1) {
            float *all = NULL;
            if (assembler) {
                all = direct ? grow(&st->gathered, (size_t)st->tp * n_logits * (size_t)vmax * sizeof(float))
                             : full + n_logits * (size_t)V;
                if (!all) {
                    pith_errf(err, "out of memory gathering the logits");
                    pith_comm_fail(c, err->msg);
                    return -1;
                }
            }
            if (pith_comm_gather(lc, lg, n_logits * (size_t)vmax * sizeof(float), all, err)) return -2;
            if (assembler)
                for (int r = 0; r < st->tp; r++) {
                    int r0, rn;
                    pith_dist_vocab_share(V, st->tp, r, &r0, &rn);
                    const float *src = all + (size_t)r * n_logits * (size_t)vmax;
                    for (size_t row = 0; row < n_logits; row++)
                        memcpy(dst + row * (size_t)V + r0, src + row * (size_t)rn, (size_t)rn * sizeof(float));
                }
        } else if (n_logits && assembler) {
            memcpy(dst, lg, n_logits * (size_t)V * sizeof(float));
        }
        if (st->pp > 1) { /* the last stage's first rank sends its rows to rank 0 */
            const int from = (st->pp - 1) * st->tp;
            size_t lb = n_logits * (size_t)V * sizeof(float), hb = n_hidden * (size_t)sh->hp.dim * sizeof(float);
            if (c->rank == from) {
                if ((lb && pith_comm_send(c, 0, full, lb, err)) || (hb && pith_comm_send(c, 0, hidden, hb, err))) return -2;
            } else if (c->rank == 0) {
                if ((lb && pith_comm_recv(c, from, out_logits, lb, err)) ||
                    (hb && pith_comm_recv(c, from, b->hidden, hb, err)))
                    return -2;
            }
        }
        return 0;
    }
    case OP_MTP_DRAFT: { /* the batch as a forward's; drafts into out_logits's place (rank 0: the engine's) */
        pith_batch local;
        pith_batch_mem mem[PITH_MAX_MEM_GROUPS];
        const pith_batch *b = op_batch(st, m, leader_batch, &local, mem, &rc, err);
        int32_t *draft = (int32_t *)out_logits;
        if (!rc && !draft) {
            draft = grow(&st->logits, (size_t)(m->a[0] > 0 ? m->a[0] : 1) * (size_t)m->a[4] * sizeof *draft);
            if (!draft) rc = pith_errf(err, "out of memory");
        }
        if (!rc) rc = pith_model_mtp_draft(sh, b, m->a[4], draft, NULL, err);
        return agree(st, rc, err);
    }
    case OP_PROBE: {
        float *x = grow(&st->logits, PROBE_BIG_FLOATS * sizeof(float));
        rc = agree(st, x ? 0 : pith_errf(err, "out of memory"), err);
        if (rc) return rc;
        memset(x, 0, PROBE_BIG_FLOATS * sizeof(float));
        double t0 = pith_comm_now();
        for (int i = 0; i < PROBE_SMALL; i++)
            if (pith_comm_allreduce_sum(c, x, 1, err)) return -2;
        double t1 = pith_comm_now();
        for (int i = 0; i < PROBE_BIG; i++)
            if (pith_comm_allreduce_sum(c, x, PROBE_BIG_FLOATS, err)) return -2;
        double t2 = pith_comm_now();
        if (out_logits) {
            out_logits[0] = (float)((t1 - t0) / PROBE_SMALL);
            out_logits[1] = (float)((t2 - t1) / PROBE_BIG);
        }
        return 0;
    }
    default:
        return pith_errf(err, "lockstep: unknown op %d", m->op), -2;
    }
}

static void rank_state_free(rank_state *st) {
    if (st->last != st->c) pith_comm_free(st->last);
    free(st->sub.p);
    free(st->payload.p);
    free(st->flags.p);
    free(st->logits.p);
    free(st->gathered.p);
    free(st->hidden.p);
}

/* A model a worker runs ops for: its number in the job and its state. */
typedef struct worker_model {
    int id;
    rank_state st;
} worker_model;

/* OP_LOAD on a worker: the model at the payload's path with rank 0's options (threads, experts kept on
 * the CPU, how experts split) and the job's layout, loaded with rank 0 (model.c agrees on the outcome), numbered as rank 0
 * numbers it. -2: the job cannot go on. */
static int worker_load(worker_model **models, int *n, const op_msg *m, const int32_t *payload, pith_comm *c,
                       pith_err *err) {
    const rank_state *first = &(*models)[0].st;
    size_t len = (size_t)(m->a[2] > 0 ? m->a[2] : 0);
    if ((size_t)m->payload * sizeof(int32_t) < len + 1) return pith_errf(err, "lockstep: a short path"), -2;
    const char *path = (const char *)payload;
    pith_model_options o = {.n_threads = m->a[0], .n_cpu_moe = m->a[1], .comm = c, .tp = first->tp, .pp = first->pp,
                            .no_ep = m->a[3] != 0};
    pith_model *shard;
    pith_err load_err = {0};
    if (pith_model_load(path, &o, &shard, &load_err)) { /* every rank failed with it: rank 0 reports */
        fprintf(stderr, "pith rank %d: reload: %s\n", c->rank, load_err.msg);
        return 0;
    }
    worker_model *grown = realloc(*models, (size_t)(*n + 1) * sizeof *grown);
    if (!grown) {
        pith_model_free(shard);
        return pith_errf(err, "out of memory"), -2;
    }
    *models = grown;
    worker_model *w = &grown[*n];
    w->id = c->world->lockstep_models++;
    if (rank_state_init(&w->st, shard, c, err)) {
        pith_model_free(shard);
        return -2;
    }
    (*n)++;
    return 0;
}

int pith_dist_worker(pith_model *shard, pith_comm *c, pith_err *err) {
    if (!shard || !c || c->rank == 0) {
        pith_model_free(shard);
        return pith_errf(err, "pith_dist_worker runs on ranks other than 0");
    }
    worker_model *models = malloc(sizeof *models);
    int n = 0, rc = 0;
    if (!models) {
        pith_model_free(shard);
        return pith_errf(err, "out of memory");
    }
    models[0].id = c->world->lockstep_models++;
    if (rank_state_init(&models[0].st, shard, c, err)) {
        free(models);
        pith_model_free(shard);
        return -1;
    }
    n = 1;
    scratch payload = {0};
    while (n > 0) {
        op_msg m;
        if (pith_comm_bcast_op(c, &m, sizeof m, err)) {
            rc = -1;
            break;
        }
        int k = 0;
        while (k < n && models[k].id != m.model) k++;
        if (k == n) {
            rc = pith_errf(err, "lockstep: an op for model %d, which this rank does not hold", (int)m.model);
            pith_comm_fail(c, err->msg);
            break;
        }
        rank_state *st = &models[k].st;
        if (m.payload > 0) { /* into the model's state, where run_op reads it (a load's path: aside) */
            void *p = grow(m.op == OP_LOAD ? &payload : &st->payload, (size_t)m.payload * sizeof(int32_t));
            if (!p) {
                rc = pith_errf(err, "out of memory");
                pith_comm_fail(c, err->msg);
                break;
            }
            if (pith_comm_bcast(c, p, (size_t)m.payload * sizeof(int32_t), err)) {
                rc = -1;
                break;
            }
        }
        if (m.op == OP_LOAD) {
            if (worker_load(&models, &n, &m, payload.p, c, err) == -2) {
                rc = -1;
                break;
            }
            continue;
        }
        if (m.op == OP_EXIT) { /* rank 0 freed that model: so does this rank (the job ends with its last) */
            pith_model_free(st->shard);
            rank_state_free(st);
            models[k] = models[--n];
            continue;
        }
        if (m.op == OP_RELEASE) { /* its weights go; its place stays, for a reload (a server's sleep) */
            pith_model_free(st->shard);
            st->shard = NULL;
            continue;
        }
        if (!st->shard) {
            rc = pith_errf(err, "lockstep: op %d for model %d, whose weights were released", (int)m.op, (int)m.model);
            pith_comm_fail(c, err->msg);
            break;
        }
        pith_err op_err = {0};
        int v = run_op(st, &m, NULL, NULL, &op_err);
        if (v == -2) {
            *err = op_err;
            rc = -1;
            break;
        }
        /* an op this rank failed: the ranks agreed on it and rank 0 reports it; say why here */
        if (v == c->rank + 1) fprintf(stderr, "pith rank %d: %s\n", c->rank, op_err.msg);
    }
    for (int k = 0; k < n; k++) {
        pith_model_free(models[k].st.shard);
        rank_state_free(&models[k].st);
    }
    free(models);
    free(payload.p);
    return rc;
}

/* ---- rank 0's model ---- */

typedef struct leader {
    pith_model base;
    rank_state st;
    int id;           /* its number in the job (op_msg.model) */
    bool dead;        /* the communicator failed: every op fails from now on */
} leader;

/* Sends op m (and its payload) to the other ranks; the caller holds the job's lockstep lock. */
static int send_op(leader *L, op_msg *m, const void *payload, pith_err *err) {
    if (L->dead) return pith_errf(err, "the tensor-parallel job has failed");
    m->model = L->id;
    if (pith_comm_bcast_op(L->st.c, m, sizeof *m, err) ||
        (m->payload > 0 && pith_comm_bcast(L->st.c, (void *)payload, (size_t)m->payload * sizeof(int32_t), err))) {
        L->dead = true;
        return -1;
    }
    return 0;
}

/* rank 0's outcome of an op: its own error, or the failing rank's */
static int outcome(leader *L, int v, pith_err *err) {
    if (v == 0) return 0;
    if (v == -2) L->dead = true;
    else if (v > 1) pith_errf(err, "rank %d of %d failed (its standard error says why)", v - 1, L->st.c->size);
    return -1;
}

/* One op on every rank: sent, run here, its outcome agreed. One at a time across the job's models (an
 * admin thread's reload beside the engine's ops). */
static int leader_op(leader *L, op_msg *m, const void *payload, const pith_batch *b, float *out, pith_err *err) {
    pthread_mutex_t *lock = &L->st.c->world->lockstep_lock;
    pthread_mutex_lock(lock);
    int rc = send_op(L, m, payload, err);
    if (!rc) rc = outcome(L, run_op(&L->st, m, b, out, err), err);
    pthread_mutex_unlock(lock);
    return rc;
}

static int leader_prepare(pith_model *m, const pith_model_limits *lim, pith_err *err) {
    op_msg msg = {.op = OP_PREPARE, .a = {lim->max_batch_tokens, lim->max_num_seqs, lim->max_seq_len, lim->max_logits}};
    return leader_op(m->impl, &msg, NULL, NULL, NULL, err);
}

static int leader_mem_alloc(pith_model *m, const pith_mem_layout *lay, pith_err *err) {
    leader *L = m->impl;
    size_t ints = (sizeof *lay + sizeof(int32_t) - 1) / sizeof(int32_t);
    int32_t *p = grow(&L->st.payload, ints * sizeof *p);
    if (!p) return pith_errf(err, "out of memory");
    memset(p, 0, ints * sizeof *p);
    memcpy(p, lay, sizeof *lay);
    op_msg msg = {.op = OP_MEM_ALLOC, .payload = (int64_t)ints};
    return leader_op(L, &msg, p, NULL, NULL, err);
}

static void leader_mem_free(pith_model *m) {
    leader *L = m->impl;
    op_msg msg = {.op = OP_MEM_FREE};
    pith_err err = {0};
    if (leader_op(L, &msg, NULL, NULL, NULL, &err) && L->dead) pith_model_mem_free(L->st.shard);
}

static int leader_copy_blocks(pith_model *m, int g, const int32_t *src, const int32_t *dst, int n, pith_err *err) {
    leader *L = m->impl;
    int32_t *ids = grow(&L->st.payload, 2 * (size_t)n * sizeof *ids);
    if (!ids) return pith_errf(err, "out of memory");
    memcpy(ids, src, (size_t)n * sizeof *ids);
    memcpy(ids + n, dst, (size_t)n * sizeof *ids);
    op_msg msg = {.op = OP_COPY, .a = {g, n}, .payload = 2 * (int64_t)n};
    return leader_op(L, &msg, ids, NULL, NULL, err);
}

static int leader_forward(pith_model *m, const pith_batch *b, float *logits, pith_err *err) {
    leader *L = m->impl;
    size_t k = batch_ints(b);
    int32_t *w = grow(&L->st.payload, k * sizeof *w);
    if (!w) return pith_errf(err, "out of memory");
    batch_pack(b, w);
    op_msg msg = {.op = OP_FORWARD, .a = {b->n_tokens, b->n_seqs, b->n_groups, b->want_hidden != NULL}, .payload = (int64_t)k};
    return leader_op(L, &msg, w, b, logits, err);
}

static int leader_mtp_draft(pith_model *m, const pith_batch *b, int n_steps, int32_t *draft, float *logits,
                            pith_err *err) {
    leader *L = m->impl;
    if (logits) return pith_errf(err, "the draft's logits rows are not gathered under --tp");
    size_t k = batch_ints(b);
    int32_t *w = grow(&L->st.payload, k * sizeof *w);
    if (!w) return pith_errf(err, "out of memory");
    batch_pack(b, w);
    op_msg msg = {.op = OP_MTP_DRAFT, .a = {b->n_tokens, b->n_seqs, b->n_groups, 0, n_steps}, .payload = (int64_t)k};
    return leader_op(L, &msg, w, b, (float *)draft, err); /* run_op drafts into it */
}

static void leader_destroy(pith_model *m) {
    leader *L = m->impl;
    op_msg msg = {.op = OP_EXIT};
    pith_err err = {0};
    pthread_mutex_t *lock = &L->st.c->world->lockstep_lock;
    pthread_mutex_lock(lock);
    if (!L->dead) send_op(L, &msg, NULL, &err);
    pthread_mutex_unlock(lock);
    pith_model *sh = L->st.shard;
    if (sh) sh->ops->destroy(sh); /* the file is the leader's now: pith_model_free closes it */
    rank_state_free(&L->st);
    free(L);
}

static int leader_probe(leader *L, pith_dist_probe *out, pith_err *err) {
    op_msg msg = {.op = OP_PROBE};
    float t[2];
    if (leader_op(L, &msg, NULL, NULL, t, err)) return -1;
    double big = t[1] - t[0] > 0 ? t[1] - t[0] : t[1];
    *out = (pith_dist_probe){.latency_s = t[0], .allreduce_bytes_per_s = PROBE_BIG_FLOATS * sizeof(float) / big};
    return 0;
}

static const pith_model_ops leader_ops = {
    .prepare = leader_prepare, .mem_alloc = leader_mem_alloc, .mem_free = leader_mem_free,
    .copy_blocks = leader_copy_blocks, .forward = leader_forward, .mtp_draft = leader_mtp_draft,
    .destroy = leader_destroy,
};

int pith_dist_leader(pith_model *shard, pith_comm *c, pith_model **out, pith_err *err) {
    *out = NULL;
    leader *L = calloc(1, sizeof *L);
    if (!L) {
        pith_model_free(shard);
        return pith_errf(err, "out of memory");
    }
    if (rank_state_init(&L->st, shard, c, err)) {
        free(L);
        pith_model_free(shard);
        return -1;
    }
    L->id = c->world->lockstep_models++;
    L->base.ops = &leader_ops;
    L->base.impl = L;
    L->base.hp = *pith_model_file_hparams(shard->file); /* the whole model's: the shard's are its share */
    L->base.mem = shard->mem;
    L->base.file = shard->file;
    L->base.has_hidden = shard->has_hidden;
    L->base.state_checkpoints = shard->state_checkpoints;
    L->base.has_mtp = shard->has_mtp;
    L->base.mtp_cost = shard->mtp_cost;
    memcpy(L->base.experts, shard->experts, sizeof L->base.experts);
    L->base.tp = shard->tp;
    L->base.pp = shard->pp;
    if (L->st.pp > 1)
        snprintf(L->base.placement, sizeof L->base.placement, "%d pipeline stages of %d rank%s each (rank 0: the first "
                 "stage's layers%s)", L->st.pp, L->st.tp, L->st.tp > 1 ? "s" : "",
                 L->st.tp > 1 ? ", its heads and FFN columns split" : "");
    else
        snprintf(L->base.placement, sizeof L->base.placement, "tensor-parallel over %d ranks (rank 0: heads and FFN "
                 "columns 1/%d, vocabulary rows 1/%d)", c->size, c->size, c->size);
    *out = &L->base;
    return 0;
}

bool pith_dist_get_stats(const pith_model *m, pith_dist_stats *out) {
    if (!m || m->ops != &leader_ops) return false;
    *out = ((const leader *)m->impl)->st.c->stats;
    return true;
}

int pith_dist_probe_links(pith_model *m, pith_dist_probe *out, pith_err *err) {
    if (!m || m->ops != &leader_ops) return pith_errf(err, "not a tensor-parallel model");
    return leader_probe(m->impl, out, err);
}

int pith_dist_reload(pith_model *m, const char *path, const pith_model_options *mo, pith_model **out, pith_err *err) {
    *out = NULL;
    if (!m || m->ops != &leader_ops) return pith_errf(err, "not a tensor-parallel model");
    leader *L = m->impl;
    size_t len = strlen(path);
    if (len > (1u << 20)) return pith_errf(err, "a path of %zu bytes", len);
    size_t ints = len / sizeof(int32_t) + 1;
    int32_t *p = calloc(ints, sizeof *p);
    if (!p) return pith_errf(err, "out of memory");
    memcpy(p, path, len);
    pith_model_options o = *mo;
    o.comm = L->st.c, o.tp = m->tp, o.pp = m->pp;
    /* the others load with rank 0's options, as one job */
    op_msg msg = {.op = OP_LOAD, .a = {o.n_threads, o.n_cpu_moe, (int32_t)len, o.no_ep}, .payload = (int64_t)ints};
    pthread_mutex_t *lock = &L->st.c->world->lockstep_lock;
    pthread_mutex_lock(lock);
    int rc = send_op(L, &msg, p, err);
    if (!rc) rc = pith_model_load(path, &o, out, err);
    pthread_mutex_unlock(lock);
    free(p);
    return rc;
}

int pith_dist_release(pith_model *m, pith_err *err) {
    if (!m || m->ops != &leader_ops) return pith_errf(err, "not a tensor-parallel model");
    leader *L = m->impl;
    if (!L->st.shard) return 0;
    op_msg msg = {.op = OP_RELEASE};
    pthread_mutex_t *lock = &L->st.c->world->lockstep_lock;
    pthread_mutex_lock(lock);
    int rc = send_op(L, &msg, NULL, err);
    pthread_mutex_unlock(lock);
    if (rc) return -1;
    pith_model *sh = L->st.shard;
    sh->ops->destroy(sh);
    pith_model_file_close(m->file); /* the leader's (pith_dist_leader took the shard's over) */
    m->file = NULL;
    L->st.shard = NULL;
    return 0;
}
