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

/* Opens and maps `path`; errors name the path. Refuses directories, devices and FIFOs. Nothing is read
 * in yet: a parser checks the header first, so that a large file with a bad header costs no reads. */
int pith_map_file(const char *path, pith_mapped_file *out, pith_err *err);
/* Reads every page of a mapping in now (the kernel reads ahead after WILLNEED), so that the time a load
 * reports includes the disk reads a mapping otherwise defers to the first requests that touch the
 * weights. Call it once the file is known to be a model. Does nothing for a file larger than half of
 * MemAvailable: its pages could not all stay (a mixture of experts bigger than the memory runs with its
 * experts read on demand, model/moe.h), and reading it through would only push its own first pages out. */
void pith_prefault_file(const pith_mapped_file *m);
/* Safe on a zeroed struct; leaves it zeroed. */
void pith_unmap_file(pith_mapped_file *m);

/* Every file a load reads whole (config.json, index files, tokenizer files, chat templates) comes through
 * these: the file is opened non-blocking and refused unless it is a regular file ("PATH: not a regular
 * file"), so that a FIFO or a device in a model directory fails the load at once instead of hanging it;
 * one larger than max_bytes is refused from its size, before anything is read ("PATH: file is N bytes,
 * more than the M allowed"). The buffer is NUL-terminated; an empty file gives "". */
int pith_read_small_file(const char *path, size_t max_bytes, char **out, size_t *len, pith_err *err);
/* The same for a file a model may lack: one that does not exist gives 0 with *out NULL. */
int pith_read_optional_file(const char *path, size_t max_bytes, char **out, size_t *len, pith_err *err);
/* The first bytes of a regular file (up to cap; *got may be less for a short file), and its size when
 * file_size is not NULL: to tell formats apart without reading a file in. */
int pith_read_file_head(const char *path, void *buf, size_t cap, size_t *got, uint64_t *file_size, pith_err *err);

#endif
