/* The KV block manager alone: allocation, reference counts, naming and lookup, LRU eviction (tail
 * blocks before head blocks), and a randomized run checked against a plain model of the reference
 * counts, with kv_pool_check after every operation. */
#include <stdint.h>

#include "check.h"
#include "core/kv_pool.h"

static uint64_t rng_state = 0x1234567;
static uint32_t rnd(uint32_t n) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 33) % n;
}

static void check_ok(const kv_pool *p, const int *refs) {
    pith_err err = {{0}};
    int rc = kv_pool_check(p, refs, &err);
    CHECKF(rc == 0, "%s", err.msg);
}

static void test_alloc_release(void) {
    kv_pool p;
    pith_err err;
    CHECK(kv_pool_init(&p, 4, 5, &err) == 0);
    CHECK(p.n_blocks == 5 && p.block_size == 4 && p.n_free == 5);
    int got[5];
    for (int i = 0; i < 5; i++) {
        got[i] = kv_pool_alloc(&p);
        CHECK(got[i] >= 0 && got[i] < 5);
        for (int j = 0; j < i; j++) CHECK(got[i] != got[j]);
    }
    CHECK(kv_pool_alloc(&p) == -1);
    CHECK(p.n_used == 5 && p.n_free == 0 && kv_pool_available(&p) == 0);
    int refs[5] = {1, 1, 1, 1, 1};
    check_ok(&p, NULL);
    kv_pool_acquire(&p, got[2]);
    refs[got[2]]++;
    check_ok(&p, refs);
    kv_pool_release(&p, got[2]);
    refs[got[2]]--;
    CHECK(p.n_used == 5);
    for (int i = 0; i < 5; i++) {
        kv_pool_release(&p, got[i]);
        refs[got[i]]--;
        check_ok(&p, refs);
    }
    CHECK(p.n_free == 5 && p.n_used == 0 && p.n_cached == 0);
    /* A wrong expectation is reported. */
    refs[0] = 1;
    CHECK(kv_pool_check(&p, refs, &err) == -1);
    kv_pool_free(&p);
    CHECK(kv_pool_init(&p, 0, 4, &err) == -1);
    CHECK(kv_pool_init(&p, 4, 0, &err) == -1);
}

static void test_names_and_eviction(void) {
    const int bs = 4;
    kv_pool p;
    pith_err err;
    CHECK(kv_pool_init(&p, bs, 6, &err) == 0);
    int32_t toks[3][4] = {{1, 2, 3, 4}, {5, 6, 7, 8}, {9, 10, 11, 12}};
    uint64_t salt = kv_pool_salt_hash(NULL);
    CHECK(salt == 0 && kv_pool_salt_hash("") == 0 && kv_pool_salt_hash("a") != 0);
    CHECK(kv_pool_salt_hash("a") != kv_pool_salt_hash("b"));
    uint64_t n0 = kv_pool_chain_hash(salt, toks[0], bs);
    uint64_t n1 = kv_pool_chain_hash(n0, toks[1], bs);
    uint64_t n2 = kv_pool_chain_hash(n1, toks[2], bs);
    CHECK(n0 != n1 && n1 != n2 && n0 != 0);
    CHECK(kv_pool_chain_hash(kv_pool_salt_hash("a"), toks[0], bs) != n0);
    int32_t last_differs[4] = {1, 2, 3, 5};
    CHECK(kv_pool_chain_hash(salt, last_differs, bs) != n0);
    /* The same block's tokens under another parent get another name. */
    CHECK(kv_pool_chain_hash(n0, toks[0], bs) != n0);

    /* A sequence holding three full blocks names them, then releases tail first. */
    int b[3];
    for (int i = 0; i < 3; i++) b[i] = kv_pool_alloc(&p);
    kv_pool_name(&p, b[0], n0, salt, true, toks[0]);
    kv_pool_name(&p, b[1], n1, n0, false, toks[1]);
    kv_pool_name(&p, b[2], n2, n1, false, toks[2]);
    check_ok(&p, NULL);
    CHECK(kv_pool_lookup(&p, n0, salt, toks[0]) == b[0]);
    CHECK(kv_pool_lookup(&p, n1, n0, toks[1]) == b[1]);
    CHECK(kv_pool_lookup(&p, n1, salt, toks[1]) == -1);   /* wrong parent */
    CHECK(kv_pool_lookup(&p, n1, n0, toks[2]) == -1);     /* same name, other tokens: a collision guard */
    CHECK(kv_pool_lookup(&p, n2 ^ 1, n1, toks[2]) == -1);
    /* Naming a second block with an existing name keeps the first. */
    int dup = kv_pool_alloc(&p);
    kv_pool_name(&p, dup, n0, salt, true, toks[0]);
    CHECK(!p.blocks[dup].named && kv_pool_lookup(&p, n0, salt, toks[0]) == b[0]);
    kv_pool_release(&p, dup);
    CHECK(p.n_free == 3);

    for (int i = 2; i >= 0; i--) kv_pool_release(&p, b[i]);
    CHECK(p.n_cached == 3 && p.n_used == 0 && p.n_free == 3);
    check_ok(&p, NULL);
    /* Still found while cached; acquiring revives it. */
    CHECK(kv_pool_lookup(&p, n0, salt, toks[0]) == b[0]);
    kv_pool_acquire(&p, b[0]);
    CHECK(p.n_cached == 2 && p.n_used == 1);
    check_ok(&p, NULL);
    kv_pool_release(&p, b[0]);
    /* Now the LRU order is b2 (oldest), b1, b0. Using up the free blocks, then one more, evicts b2. */
    int f[3];
    for (int i = 0; i < 3; i++) f[i] = kv_pool_alloc(&p);
    CHECK(p.n_free == 0 && p.n_cached == 3);
    int e1 = kv_pool_alloc(&p);
    CHECK(e1 == b[2]);
    CHECK(kv_pool_lookup(&p, n2, n1, toks[2]) == -1);
    CHECK(kv_pool_lookup(&p, n1, n0, toks[1]) == b[1]);
    int e2 = kv_pool_alloc(&p);
    CHECK(e2 == b[1]);
    CHECK(!p.blocks[e2].named && p.evictions == 2);
    check_ok(&p, NULL);
    kv_pool_release(&p, e1);
    kv_pool_release(&p, e2);
    for (int i = 0; i < 3; i++) kv_pool_release(&p, f[i]);
    CHECK(p.n_used == 0 && p.n_cached == 1 && p.n_free == 5);
    check_ok(&p, NULL);
    kv_pool_free(&p);
}

/* Random operations against a model of what each block's refcount must be. */
static void test_random(void) {
    for (int round = 0; round < 20; round++) {
        const int bs = 1 + (int)rnd(4), n_blocks = 1 + (int)rnd(40);
        kv_pool p;
        pith_err err;
        CHECK(kv_pool_init(&p, bs, n_blocks, &err) == 0);
        int *refs = calloc((size_t)n_blocks, sizeof *refs);
        int *held = malloc(4096 * sizeof *held); /* references the test holds, as block ids */
        int n_held = 0;
        int32_t tok[4];
        for (int op = 0; op < 3000; op++) {
            uint32_t what = rnd(10);
            if (what < 4) {
                int b = kv_pool_alloc(&p);
                if (b < 0) {
                    CHECK(kv_pool_available(&p) == 0);
                } else {
                    CHECK(refs[b] == 0);
                    refs[b]++;
                    held[n_held++] = b;
                    if (rnd(2)) { /* name it after 2-token-alphabet content so lookups hit often */
                        for (int i = 0; i < bs; i++) tok[i] = (int32_t)rnd(2);
                        uint64_t parent = rnd(3);
                        kv_pool_name(&p, b, kv_pool_chain_hash(parent, tok, bs), parent, parent == 0, tok);
                    }
                }
            } else if (what < 7 && n_held > 0) {
                int i = (int)rnd((uint32_t)n_held);
                int b = held[i];
                held[i] = held[--n_held];
                kv_pool_release(&p, b);
                refs[b]--;
            } else if (n_held < 4096) {
                for (int i = 0; i < bs; i++) tok[i] = (int32_t)rnd(2);
                uint64_t parent = rnd(3);
                int b = kv_pool_lookup(&p, kv_pool_chain_hash(parent, tok, bs), parent, tok);
                if (b >= 0) {
                    CHECK(p.blocks[b].named && !memcmp(&p.tokens[(size_t)b * bs], tok, (size_t)bs * sizeof *tok));
                    kv_pool_acquire(&p, b);
                    refs[b]++;
                    held[n_held++] = b;
                }
            }
            check_ok(&p, refs);
        }
        while (n_held > 0) {
            int b = held[--n_held];
            kv_pool_release(&p, b);
            refs[b]--;
        }
        check_ok(&p, refs);
        CHECK(p.n_used == 0 && p.n_free + p.n_cached == n_blocks);
        free(refs);
        free(held);
        kv_pool_free(&p);
    }
}

int main(void) {
    test_alloc_release();
    test_names_and_eviction();
    test_random();
    return check_summary("test_kv_pool");
}
