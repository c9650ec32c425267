/* Partial offload: one model across a device backend and the CPU backend (backend.h's vtable over two
 * backends created the normal way; this file sees only backend.h).
 *
 * Design:
 *   - Sides. Side CPU and side DEV (a Vulkan device). -ngl N puts layers [L - N, L) on DEV and the rest
 *     on the CPU (llama.cpp's order: the last layers offloaded). The input (embeddings, RoPE tables)
 *     goes with layer 0, the output (final norm, head) with layer L - 1: so with 0 < N < L the
 *     activations cross once per step, CPU -> DEV, and the head runs on the device. N >= L without CPU
 *     experts is the device backend alone, N == 0 the CPU backend alone (pith_backend_create_split hands
 *     those out directly, not this wrapper). --n-cpu-moe K keeps the experts of layers [0, K) (--cpu-moe:
 *     all) on the CPU: moe_load and moe of those layers go to the CPU whatever side the layer is on, so
 *     a device layer's activations go to the CPU and back for its experts.
 *   - Which layer. The architecture says it through one hook, pith_be_begin_layer (backend.h), at load
 *     (the weights bound next belong to that layer, the input or the output) and in its forward (the ops
 *     issued next run on that side); moe_load names its layer itself. An architecture that never calls
 *     the hook for every layer is refused at reserve (prepare) with the reason, never run on one side
 *     by accident.
 *   - Matrices and tables live on one side only (wrapped: split_weight names the inner weight and its
 *     side); an op given one of the other side fails its step with the reason and is not issued (never
 *     wrong numbers, never a weight of one backend handed to the other). Vectors (norms, biases, the
 *     mixers' small weights) are held on both sides.
 *   - Where an op runs: on its layer's side, except that an op on a layer's memory runs on the side
 *     holding it (mem_side: Gemma 4's KV-shared layers attend over an earlier layer's K and V).
 *   - Buffers exist on both sides (activations are small); each wrapper keeps a mask of the sides that
 *     hold the latest rows. An op reading a buffer its side lacks first moves the step's n_tokens rows
 *     there (buf_read from the side that has them, buf_write into this one); an op writing a buffer
 *     makes its side the only holder. Every mask is cleared at set_step (a step writes before it reads),
 *     so which moves happen depends only on the op sequence: a step of the same shape moves the same.
 *   - Memory: each side gets every group with only its own layers (the ops' layer_index translated to
 *     the side's index), so the device holds the KV of the device's layers only. A group with no layer
 *     on a side still needs its pool there (the batch names its blocks), kept at one layer: the one
 *     unused layer's pool is the cost. A RECURRENT group's slot is split the same way: the hybrids'
 *     mixers each keep an equal share of it (layer_index * share, the op's state_offset), so each side's
 *     slot holds its layers' shares and the ops' offsets are translated; a slot that is not equal shares
 *     (an MTP head's hidden-state tail) is refused at mem_alloc.
 *   - Order and replay (vk.h). The device records its ops and runs them at its head. A move into DEV
 *     (an upload, run at once) must not overtake ops recorded before it that touch the same buffers, so
 *     when DEV has recorded ops since it last ran, it is synced first; a move out of DEV syncs it (its
 *     recorded work submitted and waited for). Syncing mid-step stops the device from keeping that step
 *     for replay (vk_sync), so: with -ngl alone the only crossing, CPU -> DEV, comes before the device
 *     has recorded anything and every step replays; with experts on the CPU inside device layers each
 *     step syncs and is recorded afresh (correct, slower).
 *   - Ops return nothing (backend.h): a move that fails marks the step failed, and head returns the
 *     first reason, as the device backend does. Not here yet (refused with the reason): MTP heads, MLA. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/info.h"

enum { CPU = 0, DEV = 1 };
static const char *const side_name[2] = {"cpu", "device"};

typedef struct split_weight {
    pith_weight w;
    pith_weight *in[2]; /* the side's copy; a matrix or a table has one, a vector both */
    int side;           /* the side of a matrix or a table; -1: a vector, on both */
} split_weight;

typedef struct split_buf {
    pith_buf b;
    pith_buf *in[2];
    unsigned valid; /* bit s: side s holds the latest rows */
    unsigned long long touch[2]; /* the side's epoch + 1 when an op of that epoch used it */
} split_buf;

typedef struct split_moe {
    pith_moe_weights *inner;
    int side;
} split_moe;

typedef struct split {
    pith_backend base;
    pith_backend *be[2];
    int n_layers, first_dev, n_cpu_moe; /* n_cpu_moe < 0: every MoE layer's experts on the CPU */
    int side;                           /* of the weights bound and ops issued now */
    unsigned char *seen;                /* [n_layers]: begin_layer named it */
    split_weight **weights;
    int n_weights;
    split_buf **bufs;
    int n_bufs;
    split_moe **moes;
    int n_moes, moes_on[2];
    int cap;
    /* memory: each side's spec, and each group's layer_index -> the side's index */
    pith_mem_spec spec[2];
    int *layers[2];
    int *local[PITH_MAX_MEM_GROUPS];
    size_t rec_per[PITH_MAX_MEM_GROUPS];  /* RECURRENT: floats of one layer's share of a slot */
    const pith_mem_spec *whole;           /* the model's spec (it owns it; stable while allocated) */
    bool mem;
    /* the step */
    int n_rows;
    bool dirty[2];                      /* ops issued since the side last ran them (DEV), the op being
                                           issued (last) not yet among them: its own moves come first */
    int last;                           /* the side of the op being issued, or -1 */
    unsigned long long epoch[2];        /* counts the times a side ran what was issued to it */
    float *host;
    size_t host_cap;
    unsigned long long moves[2];        /* rows moved into each side (tests, debugging) */
    int op_failed;
    char op_err[512];
} split;

static split *sp(pith_backend *be) { return (split *)be; }

static int side_of_layer(const split *s, int layer) {
    if (layer == PITH_BE_LAYER_INPUT) layer = 0;
    if (layer == PITH_BE_LAYER_OUTPUT || layer >= s->n_layers) layer = s->n_layers - 1;
    return layer >= s->first_dev ? DEV : CPU;
}

static void fail(split *s, const char *fmt, const char *what) {
    if (s->op_failed++) return;
    snprintf(s->op_err, sizeof s->op_err, fmt, what);
}

static void fail_err(split *s, const pith_err *e) { fail(s, "%s", e->msg); }

/* ---- moving rows between the sides ---- */

/* the op issued before the current one counts as issued */
static void fold(split *s) {
    if (s->last >= 0) s->dirty[s->last] = true;
    s->last = -1;
}

static int run_side(split *s, int side, pith_err *err) {
    if (!s->dirty[side]) return 0;
    s->dirty[side] = false;
    s->epoch[side]++;
    return s->be[side]->vt->sync(s->be[side], err);
}

/* run side first when an op issued to it and not yet run used b: a move must not overtake it */
static int run_if_touched(split *s, const split_buf *b, int side, pith_err *err) {
    return b->touch[side] == s->epoch[side] + 1 ? run_side(s, side, err) : 0;
}

/* b's latest rows onto side, if it lacks them */
static pith_buf *need(split *s, const pith_buf *pb, int side) {
    if (!pb) return NULL;
    split_buf *b = (split_buf *)pb;
    if (!b->valid || (b->valid & (1u << side))) {
        b->touch[side] = s->epoch[side] + 1;
        return b->in[side];
    }
    int from = 1 - side, n = s->n_rows < s->cap ? s->n_rows : s->cap;
    size_t count = (size_t)n * b->b.cols;
    pith_err e;
    if (count > s->host_cap) {
        float *h = realloc(s->host, count * sizeof *h);
        if (!h) {
            fail(s, "%s", "out of memory moving activations between the CPU and the device");
            return b->in[side];
        }
        s->host = h, s->host_cap = count;
    }
    if (n > 0 && (run_if_touched(s, b, from, &e) || run_if_touched(s, b, side, &e) ||
                  s->be[from]->vt->buf_read(s->be[from], b->in[from], n, s->host, &e) ||
                  s->be[side]->vt->buf_write(s->be[side], b->in[side], n, s->host, &e))) {
        fail_err(s, &e);
        return b->in[side];
    }
    s->moves[side] += (unsigned long long)n;
    b->valid |= 1u << side;
    b->touch[side] = s->epoch[side] + 1;
    return b->in[side];
}

/* b written on side (read first when the op also reads it: in-place ops, accumulation) */
static pith_buf *out(split *s, pith_buf *pb, int side, bool reads) {
    if (!pb) return NULL;
    split_buf *b = (split_buf *)pb;
    if (reads) need(s, pb, side);
    b->valid = 1u << side;
    b->touch[side] = s->epoch[side] + 1;
    return b->in[side];
}

/* the side's copy of a weight; a matrix held on the other side fails the step (the op is then not
 * issued: the inner backend never sees a weight of another backend) */
static const pith_weight *W(split *s, const pith_weight *pw, int side) {
    if (!pw) return NULL;
    const split_weight *w = (const split_weight *)pw;
    if (w->side >= 0 && w->side != side) {
        fail(s, "partial offload: an op on the %s reads a weight held on the other side (a layer's weights and "
                "ops named by different begin_layer calls)", side_name[side]);
        return NULL;
    }
    return w->in[side];
}

/* an op on side begins: the ops before it are issued, it is issued once its moves are done */
static int op_on(split *s, int side) {
    fold(s);
    s->last = side;
    return side;
}

static int op_side(split *s) { return op_on(s, s->side); }

/* ---- load ---- */

static int add_weight(split *s, pith_weight *const inner[2], int side, pith_weight **out_w, pith_err *err) {
    split_weight **grown = realloc(s->weights, (size_t)(s->n_weights + 1) * sizeof *grown);
    split_weight *w = calloc(1, sizeof *w);
    if (grown) s->weights = grown;
    if (!grown || !w) {
        free(w);
        return pith_errf(err, "out of memory");
    }
    w->w = *inner[side >= 0 ? side : CPU];
    w->w.id = s->n_weights;
    w->w.impl = NULL;
    w->in[CPU] = inner[CPU], w->in[DEV] = inner[DEV];
    w->side = side;
    s->weights[s->n_weights++] = w;
    *out_w = &w->w;
    return 0;
}

static int sp_matrix(pith_backend *be, const pith_tensor *t, const char *name, pith_weight **out_w, pith_err *err) {
    split *s = sp(be);
    pith_weight *w[2] = {NULL, NULL};
    if (s->be[s->side]->vt->matrix(s->be[s->side], t, name, &w[s->side], err)) return -1;
    return add_weight(s, w, s->side, out_w, err);
}

static int sp_table(pith_backend *be, const pith_tensor *t, const char *name, pith_weight **out_w, pith_err *err) {
    split *s = sp(be);
    pith_weight *w[2] = {NULL, NULL};
    if (s->be[s->side]->vt->table(s->be[s->side], t, name, &w[s->side], err)) return -1;
    return add_weight(s, w, s->side, out_w, err);
}

/* Vectors (norms, biases, the recurrent mixers' small weights) are held on both sides: they are small,
 * and an op may run on the side of the memory it uses rather than its layer's (a layer attending over
 * another layer's K and V, Gemma 4's per-layer inputs). */
static int sp_vector(pith_backend *be, float *data, int n, pith_weight **out_w, pith_err *err) {
    split *s = sp(be);
    pith_weight *w[2] = {NULL, NULL};
    float *copy = malloc((size_t)(n > 0 ? n : 1) * sizeof *copy);
    if (!copy) {
        free(data);
        return pith_errf(err, "out of memory");
    }
    if (n > 0) memcpy(copy, data, (size_t)n * sizeof *copy);
    if (s->be[CPU]->vt->vector(s->be[CPU], data, n, &w[CPU], err)) {
        free(copy);
        return -1;
    }
    if (s->be[DEV]->vt->vector(s->be[DEV], copy, n, &w[DEV], err)) return -1;
    return add_weight(s, w, -1, out_w, err);
}

static int moe_side(const split *s, int layer) {
    return s->n_cpu_moe < 0 || layer < s->n_cpu_moe ? CPU : side_of_layer(s, layer);
}

static int sp_moe_load(pith_backend *be, const pith_model_file *f, int layer, const pith_moe_config *cfg,
                       const char *const hf_experts[3], pith_moe_weights **out_w, pith_err *err) {
    split *s = sp(be);
    int side = moe_side(s, layer);
    split_moe **grown = realloc(s->moes, (size_t)(s->n_moes + 1) * sizeof *grown);
    split_moe *m = calloc(1, sizeof *m);
    if (grown) s->moes = grown;
    if (!grown || !m) {
        free(m);
        return pith_errf(err, "out of memory");
    }
    if (s->be[side]->vt->moe_load(s->be[side], f, layer, cfg, hf_experts, &m->inner, err)) {
        free(m);
        return -1;
    }
    m->side = side;
    s->moes[s->n_moes++] = m;
    s->moes_on[side]++;
    *out_w = (pith_moe_weights *)m;
    return 0;
}

static int sp_moe_place(pith_backend *be, char *what, size_t what_size, pith_err *err) {
    split *s = sp(be);
    if (what_size) what[0] = 0;
    for (int side = 0; side < 2; side++) {
        if (!s->moes_on[side]) continue;
        char one[160] = "";
        if (s->be[side]->vt->moe_place(s->be[side], one, sizeof one, err)) return -1;
        size_t used = strlen(what);
        if (what_size > used)
            snprintf(what + used, what_size - used, "%s%s: %d layers, %s", used ? "; " : "", side_name[side],
                     s->moes_on[side], one);
    }
    return 0;
}

static int sp_attn_shape(pith_backend *be, const pith_be_attn_shape *shape, pith_err *err) {
    split *s = sp(be);
    for (int side = 0; side < 2; side++)
        if (s->be[side]->vt->attn_shape(s->be[side], shape, err)) return -1;
    return 0;
}

static int sp_gdn_shape(pith_backend *be, int dk, int dv, pith_err *err) {
    split *s = sp(be);
    for (int side = 0; side < 2; side++)
        if (s->be[side]->vt->gdn_shape(s->be[side], dk, dv, err)) return -1;
    return 0;
}

static pith_buf *sp_buffer(pith_backend *be, int cols, pith_err *err) {
    split *s = sp(be);
    split_buf **grown = realloc(s->bufs, (size_t)(s->n_bufs + 1) * sizeof *grown);
    split_buf *b = calloc(1, sizeof *b);
    if (grown) s->bufs = grown;
    if (!grown || !b) {
        free(b);
        pith_errf(err, "out of memory");
        return NULL;
    }
    for (int side = 0; side < 2; side++)
        if (!(b->in[side] = s->be[side]->vt->buffer(s->be[side], cols, err))) {
            free(b);
            return NULL;
        }
    b->b.id = s->n_bufs;
    b->b.cols = cols;
    b->b.host = NULL; /* two copies: none is the buffer's */
    s->bufs[s->n_bufs++] = b;
    return &b->b;
}

static int sp_reserve(pith_backend *be, int n, pith_err *err) {
    split *s = sp(be);
    for (int l = 0; l < s->n_layers; l++)
        if (!s->seen[l])
            return pith_errf(err, "partial offload (-ngl, --n-cpu-moe): this architecture does not name its layers "
                                  "to the backend (layer %d), so they cannot be placed; run it on one device",
                             l);
    for (int side = 0; side < 2; side++)
        if (s->be[side]->vt->reserve(s->be[side], n, err)) return -1;
    if (n > s->cap) s->cap = n;
    return 0;
}

/* ---- memory ---- */

static void sp_mem_free(pith_backend *be) {
    split *s = sp(be);
    for (int side = 0; side < 2; side++) s->be[side]->vt->mem_free(s->be[side]);
    for (int side = 0; side < 2; side++) free(s->layers[side]), s->layers[side] = NULL;
    for (int g = 0; g < PITH_MAX_MEM_GROUPS; g++) free(s->local[g]), s->local[g] = NULL;
    memset(s->spec, 0, sizeof s->spec);
    memset(s->rec_per, 0, sizeof s->rec_per);
    s->whole = NULL;
    s->mem = false;
}

static int sp_mem_alloc(pith_backend *be, const pith_mem_spec *spec, const pith_mem_layout *lay, pith_err *err) {
    split *s = sp(be);
    if (s->mem) return pith_errf(err, "the model's memory is already allocated (one engine at a time)");
    int total = 0;
    for (int g = 0; g < spec->n_groups; g++) {
        const pith_mem_group *mg = &spec->groups[g];
        /* a recurrent slot is split by layer: each layer's state must be an equal share of it (the
         * hybrids' mixers); a slot with more (an MTP head's hidden-state tail) cannot be */
        size_t share = mg->n_layers > 0 ? (size_t)mg->n_layers * sizeof(float) : 0;
        if (mg->kind == PITH_MEM_RECURRENT && (!share || mg->state_bytes % share))
            return pith_errf(err, "partial offload (-ngl, --n-cpu-moe): memory group %d's recurrent state is not "
                                  "made of equal shares per layer (a multi-token-prediction head keeps more): run "
                                  "this model on one device, or without --spec-type mtp", g);
        s->rec_per[g] = mg->kind == PITH_MEM_RECURRENT ? mg->state_bytes / share : 0;
        total += mg->n_layers + 1;
    }
    for (int side = 0; side < 2; side++)
        if (!(s->layers[side] = malloc((size_t)(total > 0 ? total : 1) * sizeof(int)))) goto oom;
    int used[2] = {0, 0};
    for (int side = 0; side < 2; side++) s->spec[side].n_groups = spec->n_groups;
    for (int g = 0; g < spec->n_groups; g++) {
        const pith_mem_group *mg = &spec->groups[g];
        if (!(s->local[g] = malloc((size_t)mg->n_layers * sizeof(int)))) goto oom;
        int count[2] = {0, 0};
        int *first[2] = {s->layers[0] + used[0], s->layers[1] + used[1]};
        for (int i = 0; i < mg->n_layers; i++) {
            int side = side_of_layer(s, mg->layers[i]);
            s->local[g][i] = count[side];
            first[side][count[side]++] = mg->layers[i];
        }
        for (int side = 0; side < 2; side++) {
            pith_mem_group *sg = &s->spec[side].groups[g];
            *sg = *mg;
            if (count[side] == 0) first[side][count[side]++] = mg->layers[0]; /* the pool the batch names */
            sg->n_layers = count[side];
            sg->layers = first[side];
            if (mg->kind == PITH_MEM_RECURRENT) sg->state_bytes = (size_t)count[side] * s->rec_per[g] * sizeof(float);
            used[side] += count[side];
        }
    }
    for (int side = 0; side < 2; side++)
        if (s->be[side]->vt->mem_alloc(s->be[side], &s->spec[side], lay, err)) {
            pith_err_prefix(err, "the %s's share of the memory", side_name[side]);
            sp_mem_free(be);
            return -1;
        }
    s->whole = spec;
    s->mem = true;
    return 0;
oom:
    sp_mem_free(be);
    return pith_errf(err, "out of memory");
}

static bool sp_mem_allocated(const pith_backend *be) { return ((const split *)be)->mem; }

static int sp_copy_blocks(pith_backend *be, int g, const int32_t *src, const int32_t *dst, int n, pith_err *err) {
    split *s = sp(be);
    for (int side = 0; side < 2; side++)
        if (s->be[side]->vt->copy_blocks(s->be[side], g, src, dst, n, err)) return -1;
    return 0;
}

/* ---- the step ---- */

static int sp_set_step(pith_backend *be, const pith_batch *b, const pith_mem_spec *spec, int n_vocab, float *logits,
                       pith_err *err) {
    split *s = sp(be);
    s->op_failed = 0;
    s->dirty[CPU] = s->dirty[DEV] = false;
    s->last = -1;
    s->epoch[CPU]++, s->epoch[DEV]++;
    s->n_rows = b->n_tokens;
    for (int i = 0; i < s->n_bufs; i++) s->bufs[i]->valid = 0;
    for (int side = 0; side < 2; side++) {
        const pith_mem_spec *mine = s->mem ? &s->spec[side] : spec;
        if (s->be[side]->vt->set_step(s->be[side], b, mine, n_vocab, logits, err))
            return pith_err_prefix(err, "%s", side_name[side]);
    }
    if (s->n_rows > s->cap) s->cap = s->n_rows;
    return 0;
}

static void sp_embed(pith_backend *be, const pith_weight *table, float scale, pith_buf *o, int n) {
    split *s = sp(be);
    int d = op_side(s);
    const pith_weight *t = W(s, table, d);
    pith_buf *oi = out(s, o, d, false);
    if (!s->op_failed) s->be[d]->vt->embed(s->be[d], t, scale, oi, n);
}

static void sp_rope_tables(pith_backend *be, const pith_rope *r, pith_buf *cs, int n) {
    split *s = sp(be);
    int d = op_side(s);
    pith_buf *ci = out(s, cs, d, false);
    if (!s->op_failed) s->be[d]->vt->rope_tables(s->be[d], r, ci, n);
}

static void sp_rmsnorm(pith_backend *be, const pith_buf *x, const pith_weight *w, float eps, pith_buf *o, int n) {
    split *s = sp(be);
    int d = op_side(s);
    const pith_buf *xi = need(s, x, d);
    const pith_weight *wi = W(s, w, d);
    pith_buf *oi = out(s, o, d, false);
    if (!s->op_failed) s->be[d]->vt->rmsnorm(s->be[d], xi, wi, eps, oi, n);
}

static int sp_matmul(pith_backend *be, const pith_buf *in, const pith_be_mm *outs, int n_outs, int n, pith_err *err) {
    split *s = sp(be);
    int d = op_side(s);
    if (n_outs < 1 || n_outs > PITH_BE_MAX_MM) return pith_errf(err, "matmul: %d products", n_outs);
    pith_be_mm mm[PITH_BE_MAX_MM];
    const pith_buf *ii = need(s, in, d);
    for (int i = 0; i < n_outs; i++)
        mm[i] = (pith_be_mm){W(s, outs[i].w, d), out(s, outs[i].out, d, outs[i].accumulate), outs[i].accumulate};
    if (s->op_failed) return pith_errf(err, "%s", s->op_err);
    return s->be[d]->vt->matmul(s->be[d], ii, mm, n_outs, n, err);
}

static bool in_group(const split *s, int g, int index) {
    return s->whole && g >= 0 && g < s->whole->n_groups && index >= 0 && index < s->whole->groups[g].n_layers;
}

static int local_index(const split *s, int g, int index) {
    return in_group(s, g, index) ? s->local[g][index] : index;
}

/* The side holding a KV group's layer: an op reading or writing it runs there, which is its layer's
 * side except where a layer uses another's K and V (Gemma 4's KV-shared layers). */
static int mem_side(split *s, int g, int index) {
    return op_on(s, in_group(s, g, index) ? side_of_layer(s, s->whole->groups[g].layers[index]) : s->side);
}

/* A recurrent op's state: the float offset in the whole slot (a layer's share, layer_index * share)
 * into the offset in its side's slot; the op runs on that side (begin_layer's, as its layer). */
static size_t local_state(split *s, int g, size_t offset, int *side) {
    size_t per = in_group(s, g, 0) ? s->rec_per[g] : 0, i = per ? offset / per : 0;
    if (!per || offset % per || i >= (size_t)s->whole->groups[g].n_layers) {
        if (per) fail(s, "%s", "partial offload: a recurrent op's state is not one layer's equal share of its slot");
        *side = op_side(s);
        return offset;
    }
    *side = op_on(s, side_of_layer(s, s->whole->groups[g].layers[i]));
    return (size_t)s->local[g][i] * per;
}

static void sp_qkv(pith_backend *be, const pith_be_qkv_args *a, int n) {
    split *s = sp(be);
    int d = mem_side(s, a->group, a->layer_index);
    pith_be_qkv_args o = *a;
    o.q = out(s, a->q, d, true), o.k = out(s, a->k, d, true), o.v = out(s, a->v, d, true);
    o.bq = W(s, a->bq, d), o.bk = W(s, a->bk, d), o.bv = W(s, a->bv, d);
    o.q_norm = W(s, a->q_norm, d), o.k_norm = W(s, a->k_norm, d);
    o.rope_cs = need(s, a->rope_cs, d);
    o.layer_index = local_index(s, a->group, a->layer_index);
    if (!s->op_failed) s->be[d]->vt->qkv(s->be[d], &o, n);
}

static void sp_attention(pith_backend *be, const pith_be_attn *a, int n) {
    split *s = sp(be);
    int d = mem_side(s, a->group, a->layer_index);
    pith_be_attn o = *a;
    o.q = need(s, a->q, d);
    o.out = out(s, a->out, d, false);
    o.sinks = W(s, a->sinks, d);
    o.layer_index = local_index(s, a->group, a->layer_index);
    if (!s->op_failed) s->be[d]->vt->attention(s->be[d], &o, n);
}

static void sp_glu(pith_backend *be, pith_glu kind, pith_buf *gate, const pith_buf *up, int n) {
    split *s = sp(be);
    int d = op_side(s);
    const pith_buf *u = need(s, up, d);
    pith_buf *g = out(s, gate, d, true);
    if (!s->op_failed) s->be[d]->vt->glu(s->be[d], kind, g, u, n);
}

static void sp_add_bias(pith_backend *be, pith_buf *y, const pith_weight *bias, int n) {
    split *s = sp(be);
    int d = op_side(s);
    pith_buf *yi = out(s, y, d, true);
    const pith_weight *bi = W(s, bias, d);
    if (!s->op_failed) s->be[d]->vt->add_bias(s->be[d], yi, bi, n);
}

static void sp_norm_add(pith_backend *be, pith_buf *x, pith_buf *y, const pith_weight *w, float eps, int n) {
    split *s = sp(be);
    int d = op_side(s);
    pith_buf *xi = out(s, x, d, true), *yi = out(s, y, d, true);
    const pith_weight *wi = W(s, w, d);
    if (!s->op_failed) s->be[d]->vt->norm_add(s->be[d], xi, yi, wi, eps, n);
}

static void sp_scale(pith_backend *be, pith_buf *y, float f, int n) {
    split *s = sp(be);
    int d = op_side(s);
    pith_buf *yi = out(s, y, d, true);
    if (!s->op_failed) s->be[d]->vt->scale(s->be[d], yi, f, n);
}

static void sp_scale_add(pith_backend *be, pith_buf *x, const pith_buf *y, float f, int n) {
    split *s = sp(be);
    int d = op_side(s);
    const pith_buf *yi = need(s, y, d);
    pith_buf *xi = out(s, x, d, true);
    if (!s->op_failed) s->be[d]->vt->scale_add(s->be[d], xi, yi, f, n);
}

static void sp_attn_temp(pith_backend *be, pith_buf *y, float beta, int length, int n) {
    split *s = sp(be);
    int d = op_side(s);
    if (!s->be[d]->vt->attn_temp) {
        fail(s, "the %s backend has no attention temperature", side_name[d]);
        return;
    }
    pith_buf *yi = out(s, y, d, true);
    if (!s->op_failed) s->be[d]->vt->attn_temp(s->be[d], yi, beta, length, n);
}

static void sp_zero(pith_backend *be, pith_buf *y, int n) {
    split *s = sp(be);
    int d = op_side(s);
    pith_buf *yi = out(s, y, d, false);
    if (!s->op_failed) s->be[d]->vt->zero(s->be[d], yi, n);
}

static void sp_copy_cols(pith_backend *be, pith_buf *dst, const pith_buf *src, int col0, int n) {
    split *s = sp(be);
    int d = op_side(s);
    const pith_buf *si = need(s, src, d);
    pith_buf *di = out(s, dst, d, false);
    if (!s->op_failed) s->be[d]->vt->copy_cols(s->be[d], di, si, col0, n);
}

static void sp_activation(pith_backend *be, pith_activation kind, pith_buf *y, int n) {
    split *s = sp(be);
    int d = op_side(s);
    pith_buf *yi = out(s, y, d, true);
    if (!s->op_failed) s->be[d]->vt->activation(s->be[d], kind, yi, n);
}

/* the experts run where they are held, whatever side their layer is on */
static int sp_moe(pith_backend *be, const pith_moe_weights *w, const pith_buf *in, pith_buf *o, int n, pith_err *err) {
    split *s = sp(be);
    const split_moe *m = (const split_moe *)w;
    int d = op_on(s, m->side);
    const pith_buf *ii = need(s, in, d);
    pith_buf *oi = out(s, o, d, true);
    if (s->op_failed) return pith_errf(err, "%s", s->op_err);
    return s->be[d]->vt->moe(s->be[d], m->inner, ii, oi, n, err);
}

static void sp_keep_rows(pith_backend *be, pith_buf *const *bufs, int n_bufs) {
    split *s = sp(be);
    int d = op_side(s);
    pith_buf *in[8];
    if (n_bufs > 8) {
        fail(s, "%s", "keep_rows: more than 8 buffers");
        return;
    }
    for (int i = 0; i < n_bufs; i++) in[i] = out(s, bufs[i], d, true);
    if (!s->op_failed) s->be[d]->vt->keep_rows(s->be[d], in, n_bufs);
}

static int sp_head(pith_backend *be, const pith_be_head_args *h, int n_kept, int n_logits, int n_vocab, pith_err *err) {
    split *s = sp(be);
    int d = op_side(s);
    pith_be_head_args o = *h;
    o.x = (pith_buf *)need(s, h->x, d);
    o.scratch = out(s, h->scratch, d, false);
    o.norm = W(s, h->norm, d), o.output = W(s, h->output, d);
    if (s->op_failed) return pith_errf(err, "%s", s->op_err);
    int rc = s->be[d]->vt->head(s->be[d], &o, n_kept, n_logits, n_vocab, err);
    s->dirty[d] = false, s->last = -1;
    s->epoch[d]++;
    return rc;
}

/* ---- the recurrent mixers and Qwen3.5's gated attention: on the side of the layer's state ---- */

static void sp_short_conv(pith_backend *be, const pith_be_short_conv_args *a, int n) {
    split *s = sp(be);
    int d;
    pith_be_short_conv_args o = *a;
    o.state_offset = local_state(s, a->group, a->state_offset, &d);
    o.in = need(s, a->in, d);
    o.out = out(s, a->out, d, false);
    o.w = W(s, a->w, d);
    if (!s->op_failed) s->be[d]->vt->short_conv(s->be[d], &o, n);
}

static void sp_mamba2(pith_backend *be, const pith_be_mamba2_args *a, int n) {
    split *s = sp(be);
    int d;
    pith_be_mamba2_args o = *a;
    o.state_offset = local_state(s, a->group, a->state_offset, &d);
    o.proj = out(s, a->proj, d, true); /* the convolution's output goes over xBC */
    o.y = out(s, a->y, d, false);
    o.conv_w = W(s, a->conv_w, d), o.conv_b = W(s, a->conv_b, d);
    o.dt_bias = W(s, a->dt_bias, d), o.A = W(s, a->A, d), o.D = W(s, a->D, d), o.norm = W(s, a->norm, d);
    if (!s->op_failed) s->be[d]->vt->mamba2(s->be[d], &o, n);
}

static void sp_gdn(pith_backend *be, const pith_be_gdn_args *a, int n) {
    split *s = sp(be);
    int d;
    pith_be_gdn_args o = *a;
    o.state_offset = local_state(s, a->group, a->state_offset, &d);
    o.qkv = out(s, a->qkv, d, true), o.beta = out(s, a->beta, d, true), o.alpha = out(s, a->alpha, d, true);
    o.out = out(s, a->out, d, false);
    o.conv_w = W(s, a->conv_w, d), o.dt_bias = W(s, a->dt_bias, d), o.ssm_a = W(s, a->ssm_a, d);
    if (!s->op_failed) s->be[d]->vt->gdn(s->be[d], &o, n);
}

static void sp_gated_norm(pith_backend *be, const pith_be_gated_norm_args *a, int n) {
    split *s = sp(be);
    int d = op_side(s);
    pith_be_gated_norm_args o = *a;
    o.z = need(s, a->z, d);
    o.x = out(s, a->x, d, true);
    o.w = W(s, a->w, d);
    if (!s->op_failed) s->be[d]->vt->gated_norm(s->be[d], &o, n);
}

static void sp_gated_qkv(pith_backend *be, const pith_be_gated_qkv_args *a, int n) {
    split *s = sp(be);
    int d = mem_side(s, a->group, a->layer_index);
    pith_be_gated_qkv_args o = *a;
    o.qg = need(s, a->qg, d), o.v = need(s, a->v, d), o.rope_cs = need(s, a->rope_cs, d);
    o.q = out(s, a->q, d, false), o.k = out(s, a->k, d, true);
    o.q_norm = W(s, a->q_norm, d), o.k_norm = W(s, a->k_norm, d);
    o.layer_index = local_index(s, a->group, a->layer_index);
    if (!s->op_failed) s->be[d]->vt->gated_qkv(s->be[d], &o, n);
}

static void sp_attn_gate(pith_backend *be, const pith_be_attn_gate_args *a, int n) {
    split *s = sp(be);
    int d = op_side(s);
    pith_be_attn_gate_args o = *a;
    o.qg = need(s, a->qg, d);
    o.att = out(s, a->att, d, true);
    if (!s->op_failed) s->be[d]->vt->attn_gate(s->be[d], &o, n);
}

/* ---- tests and debugging ---- */

static int sp_buf_write(pith_backend *be, pith_buf *b, int n, const float *src, pith_err *err) {
    split *s = sp(be);
    split_buf *sb = (split_buf *)b;
    fold(s);
    for (int side = 0; side < 2; side++)
        if (run_side(s, side, err) || s->be[side]->vt->buf_write(s->be[side], sb->in[side], n, src, err)) return -1;
    sb->valid = 3;
    return 0;
}

static int sp_buf_read(pith_backend *be, const pith_buf *b, int n, float *dst, pith_err *err) {
    split *s = sp(be);
    const split_buf *sb = (const split_buf *)b;
    int side = sb->valid & (1u << CPU) ? CPU : sb->valid ? DEV : CPU;
    fold(s);
    if (run_side(s, side, err)) return -1;
    return s->be[side]->vt->buf_read(s->be[side], sb->in[side], n, dst, err);
}

static int sp_sync(pith_backend *be, pith_err *err) {
    split *s = sp(be);
    fold(s);
    for (int side = 0; side < 2; side++)
        if (run_side(s, side, err)) return -1;
    return 0;
}

static void sp_begin_layer(pith_backend *be, int layer) {
    split *s = sp(be);
    if (layer >= 0 && layer < s->n_layers) s->seen[layer] = 1;
    s->side = side_of_layer(s, layer);
}

static void sp_destroy(pith_backend *be) {
    split *s = sp(be);
    sp_mem_free(be);
    for (int side = 0; side < 2; side++) pith_backend_free(s->be[side]);
    for (int i = 0; i < s->n_weights; i++) free(s->weights[i]);
    for (int i = 0; i < s->n_bufs; i++) free(s->bufs[i]);
    for (int i = 0; i < s->n_moes; i++) free(s->moes[i]);
    free(s->weights), free(s->bufs), free(s->moes), free(s->seen), free(s->host);
    free(s);
}

static const pith_backend_vt split_vt = {
    .name = "split", .destroy = sp_destroy, .matrix = sp_matrix, .table = sp_table, .vector = sp_vector,
    .moe_load = sp_moe_load, .moe_place = sp_moe_place, .attn_shape = sp_attn_shape, .buffer = sp_buffer,
    .reserve = sp_reserve, .mem_alloc = sp_mem_alloc, .mem_free = sp_mem_free, .mem_allocated = sp_mem_allocated,
    .copy_blocks = sp_copy_blocks, .set_step = sp_set_step, .embed = sp_embed, .rope_tables = sp_rope_tables,
    .rmsnorm = sp_rmsnorm, .matmul = sp_matmul, .qkv = sp_qkv, .attention = sp_attention, .glu = sp_glu,
    .add_bias = sp_add_bias, .norm_add = sp_norm_add, .scale = sp_scale, .scale_add = sp_scale_add,
    .attn_temp = sp_attn_temp, .zero = sp_zero, .copy_cols = sp_copy_cols, .activation = sp_activation,
    .moe = sp_moe, .keep_rows = sp_keep_rows, .head = sp_head, .short_conv = sp_short_conv, .mamba2 = sp_mamba2,
    .gdn_shape = sp_gdn_shape, .gdn = sp_gdn, .gated_norm = sp_gated_norm, .gated_qkv = sp_gated_qkv,
    .attn_gate = sp_attn_gate, .buf_write = sp_buf_write, /* no MTP heads (NULL: the models refuse them) */
    .buf_read = sp_buf_read, .sync = sp_sync, .begin_layer = sp_begin_layer,
};

pith_backend *pith_backend_split_side(pith_backend *be, bool device) {
    if (!be || be->vt != &split_vt) return NULL;
    return sp(be)->be[device ? DEV : CPU];
}

/* ---- making one ---- */

int pith_backend_parse_gpu_layers(const char *v, int *n, pith_err *err) {
    *n = 0;
    if (v && !strcmp(v, "auto")) {
        *n = -1;
        return 0;
    }
    char *end;
    errno = 0;
    long x = v ? strtol(v, &end, 10) : 0;
    if (!v || *v < '0' || *v > '9' || *end || errno || x > 100000)
        return pith_errf(err, "-ngl %s: expected a number of layers (0 or more) or auto", v ? v : "(none)");
    *n = (int)x;
    return 0;
}

/* An expert tensor: stacked (blk.L.ffn_gate_exps.weight, ..._up_exps, ..._down_exps, ..._gate_up_exps)
 * or one per expert (blk.L.ffn_gate.E.weight). */
static bool expert_tensor(const char *name) {
    int l, e, used = 0;
    char kind[8];
    if (strstr(name, "_exps.")) return true;
    return sscanf(name, "blk.%d.ffn_%7[a-z].%d.weight%n", &l, kind, &e, &used) == 3 && used > 0 && !name[used];
}

/* Weight bytes of layer l on the device (its blk.l. tensors, less its experts where they stay on the
 * CPU) and of the rest (the head's and the embeddings'). */
static void layer_bytes(const pith_model_file *f, int n_layers, int n_cpu_moe, size_t *per_layer, size_t *output) {
    *output = 0;
    for (int i = 0; i < pith_model_file_n_tensors(f); i++) {
        const pith_tensor *t = pith_model_file_tensor_at(f, i);
        int l;
        if (t && sscanf(t->name, "blk.%d.", &l) == 1 && l >= 0 && l < n_layers) {
            bool on_cpu = (n_cpu_moe < 0 || l < n_cpu_moe) && expert_tensor(t->name);
            if (!on_cpu) per_layer[l] += t->nbytes;
        } else if (t && (!strcmp(t->name, "output.weight") || !strcmp(t->name, "output_norm.weight")))
            *output += t->nbytes;
    }
    if (!pith_model_file_tensor(f, "output.weight")) {
        const pith_tensor *t = pith_model_file_tensor(f, "token_embd.weight");
        if (t) *output += t->nbytes; /* tied: the head binds the embeddings as its product */
    }
}

/* -ngl auto: the most last layers that fit in the device's free memory with their KV pools and the
 * activations, judged at load, before the engine sizes either: the activations of a batch of
 * AUTO_BATCH tokens (the engine's default --max-batch-tokens) and AUTO_POSITIONS positions of F16 K and
 * V per layer. A longer context or a larger batch may need a smaller -ngl: the device then refuses the
 * allocation with its sizes (pith_vk_alloc), never overcommits. */
enum { AUTO_BATCH = 2048, AUTO_POSITIONS = 4096 };

static int auto_layers(pith_backend *dev, const pith_model_file *f, int n_layers, int n_cpu_moe, char *what,
                       size_t what_size, int *n, pith_err *err) {
    size_t free_bytes, output;
    if (!f) return pith_errf(err, "-ngl auto needs the model file");
    if (pith_backend_vulkan_free_memory(dev, &free_bytes, err)) return -1;
    const pith_hparams *hp = pith_model_file_hparams(f);
    size_t qd = (size_t)hp->n_heads * hp->head_dim, kvd = (size_t)hp->n_kv_heads * hp->head_dim;
    size_t act = (size_t)AUTO_BATCH * sizeof(float) * (3 * (size_t)hp->dim + 2 * qd + 2 * kvd + 2 * (size_t)hp->ffn_dim +
                                                       (size_t)hp->head_dim);
    size_t kv = 2 * kvd * 2 * AUTO_POSITIONS;
    size_t *per = calloc((size_t)n_layers, sizeof *per);
    if (!per) return pith_errf(err, "out of memory");
    layer_bytes(f, n_layers, n_cpu_moe, per, &output);
    size_t budget = free_bytes > act ? free_bytes - act : 0, used = output, weights = output;
    *n = 0;
    if (used <= budget)
        for (int l = n_layers - 1; l >= 0 && used + per[l] + kv <= budget; l--) used += per[l] + kv, weights += per[l], ++*n;
    free(per);
    if (what && what_size)
        snprintf(what, what_size, "-ngl auto: %d of %d layers on the device (%.1f MiB of weights; %.1f MiB free)", *n,
                 n_layers, (double)(*n ? weights : 0) / (1 << 20), (double)free_bytes / (1 << 20));
    return 0;
}

int pith_backend_create_split(const char *device, int n_threads, int n_layers, const char *gpu_layers,
                              int n_cpu_moe, const pith_model_file *file, char *what, size_t what_size,
                              pith_backend **out_be, pith_err *err) {
    *out_be = NULL;
    if (what && what_size) what[0] = 0;
    bool given = gpu_layers && *gpu_layers;
    /* with a device and no -ngl: auto, what its memory holds (all of a model that fits: the device
     * alone); without the file to judge by (tests), every layer */
    int ngl = given || !file ? n_layers : -1;
    if (given && pith_backend_parse_gpu_layers(gpu_layers, &ngl, err)) return -1;
    const char *name = pith_backend_device_or_env(device);
    int index;
    bool vulkan;
    if (pith_backend_parse_device(name, &index, &vulkan, err)) return -1;
    if (!vulkan) { /* experts on the CPU are where everything is already */
        if (given && ngl != 0)
            return pith_errf(err, "-ngl %s places layers on a device, but the model runs on %s: add --device vulkan",
                             gpu_layers, name);
        return pith_backend_cpu_create(n_threads, out_be, err);
    }
    if (n_layers < 1) return pith_errf(err, "partial offload: a model of %d layers", n_layers);
    pith_backend *dev = NULL, *cpu = NULL;
    if (pith_backend_vulkan_create(index, &dev, err)) return pith_err_prefix(err, "device %s", name);
    if (ngl < 0 && auto_layers(dev, file, n_layers, n_cpu_moe, what, what_size, &ngl, err)) goto fail;
    if (ngl > n_layers) ngl = n_layers;
    if (ngl == 0) {
        pith_backend_free(dev);
        if (what && what_size && !what[0]) snprintf(what, what_size, "every layer on the CPU (-ngl 0)");
        return pith_backend_cpu_create(n_threads, out_be, err);
    }
    if (ngl == n_layers && n_cpu_moe == 0) {
        *out_be = dev;
        return 0;
    }
    if (pith_backend_cpu_create(n_threads, &cpu, err)) goto fail;
    split *s = calloc(1, sizeof *s);
    if (!s || !(s->seen = calloc((size_t)n_layers, 1))) {
        free(s);
        pith_errf(err, "out of memory");
        goto fail;
    }
    s->base.vt = &split_vt;
    s->base.n_threads = cpu->n_threads;
    snprintf(s->base.kernels, sizeof s->base.kernels, "%.20s + %.20s", dev->kernels, cpu->kernels);
    s->be[CPU] = cpu, s->be[DEV] = dev;
    s->n_layers = n_layers;
    s->first_dev = n_layers - ngl;
    s->n_cpu_moe = n_cpu_moe;
    s->side = side_of_layer(s, PITH_BE_LAYER_INPUT);
    s->last = -1;
    if (what && what_size) {
        size_t used = strlen(what);
        char moe[64] = "";
        if (n_cpu_moe < 0) snprintf(moe, sizeof moe, ", every layer's experts on the CPU");
        else if (n_cpu_moe > 0) snprintf(moe, sizeof moe, ", the experts of layers 0-%d on the CPU", n_cpu_moe - 1);
        if (used + 3 < what_size)
            snprintf(what + used, what_size - used, "%slayers %d-%d on the CPU, %d-%d on %s%s", used ? "; " : "", 0,
                     s->first_dev - 1, s->first_dev, n_layers - 1, name, moe);
        if (s->first_dev == 0 && used + 3 < what_size)
            snprintf(what + used, what_size - used, "%slayers 0-%d on %s%s", used ? "; " : "", n_layers - 1, name, moe);
    }
    *out_be = &s->base;
    return 0;
fail:
    pith_backend_free(dev);
    pith_backend_free(cpu);
    return -1;
}
