/* What a front end may know about the compute backend: the name of the kernel table a model would run
 * and whether the portable kernels were asked for. The server's startup log and `pith --version` print
 * these; they include this header, never a backend's own (src/server and src/cli include nothing else
 * from src/backend; tests/test_layering.py).
 *
 * Nothing here allocates or keeps state: each call reads the processor or the environment afresh. */
#ifndef PITH_BACKEND_INFO_H
#define PITH_BACKEND_INFO_H

#include <stdbool.h>

/* True when the environment variable PITH_FORCE_SCALAR is set, non-empty and not "0": the models then
 * run the portable (scalar) kernels. The one place the variable's meaning is written down. */
bool pith_backend_force_scalar(void);

/* The name of the CPU kernel table a model loaded with this force_scalar runs ("scalar", "avx2",
 * "avx2-vnni", "avx512-vnni"); a static string. */
const char *pith_backend_cpu_kernel_name(bool force_scalar);

#endif
