/* Qwen3-VL's vision tower (model/vision.h, PITH_VISION_QWEN3VL), with its DeepStack mergers (Qwen3.5 has none). The math
 * follows transformers' Qwen3VLVisionModel; the names follow llama.cpp's clip conventions ("qwen3vl_merger").
 *
 * An image of any size whose sides are multiples of patch * merge is cut into patches, taken in merge x merge
 * blocks (the patches of one future token are consecutive, blocks row-major), as Qwen2VLImageProcessor
 * orders them. Then:
 *  - the patch embedding, a Conv3d over `temporal` copies of the image: one product with the frames' kernels
 *    summed at load (every frame holds the same pixels), plus its bias;
 *  - the learned positions, a pos_side x pos_side grid bilinearly interpolated to the image's patch grid
 *    (fast_pos_embed_interpolate: align-corners sampling), computed on the host per image and added;
 *  - the ViT blocks (vision.c) with a 2-D RoPE on Q and K: a patch's row and column each turn head_dim / 4
 *    frequencies of base rope_theta, in rotate-half pairs (the tables go in as a buffer, a row per patch);
 *  - the patch merger: a LayerNorm per patch, the block's merge^2 patches side by side, then
 *    Linear -> GELU (erf) -> Linear to the text model's width;
 *  - DeepStack (Qwen3-VL): after each of its blocks, a merger of its own (the patches side by side first,
 *    then a LayerNorm over all of them: use_postshuffle_norm) makes one more part of each token's row. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/vision_internal.h"
#include "pith/gguf.h"

typedef struct deepstack_merger {
    const pith_weight *norm_w, *norm_b, *fc1_b, *fc2_b;
    pith_weight *fc1, *fc2;
    pith_buf *y;
} deepstack_merger;

struct vision_qwen {
    float *patch_data;            /* [dim][3][patch][patch]: the frames' kernels summed */
    pith_tensor patch_t;
    pith_weight *patch_w, *fc1, *fc2;
    const pith_weight *patch_b, *norm_w, *norm_b, *fc1_b, *fc2_b;
    float *pos;                   /* [pos_side^2][dim], the learned grid, for the interpolation */
    pith_buf *pe, *grouped, *h1;
    float *host_pe, *host_cs;     /* the step's tables */
    size_t host_cap;              /* rows of each */
    deepstack_merger ds[PITH_VISION_MAX_DEEPSTACK];
    float *part;                  /* host: one part's rows, interleaved into the output */
    size_t part_cap;
};

int qwen3vl_gguf_hparams(const pith_gguf *g, pith_vision_hparams *hp, pith_err *err) {
    *hp = (pith_vision_hparams){.projector = PITH_VISION_QWEN3VL, .merge = 2, .temporal = 2, .pool = 1,
                                .rope_theta = 10000.0f, .fused_qkv = true, .resample = PITH_RESIZE_BICUBIC,
                                .min_pixels = 65536, .max_pixels = 16777216};
    double eps = 1e-6;
    pith_gguf_get_f64(g, "clip.vision.attention.layer_norm_epsilon", &eps);
    hp->eps = (float)eps;
    const pith_gguf_kv *deep = pith_gguf_find(g, "clip.vision.is_deepstack_layers");
    for (uint64_t i = 0; deep && deep->type == PITH_GGUF_ARRAY && deep->arr_type == PITH_GGUF_BOOL && i < deep->arr_n; i++)
        if (((const uint8_t *)deep->data)[i]) { /* bytes, so unaligned is fine */
            if (hp->n_deepstack == PITH_VISION_MAX_DEEPSTACK || i > (1 << 12))
                return pith_errf(err, "%s: more than %d DeepStack layers", pith_gguf_path(g), PITH_VISION_MAX_DEEPSTACK);
            hp->deepstack_layer[hp->n_deepstack++] = (int)i;
        }
    int64_t min_px = 65536, max_px = 16777216; /* Qwen3-VL's preprocessor_config.json: "size" */
    pith_gguf_get_i64(g, "clip.vision.image_min_pixels", &min_px);
    pith_gguf_get_i64(g, "clip.vision.image_max_pixels", &max_px);
    if (min_px < 1 || max_px < min_px || max_px > ((int64_t)1 << 30))
        return pith_errf(err, "%s: the pixel budget %lld to %lld is not a range of positive sizes", pith_gguf_path(g),
                         (long long)min_px, (long long)max_px);
    if (vision_get_int(g, "clip.vision.patch_size", true, 0, &hp->patch_size, err) ||
        vision_get_int(g, "clip.vision.embedding_length", true, 0, &hp->dim, err) ||
        vision_get_int(g, "clip.vision.feed_forward_length", true, 0, &hp->ffn, err) ||
        vision_get_int(g, "clip.vision.block_count", true, 0, &hp->n_layers, err) ||
        vision_get_int(g, "clip.vision.attention.head_count", true, 0, &hp->n_heads, err) ||
        vision_get_int(g, "clip.vision.spatial_merge_size", false, 2, &hp->merge, err) ||
        vision_get_floats3(g, "clip.vision.image_mean", 0.5f, hp->mean, err) ||
        vision_get_floats3(g, "clip.vision.image_std", 0.5f, hp->std, err))
        return -1;
    hp->min_pixels = (long)min_px;
    hp->max_pixels = (long)max_px;
    const pith_tensor *pos = pith_gguf_find_tensor(g, "v.position_embd.weight");
    if (!pos) return pith_errf(err, "%s: missing tensor v.position_embd.weight", pith_gguf_path(g));
    int side = 1;
    while ((int64_t)side * side < pos->ne[1] && side < (1 << 16)) side++;
    if ((int64_t)side * side != pos->ne[1])
        return pith_errf(err, "%s: v.position_embd.weight's %lld positions are not a square grid", pith_gguf_path(g),
                         (long long)pos->ne[1]);
    hp->pos_side = side;
    return 0;
}

/* The patch kernel as one [dim][3 * patch * patch] product: a GGUF holds each frame's kernel
 * (v.patch_embd.weight, v.patch_embd.weight.1, ...), a Hugging Face checkpoint the Conv3d's
 * [dim][3][temporal][patch][patch] (its outer dimensions folded: ne = {patch, patch, temporal, 3 dim}). */
static int bind_patch(pith_vision *v, vision_qwen *q, pith_err *err) {
    const pith_vision_hparams *hp = &v->hp;
    int p = hp->patch_size, d = hp->dim, T = hp->temporal;
    size_t per = (size_t)3 * p * p, n = (size_t)d * per;
    const pith_tensor *k = vision_find(v, "v.patch_embd.weight");
    if (!k) return pith_errf(err, "%s: missing tensor v.patch_embd.weight", v->path);
    if (!(q->patch_data = calloc(n, sizeof *q->patch_data))) return pith_errf(err, "out of memory");
    float *tmp = malloc(n * T * sizeof *tmp);
    if (!tmp) return pith_errf(err, "out of memory");
    int rc = 0;
    if (v->mf) {
        if (k->ne[0] != p || k->ne[1] != p || k->ne[2] != T || k->ne[3] != 3 * (int64_t)d)
            rc = pith_errf(err, "%s: v.patch_embd.weight is not [%d, 3, %d, %d, %d]", v->path, d, T, p, p);
        else if (!pith_tensor_floats(k, 0, (int64_t)(n * T), tmp))
            rc = pith_errf(err, "%s: v.patch_embd.weight is %s, not a float type", v->path, pith_dtype_name(k->type));
        for (size_t oc = 0; !rc && oc < (size_t)d * 3; oc++) /* [o][c][t][y][x] */
            for (int t = 0; t < T; t++)
                for (int i = 0; i < p * p; i++) q->patch_data[oc * p * p + i] += tmp[(oc * T + t) * p * p + i];
    } else {
        for (int t = 0; !rc && t < T; t++) {
            char name[48];
            snprintf(name, sizeof name, t ? "v.patch_embd.weight.%d" : "v.patch_embd.weight", t);
            const pith_tensor *f = vision_find(v, name);
            if (!f) rc = pith_errf(err, "%s: missing tensor %s (the patch kernel's frame %d)", v->path, name, t);
            else if (f->ne[0] != p || f->ne[1] != p || f->ne[2] != 3 || f->ne[3] != d)
                rc = pith_errf(err, "%s: %s is not [%d, 3, %d, %d]", v->path, name, d, p, p);
            else if (!pith_tensor_floats(f, 0, (int64_t)n, tmp))
                rc = pith_errf(err, "%s: %s is %s, not a float type", v->path, name, pith_dtype_name(f->type));
            for (size_t i = 0; !rc && i < n; i++) q->patch_data[i] += tmp[i];
        }
    }
    free(tmp);
    if (rc) return -1;
    q->patch_t = (pith_tensor){.name = "v.patch_embd.weight", .type = PITH_F32, .n_dims = 2,
                               .ne = {(int64_t)per, d, 1, 1}, .data = q->patch_data, .nbytes = n * sizeof(float)};
    if (pith_be_matrix(v->be, &q->patch_t, "v.patch_embd.weight", &q->patch_w, err))
        return pith_err_prefix(err, "%s: v.patch_embd.weight", v->path);
    return vision_floats(v, "v.patch_embd.bias", d, 1, 0.0f, &q->patch_b, err);
}

static int bind_pos(pith_vision *v, vision_qwen *q, pith_err *err) {
    const pith_vision_hparams *hp = &v->hp;
    int64_t n = (int64_t)hp->pos_side * hp->pos_side;
    const pith_tensor *t = vision_find(v, "v.position_embd.weight");
    if (!t) return pith_errf(err, "%s: missing tensor v.position_embd.weight", v->path);
    if (t->ne[0] != hp->dim || t->ne[1] != n || t->ne[2] != 1 || t->ne[3] != 1)
        return pith_errf(err, "%s: v.position_embd.weight is not [%lld, %d]", v->path, (long long)n, hp->dim);
    if (!(q->pos = malloc((size_t)n * hp->dim * sizeof *q->pos))) return pith_errf(err, "out of memory");
    if (!pith_tensor_floats(t, 0, n * hp->dim, q->pos))
        return pith_errf(err, "%s: v.position_embd.weight is %s, not a float type", v->path, pith_dtype_name(t->type));
    return 0;
}

int qwen3vl_open(pith_vision *v, pith_err *err) {
    const pith_vision_hparams *hp = &v->hp;
    if (!v->be->vt->rope_rows || !v->be->vt->group_rows)
        return pith_errf(err, "the %s backend cannot run Qwen3-VL's vision tower yet", v->be->kernels);
    vision_qwen *q = v->qwen = calloc(1, sizeof *v->qwen);
    if (!q) return pith_errf(err, "out of memory");
    int d = hp->dim, wide = d * hp->merge * hp->merge;
    if (bind_patch(v, q, err) || bind_pos(v, q, err) || vision_floats(v, "v.post_ln.weight", d, 1, 0, &q->norm_w, err) ||
        vision_floats(v, "v.post_ln.bias", d, 1, 0, &q->norm_b, err) || vision_mat(v, "mm.0.weight", wide, wide, &q->fc1, err) ||
        vision_floats(v, "mm.0.bias", wide, 1, 0, &q->fc1_b, err) ||
        vision_mat(v, "mm.2.weight", hp->out_dim, wide, &q->fc2, err) ||
        vision_floats(v, "mm.2.bias", hp->out_dim, 1, 0, &q->fc2_b, err))
        return -1;
    if (!(q->pe = pith_be_buffer(v->be, d, err)) || !(q->grouped = pith_be_buffer(v->be, wide, err)) ||
        !(q->h1 = pith_be_buffer(v->be, wide, err)) || !(v->cs = pith_be_buffer(v->be, d / hp->n_heads, err)))
        return -1;
    for (int k = 0; k < hp->n_deepstack; k++) {
        deepstack_merger *m = &q->ds[k];
        char nm[6][64];
        const char *part[6] = {"norm.weight", "norm.bias", "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"};
        for (int i = 0; i < 6; i++) snprintf(nm[i], sizeof nm[i], "v.deepstack.%d.%s", hp->deepstack_layer[k], part[i]);
        if (hp->deepstack_layer[k] >= hp->n_layers)
            return pith_errf(err, "%s: a DeepStack merger after layer %d of %d", v->path, hp->deepstack_layer[k], hp->n_layers);
        if (vision_floats(v, nm[0], wide, 1, 0, &m->norm_w, err) || vision_floats(v, nm[1], wide, 1, 0, &m->norm_b, err) ||
            vision_mat(v, nm[2], wide, wide, &m->fc1, err) || vision_floats(v, nm[3], wide, 1, 0, &m->fc1_b, err) ||
            vision_mat(v, nm[4], hp->out_dim, wide, &m->fc2, err) ||
            vision_floats(v, nm[5], hp->out_dim, 1, 0, &m->fc2_b, err) || !(m->y = pith_be_buffer(v->be, hp->out_dim, err)))
            return -1;
    }
    return 0;
}

void qwen3vl_free(pith_vision *v) {
    vision_qwen *q = v->qwen;
    if (!q) return;
    free(q->patch_data);
    free(q->pos);
    free(q->host_pe);
    free(q->host_cs);
    free(q->part);
    free(q);
    v->qwen = NULL;
}

/* torch.linspace(0, side - 1, n)[i], as fast_pos_embed_interpolate samples the learned grid */
static double grid_at(int i, int n, int side) { return n > 1 ? (double)i * (side - 1) / (n - 1) : 0.0; }

/* Patch t (in merge-block order) at full-resolution grid (row, col). */
static void patch_at(int t, int gw, int m, int *row, int *col) {
    int block = t / (m * m), in = t % (m * m), bw = gw / m;
    *row = block / bw * m + in / m;
    *col = block % bw * m + in % m;
}

/* The step's host tables: the interpolated positions and the RoPE angles, a row per patch. */
static void tables(const pith_vision *v, int gh, int gw, float *pe, float *cs) {
    const pith_vision_hparams *hp = &v->hp;
    const vision_qwen *q = v->qwen;
    int d = hp->dim, S = hp->pos_side, m = hp->merge, hd = d / hp->n_heads, quarter = hd / 4, n = gh * gw;
    double freq[128]; /* head_dim <= 512 (vision.c) */
    for (int i = 0; i < quarter; i++) freq[i] = pow((double)hp->rope_theta, -2.0 * i / (hd / 2));
    for (int t = 0; t < n; t++) {
        int r, c;
        patch_at(t, gw, m, &r, &c);
        double y = grid_at(r, gh, S), x = grid_at(c, gw, S);
        int y0 = (int)y, x0 = (int)x, y1 = y0 + 1 < S ? y0 + 1 : S - 1, x1 = x0 + 1 < S ? x0 + 1 : S - 1;
        double dy = y - y0, dx = x - x0;
        const float *p00 = q->pos + ((size_t)y0 * S + x0) * d, *p01 = q->pos + ((size_t)y0 * S + x1) * d;
        const float *p10 = q->pos + ((size_t)y1 * S + x0) * d, *p11 = q->pos + ((size_t)y1 * S + x1) * d;
        double w00 = (1 - dy) * (1 - dx), w01 = (1 - dy) * dx, w10 = dy * (1 - dx), w11 = dy * dx;
        float *o = pe + (size_t)t * d;
        for (int i = 0; i < d; i++) o[i] = (float)(w00 * p00[i] + w01 * p01[i] + w10 * p10[i] + w11 * p11[i]);
        /* angles [row * f_0 .. row * f_{q-1}, col * f_0 .. col * f_{q-1}], then their cos and sin */
        float *co = cs + (size_t)t * hd, *si = co + hd / 2;
        for (int i = 0; i < quarter; i++) {
            co[i] = (float)cos(r * freq[i]), si[i] = (float)sin(r * freq[i]);
            co[quarter + i] = (float)cos(c * freq[i]), si[quarter + i] = (float)sin(c * freq[i]);
        }
    }
}

/* Each patch's pixels in the kernel's order (channel, row, column), patches in merge-block order. */
static void patch_rows(const pith_vision_hparams *hp, const float *img, int height, int width, float *rows) {
    int p = hp->patch_size, gh = height / p, gw = width / p, n = gh * gw;
    (void)gh;
    for (int t = 0; t < n; t++) {
        int r, c;
        patch_at(t, gw, hp->merge, &r, &c);
        float *o = rows + (size_t)t * 3 * p * p;
        for (int ch = 0; ch < 3; ch++)
            for (int y = 0; y < p; y++)
                memcpy(o + (ch * p + y) * p, img + ((size_t)ch * height + r * p + y) * width + c * p, (size_t)p * sizeof *o);
    }
}

/* A merger: v->x (n rows of the tower's width) grouped merge^2 to a row, normed before (the patch merger:
 * norm_first) or after the grouping (DeepStack's), then Linear -> GELU -> Linear into y. */
static int merge(pith_vision *v, const pith_weight *norm_w, const pith_weight *norm_b, bool norm_first, pith_weight *fc1,
                 const pith_weight *fc1_b, pith_weight *fc2, const pith_weight *fc2_b, pith_buf *y, int n, pith_err *err) {
    const pith_vision_hparams *hp = &v->hp;
    vision_qwen *q = v->qwen;
    pith_backend *be = v->be;
    int m2 = hp->merge * hp->merge, n_out = n / m2;
    if (norm_first) {
        pith_be_layernorm(be, v->x, norm_w, norm_b, hp->eps, v->xb, n);
        pith_be_group_rows(be, v->xb, q->grouped, m2, n);
    } else {
        pith_be_group_rows(be, v->x, q->h1, m2, n);
        pith_be_layernorm(be, q->h1, norm_w, norm_b, 1e-6f, q->grouped, n_out);
    }
    if (vision_matmul1(be, q->grouped, fc1, q->h1, false, n_out, err)) return -1;
    pith_be_add_bias(be, q->h1, fc1_b, n_out);
    pith_be_activation(be, PITH_ACTIVATION_GELU, q->h1, n_out);
    if (vision_matmul1(be, q->h1, fc2, y, false, n_out, err)) return -1;
    pith_be_add_bias(be, y, fc2_b, n_out);
    return 0;
}

int qwen3vl_encode(pith_vision *v, const float *pixels, int height, int width, float *out, pith_err *err) {
    const pith_vision_hparams *hp = &v->hp;
    vision_qwen *q = v->qwen;
    pith_backend *be = v->be;
    int p = hp->patch_size, m = hp->merge, unit = p * m;
    if (height < unit || width < unit || height % unit || width % unit)
        return pith_errf(err, "a %dx%d image: Qwen3-VL takes sides that are multiples of %d", width, height, unit);
    int gh = height / p, gw = width / p;
    if ((int64_t)gh * gw > (1 << 20)) return pith_errf(err, "a %dx%d image has too many patches", width, height);
    int n = gh * gw, width_in = 3 * p * p, hd = hp->dim / hp->n_heads, n_out = n / (m * m);
    if ((size_t)n > q->host_cap) {
        float *rows = realloc(v->rows, (size_t)n * width_in * sizeof *rows);
        if (rows) v->rows = rows;
        float *pe = realloc(q->host_pe, (size_t)n * hp->dim * sizeof *pe);
        if (pe) q->host_pe = pe;
        float *cs = realloc(q->host_cs, (size_t)n * hd * sizeof *cs);
        if (cs) q->host_cs = cs;
        if (!rows || !pe || !cs) return pith_errf(err, "out of memory for a %dx%d image's patches", width, height);
        q->host_cap = (size_t)n;
    }
    patch_rows(hp, pixels, height, width, v->rows);
    tables(v, gh, gw, q->host_pe, q->host_cs);
    if (pith_be_reserve(be, n, err) || pith_be_set_rows(be, v->in, v->rows, n, err) ||
        pith_be_set_rows(be, q->pe, q->host_pe, n, err) || pith_be_set_rows(be, v->cs, q->host_cs, n, err) ||
        vision_matmul1(be, v->in, q->patch_w, v->x, false, n, err))
        return -1;
    pith_be_add_bias(be, v->x, q->patch_b, n);
    pith_be_scale_add(be, v->x, q->pe, 1.0f, n);
    for (int l = 0, k = 0; l < hp->n_layers; l++) {
        if (vision_block_forward(v, &v->blk[l], n, n, err)) return pith_err_prefix(err, "vision block %d", l);
        if (k < hp->n_deepstack && hp->deepstack_layer[k] == l) {
            const deepstack_merger *ds = &q->ds[k++];
            if (merge(v, ds->norm_w, ds->norm_b, false, ds->fc1, ds->fc1_b, ds->fc2, ds->fc2_b, ds->y, n, err))
                return pith_err_prefix(err, "DeepStack merger after vision block %d", l);
        }
    }
    if (merge(v, q->norm_w, q->norm_b, true, q->fc1, q->fc1_b, q->fc2, q->fc2_b, v->y, n, err)) return -1;
    if (hp->n_deepstack == 0) return be->vt->buf_read(be, v->y, n_out, out, err);
    /* each token's row: the merger's part, then each DeepStack merger's */
    const size_t od = (size_t)hp->out_dim, row = od * (1 + hp->n_deepstack);
    if ((size_t)n_out > q->part_cap) {
        float *grown = realloc(q->part, (size_t)n_out * od * sizeof *grown);
        if (!grown) return pith_errf(err, "out of memory for a %dx%d image's rows", width, height);
        q->part = grown;
        q->part_cap = (size_t)n_out;
    }
    for (int k = -1; k < hp->n_deepstack; k++) {
        if (be->vt->buf_read(be, k < 0 ? v->y : q->ds[k].y, n_out, q->part, err)) return -1;
        for (int t = 0; t < n_out; t++) memcpy(out + t * row + (size_t)(k + 1) * od, q->part + t * od, od * sizeof *out);
    }
    return 0;
}
