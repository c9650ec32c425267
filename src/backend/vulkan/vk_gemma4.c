/* What Gemma 4 asks of the Vulkan backend beyond the dense models (src/model/gemma4.c): a second
 * attention shape for the layers of one memory group (the global layers' wider heads over other KV
 * heads), the V norm (each V head RMS-normed without a weight before it is stored: headnorm.comp), and
 * copy_cols (one layer's slice of the per-layer inputs: cols.comp). Q-only layers (KV sharing) need no
 * code of their own: qkv.comp runs with no K heads and stores nothing.
 *
 * Invariants: the shape a group's qkv and attention ops use is decided by the group alone
 * (pith_vk_group_shape), once, at attn_shape, so a recorded step replays with the same shapes; both
 * ops here read nothing per step from the host (no step-buffer data at all), so they are replay-safe. */
#include "backend/vulkan/vk.h"

static VkDeviceAddress addr_of(const pith_buf *b) { return ((const vk_buf *)b)->mem.addr; }

static int check_one(int n_heads, int n_kv_heads, int head_dim, const char *what, pith_err *err) {
    if (head_dim < 1 || head_dim > 512 || n_heads < 1 || n_kv_heads < 1 || n_heads > 65535 || n_kv_heads > 65535 ||
        n_heads % n_kv_heads)
        return pith_errf(err, "Vulkan: %sattention of %d heads over %d KV heads of %d (the backend takes head widths "
                              "up to 512 and whole query groups)", what, n_heads, n_kv_heads, head_dim);
    return 0;
}

int pith_vk_check_shape(const pith_be_attn_shape *s, pith_err *err) {
    if (check_one(s->n_heads, s->n_kv_heads, s->head_dim, "", err)) return -1;
    if (s->alt_head_dim <= 0) return 0;
    if (s->alt_group < 0 || s->alt_group >= PITH_MAX_MEM_GROUPS)
        return pith_errf(err, "Vulkan: a second attention shape for memory group %d", s->alt_group);
    return check_one(s->n_heads, s->alt_n_kv_heads, s->alt_head_dim, "the second shape's ", err);
}

void pith_vk_group_shape(const pith_vk *c, int group, int *n_kv_heads, int *head_dim) {
    const pith_be_attn_shape *s = &c->shape;
    bool alt = s->alt_head_dim > 0 && group == s->alt_group;
    *n_kv_heads = alt ? s->alt_n_kv_heads : s->n_kv_heads;
    *head_dim = alt ? s->alt_head_dim : s->head_dim;
}

typedef struct {
    uint64_t x;
    uint32_t ld, hd, heads, n;
    float eps;
} head_norm_push;

int pith_vk_head_norm(pith_vk *c, const pith_buf *x, int heads, int hd, float eps, int n, pith_err *err) {
    if (n == 0) return 0;
    if (heads * hd > x->cols) return pith_errf(err, "Vulkan: %d heads of %d in rows of %d", heads, hd, x->cols);
    head_norm_push p = {addr_of(x), (uint32_t)x->cols, (uint32_t)hd, (uint32_t)heads, (uint32_t)n, eps};
    return pith_vk_dispatch(c, c->cmd, PITH_VK_SH_head_norm, &p, sizeof p, (uint32_t)n * (uint32_t)heads, 1, err);
}

typedef struct {
    uint64_t src, dst;
    uint32_t src_ld, dst_ld, col0, cols, count;
} cols_push;

int pith_vk_copy_cols(pith_vk *c, pith_buf *dst, const pith_buf *src, int col0, int n, pith_err *err) {
    if (col0 < 0 || col0 > src->cols - dst->cols)
        return pith_errf(err, "Vulkan: copy_cols of columns %d..%d from rows of %d", col0, col0 + dst->cols, src->cols);
    if ((size_t)n * dst->cols > UINT32_MAX) return pith_errf(err, "Vulkan: copy_cols over more than 2^32 values");
    if (n == 0) return 0;
    cols_push p = {addr_of(src), addr_of(dst), (uint32_t)src->cols, (uint32_t)dst->cols, (uint32_t)col0,
                   (uint32_t)dst->cols, (uint32_t)n * (uint32_t)dst->cols};
    return pith_vk_dispatch(c, c->cmd, PITH_VK_SH_copy_cols, &p, sizeof p, (p.count + 255) / 256, 1, err);
}
