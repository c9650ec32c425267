/* The Vulkan backend's ops (backend.h) as compute dispatches (vk.h says how a step runs and replays).
 *
 * Weights keep the file's blocks as they are: every GGUF block is a whole number of 16-bit words, and
 * the shaders decode them (shaders/dequant.glsl). Vectors are float32. Not here: DeepSeek's MLA (its
 * vtable entries are NULL; the model refuses to load here). Recurrent state and the hybrids' mixers are
 * vk_recurrent.c's, mixture-of-experts layers vk_moe.c's, the MTP head's vk_mtp.c's. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/batch_check.h"
#include "backend/vulkan/vk.h"

/* dequant.glsl's WT_* for a file type, or -1 */
static int wtype_of(pith_dtype t) {
    switch (t) {
    case PITH_F32: return 0;
    case PITH_F16: return 1;
    case PITH_BF16: return 2;
    case PITH_Q8_0: return 3;
    case PITH_Q4_0: return 4;
    case PITH_Q4_K: return 5;
    case PITH_Q5_K: return 6;
    case PITH_Q6_K: return 7;
    case PITH_MXFP4: return 8;
    case PITH_IQ4_NL: return 9;
    case PITH_IQ4_XS: return 10;
    default: return -1;
    }
}

int pith_vk_kvtype(pith_dtype t) {
    switch (t) {
    case PITH_F32: return 0;
    case PITH_F16: return 1;
    case PITH_BF16: return 2;
    case PITH_Q8_0: return 3;
    default: return -1;
    }
}

/* An op that cannot record fails the step at its head (ops return nothing): the first reason is kept. */
static void op_fail(pith_vk *c, const pith_err *e) {
    if (c->op_failed++) return;
    snprintf(c->op_err, sizeof c->op_err, "%s", e->msg);
}

static void op_failf(pith_vk *c, const char *msg) {
    pith_err e;
    pith_errf(&e, "%s", msg);
    op_fail(c, &e);
}

/* Whether an op should record now: inside a recorded step (a replayed step records nothing). */
static bool recording(pith_vk *c) {
    if (c->replaying) return false;
    if (!c->recording) {
        op_failf(c, "Vulkan: an op outside a step");
        return false;
    }
    return !c->op_failed;
}

static void dispatch(pith_vk *c, pith_vk_shader s, const void *push, uint32_t size, uint32_t gx, uint32_t gy) {
    pith_err e;
    if (pith_vk_dispatch(c, c->cmd, s, push, size, gx, gy, &e)) op_fail(c, &e);
}

/* the helpers other files of the backend record through (vk.h) */
bool pith_vk_recording(pith_vk *c) { return recording(c); }
void pith_vk_fail(pith_vk *c, const char *msg) { op_failf(c, msg); }
void pith_vk_record(pith_vk *c, pith_vk_shader s, const void *push, uint32_t size, uint32_t gx, uint32_t gy) {
    dispatch(c, s, push, size, gx, gy);
}

static VkDeviceAddress buf_addr(const pith_buf *b) { return ((const vk_buf *)b)->mem.addr; }
static const vk_weight *wt(const pith_weight *w) { return w->impl; }

/* ---- weights ---- */

static int add_weight(pith_vk *c, vk_weight *w, pith_weight **out, pith_err *err) {
    vk_weight **grown = realloc(c->weights, (size_t)(c->n_weights + 1) * sizeof *grown);
    if (!grown) {
        pith_vk_free(c, &w->mem);
        free(w->owned);
        free(w);
        return pith_errf(err, "out of memory");
    }
    c->weights = grown;
    w->w.id = c->n_weights;
    w->w.impl = w;
    c->weights[c->n_weights++] = w;
    *out = &w->w;
    return 0;
}

static int upload_matrix(pith_backend *be, const pith_tensor *t, const char *name, pith_weight **out, pith_err *err) {
    pith_vk *c = pith_vk_of(be);
    int type = wtype_of(t->type);
    if (type < 0)
        return pith_errf(err, "tensor %s: type %s is not on the Vulkan backend yet (F32, F16, BF16, Q8_0, Q4_0, Q4_K, "
                              "Q5_K, Q6_K, MXFP4, IQ4_NL and IQ4_XS are; --device cpu runs every type)", name, pith_dtype_name(t->type));
    if (t->ne[2] != 1 || t->ne[3] != 1 || t->ne[0] <= 0 || t->ne[1] <= 0 || t->ne[0] > INT32_MAX / 4 ||
        t->ne[1] > INT32_MAX / 4)
        return pith_errf(err, "tensor %s: expected a 2-D matrix", name);
    size_t rb = pith_dtype_row_bytes(t->type, t->ne[0]);
    if (!rb || rb % 2)
        return pith_errf(err, "tensor %s: row length %lld is not a multiple of the %s block size", name,
                         (long long)t->ne[0], pith_dtype_name(t->type));
    if (!t->data || t->nbytes / rb < (size_t)t->ne[1]) return pith_errf(err, "tensor %s: data is shorter than its shape", name);
    /* the shaders read rows 32 values at a time: a float row of another length is padded with zeros */
    int64_t padded = (t->ne[0] + 31) / 32 * 32;
    size_t prb = pith_dtype_row_bytes(t->type, padded), bytes = prb * (size_t)t->ne[1];
    uint8_t *pad = NULL;
    if (prb != rb) {
        if (!(pad = calloc(t->ne[1], prb))) return pith_errf(err, "out of memory");
        for (int64_t r = 0; r < t->ne[1]; r++) memcpy(pad + r * prb, (const uint8_t *)t->data + r * rb, rb);
    }
    vk_weight *w = calloc(1, sizeof *w);
    if (!w) {
        free(pad);
        return pith_errf(err, "out of memory");
    }
    if (pith_vk_alloc(c, bytes, false, &w->mem, err) || pith_vk_upload(c, &w->mem, 0, pad ? pad : t->data, bytes, err)) {
        pith_vk_free(c, &w->mem);
        free(w);
        free(pad);
        return pith_err_prefix(err, "tensor %s (%.1f MiB)", name, (double)bytes / (1 << 20));
    }
    free(pad);
    w->row_words = (uint32_t)(prb / 2);
    w->wtype = type;
    w->w.rows = (int)t->ne[1], w->w.cols = (int)t->ne[0], w->w.type = t->type;
    return add_weight(c, w, out, err);
}

static int vk_matrix(pith_backend *be, const pith_tensor *t, const char *name, pith_weight **out, pith_err *err) {
    return upload_matrix(be, t, name, out, err);
}

static int vk_table(pith_backend *be, const pith_tensor *t, const char *name, pith_weight **out, pith_err *err) {
    return upload_matrix(be, t, name, out, err);
}

static int vk_vector(pith_backend *be, float *data, int n, pith_weight **out, pith_err *err) {
    pith_vk *c = pith_vk_of(be);
    vk_weight *w = calloc(1, sizeof *w);
    if (!w) {
        free(data);
        return pith_errf(err, "out of memory");
    }
    w->owned = data;
    if (pith_vk_alloc(c, (size_t)n * sizeof(float), false, &w->mem, err) ||
        pith_vk_upload(c, &w->mem, 0, data, (size_t)n * sizeof(float), err)) {
        pith_vk_free(c, &w->mem);
        free(data);
        free(w);
        return -1;
    }
    w->w.rows = 1, w->w.cols = n, w->w.vector = true, w->w.type = PITH_F32, w->w.vec = data;
    return add_weight(c, w, out, err);
}

static int vk_moe_place(pith_backend *be, char *what, size_t what_size, pith_err *err) {
    (void)be, (void)err;
    if (what_size) what[0] = 0;
    return 0;
}

static int vk_attn_shape(pith_backend *be, const pith_be_attn_shape *s, pith_err *err) {
    pith_vk *c = pith_vk_of(be);
    if (c->has_shape) return pith_errf(err, "the attention shape is set once");
    if (pith_vk_check_shape(s, err)) return -1;
    c->shape = *s;
    c->has_shape = true;
    return 0;
}

/* ---- buffers ---- */

static void drop_recorded(pith_vk *c) {
    for (int i = 0; i < c->n_rec; i++) vkFreeCommandBuffers(c->dev, c->pool, 1, &c->rec[i].cmd);
    c->n_rec = 0;
}

static pith_buf *vk_buffer(pith_backend *be, int cols, pith_err *err) {
    pith_vk *c = pith_vk_of(be);
    vk_buf **grown = realloc(c->bufs, (size_t)(c->n_bufs + 1) * sizeof *grown);
    vk_buf *b = calloc(1, sizeof *b);
    if (grown) c->bufs = grown;
    if (!grown || !b || cols < 1) {
        free(b);
        pith_errf(err, cols < 1 ? "a buffer of %d columns" : "out of memory", cols);
        return NULL;
    }
    b->b.id = c->n_bufs;
    b->b.cols = cols;
    if (c->cap > 0 && pith_vk_alloc(c, (size_t)c->cap * cols * sizeof(float), false, &b->mem, err)) {
        free(b);
        return NULL;
    }
    c->bufs[c->n_bufs++] = b;
    return &b->b;
}

static int vk_reserve(pith_backend *be, int n, pith_err *err) {
    pith_vk *c = pith_vk_of(be);
    if (n <= c->cap) return 0;
    if (c->cap < (1 << 28) && n < c->cap + c->cap / 2) n = c->cap + c->cap / 2;
    drop_recorded(c); /* their addresses die with the buffers */
    for (int i = 0; i < c->n_bufs; i++) pith_vk_free(c, &c->bufs[i]->mem);
    c->cap = 0;
    for (int i = 0; i < c->n_bufs; i++)
        if (pith_vk_alloc(c, (size_t)n * c->bufs[i]->b.cols * sizeof(float), false, &c->bufs[i]->mem, err))
            return pith_err_prefix(err, "activations for a batch of %d tokens", n);
    c->cap = n;
    return 0;
}

/* ---- memory ---- */

static void vk_mem_free(pith_backend *be) {
    pith_vk *c = pith_vk_of(be);
    drop_recorded(c); /* they hold the pools' addresses */
    for (int g = 0; g < c->n_groups; g++)
        pith_vk_free(c, &c->groups[g].k), pith_vk_free(c, &c->groups[g].v), pith_vk_free(c, &c->groups[g].state);
    memset(c->groups, 0, sizeof c->groups);
    memset(&c->meta, 0, sizeof c->meta);
    c->n_groups = 0;
    c->mem_allocated = false;
}

static int vk_mem_alloc(pith_backend *be, const pith_mem_spec *spec, const pith_mem_layout *lay, pith_err *err) {
    pith_vk *c = pith_vk_of(be);
    if (c->mem_allocated) return pith_errf(err, "the model's memory is already allocated (one engine at a time)");
    if (lay->n_groups != spec->n_groups || spec->n_groups > PITH_MAX_MEM_GROUPS)
        return pith_errf(err, "a memory layout of %d groups for a spec of %d", lay->n_groups, spec->n_groups);
    for (int g = 0; g < spec->n_groups; g++) {
        const pith_mem_group *mg = &spec->groups[g];
        if (mg->kind == PITH_MEM_RECURRENT) continue; /* vk_recurrent.c */
        if (pith_vk_kvtype(lay->type[g]) < 0) return pith_errf(err, "Vulkan: a KV cache of %s", pith_dtype_name(lay->type[g]));
        if (mg->k_dim != mg->v_dim)
            return pith_errf(err, "Vulkan: K and V of different widths (%d, %d)", mg->k_dim, mg->v_dim);
        int g_kv, g_hd;
        pith_vk_group_shape(c, g, &g_kv, &g_hd);
        if (lay->type[g] == PITH_Q8_0 && c->has_shape && g_hd % 32)
            return pith_errf(err, "a Q8_0 KV cache needs a head dimension that is a multiple of 32, not %d", g_hd);
    }
    c->n_groups = spec->n_groups;
    c->meta.n_groups = spec->n_groups;
    for (int g = 0; g < spec->n_groups; g++) {
        const pith_mem_group *mg = &spec->groups[g];
        pith_kv_cache *m = &c->groups[g].meta;
        if (mg->kind == PITH_MEM_RECURRENT) {
            if (pith_vk_recurrent_alloc(c, g, mg, lay->n_blocks[g], err)) {
                vk_mem_free(be);
                return -1;
            }
            c->meta.groups[g] = *m;
            continue;
        }
        *m = (pith_kv_cache){.kind = mg->kind, .n_layers = mg->n_layers, .k_dim = mg->k_dim, .v_dim = mg->v_dim,
                             .block_size = lay->block_size, .n_blocks = lay->n_blocks[g], .type = lay->type[g]};
        size_t bytes = pith_kv_bytes(m->type, pith_kv_k_offset(m, m->n_layers, 0));
        if (pith_vk_alloc(c, bytes, false, &c->groups[g].k, err) || pith_vk_alloc(c, bytes, false, &c->groups[g].v, err) ||
            pith_vk_fill_zero(c, &c->groups[g].k, err) || pith_vk_fill_zero(c, &c->groups[g].v, err)) {
            pith_err_prefix(err, "the KV pool of group %d (%d blocks of %d tokens, K and V %.1f MiB each)", g, m->n_blocks,
                            m->block_size, (double)bytes / (1 << 20));
            vk_mem_free(be);
            return -1;
        }
        c->meta.groups[g] = *m;
    }
    c->mem_allocated = true;
    return 0;
}

static bool vk_mem_allocated(const pith_backend *be) { return ((const pith_vk *)be)->mem_allocated; }

static int vk_copy_blocks(pith_backend *be, int g, const int32_t *src, const int32_t *dst, int n, pith_err *err) {
    pith_vk *c = pith_vk_of(be);
    if (!c->mem_allocated || g < 0 || g >= c->n_groups) return pith_errf(err, "copy_blocks: no group %d", g);
    const pith_kv_cache *m = &c->groups[g].meta;
    if (m->kind == PITH_MEM_RECURRENT) return pith_vk_recurrent_copy(c, g, src, dst, n, err);
    for (int i = 0; i < n; i++)
        if (src[i] < 0 || src[i] >= m->n_blocks || dst[i] < 0 || dst[i] >= m->n_blocks)
            return pith_errf(err, "copy_blocks: block %d -> %d outside the pool of %d", src[i], dst[i], m->n_blocks);
    VkBufferCopy *r = malloc((size_t)(n > 0 ? n : 1) * m->n_layers * sizeof *r);
    if (!r) return pith_errf(err, "out of memory");
    size_t unit = pith_kv_bytes(m->type, (size_t)m->block_size * m->k_dim);
    uint32_t k = 0;
    for (int l = 0; l < m->n_layers; l++)
        for (int i = 0; i < n; i++)
            r[k++] = (VkBufferCopy){pith_kv_bytes(m->type, pith_kv_k_offset(m, l, src[i])),
                                    pith_kv_bytes(m->type, pith_kv_k_offset(m, l, dst[i])), unit};
    int rc = pith_vk_copy_regions(c, &c->groups[g].k, &c->groups[g].k, r, k, err) ||
             pith_vk_copy_regions(c, &c->groups[g].v, &c->groups[g].v, r, k, err);
    free(r);
    return rc ? -1 : 0;
}

/* ---- the step ---- */

int pith_vk_grow(pith_vk *c, vk_mem *m, size_t bytes, bool host, pith_err *err) {
    if (m->buf && m->size >= bytes) return 0;
    drop_recorded(c); /* they hold its address */
    pith_vk_free(c, m);
    return pith_vk_alloc(c, bytes + bytes / 2, host, m, err);
}

int pith_vk_grow_host(pith_vk *c, vk_mem *m, size_t bytes, pith_err *err) { return pith_vk_grow(c, m, bytes, true, err); }

static bool same_shape(const vk_recorded *r, const pith_vk *c) {
    const pith_batch *b = c->b;
    /* the block tables' width is not part of the shape: the shaders read it from the step buffer, so a
     * decode step keeps replaying as its sequences grow past a block */
    return r->n_tokens == b->n_tokens && r->n_seqs == b->n_seqs && r->n_kept == c->n_kept &&
           r->n_hidden == c->n_hidden && r->n_logits == c->n_logits && r->draft_steps == c->draft_steps &&
           r->draft_logits == (c->draft_logits_out != NULL);
}

static int begin_cmd(pith_vk *c, VkCommandBuffer *cmd, pith_err *err) {
    VkResult r;
    if (!*cmd) {
        VkCommandBufferAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                          .commandPool = c->pool, .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                          .commandBufferCount = 1};
        if ((r = vkAllocateCommandBuffers(c->dev, &ai, cmd)) != VK_SUCCESS)
            return pith_errf(err, "Vulkan: vkAllocateCommandBuffers: %s", pith_vk_result(r));
    }
    VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    if ((r = vkBeginCommandBuffer(*cmd, &bi)) != VK_SUCCESS)
        return pith_errf(err, "Vulkan: vkBeginCommandBuffer: %s", pith_vk_result(r));
    return 0;
}

void pith_vk_step_reset(pith_vk *c) {
    if (c->recording) { /* a step that never reached its head (an op's error): dropped */
        vkEndCommandBuffer(c->cmd);
        if (c->keep_recording) vkFreeCommandBuffers(c->dev, c->pool, 1, &c->cmd);
    }
    c->cmd = VK_NULL_HANDLE;
    c->recording = c->replaying = false;
    c->op_failed = 0;
    c->draft_steps = 0;
    c->draft_out = NULL, c->draft_logits_out = NULL;
}

size_t pith_vk_step_ints(const pith_vk *c, const pith_batch *b) {
    size_t ints = VK_ST_HEADER + 3 * (size_t)b->n_tokens;
    for (int g = 0; g < b->n_groups; g++)
        ints += c->groups[g].meta.kind == PITH_MEM_RECURRENT ? pith_vk_recurrent_step_ints(b)
                                                             : (size_t)b->n_tokens + (size_t)b->n_seqs * b->mem[g].max_blocks;
    return ints;
}

size_t pith_vk_step_put(const pith_vk *c, const pith_batch *b) {
    int32_t *s = c->step.map;
    int n = b->n_tokens;
    memset(s, 0, VK_ST_HEADER * sizeof *s);
    size_t at = VK_ST_HEADER;
#define PUT(slot, src, count)                                                                                          \
    do {                                                                                                               \
        s[slot] = (int32_t)at;                                                                                         \
        if (src) memcpy(s + at, src, (size_t)(count) * sizeof(int32_t));                                              \
        else memset(s + at, 0xFF, (size_t)(count) * sizeof(int32_t));                                                 \
        at += (size_t)(count);                                                                                         \
    } while (0)
    s[VK_ST_N_TOKENS] = n, s[VK_ST_N_SEQS] = b->n_seqs;
    PUT(VK_ST_TOKENS, b->tokens, n);
    PUT(VK_ST_POSITIONS, b->positions, n);
    PUT(VK_ST_SEQ, b->seq, n);
    for (int g = 0; g < b->n_groups; g++) {
        if (c->groups[g].meta.kind == PITH_MEM_RECURRENT) {
            at = pith_vk_recurrent_step_put(b, g, s, at);
            continue;
        }
        PUT(VK_ST_GROUP + 4 * g, b->mem[g].slots, n);
        PUT(VK_ST_GROUP + 4 * g + 1, b->mem[g].block_tables, (size_t)b->n_seqs * b->mem[g].max_blocks);
        s[VK_ST_GROUP + 4 * g + 2] = b->mem[g].max_blocks;
    }
#undef PUT
    return at;
}

int pith_vk_step_begin(pith_vk *c, pith_err *err) {
    c->steps++;
    for (int i = 0; c->replay && i < c->n_rec; i++)
        if (same_shape(&c->rec[i], c)) {
            c->replaying = true;
            c->cmd = c->rec[i].cmd;
            c->rec[i].uses++;
            c->replays++;
            return 0;
        }
    c->keep_recording = c->replay && c->n_rec < VK_MAX_RECORDED;
    c->cmd = VK_NULL_HANDLE;
    if (!c->keep_recording) c->cmd = c->scratch_cmd;
    if (begin_cmd(c, &c->cmd, err)) return -1;
    if (!c->keep_recording) c->scratch_cmd = c->cmd;
    c->recording = true;
    return pith_vk_profile_begin(c, c->cmd, err);
}

static int vk_set_step(pith_backend *be, const pith_batch *b, const pith_mem_spec *spec, int n_vocab, float *logits,
                       pith_err *err) {
    pith_vk *c = pith_vk_of(be);
    pith_vk_step_reset(c);
    if (!c->mem_allocated && spec->n_groups > 0) return pith_errf(err, "the model's memory is not allocated");
    if (b->embed_rows || b->attend_last || b->rope_pos) return pith_errf(err, "Vulkan: image inputs are not supported on this device yet");
    if (pith_batch_check(b, spec, &c->meta, n_vocab, err) || vk_reserve(be, b->n_tokens, err)) return -1;
    int n = b->n_tokens, n_kept = 0, n_hidden = 0, n_logits = 0;
    for (int t = 0; t < n; t++) {
        bool wl = b->want_logits[t] != 0, wh = b->want_hidden && b->want_hidden[t];
        n_kept += wl || wh, n_hidden += wh, n_logits += wl;
    }
    size_t ints = pith_vk_step_ints(c, b) + n_kept + n_hidden + n_logits;
    int widest = 1;
    for (int i = 0; i < c->n_bufs; i++)
        if (c->bufs[i]->b.cols > widest) widest = c->bufs[i]->b.cols;
    if (pith_vk_grow_host(c, &c->step, ints * sizeof(int32_t), err) ||
        pith_vk_grow_host(c, &c->logits, (size_t)(n_logits > 0 ? n_logits : 1) * n_vocab * sizeof(float), err) ||
        pith_vk_grow_host(c, &c->hidden, (size_t)(n_hidden > 0 ? n_hidden : 1) * widest * sizeof(float), err))
        return -1;
    int32_t *s = c->step.map;
    size_t at = pith_vk_step_put(c, b);
    /* the kept rows, then (by their index among the kept) the hidden rows and the logits rows */
    s[VK_ST_N_KEPT] = n_kept, s[VK_ST_KEPT] = (int32_t)at;
    s[VK_ST_N_HIDDEN] = n_hidden, s[VK_ST_HIDDEN_SRC] = (int32_t)(at + n_kept);
    s[VK_ST_N_LOGITS] = n_logits, s[VK_ST_LOGIT_SRC] = (int32_t)(at + n_kept + n_hidden);
    for (int t = 0, r = 0, h = 0, l = 0; t < n; t++) {
        bool wl = b->want_logits[t] != 0, wh = b->want_hidden && b->want_hidden[t];
        if (!wl && !wh) continue;
        if (wh) s[at + n_kept + h++] = r;
        if (wl) s[at + n_kept + n_hidden + l++] = r;
        s[at + r++] = t;
    }
    c->b = b, c->out_logits = logits, c->n_vocab = n_vocab;
    c->n_kept = n_kept, c->n_hidden = n_hidden, c->n_logits = n_logits;
    return pith_vk_step_begin(c, err);
}

/* ---- ops ---- */

static void vk_embed(pith_backend *be, const pith_weight *table, float scale, pith_buf *out, int n) {
    pith_vk *c = pith_vk_of(be);
    if (!recording(c)) return;
    const vk_weight *w = wt(table);
    if (table->cols != out->cols) return op_failf(c, "Vulkan: an embedding wider than its buffer");
    vk_embed_push p = {w->mem.addr, buf_addr(out), c->step.addr, w->row_words, (uint32_t)table->cols, (uint32_t)out->cols,
                    (uint32_t)n, scale};
    dispatch(c, PITH_VK_SH_embed_f32 + w->wtype, &p, sizeof p, (uint32_t)n, 1);
}

static void vk_rope_tables(pith_backend *be, const pith_rope *r, pith_buf *cs, int n) {
    pith_vk *c = pith_vk_of(be);
    if (!recording(c)) return;
    pith_err e;
    const vk_rope *k = pith_vk_rope(c, r, &e); /* made at the first step that names it, kept */
    if (!k) return op_fail(c, &e);
    if (cs->cols < 2 * r->half) return op_failf(c, "Vulkan: RoPE tables wider than their buffer");
    vk_rope_push p = {k->freq.addr, buf_addr(cs), c->step.addr, (uint32_t)r->half, (uint32_t)cs->cols, (uint32_t)n,
                   (float)r->mscale, 0};
    dispatch(c, PITH_VK_SH_rope, &p, sizeof p, ((uint32_t)n * r->half + 63) / 64, 1);
}

typedef struct {
    uint64_t x, w, o;
    uint32_t x_ld, o_ld, cols, mode, n;
    float eps;
} norm_push;

static void norm(pith_vk *c, const pith_buf *x, const pith_weight *w, float eps, const pith_buf *o, int mode, int n) {
    if (w->cols != x->cols) return op_failf(c, "Vulkan: a norm's weights and rows differ in width");
    norm_push p = {buf_addr(x), wt(w)->mem.addr, buf_addr(o), (uint32_t)x->cols, (uint32_t)o->cols, (uint32_t)x->cols,
                   (uint32_t)mode, (uint32_t)n, eps};
    dispatch(c, PITH_VK_SH_rmsnorm, &p, sizeof p, (uint32_t)n, 1);
}

static void vk_rmsnorm(pith_backend *be, const pith_buf *x, const pith_weight *w, float eps, pith_buf *out, int n) {
    pith_vk *c = pith_vk_of(be);
    if (recording(c)) norm(c, x, w, eps, out, 0, n);
}

static void vk_norm_add(pith_backend *be, pith_buf *x, pith_buf *y, const pith_weight *w, float eps, int n) {
    pith_vk *c = pith_vk_of(be);
    if (recording(c)) norm(c, y, w, eps, x, 1, n);
}

typedef struct {
    uint64_t w, x, o;
    uint32_t row_words, rows, cols, x_ld, o_ld, n, accumulate, rows_per_group;
} mm_push;

/* The decode kernel keeps a sum per token for up to this many tokens (matmul.comp: NT). */
#define MATVEC_MAX_TOKENS 8

static void matmul_one(pith_vk *c, const pith_buf *in, const pith_weight *w, VkDeviceAddress out, int out_ld, bool acc,
                       int n) {
    const vk_weight *v = wt(w);
    uint32_t rpg = 64 / c->subgroup; /* a subgroup per row */
    mm_push p = {v->mem.addr, buf_addr(in), out, v->row_words, (uint32_t)w->rows, (uint32_t)w->cols, (uint32_t)in->cols,
                 (uint32_t)out_ld, (uint32_t)n, acc, rpg};
    if (c->matmul_kind == VK_MATMUL_PER_ROW || (c->matmul_kind == VK_MATMUL_AUTO && c->cpu_device))
        dispatch(c, PITH_VK_SH_mmrow_f32 + v->wtype, &p, sizeof p, ((uint32_t)w->rows + 63) / 64, (uint32_t)n);
    else if (n <= MATVEC_MAX_TOKENS)
        dispatch(c, PITH_VK_SH_matvec_f32 + v->wtype, &p, sizeof p, ((uint32_t)w->rows + rpg - 1) / rpg, 1);
    else
        dispatch(c, PITH_VK_SH_mm_f32 + v->wtype, &p, sizeof p, ((uint32_t)w->rows + 63) / 64, ((uint32_t)n + 63) / 64);
}

void pith_vk_matmul_rows(pith_vk *c, const pith_buf *in, const pith_weight *w, VkDeviceAddress out, int out_ld, int n) {
    matmul_one(c, in, w, out, out_ld, false, n);
}

static int vk_matmul(pith_backend *be, const pith_buf *in, const pith_be_mm *outs, int n_outs, int n, pith_err *err) {
    pith_vk *c = pith_vk_of(be);
    if (n_outs < 1 || n_outs > PITH_BE_MAX_MM) return pith_errf(err, "%d products in one matmul", n_outs);
    for (int i = 0; i < n_outs; i++)
        if (outs[i].w->cols != in->cols || outs[i].w->rows > outs[i].out->cols)
            return pith_errf(err, "matmul: a [%d x %d] weight does not take rows of %d into rows of %d", outs[i].w->rows,
                             outs[i].w->cols, in->cols, outs[i].out->cols);
    if (n == 0 || !recording(c)) return 0;
    for (int i = 0; i < n_outs; i++)
        matmul_one(c, in, outs[i].w, buf_addr(outs[i].out), outs[i].out->cols, outs[i].accumulate, n);
    return 0;
}

typedef struct {
    uint64_t a, b;
    uint32_t count, cols, op;
    float s, s2;
} elt_push;

enum { OP_ADD_BIAS, OP_SCALE, OP_SCALE_ADD, OP_ZERO, OP_RELU2, OP_SILU_MUL, OP_GELU_MUL, OP_LOGITS };

static void eltwise(pith_vk *c, VkDeviceAddress a, VkDeviceAddress b, size_t count, int cols, int op, float s, float s2) {
    if (count == 0) return;
    if (count > UINT32_MAX) return op_failf(c, "Vulkan: an elementwise op over more than 2^32 values");
    elt_push p = {a, b, (uint32_t)count, (uint32_t)cols, (uint32_t)op, s, s2};
    dispatch(c, PITH_VK_SH_eltwise, &p, sizeof p, (uint32_t)((count + 255) / 256), 1);
}

static void bias(pith_vk *c, pith_buf *y, const pith_weight *b, int n) {
    if (b->cols > y->cols) return op_failf(c, "Vulkan: a bias wider than its rows");
    if (b->cols != y->cols) return op_failf(c, "Vulkan: a bias narrower than its rows");
    eltwise(c, buf_addr(y), wt(b)->mem.addr, (size_t)n * y->cols, y->cols, OP_ADD_BIAS, 0, 0);
}

static void vk_qkv(pith_backend *be, const pith_be_qkv_args *a, int n) {
    pith_vk *c = pith_vk_of(be);
    if (!recording(c)) return;
    if (!c->has_shape || a->group < 0 || a->group >= c->n_groups) return op_failf(c, "Vulkan: qkv without its memory");
    const pith_kv_cache *m = &c->groups[a->group].meta;
    int hd, nh = c->shape.n_heads, nkv;
    pith_vk_group_shape(c, a->group, &nkv, &hd);
    if ((!a->q && !a->k) || (a->q && a->q->cols < nh * hd) ||
        (a->k && (a->k->cols < nkv * hd || !a->v || a->v->cols < nkv * hd)) || m->k_dim != nkv * hd ||
        a->layer_index < 0 || a->layer_index >= m->n_layers)
        return op_failf(c, "Vulkan: qkv buffers do not fit the attention shape");
    if (a->bq && a->q) bias(c, a->q, a->bq, n);
    if (a->bq && a->k) bias(c, a->k, a->bk, n), bias(c, a->v, a->bv, n);
    /* A norm over the whole projection reads every head: it runs first, by rows, since qkv.comp's
     * workgroups (one per head) write their heads back in place */
    if (a->qk_norm == PITH_QK_NORM_ALL && a->q) norm(c, a->q, a->q_norm, a->eps, a->q, 0, n);
    if (a->qk_norm == PITH_QK_NORM_ALL && a->k) norm(c, a->k, a->k_norm, a->eps, a->k, 0, n);
    pith_err e; /* Gemma 4's V norm, before qkv.comp stores V */
    if (a->v_norm && a->k && pith_vk_head_norm(c, a->v, nkv, hd, a->eps, n, &e)) return op_fail(c, &e);
    if (!a->k) nkv = 0; /* Q alone (KV sharing): no K heads, nothing stored */
    if (!a->q) nh = 0;  /* K and V alone (an MTP head's forward) */
    uint32_t flags = (uint32_t)(a->qk_norm == PITH_QK_NORM_HEAD ? 1 : 0) |
                     (a->rope_cs ? 8u : 0u) | (a->rope_style == PITH_ROPE_ADJACENT ? 16u : 0u) |
                     ((uint32_t)a->group << 8);
    vk_qkv_push p = {a->q ? buf_addr(a->q) : 0, a->k ? buf_addr(a->k) : 0, a->v ? buf_addr(a->v) : 0, a->q_norm ? wt(a->q_norm)->mem.addr : 0,
                  a->k_norm ? wt(a->k_norm)->mem.addr : 0, a->rope_cs ? buf_addr(a->rope_cs) : 0, c->step.addr,
                  pith_vk_layer_base(&c->groups[a->group].k, m, a->layer_index), pith_vk_layer_base(&c->groups[a->group].v, m, a->layer_index),
                  a->q ? (uint32_t)a->q->cols : 0, a->k ? (uint32_t)a->k->cols : 0, a->v ? (uint32_t)a->v->cols : 0, (uint32_t)hd,
                  (uint32_t)nh | (uint32_t)nkv << 16, (uint32_t)m->block_size, (uint32_t)m->k_dim, flags,
                  a->rope_cs ? (uint32_t)a->rope_cs->cols : 0, (uint32_t)n, a->eps};
    dispatch(c, PITH_VK_SH_qkv_f32 + pith_vk_kvtype(m->type), &p, sizeof p, (uint32_t)n * (uint32_t)(nh + nkv), 1);
}

static void vk_attention(pith_backend *be, const pith_be_attn *a, int n) {
    pith_vk *c = pith_vk_of(be);
    if (!recording(c)) return;
    if (!c->has_shape || a->group < 0 || a->group >= c->n_groups) return op_failf(c, "Vulkan: attention without its memory");
    const pith_kv_cache *m = &c->groups[a->group].meta;
    int hd, nh = c->shape.n_heads, nkv;
    pith_vk_group_shape(c, a->group, &nkv, &hd);
    if (a->layer_index < 0 || a->layer_index >= m->n_layers || a->out->cols < nh * hd)
        return op_failf(c, "Vulkan: attention buffers do not fit the attention shape");
    vk_attn_push p = {buf_addr(a->q), buf_addr(a->out), a->sinks ? wt(a->sinks)->mem.addr : 0,
                   pith_vk_layer_base(&c->groups[a->group].k, m, a->layer_index), pith_vk_layer_base(&c->groups[a->group].v, m, a->layer_index),
                   c->step.addr, (uint32_t)a->q->cols, (uint32_t)a->out->cols, (uint32_t)hd,
                   (uint32_t)nh | (uint32_t)nkv << 16, (uint32_t)m->block_size, (uint32_t)m->k_dim,
                   (uint32_t)(a->window > 0 ? a->window : 0), (a->sinks ? 1u : 0u) | ((uint32_t)a->group << 8),
                   (uint32_t)n, c->shape.scale, 0, 0, 0, 0, 0};
    dispatch(c, PITH_VK_SH_attn_f32 + pith_vk_kvtype(m->type), &p, offsetof(vk_attn_push, dk), (uint32_t)n * (uint32_t)nh, 1);
}

static void vk_glu(pith_backend *be, pith_glu kind, pith_buf *gate, const pith_buf *up, int n) {
    pith_vk *c = pith_vk_of(be);
    if (!recording(c)) return;
    if (gate->cols != up->cols) return op_failf(c, "Vulkan: a gated activation over rows of different widths");
    eltwise(c, buf_addr(gate), buf_addr(up), (size_t)n * gate->cols, gate->cols,
            kind == PITH_GLU_SILU ? OP_SILU_MUL : OP_GELU_MUL, 0, 0);
}

static void vk_add_bias(pith_backend *be, pith_buf *y, const pith_weight *b, int n) {
    pith_vk *c = pith_vk_of(be);
    if (recording(c)) bias(c, y, b, n);
}

static void vk_scale(pith_backend *be, pith_buf *y, float s, int n) {
    pith_vk *c = pith_vk_of(be);
    if (recording(c)) eltwise(c, buf_addr(y), 0, (size_t)n * y->cols, y->cols, OP_SCALE, s, 0);
}

static void vk_scale_add(pith_backend *be, pith_buf *x, const pith_buf *y, float s, int n) {
    pith_vk *c = pith_vk_of(be);
    if (!recording(c)) return;
    if (x->cols != y->cols) return op_failf(c, "Vulkan: scale_add over rows of different widths");
    eltwise(c, buf_addr(x), buf_addr(y), (size_t)n * x->cols, x->cols, OP_SCALE_ADD, s, 0);
}

typedef struct {
    uint64_t y, step;
    uint32_t count, cols, length;
    float beta;
} attn_temp_push;

static void vk_attn_temp(pith_backend *be, pith_buf *y, float beta, int length, int n) {
    pith_vk *c = pith_vk_of(be);
    if (!recording(c) || n == 0) return;
    if ((size_t)n * y->cols > UINT32_MAX) return op_failf(c, "Vulkan: an elementwise op over more than 2^32 values");
    attn_temp_push p = {buf_addr(y), c->step.addr, (uint32_t)n * (uint32_t)y->cols, (uint32_t)y->cols,
                        (uint32_t)(length > 0 ? length : 1), beta};
    dispatch(c, PITH_VK_SH_attn_temp, &p, sizeof p, (p.count + 255) / 256, 1);
}

static void vk_zero(pith_backend *be, pith_buf *y, int n) {
    pith_vk *c = pith_vk_of(be);
    if (recording(c)) eltwise(c, buf_addr(y), 0, (size_t)n * y->cols, y->cols, OP_ZERO, 0, 0);
}

static void vk_copy_cols(pith_backend *be, pith_buf *dst, const pith_buf *src, int col0, int n) {
    pith_vk *c = pith_vk_of(be);
    pith_err e;
    if (recording(c) && pith_vk_copy_cols(c, dst, src, col0, n, &e)) op_fail(c, &e);
}

static void vk_activation(pith_backend *be, pith_activation kind, pith_buf *y, int n) {
    pith_vk *c = pith_vk_of(be);
    if (kind != PITH_ACTIVATION_RELU2) { /* the vision encoders' GELU: they do not run here (no set_rows) */
        op_failf(c, "Vulkan: only the relu^2 activation is implemented");
        return;
    }
    if (recording(c)) eltwise(c, buf_addr(y), 0, (size_t)n * y->cols, y->cols, OP_RELU2, 0, 0);
}

typedef struct {
    uint64_t src, dst, step;
    uint32_t cols, src_ld, dst_ld, list, n;
} rows_push;

/* rows.comp KEEP: the rows the header's list names to the front of buf, in place */
static void compact(pith_vk *c, const pith_buf *buf, uint32_t count_slot, uint32_t list_slot) {
    rows_push p = {buf_addr(buf), 0, c->step.addr, (uint32_t)buf->cols, (uint32_t)buf->cols, 0, list_slot, count_slot};
    dispatch(c, PITH_VK_SH_keep_rows, &p, sizeof p, 1, 1);
}

static void vk_keep_rows(pith_backend *be, pith_buf *const *bufs, int n_bufs) {
    pith_vk *c = pith_vk_of(be);
    if (!recording(c)) return;
    for (int i = 0; i < n_bufs; i++) compact(c, bufs[i], VK_ST_N_KEPT, VK_ST_KEPT);
}

static void finish_recording(pith_vk *c) {
    vkEndCommandBuffer(c->cmd);
    c->recording = false;
    if (!c->keep_recording) return;
    if (c->op_failed) { /* never replay a step that failed */
        vkFreeCommandBuffers(c->dev, c->pool, 1, &c->cmd);
        c->cmd = VK_NULL_HANDLE;
        return;
    }
    vk_recorded *r = &c->rec[c->n_rec++];
    const pith_batch *b = c->b;
    memset(r, 0, sizeof *r);
    r->cmd = c->cmd;
    r->n_tokens = b->n_tokens, r->n_seqs = b->n_seqs, r->n_kept = c->n_kept, r->n_hidden = c->n_hidden;
    r->n_logits = c->n_logits;
    r->draft_steps = c->draft_steps, r->draft_logits = c->draft_logits_out != NULL;
}

int pith_vk_step_end(pith_vk *c, pith_err *err) {
    if (c->recording) finish_recording(c);
    if (c->op_failed) {
        c->replaying = false;
        return pith_errf(err, "%s", c->op_err);
    }
    if (!c->replaying && !c->cmd) return pith_errf(err, "Vulkan: a step's end outside a step");
    c->replaying = false;
    int rc = pith_vk_submit_wait(c, c->cmd, err);
    c->cmd = VK_NULL_HANDLE;
    if (rc) return -1;
    pith_vk_profile_end(c);
    return 0;
}

static int vk_head(pith_backend *be, const pith_be_head_args *h, int n_kept, int n_logits, int n_vocab, pith_err *err) {
    pith_vk *c = pith_vk_of(be);
    if (n_kept != c->n_kept || n_logits != c->n_logits || n_vocab != c->n_vocab || (n_logits && h->output->rows != n_vocab))
        c->op_failed = c->op_failed ? c->op_failed : (snprintf(c->op_err, sizeof c->op_err, "Vulkan: the head's counts "
                                                               "differ from the step's"), 1);
    if (n_kept && recording(c)) {
        int dim = h->x->cols;
        norm(c, h->x, h->norm, h->eps, h->scratch, 0, n_kept);
        if (c->n_hidden) {
            rows_push p = {buf_addr(h->scratch), c->hidden.addr, c->step.addr, (uint32_t)dim, (uint32_t)h->scratch->cols,
                           (uint32_t)dim, VK_ST_HIDDEN_SRC, (uint32_t)c->n_hidden};
            dispatch(c, PITH_VK_SH_gather_rows, &p, sizeof p, (uint32_t)c->n_hidden, 1);
        }
        if (n_logits) {
            compact(c, h->scratch, VK_ST_N_LOGITS, VK_ST_LOGIT_SRC);
            matmul_one(c, h->scratch, h->output, c->logits.addr, n_vocab, false, n_logits);
            if ((h->logit_scale > 0 && h->logit_scale != 1.0f) || h->softcap > 0)
                eltwise(c, c->logits.addr, 0, (size_t)n_logits * n_vocab, n_vocab, OP_LOGITS, h->logit_scale, h->softcap);
        }
    }
    if (c->draft_steps) c->op_failed = c->op_failed ? c->op_failed : (snprintf(c->op_err, sizeof c->op_err,
                                                                          "Vulkan: a head in an MTP draft"), 1);
    if (pith_vk_step_end(c, err)) return -1;
    if (n_logits) memcpy(c->out_logits, c->logits.map, (size_t)n_logits * n_vocab * sizeof(float));
    if (c->n_hidden && n_kept) {
        const float *src = c->hidden.map;
        memcpy(c->b->hidden, src, (size_t)c->n_hidden * h->x->cols * sizeof(float));
    }
    return 0;
}

/* ---- tests and debugging: rows in and out of a buffer, and the work recorded so far run now ---- */

static int vk_buf_write(pith_backend *be, pith_buf *b, int n, const float *src, pith_err *err) {
    pith_vk *c = pith_vk_of(be);
    if (n > c->cap) return pith_errf(err, "buf_write: %d rows into %d", n, c->cap);
    return pith_vk_upload(c, &((vk_buf *)b)->mem, 0, src, (size_t)n * b->cols * sizeof(float), err);
}

static int vk_buf_read(pith_backend *be, const pith_buf *b, int n, float *dst, pith_err *err) {
    pith_vk *c = pith_vk_of(be);
    if (n > c->cap) return pith_errf(err, "buf_read: %d rows of %d", n, c->cap);
    return pith_vk_download(c, &((const vk_buf *)b)->mem, 0, dst, (size_t)n * b->cols * sizeof(float), err);
}

static int vk_sync(pith_backend *be, pith_err *err) {
    pith_vk *c = pith_vk_of(be);
    if (!c->recording) return 0;
    if (c->op_failed) return pith_errf(err, "%s", c->op_err);
    VkResult r = vkEndCommandBuffer(c->cmd);
    if (r != VK_SUCCESS) return pith_errf(err, "Vulkan: vkEndCommandBuffer: %s", pith_vk_result(r));
    if (pith_vk_submit_wait(c, c->cmd, err)) return -1;
    /* the step goes on in the same command buffer, which is no longer a whole step to replay */
    if (c->keep_recording) {
        c->keep_recording = false;
        if (c->scratch_cmd) vkFreeCommandBuffers(c->dev, c->pool, 1, &c->scratch_cmd);
        c->scratch_cmd = c->cmd;
    }
    return begin_cmd(c, &c->cmd, err);
}

static void vk_destroy(pith_backend *be) {
    pith_vk *c = pith_vk_of(be);
    if (c->dev) vkDeviceWaitIdle(c->dev);
    pith_vk_profile_print(c);
    pith_vk_moe_free(c);
    vk_mem_free(be);
    drop_recorded(c);
    for (int i = 0; i < c->n_bufs; i++) pith_vk_free(c, &c->bufs[i]->mem), free(c->bufs[i]);
    free(c->bufs);
    for (int i = 0; i < c->n_weights; i++) {
        pith_vk_free(c, &c->weights[i]->mem);
        free(c->weights[i]->owned);
        free(c->weights[i]);
    }
    free(c->weights);
    for (int i = 0; i < c->n_ropes; i++) pith_vk_free(c, &c->ropes[i].freq);
    pith_vk_free(c, &c->step);
    pith_vk_free(c, &c->logits);
    pith_vk_free(c, &c->hidden);
    pith_vk_free(c, &c->draft_k), pith_vk_free(c, &c->draft_v), pith_vk_free(c, &c->draft_cs);
    pith_vk_free(c, &c->staging);
    pith_vk_close(c);
    free(c);
}

static const pith_backend_vt vk_vt = {
    .name = "vulkan", .destroy = vk_destroy, .matrix = vk_matrix, .table = vk_table, .vector = vk_vector,
    .moe_load = pith_vk_moe_load, .moe_place = vk_moe_place, .attn_shape = vk_attn_shape, .buffer = vk_buffer,
    .reserve = vk_reserve, .mem_alloc = vk_mem_alloc, .mem_free = vk_mem_free, .mem_allocated = vk_mem_allocated,
    .copy_blocks = vk_copy_blocks, .set_step = vk_set_step, .embed = vk_embed, .rope_tables = vk_rope_tables,
    .rmsnorm = vk_rmsnorm, .matmul = vk_matmul, .qkv = vk_qkv, .attention = vk_attention, .glu = vk_glu,
    .add_bias = vk_add_bias, .norm_add = vk_norm_add, .scale = vk_scale, .scale_add = vk_scale_add, .zero = vk_zero,
    .attn_temp = vk_attn_temp,
    .copy_cols = vk_copy_cols, .activation = vk_activation, .moe = pith_vk_moe, .keep_rows = vk_keep_rows, .head = vk_head,
    .short_conv = pith_vk_short_conv, .mamba2 = pith_vk_mamba2, .gdn_shape = pith_vk_gdn_shape, .gdn = pith_vk_gdn,
    .gated_norm = pith_vk_gated_norm, .gated_qkv = pith_vk_gated_qkv, .attn_gate = pith_vk_attn_gate,
    .set_draft = pith_vk_set_draft, .mtp_input = pith_vk_mtp_input, .mtp_save = pith_vk_mtp_save,
    .mtp_attention = pith_vk_mtp_attention, .mtp_logits = pith_vk_mtp_logits,
    .buf_write = vk_buf_write, .buf_read = vk_buf_read, .sync = vk_sync,
};

/* PITH_VK_MEMORY and PITH_VK_MATMUL (vk.h: heap_cap, matmul_kind), read before a device is opened. */
static int read_env(pith_vk *c, pith_err *err) {
    const char *cap = getenv("PITH_VK_MEMORY");
    if (cap && *cap) {
        char *end;
        unsigned long long v = strtoull(cap, &end, 10);
        int shift = *end == 'K' ? 10 : *end == 'M' ? 20 : *end == 'G' ? 30 : 0;
        if (shift) end++;
        if (*end || v == 0 || cap[0] == '-' || v > (~0ull >> shift))
            return pith_errf(err, "PITH_VK_MEMORY=%s: expected a size in bytes, or with K, M or G", cap);
        c->heap_cap = (VkDeviceSize)v << shift;
    }
    const char *mk = getenv("PITH_VK_MATMUL");
    if (mk && *mk && strcmp(mk, "auto")) {
        if (!strcmp(mk, "rows")) c->matmul_kind = VK_MATMUL_PER_ROW;
        else if (!strcmp(mk, "tiles")) c->matmul_kind = VK_MATMUL_TILED;
        else return pith_errf(err, "PITH_VK_MATMUL=%s: expected auto, rows or tiles", mk);
    }
    return 0;
}

int pith_backend_vulkan_create(int device, pith_backend **out, pith_err *err) {
    *out = NULL;
    pith_vk *c = calloc(1, sizeof *c);
    if (!c) return pith_errf(err, "out of memory");
    c->base.vt = &vk_vt;
    if (read_env(c, err) || pith_vk_open(c, device, err)) {
        pith_vk_close(c);
        free(c);
        return -1;
    }
    c->cpu_device = c->props.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU;
    const char *rp = getenv("PITH_VK_REPLAY");
    c->replay = !(rp && strcmp(rp, "0") == 0);
    const char *pf = getenv("PITH_VK_PROFILE");
    c->profile = pf && *pf && strcmp(pf, "0") != 0;
    if (c->profile) c->replay = false; /* timestamps belong to the step that records them */
    *out = &c->base;
    return 0;
}
