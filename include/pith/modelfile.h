/* A model file, whatever its format, seen as hyper-parameters plus named tensors.
 *
 * pith_model_file_open recognises GGUF (by its magic), a Hugging Face directory (config.json +
 * model.safetensors or a sharded model.safetensors.index.json; a path to the .safetensors file, the
 * index or config.json works too), and llama2.c checkpoints (.bin, legacy 7-int header, file size exactly
 * as the header implies). It maps the data read-only, checks every tensor's extent against its file,
 * reads the hyper-parameters from the format's metadata and exposes tensors under canonical GGUF-style
 * names:
 *
 *   token_embd.weight  output_norm.weight  output.weight (absent when tied to the embedding)
 *   blk.N.attn_norm.weight  blk.N.attn_q.weight  blk.N.attn_k.weight  blk.N.attn_v.weight
 *   blk.N.attn_output.weight  blk.N.attn_q.bias  blk.N.attn_k.bias  blk.N.attn_v.bias (qwen2)
 *   blk.N.attn_q_norm.weight  blk.N.attn_k_norm.weight (qwen3)
 *   blk.N.ffn_norm.weight  blk.N.ffn_gate.weight  blk.N.ffn_up.weight  blk.N.ffn_down.weight
 *   rope_freqs.weight (GGUF Llama 3: head_dim/2 frequency divisors, optional)
 *
 * Weight matrices have ne = {in_features, out_features} (rows are output features) in every format.
 * Q and K weights are stored so that the file's rope_style applies as is (GGUF llama files are already
 * permuted for adjacent-pair rotation; Hugging Face files use rotate-half).
 *
 * After a successful open of a llama, qwen2 or qwen3 model, the forward pass may trust it:
 *  - hyper-parameters are sane (positive, bounded: widths <= 2^20, layers <= 4096, vocab <= 2^24;
 *    n_heads a multiple of n_kv_heads; head_dim even; token ids -1 or inside the vocabulary);
 *  - every tensor listed above that the model needs exists with exactly the expected shape (biases and
 *    q/k norms in every layer when layer 0 has them); tied_embeddings == (output.weight is absent);
 *  - 1-D tensors (norms, biases, rope_freqs) are F32 (F16/BF16 ones are converted into owned copies);
 *  - every data pointer is aligned for its type (4 bytes for F32, 2 otherwise; misaligned safetensors
 *    data is copied);
 *  - RoPE scaling is none, llama3's or linear (never both; a linear factor is positive and finite); other
 *    kinds are refused unless they are the identity.
 * Files of other architectures open with whatever hyper-parameters their metadata gives, unvalidated;
 * the model layer refuses them. Hugging Face tensors with no canonical name keep their own name; their
 * dtype must still be F32, F16 or BF16. Names are NUL-terminated and owned by the pith_model_file. */
#ifndef PITH_MODELFILE_H
#define PITH_MODELFILE_H

#include <stdbool.h>

#include "pith/gguf.h"
#include "pith/status.h"
#include "pith/tensor.h"

typedef enum pith_format {
    PITH_FORMAT_GGUF,
    PITH_FORMAT_SAFETENSORS,
    PITH_FORMAT_LLAMA2C,
} pith_format;

typedef enum pith_rope_style {
    PITH_ROPE_ADJACENT, /* rotate pairs (x[2i], x[2i+1]): GGUF llama, llama2.c */
    PITH_ROPE_HALF,     /* rotate (x[i], x[i + d/2]): GGUF qwen2/qwen3, Hugging Face */
} pith_rope_style;

typedef struct pith_hparams {
    char arch[32];      /* "llama", "qwen2" or "qwen3" */
    int n_vocab;
    int dim;            /* embedding width */
    int n_layers;
    int n_heads;
    int n_kv_heads;
    int head_dim;       /* usually dim / n_heads; qwen3 may differ */
    int ffn_dim;
    int ctx_len;        /* trained context length */
    float norm_eps;
    float rope_theta;
    pith_rope_style rope_style;
    /* Llama 3 rope scaling ("rope_type": "llama3"); rope_scale_factor == 0 means none. */
    float rope_scale_factor;
    float rope_low_freq_factor;
    float rope_high_freq_factor;
    int rope_orig_ctx;
    /* Linear rope scaling ("linear": positions divided by the factor, i.e. every frequency multiplied by
     * 1/factor); 0 means none (a factor of 1 is stored as 0). Also applies on top of a GGUF
     * rope_freqs.weight, as llama.cpp does; never set together with rope_scale_factor. */
    float rope_linear_factor;
    bool has_qkv_bias;  /* qwen2 */
    bool has_qk_norm;   /* qwen3 */
    bool tied_embeddings;
    int bos_id, eos_id; /* -1 when the file does not say */
} pith_hparams;

typedef struct pith_model_file pith_model_file;

int pith_model_file_open(const char *path, pith_model_file **out, pith_err *err);
void pith_model_file_close(pith_model_file *f);

pith_format pith_model_file_format(const pith_model_file *f);
const char *pith_model_file_path(const pith_model_file *f);
const pith_hparams *pith_model_file_hparams(const pith_model_file *f);
/* The GGUF handle (for tokenizer metadata), or NULL for other formats. */
const pith_gguf *pith_model_file_gguf(const pith_model_file *f);
/* For Hugging Face directories: the directory (where tokenizer.json lives); NULL otherwise. */
const char *pith_model_file_dir(const pith_model_file *f);

int pith_model_file_n_tensors(const pith_model_file *f);
const pith_tensor *pith_model_file_tensor_at(const pith_model_file *f, int i);
/* NULL when absent. */
const pith_tensor *pith_model_file_tensor(const pith_model_file *f, const char *name);

#endif
