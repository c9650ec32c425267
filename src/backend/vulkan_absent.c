/* A build without the Vulkan backend (no Vulkan headers or no glslc when it was configured): its entry
 * points say so. CMakeLists.txt compiles this file instead of src/backend/vulkan/. */
#include <stdio.h>

#include "backend/backend.h"

int pith_backend_vulkan_create(int device, pith_backend **out, pith_err *err) {
    (void)device;
    *out = NULL;
    return pith_errf(err, "this build of pith has no Vulkan backend (it was configured without the Vulkan headers "
                          "or glslc: on Debian, apt-get install libvulkan-dev glslc, then rebuild)");
}

int pith_backend_vulkan_probe(int device, size_t bytes, double *gbs, double *gflops, char *name, size_t name_cap,
                              pith_err *err) {
    (void)device, (void)bytes, (void)gbs, (void)gflops, (void)name, (void)name_cap;
    return pith_errf(err, "this build of pith has no Vulkan backend");
}

int pith_backend_vulkan_list(char *out, size_t cap, pith_err *err) {
    (void)err;
    if (cap > 0) snprintf(out, cap, "vulkan: not in this build (configured without libvulkan-dev and glslc)\n");
    return 0;
}

int pith_backend_vulkan_free_memory(pith_backend *be, size_t *bytes, pith_err *err) {
    (void)be;
    *bytes = 0;
    return pith_errf(err, "this build of pith has no Vulkan backend");
}
