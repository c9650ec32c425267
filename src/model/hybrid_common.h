/* What the hybrid decoders (lfm2.c, qwen35.c: attention layers beside layers with recurrent state) do
 * alike, written once: reading norm vectors and matrices from the file, their memory (a host KV pool whose
 * RECURRENT groups copy whole state slots), the checks and per-sequence runs of a batch, K/V into a FULL
 * group and attention over it, and the last step (the rows that want hidden states or logits). */
#ifndef PITH_MODEL_HYBRID_COMMON_H
#define PITH_MODEL_HYBRID_COMMON_H

#include <stdint.h>

#include "backend/cpu/attention.h"
#include "backend/cpu/cpu.h"
#include "backend/cpu/matmul.h"
#include "pith/batch.h"
#include "pith/kv.h"
#include "pith/model.h"

/* A vector of n F32, F16 or BF16 elements, as float32 into a new *out (NULL on failure). */
int pith_hy_load_vec(const pith_model_file *f, const char *name, int64_t n, float **out, pith_err *err);
/* A matrix of rows x cols (a view of the file's bytes until packed). */
int pith_hy_load_mat(const pith_model_file *f, const char *name, int rows, int cols, pith_matrix *m, pith_err *err);

/* Declares the model's memory (m->mem): a FULL group of the attention layers (F16 K and V of kv_dim per
 * token) and a RECURRENT group of the layers with hp.layer_recurrent set (state_floats floats of state
 * per layer, in layer order), each left out when no layer is of its kind; layers with hp.layer_mlp set
 * (an MLP alone) are in neither. Allocates and fills the maps (the caller frees them,
 * [n_layers + spare] each: spare entries past the decoder's layers are the caller's to fill, as Qwen3.5's
 * MTP layer): group_layers (the layers of each group, in group order), layer_group and
 * layer_index (a layer's group and its index there). */
int pith_hy_declare_memory(pith_model *m, int kv_dim, size_t state_floats, int spare, int **group_layers,
                           int **layer_group, int **layer_index, pith_err *err);

/* The embeddings and the output: *embd is token_embd.weight (rows of *row_bytes, checked [n_vocab, dim]),
 * *out_norm the final norm norm_name, *output the vocabulary projection (output.weight, else the tied
 * embeddings; a view until packed). */
int pith_hy_load_io(const pith_model_file *f, const pith_hparams *hp, const char *norm_name, const pith_tensor **embd,
                    size_t *row_bytes, float **out_norm, pith_matrix *output, pith_err *err);

/* Per-token (or per-unit) work between two matmuls, claimed in chunks by the pool's threads: row(j, t,
 * ith) for t < n, ith the thread. m is the model, the other fields what the rows need. */
typedef struct pith_hy_job pith_hy_job;
struct pith_hy_job {
    void *m;
    const pith_batch *b;
    int layer, n;
    const float *norm;
    void (*row)(pith_hy_job *j, int t, int ith);
    int chunk;
    _Atomic int next;
};
/* Runs row over 0..n-1 (width: the work of one, for the pool's sizing). */
void pith_hy_run(pith_cpu *c, pith_hy_job *j, void (*row)(pith_hy_job *j, int t, int ith), int n, double width);

/* The model's ops over its host memory: one engine at a time; a RECURRENT group copies whole slots. */
int pith_hy_mem_alloc(pith_kv_host *mem, const pith_mem_spec *spec, const pith_mem_layout *lay, pith_err *err);
int pith_hy_copy_blocks(pith_kv_host *mem, int g, const int32_t *src, const int32_t *dst, int n, pith_err *err);

/* Checks the batch (batch_check.h) against the allocated memory; then seq_start[s] is sequence s's
 * first token and seq_start[n_seqs] == n_tokens (the scratch of n_seqs + 1 ints is the caller's, sized
 * after the check). */
int pith_hy_check(const pith_model *m, const pith_kv_host *mem, const pith_batch *b, pith_err *err);
int pith_hy_seq_starts(const pith_batch *b, int *seq_start, pith_err *err);

void pith_hy_rmsnorm(float *out, const float *x, const float *w, int n, float eps);
/* Moves the residual rows (dim floats) of the tokens that want logits or hidden states to the front, in
 * batch order; returns their number. */
int pith_hy_keep_rows(float *x, const pith_batch *b, int dim);

/* Token t's K and V (n_kv_heads heads of hd floats each) into its slot of FULL group g, layer
 * layer_index of the group, head-major within a block (as the Llama decoder lays them out: kv.h). */
void pith_hy_store_kv(const pith_cpu *c, const pith_kv_host *mem, const pith_batch *b, int g, int layer_index, int t,
                      const float *k, const float *v, int n_kv_heads, int hd);
/* Causal attention of every token's q (rows of q_dim) over FULL group g, layer layer_index, into out
 * (rows of q_dim). */
void pith_hy_attention(pith_cpu *c, pith_attn_scratch *s, const pith_kv_host *mem, const pith_batch *b, int g,
                       int layer_index, int kv_dim, const float *q, int q_dim, float *out);

/* xb holds the final-normed rows of the tokens that want logits or hidden states, in batch order: copies
 * the hidden rows into b->hidden and multiplies the logits rows by the vocabulary projection. */
int pith_hy_output(pith_cpu *c, const pith_batch *b, float *xb, int dim, const pith_matrix *output, int n_vocab,
                   float *logits, pith_err *err);

#endif
