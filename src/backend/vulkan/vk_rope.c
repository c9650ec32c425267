/* RoPE frequencies for rope.comp: each inv_freq[i] (radians per position, double) as the fraction of a
 * turn it advances per position, in 64-bit fixed point. pos * F mod 2^64 is then the angle's fraction
 * of a turn exactly (to the rounding of F, 2^-64 of a turn per position), so the shader's range
 * reduction loses nothing as positions grow: the device needs no doubles. */
#include <math.h>
#include <string.h>

#include "backend/vulkan/vk.h"

const vk_rope *pith_vk_rope(pith_vk *c, const pith_rope *r, pith_err *err) {
    for (int i = 0; i < c->n_ropes; i++) {
        const vk_rope *k = &c->ropes[i];
        if (k->key == r && k->half == r->half && k->first == r->inv_freq[0] && k->last == r->inv_freq[r->half - 1])
            return k;
    }
    if (c->n_ropes == VK_MAX_ROPES) {
        pith_errf(err, "Vulkan: more than %d RoPE tables", VK_MAX_ROPES);
        return NULL;
    }
    if (r->half < 1 || r->half > 4096) {
        pith_errf(err, "Vulkan: a RoPE of %d frequencies", r->half);
        return NULL;
    }
    uint64_t fx[4096];
    for (int i = 0; i < r->half; i++) {
        long double turns = (long double)r->inv_freq[i] / (2.0L * 3.14159265358979323846264338327950288L);
        turns -= floorl(turns);
        if (!(turns >= 0 && turns < 1)) turns = 0; /* a NaN frequency */
        fx[i] = (uint64_t)ldexpl(turns, 64) ; /* turns < 1: fits; the last bit is rounding's */
    }
    vk_rope *k = &c->ropes[c->n_ropes];
    memset(k, 0, sizeof *k);
    if (pith_vk_alloc(c, (VkDeviceSize)r->half * sizeof(uint64_t), false, &k->freq, err) ||
        pith_vk_upload(c, &k->freq, 0, fx, (size_t)r->half * sizeof(uint64_t), err)) {
        pith_vk_free(c, &k->freq);
        return NULL;
    }
    k->key = r, k->half = r->half, k->first = r->inv_freq[0], k->last = r->inv_freq[r->half - 1];
    c->n_ropes++;
    return k;
}
