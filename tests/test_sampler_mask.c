/* Constrained sampling (pith_sampler_sample_constrained): only allowed tokens are ever drawn, greedy
 * picks the best allowed one (checking the unconstrained best first, building no mask when it is
 * allowed), top-k / top-p apply among allowed tokens, and no allowed token is an error (-1). */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "pith/sampler.h"

enum { V = 1000 };

typedef struct ctx {
    uint32_t mask[(V + 31) / 32];
    int fills, checks;
} ctx;

static int fill(void *c, uint32_t *mask) {
    ctx *x = c;
    x->fills++;
    memcpy(mask, x->mask, sizeof x->mask);
    int n = 0;
    for (int i = 0; i < V; i++) n += (x->mask[i >> 5] >> (i & 31)) & 1u;
    return n;
}

static bool allows(void *c, int32_t t) {
    ctx *x = c;
    x->checks++;
    return (x->mask[t >> 5] >> (t & 31)) & 1u;
}

static void allow(ctx *x, int t) { x->mask[t >> 5] |= 1u << (t & 31); }

int main(void) {
    float logits[V], row[V];
    for (int i = 0; i < V; i++) logits[i] = (float)sin(i * 0.37) * 3.0f;
    logits[500] = 10.0f; /* the unconstrained best */
    ctx x = {{0}, 0, 0};
    allow(&x, 7);
    allow(&x, 123);
    allow(&x, 999);
    pith_token_constraint c = {.fill = fill, .allows = allows, .ctx = &x};
    pith_err err;
    pith_sampling_params p = pith_sampling_defaults();
    p.temperature = 0;
    pith_sampler *s;
    CHECK(pith_sampler_new(&p, V, &s, &err) == 0);
    memcpy(row, logits, sizeof row);
    int32_t t = pith_sampler_sample_constrained(s, row, NULL, 0, &c);
    int32_t best = logits[7] >= logits[123] && logits[7] >= logits[999] ? 7 : logits[123] >= logits[999] ? 123 : 999;
    CHECK(t == best && x.fills == 1 && x.checks == 1);
    allow(&x, 500);
    memcpy(row, logits, sizeof row);
    x.fills = 0;
    CHECK(pith_sampler_sample_constrained(s, row, NULL, 0, &c) == 500 && x.fills == 0); /* no mask built */
    pith_sampler_free(s);

    /* sampling: thousands of draws, only allowed tokens; top_k 1 among allowed = the best allowed */
    memset(x.mask, 0, sizeof x.mask);
    for (int i = 0; i < V; i += 97) allow(&x, i);
    p = pith_sampling_defaults();
    p.temperature = 1.5f;
    p.top_k = 0;
    p.top_p = 1;
    p.min_p = 0;
    p.seed = 9;
    CHECK(pith_sampler_new(&p, V, &s, &err) == 0);
    int bad = 0, seen = 0;
    bool hit[V] = {false};
    for (int k = 0; k < 3000; k++) {
        memcpy(row, logits, sizeof row);
        t = pith_sampler_sample_constrained(s, row, NULL, 0, &c);
        if (t < 0 || t % 97 != 0) bad++;
        else if (!hit[t]) { hit[t] = true; seen++; }
    }
    CHECKF(bad == 0 && seen >= 8, "bad %d, distinct %d", bad, seen);
    pith_sampler_free(s);
    p.top_k = 1;
    CHECK(pith_sampler_new(&p, V, &s, &err) == 0);
    int32_t best_allowed = 0;
    for (int i = 0; i < V; i += 97)
        if (logits[i] > logits[best_allowed]) best_allowed = i;
    for (int k = 0; k < 20; k++) {
        memcpy(row, logits, sizeof row);
        CHECK(pith_sampler_sample_constrained(s, row, NULL, 0, &c) == best_allowed);
    }
    /* nothing allowed */
    memset(x.mask, 0, sizeof x.mask);
    memcpy(row, logits, sizeof row);
    CHECK(pith_sampler_sample_constrained(s, row, NULL, 0, &c) == -1);
    pith_sampler_free(s);

    /* apply_mask on a size that is not a multiple of 32 */
    float small[40];
    uint32_t m2[2] = {0x5u, 0x80u}; /* tokens 0, 2 and 39 */
    for (int i = 0; i < 40; i++) small[i] = 1.0f;
    pith_sampler_apply_mask(small, 40, m2);
    int finite = 0;
    for (int i = 0; i < 40; i++) finite += small[i] != -INFINITY;
    CHECK(finite == 3 && small[0] == 1.0f && small[2] == 1.0f && small[39] == 1.0f);
    return check_summary("test_sampler_mask");
}
