/* Phi-3 / Phi-4 forward pass (`phi3`), after transformers' models/phi3/modeling_phi3.py (the descriptor,
 * its tensors and hyper-parameters: phi3_arch.c):
 *
 *   h = x + o_proj(Attention(RoPE(q), RoPE(k), v)),  [q | k | v] = qkv_proj(RMSNorm_input(x))
 *   y = h + down(silu(g) * u),                        [g | u] = gate_up_proj(RMSNorm_post_attention(h))
 *
 * then the final RMSNorm and lm_head (the embedding when tied). Attention is causal GQA over the layer's
 * KV memory, scores / sqrt(head_dim), windowed on every layer when the model has a sliding window. RoPE
 * rotates halves over the first rope_dim dimensions of each head (partial rotary).
 *
 * The fused projections are bound as parts (pith_decoder_matrix_rows): Q, K and V are three row ranges
 * of attn_qkv.weight, the gate and up matrices the two halves of ffn_up.weight, so each runs as the
 * layer library's usual products and the bytes stay the file's.
 *
 * LongRoPE: both frequency sets are made at load (rope.c, pith_rope_longrope): theta^(-2i/rope_dim)
 * divided by the short or the long factors, cos and sin times the attention factor either way. Which one
 * the model uses is chosen when the engine prepares it, by the configured context (the limits'
 * max_seq_len, Pith's -c): longer than the original context takes the long factors, as llama.cpp's
 * llama_model::get_rope_factors chooses by n_ctx_seq > n_ctx_orig_yarn; until then, by the trained
 * context (the engine's default max_seq_len). transformers instead switches per forward call by the
 * largest position it sees (dynamic_rope_update's longrope_frequency_update: max(position_ids) + 1 >
 * original_max_position_embeddings), and Phi3ForCausalLM.prepare_inputs_for_generation drops the cache
 * once to recompute it with the long factors when generation crosses that length; a fixed choice keeps
 * every cached K of a sequence, prefix-cache hits and batched sequences of different lengths consistent,
 * and equals transformers' results wherever every sequence stays on one side of the original context
 * (within it with -c at most original_max_position_embeddings, beyond it with a longer -c). */
#include "model/phi3.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/decoder.h"
#include "model/layers.h"
#include "model/rope.h"

typedef struct phi3_layer {
    const pith_weight *attn_norm, *ffn_norm;
    pith_attn_block attn;
    pith_ffn_block ffn;
} phi3_layer;

typedef struct phi3 {
    pith_decoder d; /* first: the base decoder */
    phi3_layer *layers;
    const pith_weight *embd, *out_norm, *output;
    pith_rope rope_short, rope_long; /* rope_long: LongRoPE only; rope_short is the plain RoPE otherwise */
    const pith_rope *rope;           /* the one in use */
    int orig_ctx;                    /* LongRoPE: the long factors above this configured context */
    pith_dec_bufs bufs;
    pith_buf *cs;
} phi3;

static int phi3_window(const pith_hparams *hp, int l) {
    return pith_hparams_layer_swa(hp, l) ? hp->sliding_window : 0;
}

static void phi3_free(pith_decoder *d) {
    phi3 *m = (phi3 *)d;
    free(m->layers);
    pith_rope_free(&m->rope_short);
    pith_rope_free(&m->rope_long);
}

/* Q, K and V: three row ranges of the fused attn_qkv.weight, or the separate matrices some GGUF files
 * carry (phi3_arch.c checked the shapes when the file opened). */
static int load_attention(pith_decoder *d, int l, pith_attn_block *a, pith_err *err) {
    const pith_hparams *hp = &d->base.hp;
    char name[96];
    snprintf(name, sizeof name, "blk.%d.attn_q.weight", l);
    if (pith_model_file_tensor(d->file, name)) return pith_attn_block_load(d, l, PITH_QK_NORM_NONE, a, err);
    int qd = hp->n_heads * hp->head_dim, kvd = hp->n_kv_heads * hp->head_dim, total = qd + 2 * kvd;
    memset(a, 0, sizeof *a);
    return pith_decoder_matrix_rows(d, l, "attn_qkv.weight", hp->dim, total, 0, qd, &a->wq, err) ||
                   pith_decoder_matrix_rows(d, l, "attn_qkv.weight", hp->dim, total, qd, kvd, &a->wk, err) ||
                   pith_decoder_matrix_rows(d, l, "attn_qkv.weight", hp->dim, total, qd + kvd, kvd, &a->wv, err) ||
                   pith_decoder_matrix(d, l, "attn_output.weight", &a->wo, err)
               ? -1
               : 0;
}

/* The gate and up matrices: the halves of ffn_up.weight ([gate | up] rows, llama.cpp's LLM_FFN_SWIGLU and
 * Phi3MLP's chunk(2)), then down; silu(gate) * up. */
static int load_ffn(pith_decoder *d, int l, pith_ffn_block *f, pith_err *err) {
    const int dim = d->base.hp.dim, F = d->base.hp.ffn_dim;
    memset(f, 0, sizeof *f);
    f->act = PITH_GLU_SILU;
    return pith_decoder_matrix_rows(d, l, "ffn_up.weight", dim, 2 * F, 0, F, &f->gate, err) ||
                   pith_decoder_matrix_rows(d, l, "ffn_up.weight", dim, 2 * F, F, F, &f->up, err) ||
                   pith_decoder_matrix_rows(d, l, "ffn_down.weight", F, dim, 0, dim, &f->down, err)
               ? -1
               : 0;
}

static int phi3_forward(pith_model *base, const pith_batch *b, float *logits, pith_err *err) {
    phi3 *m = base->impl;
    pith_decoder *d = &m->d;
    const pith_hparams *hp = &base->hp;
    const pith_dec_bufs *B = &m->bufs;
    if (pith_decoder_step(d, b, logits, err)) return -1;
    int n = b->n_tokens;
    if (n == 0) return 0;
    if (pith_decoder_first_stage(d)) pith_be_embed(d->be, m->embd, 0, B->x, n);
    else if (pith_decoder_stage_recv(d, B->x, n, err)) return -1;
    pith_be_rope_tables(d->be, m->rope, m->cs, n);
    for (int l = 0; l < hp->n_layers; l++) {
        if (!pith_decoder_has_layer(d, l)) continue;
        pith_be_begin_layer(d->be, l);
        const phi3_layer *L = &m->layers[l];
        pith_be_rmsnorm(d->be, B->x, L->attn_norm, hp->norm_eps, B->xb, n);
        if (pith_attn_block_qkv(d, &L->attn, l, B, B->xb, m->cs, n, err)) return -1;
        pith_attn_block_attend(d, &L->attn, l, B, n);
        if (l == hp->n_layers - 1) { /* only the rows that want logits or hidden states go on */
            pith_buf *const keep[] = {B->att, B->x};
            if ((n = pith_decoder_n_kept(b)) == 0) return pith_head_forward(d, B, m->out_norm, m->output, b, err);
            pith_be_keep_rows(d->be, keep, 2);
        }
        if (pith_attn_block_out(d, &L->attn, B, NULL, n, err)) return -1;
        pith_be_rmsnorm(d->be, B->x, L->ffn_norm, hp->norm_eps, B->xb, n);
        if (pith_ffn_block_forward(d, &L->ffn, B, B->xb, NULL, n, err)) return -1;
    }
    if (!pith_decoder_last_stage(d)) return pith_decoder_stage_send(d, B->x, n, err);
    return pith_head_forward(d, B, m->out_norm, m->output, b, err);
}

/* The engine's limits fix the configured context: LongRoPE's list follows it (see the top). */
static int phi3_prepare(pith_model *base, const pith_model_limits *lim, pith_err *err) {
    phi3 *m = base->impl;
    if (pith_decoder_prepare(base, lim, err)) return -1;
    if (m->rope_long.inv_freq) {
        int ctx = lim->max_seq_len > 0 ? lim->max_seq_len : base->hp.ctx_len;
        m->rope = ctx > m->orig_ctx ? &m->rope_long : &m->rope_short;
    }
    return 0;
}

static const pith_model_ops phi3_ops = {
    .prepare = phi3_prepare, .mem_alloc = pith_decoder_mem_alloc, .mem_free = pith_decoder_mem_free,
    .copy_blocks = pith_decoder_copy_blocks, .forward = phi3_forward, .destroy = pith_decoder_destroy,
};

int pith_phi3_build(pith_model_file *file, const pith_model_options *opt, pith_model **out, pith_err *err) {
    *out = NULL;
    const pith_hparams *hp = pith_model_file_hparams(file);
    const pith_phi3_params *P = pith_arch_params(hp);
    const char *path = pith_model_file_path(file);
    phi3 *m = (phi3 *)pith_decoder_new(sizeof *m, file, opt, &phi3_ops, phi3_free, err);
    if (!m) return -1;
    pith_decoder *d = &m->d;
    int n_rot = P->rope_dim > 0 ? P->rope_dim : hp->head_dim;
    int rc = pith_decoder_shard_begin(d, true, err);
    hp = &d->base.hp; /* this rank's heads and FFN columns: its rows of each part of the fused projections */
    if (!rc) rc = pith_decoder_attn_shape(d, err);
    if (!rc && !(m->layers = calloc((size_t)hp->n_layers, sizeof *m->layers))) rc = pith_errf(err, "out of memory");
    pith_be_begin_layer(d->be, PITH_BE_LAYER_INPUT);
    /* a pipeline stage holds its layers only; the first stage the embeddings, the last the head */
    if (!rc && pith_decoder_first_stage(d)) rc = pith_decoder_table(d, "token_embd.weight", &m->embd, err);
    pith_be_begin_layer(d->be, PITH_BE_LAYER_OUTPUT);
    if (!rc && pith_decoder_last_stage(d)) rc = pith_decoder_vector(d, -1, "output_norm.weight", hp->dim, true, &m->out_norm, err);
    if (!rc && pith_decoder_last_stage(d)) rc = pith_decoder_output(d, &m->output, err);
    for (int l = 0; !rc && l < hp->n_layers; l++) {
        if (!pith_decoder_has_layer(d, l)) continue;
        pith_be_begin_layer(d->be, l);
        phi3_layer *L = &m->layers[l];
        rc = pith_decoder_vector(d, l, "attn_norm.weight", hp->dim, true, &L->attn_norm, err) ||
             pith_decoder_vector(d, l, "ffn_norm.weight", hp->dim, true, &L->ffn_norm, err) ||
             load_attention(d, l, &L->attn, err) || load_ffn(d, l, &L->ffn, err);
        if (rc) pith_err_prefix(err, "layer %d", l);
        else pith_decoder_progress(d, l + 1, hp->n_layers);
    }
    if (!rc && P->n_factors > 0) {
        /* the check hook refused any other scaling beside LongRoPE */
        rc = pith_rope_longrope(hp, n_rot, P->short_factor, P->attn_factor, &m->rope_short, err) ||
             pith_rope_longrope(hp, n_rot, P->long_factor, P->attn_factor, &m->rope_long, err);
        m->orig_ctx = P->orig_ctx;
        m->rope = hp->ctx_len > m->orig_ctx ? &m->rope_long : &m->rope_short;
    } else if (!rc) {
        rc = pith_rope_for(hp, file, n_rot, PITH_ROPE_CAN_ALL, &m->rope_short, path, err);
        m->rope = &m->rope_short;
    }
    if (!rc) rc = pith_dec_bufs_make(d, hp->ffn_dim, &m->bufs, err);
    /* the tables' width is the rotated width: the backend rotates cs->cols / 2 pairs */
    if (!rc && !(m->cs = pith_be_buffer(d->be, n_rot, err))) rc = -1;
    if (!rc) rc = pith_decoder_kv_memory(d, hp->n_kv_heads * hp->head_dim, phi3_window, err);
    return pith_decoder_end(d, rc, out, err);
}
