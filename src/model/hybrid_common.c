/* Shared pieces of the hybrid decoders (hybrid_common.h). */
#include "model/hybrid_common.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/kv_rows.h"
#include "backend/cpu/quants.h"
#include "backend/cpu/batch_check.h"

int pith_hy_load_vec(const pith_model_file *f, const char *name, int64_t n, float **out, pith_err *err) {
    *out = NULL;
    const pith_tensor *t = pith_model_file_tensor(f, name);
    if (!t) return pith_errf(err, "missing tensor %s", name);
    if (pith_tensor_nelems(t) != n || (t->type != PITH_F32 && t->type != PITH_F16 && t->type != PITH_BF16) ||
        t->nbytes < pith_dtype_row_bytes(t->type, n))
        return pith_errf(err, "tensor %s: expected %lld F32, F16 or BF16 elements", name, (long long)n);
    if (!(*out = malloc((size_t)n * sizeof(float)))) return pith_errf(err, "out of memory");
    pith_dequantize_row(t->type, t->data, *out, n);
    return 0;
}

int pith_hy_load_mat(const pith_model_file *f, const char *name, int rows, int cols, pith_matrix *m, pith_err *err) {
    const pith_tensor *t = pith_model_file_tensor(f, name);
    if (!t) return pith_errf(err, "missing tensor %s", name);
    if (pith_matrix_from_tensor(m, t, err)) return -1;
    if (m->rows != rows || m->cols != cols)
        return pith_errf(err, "tensor %s: shape [%d, %d], expected [%d, %d]", name, m->cols, m->rows, cols, rows);
    return 0;
}

int pith_hy_load_io(const pith_model_file *f, const pith_hparams *hp, const char *norm_name, const pith_tensor **embd,
                    size_t *row_bytes, float **out_norm, pith_matrix *output, pith_err *err) {
    pith_matrix em;
    *embd = pith_model_file_tensor(f, "token_embd.weight");
    if (pith_hy_load_mat(f, "token_embd.weight", hp->n_vocab, hp->dim, &em, err)) return -1;
    *row_bytes = em.row_bytes;
    if (pith_hy_load_vec(f, norm_name, hp->dim, out_norm, err)) return -1;
    return pith_hy_load_mat(f, pith_model_file_tensor(f, "output.weight") ? "output.weight" : "token_embd.weight",
                            hp->n_vocab, hp->dim, output, err);
}

int pith_hy_declare_memory(pith_model *m, int kv_dim, size_t state_floats, int spare, int **group_layers_out,
                           int **layer_group_out, int **layer_index_out, pith_err *err) {
    const int L = m->hp.n_layers;
    size_t n = (size_t)L + (size_t)(spare > 0 ? spare : 0);
    int *group_layers = *group_layers_out = malloc(n * sizeof(int));
    int *layer_group = *layer_group_out = malloc(n * sizeof(int));
    int *layer_index = *layer_index_out = malloc(n * sizeof(int));
    if (!group_layers || !layer_group || !layer_index) return pith_errf(err, "out of memory");
    pith_mem_spec *spec = &m->mem;
    memset(spec, 0, sizeof *spec);
    for (int rec = 0, n = 0; rec < 2; rec++) {
        int first = n;
        for (int l = 0; l < L; l++) {
            if (pith_layer_bit(m->hp.layer_mlp, l) || pith_layer_bit(m->hp.layer_recurrent, l) != (rec == 1)) continue;
            layer_group[l] = spec->n_groups;
            layer_index[l] = n - first;
            group_layers[n++] = l;
        }
        if (n == first) continue;
        pith_mem_group *g = &spec->groups[spec->n_groups++];
        g->n_layers = n - first;
        g->layers = &group_layers[first];
        if (rec) {
            g->kind = PITH_MEM_RECURRENT;
            g->state_bytes = (size_t)g->n_layers * state_floats * sizeof(float);
        } else {
            g->kind = PITH_MEM_FULL;
            g->type = PITH_F16;
            g->k_dim = g->v_dim = kv_dim;
        }
    }
    return pith_mem_spec_check(spec, L, err);
}

static void job_worker(void *arg, int ith, int nth) {
    (void)nth;
    pith_hy_job *j = arg;
    for (;;) {
        int t0 = atomic_fetch_add_explicit(&j->next, j->chunk, memory_order_relaxed);
        if (t0 >= j->n) break;
        int t1 = t0 + j->chunk < j->n ? t0 + j->chunk : j->n;
        for (int t = t0; t < t1; t++) j->row(j, t, ith);
    }
}

void pith_hy_run(pith_cpu *c, pith_hy_job *j, void (*row)(pith_hy_job *j, int t, int ith), int n, double width) {
    j->row = row;
    j->n = n;
    j->chunk = n / (4 * c->n_threads);
    if (j->chunk < 1) j->chunk = 1;
    atomic_store_explicit(&j->next, 0, memory_order_relaxed);
    pith_pool_run_sized(c->pool, job_worker, j, (double)n * width);
}

int pith_hy_mem_alloc(pith_kv_host *mem, const pith_mem_spec *spec, const pith_mem_layout *lay, pith_err *err) {
    if (pith_kv_host_allocated(mem)) return pith_errf(err, "the model's memory is already allocated (one engine at a time)");
    return pith_kv_host_alloc(mem, spec, lay, err);
}

int pith_hy_copy_blocks(pith_kv_host *mem, int g, const int32_t *src, const int32_t *dst, int n, pith_err *err) {
    if (g < 0 || g >= mem->n_groups) return pith_errf(err, "copy_blocks: no memory group %d", g);
    pith_kv_cache *c = &mem->groups[g];
    if (c->kind != PITH_MEM_RECURRENT) return pith_kv_host_copy_blocks(mem, g, src, dst, n, err);
    for (int i = 0; i < n; i++)
        if (src[i] < 0 || src[i] >= c->n_slots || dst[i] < 0 || dst[i] >= c->n_slots)
            return pith_errf(err, "copy_blocks: state slot %d -> %d outside the pool of %d", src[i], dst[i], c->n_slots);
    for (int i = 0; i < n; i++)
        if (src[i] != dst[i])
            memcpy(c->state + (size_t)dst[i] * c->state_bytes, c->state + (size_t)src[i] * c->state_bytes, c->state_bytes);
    return 0;
}

int pith_hy_check(const pith_model *m, const pith_kv_host *mem, const pith_batch *b, pith_err *err) {
    if (!pith_kv_host_allocated(mem) && m->mem.n_groups > 0) return pith_errf(err, "the model's memory is not allocated");
    return pith_batch_check(b, &m->mem, mem, m->hp.n_vocab, err);
}

int pith_hy_seq_starts(const pith_batch *b, int *seq_start, pith_err *err) {
    for (int s = 0, t = 0; s <= b->n_seqs; s++) {
        seq_start[s] = t;
        while (t < b->n_tokens && b->seq[t] == s) t++;
    }
    for (int s = 0; s < b->n_seqs; s++)
        if (seq_start[s + 1] == seq_start[s])
            return pith_errf(err, "batch: sequences are not numbered in the order of their tokens");
    return 0;
}

void pith_hy_rmsnorm(float *out, const float *x, const float *w, int n, float eps) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float r = (float)(1.0 / sqrt(ss / n + eps));
    for (int i = 0; i < n; i++) out[i] = x[i] * r * w[i];
}

int pith_hy_keep_rows(float *x, const pith_batch *b, int dim) {
    int n = 0;
    for (int t = 0; t < b->n_tokens; t++) {
        if (!b->want_logits[t] && !(b->want_hidden && b->want_hidden[t])) continue;
        if (n != t) memcpy(x + (size_t)n * dim, x + (size_t)t * dim, (size_t)dim * sizeof(float));
        n++;
    }
    return n;
}

void pith_hy_store_kv(const pith_cpu *c, const pith_kv_host *mem, const pith_batch *b, int g, int layer_index, int t,
                      const float *k, const float *v, int n_kv_heads, int hd) {
    const pith_kv_cache *kv = &mem->groups[g];
    size_t bs = (size_t)kv->block_size, slot = (size_t)b->mem[g].slots[t];
    size_t block_off = pith_kv_k_offset(kv, layer_index, (int)(slot / bs));
    for (int h = 0; h < n_kv_heads; h++) {
        size_t off = block_off + ((size_t)h * bs + slot % bs) * hd;
        pith_kv_store_f32(c->k, kv->type, k + (size_t)h * hd, kv->k, off, (size_t)hd);
        pith_kv_store_f32(c->k, kv->type, v + (size_t)h * hd, kv->v, off, (size_t)hd);
    }
}

void pith_hy_attention(pith_cpu *c, pith_attn_scratch *s, const pith_kv_host *mem, const pith_batch *b, int g,
                       int layer_index, int kv_dim, const float *q, int q_dim, float *out) {
    const pith_kv_cache *kv = &mem->groups[g];
    size_t layer_off = pith_kv_bytes(kv->type, pith_kv_k_offset(kv, layer_index, 0));
    pith_attn_args aa = {
        .n_tokens = b->n_tokens, .positions = b->positions, .seq = b->seq, .block_tables = b->mem[g].block_tables,
        .max_blocks = b->mem[g].max_blocks, .block_size = kv->block_size,
        .k_cache = (const uint8_t *)kv->k + layer_off, .v_cache = (const uint8_t *)kv->v + layer_off,
        .kv_type = kv->type, .kv_dim = kv_dim, .q = q, .q_ld = q_dim, .out = out, .out_ld = q_dim,
    };
    pith_attention(c, s, &aa);
}

int pith_hy_output(pith_cpu *c, const pith_batch *b, float *xb, int dim, const pith_matrix *output, int n_vocab,
                   float *logits, pith_err *err) {
    int n_out = 0, n_hid = 0;
    for (int t = 0, r = 0; t < b->n_tokens; t++) {
        bool wl = b->want_logits[t] != 0, wh = b->want_hidden && b->want_hidden[t];
        if (!wl && !wh) continue;
        const float *row = xb + (size_t)r++ * dim;
        if (wh) memcpy(b->hidden + (size_t)n_hid++ * dim, row, (size_t)dim * sizeof(float));
        if (wl && xb + (size_t)n_out * dim != row) memmove(xb + (size_t)n_out * dim, row, (size_t)dim * sizeof(float));
        n_out += wl;
    }
    if (n_out == 0) return 0;
    pith_acts a;
    pith_acts_bind(c, &a, xb, n_out, dim, dim);
    return pith_cpu_matmul(c, output, &a, logits, n_vocab, false, err);
}
