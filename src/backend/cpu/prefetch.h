/* The software prefetch every weight-streaming tile issues ahead of its loads (x86 only).
 *
 * One hint for all of them, chosen by measurement: decode streams each weight once, which argued for
 * non-temporal prefetches (prefetchnta), and on the Zen 3 hosts this project started on they measured
 * 3-4 % faster than T0 with two threads. On the Zen 5 hosts it runs on now, prefetchnta ahead of a tile
 * costs about 40 % of decode speed: TinyLlama-shaped Q4_0, 2 threads, tg64 alternating builds on one
 * host, 22.4-23.5 tok/s with NTA (0.62-0.64 of the bandwidth probe), 29-30 with no software prefetch at
 * all, 35.8-38.3 with T0 (0.99-1.05). T0 costs a few percent on the old hosts and wins everywhere else,
 * so it is the hint. The hint and the tiles' distances (PITH_PACKED_PREFETCH_BYTES in kernels_avx2.c,
 * PITH_KQ_PREFETCH_BYTES in kernels_kquant_zmm.c) can be set with -D for experiments: measure them with
 * tools/stream_tile_bench.c, which times decode's access pattern against a plain read. */
#ifndef PITH_BACKEND_CPU_PREFETCH_H
#define PITH_BACKEND_CPU_PREFETCH_H

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#ifdef __cplusplus
extern "C" {
#endif

#ifndef PITH_PREFETCH_HINT
#define PITH_PREFETCH_HINT _MM_HINT_T0
#endif

/* One line of a weight stream, some distance ahead of the loads. */
#define pith_prefetch_stream(p) _mm_prefetch((const char *)(p), PITH_PREFETCH_HINT)
/* The same line twice as far ahead, into L2 only: tiles whose compute is slow per byte (Q6_K) keep too
 * few lines in flight with the near prefetch alone (see the K-quant tiles). */
#ifndef PITH_PREFETCH_FAR_HINT
#define PITH_PREFETCH_FAR_HINT _MM_HINT_T2
#endif
#define pith_prefetch_far(p) _mm_prefetch((const char *)(p), PITH_PREFETCH_FAR_HINT)

#ifdef __cplusplus
}
#endif
#endif
#endif
