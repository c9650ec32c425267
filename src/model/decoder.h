/* The base every architecture builds on: a pith_model whose bytes live in a backend (backend.h).
 *
 * It provides the model ops every architecture shares (prepare, mem_alloc, mem_free, copy_blocks,
 * destroy: PITH_DECODER_OPS), the build's beginning and end (the backend, progress, errors prefixed
 * with the file's path, cleanup on failure), tensors bound by name (shapes were checked against the
 * architecture's schema when the file opened: src/format/validate.c), the KV memory of attention layers
 * (a FULL group and a WINDOW group) and the step's bookkeeping (the batch checked and handed to the
 * backend, the rows kept for the output). An architecture's own struct has a pith_decoder first; it
 * makes it with pith_decoder_new, binds its tensors, declares its memory and calls pith_decoder_end;
 * its file then holds only its forward pass and what differs (model/llama.c, model/olmo2.c).
 *
 * Invariants: d->base.impl == d; every weight and buffer belongs to d->be and dies with it; the layer
 * maps (layer_group, layer_index) cover every layer a memory group names. */
#ifndef PITH_MODEL_DECODER_H
#define PITH_MODEL_DECODER_H

#include "backend/backend.h"
#include "pith/model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Tensor parallelism (pith/dist.h): which share of the model this rank holds. With comm NULL the decoder
 * holds the whole model. Otherwise base.hp's n_heads, n_kv_heads and ffn_dim are this rank's (the file's
 * divided by size), and the tensors bind as shards: Q, K, V, gate and up by rows (heads, FFN columns),
 * the attention output and FFN down projections by columns, the output head by vocabulary rows
 * [vocab0, vocab0 + n_vocab); norms and embeddings whole. Partial sums of the two column-sharded
 * products are summed across ranks (pith_decoder_allreduce) before they join the residual. */
typedef struct pith_decoder_shard {
    struct pith_comm *comm;  /* this stage's tensor-parallel ranks (owned: a part of world), or NULL */
    int rank, size;
    int vocab0, n_vocab;
    /* Fewer KV heads than ranks (a divisor of them): each rank holds a copy of the one KV head its query
     * heads read, head rank * kv_file / size of the file's kv_file (base.hp.n_kv_heads is then 1). */
    bool kv_copy;
    int kv_file;
    void **owned;      /* column shards copied out of the file (the backend may keep pointers into them) */
    int n_owned;
    /* Pipeline parallelism (opt->pp > 1): this rank's stage holds layers [l0, l1) and their memory; the
     * first stage embeds, each other receives the residual from the stage before (the rank of the same
     * tensor-parallel rank there), and the last runs the head. Without it: one stage, every layer. */
    struct pith_comm *world;
    int stage, n_stages, l0, l1;
    bool begun;        /* pith_decoder_shard_begin ran with a communicator */
    bool experts_by_column; /* pith_model_options.no_ep: tensor-parallel experts (pith_decoder_moe_shard) */
} pith_decoder_shard;

typedef struct pith_decoder pith_decoder;
struct pith_decoder {
    pith_model base;
    pith_backend *be;
    pith_model_file *file;        /* the file being built from (base.file once the build succeeded) */
    const pith_model_options *opt;
    /* memory: the declared groups' layer lists, and each layer's group and index there */
    int *group_layers, *layer_group, *layer_index;
    /* the architecture's own cleanup (its layer arrays, RoPE tables), before the backend goes; or NULL */
    void (*free_arch)(pith_decoder *d);
    pith_decoder_shard tp;
};

/* Model ops shared by every decoder; the architecture gives its forward. */
int pith_decoder_prepare(pith_model *m, const pith_model_limits *lim, pith_err *err);
int pith_decoder_mem_alloc(pith_model *m, const pith_mem_layout *lay, pith_err *err);
void pith_decoder_mem_free(pith_model *m);
int pith_decoder_copy_blocks(pith_model *m, int g, const int32_t *src, const int32_t *dst, int n, pith_err *err);
void pith_decoder_destroy(pith_model *m);
#define PITH_DECODER_OPS(fwd)                                                                             \
    {.prepare = pith_decoder_prepare, .mem_alloc = pith_decoder_mem_alloc, .mem_free = pith_decoder_mem_free, \
     .copy_blocks = pith_decoder_copy_blocks, .forward = (fwd), .destroy = pith_decoder_destroy}

/* Starts a build: the architecture's struct of `size` bytes (a pith_decoder first), zeroed, with the
 * hyper-parameters, the ops, free_arch (or NULL), has_hidden (every decoder's head hands out its final
 * hidden rows) and the backend; freed by pith_decoder_destroy. NULL (err set) on failure. */
pith_decoder *pith_decoder_new(size_t size, pith_model_file *file, const pith_model_options *opt,
                               const pith_model_ops *ops, void (*free_arch)(pith_decoder *d), pith_err *err);
/* Ends it: rc == 0 hands d out as *out (owning file); otherwise the error is prefixed with the path and
 * d is destroyed (file stays the caller's). Returns rc. */
int pith_decoder_end(pith_decoder *d, int rc, pith_model **out, pith_err *err);
/* The build's progress (done of total units), for pith_model_options.progress. */
void pith_decoder_progress(const pith_decoder *d, double done, double total);

/* Tensors by canonical name (layer < 0: a global name; else "blk.{layer}." + name). A missing optional
 * tensor leaves *out NULL. A vector is checked to hold n elements, the width its op reads. */
int pith_decoder_matrix(pith_decoder *d, int layer, const char *name, const pith_weight **out, pith_err *err);
/* A matrix whose shape the schema does not fix (named by format, or sized by hyper-parameters the
 * schema has no symbol for), checked to be [cols, total] (GGUF's order: cols first), of which rows
 * [row0, row0 + rows) are bound: all of it (row0 0, rows total), or one part of a fused projection
 * (Hugging Face's [gate | up]). */
int pith_decoder_matrix_rows(pith_decoder *d, int layer, const char *name, int cols, int total, int row0, int rows,
                             const pith_weight **out, pith_err *err);
/* A fused projection: a matrix of `cols` columns whose rows are n_parts parts stacked (LFM2's [B | C | x],
 * Mamba2's [z | x | B | C | dt], Qwen3-Next's [q | k | v | z]), part k of part_rows[k] rows in the file.
 * mode[k] (NULL: all SPLIT) says what this rank binds of part k: sharded, SPLIT its share of the part's
 * rows (unsharded, all of them), WHOLE all of them on every rank (Mamba2's B and C when its groups do
 * not divide), SKIP none (the part another weight binds). The parts bound are one matrix, in order: a
 * view of the file where they are one run of rows, else copied out of it. */
enum { PITH_PART_SPLIT = 0, PITH_PART_WHOLE = 1, PITH_PART_SKIP = 2 };
int pith_decoder_matrix_parts(pith_decoder *d, int layer, const char *name, int cols, int n_parts,
                              const int *part_rows, const unsigned char *mode, const pith_weight **out,
                              pith_err *err);
/* The same by columns (a projection whose inputs are parts: Qwen3.5's out-projection over value heads in
 * GGUF's tiled order): `rows` rows, each rank its share of every part's columns, copied side by side
 * (each share on a block boundary of the tensor's type). */
int pith_decoder_matrix_col_parts(pith_decoder *d, int layer, const char *name, int rows, int n_parts,
                                  const int *part_cols, const pith_weight **out, pith_err *err);
/* The same for a vector of parts (a fused convolution's weights, [channels][kernel] per part). */
int pith_decoder_vector_parts(pith_decoder *d, int layer, const char *name, int n_parts, const int *part_elems,
                              const unsigned char *mode, const pith_weight **out, pith_err *err);
/* The same, checked to be rows x cols: for the tensors an architecture's schema gives no symbolic shape. */
int pith_decoder_matrix_of(pith_decoder *d, int layer, const char *name, int rows, int cols, const pith_weight **out,
                           pith_err *err);
int pith_decoder_vector(pith_decoder *d, int layer, const char *name, int n, bool required, const pith_weight **out,
                        pith_err *err);
int pith_decoder_table(pith_decoder *d, const char *name, const pith_weight **out, pith_err *err);
/* The output projection: output.weight, else the tied embeddings. */
int pith_decoder_output(pith_decoder *d, const pith_weight **out, pith_err *err);
/* Another vocabulary projection (an MTP head's own, layer's `name`: [dim, n_vocab]), vocabulary-parallel
 * under --tp like the output. */
int pith_decoder_output_named(pith_decoder *d, int layer, const char *name, const pith_weight **out, pith_err *err);

/* Tensor parallelism: an architecture whose forward pass runs sharded (its layers from the layer library,
 * model/layers.h) calls this right after pith_decoder_new, before it binds a tensor. Without
 * opt->comm it does nothing. Otherwise it checks the backend holds its buffers on the host (the sums go
 * through the communicator there), that n_heads, n_kv_heads and ffn_dim divide by the ranks, refuses
 * experts (expert parallelism is not built yet), and makes base.hp this rank's. A decoder built with
 * opt->comm that never called it fails at pith_decoder_end, naming the architecture. */
int pith_decoder_shard_begin(pith_decoder *d, bool stages, pith_err *err);
/* stages: the architecture's forward runs a layer range (pith_decoder_has_layer, pith_decoder_stage_recv
 * and _send below); false refuses opt->pp > 1. */
/* Whether this rank holds layer l (its weights and memory): every layer without pipeline stages. */
static inline bool pith_decoder_has_layer(const pith_decoder *d, int l) {
    return !d->tp.world || d->tp.n_stages <= 1 || (l >= d->tp.l0 && l < d->tp.l1);
}
static inline bool pith_decoder_first_stage(const pith_decoder *d) { return d->tp.stage == 0; }
static inline bool pith_decoder_last_stage(const pith_decoder *d) {
    return !d->tp.world || d->tp.stage == d->tp.n_stages - 1;
}
/* The residual's n rows from the stage before / to the stage after. A failure ends the job. */
int pith_decoder_stage_recv(pith_decoder *d, pith_buf *x, int n, pith_err *err);
int pith_decoder_stage_send(pith_decoder *d, const pith_buf *x, int n, pith_err *err);
/* How a tensor (its name after "blk.N.") is sharded: Megatron's split of the layer library's blocks. */
typedef enum pith_shard_kind {
    PITH_SHARD_NONE,    /* whole on every rank */
    PITH_SHARD_ROWS,    /* attn_{q,k,v}, ffn_{gate,up,gate_up}: heads, FFN columns */
    PITH_SHARD_COLS,    /* attn_output, ffn_down: their inputs' heads and FFN columns */
    PITH_SHARD_VECTOR,  /* attn_{q,k,v}.bias, attn_sinks, attn_{q,k}_norm: per head (when not head_dim wide) */
} pith_shard_kind;
pith_shard_kind pith_decoder_shard_kind(const char *name);
/* Whether tensor `name` (after "blk.N.") is a K or V projection or bias this rank holds one head of whole,
 * a copy (decoder.h: pith_decoder_shard.kv_copy). */
bool pith_decoder_kv_copied(const pith_decoder *d, const char *name);
/* Sums y's n rows across the ranks (nothing when not sharded). A failure aborts the job: the other
 * ranks are in the same sum and cannot be left behind. */
int pith_decoder_allreduce(pith_decoder *d, pith_buf *y, int n, pith_err *err);
/* A mixture of experts' layer under --tp: this rank's experts (expert parallelism) or its columns of every
 * expert (pith_model_options.no_ep), the shared expert on rank 0; nothing unsharded. */
void pith_decoder_moe_shard(const pith_decoder *d, pith_moe_config *cfg);
/* The same over n floats of host memory. */
int pith_decoder_allreduce_floats(pith_decoder *d, float *x, size_t n, pith_err *err);
/* An MTP draft step's vocabulary projection and greedy token (pith_be_mtp_logits over the output head's
 * rows here); sharded, the ranks' best logits settle each sequence's token (its first maximum over the
 * whole vocabulary), which every rank's backend then drafts from (mtp_pick). draft and n_steps: the
 * draft set_draft named. */
int pith_decoder_mtp_logits(pith_decoder *d, const pith_buf *x, const pith_weight *output, int step, int n,
                            const int32_t *draft, int n_steps, pith_err *err);
/* The output head's rows on this rank: hp.n_vocab unsharded. */
static inline int pith_decoder_head_vocab(const pith_decoder *d) {
    return d->tp.comm ? d->tp.n_vocab : d->base.hp.n_vocab;
}
/* Binds rows [row0, row0 + rows) and columns [col0, col0 + cols) of a 2-D tensor (a column part is copied
 * out of the file, on a block boundary of its type). */
int pith_decoder_bind_part(pith_decoder *d, const pith_tensor *t, const char *full, int row0, int rows, int col0,
                           int cols, const pith_weight **out, pith_err *err);

/* The KV memory of attention layers: a FULL group of the layers with window_of(l) == 0 and a WINDOW group
 * of the others (one window for all of them), each with kv_dim of K and V per token. */
int pith_decoder_kv_memory(pith_decoder *d, int kv_dim, int (*window_of)(const pith_hparams *hp, int l),
                           pith_err *err);

/* The memory of a hybrid model: a FULL group of the attention layers (kv_dim of K and V, F16) and a
 * RECURRENT group of the layers with hp.layer_recurrent set (state_floats per layer, in layer order),
 * each left out when no layer is of its kind; layers with hp.layer_mlp set are in neither. The maps get
 * `spare` entries past the decoder's layers for the architecture to fill (Qwen3.5's MTP layer). */
int pith_decoder_hybrid_memory(pith_decoder *d, int kv_dim, size_t state_floats, int spare, pith_err *err);
/* The memory of an attention-only model loaded with its MTP head (GLM-4.5's and DeepSeek-V3's nextn layer):
 * group PITH_DECODER_MTP_FULL holds every layer and the head's as layer n_layers (k_dim of K and v_dim of
 * V per token, F16; DeepSeek's latent rows have no V), group PITH_DECODER_MTP_RECURRENT no layer, only the
 * last hidden state (hp.dim floats) of each sequence, so the engine's slots, snapshots and checkpoints
 * carry it. */
enum { PITH_DECODER_MTP_FULL = 0, PITH_DECODER_MTP_RECURRENT = 1 };
int pith_decoder_mtp_memory(pith_decoder *d, int k_dim, int v_dim, pith_err *err);

/* The step begins: the batch checked against the memory and handed to the backend (logits and
 * b->hidden: where the step's outputs go). */
int pith_decoder_step(pith_decoder *d, const pith_batch *b, float *logits, pith_err *err);
/* Rows that want logits or hidden states; rows that want logits. */
int pith_decoder_n_kept(const pith_batch *b);

/* The backend's attention shape from the hyper-parameters (query_scale, else 1/sqrt(head_dim)). */
int pith_decoder_attn_shape(pith_decoder *d, pith_err *err);

#ifdef __cplusplus
}
#endif

#endif
