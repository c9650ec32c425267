/* The layer library (layers.h). */
#include "model/layers.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

int pith_dec_bufs_make(pith_decoder *d, int ffn, pith_dec_bufs *b, pith_err *err) {
    const pith_hparams *hp = &d->base.hp;
    pith_backend *be = d->be;
    int qd = hp->n_heads * hp->head_dim, kvd = hp->n_kv_heads * hp->head_dim;
    memset(b, 0, sizeof *b);
    if (!(b->x = pith_be_buffer(be, hp->dim, err)) || !(b->xb = pith_be_buffer(be, hp->dim, err)) ||
        !(b->q = pith_be_buffer(be, qd, err)) || !(b->k = pith_be_buffer(be, kvd, err)) ||
        !(b->v = pith_be_buffer(be, kvd, err)) || !(b->att = pith_be_buffer(be, qd, err)))
        return -1;
    if (ffn > 0 && (!(b->hb = pith_be_buffer(be, ffn, err)) || !(b->hb2 = pith_be_buffer(be, ffn, err)))) return -1;
    /* expert parallelism: each rank's experts' share of the output, before the sum across ranks */
    if (d->tp.comm && hp->n_experts > 0 && !(b->y = pith_be_buffer(be, hp->dim, err))) return -1;
    return 0;
}

int pith_attn_block_load(pith_decoder *d, int l, pith_qk_norm qk, pith_attn_block *a, pith_err *err) {
    if (d->tp.kv_copy && qk == PITH_QK_NORM_ALL) /* its K statistic would count a copied head twice */
        return pith_errf(err, "layer %d: --tp %d with %d KV heads: a K norm over the whole projection cannot copy a "
                              "KV head", l, d->tp.size, d->tp.kv_file);
    const pith_hparams *hp = &d->base.hp;
    int qd = hp->n_heads * hp->head_dim, kvd = hp->n_kv_heads * hp->head_dim;
    int qn = qk == PITH_QK_NORM_ALL ? qd : hp->head_dim, kn = qk == PITH_QK_NORM_ALL ? kvd : hp->head_dim;
    memset(a, 0, sizeof *a);
    if (pith_decoder_matrix(d, l, "attn_q.weight", &a->wq, err) || pith_decoder_matrix(d, l, "attn_k.weight", &a->wk, err) ||
        pith_decoder_matrix(d, l, "attn_v.weight", &a->wv, err) ||
        pith_decoder_matrix(d, l, "attn_output.weight", &a->wo, err) ||
        pith_decoder_vector(d, l, "attn_output.bias", hp->dim, false, &a->bo, err) ||
        pith_decoder_vector(d, l, "attn_sinks.weight", hp->n_heads, false, &a->sinks, err) ||
        pith_decoder_vector(d, l, "attn_q.bias", qd, hp->has_qkv_bias, &a->bq, err) ||
        pith_decoder_vector(d, l, "attn_k.bias", kvd, hp->has_qkv_bias, &a->bk, err) ||
        pith_decoder_vector(d, l, "attn_v.bias", kvd, hp->has_qkv_bias, &a->bv, err) ||
        pith_decoder_vector(d, l, "attn_q_norm.weight", qn, hp->has_qk_norm, &a->q_norm, err) ||
        pith_decoder_vector(d, l, "attn_k_norm.weight", kn, hp->has_qk_norm, &a->k_norm, err))
        return -1;
    if (a->bq && (!a->bk || !a->bv)) return pith_errf(err, "layer %d: attn_q.bias without attn_k.bias and attn_v.bias", l);
    if (d->tp.comm && a->q_norm && qk == PITH_QK_NORM_ALL) {
        /* its statistic spans every rank's heads: pith_attn_block_qkv sums it across ranks */
        if (a->bq) return pith_errf(err, "layer %d: --tp: QKV biases before a QK norm over the whole projection", l);
        if (!(a->tp_sumsq = pith_be_buffer(d->be, 1, err))) return -1;
    }
    if (!a->q_norm != !a->k_norm) return pith_errf(err, "layer %d: attn_q_norm.weight and attn_k_norm.weight go together", l);
    a->qk_norm = a->q_norm ? (qk == PITH_QK_NORM_NONE ? PITH_QK_NORM_HEAD : qk) : PITH_QK_NORM_NONE;
    return 0;
}

/* Tensor parallelism: the RMSNorm of each row of x over the whole projection, of which this rank holds
 * x->cols columns and w's matching share: each row's sum of squares summed across ranks first. On the host
 * buffers of the CPU backend, the one that runs sharded (decoder_shard.c), like the sums themselves. */
int pith_tp_rmsnorm(pith_decoder *d, pith_buf *x, const pith_weight *w, pith_buf *sumsq, int n, float eps,
                       pith_err *err) {
    const int cols = x->cols;
    for (int t = 0; t < n; t++) {
        const float *r = x->host + (size_t)t * cols;
        double s = 0;
        for (int i = 0; i < cols; i++) s += (double)r[i] * r[i];
        sumsq->host[t] = (float)s;
    }
    if (pith_decoder_allreduce(d, sumsq, n, err)) return -1;
    const double total = (double)cols * d->tp.size;
    for (int t = 0; t < n; t++) {
        float *r = x->host + (size_t)t * cols;
        float scale = (float)(1.0 / sqrt(sumsq->host[t] / total + eps));
        for (int i = 0; i < cols; i++) r[i] = r[i] * scale * w->vec[i];
    }
    return 0;
}

int pith_attn_block_qkv(pith_decoder *d, const pith_attn_block *a, int l, const pith_dec_bufs *b, const pith_buf *in,
                        const pith_buf *rope_cs, int n, pith_err *err) {
    const pith_be_mm qkv[] = {{a->wq, b->q, false}, {a->wk, b->k, false}, {a->wv, b->v, false}};
    if (pith_be_matmul(d->be, in, qkv, 3, n, err)) return -1;
    pith_be_qkv_args op = {
        .q = b->q, .k = b->k, .v = b->v, .bq = a->bq, .bk = a->bk, .bv = a->bv, .qk_norm = a->qk_norm,
        .q_norm = a->q_norm, .k_norm = a->k_norm, .eps = d->base.hp.norm_eps, .rope_cs = rope_cs,
        .rope_style = d->base.hp.rope_style, .group = d->layer_group[l], .layer_index = d->layer_index[l],
    };
    if (a->tp_sumsq) { /* the norm here, across ranks; the op then ropes and stores */
        if (pith_tp_rmsnorm(d, b->q, a->q_norm, a->tp_sumsq, n, op.eps, err) ||
            pith_tp_rmsnorm(d, b->k, a->k_norm, a->tp_sumsq, n, op.eps, err))
            return -1;
        op.qk_norm = PITH_QK_NORM_NONE, op.q_norm = op.k_norm = NULL;
    }
    pith_be_qkv(d->be, &op, n);
    return 0;
}

void pith_attn_block_attend(pith_decoder *d, const pith_attn_block *a, int l, const pith_dec_bufs *b, int n) {
    const pith_mem_group *g = &d->base.mem.groups[d->layer_group[l]];
    pith_be_attn op = {
        .q = b->q, .out = b->att, .group = d->layer_group[l], .layer_index = d->layer_index[l],
        .window = g->kind == PITH_MEM_WINDOW ? g->window : 0, .sinks = a->sinks,
    };
    pith_be_attention(d->be, &op, n);
}

/* y = product (+ bias): into x directly, or into xb and then x += RMSNorm(xb). */
static int block_out(pith_decoder *d, const pith_weight *w, const pith_weight *bias, const pith_buf *in,
                     const pith_dec_bufs *b, const pith_weight *post_norm, int n, pith_err *err) {
    if (d->tp.comm) {
        /* tensor-parallel: this rank's partial product, summed across ranks, then the bias once */
        const pith_be_mm mm = {w, b->xb, false};
        if (pith_be_matmul(d->be, in, &mm, 1, n, err) || pith_decoder_allreduce(d, b->xb, n, err)) return -1;
        if (bias) pith_be_add_bias(d->be, b->xb, bias, n);
        if (post_norm) pith_be_norm_add(d->be, b->x, b->xb, post_norm, d->base.hp.norm_eps, n);
        else pith_be_scale_add(d->be, b->x, b->xb, 1.0f, n);
        return 0;
    }
    pith_buf *y = post_norm ? b->xb : b->x;
    const pith_be_mm mm = {w, y, post_norm == NULL};
    if (pith_be_matmul(d->be, in, &mm, 1, n, err)) return -1;
    if (bias) pith_be_add_bias(d->be, y, bias, n);
    if (post_norm) pith_be_norm_add(d->be, b->x, b->xb, post_norm, d->base.hp.norm_eps, n);
    return 0;
}

int pith_block_out_proj(pith_decoder *d, const pith_weight *w, const pith_buf *in, const pith_dec_bufs *b, int n,
                        pith_err *err) {
    return block_out(d, w, NULL, in, b, NULL, n, err);
}

/* A block's output times out_scale through the input of its last product (an exact 1 changes nothing). */
static void scale_input(pith_decoder *d, pith_buf *in, float out_scale, int n) {
    if (out_scale != 0 && out_scale != 1.0f) pith_be_scale(d->be, in, out_scale, n);
}

int pith_attn_block_out(pith_decoder *d, const pith_attn_block *a, const pith_dec_bufs *b,
                        const pith_weight *post_norm, int n, pith_err *err) {
    scale_input(d, b->att, a->out_scale, n);
    return block_out(d, a->wo, a->bo, b->att, b, post_norm, n, err);
}

static bool has_tensor(const pith_decoder *d, int l, const char *name) {
    char full[128];
    snprintf(full, sizeof full, "blk.%d.%s", l, name);
    return pith_model_file_tensor(d->file, full) != NULL;
}

int pith_ffn_block_load(pith_decoder *d, int l, pith_glu act, pith_ffn_block *f, pith_err *err) {
    const int dim = d->base.hp.dim, F = d->base.hp.ffn_dim;
    memset(f, 0, sizeof *f);
    f->act = act;
    if (!has_tensor(d, l, "ffn_gate.weight") && has_tensor(d, l, "ffn_gate_up.weight")) {
        if (pith_decoder_matrix_rows(d, l, "ffn_gate_up.weight", dim, 2 * F, 0, F, &f->gate, err) ||
            pith_decoder_matrix_rows(d, l, "ffn_gate_up.weight", dim, 2 * F, F, F, &f->up, err))
            return -1;
    } else if (pith_decoder_matrix_rows(d, l, "ffn_gate.weight", dim, F, 0, F, &f->gate, err) ||
               pith_decoder_matrix_rows(d, l, "ffn_up.weight", dim, F, 0, F, &f->up, err)) {
        return -1;
    }
    return pith_decoder_matrix_rows(d, l, "ffn_down.weight", F, dim, 0, dim, &f->down, err);
}

int pith_ffn_block_load_mlp(pith_decoder *d, int l, pith_activation act, pith_ffn_block *f, pith_err *err) {
    const int dim = d->base.hp.dim, F = d->base.hp.ffn_dim;
    memset(f, 0, sizeof *f);
    f->up_act = act;
    return pith_decoder_matrix_rows(d, l, "ffn_up.weight", dim, F, 0, F, &f->up, err) ||
                   pith_decoder_matrix_rows(d, l, "ffn_down.weight", F, dim, 0, dim, &f->down, err)
               ? -1
               : 0;
}

void pith_moe_config_of(const pith_hparams *hp, pith_moe_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    cfg->dim = hp->dim;
    cfg->n_experts = hp->n_experts;
    cfg->top_k = hp->n_experts_used;
    cfg->ffn = hp->expert_ffn_dim > 0 ? hp->expert_ffn_dim : hp->ffn_dim;
    cfg->shared_ffn = hp->expert_shared_ffn_dim;
    cfg->gating = hp->expert_gating == PITH_GATING_SIGMOID ? PITH_GATING_SIGMOID : PITH_GATING_SOFTMAX;
    cfg->norm_topk = hp->expert_norm_topk;
    cfg->n_group = hp->expert_groups > 1 ? hp->expert_groups : 0;
    cfg->topk_group = cfg->n_group ? hp->expert_groups_used : 0;
    cfg->routed_scale = hp->expert_weights_scale;
    cfg->act = PITH_MOE_SILU;
}

int pith_ffn_block_load_moe(pith_decoder *d, int l, const char *const hf_experts[3], float swiglu_limit,
                            bool fused_halves, pith_ffn_block *f, pith_err *err) {
    memset(f, 0, sizeof *f);
    pith_moe_config cfg;
    pith_moe_config_of(&d->base.hp, &cfg);
    cfg.fused_halves = fused_halves;
    if (swiglu_limit > 0) {
        cfg.act = PITH_MOE_SWIGLU_CLAMP;
        cfg.clamp_alpha = 1.702f; /* GPT-OSS's, fixed in its code and in llama.cpp's */
        cfg.clamp_limit = swiglu_limit;
    }
    pith_decoder_moe_shard(d, &cfg);
    return d->be->vt->moe_load(d->be, d->file, l, &cfg, hf_experts, &f->moe, err);
}

int pith_ffn_block_forward(pith_decoder *d, const pith_ffn_block *f, const pith_dec_bufs *b, const pith_buf *in,
                           const pith_weight *post_norm, int n, pith_err *err) {
    if (f->moe && d->tp.comm) { /* expert parallelism: the ranks' shares summed, then into x */
        if (!b->y) return pith_errf(err, "experts under --tp need the buffer y");
        pith_be_zero(d->be, b->y, n);
        if (pith_be_moe(d->be, f->moe, in, b->y, n, err) || pith_decoder_allreduce(d, b->y, n, err)) return -1;
        pith_be_scale_add(d->be, b->x, b->y, f->out_scale != 0 ? f->out_scale : 1.0f, n);
        return 0;
    }
    if (f->moe && f->out_scale == 0) return pith_be_moe(d->be, f->moe, in, b->x, n, err);
    if (f->moe) {
        if (!b->y) return pith_errf(err, "experts with an output scale need the buffer y");
        pith_be_zero(d->be, b->y, n);
        if (pith_be_moe(d->be, f->moe, in, b->y, n, err)) return -1;
        pith_be_scale_add(d->be, b->x, b->y, f->out_scale, n);
        return 0;
    }
    if (f->gate) {
        const pith_be_mm gate_up[] = {{f->gate, b->hb, false}, {f->up, b->hb2, false}};
        if (pith_be_matmul(d->be, in, gate_up, 2, n, err)) return -1;
        pith_be_glu(d->be, f->act, b->hb, b->hb2, n);
    } else {
        const pith_be_mm up = {f->up, b->hb, false};
        if (pith_be_matmul(d->be, in, &up, 1, n, err)) return -1;
        pith_be_activation(d->be, f->up_act, b->hb, n);
    }
    scale_input(d, b->hb, f->out_scale, n);
    return block_out(d, f->down, NULL, b->hb, b, post_norm, n, err);
}

int pith_head_forward(pith_decoder *d, const pith_dec_bufs *b, const pith_weight *norm, const pith_weight *output,
                      const pith_batch *batch, pith_err *err) {
    return pith_head_forward_scaled(d, b, norm, output, 0, batch, err);
}

int pith_head_forward_scaled(pith_decoder *d, const pith_dec_bufs *b, const pith_weight *norm,
                             const pith_weight *output, float logit_scale, const pith_batch *batch, pith_err *err) {
    /* called with nothing kept too: a step ends with its head (backend.h), which a device backend runs
     * the step's recorded work at */
    int n_kept = pith_decoder_n_kept(batch);
    const pith_hparams *hp = &d->base.hp;
    pith_be_begin_layer(d->be, PITH_BE_LAYER_OUTPUT);
    pith_be_head_args h = {b->x, b->xb, norm, hp->norm_eps, output, hp->final_logit_softcap, logit_scale};
    return pith_be_head(d->be, &h, n_kept, pith_batch_n_logits(batch), pith_decoder_head_vocab(d), err);
}
