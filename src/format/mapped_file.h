/* A whole regular file mapped read-only into memory.
 *
 * The mapping is private and read-only, so nothing a loader does can change the file, and nothing in the
 * file is ever executed. The descriptor is closed once the mapping exists. An empty file is an error:
 * every format this project reads needs at least a header. */
#ifndef PITH_FORMAT_MAPPED_FILE_H
#define PITH_FORMAT_MAPPED_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "pith/status.h"

typedef struct pith_mapped_file {
    const uint8_t *base;
    size_t size;
} pith_mapped_file;

/* Opens and maps `path`; errors name the path. Refuses directories, devices and FIFOs. Every page is
 * read in before it returns (a load's time then includes the disk reads). */
int pith_map_file(const char *path, pith_mapped_file *out, pith_err *err);
/* Safe on a zeroed struct; leaves it zeroed. */
void pith_unmap_file(pith_mapped_file *m);

/* Reads a whole small file (config.json, index files) into a NUL-terminated heap buffer, refusing files
 * larger than max_bytes. */
int pith_read_small_file(const char *path, size_t max_bytes, char **out, size_t *len, pith_err *err);

#endif
