/* What `pith bench --device vulkan` divides by: the device's memory bandwidth (copy.comp over two
 * buffers, read plus write) and its float throughput (fma_peak.comp), each timed on the device's own
 * clock (timestamps), the best of a few runs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/vulkan/vk.h"

typedef struct {
    uint64_t a, b;
    uint32_t count;
} copy_push;

typedef struct {
    uint64_t o;
    uint32_t iters;
    float seed;
} fma_push;

/* Runs `reps` dispatches of s recorded by the caller's pushes and returns the fastest one's seconds. */
static int time_dispatch(pith_vk *c, pith_vk_shader s, const void *push, uint32_t size, uint32_t groups, int reps,
                         double *best, pith_err *err) {
    VkQueryPoolCreateInfo qi = {.sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO, .queryType = VK_QUERY_TYPE_TIMESTAMP,
                                .queryCount = 2};
    VkQueryPool q;
    VkResult r = vkCreateQueryPool(c->dev, &qi, NULL, &q);
    if (r != VK_SUCCESS) return pith_errf(err, "Vulkan: vkCreateQueryPool: %s", pith_vk_result(r));
    VkCommandBuffer cmd = VK_NULL_HANDLE;
    VkCommandBufferAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO, .commandPool = c->pool,
                                      .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY, .commandBufferCount = 1};
    int rc = 0;
    *best = 0;
    if ((r = vkAllocateCommandBuffers(c->dev, &ai, &cmd)) != VK_SUCCESS) rc = pith_errf(err, "Vulkan: %s", pith_vk_result(r));
    for (int i = 0; !rc && i < reps; i++) {
        VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
        vkBeginCommandBuffer(cmd, &bi);
        vkCmdResetQueryPool(cmd, q, 0, 2);
        vkCmdWriteTimestamp(cmd, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, q, 0);
        rc = pith_vk_dispatch(c, cmd, s, push, size, groups, 1, err);
        vkCmdWriteTimestamp(cmd, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, q, 1);
        vkEndCommandBuffer(cmd);
        if (rc || (rc = pith_vk_submit_wait(c, cmd, err))) break;
        uint64_t ts[2];
        if (vkGetQueryPoolResults(c->dev, q, 0, 2, sizeof ts, ts, sizeof ts[0], VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT) !=
            VK_SUCCESS) {
            rc = pith_errf(err, "Vulkan: timestamps unreadable");
            break;
        }
        double sec = (double)(ts[1] - ts[0]) * c->props.limits.timestampPeriod * 1e-9;
        if (i > 0 && (*best == 0 || sec < *best)) *best = sec; /* the first run warms up */
    }
    if (cmd) vkFreeCommandBuffers(c->dev, c->pool, 1, &cmd);
    vkDestroyQueryPool(c->dev, q, NULL);
    if (!rc && *best <= 0) rc = pith_errf(err, "Vulkan: the device's clock did not advance");
    return rc;
}

int pith_backend_vulkan_probe(int device, size_t bytes, double *gbs, double *gflops, char *name, size_t name_cap,
                              pith_err *err) {
    pith_backend *be;
    if (pith_backend_vulkan_create(device, &be, err)) return -1;
    pith_vk *c = pith_vk_of(be);
    snprintf(name, name_cap, "%s", c->props.deviceName);
    bytes = bytes / 16 * 16;
    if (bytes < (1 << 20)) bytes = 1 << 20;
    vk_mem a = {0}, b = {0};
    int rc = pith_vk_alloc(c, bytes, false, &a, err) || pith_vk_alloc(c, bytes, false, &b, err) ||
             pith_vk_fill_zero(c, &a, err);
    double sec = 0;
    if (!rc) {
        copy_push p = {a.addr, b.addr, (uint32_t)(bytes / 16)};
        rc = time_dispatch(c, PITH_VK_SH_copy, &p, sizeof p, (uint32_t)((bytes / 16 + 255) / 256), 6, &sec, err);
        if (!rc) *gbs = 2.0 * (double)bytes / sec * 1e-9;
    }
    /* enough work to take some milliseconds on the device at hand: grown until it does */
    uint32_t groups = 4 * 1024, iters = 64;
    for (int tries = 0; !rc && tries < 12; tries++) {
        fma_push p = {b.addr, iters, 0.999f};
        if ((size_t)groups * 256 * 4 > bytes) groups = (uint32_t)(bytes / (256 * 4));
        rc = time_dispatch(c, PITH_VK_SH_fma_peak, &p, sizeof p, groups, 4, &sec, err);
        if (rc) break;
        *gflops = (double)groups * 256 * iters * 64 / sec * 1e-9;
        if (sec > 0.02) break;
        iters *= 4;
    }
    pith_vk_free(c, &a);
    pith_vk_free(c, &b);
    pith_backend_free(be);
    return rc ? -1 : 0;
}
