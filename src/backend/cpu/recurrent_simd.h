/* Which vector paths the recurrent kernels (recurrent_gdn.c, recurrent_ssd.c) may take on this CPU: the
 * compiler's own CPU-model bits, read on every call (a load, set once at start-up by the runtime), so
 * there is no cache to keep and nothing shared between threads to write. x86 with GCC or clang only;
 * the kernels' portable paths serve everything else. */
#ifndef PITH_CPU_RECURRENT_SIMD_H
#define PITH_CPU_RECURRENT_SIMD_H

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
static inline bool pith_recurrent_have_avx2_fma(void) {
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

static inline bool pith_recurrent_have_avx512(void) { return __builtin_cpu_supports("avx512f"); }
#endif

#ifdef __cplusplus
}
#endif

#endif
