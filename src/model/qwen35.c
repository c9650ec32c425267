/* The Qwen3.5 forward pass (see qwen35_arch.c), over a flat batch and the model's two memory groups.
 *
 * One step: embed every token; per layer, RMSNorm and then its token mixer:
 *   attention layers: Q+gate, K and V projections; an RMS norm on each Q and K head; RoPE over halves of
 *     the first rope_dim dimensions of each head (M-RoPE with every section at the token's position);
 *     K/V into the token's slot of the FULL group; causal attention through the block tables; the output
 *     times sigmoid(gate), projected and added to the residual;
 *   Gated DeltaNet layers: the q/k/v projection through the causal convolution (SiLU) whose last K-1
 *     inputs are the sequence's carried state; beta = sigmoid(b), g = ssm_a * softplus(a + dt_bias); the
 *     delta rule per value head (recurrent.h, the recurrent form: see the note above delta_unit), each head's output
 *     RMS-normed and gated by silu(z), projected and added;
 * then post_attention_norm and a SwiGLU feed-forward (qwen35moe: the mixture of experts of model/moe.h);
 * finally output_norm and the vocabulary projection for the rows that want logits or hidden states.
 *
 * Memory: a FULL group of the attention layers (K and V, F16) and a RECURRENT group of the DeltaNet
 * layers: per sequence, for each DeltaNet layer i of the group in order, its convolution state
 * ([K - 1][conv channels] floats, oldest first) followed by its delta-rule state ([value heads][key
 * width][value width] floats), at float offset i * (both) of the slot. Checkpoints (batch.h): the
 * convolution and the delta rule run in pieces ending at the checkpointed tokens (token by token either
 * way, so the same bits), each piece's end state copied to the checkpoint slot. */
#include "model/qwen35.h"
#include "model/qwen35_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/kv_rows.h"
#include "backend/cpu/attention.h"
#include "backend/cpu/cpu.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/quants.h"
#include "backend/cpu/recurrent.h"
#include "model/hybrid_common.h"
#include "backend/cpu/moe.h"
#include "pith/kv.h"

/* Every run goes through the recurrent delta rule (recurrent.h), a prefill chunk too: its result is
 * then the same bits however the scheduler cuts a prompt into chunks or batches it with others (the
 * chunked WY form sums in another order, and one flipped rounding changes greedy tokens of a quantized
 * model), and on AVX2 machines the recurrent kernel is also the faster of the two today (test_recurrent
 * checks both against the float64 definition; a blocked SIMD chunked kernel would change this). */

/* ---------------- build ---------------- */

int q35_load_layer(q35 *m, const pith_model_file *f, int l, bool delta, q35_layer *L, pith_err *err) {
    const pith_hparams *hp = &m->base.hp;
    int dim = hp->dim, ffn = hp->ffn_dim, hd = hp->head_dim, nv = hp->ssm_n_v_heads;
    char n[96];
    L->delta = delta;
#define NAME(s) (snprintf(n, sizeof n, "blk.%d.%s", l, s), n)
    if (pith_hy_load_vec(f, NAME("attn_norm.weight"), dim, &L->attn_norm, err) ||
        pith_hy_load_vec(f, NAME("post_attention_norm.weight"), dim, &L->post_norm, err))
        return pith_err_prefix(err, "layer %d", l);
    if (hp->n_experts > 0) {
        static const char *const hf_experts[3] = {"mlp.experts.%d.gate_proj.weight", "mlp.experts.%d.up_proj.weight",
                                                  "mlp.experts.%d.down_proj.weight"};
        if (!(L->moe = calloc(1, sizeof *L->moe))) return pith_errf(err, "out of memory");
        if (pith_moe_load(f, l, &m->moe_cfg, hf_experts, L->moe, err)) return pith_err_prefix(err, "layer %d", l);
    } else if (pith_hy_load_mat(f, NAME("ffn_gate.weight"), ffn, dim, &L->gate, err) ||
               pith_hy_load_mat(f, NAME("ffn_up.weight"), ffn, dim, &L->up, err) ||
               pith_hy_load_mat(f, NAME("ffn_down.weight"), dim, ffn, &L->down, err)) {
        return pith_err_prefix(err, "layer %d", l);
    }
    if (L->delta) {
        const pith_tensor *c = pith_model_file_tensor(f, NAME("ssm_conv1d.weight"));
        if (c && c->ne[0] != m->K)
            return pith_errf(err, "layer %d: tensor %s: width %lld, expected %d", l, n, (long long)c->ne[0], m->K);
        if (pith_hy_load_mat(f, NAME("attn_qkv.weight"), m->conv_dim, dim, &L->wqkv, err) ||
            pith_hy_load_mat(f, NAME("attn_gate.weight"), m->value_dim, dim, &L->wz, err) ||
            pith_hy_load_mat(f, NAME("ssm_beta.weight"), nv, dim, &L->wb, err) ||
            pith_hy_load_mat(f, NAME("ssm_alpha.weight"), nv, dim, &L->wa, err) ||
            pith_hy_load_mat(f, NAME("ssm_out.weight"), dim, m->value_dim, &L->wout, err) ||
            pith_hy_load_vec(f, NAME("ssm_conv1d.weight"), (int64_t)m->conv_dim * m->K, &L->conv_w, err) ||
            pith_hy_load_vec(f, NAME("ssm_dt.bias"), nv, &L->dt_bias, err) ||
            pith_hy_load_vec(f, NAME("ssm_a"), nv, &L->ssm_a, err) ||
            pith_hy_load_vec(f, NAME("ssm_norm.weight"), hp->ssm_head_v_dim, &L->ssm_norm, err))
            return pith_err_prefix(err, "layer %d", l);
    } else if (pith_hy_load_mat(f, NAME("attn_q.weight"), 2 * m->q_dim, dim, &L->wq, err) ||
               pith_hy_load_mat(f, NAME("attn_k.weight"), m->kv_dim, dim, &L->wk, err) ||
               pith_hy_load_mat(f, NAME("attn_v.weight"), m->kv_dim, dim, &L->wv, err) ||
               pith_hy_load_mat(f, NAME("attn_output.weight"), dim, m->q_dim, &L->wo, err) ||
               pith_hy_load_vec(f, NAME("attn_q_norm.weight"), hd, &L->q_norm, err) ||
               pith_hy_load_vec(f, NAME("attn_k_norm.weight"), hd, &L->k_norm, err)) {
        return pith_err_prefix(err, "layer %d", l);
    }
#undef NAME
    return 0;
}

static pith_matrix *layer_mat(q35_layer *L, int i) {
    pith_matrix *ms[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->wqkv, &L->wz, &L->wb, &L->wa, &L->wout,
                         &L->gate, &L->up, &L->down};
    return i < (int)(sizeof ms / sizeof *ms) ? ms[i] : NULL;
}

size_t q35_matrix_bytes(const pith_matrix *w) { return w->data ? (size_t)w->rows * w->row_bytes : 0; }

size_t q35_layer_bytes(const q35_layer *L) {
    size_t n = 0;
    for (int i = 0; layer_mat((q35_layer *)L, i); i++) n += q35_matrix_bytes(layer_mat((q35_layer *)L, i));
    return n;
}

int q35_pack_layer(q35 *m, q35_layer *L, pith_err *err) {
    for (int i = 0; layer_mat(L, i); i++)
        if (layer_mat(L, i)->data && pith_matrix_pack(&m->cpu, layer_mat(L, i), err)) return -1;
    return L->moe ? pith_moe_pack(&m->cpu, L->moe, err) : 0;
}

void q35_free_layer(q35_layer *L) {
    for (int i = 0; layer_mat(L, i); i++) pith_matrix_free(layer_mat(L, i));
    if (L->moe) pith_moe_free(L->moe);
    free(L->moe);
    float *vs[] = {L->attn_norm, L->post_norm, L->q_norm, L->k_norm, L->conv_w, L->dt_bias, L->ssm_a, L->ssm_norm};
    for (size_t i = 0; i < sizeof vs / sizeof *vs; i++) free(vs[i]);
}

static void q35_destroy(pith_model *base);
static int q35_prepare(pith_model *base, const pith_model_limits *lim, pith_err *err);
static int q35_mem_alloc(pith_model *base, const pith_mem_layout *lay, pith_err *err);
static void q35_mem_free(pith_model *base);
static int q35_copy_blocks(pith_model *base, int g, const int32_t *src, const int32_t *dst, int n, pith_err *err);
static int q35_forward(pith_model *base, const pith_batch *b, float *logits, pith_err *err);
static const pith_model_ops q35_ops = {
    .prepare = q35_prepare, .mem_alloc = q35_mem_alloc, .mem_free = q35_mem_free,
    .copy_blocks = q35_copy_blocks, .forward = q35_forward, .mtp_draft = q35_mtp_draft, .destroy = q35_destroy,
};

/* The decoder's groups (hybrid_common.h); with the MTP head, its layer (n_layers) joins the FULL group
 * as the last layer and every RECURRENT slot grows by the head's last hidden state. */
static int declare_memory(q35 *m, pith_err *err) {
    const pith_hparams *hp = &m->base.hp;
    if (pith_hy_declare_memory(&m->base, m->kv_dim, m->conv_floats + m->state_floats, 1, &m->group_layers,
                               &m->layer_group, &m->layer_index, err))
        return -1;
    if (!m->mtp) return 0;
    pith_mem_spec *spec = &m->base.mem;
    if (spec->n_groups != 2 || spec->groups[0].kind != PITH_MEM_FULL)
        return pith_errf(err, "an MTP head needs the decoder to have both attention and DeltaNet layers");
    /* group_layers: the FULL group's layers, then the RECURRENT group's: shift those by one */
    pith_mem_group *full = &spec->groups[0], *rec = &spec->groups[1];
    memmove(m->group_layers + full->n_layers + 1, m->group_layers + full->n_layers, (size_t)rec->n_layers * sizeof(int));
    m->group_layers[full->n_layers] = hp->n_layers;
    m->layer_group[hp->n_layers] = 0;
    m->layer_index[hp->n_layers] = full->n_layers++;
    full->layers = m->group_layers;
    rec->layers = m->group_layers + full->n_layers;
    rec->state_bytes += q35_mtp_tail_floats(m) * sizeof(float);
    return pith_mem_spec_check(spec, hp->n_layers + 1, err);
}

int pith_qwen35_build(pith_model_file *file, const pith_model_options *opt, pith_model **out, pith_err *err) {
    *out = NULL;
    const pith_hparams *hp = pith_model_file_hparams(file);
    q35 *m = calloc(1, sizeof *m);
    if (!m) return pith_errf(err, "out of memory");
    m->base.ops = &q35_ops;
    m->base.hp = *hp;
    m->base.impl = m;
    m->base.has_hidden = true;
    m->base.state_checkpoints = true; /* conv_unit and delta_unit copy the state after checkpointed tokens */
    m->q_dim = hp->n_heads * hp->head_dim;
    m->kv_dim = hp->n_kv_heads * hp->head_dim;
    m->n_rot = hp->rope_dim > 0 ? hp->rope_dim : hp->head_dim;
    m->K = hp->conv_kernel;
    m->key_dim = hp->ssm_n_k_heads * hp->ssm_head_k_dim;
    m->value_dim = hp->ssm_n_v_heads * hp->ssm_head_v_dim;
    m->conv_dim = 2 * m->key_dim + m->value_dim;
    m->conv_floats = (size_t)(m->K - 1) * m->conv_dim;
    m->state_floats = (size_t)hp->ssm_n_v_heads * hp->ssm_head_k_dim * hp->ssm_head_v_dim;
    m->qk_tiled = pith_model_file_format(file) == PITH_FORMAT_GGUF;
    const char *fs = getenv("PITH_FORCE_SCALAR");
    bool force_scalar = fs && *fs && strcmp(fs, "0") != 0;
    m->portable = force_scalar;
    pith_attn_shape shape = {hp->n_heads, hp->n_kv_heads, hp->head_dim, (float)(1.0 / sqrt(hp->head_dim))};
    m->layers = calloc((size_t)hp->n_layers, sizeof *m->layers);
    int rc = !m->layers ? pith_errf(err, "out of memory") : 0;
    pith_moe_config_of(hp, &m->moe_cfg);
    if (!rc && hp->n_experts > 0) rc = pith_moe_config_check(&m->moe_cfg, pith_model_file_path(file), err);
    if (!rc && hp->n_experts > 0) rc = pith_moe_loop_from_env(&m->moe_loop, err);
    if (!rc) rc = pith_cpu_init(&m->cpu, opt ? opt->n_threads : 0, force_scalar, err);
    if (!rc) rc = pith_attn_scratch_init(&m->attn, &shape, m->cpu.n_threads, err);
    if (!rc) rc = pith_hy_load_io(file, hp, "output_norm.weight", &m->embd, &m->embd_row_bytes, &m->out_norm, &m->output, err);
    const double steps = 2.0 * hp->n_layers;
    for (int l = 0; !rc && l < hp->n_layers; l++) {
        rc = q35_load_layer(m, file, l, pith_layer_bit(hp->layer_recurrent, l), &m->layers[l], err);
        if (!rc && opt && opt->progress) opt->progress(opt->progress_user, (l + 1) / steps);
    }
    for (int l = 0; !rc && l < hp->n_layers; l++) {
        rc = q35_pack_layer(m, &m->layers[l], err);
        if (!rc && opt && opt->progress) opt->progress(opt->progress_user, (hp->n_layers + l + 1) / steps);
    }
    if (!rc) rc = pith_matrix_pack(&m->cpu, &m->output, err);
    if (!rc && opt && opt->mtp) rc = q35_mtp_load(m, file, err);
    if (!rc) rc = declare_memory(m, err);
    m->base.has_mtp = m->mtp != NULL;
    if (rc) {
        pith_err_prefix(err, "%s", pith_model_file_path(file));
        q35_destroy(&m->base);
        return -1;
    }
    m->base.file = file;
    *out = &m->base;
    return 0;
}

static void free_scratch(q35 *m) {
    float **bufs[] = {&m->x, &m->xb, &m->q2, &m->q, &m->k, &m->v, &m->att, &m->qkv, &m->z, &m->bb, &m->aa,
                      &m->hb, &m->hb2, &m->rope_cos, &m->rope_sin, &m->gdn_scratch};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) free(*bufs[i]), *bufs[i] = NULL;
    free(m->seq_start);
    m->seq_start = NULL;
    m->cap = 0;
}

static void q35_destroy(pith_model *base) {
    q35 *m = base->impl;
    pith_kv_host_free(&m->mem);
    free(m->group_layers);
    free(m->layer_group);
    free(m->layer_index);
    if (m->layers)
        for (int l = 0; l < base->hp.n_layers; l++) q35_free_layer(&m->layers[l]);
    q35_mtp_free(m);
    free(m->layers);
    pith_matrix_free(&m->output);
    free(m->out_norm);
    free_scratch(m);
    pith_moe_scratch_free(&m->moe);
    pith_attn_scratch_free(&m->attn);
    if (m->cpu.pool) pith_cpu_free(&m->cpu);
    free(m);
}

/* ---------------- memory ---------------- */

static int reserve(q35 *m, int n, pith_err *err) {
    if (n <= m->cap) return 0;
    if (m->cap < (1 << 28) && n < m->cap + m->cap / 2) n = m->cap + m->cap / 2;
    const pith_hparams *hp = &m->base.hp;
    free_scratch(m);
    size_t N = (size_t)n, dim = (size_t)hp->dim, half = (size_t)m->n_rot / 2, nv = (size_t)hp->ssm_n_v_heads;
    size_t att = (size_t)(m->q_dim > m->value_dim ? m->q_dim : m->value_dim);
    m->gdn_scratch_floats = pith_gdn_scratch_floats(hp->ssm_head_k_dim, hp->ssm_head_v_dim);
    m->x = malloc(N * dim * sizeof(float));
    m->xb = malloc(N * dim * sizeof(float));
    m->q2 = malloc(N * 2 * m->q_dim * sizeof(float));
    m->q = malloc(N * m->q_dim * sizeof(float));
    m->k = malloc(N * m->kv_dim * sizeof(float));
    m->v = malloc(N * m->kv_dim * sizeof(float));
    m->att = malloc(N * att * sizeof(float));
    m->qkv = malloc(N * m->conv_dim * sizeof(float));
    m->z = malloc(N * m->value_dim * sizeof(float));
    m->bb = malloc(N * nv * sizeof(float));
    m->aa = malloc(N * nv * sizeof(float));
    m->hb = malloc(N * hp->ffn_dim * sizeof(float));
    m->hb2 = malloc(N * hp->ffn_dim * sizeof(float));
    m->rope_cos = malloc((N * half + 1) * sizeof(float));
    m->rope_sin = malloc((N * half + 1) * sizeof(float));
    m->gdn_scratch = malloc((size_t)m->cpu.n_threads * m->gdn_scratch_floats * sizeof(float));
    m->seq_start = malloc((N + 1) * sizeof(int));
    if (!m->x || !m->xb || !m->q2 || !m->q || !m->k || !m->v || !m->att || !m->qkv || !m->z || !m->bb || !m->aa ||
        !m->hb || !m->hb2 || !m->rope_cos || !m->rope_sin || !m->gdn_scratch || !m->seq_start) {
        free_scratch(m);
        return pith_errf(err, "out of memory for a batch of %d tokens", n);
    }
    int widest = hp->dim > hp->ffn_dim ? hp->dim : hp->ffn_dim;
    widest = widest > m->q_dim ? widest : m->q_dim;
    widest = widest > m->value_dim ? widest : m->value_dim;
    if (pith_cpu_reserve(&m->cpu, n, widest, err) || pith_attn_scratch_reserve(&m->attn, n, err) ||
        (hp->n_experts > 0 && pith_moe_reserve(&m->cpu, &m->moe_cfg, &m->moe, n, err)) ||
        (m->mtp && q35_mtp_reserve(m, n, err))) {
        free_scratch(m);
        return -1;
    }
    m->cap = n;
    return 0;
}

static int q35_prepare(pith_model *base, const pith_model_limits *lim, pith_err *err) {
    return reserve(base->impl, lim->max_batch_tokens, err);
}

static int q35_mem_alloc(pith_model *base, const pith_mem_layout *lay, pith_err *err) {
    return pith_hy_mem_alloc(&((q35 *)base->impl)->mem, &base->mem, lay, err);
}

static void q35_mem_free(pith_model *base) { pith_kv_host_free(&((q35 *)base->impl)->mem); }

static int q35_copy_blocks(pith_model *base, int g, const int32_t *src, const int32_t *dst, int n, pith_err *err) {
    return pith_hy_copy_blocks(&((q35 *)base->impl)->mem, g, src, dst, n, err);
}

/* ---------------- forward ---------------- */

static void run(q35 *m, job *j, void (*row)(job *j, int t, int ith), int n, double width) {
    pith_hy_run(&m->cpu, j, row, n, width);
}

void q35_rope_angles(const q35 *m, int position, float *cs, float *sn) {
    const pith_hparams *hp = &m->base.hp;
    /* text: every M-RoPE section at the token's position */
    double p = position, pos[4] = {p, p, p, p};
    pith_rope_sections s = {{hp->rope_sections[0], hp->rope_sections[1], hp->rope_sections[2], hp->rope_sections[3]}, true};
    pith_rope_angles(&s, pos, hp->rope_theta, m->n_rot, cs, sn);
}

void q35_norm_rope(const q35 *m, float *x, const float *src, size_t src_stride, int n_heads, const float *norm,
                   const float *cs, const float *sn) {
    const pith_hparams *hp = &m->base.hp;
    int hd = hp->head_dim;
    for (int h = 0; h < n_heads; h++) {
        pith_hy_rmsnorm(x + h * hd, src + (size_t)h * src_stride, norm, hd, hp->norm_eps);
        pith_rope_partial(x + h * hd, 1, hd, m->n_rot, cs, sn);
    }
}

static void embed_row(job *j, int t, int ith) {
    (void)ith;
    q35 *m = j->m;
    const pith_hparams *hp = &m->base.hp;
    int dim = hp->dim, half = m->n_rot / 2;
    const uint8_t *src = (const uint8_t *)m->embd->data + (size_t)j->b->tokens[t] * m->embd_row_bytes;
    pith_dequantize_row(m->embd->type, src, m->x + (size_t)t * dim, dim);
    q35_rope_angles(m, j->b->positions[t], m->rope_cos + (size_t)t * half, m->rope_sin + (size_t)t * half);
}

static void norm_row(job *j, int t, int ith) {
    (void)ith;
    q35 *m = j->m;
    int dim = m->base.hp.dim;
    pith_hy_rmsnorm(m->xb + (size_t)t * dim, m->x + (size_t)t * dim, j->norm, dim, m->base.hp.norm_eps);
}

static float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

/* Query out of [query | gate] per head, QK norms, partial RoPE, then K and V into the FULL group. */
static void qkv_row(job *j, int t, int ith) {
    (void)ith;
    q35 *m = j->m;
    const pith_hparams *hp = &m->base.hp;
    const q35_layer *L = &m->layers[j->layer];
    int hd = hp->head_dim, half = m->n_rot / 2;
    float *q2 = m->q2 + (size_t)t * 2 * m->q_dim, *q = m->q + (size_t)t * m->q_dim;
    float *k = m->k + (size_t)t * m->kv_dim, *v = m->v + (size_t)t * m->kv_dim;
    const float *cs = m->rope_cos + (size_t)t * half, *sn = m->rope_sin + (size_t)t * half;
    q35_norm_rope(m, q, q2, 2 * (size_t)hd, hp->n_heads, L->q_norm, cs, sn);
    q35_norm_rope(m, k, k, (size_t)hd, hp->n_kv_heads, L->k_norm, cs, sn);
    pith_hy_store_kv(&m->cpu, &m->mem, j->b, m->layer_group[j->layer], m->layer_index[j->layer], t, k, v,
                     hp->n_kv_heads, hd);
}

static void attn_gate_row(job *j, int t, int ith) {
    (void)ith;
    q35 *m = j->m;
    int hd = m->base.hp.head_dim;
    const float *q2 = m->q2 + (size_t)t * 2 * m->q_dim;
    float *o = m->att + (size_t)t * m->q_dim;
    for (int h = 0; h < m->base.hp.n_heads; h++)
        for (int i = 0; i < hd; i++) o[h * hd + i] *= sigmoidf(q2[(size_t)h * 2 * hd + hd + i]);
}

static float *slot_layer_state(q35 *m, int layer, int slot) {
    const pith_kv_cache *c = &m->mem.groups[m->layer_group[layer]];
    return (float *)(c->state + (size_t)slot * c->state_bytes) + (size_t)m->layer_index[layer] * (m->conv_floats + m->state_floats);
}

static float *layer_state(q35 *m, const pith_batch *b, int layer, int s) {
    return slot_layer_state(m, layer, b->mem[m->layer_group[layer]].state_slots[s]);
}

/* The checkpoints of the run starting at token t0 (batch.h), or NULL. */
static const int32_t *run_checkpoints(q35 *m, const pith_batch *b, int layer, int t0) {
    const int32_t *ck = b->mem[m->layer_group[layer]].checkpoints;
    return ck ? ck + t0 : NULL;
}

/* The end of the next piece of a run of n tokens from done: the token after the next checkpointed one. */
static int piece_end(const int32_t *ck, int done, int n) {
    int end = done + 1;
    while (end < n && !(ck && ck[end - 1] >= 0)) end++;
    return end;
}

#define CONV_CHANNELS 256

static void conv_unit(job *j, int u, int ith) {
    (void)ith;
    q35 *m = j->m;
    const pith_batch *b = j->b;
    int C = m->conv_dim, blocks = (C + CONV_CHANNELS - 1) / CONV_CHANNELS, K = m->K;
    int s = u / blocks, c0 = (u % blocks) * CONV_CHANNELS, c1 = c0 + CONV_CHANNELS < C ? c0 + CONV_CHANNELS : C;
    int t0 = m->seq_start[s], n = m->seq_start[s + 1] - t0;
    float *state = layer_state(m, b, j->layer, s);
    if (b->positions[t0] == 0)
        for (int r = 0; r < K - 1; r++) memset(state + (size_t)r * C + c0, 0, (size_t)(c1 - c0) * sizeof(float));
    float *x = m->qkv + (size_t)t0 * C;
    const int32_t *ck = run_checkpoints(m, b, j->layer, t0);
    for (int done = 0, end; done < n; done = end) {
        end = piece_end(ck, done, n);
        pith_conv1d_args a = {end - done, C, K, x + (size_t)done * C, (size_t)C, m->layers[j->layer].conv_w, NULL,
                              state, x + (size_t)done * C, (size_t)C, true, m->cpu.k};
        pith_conv1d(&a, c0, c1);
        if (ck && ck[end - 1] >= 0) {
            float *dst = slot_layer_state(m, j->layer, ck[end - 1]);
            for (int r = 0; r < K - 1; r++)
                memcpy(dst + (size_t)r * C + c0, state + (size_t)r * C + c0, (size_t)(c1 - c0) * sizeof(float));
        }
    }
}

static void gates_row(job *j, int t, int ith) {
    (void)ith;
    q35 *m = j->m;
    const q35_layer *L = &m->layers[j->layer];
    int nv = m->base.hp.ssm_n_v_heads;
    float *bb = m->bb + (size_t)t * nv, *aa = m->aa + (size_t)t * nv;
    for (int h = 0; h < nv; h++) {
        bb[h] = sigmoidf(bb[h]);
        float x = aa[h] + L->dt_bias[h];
        float sp = x > 20.0f ? x : log1pf(expf(x)); /* softplus, as torch's (threshold 20) */
        aa[h] = L->ssm_a[h] * sp;
    }
}

/* Unit u: sequence u / value heads, head u % value heads. */
static void delta_unit(job *j, int u, int ith) {
    q35 *m = j->m;
    const pith_batch *b = j->b;
    const pith_hparams *hp = &m->base.hp;
    int nv = hp->ssm_n_v_heads, s = u / nv, h = u % nv;
    int t0 = m->seq_start[s], n = m->seq_start[s + 1] - t0;
    float *S = layer_state(m, b, j->layer, s) + m->conv_floats;
    size_t per_head = (size_t)hp->ssm_head_k_dim * hp->ssm_head_v_dim;
    if (b->positions[t0] == 0) memset(S + (size_t)h * per_head, 0, per_head * sizeof(float));
    const float *qkv = m->qkv + (size_t)t0 * m->conv_dim;
    pith_gdn_args a = {
        .n_tokens = n, .n_heads = nv, .n_qk_heads = hp->ssm_n_k_heads, .qk_tiled = m->qk_tiled,
        .dk = hp->ssm_head_k_dim, .dv = hp->ssm_head_v_dim, .q = qkv, .k = qkv + m->key_dim, .ld_qk = (size_t)m->conv_dim,
        .v = qkv + 2 * m->key_dim, .ld_v = (size_t)m->conv_dim, .g = m->aa + (size_t)t0 * nv,
        .beta = m->bb + (size_t)t0 * nv, .ld_gb = (size_t)nv, .eps = 1e-6f, .state = S,
        .out = m->att + (size_t)t0 * m->value_dim, .ld_out = (size_t)m->value_dim, .portable = m->portable,
        .no_avx512 = strncmp(m->cpu.k->name, "avx512", 6) != 0,
    };
    float *scratch = m->gdn_scratch + (size_t)ith * m->gdn_scratch_floats;
    const int32_t *ck = run_checkpoints(m, b, j->layer, t0);
    if (!ck) {
        pith_gdn_recurrent(&a, h, scratch);
        return;
    }
    /* token by token anyway: pieces ending at the checkpointed tokens give the same bits */
    for (int done = 0, end; done < n; done = end) {
        end = piece_end(ck, done, n);
        pith_gdn_args p = a;
        p.n_tokens = end - done;
        p.q = a.q + (size_t)done * a.ld_qk, p.k = a.k + (size_t)done * a.ld_qk, p.v = a.v + (size_t)done * a.ld_v;
        p.g = a.g + (size_t)done * a.ld_gb, p.beta = a.beta + (size_t)done * a.ld_gb, p.out = a.out + (size_t)done * a.ld_out;
        pith_gdn_recurrent(&p, h, scratch);
        if (ck[end - 1] >= 0)
            memcpy(slot_layer_state(m, j->layer, ck[end - 1]) + m->conv_floats + (size_t)h * per_head,
                   S + (size_t)h * per_head, per_head * sizeof(float));
    }
}

static void gated_norm_row(job *j, int t, int ith) {
    (void)ith;
    q35 *m = j->m;
    const pith_hparams *hp = &m->base.hp;
    int hv = hp->ssm_head_v_dim;
    float *o = m->att + (size_t)t * m->value_dim;
    const float *z = m->z + (size_t)t * m->value_dim;
    for (int h = 0; h < hp->ssm_n_v_heads; h++)
        pith_gated_rmsnorm(o + h * hv, z + h * hv, m->layers[j->layer].ssm_norm, hv, hp->norm_eps);
}

void q35_swiglu_row(job *j, int t, int ith) {
    (void)ith;
    q35 *m = j->m;
    int ffn = m->base.hp.ffn_dim;
    m->cpu.k->silu_mul(m->hb + (size_t)t * ffn, m->hb2 + (size_t)t * ffn, ffn);
}

static int attention_layer(q35 *m, const pith_batch *b, int l, job *j, pith_err *err) {
    const q35_layer *L = &m->layers[l];
    int n = b->n_tokens, dim = m->base.hp.dim;
    pith_acts a;
    pith_acts_bind(&m->cpu, &a, m->xb, n, dim, dim);
    const pith_matmul_out qkv[] = {
        {&L->wq, m->q2, 2 * (size_t)m->q_dim, false}, {&L->wk, m->k, m->kv_dim, false}, {&L->wv, m->v, m->kv_dim, false}};
    if (pith_cpu_matmul_many(&m->cpu, &a, qkv, 3, err)) return -1;
    run(m, j, qkv_row, n, 4.0 * (m->q_dim + 2 * m->kv_dim));
    const int g = m->layer_group[l];
    pith_hy_attention(&m->cpu, &m->attn, &m->mem, b, g, m->layer_index[l], m->kv_dim, m->q, m->q_dim, m->att);
    run(m, j, attn_gate_row, n, 8.0 * m->q_dim);
    pith_acts_bind(&m->cpu, &a, m->att, n, m->q_dim, m->q_dim);
    return pith_cpu_matmul(&m->cpu, &L->wo, &a, m->x, dim, true, err);
}

static int delta_layer(q35 *m, const pith_batch *b, int l, job *j, pith_err *err) {
    const pith_hparams *hp = &m->base.hp;
    const q35_layer *L = &m->layers[l];
    int n = b->n_tokens, dim = hp->dim, nv = hp->ssm_n_v_heads;
    pith_acts a;
    pith_acts_bind(&m->cpu, &a, m->xb, n, dim, dim);
    const pith_matmul_out proj[] = {{&L->wqkv, m->qkv, (size_t)m->conv_dim, false},
                                    {&L->wz, m->z, (size_t)m->value_dim, false},
                                    {&L->wb, m->bb, (size_t)nv, false},
                                    {&L->wa, m->aa, (size_t)nv, false}};
    if (pith_cpu_matmul_many(&m->cpu, &a, proj, 4, err)) return -1;
    int blocks = (m->conv_dim + CONV_CHANNELS - 1) / CONV_CHANNELS;
    run(m, j, conv_unit, b->n_seqs * blocks, (double)n / b->n_seqs * CONV_CHANNELS * (m->K + 4));
    run(m, j, gates_row, n, 32.0 * nv);
    run(m, j, delta_unit, b->n_seqs * nv, (double)n / b->n_seqs * 4.0 * hp->ssm_head_k_dim * hp->ssm_head_v_dim);
    run(m, j, gated_norm_row, n, 8.0 * m->value_dim);
    pith_acts_bind(&m->cpu, &a, m->att, n, m->value_dim, m->value_dim);
    return pith_cpu_matmul(&m->cpu, &L->wout, &a, m->x, dim, true, err);
}

static int layer_forward(q35 *m, const pith_batch *b, int l, int *n_rows, pith_err *err) {
    const pith_hparams *hp = &m->base.hp;
    const q35_layer *L = &m->layers[l];
    const int dim = hp->dim, ffn = hp->ffn_dim;
    job j = {.m = m, .b = b, .layer = l, .norm = L->attn_norm};
    run(m, &j, norm_row, b->n_tokens, dim);
    if ((L->delta ? delta_layer : attention_layer)(m, b, l, &j, err)) return -1;
    int n = b->n_tokens;
    /* the MTP head needs every token's hidden state */
    if (l == hp->n_layers - 1 && !m->mtp) n = pith_hy_keep_rows(m->x, b, hp->dim);
    *n_rows = n;
    if (n == 0) return 0;
    j.norm = L->post_norm;
    run(m, &j, norm_row, n, dim);
    if (L->moe) return pith_moe_forward(&m->cpu, L->moe, &m->moe, m->xb, dim, n, m->x, dim, m->moe_loop, err);
    pith_acts a;
    pith_acts_bind(&m->cpu, &a, m->xb, n, dim, dim);
    const pith_matmul_out gate_up[] = {{&L->gate, m->hb, ffn, false}, {&L->up, m->hb2, ffn, false}};
    if (pith_cpu_matmul_many(&m->cpu, &a, gate_up, 2, err)) return -1;
    run(m, &j, q35_swiglu_row, n, 8.0 * ffn);
    pith_acts_bind(&m->cpu, &a, m->hb, n, ffn, ffn);
    return pith_cpu_matmul(&m->cpu, &L->down, &a, m->x, dim, true, err);
}

static int q35_forward(pith_model *base, const pith_batch *b, float *logits, pith_err *err) {
    q35 *m = base->impl;
    const pith_hparams *hp = &base->hp;
    if (pith_hy_check(base, &m->mem, b, err) || reserve(m, b->n_tokens, err)) return -1;
    if (b->n_tokens == 0) return 0;
    if (pith_hy_seq_starts(b, m->seq_start, err)) return -1; /* each sequence's run (contiguous: batch.h) */
    job j = {.m = m, .b = b};
    run(m, &j, embed_row, b->n_tokens, hp->dim + 16.0 * m->n_rot);
    int n = b->n_tokens;
    for (int l = 0; l < hp->n_layers; l++)
        if (layer_forward(m, b, l, &n, err)) return -1;
    if (n == 0) return 0;
    j.norm = m->out_norm;
    run(m, &j, norm_row, n, hp->dim);
    if (m->mtp) {
        if (q35_mtp_after_decoder(m, b, err)) return -1;
        if (pith_hy_keep_rows(m->xb, b, hp->dim) == 0) return 0;
    }
    return pith_hy_output(&m->cpu, b, m->xb, hp->dim, &m->output, hp->n_vocab, logits, err);
}
