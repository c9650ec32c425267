/* The Vulkan backend's recurrent state and the hybrids' mixers (backend.h: short_conv, mamba2, gdn and
 * Qwen3.5's gated norm and gated attention), as compute dispatches in the step being recorded.
 *
 * A RECURRENT group's state lives in one device buffer of n_slots slots of state_bytes, slot j at
 * j * state_bytes, float32 in the layouts of backend/cpu/recurrent.h, so the engine's copies of state
 * slots (snapshots, forks, prefix-cache hits, speculative checkpoints) are plain buffer copies, the
 * same bytes the CPU backend copies. set_step puts the group's per-step data into the step buffer
 * (shaders/recurrent.glsl: state slots, checkpoint slots, each sequence's first token); the shaders read
 * them there and nothing else of the step, so a recorded step replays with another batch's slots.
 *
 * Each scan is the recurrent form, sequentially over a sequence's run of the step, a workgroup per
 * (sequence, head) or an invocation per (sequence, channel): the CPU backend's results up to float
 * rounding, whatever the step's cut of a sequence. A sequence at position 0 starts from zeros without
 * reading its slot; after a token the step names a checkpoint for, the state is copied into that slot.
 *
 * Invariants: a state slot is a whole number of floats; a scan's per-head arrays fit its shared memory
 * (DeltaNet heads of at most VK_GDN_MAX_DK keys, declared at load by gdn_shape, refused there beyond);
 * convolutions at most PITH_BE_MAX_CONV_KERNEL wide (conv.comp's registers). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/vulkan/vk.h"

#define VK_GDN_MAX_DK 256 /* gdn.comp's shared arrays */


/* ---- memory ---- */

int pith_vk_recurrent_alloc(pith_vk *c, int g, const pith_mem_group *mg, int n_slots, pith_err *err) {
    vk_group *G = &c->groups[g];
    if (n_slots < 1) return pith_errf(err, "memory group %d: no state slots", g);
    if (mg->state_bytes == 0 || mg->state_bytes % sizeof(float) || mg->state_bytes / sizeof(float) > UINT32_MAX)
        return pith_errf(err, "Vulkan: recurrent state slots of %zu bytes (whole floats, under 16 GiB)",
                         mg->state_bytes);
    G->meta = (pith_kv_cache){.kind = PITH_MEM_RECURRENT, .n_layers = mg->n_layers, .n_slots = n_slots,
                              .state_bytes = mg->state_bytes};
    size_t bytes = (size_t)n_slots * mg->state_bytes;
    if (pith_vk_alloc(c, bytes, false, &G->state, err) || pith_vk_fill_zero(c, &G->state, err))
        return pith_err_prefix(err, "the recurrent state of group %d (%d slots of %.2f MiB)", g, n_slots,
                               (double)mg->state_bytes / (1 << 20));
    return 0;
}

int pith_vk_recurrent_copy(pith_vk *c, int g, const int32_t *src, const int32_t *dst, int n, pith_err *err) {
    const pith_kv_cache *m = &c->groups[g].meta;
    for (int i = 0; i < n; i++)
        if (src[i] < 0 || src[i] >= m->n_slots || dst[i] < 0 || dst[i] >= m->n_slots)
            return pith_errf(err, "copy_blocks: state slot %d -> %d outside the %d slots", src[i], dst[i], m->n_slots);
    VkBufferCopy *r = malloc((size_t)(n > 0 ? n : 1) * sizeof *r);
    if (!r) return pith_errf(err, "out of memory");
    /* The copies go in the engine's order (the CPU's memcpy loop): one call takes a run of them whose
     * destinations no later copy of the run reads, since one vkCmdCopyBuffer has no order among its
     * regions. */
    int rc = 0;
    for (int i = 0; i < n && !rc;) {
        uint32_t k = 0;
        int j = i;
        for (; j < n; j++) {
            bool clash = false;
            for (int q = i; q < j && !clash; q++) clash = dst[q] == src[j] || dst[q] == dst[j];
            if (clash) break;
            if (src[j] != dst[j])
                r[k++] = (VkBufferCopy){(VkDeviceSize)src[j] * m->state_bytes, (VkDeviceSize)dst[j] * m->state_bytes,
                                        m->state_bytes};
        }
        if (k) rc = pith_vk_copy_regions(c, &c->groups[g].state, &c->groups[g].state, r, k, err);
        i = j;
    }
    free(r);
    return rc ? -1 : 0;
}

size_t pith_vk_recurrent_step_ints(const pith_batch *b) { return 3 * (size_t)b->n_seqs + (size_t)b->n_tokens; }

size_t pith_vk_recurrent_step_put(const pith_batch *b, int g, int32_t *s, size_t at) {
    const pith_batch_mem *m = &b->mem[g];
    int32_t *h = s + VK_ST_GROUP + 4 * g;
    h[VK_RST_STATE_SLOTS] = (int32_t)at;
    memcpy(s + at, m->state_slots, (size_t)b->n_seqs * sizeof(int32_t));
    at += (size_t)b->n_seqs;
    h[VK_RST_CHECKPOINTS] = (int32_t)at;
    for (int t = 0; t < b->n_tokens; t++) s[at + t] = m->checkpoints ? m->checkpoints[t] : -1;
    at += (size_t)b->n_tokens;
    h[VK_RST_SEQ_RUNS] = (int32_t)at;
    /* batch.h: a sequence's tokens are contiguous (the sequences in any order) */
    for (int t = b->n_tokens - 1; t >= 0; t--) s[at + 2 * (size_t)b->seq[t]] = t;
    for (int t = 0; t < b->n_tokens; t++) s[at + 2 * (size_t)b->seq[t] + 1] = t + 1;
    return at + 2 * (size_t)b->n_seqs;
}

/* The RECURRENT group an op names, or NULL (the step fails with the reason). */
static const vk_group *state_group(pith_vk *c, int g, const char *op) {
    if (g < 0 || g >= c->n_groups || c->groups[g].meta.kind != PITH_MEM_RECURRENT) {
        char msg[160];
        snprintf(msg, sizeof msg, "Vulkan: %s names group %d, not a recurrent memory group", op, g);
        pith_vk_fail(c, msg);
        return NULL;
    }
    return &c->groups[g];
}

/* The state of one layer, floats [offset, offset + floats) of each slot, inside the slot? */
static bool state_fits(pith_vk *c, const vk_group *G, size_t offset, size_t floats, const char *op) {
    if (offset + floats <= G->meta.state_bytes / sizeof(float) && offset <= UINT32_MAX) return true;
    char msg[160];
    snprintf(msg, sizeof msg, "Vulkan: %s's state (floats %zu..%zu) outside its slot of %zu floats", op, offset,
             offset + floats, G->meta.state_bytes / sizeof(float));
    pith_vk_fail(c, msg);
    return false;
}

/* ---- the causal convolution (conv.comp) ---- */

typedef struct {
    uint64_t x, y, w, bias, step, pool;
    uint32_t x_ld, y_ld, channels, kernel, flags, group, slot_size, offset, n_seqs;
} conv_push;

enum { CONV_SILU = 1, CONV_BIAS = 2, CONV_SHORT = 4 };

static void conv(pith_vk *c, const vk_group *G, int group, VkDeviceAddress x, int x_ld, VkDeviceAddress y, int y_ld,
                 int channels, const pith_weight *w, const pith_weight *bias, int kernel, uint32_t flags,
                 size_t offset) {
    conv_push p = {x, y, pith_vk_weight_addr(w), bias ? pith_vk_weight_addr(bias) : 0, c->step.addr, G->state.addr,
                   (uint32_t)x_ld, (uint32_t)y_ld,
                   (uint32_t)channels, (uint32_t)kernel, flags | (bias ? CONV_BIAS : 0u), (uint32_t)group,
                   (uint32_t)(G->meta.state_bytes / sizeof(float)), (uint32_t)offset, (uint32_t)c->b->n_seqs};
    pith_vk_record(c, PITH_VK_SH_conv, &p, sizeof p, (uint32_t)c->b->n_seqs * (((uint32_t)channels + 63) / 64), 1);
}

static bool conv_ok(pith_vk *c, const pith_weight *w, int channels, int kernel, const char *op) {
    if (kernel >= 1 && kernel <= PITH_BE_MAX_CONV_KERNEL && w->cols == channels * kernel) return true;
    char msg[160];
    snprintf(msg, sizeof msg, "Vulkan: %s's convolution of %d channels by %d (weights of %d; widths 1..%d)", op,
             channels, kernel, w->cols, PITH_BE_MAX_CONV_KERNEL);
    pith_vk_fail(c, msg);
    return false;
}

void pith_vk_short_conv(pith_backend *be, const pith_be_short_conv_args *a, int n) {
    pith_vk *c = pith_vk_of(be);
    if (!pith_vk_recording(c) || n == 0) return;
    const vk_group *G = state_group(c, a->group, "short_conv");
    int dim = a->out->cols;
    if (!G || !conv_ok(c, a->w, dim, a->kernel, "short_conv") ||
        !state_fits(c, G, a->state_offset, (size_t)(a->kernel - 1) * dim, "short_conv"))
        return;
    if (a->in->cols < 3 * dim) return pith_vk_fail(c, "Vulkan: short_conv's input rows are narrower than [B | C | x]");
    conv(c, G, a->group, pith_vk_buf_addr(a->in), a->in->cols, pith_vk_buf_addr(a->out), dim, dim, a->w, NULL,
         a->kernel, CONV_SHORT,
         a->state_offset);
}

/* ---- Mamba2 (conv.comp, ssd.comp, gnorm.comp) ---- */

typedef struct {
    uint64_t proj, y, dt_bias, A, D, step, pool;
    uint32_t proj_ld, y_ld, heads, groups, head_dim, d_state, inner, conv, group, slot_size, offset, n_seqs;
} ssd_push;

typedef struct {
    uint64_t x, z, w;
    uint32_t x_ld, z_ld, group, n_groups, mode, n;
    float eps, scale;
} gnorm_push;

static void gnorm(pith_vk *c, const pith_buf *x, int width, VkDeviceAddress z, int z_ld, const pith_weight *w,
                  int group, int mode, float eps, float scale, int n) {
    gnorm_push p = {pith_vk_buf_addr(x), z, pith_vk_weight_addr(w), (uint32_t)x->cols, (uint32_t)z_ld, (uint32_t)group,
                    (uint32_t)(width / group), (uint32_t)mode, (uint32_t)n, eps, scale};
    pith_vk_record(c, PITH_VK_SH_gated_norm, &p, sizeof p, (uint32_t)n * p.n_groups, 1);
}

void pith_vk_mamba2(pith_backend *be, const pith_be_mamba2_args *a, int n) {
    pith_vk *c = pith_vk_of(be);
    if (!pith_vk_recording(c) || n == 0) return;
    const vk_group *G = state_group(c, a->group, "mamba2");
    if (!G) return;
    const int H = a->n_heads, Gr = a->n_groups, P = a->head_dim, N = a->d_state;
    if (H < 1 || Gr < 1 || H % Gr || P < 1 || N < 1)
        return pith_vk_fail(c, "Vulkan: mamba2's heads and groups do not divide");
    int inner = H * P, conv_ch = inner + 2 * Gr * N;
    size_t conv_floats = (size_t)(a->kernel > 1 ? a->kernel - 1 : 0) * conv_ch;
    if (!conv_ok(c, a->conv_w, conv_ch, a->kernel, "mamba2") ||
        !state_fits(c, G, a->state_offset, conv_floats + (size_t)H * P * N, "mamba2"))
        return;
    if (a->proj->cols < inner + conv_ch + H || a->y->cols < inner || a->norm->cols != inner || a->norm_group < 1 ||
        inner % a->norm_group)
        return pith_vk_fail(c, "Vulkan: mamba2's buffers do not fit its shape");
    VkDeviceAddress proj = pith_vk_buf_addr(a->proj) + (VkDeviceAddress)inner * sizeof(float);
    conv(c, G, a->group, proj, a->proj->cols, proj, a->proj->cols, conv_ch, a->conv_w, a->conv_b, a->kernel, CONV_SILU,
         a->state_offset);
    ssd_push p = {pith_vk_buf_addr(a->proj), pith_vk_buf_addr(a->y), pith_vk_weight_addr(a->dt_bias),
                  pith_vk_weight_addr(a->A), pith_vk_weight_addr(a->D), c->step.addr, G->state.addr,
                  (uint32_t)a->proj->cols, (uint32_t)a->y->cols, (uint32_t)H, (uint32_t)Gr, (uint32_t)P, (uint32_t)N,
                  (uint32_t)inner, (uint32_t)conv_ch, (uint32_t)a->group,
                  (uint32_t)(G->meta.state_bytes / sizeof(float)), (uint32_t)(a->state_offset + conv_floats),
                  (uint32_t)c->b->n_seqs};
    pith_vk_record(c, PITH_VK_SH_ssd, &p, sizeof p, (uint32_t)c->b->n_seqs * (uint32_t)H, 1);
    gnorm(c, a->y, inner, pith_vk_buf_addr(a->proj), a->proj->cols, a->norm, a->norm_group, 0, a->eps, a->out_scale, n);
}

/* ---- Qwen3.5 (conv.comp, gdn.comp, gnorm.comp, gate.comp, and the attention's qkv op) ---- */

int pith_vk_gdn_shape(pith_backend *be, int dk, int dv, pith_err *err) {
    pith_vk *c = pith_vk_of(be);
    if (c->gdn_dk) return pith_errf(err, "the DeltaNet shape is set once");
    if (dk < 1 || dv < 1 || dk > VK_GDN_MAX_DK)
        return pith_errf(err, "Vulkan: DeltaNet heads of %d keys and %d values (the backend takes keys up to %d)",
                         dk, dv, VK_GDN_MAX_DK);
    c->gdn_dk = dk, c->gdn_dv = dv;
    return 0;
}

typedef struct {
    uint64_t qkv, beta, alpha, out, dt_bias, ssm_a, step, pool;
    uint32_t qkv_ld, gb_ld, out_ld, nk, nv, dk, dv, tiled, group, slot_size, offset, n_seqs;
} gdn_push;

void pith_vk_gdn(pith_backend *be, const pith_be_gdn_args *a, int n) {
    pith_vk *c = pith_vk_of(be);
    if (!pith_vk_recording(c) || n == 0) return;
    const vk_group *G = state_group(c, a->group, "gdn");
    if (!G) return;
    int nk = a->n_k_heads, nv = a->n_v_heads, dk = a->dk, dv = a->dv, C = a->qkv->cols;
    if (dk != c->gdn_dk || dv != c->gdn_dv || nk < 1 || nv < 1 || nv % nk || C != 2 * nk * dk + nv * dv ||
        a->beta->cols != a->alpha->cols || a->beta->cols < nv || a->out->cols < nv * dv)
        return pith_vk_fail(c, "Vulkan: gdn's buffers do not fit the DeltaNet shape gdn_shape declared");
    size_t conv_floats = (size_t)(a->kernel - 1) * C;
    if (!conv_ok(c, a->conv_w, C, a->kernel, "gdn") ||
        !state_fits(c, G, a->state_offset, conv_floats + (size_t)nv * dk * dv, "gdn"))
        return;
    conv(c, G, a->group, pith_vk_buf_addr(a->qkv), C, pith_vk_buf_addr(a->qkv), C, C, a->conv_w, NULL, a->kernel,
         CONV_SILU, a->state_offset);
    gdn_push p = {pith_vk_buf_addr(a->qkv), pith_vk_buf_addr(a->beta), pith_vk_buf_addr(a->alpha),
                  pith_vk_buf_addr(a->out), pith_vk_weight_addr(a->dt_bias), pith_vk_weight_addr(a->ssm_a),
                  c->step.addr, G->state.addr, (uint32_t)C, (uint32_t)a->beta->cols, (uint32_t)a->out->cols,
                  (uint32_t)nk, (uint32_t)nv, (uint32_t)dk, (uint32_t)dv, a->qk_tiled ? 1u : 0u, (uint32_t)a->group,
                  (uint32_t)(G->meta.state_bytes / sizeof(float)), (uint32_t)(a->state_offset + conv_floats),
                  (uint32_t)c->b->n_seqs};
    pith_vk_record(c, PITH_VK_SH_gdn, &p, sizeof p, (uint32_t)c->b->n_seqs * (uint32_t)nv, 1);
}

void pith_vk_gated_norm(pith_backend *be, const pith_be_gated_norm_args *a, int n) {
    pith_vk *c = pith_vk_of(be);
    if (!pith_vk_recording(c) || n == 0) return;
    int hv = a->w->cols;
    if (hv < 1 || a->x->cols % hv || a->z->cols < a->x->cols)
        return pith_vk_fail(c, "Vulkan: gated_norm's rows are not whole heads of its weights");
    gnorm(c, a->x, a->x->cols, pith_vk_buf_addr(a->z), a->z->cols, a->w, hv, 1, a->eps, 0, n);
}

typedef struct {
    uint64_t a, qg;
    uint32_t a_ld, qg_ld, hd, heads, mode, count;
} gate_push;

void pith_vk_gate(pith_vk *c, const pith_buf *a, const pith_buf *qg, int mode, int n) {
    int hd = c->shape.head_dim, nh = c->shape.n_heads;
    size_t count = (size_t)n * nh * hd;
    if (count > UINT32_MAX) return pith_vk_fail(c, "Vulkan: a gated attention over more than 2^32 values");
    gate_push p = {pith_vk_buf_addr(a), pith_vk_buf_addr(qg), (uint32_t)a->cols, (uint32_t)qg->cols, (uint32_t)hd,
                   (uint32_t)nh,
                   (uint32_t)mode, (uint32_t)count};
    pith_vk_record(c, PITH_VK_SH_attn_gate, &p, sizeof p, (uint32_t)((count + 255) / 256), 1);
}

void pith_vk_gated_qkv(pith_backend *be, const pith_be_gated_qkv_args *a, int n) {
    pith_vk *c = pith_vk_of(be);
    if (!pith_vk_recording(c) || n == 0) return;
    int hd = c->shape.head_dim, nh = c->shape.n_heads;
    if (!c->has_shape || (a->q && (a->qg->cols < 2 * nh * hd || a->q->cols < nh * hd)))
        return pith_vk_fail(c, "Vulkan: gated_qkv's buffers do not fit the attention shape");
    if (!a->q_norm != !a->k_norm)
        return pith_vk_fail(c, "Vulkan: gated_qkv with a query norm and no key norm, or the reverse");
    if (a->q) pith_vk_gate(c, a->q, a->qg, 0, n); /* no query: K and V alone (the MTP head's forward) */
    /* then the ordinary per-head QK norm, RoPE and KV store, on the query now in q */
    const pith_be_qkv_args q = {.q = a->q, .k = a->k, .v = (pith_buf *)a->v,
                                .qk_norm = a->q_norm ? PITH_QK_NORM_HEAD : PITH_QK_NORM_NONE,
                                .q_norm = a->q_norm, .k_norm = a->k_norm, .eps = a->eps, .rope_cs = a->rope_cs,
                                .rope_style = a->rope_style, .group = a->group, .layer_index = a->layer_index};
    be->vt->qkv(be, &q, n);
}

void pith_vk_attn_gate(pith_backend *be, const pith_be_attn_gate_args *a, int n) {
    pith_vk *c = pith_vk_of(be);
    if (!pith_vk_recording(c) || n == 0) return;
    int hd = c->shape.head_dim, nh = c->shape.n_heads;
    if (!c->has_shape || a->qg->cols < 2 * nh * hd || a->att->cols < nh * hd)
        return pith_vk_fail(c, "Vulkan: attn_gate's buffers do not fit the attention shape");
    pith_vk_gate(c, a->att, a->qg, 1, n);
}
