/* A recording backend: a test double for the backend interface (src/backend/backend.h) that appends one
 * line per call to a log (the op, its buffers by id and width, its weights by id, its shape constants)
 * and then forwards the call to the backend it wraps, so the model computes as usual. Two forwards
 * whose logs are equal issue the same op sequence over the same buffers: what a device backend needs to
 * record a step once and replay it. */
#ifndef PITH_TEST_RECORDING_BACKEND_H
#define PITH_TEST_RECORDING_BACKEND_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"

typedef struct rec_backend {
    pith_backend base;
    pith_backend *inner;
    char *log;
    size_t len, cap;
    int n_ops;
} rec_backend;

static void rec_printf(pith_backend *be, const char *fmt, ...) {
    rec_backend *r = (rec_backend *)be;
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n >= sizeof line) n = sizeof line - 1;
    if (r->len + n + 2 > r->cap) {
        size_t cap = (r->cap ? 2 * r->cap : 4096) + n + 2;
        char *g = realloc(r->log, cap);
        if (!g) abort();
        r->log = g, r->cap = cap;
    }
    memcpy(r->log + r->len, line, (size_t)n);
    r->len += n;
    r->log[r->len++] = '\n';
    r->log[r->len] = 0;
    r->n_ops++;
}

static pith_backend *rec_in(pith_backend *be) { return ((rec_backend *)be)->inner; }
static int wid(const pith_weight *w) { return w ? w->id : -1; }
static int bid(const pith_buf *b) { return b ? b->id : -1; }
static int bcols(const pith_buf *b) { return b ? b->cols : 0; }

static void rec_destroy(pith_backend *be) {
    rec_backend *r = (rec_backend *)be;
    pith_backend_free(r->inner);
    free(r->log);
    free(r);
}
static int rec_matrix(pith_backend *be, const pith_tensor *t, const char *name, pith_weight **out, pith_err *err) {
    return rec_in(be)->vt->matrix(rec_in(be), t, name, out, err);
}
static int rec_table(pith_backend *be, const pith_tensor *t, const char *name, pith_weight **out, pith_err *err) {
    return rec_in(be)->vt->table(rec_in(be), t, name, out, err);
}
static int rec_vector(pith_backend *be, float *data, int n, pith_weight **out, pith_err *err) {
    return rec_in(be)->vt->vector(rec_in(be), data, n, out, err);
}
static int rec_moe_load(pith_backend *be, const pith_model_file *f, int layer, const pith_moe_config *cfg,
                        const char *const hf[3], pith_moe_weights **out, pith_err *err) {
    return rec_in(be)->vt->moe_load(rec_in(be), f, layer, cfg, hf, out, err);
}
static int rec_moe_place(pith_backend *be, char *what, size_t n, pith_err *err) {
    return rec_in(be)->vt->moe_place(rec_in(be), what, n, err);
}
static int rec_attn_shape(pith_backend *be, const pith_be_attn_shape *s, pith_err *err) {
    return rec_in(be)->vt->attn_shape(rec_in(be), s, err);
}
static pith_buf *rec_buffer(pith_backend *be, int cols, pith_err *err) {
    return rec_in(be)->vt->buffer(rec_in(be), cols, err);
}
static int rec_reserve(pith_backend *be, int n, pith_err *err) { return rec_in(be)->vt->reserve(rec_in(be), n, err); }
static int rec_mem_alloc(pith_backend *be, const pith_mem_spec *s, const pith_mem_layout *l, pith_err *err) {
    return rec_in(be)->vt->mem_alloc(rec_in(be), s, l, err);
}
static void rec_mem_free(pith_backend *be) { rec_in(be)->vt->mem_free(rec_in(be)); }
static bool rec_mem_allocated(const pith_backend *be) {
    const pith_backend *in = ((const rec_backend *)be)->inner;
    return in->vt->mem_allocated(in);
}
static int rec_copy_blocks(pith_backend *be, int g, const int32_t *s, const int32_t *d, int n, pith_err *err) {
    return rec_in(be)->vt->copy_blocks(rec_in(be), g, s, d, n, err);
}
/* The step's shape only: its data are what differs between two replays. */
static int rec_set_step(pith_backend *be, const pith_batch *b, const pith_mem_spec *spec, int n_vocab, float *logits,
                        pith_err *err) {
    rec_printf(be, "set_step tokens=%d seqs=%d logits=%d hidden=%d", b->n_tokens, b->n_seqs, pith_batch_n_logits(b),
               pith_batch_n_hidden(b));
    return rec_in(be)->vt->set_step(rec_in(be), b, spec, n_vocab, logits, err);
}
static void rec_embed(pith_backend *be, const pith_weight *t, float scale, pith_buf *out, int n) {
    rec_printf(be, "embed w%d scale=%a out=b%d/%d n=%d", wid(t), scale, bid(out), bcols(out), n);
    rec_in(be)->vt->embed(rec_in(be), t, scale, out, n);
}
static void rec_rope_tables(pith_backend *be, const pith_rope *r, pith_buf *cs, int n) {
    rec_printf(be, "rope_tables half=%d mscale=%a style=%d f0=%a out=b%d/%d n=%d", r->half, r->mscale, (int)r->style,
               r->half ? r->inv_freq[r->half - 1] : 0.0, bid(cs), bcols(cs), n);
    rec_in(be)->vt->rope_tables(rec_in(be), r, cs, n);
}
static void rec_rmsnorm(pith_backend *be, const pith_buf *x, const pith_weight *w, float eps, pith_buf *out, int n) {
    rec_printf(be, "rmsnorm b%d/%d w%d eps=%a out=b%d/%d n=%d", bid(x), bcols(x), wid(w), eps, bid(out), bcols(out), n);
    rec_in(be)->vt->rmsnorm(rec_in(be), x, w, eps, out, n);
}
static int rec_matmul(pith_backend *be, const pith_buf *in, const pith_be_mm *o, int n_outs, int n, pith_err *err) {
    char s[256];
    int k = 0;
    for (int i = 0; i < n_outs && k < 200; i++)
        k += snprintf(s + k, sizeof s - k, " w%d->b%d/%d%s", wid(o[i].w), bid(o[i].out), bcols(o[i].out),
                      o[i].accumulate ? "+" : "");
    rec_printf(be, "matmul b%d/%d%s n=%d", bid(in), bcols(in), s, n);
    return rec_in(be)->vt->matmul(rec_in(be), in, o, n_outs, n, err);
}
static void rec_qkv(pith_backend *be, const pith_be_qkv_args *a, int n) {
    rec_printf(be, "qkv q=b%d k=b%d v=b%d bias=w%d,w%d,w%d norm=%d w%d,w%d eps=%a rope=b%d style=%d g=%d i=%d n=%d",
               bid(a->q), bid(a->k), bid(a->v), wid(a->bq), wid(a->bk), wid(a->bv), (int)a->qk_norm, wid(a->q_norm),
               wid(a->k_norm), a->eps, bid(a->rope_cs), (int)a->rope_style, a->group, a->layer_index, n);
    rec_in(be)->vt->qkv(rec_in(be), a, n);
}
static void rec_attention(pith_backend *be, const pith_be_attn *a, int n) {
    rec_printf(be, "attention q=b%d out=b%d g=%d i=%d window=%d sinks=w%d n=%d", bid(a->q), bid(a->out), a->group,
               a->layer_index, a->window, wid(a->sinks), n);
    rec_in(be)->vt->attention(rec_in(be), a, n);
}
static void rec_glu(pith_backend *be, pith_glu kind, pith_buf *g, const pith_buf *u, int n) {
    rec_printf(be, "glu %d b%d b%d n=%d", (int)kind, bid(g), bid(u), n);
    rec_in(be)->vt->glu(rec_in(be), kind, g, u, n);
}
static void rec_add_bias(pith_backend *be, pith_buf *y, const pith_weight *b, int n) {
    rec_printf(be, "add_bias b%d w%d n=%d", bid(y), wid(b), n);
    rec_in(be)->vt->add_bias(rec_in(be), y, b, n);
}
static void rec_norm_add(pith_backend *be, pith_buf *x, pith_buf *y, const pith_weight *w, float eps, int n) {
    rec_printf(be, "norm_add b%d b%d w%d eps=%a n=%d", bid(x), bid(y), wid(w), eps, n);
    rec_in(be)->vt->norm_add(rec_in(be), x, y, w, eps, n);
}
static void rec_scale(pith_backend *be, pith_buf *y, float s, int n) {
    rec_printf(be, "scale b%d/%d s=%a n=%d", bid(y), bcols(y), s, n);
    rec_in(be)->vt->scale(rec_in(be), y, s, n);
}
static void rec_attn_temp(pith_backend *be, pith_buf *y, float beta, int length, int n) {
    rec_printf(be, "attn_temp b%d/%d beta=%a length=%d n=%d", bid(y), bcols(y), beta, length, n);
    rec_in(be)->vt->attn_temp(rec_in(be), y, beta, length, n);
}
static void rec_scale_add(pith_backend *be, pith_buf *x, const pith_buf *y, float s, int n) {
    rec_printf(be, "scale_add b%d/%d b%d/%d s=%a n=%d", bid(x), bcols(x), bid(y), bcols(y), s, n);
    rec_in(be)->vt->scale_add(rec_in(be), x, y, s, n);
}
static void rec_zero(pith_backend *be, pith_buf *y, int n) {
    rec_printf(be, "zero b%d/%d n=%d", bid(y), bcols(y), n);
    rec_in(be)->vt->zero(rec_in(be), y, n);
}
static void rec_copy_cols(pith_backend *be, pith_buf *dst, const pith_buf *src, int col0, int n) {
    rec_printf(be, "copy_cols b%d/%d b%d/%d col0=%d n=%d", bid(dst), bcols(dst), bid(src), bcols(src), col0, n);
    rec_in(be)->vt->copy_cols(rec_in(be), dst, src, col0, n);
}
static void rec_activation(pith_backend *be, pith_activation kind, pith_buf *y, int n) {
    rec_printf(be, "activation %d b%d/%d n=%d", (int)kind, bid(y), bcols(y), n);
    rec_in(be)->vt->activation(rec_in(be), kind, y, n);
}
static int rec_moe(pith_backend *be, const pith_moe_weights *w, const pith_buf *in, pith_buf *out, int n, pith_err *err) {
    rec_printf(be, "moe %p b%d b%d n=%d", (const void *)w, bid(in), bid(out), n);
    return rec_in(be)->vt->moe(rec_in(be), w, in, out, n, err);
}
static void rec_keep_rows(pith_backend *be, pith_buf *const *bufs, int n_bufs) {
    char s[128];
    int k = 0;
    for (int i = 0; i < n_bufs && k < 100; i++) k += snprintf(s + k, sizeof s - k, " b%d", bid(bufs[i]));
    rec_printf(be, "keep_rows%s", s);
    rec_in(be)->vt->keep_rows(rec_in(be), bufs, n_bufs);
}
static int rec_head(pith_backend *be, const pith_be_head_args *h, int n_kept, int n_logits, int n_vocab, pith_err *err) {
    rec_printf(be, "head x=b%d s=b%d norm=w%d eps=%a out=w%d cap=%a div=%a kept=%d logits=%d vocab=%d", bid(h->x),
               bid(h->scratch), wid(h->norm), h->eps, wid(h->output), h->softcap, h->logit_scale, n_kept, n_logits,
               n_vocab);
    return rec_in(be)->vt->head(rec_in(be), h, n_kept, n_logits, n_vocab, err);
}

static void rec_short_conv(pith_backend *be, const pith_be_short_conv_args *a, int n) {
    rec_printf(be, "short_conv in=b%d out=b%d w%d K=%d g=%d off=%zu n=%d", bid(a->in), bid(a->out), wid(a->w), a->kernel,
               a->group, a->state_offset, n);
    rec_in(be)->vt->short_conv(rec_in(be), a, n);
}

static void rec_mamba2(pith_backend *be, const pith_be_mamba2_args *a, int n) {
    rec_printf(be,
               "mamba2 proj=b%d/%d y=b%d/%d conv=w%d,w%d dt=w%d A=w%d D=w%d norm=w%d K=%d H=%d G=%d P=%d N=%d "
               "ng=%d eps=%a s=%a g=%d off=%zu n=%d",
               bid(a->proj), bcols(a->proj), bid(a->y), bcols(a->y), wid(a->conv_w), wid(a->conv_b), wid(a->dt_bias),
               wid(a->A), wid(a->D), wid(a->norm), a->kernel, a->n_heads, a->n_groups, a->head_dim, a->d_state,
               a->norm_group, a->eps, a->out_scale, a->group, a->state_offset, n);
    rec_in(be)->vt->mamba2(rec_in(be), a, n);
}
/* Qwen3.5 */
static int rec_gdn_shape(pith_backend *be, int dk, int dv, pith_err *err) {
    return rec_in(be)->vt->gdn_shape(rec_in(be), dk, dv, err);
}
static void rec_gdn(pith_backend *be, const pith_be_gdn_args *a, int n) {
    rec_printf(be, "gdn qkv=b%d/%d beta=b%d alpha=b%d out=b%d/%d w%d,w%d,w%d K=%d heads=%d,%d dk=%d dv=%d tiled=%d g=%d off=%zu n=%d",
               bid(a->qkv), bcols(a->qkv), bid(a->beta), bid(a->alpha), bid(a->out), bcols(a->out), wid(a->conv_w),
               wid(a->dt_bias), wid(a->ssm_a), a->kernel, a->n_k_heads, a->n_v_heads, a->dk, a->dv, (int)a->qk_tiled,
               a->group, a->state_offset, n);
    rec_in(be)->vt->gdn(rec_in(be), a, n);
}
static void rec_gated_norm(pith_backend *be, const pith_be_gated_norm_args *a, int n) {
    rec_printf(be, "gated_norm b%d/%d z=b%d w%d eps=%a n=%d", bid(a->x), bcols(a->x), bid(a->z), wid(a->w), a->eps, n);
    rec_in(be)->vt->gated_norm(rec_in(be), a, n);
}
static void rec_gated_qkv(pith_backend *be, const pith_be_gated_qkv_args *a, int n) {
    rec_printf(be, "gated_qkv qg=b%d q=b%d k=b%d v=b%d norm=w%d,w%d eps=%a rope=b%d/%d style=%d g=%d i=%d n=%d", bid(a->qg),
               bid(a->q), bid(a->k), bid(a->v), wid(a->q_norm), wid(a->k_norm), a->eps, bid(a->rope_cs),
               bcols(a->rope_cs), (int)a->rope_style, a->group, a->layer_index, n);
    rec_in(be)->vt->gated_qkv(rec_in(be), a, n);
}
static void rec_attn_gate(pith_backend *be, const pith_be_attn_gate_args *a, int n) {
    rec_printf(be, "attn_gate b%d qg=b%d n=%d", bid(a->att), bid(a->qg), n);
    rec_in(be)->vt->attn_gate(rec_in(be), a, n);
}
/* The draft's shape only, as set_step's. */
static int rec_set_draft(pith_backend *be, const pith_batch *b, int n_vocab, int n_steps, int32_t *draft, float *logits,
                         pith_err *err) {
    rec_printf(be, "set_draft seqs=%d steps=%d vocab=%d logits=%d", b->n_seqs, n_steps, n_vocab, logits != NULL);
    return rec_in(be)->vt->set_draft(rec_in(be), b, n_vocab, n_steps, draft, logits, err);
}
static void rec_mtp_input(pith_backend *be, const pith_be_mtp_input_args *a, int n) {
    rec_printf(be, "mtp_input w%d w%d w%d eps=%a hidden=b%d out=b%d/%d step=%d g=%d off=%zu n=%d", wid(a->embd),
               wid(a->enorm), wid(a->hnorm), a->eps, bid(a->hidden), bid(a->out), bcols(a->out), a->step, a->group,
               a->tail_offset, n);
    rec_in(be)->vt->mtp_input(rec_in(be), a, n);
}
static void rec_mtp_save(pith_backend *be, const pith_be_mtp_save_args *a) {
    rec_printf(be, "mtp_save b%d/%d g=%d off=%zu", bid(a->hidden), bcols(a->hidden), a->group, a->tail_offset);
    rec_in(be)->vt->mtp_save(rec_in(be), a);
}
static void rec_mtp_attention(pith_backend *be, const pith_be_mtp_attn_args *a, int n) {
    rec_printf(be, "mtp_attention qg=b%d q=b%d k=b%d v=b%d out=b%d norm=w%d,w%d eps=%a half=%d step=%d g=%d i=%d n=%d",
               bid(a->qg), bid(a->q), bid(a->k), bid(a->v), bid(a->out), wid(a->q_norm), wid(a->k_norm), a->eps,
               a->rope->half, a->step, a->group, a->layer_index, n);
    rec_in(be)->vt->mtp_attention(rec_in(be), a, n);
}
static int rec_mtp_logits(pith_backend *be, const pith_be_mtp_logits_args *a, int n, pith_err *err) {
    rec_printf(be, "mtp_logits b%d/%d out=w%d step=%d n=%d", bid(a->x), bcols(a->x), wid(a->output), a->step, n);
    return rec_in(be)->vt->mtp_logits(rec_in(be), a, n, err);
}

static int rec_buf_write(pith_backend *be, pith_buf *b, int n, const float *src, pith_err *err) {
    return rec_in(be)->vt->buf_write(rec_in(be), b, n, src, err);
}
static int rec_buf_read(pith_backend *be, const pith_buf *b, int n, float *dst, pith_err *err) {
    return rec_in(be)->vt->buf_read(rec_in(be), b, n, dst, err);
}
static int rec_sync(pith_backend *be, pith_err *err) { return rec_in(be)->vt->sync(rec_in(be), err); }

static int rec_mla(pith_backend *be, const pith_be_mla_args *a, int n, pith_err *err) {
    rec_printf(be, "mla_attention q=b%d kv=b%d norm=w%d eps=%a cs=b%d style=%d k_b=w%d.. v_b=w%d.. qa=b%d lat=b%d out=b%d "
                   "H=%d R=%d P=%d N=%d V=%d g=%d i=%d kv_b=w%d g=b%d kvx=b%d ms=b%d min=%d n=%d",
               bid(a->q), bid(a->kv), wid(a->kv_norm), a->eps, bid(a->rope_cs), (int)a->rope_style, wid(a->k_b[0]),
               wid(a->v_b[0]), bid(a->qa), bid(a->lat), bid(a->out), a->n_heads, a->rank, a->rope, a->nope, a->v,
               a->group, a->layer_index, wid(a->kv_b), bid(a->g), bid(a->kvx), bid(a->ms), a->expand_min, n);
    return rec_in(be)->vt->mla(rec_in(be), a, n, err);
}

static int rec_mtp_mla(pith_backend *be, const pith_be_mtp_mla_args *m, int n, pith_err *err) {
    const pith_be_mla_args *a = m->mla;
    rec_printf(be, "mtp_mla q=b%d kv=b%d norm=w%d eps=%a k_b=w%d.. v_b=w%d.. qa=b%d lat=b%d out=b%d H=%d R=%d P=%d "
                   "N=%d V=%d g=%d i=%d half=%d step=%d n=%d",
               bid(a->q), bid(a->kv), wid(a->kv_norm), a->eps, wid(a->k_b[0]), wid(a->v_b[0]), bid(a->qa), bid(a->lat),
               bid(a->out), a->n_heads, a->rank, a->rope, a->nope, a->v, a->group, a->layer_index, m->rope->half, m->step,
               n);
    return rec_in(be)->vt->mtp_mla(rec_in(be), m, n, err);
}

static const pith_backend_vt rec_vt = {
    .name = "recording", .destroy = rec_destroy, .matrix = rec_matrix, .table = rec_table, .vector = rec_vector,
    .moe_load = rec_moe_load, .moe_place = rec_moe_place, .attn_shape = rec_attn_shape, .buffer = rec_buffer,
    .reserve = rec_reserve, .mem_alloc = rec_mem_alloc, .mem_free = rec_mem_free, .mem_allocated = rec_mem_allocated,
    .copy_blocks = rec_copy_blocks, .set_step = rec_set_step, .embed = rec_embed, .rope_tables = rec_rope_tables,
    .rmsnorm = rec_rmsnorm, .matmul = rec_matmul, .qkv = rec_qkv, .attention = rec_attention, .glu = rec_glu,
    .add_bias = rec_add_bias, .norm_add = rec_norm_add, .scale = rec_scale, .scale_add = rec_scale_add,
    .attn_temp = rec_attn_temp,
    .zero = rec_zero, .copy_cols = rec_copy_cols, .activation = rec_activation, .moe = rec_moe,
    .keep_rows = rec_keep_rows, .head = rec_head,
    .short_conv = rec_short_conv, .mamba2 = rec_mamba2,
    .gdn_shape = rec_gdn_shape, .gdn = rec_gdn, .gated_norm = rec_gated_norm, .gated_qkv = rec_gated_qkv,
    .attn_gate = rec_attn_gate, .set_draft = rec_set_draft, .mtp_input = rec_mtp_input, .mtp_save = rec_mtp_save,
    .mtp_attention = rec_mtp_attention, .mtp_logits = rec_mtp_logits, .mla = rec_mla, .mtp_mla = rec_mtp_mla,
    .buf_write = rec_buf_write,
    .buf_read = rec_buf_read, .sync = rec_sync,
};

/* Wraps inner (owned from now on). */
static rec_backend *rec_wrap(pith_backend *inner) {
    rec_backend *r = calloc(1, sizeof *r);
    if (!r) abort();
    r->base = *inner;
    r->base.vt = &rec_vt;
    r->inner = inner;
    return r;
}

static void rec_clear(rec_backend *r) {
    r->len = 0, r->n_ops = 0;
    if (r->log) r->log[0] = 0;
}

#endif
