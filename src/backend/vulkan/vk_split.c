/* What partial offload (src/backend/split/) asks of the Vulkan backend: the device-local memory it may
 * still allocate, so -ngl auto can place as many layers as fit. The same accounting as pith_vk_alloc's
 * refusal (heap_used against the heap's size under PITH_VK_MEMORY): what this says fits, an allocation
 * of it is not refused by pith before the driver is asked. */
#include <string.h>

#include "backend/vulkan/vk.h"

int pith_backend_vulkan_free_memory(pith_backend *be, size_t *bytes, pith_err *err) {
    pith_vk *c = pith_vk_of(be);
    *bytes = 0;
    if (!be || strcmp(be->vt->name, "vulkan") != 0) return pith_errf(err, "not a Vulkan backend");
    VkDeviceSize best = 0;
    for (uint32_t h = 0; h < c->memprops.memoryHeapCount; h++) {
        if (!(c->memprops.memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT)) continue;
        VkDeviceSize size = c->memprops.memoryHeaps[h].size;
        if (c->heap_cap && c->heap_cap < size) size = c->heap_cap;
        VkDeviceSize left = size > c->heap_used[h] ? size - c->heap_used[h] : 0;
        if (left > best) best = left;
    }
    *bytes = (size_t)best;
    return 0;
}
