/* One safetensors file: an 8-byte little-endian header length N, N bytes of JSON describing each tensor
 * (dtype, shape, data_offsets relative to the first byte after the header), then the data.
 *
 * pith_safetensors_parse validates the header against the mapping: N bounded by 100 MB and the file, its
 * JSON values by PITH_JSON_MAX_VALUES (format/json_file.h: counted before the parse), offsets in range
 * with begin <= end, and end - begin == prod(shape) * element size, so every returned view lies inside
 * the file. Only F32, F16 and BF16 are accepted. Shapes are reversed into GGUF order
 * (safetensors [out, in] becomes ne = {in, out}). Names are the file's own (Hugging Face) names. */
#ifndef PITH_FORMAT_SAFETENSORS_H
#define PITH_FORMAT_SAFETENSORS_H

#include "format/mapped_file.h"
#include "pith/status.h"
#include "pith/tensor.h"

#define PITH_SAFETENSORS_MAX_HEADER (100u * 1000u * 1000u)

/* On success *out holds *n tensor views whose names are heap strings; free with pith_safetensors_free. */
int pith_safetensors_parse(const char *path, const pith_mapped_file *m, pith_tensor **out, int *n, pith_err *err);
void pith_safetensors_free(pith_tensor *t, int n);

#endif
