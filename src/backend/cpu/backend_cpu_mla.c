/* DeepSeek's multi-head latent attention on the CPU (backend.h: pith_be_mla_args), in the
 * weight-absorbed form: per token the cache holds one row of [c_kv | k_pe] (rank + rope elements per
 * layer) instead of per-head K and V, and attention is MQA over that one "head" with the values its own
 * first rank elements.
 *
 * Three phases: a row job (the latent's norm, RoPE of k_pe and of each head's q_pe, the store, q_pe into
 * the absorbed query); per head a product W_UK_h^T q_nope_h into the absorbed query (the matmul engine,
 * strided over the heads of one row); the paged attention of attention.h with the V cache pointing at the
 * K cache; per head a product W_UV_h lat_h into the output. Every phase computes a row as it would alone,
 * so a token's output does not depend on the rest of the batch. */
#include <string.h>

#include "backend/cpu/backend_cpu.h"
#include "backend/cpu/kv_rows.h"

static void mla_row(row_job *j, int t, int ith) {
    (void)ith;
    const pith_be_mla_args *a = j->a;
    pith_cpu_be *c = j->c;
    const int R = a->rank, P = a->rope, D = R + P, hd = a->nope + a->rope;
    float *kv = row_of(a->kv, t), *q = row_of(a->q, t), *qa = row_of(a->qa, t);
    pith_cpu_be_rmsnorm(kv, kv, a->kv_norm->vec, R, a->eps);
    int half = a->rope_cs ? a->rope_cs->cols / 2 : 0;
    const float *cs = a->rope_cs ? row_of(a->rope_cs, t) : NULL, *sn = cs ? cs + half : NULL;
    if (cs) pith_cpu_be_rope(kv + R, cs, sn, half, a->rope_style);
    for (int h = 0; h < a->n_heads; h++) {
        float *qp = q + (size_t)h * hd + a->nope;
        if (cs) pith_cpu_be_rope(qp, cs, sn, half, a->rope_style);
        memcpy(qa + (size_t)h * D + R, qp, (size_t)P * sizeof *qp);
    }
    /* one KV head of D per slot: the slot's row of its block */
    const pith_kv_cache *cache = &c->kv.groups[a->group];
    size_t bs = (size_t)cache->block_size, slot = (size_t)c->step->mem[a->group].slots[t];
    size_t off = pith_kv_k_offset(cache, a->layer_index, (int)(slot / bs)) + (slot % bs) * (size_t)D;
    pith_kv_store_f32(c->cpu.k, cache->type, kv, cache->k, off, (size_t)D);
}

/* y_h = W_h x_h for every head: x_h the k elements at x + h * xs of each row (rows ld_x apart), y_h at
 * y + h * ys (rows ld_y apart). */
static int per_head(pith_cpu_be *c, const pith_weight *const *w, int n_heads, const float *x, int k, size_t xs,
                    size_t ld_x, float *y, size_t ys, size_t ld_y, int n, pith_err *err) {
    for (int h = 0; h < n_heads; h++) {
        const cpu_weight *cw = w[h]->impl;
        pith_acts acts;
        pith_acts_bind(&c->cpu, &acts, x + (size_t)h * xs, n, k, ld_x);
        if (pith_cpu_matmul(&c->cpu, &cw->m, &acts, y + (size_t)h * ys, ld_y, false, err)) return -1;
    }
    return 0;
}

int pith_cpu_be_mla(pith_backend *be, const pith_be_mla_args *a, int n, pith_err *err) {
    pith_cpu_be *c = pith_cpu_be_of(be);
    const int H = a->n_heads, R = a->rank, D = a->rank + a->rope, hd = a->nope + a->rope;
    if (!c->has_shape || c->shape.head_dim != D || c->shape.n_kv_heads != 1 || c->shape.n_heads != H ||
        a->q->cols != H * hd || a->kv->cols != D || a->qa->cols != H * D || a->lat->cols != H * D ||
        a->out->cols != H * a->v || c->kv.groups[a->group].k_dim != D)
        return pith_errf(err, "mla: buffers, cache and attention shape disagree (%d heads of %d + %d)", H, R, a->rope);
    if (n == 0) return 0;
    pith_cpu_be_rows(c, n, mla_row, a, 4.0 * (a->q->cols + 2 * D));
    if (per_head(c, a->k_b, H, a->q->host, a->nope, (size_t)hd, (size_t)a->q->cols, a->qa->host, (size_t)D,
                 (size_t)a->qa->cols, n, err))
        return -1;
    const pith_batch *b = c->step;
    const pith_kv_cache *kv = &c->kv.groups[a->group];
    const uint8_t *layer = (const uint8_t *)kv->k + pith_kv_bytes(kv->type, pith_kv_k_offset(kv, a->layer_index, 0));
    pith_attn_args aa = {
        .n_tokens = n, .positions = b->positions, .seq = b->seq, .block_tables = b->mem[a->group].block_tables,
        .max_blocks = b->mem[a->group].max_blocks, .block_size = kv->block_size, .window = 0,
        .k_cache = layer, .v_cache = layer, /* the values are the latents: V is K */
        .kv_type = kv->type, .kv_dim = D, .q = a->qa->host, .q_ld = (size_t)a->qa->cols, .out = a->lat->host,
        .out_ld = (size_t)a->lat->cols, .sinks = NULL,
    };
    pith_attention(&c->cpu, &c->attn, &aa);
    return per_head(c, a->v_b, H, a->lat->host, R, (size_t)D, (size_t)a->lat->cols, a->out->host, (size_t)a->v,
                    (size_t)a->out->cols, n, err);
}
