/* The CPU backend's answers to backend/info.h. */
#include "backend/info.h"

#include <stdlib.h>
#include <string.h>

#include "backend/cpu/kernels.h"

bool pith_backend_force_scalar(void) {
    const char *fs = getenv("PITH_FORCE_SCALAR");
    return fs && *fs && strcmp(fs, "0") != 0;
}

const char *pith_backend_cpu_kernel_name(bool force_scalar) {
    return pith_cpu_kernels_best(force_scalar)->name;
}
