/* UNROLL: put before a loop with a compile-time trip count (a tile's rows or tokens) that must unroll
 * completely, so its accumulators live in registers. GCC takes a count; clang reads "GCC unroll" as a
 * count too but leaves short inner loops rolled, with the accumulators in memory (prefill measured 3x
 * slower), so it gets "unroll(full)". */
#ifndef PITH_CPU_UNROLL_H
#define PITH_CPU_UNROLL_H

#if defined(__clang__)
#define UNROLL _Pragma("clang loop unroll(full)")
#else
#define UNROLL _Pragma("GCC unroll 16")
#endif

#endif
