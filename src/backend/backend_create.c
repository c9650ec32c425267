/* Picking a backend by name (backend.h: pith_backend_create; backend/info.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/info.h"

const char *pith_backend_device_or_env(const char *device) {
    if (device && *device) return device;
    const char *env = getenv("PITH_DEVICE");
    return env && *env ? env : "cpu";
}

int pith_backend_parse_device(const char *device, int *vulkan_index, bool *is_vulkan, pith_err *err) {
    *vulkan_index = -1;
    *is_vulkan = false;
    if (!device || !*device || strcmp(device, "cpu") == 0) return 0;
    if (strncmp(device, "vulkan", 6) == 0 && (device[6] == 0 || device[6] == ':')) {
        *is_vulkan = true;
        if (device[6] == 0) return 0;
        const char *num = device + 7;
        char *end;
        errno = 0;
        long v = strtol(num, &end, 10);
        if (*num < '0' || *num > '9' || *end || errno || v > 1000)
            return pith_errf(err, "device \"%s\": the Vulkan device index must be a number (pith devices lists them)",
                             device);
        *vulkan_index = (int)v;
        return 0;
    }
    return pith_errf(err, "unknown device \"%s\": expected cpu, vulkan or vulkan:N (pith devices lists them)", device);
}

int pith_backend_create(const char *device, int n_threads, pith_backend **out, pith_err *err) {
    *out = NULL;
    const char *name = pith_backend_device_or_env(device);
    int index;
    bool vulkan;
    if (pith_backend_parse_device(name, &index, &vulkan, err)) return -1;
    if (!vulkan) return pith_backend_cpu_create(n_threads, out, err);
    if (pith_backend_vulkan_create(index, out, err)) return pith_err_prefix(err, "device %s", name);
    return 0;
}

int pith_backend_device_probe(const char *device, size_t bytes, double *gbs, double *gflops, char *name,
                              size_t name_cap, pith_err *err) {
    int index;
    bool vulkan;
    if (pith_backend_parse_device(pith_backend_device_or_env(device), &index, &vulkan, err)) return -1;
    if (!vulkan) return pith_errf(err, "the device probe is for Vulkan devices (the CPU has its own probes)");
    return pith_backend_vulkan_probe(index, bytes, gbs, gflops, name, name_cap, err);
}

int pith_backend_list_devices(char *out, size_t cap, pith_err *err) {
    if (cap == 0) return pith_errf(err, "no room for the device list");
    int n = snprintf(out, cap, "cpu: %s kernels\n", pith_backend_cpu_kernel_name(pith_backend_force_scalar()));
    size_t used = n > 0 && (size_t)n < cap ? (size_t)n : cap - 1;
    return pith_backend_vulkan_list(out + used, cap - used, err);
}
