/* The mixture-of-experts feed-forward block on the CPU: the backend's routed MoE op (backend.h) and the
 * hybrids' experts.
 *
 * Per token x (the FFN's normed input; with in_norm_eps > 0, Gemma 4's, the un-normed residual r, and
 * the experts read x = RMSNorm(r) * in_norm while the router reads RMSNorm(r) * router_norm / sqrt(dim)):
 *   logits = R x (+ router bias)                                  R: n_experts x dim
 *   scores = softmax(logits) over all experts, or sigmoid(logits) per expert (gating)
 *   chosen = the top_k experts by score (+ selection bias, exp_probs_b, where the file has one; ties go
 *            to the lower index), in order of that rank; with n_group groups (experts in index order),
 *            only among the topk_group best groups (a group's best key, or with sigmoid gating the sum
 *            of its two best)
 *   w_j    = score of chosen j, divided by the sum over the chosen when norm_topk, times the chosen
 *            expert's own scale (expert_scale[e], where the file has ffn_down_exps.scale), times
 *            routed_scale
 *   y      = sum_j w_j * down_e(act(gate_e x + bg_e, up_e x + bu_e)) + bd_e        (e = chosen j)
 *          + [sigmoid(s . x) *] down_s(silu(gate_s x) * up_s x)     with a shared expert (and its gate)
 * act is silu(g) * u, Gemma 4's gelu_tanh(g) * u, or GPT-OSS's clamped SwiGLU: g' = min(g, limit),
 * u' = clamp(u, -limit, limit), (u' + 1) * g' * sigmoid(alpha * g').
 *
 * The batch: tokens are grouped by expert with a counting sort (within an expert in batch order), the
 * gathered rows of all experts go through one grouped matrix product for gate and up together and one
 * for down (backend/cpu/grouped.h), and each token sums its experts' rows in rank order. Every row is
 * computed as it would be alone, so a token's output does not depend on the rest of the batch. */
#ifndef PITH_CPU_MOE_H
#define PITH_CPU_MOE_H

#include <stdbool.h>

#include "backend/backend.h"
#include "backend/cpu/matmul.h"
#include "pith/modelfile.h"

typedef struct pith_moe_layer {
    pith_moe_config cfg;
    pith_matrix router;                 /* n_experts x dim */
    float *router_bias;                 /* [n_experts] added to the logits, or NULL */
    float *select_bias;                 /* [n_experts] added to the scores for choosing only, or NULL */
    pith_matrix *gate, *up, *down;      /* [n_experts] each: ffn x dim, ffn x dim, dim x ffn */
    float *gate_bias, *up_bias;         /* [n_experts * ffn], or NULL */
    float *down_bias;                   /* [n_experts * dim], or NULL */
    float *expert_scale;                /* [n_experts]: each expert's weight's factor, or NULL */
    float *in_norm, *router_norm;       /* [dim] each, with cfg.in_norm_eps > 0 (else NULL) */
    bool has_shared;
    pith_matrix sh_gate, sh_up, sh_down;
    float *sh_gate_inp;                 /* [dim]: the shared expert's gate, or NULL (ungated) */
    void *owned;                        /* experts rearranged at load (Hugging Face's fused ones), or NULL;
                                           freed by pith_moe_pack once every local expert is packed */
    bool rearranged;                    /* the experts were rearranged at load (not views of the file) */
    void *split;                        /* tensor-parallel experts: this rank's columns of every down, or NULL */
    bool mapped;                        /* set before pith_moe_pack: the experts stay in the file's mapping */
} pith_moe_layer;

/* Per-batch scratch, grown by pith_moe_reserve (the forward pass never allocates). */
typedef struct pith_moe_scratch {
    int cap;                /* tokens */
    float *logits;          /* [cap * n_experts] */
    int *sel;               /* [cap * top_k] expert of each (token, rank) */
    float *wt;              /* [cap * top_k] its weight */
    int *pos;               /* [cap * top_k] its row among the gathered rows */
    int *offsets, *cursor;  /* [n_experts + 1] */
    float *xg, *yg;         /* [cap * top_k * dim] gathered inputs and expert outputs */
    float *hg, *hu;         /* [cap * top_k * ffn] */
    float *sg, *su, *sgate; /* shared expert: [cap * shared_ffn] x 2, [cap] */
    float *xn, *xr;         /* in_norm_eps > 0: [cap * dim] each, the experts' and the router's inputs */
} pith_moe_scratch;

/* Checks what the forward pass relies on: 1 <= top_k <= n_experts <= PITH_GROUPED_MAX_GROUPS, widths. */
int pith_moe_config_check(const pith_moe_config *cfg, const char *path, pith_err *err);

/* Layer l's expert tensors from the file: GGUF's 3-D blk.l.ffn_{gate,up,down}_exps.weight (gate and up
 * may be one 3-D ffn_gate_up_exps.weight, each expert's gate rows then its up rows: Hugging Face's
 * Granite), else per-expert 2-D blk.l.ffn_{gate,up,down}.E.weight, else per-expert Hugging Face names
 * (hf_experts: the gate, up and down names after "model.layers.l." with %d for the expert; NULL: none).
 * Router blk.l.ffn_gate_inp.weight (optional bias ffn_gate_inp.bias), selection bias exp_probs_b.bias,
 * per-expert scales ffn_down_exps.scale (optional; llama.cpp's name for Gemma 4's per_expert_scale), with
 * cfg->in_norm_eps > 0 the input norms pre_ffw_norm_2.weight and ffn_gate_inp.scale (required),
 * expert biases ffn_{gate,up,down}_exps.bias, shared expert ffn_{gate,up,down}_shexp.weight and its
 * gate ffn_gate_inp_shexp.weight (required when cfg->shared_ffn > 0, unless the layer has the dense
 * FFN's names instead: a fused ffn_gate_up.weight or ffn_gate/ffn_up, and ffn_down, as Granite's
 * Hugging Face shared_mlp); else Hugging Face's fused mlp.experts.gate_up_proj ([experts][dim][2 ffn],
 * x @ W; gate and up interleaved as GPT-OSS's, or halves as Qwen3-VL-MoE's: cfg->fused_halves) and
 * down_proj ([experts][ffn][dim]) with their biases, rearranged into owned rows. Each expert is otherwise
 * a view of the file's bytes; pith_moe_pack repacks them. */
int pith_moe_load(const pith_model_file *f, int l, const pith_moe_config *cfg, const char *const hf_experts[3],
                  pith_moe_layer *L, pith_err *err);
/* Repacks the layer's matrices for the kernel table (pith_matrix_pack). With L->mapped the routed
 * experts are left out: they stay views of the file's mapping, read by the tiles in the file layout,
 * and their pages are dropped from the process (MADV_DONTNEED: still in the page cache while memory
 * allows, read back from the file when it does not), so a model whose experts do not fit in memory
 * still runs. Experts rearranged at load (L->rearranged) are packed either way, and their rearranged
 * copy (L->owned) is freed when every row of every local expert was packed. */
int pith_moe_pack(pith_cpu *c, pith_moe_layer *L, pith_err *err);
/* Bytes of the layer's routed experts as the file holds them (0 for rearranged ones). */
uint64_t pith_moe_mappable_bytes(const pith_moe_layer *L);

/* Where a model's experts go: PITH_MOE_EXPERTS=mapped or repacked, or auto (unset or empty): mapped
 * when they take more than half of MemAvailable (expert_bytes: all layers' pith_moe_mappable_bytes).
 * type: the experts' weight type, to say when "repacked" leaves them in the file anyway (the table has
 * no packed layout for it). Writes a one-line description to what (for `pith bench` and `pith run`);
 * fails on any other value of the variable. */
int pith_moe_choose_mapped(const pith_cpu *c, pith_wtype type, uint64_t expert_bytes, bool *mapped, char *what,
                           size_t what_size, pith_err *err);
void pith_moe_free(pith_moe_layer *L);

int pith_moe_reserve(pith_cpu *c, const pith_moe_config *cfg, pith_moe_scratch *s, int n, pith_err *err);
void pith_moe_scratch_free(pith_moe_scratch *s);

/* How the experts' products are scheduled. The two loops are the benchmarks' baselines for the grouped
 * products; all three give the same bits (every row is computed as it would be alone). */
typedef enum pith_moe_loop {
    PITH_MOE_GROUPED,   /* one pool job for all experts' gate and up, one for their down */
    PITH_MOE_BY_EXPERT, /* expert by expert over its gathered rows, three jobs each (transformers' loop) */
    PITH_MOE_BY_TOKEN,  /* token by token, each of its top_k experts as matrix-vector products: every
                         * routed (token, expert) pair reads that expert's weights again */
} pith_moe_loop;

/* The loop PITH_MOE_NAIVE asks for: unset, empty or 0: grouped; 1 or expert: by expert; token: by token.
 * Fails on any other value. */
int pith_moe_loop_from_env(pith_moe_loop *loop, pith_err *err);

/* y[t * ldy + i] += moe(x[t])[i] for t < n; x rows of dim floats, ldx apart. */
int pith_moe_forward(pith_cpu *c, const pith_moe_layer *L, pith_moe_scratch *s, const float *x, size_t ldx, int n,
                     float *y, size_t ldy, pith_moe_loop loop, pith_err *err);

/* Routing alone (also for tests): sel/wt [n * top_k] from logits [n * n_experts], which it overwrites
 * with the scores. */
void pith_moe_route(const pith_moe_layer *L, float *logits, int n, int *sel, float *wt);

#endif
