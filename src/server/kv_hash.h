/* Block hashes for KV-cache events (docs/kv-events.md): the chain vLLM computes for its prefix cache, so
 * that the hashes Pith publishes are the ones a router following vLLM's scheme expects.
 *
 *   root  = H(seed)                              seed: a CBOR text string (vLLM's PYTHONHASHSEED)
 *   block = H((parent, token ids, extra keys))   a CBOR array of three: the parent's hash, an array of
 *                                                the token ids, and null or [cache salt] (root blocks)
 * with CBOR in its canonical form (cbor2 canonical=True, smallest encodings) and H one of:
 *   sha256_cbor        SHA-256 of the CBOR (vLLM >= 0.11): the parent goes in as its 32-byte digest
 *                      (a byte string); the published 64-bit hash is the digest's last 8 bytes, big
 *                      endian (vLLM's int block hashes, VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES);
 *   sha256_cbor_64bit  SHA-256 of the CBOR cut to its first 8 bytes, big endian (vLLM 0.9/0.10): the
 *                      parent goes in, and the hash is published, as that 64-bit integer.
 * Only the fixed shapes above are encoded (a small hand-written CBOR writer); SHA-256 is here too (a
 * few dozen lines, so libpith needs no crypto library for a non-secret hash). Pure functions. */
#ifndef PITH_SERVER_KV_HASH_H
#define PITH_SERVER_KV_HASH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum kv_hash_algo {
    KV_HASH_SHA256_CBOR = 0,
    KV_HASH_SHA256_CBOR_64BIT = 1,
} kv_hash_algo;

/* A chain element: the full SHA-256 digest (either algorithm; kv_hash_value reads what is published). */
typedef struct kv_digest {
    uint8_t b[32];
} kv_digest;

typedef struct kv_sha256 {
    uint32_t h[8];
    uint64_t len;
    uint8_t buf[64];
    size_t n;
} kv_sha256;

void kv_sha256_init(kv_sha256 *c);
void kv_sha256_update(kv_sha256 *c, const void *data, size_t n);
void kv_sha256_final(kv_sha256 *c, uint8_t out[32]);

/* "sha256_cbor" / "sha256_cbor_64bit" (NULL or "": the default, sha256_cbor). 0, or -1 when unknown. */
int kv_hash_parse(const char *name, kv_hash_algo *out);
const char *kv_hash_name(kv_hash_algo a);
/* The root's parent (vLLM's NONE_HASH) for this seed. */
void kv_hash_seed(kv_hash_algo a, const char *seed, kv_digest *out);
/* A block's hash from its parent's; salted: the extra keys are [salt] (root blocks of salted requests),
 * else null. */
void kv_hash_block(kv_hash_algo a, const kv_digest *parent, const int32_t *tokens, int n, bool salted,
                   uint64_t salt, kv_digest *out);
/* The 64-bit hash published for a digest. */
uint64_t kv_hash_value(kv_hash_algo a, const kv_digest *d);

#endif
