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

#include <stddef.h>

#include "pith/status.h"

/* The devices a model can run on, one line each into out (NUL-terminated, cut at cap): "cpu" with its
 * kernel table, then every Vulkan device with its index, name, memory and the features the backend uses
 * (or why it cannot run there), or a line saying the build has no Vulkan backend. 0, or -1 with err when
 * the listing itself failed (the loader is absent: the CPU line is still written). */
int pith_backend_list_devices(char *out, size_t cap, pith_err *err);

/* The limits a benchmark on a device divides by, measured now: memory bandwidth (GB/s: a copy over two
 * buffers of `bytes`, read plus write) and float throughput (GFLOP/s), with the device's name. For
 * "cpu" this is an error (the CPU probes are pith_probe's, bench.h). */
int pith_backend_device_probe(const char *device, size_t bytes, double *gbs, double *gflops, char *name,
                              size_t name_cap, pith_err *err);

/* Checks a device string ("cpu", "vulkan", "vulkan:N") without opening anything: 0 or -1 with err. */
int pith_backend_parse_device(const char *device, int *vulkan_index, bool *is_vulkan, pith_err *err);
/* -ngl's value: "auto" (*n = -1) or a count of layers 0..100000 (split.c; backend.h: pith_backend_create_split). */
int pith_backend_parse_gpu_layers(const char *s, int *n, pith_err *err);

/* The device string a model loaded with `device` runs on: device when non-empty, else PITH_DEVICE when
 * set and non-empty, else "cpu". Static or the argument: never freed. */
const char *pith_backend_device_or_env(const char *device);

#endif
