#include "util/meminfo.h"

#include <stdio.h>
#include <string.h>

uint64_t pith_mem_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[128];
    unsigned long long kib = 0;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "MemAvailable:", 13) == 0) {
            if (sscanf(line + 13, "%llu", &kib) != 1) kib = 0;
            break;
        }
    fclose(f);
    return (uint64_t)kib * 1024;
}
