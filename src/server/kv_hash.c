/* SHA-256 (FIPS 180-4) and the CBOR of vLLM's block-hash tuple (kv_hash.h). */
#include "server/kv_hash.h"

#include <string.h>

static const uint32_t K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static uint32_t ror(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

static void compress(uint32_t h[8], const uint8_t p[64]) {
    uint32_t w[64];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
    for (int i = 16; i < 64; i++) {
        uint32_t s0 = ror(w[i - 15], 7) ^ ror(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = ror(w[i - 2], 17) ^ ror(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];
    for (int i = 0; i < 64; i++) {
        uint32_t t1 = k + (ror(e, 6) ^ ror(e, 11) ^ ror(e, 25)) + ((e & f) ^ (~e & g)) + K[i] + w[i];
        uint32_t t2 = (ror(a, 2) ^ ror(a, 13) ^ ror(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
        k = g;
        g = f;
        f = e;
        e = d + t1;
        d = c;
        c = b;
        b = a;
        a = t1 + t2;
    }
    h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e, h[5] += f, h[6] += g, h[7] += k;
}

void kv_sha256_init(kv_sha256 *c) {
    static const uint32_t iv[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    memcpy(c->h, iv, sizeof iv);
    c->len = 0;
    c->n = 0;
}

void kv_sha256_update(kv_sha256 *c, const void *data, size_t n) {
    const uint8_t *p = data;
    c->len += n;
    while (n > 0) {
        size_t take = 64 - c->n < n ? 64 - c->n : n;
        memcpy(c->buf + c->n, p, take);
        c->n += take;
        p += take;
        n -= take;
        if (c->n == 64) {
            compress(c->h, c->buf);
            c->n = 0;
        }
    }
}

void kv_sha256_final(kv_sha256 *c, uint8_t out[32]) {
    uint64_t bits = c->len * 8;
    uint8_t pad = 0x80, zero = 0, len[8];
    kv_sha256_update(c, &pad, 1);
    while (c->n != 56) kv_sha256_update(c, &zero, 1);
    for (int i = 0; i < 8; i++) len[i] = (uint8_t)(bits >> (56 - 8 * i));
    kv_sha256_update(c, len, 8);
    for (int i = 0; i < 8; i++)
        for (int j = 0; j < 4; j++) out[4 * i + j] = (uint8_t)(c->h[i] >> (24 - 8 * j));
}

/* A CBOR head (major type, argument) in its shortest form, as canonical CBOR requires. */
static void cbor_head(kv_sha256 *c, unsigned major, uint64_t v) {
    uint8_t b[9];
    size_t n;
    uint8_t m = (uint8_t)(major << 5);
    if (v < 24) {
        b[0] = (uint8_t)(m | v);
        n = 1;
    } else {
        int bytes = v <= 0xff ? 1 : v <= 0xffff ? 2 : v <= 0xffffffffull ? 4 : 8;
        b[0] = (uint8_t)(m | (bytes == 1 ? 24 : bytes == 2 ? 25 : bytes == 4 ? 26 : 27));
        for (int i = 0; i < bytes; i++) b[1 + i] = (uint8_t)(v >> (8 * (bytes - 1 - i)));
        n = 1 + (size_t)bytes;
    }
    kv_sha256_update(c, b, n);
}

enum { CBOR_UINT = 0, CBOR_BYTES = 2, CBOR_TEXT = 3, CBOR_ARRAY = 4 };

int kv_hash_parse(const char *name, kv_hash_algo *out) {
    if (!name || !*name || !strcmp(name, "sha256_cbor")) *out = KV_HASH_SHA256_CBOR;
    else if (!strcmp(name, "sha256_cbor_64bit")) *out = KV_HASH_SHA256_CBOR_64BIT;
    else return -1;
    return 0;
}

const char *kv_hash_name(kv_hash_algo a) { return a == KV_HASH_SHA256_CBOR_64BIT ? "sha256_cbor_64bit" : "sha256_cbor"; }

void kv_hash_seed(kv_hash_algo a, const char *seed, kv_digest *out) {
    (void)a; /* both hash the text string; they differ in what they keep of the digest */
    kv_sha256 c;
    kv_sha256_init(&c);
    size_t n = seed ? strlen(seed) : 0;
    cbor_head(&c, CBOR_TEXT, n);
    kv_sha256_update(&c, seed ? seed : "", n);
    kv_sha256_final(&c, out->b);
}

uint64_t kv_hash_value(kv_hash_algo a, const kv_digest *d) {
    const uint8_t *p = a == KV_HASH_SHA256_CBOR_64BIT ? d->b : d->b + 24;
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = v << 8 | p[i];
    return v;
}

void kv_hash_block(kv_hash_algo a, const kv_digest *parent, const int32_t *tokens, int n, bool salted,
                   uint64_t salt, kv_digest *out) {
    kv_sha256 c;
    kv_sha256_init(&c);
    cbor_head(&c, CBOR_ARRAY, 3);
    if (a == KV_HASH_SHA256_CBOR_64BIT) {
        cbor_head(&c, CBOR_UINT, kv_hash_value(a, parent));
    } else {
        cbor_head(&c, CBOR_BYTES, 32);
        kv_sha256_update(&c, parent->b, 32);
    }
    cbor_head(&c, CBOR_ARRAY, (uint64_t)n);
    for (int i = 0; i < n; i++) cbor_head(&c, CBOR_UINT, (uint32_t)tokens[i]);
    if (salted) {
        cbor_head(&c, CBOR_ARRAY, 1);
        cbor_head(&c, CBOR_UINT, salt);
    } else {
        static const uint8_t null = 0xf6;
        kv_sha256_update(&c, &null, 1);
    }
    kv_sha256_final(&c, out->b);
}
