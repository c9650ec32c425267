/* The pith_gguf object, shared by the parser (gguf.c) and the accessors (gguf_get.c). */
#ifndef PITH_FORMAT_GGUF_INTERNAL_H
#define PITH_FORMAT_GGUF_INTERNAL_H

#include "format/mapped_file.h"
#include "format/name_index.h"
#include "pith/gguf.h"

struct pith_gguf {
    char *path;
    pith_mapped_file map;
    uint32_t version;
    uint64_t alignment;   /* general.alignment or 32 */
    uint64_t data_offset; /* file offset of the (aligned) tensor data section */
    int64_t n_kv;
    pith_gguf_kv *kvs;
    pith_name_index kv_index;
    int64_t n_tensors;
    pith_tensor *tensors;
    char *names; /* NUL-terminated tensor names, back to back */
    pith_name_index tensor_index;
};

/* Byte size of a fixed-size scalar type; 0 for STRING and ARRAY, and for unknown types. */
size_t pith_gguf_scalar_size(uint32_t type);

#endif
