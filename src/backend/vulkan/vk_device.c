/* The Vulkan device: instance, the device and its queue, memory, uploads, pipelines and dispatches
 * (vk.h). Nothing here knows a model. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/vulkan/vk.h"

#define STAGING_BYTES ((VkDeviceSize)64 << 20)
#define PUSH_BYTES 128 /* the push-constant size every device offers */

const char *pith_vk_result(VkResult r) {
    switch (r) {
    case VK_SUCCESS: return "success";
    case VK_ERROR_OUT_OF_HOST_MEMORY: return "out of host memory";
    case VK_ERROR_OUT_OF_DEVICE_MEMORY: return "out of device memory";
    case VK_ERROR_INITIALIZATION_FAILED: return "initialization failed";
    case VK_ERROR_DEVICE_LOST: return "device lost";
    case VK_ERROR_INCOMPATIBLE_DRIVER: return "no compatible Vulkan driver";
    case VK_ERROR_EXTENSION_NOT_PRESENT: return "extension not present";
    case VK_ERROR_FEATURE_NOT_PRESENT: return "feature not present";
    case VK_ERROR_TOO_MANY_OBJECTS: return "too many objects";
    case VK_TIMEOUT: return "timeout";
    default: return "error";
    }
}

static int vk_fail(pith_err *err, VkResult r, const char *what) {
    return pith_errf(err, "Vulkan: %s failed: %s (%d)", what, pith_vk_result(r), (int)r);
}

static int make_instance(VkInstance *inst, pith_err *err) {
    VkApplicationInfo app = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO, .pApplicationName = "pith",
                             .pEngineName = "pith", .apiVersion = VK_API_VERSION_1_2};
    VkInstanceCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, .pApplicationInfo = &app};
    VkResult r = vkCreateInstance(&ci, NULL, inst);
    return r == VK_SUCCESS ? 0 : vk_fail(err, r, "vkCreateInstance (is a Vulkan driver installed? Debian: mesa-vulkan-drivers)");
}

/* What the backend needs of a device: Vulkan 1.2, buffer device addresses, 16-bit storage, 64-bit ints
 * and a compute queue. why gets the first thing missing. */
static bool usable(VkPhysicalDevice pd, uint32_t *qfam, char *why, size_t why_size) {
    VkPhysicalDeviceProperties p;
    vkGetPhysicalDeviceProperties(pd, &p);
    VkPhysicalDeviceVulkan12Features f12 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
    VkPhysicalDeviceVulkan11Features f11 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES, .pNext = &f12};
    VkPhysicalDeviceFeatures2 f = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &f11};
    if (p.apiVersion < VK_API_VERSION_1_2) {
        snprintf(why, why_size, "Vulkan %u.%u (1.2 needed)", VK_API_VERSION_MAJOR(p.apiVersion),
                 VK_API_VERSION_MINOR(p.apiVersion));
        return false;
    }
    vkGetPhysicalDeviceFeatures2(pd, &f);
    VkPhysicalDeviceSubgroupProperties sg = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES};
    VkPhysicalDeviceProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &sg};
    vkGetPhysicalDeviceProperties2(pd, &p2);
    bool subgroups = (sg.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) &&
                     (sg.supportedOperations & VK_SUBGROUP_FEATURE_BASIC_BIT) && sg.subgroupSize >= 4 &&
                     sg.subgroupSize <= 64; /* matmul.comp: at most 16 subgroups in a workgroup of 64 */
    const char *missing = !f12.bufferDeviceAddress         ? "bufferDeviceAddress"
                          : !f11.storageBuffer16BitAccess ? "storageBuffer16BitAccess"
                          : !f.features.shaderInt64        ? "shaderInt64"
                          : !subgroups                     ? "compute subgroups of 4 to 64 lanes"
                                                           : NULL;
    if (missing) {
        snprintf(why, why_size, "no %s", missing);
        return false;
    }
    uint32_t n = 0;
    vkGetPhysicalDeviceQueueFamilyProperties(pd, &n, NULL);
    VkQueueFamilyProperties q[32];
    if (n > 32) n = 32;
    vkGetPhysicalDeviceQueueFamilyProperties(pd, &n, q);
    for (uint32_t i = 0; i < n; i++)
        if (q[i].queueFlags & VK_QUEUE_COMPUTE_BIT) {
            *qfam = i;
            return true;
        }
    snprintf(why, why_size, "no compute queue");
    return false;
}

static VkDeviceSize device_local_bytes(VkPhysicalDevice pd) {
    VkPhysicalDeviceMemoryProperties mp;
    vkGetPhysicalDeviceMemoryProperties(pd, &mp);
    VkDeviceSize best = 0;
    for (uint32_t i = 0; i < mp.memoryHeapCount; i++)
        if ((mp.memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) && mp.memoryHeaps[i].size > best)
            best = mp.memoryHeaps[i].size;
    return best;
}

static const char *kind_name(VkPhysicalDeviceType t) {
    switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return "discrete GPU";
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return "integrated GPU";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return "virtual GPU";
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return "CPU";
    default: return "device";
    }
}

static bool has_extension(VkPhysicalDevice pd, const char *name) {
    uint32_t n = 0;
    if (vkEnumerateDeviceExtensionProperties(pd, NULL, &n, NULL) != VK_SUCCESS || n == 0) return false;
    VkExtensionProperties *e = malloc(n * sizeof *e);
    bool found = false;
    if (e && vkEnumerateDeviceExtensionProperties(pd, NULL, &n, e) == VK_SUCCESS)
        for (uint32_t i = 0; i < n && !found; i++) found = strcmp(e[i].extensionName, name) == 0;
    free(e);
    return found;
}

/* What a device offers that the shaders use or could use, for `pith devices`: its subgroup width, 16-bit
 * float and 8-bit integer arithmetic, integer dot products, cooperative matrices (named by string: the
 * KHR extension is newer than some headers this builds with). */
static void describe_features(VkPhysicalDevice pd, uint32_t api, char *out, size_t cap) {
    VkPhysicalDeviceVulkan13Features f13 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_FEATURES};
    VkPhysicalDeviceVulkan12Features f12 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES,
                                            .pNext = api >= VK_API_VERSION_1_3 ? &f13 : NULL};
    VkPhysicalDeviceFeatures2 f = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &f12};
    vkGetPhysicalDeviceFeatures2(pd, &f);
    VkPhysicalDeviceSubgroupProperties sg = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES};
    VkPhysicalDeviceProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &sg};
    vkGetPhysicalDeviceProperties2(pd, &p2);
    bool coop = has_extension(pd, "VK_KHR_cooperative_matrix") || has_extension(pd, "VK_NV_cooperative_matrix");
    snprintf(out, cap, "subgroup %u, fp16 %s, int8 %s, integer dot %s, cooperative matrix %s", sg.subgroupSize,
             f12.shaderFloat16 ? "yes" : "no", f12.shaderInt8 ? "yes" : "no",
             f13.shaderIntegerDotProduct ? "yes" : "no", coop ? "yes (not used yet)" : "no");
}

int pith_backend_vulkan_list(char *out, size_t cap, pith_err *err) {
    if (cap) out[0] = 0;
    VkInstance inst;
    if (make_instance(&inst, err)) {
        snprintf(out, cap, "vulkan: none (%s)\n", err->msg);
        return 0;
    }
    uint32_t n = 0;
    vkEnumeratePhysicalDevices(inst, &n, NULL);
    VkPhysicalDevice pds[16];
    if (n > 16) n = 16;
    vkEnumeratePhysicalDevices(inst, &n, pds);
    size_t used = 0;
    if (n == 0) used += (size_t)snprintf(out, cap, "vulkan: no devices\n");
    for (uint32_t i = 0; i < n && used < cap; i++) {
        VkPhysicalDeviceProperties p;
        vkGetPhysicalDeviceProperties(pds[i], &p);
        uint32_t q;
        char why[96];
        bool ok = usable(pds[i], &q, why, sizeof why);
        char feats[160];
        describe_features(pds[i], p.apiVersion, feats, sizeof feats);
        int w = snprintf(out + used, cap - used, "vulkan:%u: %s (%s, Vulkan %u.%u, %.1f GiB; %s)%s%s\n", i, p.deviceName,
                         kind_name(p.deviceType), VK_API_VERSION_MAJOR(p.apiVersion), VK_API_VERSION_MINOR(p.apiVersion),
                         (double)device_local_bytes(pds[i]) / (1 << 30), feats, ok ? "" : ": cannot run pith: ",
                         ok ? "" : why);
        if (w < 0) break;
        used += (size_t)w;
    }
    vkDestroyInstance(inst, NULL);
    return 0;
}

int pith_vk_open(pith_vk *c, int device, pith_err *err) {
    if (make_instance(&c->inst, err)) return -1;
    uint32_t n = 0;
    vkEnumeratePhysicalDevices(c->inst, &n, NULL);
    VkPhysicalDevice pds[16];
    if (n > 16) n = 16;
    vkEnumeratePhysicalDevices(c->inst, &n, pds);
    if (n == 0) return pith_errf(err, "Vulkan: no devices (pith devices lists them)");
    char why[96] = "";
    int pick = -1;
    if (device >= 0) {
        if ((uint32_t)device >= n) return pith_errf(err, "Vulkan: no device %d (there are %u: pith devices)", device, n);
        if (!usable(pds[device], &c->qfam, why, sizeof why))
            return pith_errf(err, "Vulkan device %d cannot run pith: %s", device, why);
        pick = device;
    } else {
        /* the first discrete GPU that can, else the first device that can */
        for (int pass = 0; pass < 2 && pick < 0; pass++)
            for (uint32_t i = 0; i < n && pick < 0; i++) {
                VkPhysicalDeviceProperties p;
                vkGetPhysicalDeviceProperties(pds[i], &p);
                if (pass == 0 && p.deviceType != VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU) continue;
                if (usable(pds[i], &c->qfam, why, sizeof why)) pick = (int)i;
            }
        if (pick < 0) return pith_errf(err, "Vulkan: no device can run pith (the last said: %s)", why);
    }
    c->phys = pds[pick];
    vkGetPhysicalDeviceProperties(c->phys, &c->props);
    vkGetPhysicalDeviceMemoryProperties(c->phys, &c->memprops);
    c->max_groups_x = c->props.limits.maxComputeWorkGroupCount[0];
    VkPhysicalDeviceMaintenance3Properties m3 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES};
    VkPhysicalDeviceSubgroupProperties sg = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES,
                                             .pNext = &m3};
    VkPhysicalDeviceProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &sg};
    vkGetPhysicalDeviceProperties2(c->phys, &p2);
    c->subgroup = sg.subgroupSize;
    c->max_alloc = m3.maxMemoryAllocationSize;
    if (c->props.limits.maxPushConstantsSize < PUSH_BYTES)
        return pith_errf(err, "Vulkan device %s offers %u bytes of push constants, %d needed", c->props.deviceName,
                         c->props.limits.maxPushConstantsSize, PUSH_BYTES);

    float prio = 1.0f;
    VkDeviceQueueCreateInfo qi = {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO, .queueFamilyIndex = c->qfam,
                                  .queueCount = 1, .pQueuePriorities = &prio};
    VkPhysicalDeviceVulkan12Features f12 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES,
                                            .bufferDeviceAddress = VK_TRUE};
    VkPhysicalDeviceVulkan11Features f11 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES,
                                            .pNext = &f12, .storageBuffer16BitAccess = VK_TRUE};
    VkPhysicalDeviceFeatures2 f = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &f11};
    f.features.shaderInt64 = VK_TRUE;
    VkDeviceCreateInfo di = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, .pNext = &f, .queueCreateInfoCount = 1,
                             .pQueueCreateInfos = &qi};
    VkResult r = vkCreateDevice(c->phys, &di, NULL, &c->dev);
    if (r != VK_SUCCESS) return vk_fail(err, r, "vkCreateDevice");
    vkGetDeviceQueue(c->dev, c->qfam, 0, &c->queue);

    VkCommandPoolCreateInfo pci = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                                   .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT, .queueFamilyIndex = c->qfam};
    if ((r = vkCreateCommandPool(c->dev, &pci, NULL, &c->pool)) != VK_SUCCESS) return vk_fail(err, r, "vkCreateCommandPool");
    VkCommandBufferAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO, .commandPool = c->pool,
                                      .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY, .commandBufferCount = 1};
    if ((r = vkAllocateCommandBuffers(c->dev, &ai, &c->once)) != VK_SUCCESS) return vk_fail(err, r, "vkAllocateCommandBuffers");
    VkFenceCreateInfo fi = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    if ((r = vkCreateFence(c->dev, &fi, NULL, &c->fence)) != VK_SUCCESS) return vk_fail(err, r, "vkCreateFence");
    VkPushConstantRange pr = {.stageFlags = VK_SHADER_STAGE_COMPUTE_BIT, .size = PUSH_BYTES};
    VkPipelineLayoutCreateInfo li = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO, .pushConstantRangeCount = 1,
                                     .pPushConstantRanges = &pr};
    if ((r = vkCreatePipelineLayout(c->dev, &li, NULL, &c->layout)) != VK_SUCCESS)
        return vk_fail(err, r, "vkCreatePipelineLayout");
    VkPipelineCacheCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO};
    if ((r = vkCreatePipelineCache(c->dev, &ci, NULL, &c->cache)) != VK_SUCCESS) return vk_fail(err, r, "vkCreatePipelineCache");
    snprintf(c->base.kernels, sizeof c->base.kernels, "vulkan: %.38s", c->props.deviceName);
    return 0;
}

void pith_vk_close(pith_vk *c) {
    if (c->dev) {
        vkDeviceWaitIdle(c->dev);
        for (int i = 0; i < PITH_VK_N_SHADERS; i++)
            if (c->pipes[i]) vkDestroyPipeline(c->dev, c->pipes[i], NULL);
        if (c->queries) vkDestroyQueryPool(c->dev, c->queries, NULL);
        if (c->cache) vkDestroyPipelineCache(c->dev, c->cache, NULL);
        if (c->layout) vkDestroyPipelineLayout(c->dev, c->layout, NULL);
        if (c->fence) vkDestroyFence(c->dev, c->fence, NULL);
        if (c->pool) vkDestroyCommandPool(c->dev, c->pool, NULL);
        vkDestroyDevice(c->dev, NULL);
    }
    if (c->inst) vkDestroyInstance(c->inst, NULL);
}

static int memory_type(const pith_vk *c, uint32_t bits, bool host, uint32_t *out) {
    /* host: visible and coherent (cached preferred: logits are read back); device: device-local */
    VkMemoryPropertyFlags want = host ? VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT
                                      : VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT;
    VkMemoryPropertyFlags nice = host ? VK_MEMORY_PROPERTY_HOST_CACHED_BIT : 0;
    for (int pass = 0; pass < 2; pass++)
        for (uint32_t i = 0; i < c->memprops.memoryTypeCount; i++) {
            VkMemoryPropertyFlags f = c->memprops.memoryTypes[i].propertyFlags;
            if (!(bits & (1u << i)) || (f & want) != want) continue;
            if (pass == 0 && (f & nice) != nice) continue;
            *out = i;
            return 0;
        }
    return -1;
}

int pith_vk_alloc(pith_vk *c, VkDeviceSize size, bool host, vk_mem *m, pith_err *err) {
    memset(m, 0, sizeof *m);
    if (size == 0) size = 16;
    size = (size + 15) & ~(VkDeviceSize)15;
    VkBufferCreateInfo bi = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, .size = size,
                             .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                                      VK_BUFFER_USAGE_TRANSFER_DST_BIT | VK_BUFFER_USAGE_SHADER_DEVICE_ADDRESS_BIT,
                             .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
    VkResult r = vkCreateBuffer(c->dev, &bi, NULL, &m->buf);
    if (r != VK_SUCCESS) return vk_fail(err, r, "vkCreateBuffer");
    VkMemoryRequirements req;
    vkGetBufferMemoryRequirements(c->dev, m->buf, &req);
    uint32_t type;
    if (memory_type(c, req.memoryTypeBits, host, &type)) {
        vkDestroyBuffer(c->dev, m->buf, NULL);
        m->buf = VK_NULL_HANDLE;
        return pith_errf(err, "Vulkan: no %s memory type for a buffer", host ? "host-visible" : "device-local");
    }
    uint32_t heap = c->memprops.memoryTypes[type].heapIndex;
    VkDeviceSize heap_size = c->memprops.memoryHeaps[heap].size;
    if (c->heap_cap && c->heap_cap < heap_size) heap_size = c->heap_cap;
    if ((c->max_alloc && req.size > c->max_alloc) || req.size > heap_size - c->heap_used[heap]) {
        vkDestroyBuffer(c->dev, m->buf, NULL);
        m->buf = VK_NULL_HANDLE;
        return pith_errf(err, "Vulkan: %.1f MiB do not fit on %s: %.1f MiB of its %.1f MiB heap%s are in use, and "
                         "one allocation may hold at most %.1f MiB",
                         (double)req.size / (1 << 20), c->props.deviceName, (double)c->heap_used[heap] / (1 << 20),
                         (double)heap_size / (1 << 20), heap_size == c->heap_cap ? " (PITH_VK_MEMORY)" : "",
                         (double)c->max_alloc / (1 << 20));
    }
    VkMemoryAllocateFlagsInfo fl = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_FLAGS_INFO,
                                    .flags = VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT};
    VkMemoryAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, .pNext = &fl,
                               .allocationSize = req.size, .memoryTypeIndex = type};
    if ((r = vkAllocateMemory(c->dev, &ai, NULL, &m->mem)) != VK_SUCCESS) {
        vkDestroyBuffer(c->dev, m->buf, NULL);
        m->buf = VK_NULL_HANDLE;
        return pith_errf(err, "Vulkan: cannot allocate %.1f MiB of %s memory on %s: %s", (double)size / (1 << 20),
                         host ? "host-visible" : "device", c->props.deviceName, pith_vk_result(r));
    }
    vkBindBufferMemory(c->dev, m->buf, m->mem, 0);
    VkBufferDeviceAddressInfo dai = {.sType = VK_STRUCTURE_TYPE_BUFFER_DEVICE_ADDRESS_INFO, .buffer = m->buf};
    m->addr = vkGetBufferDeviceAddress(c->dev, &dai);
    m->size = size;
    m->heap = heap;
    m->held = req.size;
    c->heap_used[heap] += req.size;
    VkMemoryPropertyFlags f = c->memprops.memoryTypes[type].propertyFlags;
    if ((f & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT) && (f & VK_MEMORY_PROPERTY_HOST_COHERENT_BIT) &&
        (r = vkMapMemory(c->dev, m->mem, 0, VK_WHOLE_SIZE, 0, &m->map)) != VK_SUCCESS) {
        pith_vk_free(c, m);
        return vk_fail(err, r, "vkMapMemory");
    }
    return 0;
}

void pith_vk_free(pith_vk *c, vk_mem *m) {
    if (m->buf) vkDestroyBuffer(c->dev, m->buf, NULL);
    if (m->mem) {
        vkFreeMemory(c->dev, m->mem, NULL);
        c->heap_used[m->heap] -= m->held;
    }
    memset(m, 0, sizeof *m);
}

static int begin_once(pith_vk *c, pith_err *err) {
    VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                   .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
    VkResult r = vkBeginCommandBuffer(c->once, &bi);
    return r == VK_SUCCESS ? 0 : vk_fail(err, r, "vkBeginCommandBuffer");
}

int pith_vk_submit_wait(pith_vk *c, VkCommandBuffer cmd, pith_err *err) {
    VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1, .pCommandBuffers = &cmd};
    VkResult r = vkResetFences(c->dev, 1, &c->fence);
    if (r == VK_SUCCESS) r = vkQueueSubmit(c->queue, 1, &si, c->fence);
    if (r == VK_SUCCESS) r = vkWaitForFences(c->dev, 1, &c->fence, VK_TRUE, UINT64_MAX);
    return r == VK_SUCCESS ? 0 : vk_fail(err, r, "a submission");
}

static int end_once(pith_vk *c, pith_err *err) {
    VkResult r = vkEndCommandBuffer(c->once);
    if (r != VK_SUCCESS) return vk_fail(err, r, "vkEndCommandBuffer");
    return pith_vk_submit_wait(c, c->once, err);
}

static int staging(pith_vk *c, pith_err *err) {
    return c->staging.buf ? 0 : pith_vk_alloc(c, STAGING_BYTES, true, &c->staging, err);
}

int pith_vk_upload(pith_vk *c, vk_mem *m, VkDeviceSize offset, const void *src, size_t bytes, pith_err *err) {
    if (offset + bytes > m->size) return pith_errf(err, "Vulkan: an upload past its buffer");
    if (m->map) {
        memcpy((char *)m->map + offset, src, bytes);
        return 0;
    }
    if (staging(c, err)) return -1;
    for (size_t done = 0; done < bytes;) {
        size_t n = bytes - done < STAGING_BYTES ? bytes - done : STAGING_BYTES;
        memcpy(c->staging.map, (const char *)src + done, n);
        VkBufferCopy region = {.srcOffset = 0, .dstOffset = offset + done, .size = n};
        if (begin_once(c, err)) return -1;
        vkCmdCopyBuffer(c->once, c->staging.buf, m->buf, 1, &region);
        if (end_once(c, err)) return -1;
        done += n;
    }
    return 0;
}

int pith_vk_download(pith_vk *c, const vk_mem *m, VkDeviceSize offset, void *dst, size_t bytes, pith_err *err) {
    if (offset + bytes > m->size) return pith_errf(err, "Vulkan: a download past its buffer");
    if (m->map) {
        memcpy(dst, (const char *)m->map + offset, bytes);
        return 0;
    }
    if (staging(c, err)) return -1;
    for (size_t done = 0; done < bytes;) {
        size_t n = bytes - done < STAGING_BYTES ? bytes - done : STAGING_BYTES;
        VkBufferCopy region = {.srcOffset = offset + done, .dstOffset = 0, .size = n};
        if (begin_once(c, err)) return -1;
        vkCmdCopyBuffer(c->once, m->buf, c->staging.buf, 1, &region);
        if (end_once(c, err)) return -1;
        memcpy((char *)dst + done, c->staging.map, n);
        done += n;
    }
    return 0;
}

int pith_vk_fill_zero(pith_vk *c, vk_mem *m, pith_err *err) {
    if (begin_once(c, err)) return -1;
    vkCmdFillBuffer(c->once, m->buf, 0, VK_WHOLE_SIZE, 0);
    return end_once(c, err);
}

int pith_vk_copy_regions(pith_vk *c, const vk_mem *src, const vk_mem *dst, const VkBufferCopy *r, uint32_t n,
                         pith_err *err) {
    if (n == 0) return 0;
    if (begin_once(c, err)) return -1;
    vkCmdCopyBuffer(c->once, src->buf, dst->buf, n, r);
    return end_once(c, err);
}

VkPipeline pith_vk_pipeline(pith_vk *c, pith_vk_shader s, pith_err *err) {
    if (c->pipes[s]) return c->pipes[s];
    VkShaderModuleCreateInfo mi = {.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO,
                                   .codeSize = pith_vk_spirv_bytes[s], .pCode = pith_vk_spirv[s]};
    VkShaderModule mod;
    VkResult r = vkCreateShaderModule(c->dev, &mi, NULL, &mod);
    if (r != VK_SUCCESS) {
        vk_fail(err, r, "vkCreateShaderModule");
        return VK_NULL_HANDLE;
    }
    VkComputePipelineCreateInfo pi = {
        .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
        .stage = {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO, .stage = VK_SHADER_STAGE_COMPUTE_BIT,
                  .module = mod, .pName = "main"},
        .layout = c->layout};
    r = vkCreateComputePipelines(c->dev, c->cache, 1, &pi, NULL, &c->pipes[s]);
    vkDestroyShaderModule(c->dev, mod, NULL);
    if (r != VK_SUCCESS) {
        c->pipes[s] = VK_NULL_HANDLE;
        pith_errf(err, "Vulkan: the %s pipeline: %s", pith_vk_shader_names[s], pith_vk_result(r));
        return VK_NULL_HANDLE;
    }
    return c->pipes[s];
}

int pith_vk_dispatch(pith_vk *c, VkCommandBuffer cmd, pith_vk_shader s, const void *push, uint32_t push_size,
                     uint32_t gx, uint32_t gy, pith_err *err) {
    if (gx == 0 || gy == 0) return 0;
    VkPipeline p = pith_vk_pipeline(c, s, err);
    if (!p) return -1;
    if (push_size > PUSH_BYTES) return pith_errf(err, "Vulkan: %u bytes of push constants", push_size);
    uint32_t y = 1;
    if (gx > c->max_groups_x) { /* the shader reads its flat index back (common.glsl: flat_group) */
        if (gy != 1) return pith_errf(err, "Vulkan: a dispatch of %u x %u workgroups", gx, gy);
        uint32_t x = c->max_groups_x < 65535 ? c->max_groups_x : 65535;
        y = (gx + x - 1) / x; /* x * y may pass gx: every shader checks its flat index against its count */
        gx = x;
        gy = y;
    }
    vkCmdBindPipeline(cmd, VK_PIPELINE_BIND_POINT_COMPUTE, p);
    vkCmdPushConstants(cmd, c->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, push_size, push);
    vkCmdDispatch(cmd, gx, gy, 1);
    VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                          .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT,
                          .dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT};
    vkCmdPipelineBarrier(cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1, &mb, 0,
                         NULL, 0, NULL);
    if (c->profile && c->queries && cmd != c->once && c->n_queries < 4096) {
        c->query_shader[c->n_queries] = s;
        vkCmdWriteTimestamp(cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, c->queries, c->n_queries++);
    }
    return 0;
}

int pith_vk_profile_begin(pith_vk *c, VkCommandBuffer cmd, pith_err *err) {
    if (!c->profile) return 0;
    if (!c->queries) {
        VkQueryPoolCreateInfo qi = {.sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO, .queryType = VK_QUERY_TYPE_TIMESTAMP,
                                    .queryCount = 4097};
        VkResult r = vkCreateQueryPool(c->dev, &qi, NULL, &c->queries);
        if (r != VK_SUCCESS) return vk_fail(err, r, "vkCreateQueryPool");
    }
    vkCmdResetQueryPool(cmd, c->queries, 0, 4097);
    c->n_queries = 0;
    c->query_shader[c->n_queries] = PITH_VK_N_SHADERS; /* the start */
    vkCmdWriteTimestamp(cmd, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, c->queries, c->n_queries++);
    return 0;
}

void pith_vk_profile_end(pith_vk *c) {
    if (!c->profile || !c->queries || c->n_queries < 2) return;
    uint64_t ts[4097];
    if (vkGetQueryPoolResults(c->dev, c->queries, 0, c->n_queries, sizeof ts, ts, sizeof ts[0],
                              VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT) != VK_SUCCESS)
        return;
    double ns = c->props.limits.timestampPeriod;
    for (uint32_t i = 1; i < c->n_queries; i++) {
        c->shader_ms[c->query_shader[i]] += (double)(ts[i] - ts[i - 1]) * ns * 1e-6;
        c->shader_calls[c->query_shader[i]]++;
    }
}

void pith_vk_profile_print(const pith_vk *c) {
    if (!c->profile) return;
    double total = 0;
    for (int s = 0; s < PITH_VK_N_SHADERS; s++) total += c->shader_ms[s];
    fprintf(stderr, "pith vulkan profile (%s): %.1f ms in shaders\n", c->props.deviceName, total);
    for (int s = 0; s < PITH_VK_N_SHADERS; s++)
        if (c->shader_calls[s])
            fprintf(stderr, "  %-14s %9.2f ms %5.1f%% %8llu calls %8.1f us/call\n", pith_vk_shader_names[s], c->shader_ms[s],
                    total > 0 ? 100 * c->shader_ms[s] / total : 0, c->shader_calls[s], 1e3 * c->shader_ms[s] / c->shader_calls[s]);
}
