/* GGUF reader (versions 2 and 3).
 *
 * Owns one read-only memory mapping of the file. Everything in the header is validated at open time: every
 * length, count, offset and size is checked against the mapping before use (counts the file cannot hold
 * are refused before anything is allocated), so after pith_gguf_open succeeds every pith_gguf_kv and
 * pith_tensor it hands out points inside the mapping. Also refused: unknown value types, booleans other
 * than 0/1, arrays of arrays nested deeper than 16 (shallower ones are walked and checked, though only
 * their first level is exposed), duplicate keys or tensor names, general.alignment that is not a power of
 * two, tensor types other than those of pith_dtype, more than 4 dimensions, ne[0] not a multiple of the
 * type's block size, sizes that overflow, data offsets not multiples of the alignment, and data outside
 * the file. Files without tensors (vocabulary-only GGUFs) open. Errors name the file and the problem.
 *
 * Strings are not NUL-terminated (they are views into the file): use the explicit length. The pith_gguf
 * must outlive every view taken from it. */
#ifndef PITH_GGUF_H
#define PITH_GGUF_H

#include <stdbool.h>
#include <stdint.h>

#include "pith/api.h"
#include "pith/status.h"
#include "pith/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum pith_gguf_type {
    PITH_GGUF_UINT8 = 0,
    PITH_GGUF_INT8 = 1,
    PITH_GGUF_UINT16 = 2,
    PITH_GGUF_INT16 = 3,
    PITH_GGUF_UINT32 = 4,
    PITH_GGUF_INT32 = 5,
    PITH_GGUF_FLOAT32 = 6,
    PITH_GGUF_BOOL = 7,
    PITH_GGUF_STRING = 8,
    PITH_GGUF_ARRAY = 9,
    PITH_GGUF_UINT64 = 10,
    PITH_GGUF_INT64 = 11,
    PITH_GGUF_FLOAT64 = 12,
} pith_gguf_type;

typedef struct pith_str {
    const char *ptr;
    uint64_t len;
} pith_str;

typedef struct pith_gguf_kv {
    pith_str key;
    pith_gguf_type type;       /* value type; PITH_GGUF_ARRAY for arrays */
    pith_gguf_type arr_type;   /* element type when type == PITH_GGUF_ARRAY */
    uint64_t arr_n;            /* element count when an array */
    const void *data;          /* scalar value (for a string: its u64 length, then the bytes), or first
                                  array element, inside the mapping; possibly unaligned */
    const pith_str *arr_strs;  /* for string arrays: arr_n views, precomputed at open time */
} pith_gguf_kv;

typedef struct pith_gguf pith_gguf;

PITH_API int pith_gguf_open(const char *path, pith_gguf **out, pith_err *err);
PITH_API void pith_gguf_close(pith_gguf *g);

PITH_API uint32_t pith_gguf_version(const pith_gguf *g);
PITH_API const char *pith_gguf_path(const pith_gguf *g);

PITH_API int64_t pith_gguf_n_kv(const pith_gguf *g);
PITH_API const pith_gguf_kv *pith_gguf_kv_at(const pith_gguf *g, int64_t i);
/* NULL when the key is absent. */
PITH_API const pith_gguf_kv *pith_gguf_find(const pith_gguf *g, const char *key);

/* Typed getters: return true and fill *out when the key exists and converts losslessly (any integer
 * type that fits; FLOAT32/FLOAT64 for floats), false otherwise. */
PITH_API bool pith_gguf_get_i64(const pith_gguf *g, const char *key, int64_t *out);
PITH_API bool pith_gguf_get_f64(const pith_gguf *g, const char *key, double *out);
PITH_API bool pith_gguf_get_bool(const pith_gguf *g, const char *key, bool *out);
PITH_API bool pith_gguf_get_str(const pith_gguf *g, const char *key, pith_str *out);
/* Array element access (no bounds beyond arr_n; returns false on type mismatch or index out of range). */
PITH_API bool pith_gguf_arr_i64(const pith_gguf_kv *kv, uint64_t i, int64_t *out);
PITH_API bool pith_gguf_arr_f64(const pith_gguf_kv *kv, uint64_t i, double *out);
/* For string arrays: the i-th string view (false on type mismatch or index out of range). */
PITH_API bool pith_gguf_arr_str(const pith_gguf_kv *kv, uint64_t i, pith_str *out);
/* True when the view equals the NUL-terminated string. */
PITH_API bool pith_str_eq(pith_str s, const char *cstr);

PITH_API int64_t pith_gguf_n_tensors(const pith_gguf *g);
/* Tensor views carry NUL-terminated names (copied at open time) and data pointers inside the mapping. */
PITH_API const pith_tensor *pith_gguf_tensor_at(const pith_gguf *g, int64_t i);
PITH_API const pith_tensor *pith_gguf_find_tensor(const pith_gguf *g, const char *name);

#ifdef __cplusplus
}
#endif

#endif
