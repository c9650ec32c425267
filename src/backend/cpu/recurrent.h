/* Kernels of the recurrent (hybrid) architectures: the causal depthwise convolution with carried state
 * (LFM2's short convolution, the convolution in front of Qwen3.5's Gated DeltaNet and Mamba2), the Gated
 * DeltaNet scan (Qwen3.5) in a recurrent and a chunked form, Mamba2's SSD scan (Granite 4.0-H) in a
 * recurrent and a chunked form with its gated, grouped RMSNorm, and partial / multi-section RoPE.
 *
 * Each kernel works on one sequence's run of consecutive tokens and a slice of its channels or heads,
 * so the caller (a model's forward pass) threads over (sequence, head) pairs. None allocates: scratch
 * comes from the caller, sized by the *_scratch_floats functions. The state a kernel carries is plain
 * float32 in a layout documented here, so a model can keep it in a RECURRENT memory group (memory.h)
 * and the engine can copy it as bytes. */
#ifndef PITH_CPU_RECURRENT_H
#define PITH_CPU_RECURRENT_H

#include <stdbool.h>
#include <stddef.h>

#include "backend/cpu/kernels.h"

/* ---- causal depthwise conv1d (recurrent_conv.c) ----
 *
 * For token t of the run and channel c:
 *   y[t][c] = bias[c] + sum_{k < K} w[c * K + k] * in(t - K + 1 + k)[c]     (then SiLU when silu)
 * where in(s) is x[s] for s >= 0 and, for s < 0, the input K-1+s steps before the run: the state holds
 * the last K-1 inputs, oldest first, state[j * channels + c] (zeros at position 0 of a sequence). On
 * return the state holds the last K-1 inputs including this run's (a one-token decode and a prefill
 * chunk are the same call). y may be x (in place, with ldy == ldx). */
#define PITH_CONV1D_MAX_KERNEL 16

typedef struct pith_conv1d_args {
    int n_tokens;
    int channels;
    int kernel;          /* K, 1..PITH_CONV1D_MAX_KERNEL */
    const float *x;      /* [n_tokens] rows of ldx floats; channel c at x[t * ldx + c] */
    size_t ldx;
    const float *w;      /* [channels][K] */
    const float *bias;   /* [channels], or NULL */
    float *state;        /* [K - 1][channels] */
    float *y;
    size_t ldy;
    bool silu;
    const pith_cpu_kernels *kernels; /* SiLU through its silu_mul (vectors); NULL: expf */
} pith_conv1d_args;

/* Channels [c0, c1) of the run. */
void pith_conv1d(const pith_conv1d_args *a, int c0, int c1);

/* ---- Gated DeltaNet (recurrent_gdn.c), as Qwen3-Next / Qwen3.5 define it ----
 *
 * Per value head h (its query/key head is h / (n_heads / n_qk_heads), as transformers' repeat_interleave,
 * or h % n_qk_heads with qk_tiled, as llama.cpp's ggml_repeat and its GGUF head order have it),
 * with q and k L2-normalised (x / sqrt(sum x^2 + eps)) and q scaled by 1/sqrt(dk), decay a = exp(g),
 * g <= 0, and beta in (0, 1), state S of dk x dv:
 *   S = a S;  delta = beta (v - S^T k);  S = S + k delta^T;  out = S^T q
 * pith_gdn_recurrent runs this token by token; pith_gdn_chunked runs the same recurrence in chunks of
 * PITH_GDN_CHUNK tokens (the WY form: within a chunk the unit lower-triangular system
 * (I + strictly-lower(beta_i k_i.k_j exp(G_i - G_j))) U = beta V is solved by substitution, G the
 * cumulative log-decay), so a prefill costs matrix products instead of c state passes per chunk. Both
 * give the same result up to rounding (the chunked form sums in another order). The recurrent form has
 * an AVX2/FMA version (value widths that are multiples of 32) and an AVX-512 one (multiples of 64, the
 * decay folded into the update: one write of the state per token), chosen at run time.
 * State layout: [n_heads][dk][dv], row d of head h at state + (h * dk + d) * dv. */
#define PITH_GDN_CHUNK 64

typedef struct pith_gdn_args {
    int n_tokens;
    int n_heads;          /* value heads */
    int n_qk_heads;       /* divides n_heads */
    bool qk_tiled;        /* value head h reads query/key head h % n_qk_heads (else h / ratio) */
    int dk, dv;
    const float *q, *k;   /* [t * ld_qk + head * dk + d] */
    size_t ld_qk;
    const float *v;       /* [t * ld_v + h * dv + e] */
    size_t ld_v;
    const float *g;       /* [t * ld_gb + h]: log-decay (<= 0) */
    const float *beta;    /* [t * ld_gb + h] */
    size_t ld_gb;
    float eps;            /* of the L2 norms (1e-6 in Qwen3.5) */
    float *state;         /* [n_heads][dk][dv] */
    float *out;           /* [t * ld_out + h * dv + e] */
    size_t ld_out;
    bool portable;        /* the portable loops even where AVX2 exists (PITH_FORCE_SCALAR) */
    bool no_avx512;       /* the AVX2 loop even where AVX-512 exists (the kernel table's choice) */
} pith_gdn_args;

size_t pith_gdn_scratch_floats(int dk, int dv);
/* Head h over the whole run; scratch holds pith_gdn_scratch_floats(dk, dv) floats. */
void pith_gdn_recurrent(const pith_gdn_args *a, int h, float *scratch);
void pith_gdn_chunked(const pith_gdn_args *a, int h, float *scratch);

/* Gated RMSNorm of Qwen3.5's DeltaNet output, in place on n elements: x = rms(x) * w * silu(z). */
void pith_gated_rmsnorm(float *x, const float *z, const float *w, int n, float eps);

/* ---- Mamba2's SSD scan (recurrent_ssd.c), as Mamba2 and transformers' GraniteMoeHybrid define it ----
 *
 * Per head h (of n_heads; it reads B and C of group g = h / (n_heads / n_groups), as repeat_interleave
 * has it), with a state S of head_dim x d_state, for each token t:
 *   dt = softplus(dt_raw[t][h] + dt_bias[h])      (torch's softplus: x itself above 20)
 *   S  = exp(dt A[h]) S + dt x[t] B[t]^T           (A[h] = -exp(A_log[h]) < 0)
 *   y[t] = S C[t] + D[h] x[t]
 * pith_ssd_recurrent runs this token by token; pith_ssd_chunked runs the same recurrence in chunks of
 * PITH_SSD_CHUNK tokens with the state-space-duality form: with the cumulative log-decay a_i of the
 * chunk, y_i = exp(a_i) S0 C_i + sum_{j<=i} exp(a_i - a_j) dt_j (C_i . B_j) x_j + D x_i and
 * S = exp(a_last) S0 + sum_j exp(a_last - a_j) dt_j x_j B_j^T. Both give the same result up to
 * rounding (the chunked form sums in another order). The recurrent form has an AVX2/FMA version
 * (d_state a multiple of 8) and an AVX-512 one (a multiple of 16), chosen at run time. No time-step clamp (transformers' default limit
 * (0, inf) clamps nothing).
 * State layout: [n_heads][head_dim][d_state], row p of head h at state + (h * head_dim + p) * d_state.
 * y must not overlap x, B, C or dt. */
#define PITH_SSD_CHUNK 64

typedef struct pith_ssd_args {
    int n_tokens;
    int n_heads;
    int n_groups;         /* divides n_heads */
    int head_dim, d_state;
    const float *x;       /* [t * ld_x + h * head_dim + p] */
    size_t ld_x;
    const float *B, *C;   /* [t * ld_bc + g * d_state + n] */
    size_t ld_bc;
    const float *dt;      /* [t * ld_dt + h]: before dt_bias and the softplus */
    size_t ld_dt;
    const float *dt_bias; /* [n_heads] */
    const float *A;       /* [n_heads]: -exp(A_log), < 0 */
    const float *D;       /* [n_heads], or NULL (no skip term) */
    float *state;         /* [n_heads][head_dim][d_state] */
    float *y;             /* [t * ld_y + h * head_dim + p] */
    size_t ld_y;
    bool portable;        /* the portable loops even where AVX2 exists (PITH_FORCE_SCALAR) */
    bool no_avx512;       /* the AVX2 loop even where AVX-512 exists (the kernel table's choice) */
} pith_ssd_args;

size_t pith_ssd_scratch_floats(int head_dim, int d_state);
/* Head h over the whole run; the chunked form takes pith_ssd_scratch_floats(head_dim, d_state) floats
 * of scratch. */
void pith_ssd_recurrent(const pith_ssd_args *a, int h);
void pith_ssd_chunked(const pith_ssd_args *a, int h, float *scratch);

/* Mamba2's gated RMSNorm, in place on n elements: x = x * silu(z) first, then each group of `group`
 * consecutive elements (group divides n; group == n: one norm over all) is RMS-normed, times w. */
void pith_gated_rmsnorm_grouped(float *x, const float *z, const float *w, int n, int group, float eps);

/* ---- partial and multi-section RoPE (recurrent_rope.c) ----
 *
 * Only the first n_rot dimensions of each head rotate, as halves within them: pair (i, i + n_rot / 2)
 * for i < n_rot / 2, with frequency theta^(-2i / n_rot) (Qwen3.5: n_rot = head_dim / 4). Multi-section
 * RoPE (M-RoPE) takes frequency i's position from one of up to 4 position components: contiguous
 * sections of sizes sections[0..3] or, interleaved (Qwen3.5's mrope_interleaved), i % 3 == 1 below
 * 3 * sections[1] -> component 1, i % 3 == 2 below 3 * sections[2] -> component 2, else component 0.
 * For text every component is the token's position, which makes it plain partial RoPE. */
typedef struct pith_rope_sections {
    int n[4];             /* all zero: one section (plain RoPE) */
    bool interleaved;
} pith_rope_sections;

/* Which position component frequency i (< n_rot / 2) takes. */
int pith_rope_section_of(const pith_rope_sections *s, int i);
/* cs[i], sn[i] for i < n_rot / 2 from pos[4] (the components; angles in double). */
void pith_rope_angles(const pith_rope_sections *s, const double pos[4], double theta, int n_rot, float *cs,
                      float *sn);
/* Rotates the first n_rot dimensions of n_heads heads of head_dim floats (heads contiguous). */
void pith_rope_partial(float *x, int n_heads, int head_dim, int n_rot, const float *cs, const float *sn);

#endif
