/* A model file, whatever its format, seen as hyper-parameters plus named tensors.
 *
 * pith_model_file_open recognises GGUF (by its magic), a Hugging Face directory (config.json +
 * model.safetensors or a sharded model.safetensors.index.json; a path to the .safetensors file, the
 * index or config.json works too), and llama2.c checkpoints (.bin, legacy 7-int header, file size exactly
 * as the header implies). It maps the data read-only, checks every tensor's extent against its file,
 * reads the hyper-parameters from the format's metadata and exposes tensors under canonical GGUF-style
 * names (llama.cpp's: token_embd.weight, output_norm.weight, output.weight, blk.N.attn_q.weight, ...).
 *
 * Which architectures exist, and everything particular to one (its GGUF and Hugging Face names, RoPE
 * style, Hugging Face tensor names, tensor schema, metadata keys, checks), lives in its descriptor under
 * src/model/ (see src/model/arch.h and docs/adding-an-architecture.md); the loaders here are generic.
 *
 * Weight matrices have ne = {in_features, out_features} (rows are output features) in every format.
 * Q and K weights are stored so that the file's rope_style applies as is (GGUF llama files are already
 * permuted for adjacent-pair rotation; Hugging Face files use rotate-half).
 *
 * After a successful open of a registered architecture, the forward pass may trust it:
 *  - hyper-parameters are sane (positive, bounded: widths <= 2^20, layers <= PITH_MAX_LAYERS,
 *    vocab <= 2^24; n_heads a multiple of n_kv_heads; head_dim even; token ids -1 or inside the
 *    vocabulary; per-layer bits only below n_layers), plus the architecture's own checks;
 *  - every tensor of the architecture's schema exists with exactly the expected shape (optional ones may
 *    be absent; "all or none" ones are in every layer when layer 0 has them); tied_embeddings ==
 *    (output.weight is absent);
 *  - 1-D tensors of the schema (norms, biases, rope_freqs) are F32 (F16/BF16 ones are converted into
 *    owned copies) and mean the same whatever the format (e.g. Gemma's norm weights are w + 1 in both);
 *  - every data pointer is aligned for its type (4 bytes for F32, 2 otherwise; misaligned safetensors
 *    data is copied);
 *  - RoPE scaling is none, llama3's, linear or YaRN (at most one; factors positive and finite); other
 *    kinds are refused unless they are the identity.
 * GGUF files of unregistered architectures open with whatever hyper-parameters their metadata gives,
 * unvalidated; the model layer refuses them. Hugging Face directories of unregistered architectures are
 * refused. Hugging Face tensors with no canonical name keep their own name; their dtype must still be F32,
 * F16 or BF16. Names are NUL-terminated and owned by the pith_model_file. */
#ifndef PITH_MODELFILE_H
#define PITH_MODELFILE_H

#include <stdbool.h>
#include <stdint.h>

#include "pith/api.h"
#include "pith/gguf.h"
#include "pith/status.h"
#include "pith/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum pith_format {
    PITH_FORMAT_GGUF,
    PITH_FORMAT_SAFETENSORS,
    PITH_FORMAT_LLAMA2C,
} pith_format;

typedef enum pith_rope_style {
    PITH_ROPE_ADJACENT, /* rotate pairs (x[2i], x[2i+1]): GGUF llama, llama2.c */
    PITH_ROPE_HALF,     /* rotate (x[i], x[i + d/2]): GGUF qwen2/qwen3, Hugging Face */
} pith_rope_style;

/* How a mixture-of-experts router turns its logits into expert scores. */
typedef enum pith_expert_gating {
    PITH_GATING_SOFTMAX, /* over every expert (Mixtral, Qwen-MoE, GPT-OSS) */
    PITH_GATING_SIGMOID, /* per expert (DeepSeek-V3-style routers) */
} pith_expert_gating;

/* The most layers a model may have (and the size of the per-layer bitmasks below). */
#define PITH_MAX_LAYERS 4096

typedef struct pith_hparams {
    char arch[32];      /* the descriptor's name, as GGUF's general.architecture: "llama", "gemma3", ... */
    int n_vocab;
    int dim;            /* embedding width */
    int n_layers;       /* the decoder's layers, not counting n_mtp_layers */
    /* Multi-token-prediction (MTP / "nextn") layers the file carries after the decoder's (GGUF:
     * {arch}.nextn_predict_layers, counted in block_count, as blk.{n_layers + i}.*; Hugging Face:
     * "mtp_num_hidden_layers", tensors "mtp.*"); 0: none. A model loaded with pith_model_options.mtp
     * runs them as a draft source for speculative decoding (model.h: mtp_draft). */
    int n_mtp_layers;
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
    /* YaRN scaling ("yarn"); rope_yarn_factor 0 means none (never set with the two above). Frequency i
     * blends theta^(-2i/d) (extrapolated) and that divided by the factor (interpolated): the ramp is
     * 0 (extrapolate) for i below `low` and 1 (interpolate) above `high`, linear between, where low and
     * high are the dimensions whose frequency turns beta_fast and beta_slow times over rope_orig_ctx
     * positions, d ln(orig / (2 pi beta)) / (2 ln theta) (rounded down and up when rope_yarn_truncate),
     * clamped to [0, d - 1]. cos and sin are multiplied by rope_yarn_mscale, so every score by its square
     * (Hugging Face's attention_factor; by default 1 + 0.1 ln factor). */
    float rope_yarn_factor;
    float rope_yarn_beta_fast;
    float rope_yarn_beta_slow;
    float rope_yarn_mscale;
    bool rope_yarn_truncate;
    /* Sliding-window attention: 0 = none. A layer whose layer_swa bit is set lets the token at position p
     * attend to positions [p - sliding_window + 1, p] only (Hugging Face's and llama.cpp's convention);
     * the other layers attend to the whole context. Mistral sets every layer's bit; Gemma 3 five of six. */
    int sliding_window;
    uint64_t layer_swa[PITH_MAX_LAYERS / 64];
    /* Layers that apply no RoPE to Q and K at all (SmolLM3's NoPE layers). */
    uint64_t layer_no_rope[PITH_MAX_LAYERS / 64];
    /* RoPE base of the sliding-window layers, used without any scaling (no linear or llama3 factor, no
     * rope_freqs.weight); 0 = those layers rotate exactly like the others. */
    float rope_theta_swa;
    /* Attention scores are q.k * query_scale; 0 means 1/sqrt(head_dim). */
    float query_scale;
    /* Soft-capping: x -> cap * tanh(x / cap), on the final logits and on the attention scores (after
     * scaling); 0 = none. */
    float final_logit_softcap;
    float attn_logit_softcap;
    /* Mixture of experts; n_experts 0 means every layer has a dense FFN of ffn_dim. Otherwise every
     * layer's FFN is routed (src/model/moe.h): a router scores the n_experts experts per token (softmax,
     * or sigmoid for PITH_GATING_SIGMOID), the n_experts_used best are run (gated FFNs of
     * expert_ffn_dim) and their outputs summed with their scores as weights, renormalised to sum to 1
     * when expert_norm_topk; plus a shared expert of expert_shared_ffn_dim when that is not 0. */
    int n_experts;
    int n_experts_used;
    int expert_ffn_dim;
    int expert_shared_ffn_dim;
    bool expert_norm_topk;
    int expert_gating;  /* pith_expert_gating */
    /* Group-limited routing (DeepSeek-V2/V3, GLM-4.5): the experts form expert_groups equal groups in
     * index order; a token first keeps its expert_groups_used best groups (by their best score, or with
     * sigmoid gating by the sum of their two best selection scores) and chooses its experts among
     * those. 0: one group. The chosen weights (after any renormalisation) are multiplied by
     * expert_weights_scale (routed_scaling_factor; 0 means 1). The first expert_dense_leading layers
     * have a dense FFN of ffn_dim instead of experts (first_k_dense_replace). */
    int expert_groups;
    int expert_groups_used;
    float expert_weights_scale;
    int expert_dense_leading;
    bool has_qkv_bias;  /* attn_{q,k,v}.bias in every layer (qwen2) */
    bool has_qk_norm;   /* attn_{q,k}_norm.weight in every layer (qwen3, gemma3) */
    bool tied_embeddings;
    int bos_id, eos_id; /* -1 when the file does not say */
    /* Hybrid models: layers whose token mixer is recurrent (a short convolution, Gated DeltaNet, Mamba)
     * instead of attention, and the width of their causal convolution (LFM2's L_cache); 0: none. */
    uint64_t layer_recurrent[PITH_MAX_LAYERS / 64];
    /* Nemotron-H: layers that are an MLP alone (no token mixer, so neither attention nor recurrent). */
    uint64_t layer_mlp[PITH_MAX_LAYERS / 64];
    int conv_kernel;
    /* What only one architecture reads (GPT-OSS's SwiGLU limit, Qwen3.5's DeltaNet widths and partial
     * rotary, the Mamba2 widths, Granite's multipliers) lives in that architecture's own
     * struct, filled by its metadata hooks and checked by its check hook (src/format/arch.h:
     * params_size; src/model/<arch>_arch.h defines it); owned by the model file; NULL when the
     * architecture has none. Opaque here, so that adding an architecture does not change this struct. */
    const void *arch_params;
} pith_hparams;

/* Per-layer bitmask access; layers outside 0..PITH_MAX_LAYERS-1 read as unset and are not written.
 * The range test returns early rather than joining the bit test with &&: GCC 12.2 at -O2 miscompiled
 * the && form in a loop that both accumulates bits of one mask and compares the bits of two
 * (test_hybrid_formats' nemotron_h layer check failed; clang and -O0 were right). */
static inline bool pith_layer_bit(const uint64_t *mask, int layer) {
    if (layer < 0 || layer >= PITH_MAX_LAYERS) return false;
    return (mask[layer / 64] >> (layer % 64)) & 1u;
}
static inline void pith_layer_set(uint64_t *mask, int layer, bool on) {
    if (layer < 0 || layer >= PITH_MAX_LAYERS) return;
    uint64_t bit = (uint64_t)1 << (layer % 64);
    mask[layer / 64] = on ? mask[layer / 64] | bit : mask[layer / 64] & ~bit;
}
/* Does layer l use the sliding window? (false when sliding_window is 0) */
static inline bool pith_hparams_layer_swa(const pith_hparams *hp, int l) {
    return hp->sliding_window > 0 && pith_layer_bit(hp->layer_swa, l);
}
/* Does layer l skip RoPE? */
static inline bool pith_hparams_layer_no_rope(const pith_hparams *hp, int l) {
    return pith_layer_bit(hp->layer_no_rope, l);
}

typedef struct pith_model_file pith_model_file;

PITH_API int pith_model_file_open(const char *path, pith_model_file **out, pith_err *err);
PITH_API void pith_model_file_close(pith_model_file *f);

PITH_API pith_format pith_model_file_format(const pith_model_file *f);
PITH_API const char *pith_model_file_path(const pith_model_file *f);
PITH_API const pith_hparams *pith_model_file_hparams(const pith_model_file *f);
/* The GGUF handle (for tokenizer metadata), or NULL for other formats. */
PITH_API const pith_gguf *pith_model_file_gguf(const pith_model_file *f);
/* For Hugging Face directories: the directory (where tokenizer.json lives); NULL otherwise. */
PITH_API const char *pith_model_file_dir(const pith_model_file *f);

PITH_API int pith_model_file_n_tensors(const pith_model_file *f);
PITH_API const pith_tensor *pith_model_file_tensor_at(const pith_model_file *f, int i);
/* NULL when absent. */
PITH_API const pith_tensor *pith_model_file_tensor(const pith_model_file *f, const char *name);

#ifdef __cplusplus
}
#endif

#endif
