/* Benchmarks: what the machine can do, and what a model achieves against it.
 *
 * Machine probes (pith_probe) measure, with a given number of threads, the three limits of CPU
 * inference: memory read bandwidth (decode reads every weight once per token), the FP32 FMA peak (prefill
 * with float weights) and the int8 dot-product peak (prefill with quantized weights). The probes run the
 * instructions of the CPU kernel table a model loaded in this process runs (the one
 * pith_cpu_kernels_best picks, with the same force_scalar), and the compute peaks those of the tile the
 * weight type goes through: for float weights FMA on ymm, or on zmm for the packed F16/BF16 tiles of the
 * AVX-512 table; for int8 maddubs + madd for the AVX2 tiles, vpdpbusd on ymm (AVX-VNNI) or zmm (AVX-512
 * VNNI) for the packed Q8_0/Q4_0 tiles of the VNNI tables; portable C for the scalar table. So a model's
 * achieved operations never exceed the peak for a reason as dull as a faster instruction. A probe is a
 * best-of-N measurement: on a shared machine the best pass is the closest estimate of what the hardware
 * can give at that moment; call it right before and after the run it qualifies, since other tenants
 * move it by tens of percent.
 *
 * Model runs (pith_bench_runner) time prompt processing and text generation through the engine
 * (engine.h), the path `pith run` and the server take: one request at a time, random prompt token ids,
 * greedy sampling, no prefix cache: the same work as llama.cpp's llama-bench "pp" and "tg" tests, plus
 * what the engine adds to each step (scheduling, batch layout, sampling).
 *
 * Nothing here prints; every fallible function returns 0 / -1 and fills a pith_err. */
#ifndef PITH_BENCH_H
#define PITH_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pith/api.h"
#include "pith/engine.h"
#include "pith/model.h"
#include "pith/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- machine probes ---- */

typedef struct pith_probe pith_probe;

/* bw_bytes: size of the buffer the bandwidth probe reads (rounded down to a multiple of 64 * n_threads;
 * at least 1 MiB). It should dwarf the last-level cache: 256 MiB or more. The buffer is allocated and
 * written here, so later probes never take page faults. force_scalar selects the portable loops. */
PITH_API int pith_probe_new(int n_threads, size_t bw_bytes, bool force_scalar, pith_probe **out,
                            pith_err *err);
PITH_API void pith_probe_free(pith_probe *p);

/* The kernel table the probes mirror: "avx512-vnni", "avx2-vnni", "avx2" or "scalar". */
PITH_API const char *pith_probe_isa(const pith_probe *p);
/* The instructions pith_probe_int8_peak and pith_probe_fma_peak time for weights of `type` (the ones
 * its tiles run), for reports: "vpdpbusd zmm (AVX-512 VNNI)", "vpmaddubsw+vpmaddwd ymm",
 * "vfmadd231ps zmm (AVX-512)"... Any type is accepted: one the table does not repack (F32, K-quants, or
 * an integer type asked for its FMA peak) gets the loop of the file-layout tiles. */
PITH_API const char *pith_probe_int8_isa(const pith_probe *p, pith_dtype type);
PITH_API const char *pith_probe_fma_isa(const pith_probe *p, pith_dtype type);
PITH_API int pith_probe_threads(const pith_probe *p);
PITH_API size_t pith_probe_bw_bytes(const pith_probe *p);

/* Bytes per second read by all threads summing their share of the buffer; best of `passes` passes. */
PITH_API int pith_probe_bandwidth(pith_probe *p, int passes, double *bytes_per_s, pith_err *err);
/* FP32 operations per second (an FMA counts 2 per lane) of independent chains of the FMA instructions the
 * float tiles run for weights of `type` (see pith_probe_fma_isa) on every thread; best of reps. */
PITH_API int pith_probe_fma_peak(pith_probe *p, pith_dtype type, int reps, double *flops, pith_err *err);
/* int8 operations per second (a multiply-add of two int8 values counts 2, as for a model's matmuls) of
 * independent chains of the int8 dot-product instructions the kernels run for weights of `type` (see
 * pith_probe_int8_isa) on every thread; best of reps. */
PITH_API int pith_probe_int8_peak(pith_probe *p, pith_dtype type, int reps, double *ops, pith_err *err);

/* ---- what a model reads and computes ---- */

typedef struct pith_bench_weights {
    /* Weight bytes one generated token reads: every 2-D weight of every layer (blk.*), the output
     * matrix (the token embedding when tied), and one embedding row. Norms and biases are left out.
     * Mixture of experts: the active bytes, i.e. expert tensors count n_experts_used / n_experts of
     * their bytes (what a token routed to that many experts reads). */
    uint64_t size_bytes;
    uint64_t total_bytes;    /* the same with every expert counted whole (= size_bytes without experts) */
    uint64_t expert_bytes;   /* all the expert tensors' bytes (0 without experts) */
    uint64_t layer_params;   /* elements of the layers' 2-D weights: the matmuls every token runs (MoE:
                                the routed share of the experts') */
    uint64_t output_params;  /* elements of the output matrix: run once per logits row */
    pith_dtype type;         /* the type holding most layer weight bytes */
    bool quantized;          /* that type is block-quantized */
    char format[64];         /* layer weight types by bytes, largest first, joined by '+': "Q4_K+Q6_K" */
} pith_bench_weights;

PITH_API int pith_bench_weights_of(const pith_model *m, pith_bench_weights *w, pith_err *err);

/* ---- timed model runs ---- */

typedef struct pith_bench_runner pith_bench_runner;

/* Positions (prompt plus generated tokens) one sequence needs for prompts of up to max_prompt tokens
 * and generations of up to max_gen: pp takes the prompt and the one token it samples (max_prompt + 1),
 * tg a BOS, max_gen decoded tokens and the last one sampled (max_gen + 2); 0 for a test of 0 tokens. */
PITH_API int pith_bench_positions(int max_prompt, int max_gen);

/* One engine over m (which must outlive the runner) for prompts of up to max_prompt tokens run in steps
 * of up to `batch` tokens, and generations of up to max_gen tokens, both after `depth` tokens already in
 * the cache (llama-bench's --n-depth; 0: none, and tg starts from a BOS). A depth > 0 is computed here
 * once (a BOS and random ids, untimed) and served by the prefix cache to every test after it; each test
 * checks that it was. kv_type: the K/V cache type (engine.h; 0: the model's). seed drives the random
 * prompt ids. Fails when depth +
 * pith_bench_positions(max_prompt, max_gen) exceeds the model's context. */
PITH_API int pith_bench_runner_new(pith_model *m, int max_prompt, int batch, int max_gen, int depth,
                                   pith_kv_type kv_type, uint64_t seed, pith_bench_runner **out,
                                   pith_err *err);
PITH_API void pith_bench_runner_free(pith_bench_runner *r);

/* One request whose prompt is the depth prefix and n random token ids (1 <= n <= max_prompt), max_tokens
 * 1: the engine runs the n tokens in chunks of the runner's batch size, logits for the last prompt token
 * only. *seconds: wall time from the submission to the request's final event. */
PITH_API int pith_bench_pp(pith_bench_runner *r, int n, double *seconds, pith_err *err);
/* One request whose prompt is the model's BOS (at depth D > 0: the prefix and one random id) and that
 * generates n + 1 tokens (1 <= n <= max_gen), EOS ignored: the first token comes from the prompt
 * (untimed), then n decode steps of one token each, at positions D + 1 .. D + n.
 * *seconds: wall time from the first token event to the final event, i.e. of the n decode steps. */
PITH_API int pith_bench_tg(pith_bench_runner *r, int n, double *seconds, pith_err *err);

/* ---- statistics ---- */

typedef struct pith_bench_stats {
    double mean, stddev, median, min, max; /* stddev: sample standard deviation (0 for one value) */
} pith_bench_stats;

/* n >= 1. */
PITH_API void pith_bench_stats_of(const double *x, int n, pith_bench_stats *s);

/* CLOCK_MONOTONIC seconds. */
PITH_API double pith_bench_now(void);
/* CPU seconds used so far by every thread of this process. Over a timed span, divided by the span's
 * wall time and the thread count, it says what share of the processors the run really got: on a
 * shared machine, less than 1 means other work took the rest (spin-waiting workers count as busy). */
PITH_API double pith_bench_cpu_seconds(void);

#ifdef __cplusplus
}
#endif

#endif
