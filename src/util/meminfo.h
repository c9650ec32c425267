/* What the kernel says about memory (Linux /proc/meminfo), for load-time choices that depend on it. */
#ifndef PITH_UTIL_MEMINFO_H
#define PITH_UTIL_MEMINFO_H

#include <stdint.h>

/* MemAvailable in bytes: memory the kernel can give without swapping (free plus reclaimable page
 * cache); 0 where unknown (no /proc/meminfo, a kernel before 3.14). */
uint64_t pith_mem_available(void);

#endif
