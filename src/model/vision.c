/* The vision encoders (model/vision.h): what every tower shares (opening either kind of file, the
 * pre-LayerNorm ViT blocks, the API), and Gemma 3's: SigLIP's embeddings and the Gemma 3 projector. The
 * math follows transformers' SiglipVisionTransformer and Gemma3MultiModalProjector; the names and layouts
 * follow llama.cpp's clip conventions. Qwen3-VL's tower is vision_qwen3vl.c. */
#include "model/vision.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/vision_internal.h"
#include "pith/gguf.h"

int vision_get_int(const pith_gguf *g, const char *key, bool required, int dflt, int *out, pith_err *err) {
    int64_t v;
    if (!pith_gguf_get_i64(g, key, &v)) {
        if (required) return pith_errf(err, "%s: missing metadata key %s", pith_gguf_path(g), key);
        v = dflt;
    }
    if (v < 1 || v > (1 << 20)) return pith_errf(err, "%s: %s = %lld is out of range", pith_gguf_path(g), key, (long long)v);
    *out = (int)v;
    return 0;
}

int vision_get_floats3(const pith_gguf *g, const char *key, float dflt, float out[3], pith_err *err) {
    const pith_gguf_kv *kv = pith_gguf_find(g, key);
    for (int i = 0; i < 3; i++) out[i] = dflt;
    if (!kv) return 0;
    double d;
    if (kv->type != PITH_GGUF_ARRAY || kv->arr_n != 3)
        return pith_errf(err, "%s: %s is not an array of 3 numbers", pith_gguf_path(g), key);
    for (int i = 0; i < 3; i++) {
        if (!pith_gguf_arr_f64(kv, (uint64_t)i, &d)) return pith_errf(err, "%s: %s is not numeric", pith_gguf_path(g), key);
        out[i] = (float)d;
    }
    return 0;
}

/* A tensor by its clip name, in either kind of file. */
const pith_tensor *vision_find(const pith_vision *v, const char *name) {
    return v->g ? pith_gguf_find_tensor(v->g, name) : vision_hf_tensor(v->mf, &v->hp, name);
}

static const pith_tensor *tensor(pith_vision *v, const char *name, int64_t ne0, int64_t ne1, pith_err *err) {
    const pith_tensor *t = vision_find(v, name);
    char hf[256];
    if (!t && v->mf && vision_hf_name(&v->hp, name, hf, sizeof hf)) {
        pith_errf(err, "%s: missing tensor %s (llama.cpp's %s)", v->path, hf, name);
        return NULL;
    }
    if (!t) {
        pith_errf(err, "%s: missing tensor %s", v->path, name);
        return NULL;
    }
    if (t->ne[0] != ne0 || t->ne[1] != ne1 || t->ne[2] != 1 || t->ne[3] != 1) {
        pith_errf(err, "%s: tensor %s has shape [%lld, %lld, %lld, %lld], expected [%lld, %lld]", v->path,
                  name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3],
                  (long long)ne0, (long long)ne1);
        return NULL;
    }
    return t;
}

/* A float tensor of ne0 x ne1 elements plus `add` as a vector weight (biases, norms, the position table). */
/* Elements [first, first + n) of a float tensor t (named name), plus add, as a vector weight. */
static int floats_of(pith_vision *v, const pith_tensor *t, const char *name, int64_t first, int n, float add,
                     const pith_weight **out, pith_err *err) {
    float *data = malloc((size_t)n * sizeof *data);
    if (!data) return pith_errf(err, "out of memory");
    if (!pith_tensor_floats(t, first, n, data)) {
        free(data);
        return pith_errf(err, "%s: tensor %s is %s, not a float type", v->path, name, pith_dtype_name(t->type));
    }
    for (int i = 0; add != 0.0f && i < n; i++) data[i] += add;
    pith_weight *w;
    if (pith_be_vector(v->be, data, n, &w, err)) return -1;
    *out = w;
    return 0;
}

int vision_floats(pith_vision *v, const char *name, int64_t ne0, int64_t ne1, float add, const pith_weight **out,
                  pith_err *err) {
    const pith_tensor *t = tensor(v, name, ne0, ne1, err);
    return t ? floats_of(v, t, name, 0, (int)(ne0 * ne1), add, out, err) : -1;
}

static int floats(pith_vision *v, const char *name, int64_t ne0, int64_t ne1, const pith_weight **out, pith_err *err) {
    return vision_floats(v, name, ne0, ne1, 0.0f, out, err);
}

static int vec(pith_vision *v, const char *name, int n, const pith_weight **out, pith_err *err) {
    return floats(v, name, n, 1, out, err);
}

int vision_mat(pith_vision *v, const char *name, int rows, int cols, pith_weight **out, pith_err *err) {
    const pith_tensor *t = tensor(v, name, cols, rows, err);
    if (!t) return -1;
    return pith_be_matrix(v->be, t, name, out, err) ? pith_err_prefix(err, "%s: %s", v->path, name) : 0;
}

/* A projector GGUF's metadata (llama.cpp's clip keys). */
static int gguf_hparams(const pith_gguf *g, pith_vision_hparams *hp, pith_err *err) {
    pith_str s;
    if (!pith_gguf_get_str(g, "clip.projector_type", &s))
        return pith_errf(err, "%s: not a projector file (no clip.projector_type)", pith_gguf_path(g));
    bool has = true;
    if (pith_gguf_get_bool(g, "clip.has_vision_encoder", &has) && !has)
        return pith_errf(err, "%s: the projector file has no vision encoder", pith_gguf_path(g));
    if (pith_str_eq(s, "qwen3vl_merger")) return qwen3vl_gguf_hparams(g, hp, err);
    if (!pith_str_eq(s, "gemma3"))
        return pith_errf(err, "%s: projector type '%.*s' is not supported (supported: gemma3, qwen3vl_merger)",
                         pith_gguf_path(g), (int)(s.len > 64 ? 64 : s.len), s.ptr);
    hp->projector = PITH_VISION_GEMMA3;
    hp->resample = PITH_RESIZE_BILINEAR;
    double eps = 1e-6;
    pith_gguf_get_f64(g, "clip.vision.attention.layer_norm_epsilon", &eps);
    hp->eps = (float)eps;
    return vision_get_int(g, "clip.vision.image_size", true, 0, &hp->image_size, err) ||
                   vision_get_int(g, "clip.vision.patch_size", true, 0, &hp->patch_size, err) ||
                   vision_get_int(g, "clip.vision.embedding_length", true, 0, &hp->dim, err) ||
                   vision_get_int(g, "clip.vision.feed_forward_length", true, 0, &hp->ffn, err) ||
                   vision_get_int(g, "clip.vision.block_count", true, 0, &hp->n_layers, err) ||
                   vision_get_int(g, "clip.vision.attention.head_count", true, 0, &hp->n_heads, err) ||
                   vision_get_int(g, "clip.vision.projector.scale_factor", false, 4, &hp->pool, err) ||
                   vision_get_floats3(g, "clip.vision.image_mean", 0.5f, hp->mean, err) ||
                   vision_get_floats3(g, "clip.vision.image_std", 0.5f, hp->std, err)
               ? -1
               : 0;
}

/* Qwen3-VL's sizes checked, and its text width from the merger's last product. */
static int qwen_hparams(pith_vision *v, pith_err *err) {
    pith_vision_hparams *hp = &v->hp;
    if (hp->patch_size < 1 || hp->patch_size > 1024 || hp->dim < 1 || hp->dim > (1 << 16) || hp->ffn < 1 ||
        hp->ffn > (1 << 20) || hp->n_layers < 1 || hp->n_layers > 4096 || hp->n_heads < 1 || hp->merge < 1 ||
        hp->merge > 8 || hp->temporal < 1 || hp->temporal > 8 || hp->pos_side < 1 || !(hp->eps > 0) ||
        !(hp->rope_theta > 0) || hp->min_pixels < 1 || hp->max_pixels < hp->min_pixels)
        return pith_errf(err, "%s: a vision size is out of range", v->path);
    for (int c = 0; c < 3; c++)
        if (!(hp->std[c] > 0)) return pith_errf(err, "%s: image_std[%d] is not positive", v->path, c);
    if (hp->dim % hp->n_heads || hp->dim / hp->n_heads > 512 || hp->dim / hp->n_heads % 4)
        return pith_errf(err, "%s: width %d over %d heads (heads of at most 512, a multiple of 4 for the 2-D RoPE)",
                         v->path, hp->dim, hp->n_heads);
    const pith_tensor *q0 = vision_find(v, "v.blk.0.attn_qkv.weight");
    hp->weight_type = q0 ? q0->type : PITH_F32;
    const pith_tensor *p = vision_find(v, "mm.2.weight");
    if (!p) return pith_errf(err, "%s: missing tensor mm.2.weight (the patch merger's last product)", v->path);
    if (p->ne[0] != (int64_t)hp->dim * hp->merge * hp->merge || p->ne[1] < 1 || p->ne[1] > (1 << 20) || p->ne[2] != 1 ||
        p->ne[3] != 1)
        return pith_errf(err, "%s: mm.2.weight has shape [%lld, %lld], expected [%d, text width]", v->path,
                         (long long)p->ne[0], (long long)p->ne[1], hp->dim * hp->merge * hp->merge);
    hp->out_dim = (int)p->ne[1];
    return 0;
}

/* The sizes from either kind of file, checked, and what the tensors tell (the text width, the type). */
static int hparams(pith_vision *v, pith_err *err) {
    pith_vision_hparams *hp = &v->hp;
    if (v->g ? gguf_hparams(v->g, hp, err) : vision_hf_hparams(v->mf, hp, err)) return -1;
    if (hp->projector == PITH_VISION_QWEN3VL) return qwen_hparams(v, err);
    if (hp->image_size < 1 || hp->patch_size < 1 || hp->dim < 1 || hp->ffn < 1 || hp->n_layers < 1 ||
        hp->n_heads < 1 || hp->pool < 1 || hp->image_size > (1 << 16) || hp->dim > (1 << 20) || hp->ffn > (1 << 20) ||
        hp->n_layers > 4096 || !(hp->eps > 0))
        return pith_errf(err, "%s: a vision size is out of range", v->path);
    for (int c = 0; c < 3; c++)
        if (!(hp->std[c] > 0)) return pith_errf(err, "%s: image_std[%d] is not positive", v->path, c);
    if (hp->image_size % hp->patch_size)
        return pith_errf(err, "%s: image size %d is not a multiple of the patch size %d", v->path, hp->image_size,
                         hp->patch_size);
    hp->patches_per_side = hp->image_size / hp->patch_size;
    if (hp->patches_per_side % hp->pool)
        return pith_errf(err, "%s: %d patches per side do not pool by %d", v->path, hp->patches_per_side, hp->pool);
    if (hp->dim % hp->n_heads || hp->dim / hp->n_heads > 512)
        return pith_errf(err, "%s: width %d over %d heads (heads of at most 512)", v->path, hp->dim, hp->n_heads);
    int side = hp->patches_per_side / hp->pool;
    hp->tokens_per_image = side * side;
    const pith_tensor *q0 = vision_find(v, "v.blk.0.attn_q.weight");
    hp->weight_type = q0 ? q0->type : PITH_F32;
    const pith_tensor *p = vision_find(v, "mm.input_projection.weight");
    if (!p) return pith_errf(err, "%s: missing tensor mm.input_projection.weight", v->path);
    /* transformers' [vision width][text width] matrix, stored as it is (x @ W): ne = [text width, dim] */
    if (p->ne[1] != hp->dim || p->ne[0] < 1 || p->ne[0] > (1 << 20) || p->ne[2] != 1 || p->ne[3] != 1)
        return pith_errf(err, "%s: mm.input_projection.weight has shape [%lld, %lld], expected [text width, %d]",
                         v->path, (long long)p->ne[0], (long long)p->ne[1], hp->dim);
    hp->out_dim = (int)p->ne[0];
    return 0;
}

/* The patch kernel, [dim][3][patch][patch] in the file, is one product over each patch's pixels in that
 * order; the projection is transposed here so that it is a product like any other (y = x W^T). */
static int bind_embeddings(pith_vision *v, pith_err *err) {
    const pith_vision_hparams *hp = &v->hp;
    int p = hp->patch_size, n_patch = hp->patches_per_side * hp->patches_per_side;
    const pith_tensor *k = vision_find(v, "v.patch_embd.weight");
    if (!k) return pith_errf(err, "%s: missing tensor v.patch_embd.weight", v->path);
    if (k->ne[0] != p || k->ne[1] != p || k->ne[2] != 3 || k->ne[3] != hp->dim)
        return pith_errf(err, "%s: v.patch_embd.weight is not [%d, %d, 3, %d]", v->path, p, p, hp->dim);
    v->patch_t = *k;
    v->patch_t.n_dims = 2;
    v->patch_t.ne[0] = 3 * p * p;
    v->patch_t.ne[1] = hp->dim;
    v->patch_t.ne[2] = v->patch_t.ne[3] = 1;
    /* the position table, [n_patch][dim], is one vector that add_rows reads row by row */
    if (pith_be_matrix(v->be, &v->patch_t, "v.patch_embd.weight", &v->patch_w, err))
        return pith_err_prefix(err, "%s: v.patch_embd.weight", v->path);
    if (
        vec(v, "v.patch_embd.bias", hp->dim, &v->patch_b, err) ||
        floats(v, "v.position_embd.weight", hp->dim, n_patch, &v->pos, err))
        return -1;
    const pith_tensor *pr = vision_find(v, "mm.input_projection.weight");
    size_t n = (size_t)hp->out_dim * hp->dim;
    float *src = malloc(n * sizeof *src);
    v->proj_data = malloc(n * sizeof *v->proj_data);
    if (!src || !v->proj_data) {
        free(src);
        return pith_errf(err, "out of memory");
    }
    if (!pith_tensor_floats(pr, 0, (int64_t)n, src)) {
        free(src);
        return pith_errf(err, "%s: mm.input_projection.weight is %s, not a float type", v->path,
                         pith_dtype_name(pr->type));
    }
    for (int i = 0; i < hp->dim; i++)
        for (int o = 0; o < hp->out_dim; o++) v->proj_data[(size_t)o * hp->dim + i] = src[(size_t)i * hp->out_dim + o];
    free(src);
    v->proj_t = (pith_tensor){.name = "mm.input_projection.weight", .type = PITH_F32, .n_dims = 2,
                              .ne = {hp->dim, hp->out_dim, 1, 1}, .data = v->proj_data, .nbytes = n * sizeof(float)};
    if (pith_be_matrix(v->be, &v->proj_t, "mm.input_projection.weight", &v->proj, err))
        return pith_err_prefix(err, "%s: mm.input_projection.weight", v->path);
    return 0;
}

/* Rows [part * d, part * d + d) of a fused [3d][d] QKV matrix: a view of its data (rows are whole, so
 * this holds for any type), bound as a matrix of its own. */
static int qkv_part(pith_vision *v, const pith_tensor *t, int part, pith_tensor *view, pith_weight **out, pith_err *err) {
    int d = v->hp.dim;
    size_t row = pith_dtype_row_bytes(t->type, d);
    *view = *t;
    view->n_dims = 2;
    view->ne[1] = d;
    view->data = (const char *)t->data + (size_t)part * d * row;
    view->nbytes = (size_t)d * row;
    return pith_be_matrix(v->be, view, t->name, out, err) ? pith_err_prefix(err, "%s: %s", v->path, t->name) : 0;
}

/* The bias of a fused QKV projection, a third at a time. */
static int qkv_bias(pith_vision *v, const char *name, int part, const pith_weight **out, pith_err *err) {
    int d = v->hp.dim;
    const pith_tensor *t = tensor(v, name, 3 * (int64_t)d, 1, err);
    return t ? floats_of(v, t, name, (int64_t)part * d, d, 0.0f, out, err) : -1;
}

int vision_bind_block(pith_vision *v, int l, vision_block *b, pith_err *err) {
    const pith_vision_hparams *hp = &v->hp;
    int d = hp->dim, f = hp->ffn;
    char nm[18][64];
    const char *part[18] = {"ln1.weight",     "ln1.bias",      "ln2.weight",     "ln2.bias",
                            "attn_q.weight",  "attn_q.bias",   "attn_k.weight",  "attn_k.bias",
                            "attn_v.weight",  "attn_v.bias",   "attn_out.weight", "attn_out.bias",
                            "ffn_up.weight",  "ffn_up.bias",   "ffn_down.weight", "ffn_down.bias",
                            "attn_qkv.weight", "attn_qkv.bias"};
    for (int i = 0; i < 18; i++) snprintf(nm[i], sizeof nm[i], "v.blk.%d.%s", l, part[i]);
    /* Older projector files name the MLP's first product ffn_down and its second ffn_up: the shapes
     * say which is which (the first reads the block's width). */
    const pith_tensor *up = vision_find(v, nm[12]);
    int iu = 12, id = 14;
    if (up && up->ne[0] == f && up->ne[1] == d && f != d) iu = 14, id = 12;
    if (vec(v, nm[0], d, &b->ln1_w, err) || vec(v, nm[1], d, &b->ln1_b, err) || vec(v, nm[2], d, &b->ln2_w, err) ||
        vec(v, nm[3], d, &b->ln2_b, err) || vision_mat(v, nm[10], d, d, &b->o, err) ||
        vec(v, nm[11], d, &b->o_b, err) || vision_mat(v, nm[iu], f, d, &b->up, err) ||
        vec(v, nm[iu + 1], f, &b->up_b, err) || vision_mat(v, nm[id], d, f, &b->down, err) ||
        vec(v, nm[id + 1], d, &b->down_b, err))
        return -1;
    if (hp->fused_qkv) { /* Qwen-VL: one [3d][d] product, Q, K and V in that order */
        const pith_tensor *qkv = tensor(v, nm[16], d, 3 * (int64_t)d, err);
        if (!qkv) return -1;
        pith_weight **w[3] = {&b->q, &b->k, &b->v};
        const pith_weight **bias[3] = {&b->q_b, &b->k_b, &b->v_b};
        for (int i = 0; i < 3; i++)
            if (qkv_part(v, qkv, i, &b->qkv_view[i], w[i], err) || qkv_bias(v, nm[17], i, bias[i], err)) return -1;
        return 0;
    }
    return vision_mat(v, nm[4], d, d, &b->q, err) || vec(v, nm[5], d, &b->q_b, err) ||
                   vision_mat(v, nm[6], d, d, &b->k, err) || vec(v, nm[7], d, &b->k_b, err) ||
                   vision_mat(v, nm[8], d, d, &b->v, err) || vec(v, nm[9], d, &b->v_b, err)
               ? -1
               : 0;
}

int pith_vision_open(const char *path, pith_backend *be, pith_vision **out, pith_err *err) {
    *out = NULL;
    if (!pith_be_has_vision(be))
        return pith_errf(err, "the %s backend cannot run a vision encoder yet", be->kernels[0] ? be->kernels : "chosen");
    pith_vision *v = calloc(1, sizeof *v);
    if (!v) return pith_errf(err, "out of memory");
    v->be = be;
    int rc = vision_hf_path(path) ? pith_model_file_open(path, &v->mf, err) : pith_gguf_open(path, &v->g, err);
    if (!rc) v->path = v->g ? pith_gguf_path(v->g) : pith_model_file_path(v->mf);
    if (!rc) rc = hparams(v, err);
    const pith_vision_hparams *hp = &v->hp;
    bool qwen = hp->projector == PITH_VISION_QWEN3VL;
    if (!rc && !(v->blk = calloc((size_t)hp->n_layers, sizeof *v->blk))) rc = pith_errf(err, "out of memory");
    for (int l = 0; !rc && l < hp->n_layers; l++) rc = vision_bind_block(v, l, &v->blk[l], err);
    if (!rc && qwen) rc = qwen3vl_open(v, err);
    if (!rc && !qwen &&
        (bind_embeddings(v, err) || vec(v, "v.post_ln.weight", hp->dim, &v->post_w, err) ||
         vec(v, "v.post_ln.bias", hp->dim, &v->post_b, err) ||
         /* Gemma's RMSNorm multiplies by 1 + w: llama.cpp's converter stores 1 + w, transformers w */
         vision_floats(v, "mm.soft_emb_norm.weight", hp->dim, 1, v->g ? 0.0f : 1.0f, &v->soft_norm, err) ||
         !(v->pooled = pith_be_buffer(be, hp->dim, err)) || !(v->normed = pith_be_buffer(be, hp->dim, err))))
        rc = -1;
    pith_buf **bufs[] = {&v->x, &v->xb, &v->q, &v->k, &v->v, &v->att};
    for (size_t i = 0; !rc && i < sizeof bufs / sizeof *bufs; i++)
        if (!(*bufs[i] = pith_be_buffer(be, hp->dim, err))) rc = -1;
    if (!rc && (!(v->in = pith_be_buffer(be, 3 * hp->patch_size * hp->patch_size, err)) ||
                !(v->hb = pith_be_buffer(be, hp->ffn, err)) || !(v->y = pith_be_buffer(be, hp->out_dim, err))))
        rc = -1;
    if (rc) {
        pith_vision_free(v);
        return -1;
    }
    *out = v;
    return 0;
}

void pith_vision_free(pith_vision *v) {
    if (!v) return;
    /* weights and buffers die with the backend (backend.h); the file and the host copies are ours */
    qwen3vl_free(v);
    free(v->blk);
    free(v->proj_data);
    free(v->rows);
    pith_gguf_close(v->g);
    pith_model_file_close(v->mf);
    pith_backend *own = v->own_be;
    free(v);
    pith_backend_free(own); /* last: the weights and buffers above lived in it */
}

int pith_vision_load(const char *path, int n_threads, pith_vision **out, pith_err *err) {
    pith_backend *be;
    *out = NULL;
    if (pith_backend_cpu_create(n_threads, &be, err)) return -1;
    if (pith_vision_open(path, be, out, err)) {
        pith_backend_free(be);
        return -1;
    }
    (*out)->own_be = be;
    return 0;
}

const pith_vision_hparams *pith_vision_hparams_of(const pith_vision *v) { return &v->hp; }

int pith_vision_row_floats(const pith_vision *v) { return v->hp.out_dim * (1 + v->hp.n_deepstack); }

/* Each patch's pixels in the kernel's order: channel, then row, then column. */
static void patches_of(const pith_vision_hparams *hp, const float *img, float *rows) {
    int s = hp->image_size, p = hp->patch_size, side = hp->patches_per_side;
    for (int py = 0; py < side; py++)
        for (int px = 0; px < side; px++) {
            float *r = rows + (size_t)(py * side + px) * 3 * p * p;
            for (int c = 0; c < 3; c++)
                for (int y = 0; y < p; y++)
                    memcpy(r + (c * p + y) * p, img + ((size_t)c * s + py * p + y) * s + px * p, (size_t)p * sizeof *r);
        }
}

int vision_matmul1(pith_backend *be, const pith_buf *in, pith_weight *w, pith_buf *out, bool acc, int n, pith_err *err) {
    pith_be_mm mm = {.w = w, .out = out, .accumulate = acc};
    return pith_be_matmul(be, in, &mm, 1, n, err);
}

int vision_block_forward(pith_vision *v, const vision_block *b, int span, int n, pith_err *err) {
    pith_backend *be = v->be;
    const pith_vision_hparams *hp = &v->hp;
    pith_be_layernorm(be, v->x, b->ln1_w, b->ln1_b, hp->eps, v->xb, n);
    pith_be_mm qkv[3] = {{.w = b->q, .out = v->q}, {.w = b->k, .out = v->k}, {.w = b->v, .out = v->v}};
    if (pith_be_matmul(be, v->xb, qkv, 3, n, err)) return -1;
    pith_be_add_bias(be, v->q, b->q_b, n);
    pith_be_add_bias(be, v->k, b->k_b, n);
    pith_be_add_bias(be, v->v, b->v_b, n);
    if (v->cs) { /* Qwen-VL's 2-D RoPE: the step's tables, a row per patch */
        pith_be_rope_rows(be, v->q, v->cs, n);
        pith_be_rope_rows(be, v->k, v->cs, n);
    }
    pith_be_span_attn a = {v->q, v->k, v->v, v->att, hp->n_heads, hp->dim / hp->n_heads, span};
    pith_be_span_attention(be, &a, n);
    if (vision_matmul1(be, v->att, b->o, v->x, true, n, err)) return -1;
    pith_be_add_bias(be, v->x, b->o_b, n);
    pith_be_layernorm(be, v->x, b->ln2_w, b->ln2_b, hp->eps, v->xb, n);
    if (vision_matmul1(be, v->xb, b->up, v->hb, false, n, err)) return -1;
    pith_be_add_bias(be, v->hb, b->up_b, n);
    pith_be_activation(be, PITH_ACTIVATION_GELU_TANH, v->hb, n);
    if (vision_matmul1(be, v->hb, b->down, v->x, true, n, err)) return -1;
    pith_be_add_bias(be, v->x, b->down_b, n);
    return 0;
}

int pith_vision_encode_image(pith_vision *v, const float *pixels, int height, int width, float *out, pith_err *err) {
    if (v->hp.projector == PITH_VISION_QWEN3VL) return qwen3vl_encode(v, pixels, height, width, out, err);
    if (height != v->hp.image_size || width != v->hp.image_size)
        return pith_errf(err, "a %dx%d image: this encoder takes %dx%d", width, height, v->hp.image_size,
                         v->hp.image_size);
    return pith_vision_encode(v, pixels, 1, out, err);
}

int pith_vision_encode(pith_vision *v, const float *pixels, int n_images, float *out, pith_err *err) {
    const pith_vision_hparams *hp = &v->hp;
    if (hp->projector != PITH_VISION_GEMMA3)
        return pith_errf(err, "this encoder takes images of any size: encode them one at a time");
    pith_backend *be = v->be;
    int n_patch = hp->patches_per_side * hp->patches_per_side, width = 3 * hp->patch_size * hp->patch_size;
    if (n_images < 1 || n_images > (1 << 20) / n_patch) return pith_errf(err, "%d images in one encoder step", n_images);
    int n = n_images * n_patch, n_out = n_images * hp->tokens_per_image;
    if (n > v->rows_cap) {
        float *grown = realloc(v->rows, (size_t)n * width * sizeof *grown);
        if (!grown) return pith_errf(err, "out of memory for %d images' patches", n_images);
        v->rows = grown;
        v->rows_cap = n;
    }
    size_t img_floats = pith_vision_input_floats(v);
    for (int i = 0; i < n_images; i++) patches_of(hp, pixels + i * img_floats, v->rows + (size_t)i * n_patch * width);
    if (pith_be_reserve(be, n, err) || pith_be_set_rows(be, v->in, v->rows, n, err) ||
        vision_matmul1(be, v->in, v->patch_w, v->x, false, n, err))
        return -1;
    pith_be_add_bias(be, v->x, v->patch_b, n);
    pith_be_add_rows(be, v->x, v->pos, n);
    for (int l = 0; l < hp->n_layers; l++)
        if (vision_block_forward(v, &v->blk[l], n_patch, n, err)) return pith_err_prefix(err, "vision block %d", l);
    pith_be_layernorm(be, v->x, v->post_w, v->post_b, hp->eps, v->xb, n);
    pith_be_pool_avg(be, v->xb, v->pooled, hp->patches_per_side, hp->pool, n);
    pith_be_rmsnorm(be, v->pooled, v->soft_norm, hp->eps, v->normed, n_out);
    if (vision_matmul1(be, v->normed, v->proj, v->y, false, n_out, err)) return -1;
    return be->vt->buf_read(be, v->y, n_out, out, err);
}

int pith_vision_preprocess(const pith_vision *v, const pith_image *img, float *pixels, pith_err *err) {
    const pith_vision_hparams *hp = &v->hp;
    if (hp->projector != PITH_VISION_GEMMA3) return pith_errf(err, "this encoder's images have no fixed size");
    pith_image sized = {0};
    if (pith_image_resize(img, hp->image_size, hp->image_size, hp->resample, &sized, err)) return -1;
    pith_image_to_tensor(&sized, hp->mean, hp->std, 1.0f / 255.0f, pixels);
    pith_image_free(&sized);
    return 0;
}

size_t pith_vision_input_floats(const pith_vision *v) { return (size_t)3 * v->hp.image_size * v->hp.image_size; }

void pith_vision_input_free(pith_vision_input *in) {
    free(in->pixels);
    *in = (pith_vision_input){0};
}

int pith_vision_set_max_tokens(pith_vision *v, int max_tokens, pith_err *err) {
    pith_vision_hparams *hp = &v->hp;
    if (max_tokens < 0) return pith_errf(err, "an image token cap of %d: expected 0 (none) or more", max_tokens);
    if (max_tokens == 0 || hp->projector != PITH_VISION_QWEN3VL) return 0;
    const long unit = (long)hp->patch_size * hp->merge, cap = (long)max_tokens * unit * unit;
    if (cap < hp->min_pixels)
        return pith_errf(err, "%s: an image token cap of %d is below the processor's minimum of %ld tokens (%ld pixels)",
                         v->path, max_tokens, (hp->min_pixels + unit * unit - 1) / (unit * unit), hp->min_pixels);
    if (cap < hp->max_pixels) hp->max_pixels = cap;
    return 0;
}

int pith_vision_prepare(const pith_vision *v, const pith_image *img, pith_vision_input *out, pith_err *err) {
    const pith_vision_hparams *hp = &v->hp;
    *out = (pith_vision_input){0};
    int h = hp->image_size, w = hp->image_size, unit = hp->patch_size * hp->merge;
    if (hp->projector == PITH_VISION_QWEN3VL &&
        pith_image_smart_size(img->height, img->width, unit, hp->min_pixels, hp->max_pixels, &h, &w, err))
        return -1;
    out->height = h, out->width = w, out->n = (size_t)3 * h * w;
    if (hp->projector == PITH_VISION_QWEN3VL) out->rows = h / unit, out->cols = w / unit;
    else out->rows = out->cols = hp->patches_per_side / hp->pool;
    pith_image sized = {0};
    if (!(out->pixels = malloc(out->n * sizeof *out->pixels)) ||
        pith_image_resize(img, w, h, hp->resample, &sized, err)) { /* the resize fails only for memory */
        pith_vision_input_free(out);
        if (!err->msg[0]) pith_errf(err, "out of memory for a %dx%d image", w, h);
        return -2;
    }
    pith_image_to_tensor(&sized, hp->mean, hp->std, 1.0f / 255.0f, out->pixels);
    pith_image_free(&sized);
    return 0;
}

int pith_vision_prepare_bytes(const pith_vision *v, const uint8_t *bytes, size_t n, const pith_image_limits *lim,
                              pith_vision_input *out, pith_err *err) {
    *out = (pith_vision_input){0};
    pith_image img = {0};
    if (pith_image_decode(bytes, n, lim, &img, err)) return -1;
    int rc = pith_vision_prepare(v, &img, out, err);
    pith_image_free(&img);
    return rc;
}

/* Images per encoder step: the activations grow with the patches (4096 per 896-pixel image), so a step
 * with many images is cut into a few. */
#define VISION_STEP_IMAGES 4

/* Qwen3.5: each image alone, its sides from its grid. */
static int encode_sized(pith_vision *v, const pith_media *const *items, int n, float *const *out, pith_err *err) {
    const pith_vision_hparams *hp = &v->hp;
    int unit = hp->patch_size * hp->merge;
    for (int i = 0; i < n; i++) {
        const pith_media *it = items[i];
        int64_t h = (int64_t)it->rows * unit, w = (int64_t)it->cols * unit;
        if (it->rows < 1 || it->cols < 1 || h > 65536 || w > 65536 || it->n_tokens != it->rows * it->cols ||
            it->n_input != (size_t)(3 * h * w))
            return pith_errf(err, "image %d: %zu input floats and %d tokens on a %d x %d grid do not make an image "
                             "this encoder takes", i, it->n_input, it->n_tokens, it->rows, it->cols);
        if (pith_vision_encode_image(v, it->input, (int)h, (int)w, out[i], err)) return -1;
    }
    return 0;
}

static int encode_items(void *user, const pith_media *const *items, int n, float *const *out, pith_err *err) {
    pith_vision *v = user;
    const pith_vision_hparams *hp = &v->hp;
    if (hp->projector != PITH_VISION_GEMMA3) return encode_sized(v, items, n, out, err);
    const size_t img = pith_vision_input_floats(v), rows = (size_t)hp->tokens_per_image * hp->out_dim;
    for (int i = 0; i < n; i++)
        if (items[i]->n_input != img || items[i]->n_tokens != hp->tokens_per_image)
            return pith_errf(err, "image %d: %zu input floats and %d tokens; this encoder takes %zu and makes %d", i,
                             items[i]->n_input, items[i]->n_tokens, img, hp->tokens_per_image);
    float *px = malloc(VISION_STEP_IMAGES * img * sizeof *px), *y = malloc(VISION_STEP_IMAGES * rows * sizeof *y);
    int rc = px && y ? 0 : pith_errf(err, "out of memory for %d images", n);
    for (int i = 0; i < n && !rc; i += VISION_STEP_IMAGES) {
        int k = n - i < VISION_STEP_IMAGES ? n - i : VISION_STEP_IMAGES;
        for (int j = 0; j < k; j++) memcpy(px + j * img, items[i + j]->input, img * sizeof *px);
        rc = pith_vision_encode(v, px, k, y, err);
        for (int j = 0; j < k && !rc; j++) memcpy(out[i + j], y + j * rows, rows * sizeof *y);
    }
    free(px);
    free(y);
    return rc;
}

void pith_vision_encoder(pith_vision *v, pith_encoder *out) {
    *out = (pith_encoder){.out_dim = pith_vision_row_floats(v), .encode = encode_items, .user = v};
}
