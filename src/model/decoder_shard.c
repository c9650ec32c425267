/* Tensor parallelism in the decoder (decoder.h: pith_decoder_shard): which tensors split how, this rank's
 * hyper-parameters, and the sums across ranks. Megatron's split: a block's first products (Q, K, V; gate
 * and up) by output rows, so each rank computes whole heads and whole FFN columns with no communication,
 * and its last product (the attention output, FFN down) by input columns, so each rank's product is a
 * partial sum of the full output, summed across ranks once per block. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dist/comm.h"
#include "model/decoder.h"

pith_shard_kind pith_decoder_shard_kind(const char *name) {
    static const char *const rows[] = {"attn_q.weight", "attn_k.weight", "attn_v.weight",
                                       "ffn_gate.weight", "ffn_up.weight", "ffn_gate_up.weight", "attn_qkv.weight",
                                       "attn_q_b.weight", "attn_kv_b.weight"};
    static const char *const cols[] = {"attn_output.weight", "ffn_down.weight", "shortconv.out_proj.weight",
                                       "ssm_out.weight"};
    static const char *const vecs[] = {"attn_q.bias", "attn_k.bias", "attn_v.bias", "attn_sinks.weight",
                                       "attn_q_norm.weight", "attn_k_norm.weight"};
    for (size_t i = 0; i < sizeof rows / sizeof *rows; i++)
        if (!strcmp(name, rows[i])) return PITH_SHARD_ROWS;
    for (size_t i = 0; i < sizeof cols / sizeof *cols; i++)
        if (!strcmp(name, cols[i])) return PITH_SHARD_COLS;
    for (size_t i = 0; i < sizeof vecs / sizeof *vecs; i++)
        if (!strcmp(name, vecs[i])) return PITH_SHARD_VECTOR;
    return PITH_SHARD_NONE;
}

static int divides(int n, int size, const char *what, pith_err *err) {
    if (n % size == 0) return 0;
    return pith_errf(err, "--tp %d: %s (%d) does not divide by %d", size, what, n, size);
}

int pith_decoder_shard_begin(pith_decoder *d, bool stages, pith_err *err) {
    const pith_model_options *opt = d->opt;
    if (!opt || !opt->comm || (opt->tp <= 1 && opt->pp <= 1)) return 0;
    pith_comm *world = opt->comm;
    pith_hparams *hp = &d->base.hp;
    const int tp = opt->tp > 1 ? opt->tp : 1, pp = opt->pp > 1 ? opt->pp : 1;
    d->tp.begun = true;
    if (tp * pp != world->size)
        return pith_errf(err, "--tp %d --pp %d with %d ranks: start tp x pp ranks", tp, pp, world->size);
    d->tp.world = world;
    d->tp.stage = world->rank / tp;
    d->tp.n_stages = pp;
    d->tp.l0 = d->tp.stage * hp->n_layers / pp;
    d->tp.l1 = (d->tp.stage + 1) * hp->n_layers / pp;
    /* collective over every rank: the ranks of each stage form its tensor-parallel group */
    pith_comm *c = NULL;
    if (tp > 1 && pith_comm_split(world, d->tp.stage, world->rank % tp, &c, err)) return -1;
    d->tp.comm = c;
    if (strcmp(d->be->vt->name, "cpu") != 0)
        return pith_errf(err, "--tp and --pp run on the CPU backend only for now (this model is on %s)", d->be->vt->name);
    if (pp > 1 && !stages) return pith_errf(err, "--pp: this architecture does not run in pipeline stages yet");
    if (pp > hp->n_layers) return pith_errf(err, "--pp %d: the model has %d layers", pp, hp->n_layers);
    if (opt->mtp && pp > 1) return pith_errf(err, "--pp: the MTP head does not run in pipeline stages yet (--tp does)");
    if (tp == 1) { /* stages alone: the whole width of every layer of this stage */
        d->tp.n_vocab = hp->n_vocab;
        return 0;
    }
    const int N = tp;
    /* fewer KV heads than ranks: each rank a copy of the one its query heads read (the query heads of
     * a KV head are consecutive, so those of a rank read one) */
    const bool kv_copy = hp->n_kv_heads < N && N % hp->n_kv_heads == 0;
    if (divides(hp->n_heads, N, "the number of attention heads", err) ||
        (!kv_copy && hp->n_kv_heads < N &&
         pith_errf(err, "--tp %d: the number of KV heads (%d) neither divides by %d nor divides it", N,
                   hp->n_kv_heads, N)) ||
        (!kv_copy && divides(hp->n_kv_heads, N, "the number of KV heads", err)) ||
        divides(hp->ffn_dim, N, "the FFN width", err) ||
        (hp->n_experts > 0 && !opt->no_ep && divides(hp->n_experts, N, "the number of experts", err)))
        return -1;
    /* experts split by expert (each rank a 1/N share, whole), the dense FFN layers by columns */
    if (hp->n_experts > 0 && hp->expert_ffn_dim == 0) hp->expert_ffn_dim = hp->ffn_dim;
    if (hp->n_vocab < N) return pith_errf(err, "--tp %d: a vocabulary of %d is too small to share", N, hp->n_vocab);
    hp->n_heads /= N;
    d->tp.kv_copy = kv_copy;
    d->tp.kv_file = hp->n_kv_heads;
    hp->n_kv_heads = kv_copy ? 1 : hp->n_kv_heads / N;
    hp->ffn_dim /= N;
    d->tp.rank = c->rank;
    d->tp.size = N;
    d->tp.experts_by_column = opt->no_ep;
    pith_dist_vocab_share(hp->n_vocab, N, c->rank, &d->tp.vocab0, &d->tp.n_vocab);
    return 0;
}

bool pith_decoder_kv_copied(const pith_decoder *d, const char *name) {
    static const char *const kv[] = {"attn_k.weight", "attn_v.weight", "attn_k.bias", "attn_v.bias"};
    if (!d->tp.kv_copy) return false;
    for (size_t i = 0; i < sizeof kv / sizeof *kv; i++)
        if (!strcmp(name, kv[i])) return true;
    return false;
}

int pith_decoder_allreduce(pith_decoder *d, pith_buf *y, int n, pith_err *err) {
    return pith_decoder_allreduce_floats(d, y->host, (size_t)n * (size_t)y->cols, err);
}

int pith_decoder_allreduce_floats(pith_decoder *d, float *x, size_t n, pith_err *err) {
    if (!d->tp.comm || n == 0) return 0;
    if (pith_comm_allreduce_sum(d->tp.comm, x, n, err)) {
        pith_comm_fail(d->tp.comm, err->msg);
        return -1;
    }
    return 0;
}

/* The residual's n rows between this stage and the next (send) or the one before (receive), with the rank
 * of the same tensor-parallel rank there. */
static int stage_pass(pith_decoder *d, float *rows, int cols, int n, bool send, pith_err *err) {
    pith_comm *w = d->tp.world;
    int step = d->tp.size > 1 ? d->tp.size : 1;
    size_t bytes = (size_t)n * (size_t)cols * sizeof(float);
    if (send ? pith_comm_send(w, w->rank + step, rows, bytes, err) : pith_comm_recv(w, w->rank - step, rows, bytes, err)) {
        pith_comm_fail(w, err->msg);
        return -1;
    }
    return 0;
}

int pith_decoder_stage_recv(pith_decoder *d, pith_buf *x, int n, pith_err *err) {
    return stage_pass(d, x->host, x->cols, n, false, err);
}

int pith_decoder_stage_send(pith_decoder *d, const pith_buf *x, int n, pith_err *err) {
    return stage_pass(d, x->host, x->cols, n, true, err);
}

void pith_decoder_moe_shard(const pith_decoder *d, pith_moe_config *cfg) {
    if (!d->tp.comm) return;
    if (d->tp.experts_by_column) { /* every expert, this rank's columns of each */
        cfg->col_part = d->tp.rank;
        cfg->col_parts = d->tp.size;
    } else { /* expert parallelism: this rank's experts, whole */
        cfg->n_local = cfg->n_experts / d->tp.size;
        cfg->expert0 = d->tp.rank * cfg->n_local;
    }
    cfg->shared_elsewhere = d->tp.rank != 0; /* the shared expert whole, on rank 0 */
}

int pith_decoder_mtp_logits(pith_decoder *d, const pith_buf *x, const pith_weight *output, int step, int n,
                            const int32_t *draft, int n_steps, pith_err *err) {
    if (!d->tp.comm) {
        const pith_be_mtp_logits_args lg = {x, output, step, 0, NULL};
        return pith_be_mtp_logits(d->be, &lg, n, err);
    }
    /* each rank's best (logit, token) of its vocabulary share, laid out by rank and summed: every rank
     * then sees them all (token ids are exact in a float below 2^24) and takes the largest logit, the
     * lowest rank on a tie: the first maximum over the whole vocabulary, as one process's argmax */
    const int R = d->tp.size, r = d->tp.rank;
    float *all = calloc((size_t)R * (size_t)n * 2, sizeof *all), *best = malloc((size_t)n * sizeof *best);
    int32_t *tok = malloc((size_t)n * sizeof *tok);
    if (!all) { /* it cannot join the sum the others are in */
        free(best), free(tok);
        pith_errf(err, "out of memory");
        pith_comm_fail(d->tp.comm, err->msg);
        return -1;
    }
    int rc = !best || !tok ? pith_errf(err, "out of memory") : 0;
    const pith_be_mtp_logits_args lg = {x, output, step, d->tp.vocab0, best};
    if (!rc) rc = pith_be_mtp_logits(d->be, &lg, n, err);
    for (int s = 0; s < n; s++) { /* a rank that failed offers nothing (the ranks agree on the failure after) */
        all[((size_t)r * n + s) * 2] = rc ? -INFINITY : best[s];
        all[((size_t)r * n + s) * 2 + 1] = rc ? 0.0f : (float)draft[(size_t)s * n_steps + step];
    }
    if (pith_decoder_allreduce_floats(d, all, (size_t)R * n * 2, err)) rc = -1;
    for (int s = 0; !rc && s < n; s++) {
        int pick = 0;
        for (int k = 1; k < R; k++)
            if (all[((size_t)k * n + s) * 2] > all[((size_t)pick * n + s) * 2]) pick = k;
        tok[s] = (int32_t)all[((size_t)pick * n + s) * 2 + 1];
    }
    if (!rc) d->be->vt->mtp_pick(d->be, step, tok, n);
    free(tok);
    free(best);
    free(all);
    return rc;
}
