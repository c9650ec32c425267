/* What the vision encoder's loaders share (model/vision.h): where its tensors and hyper-parameters come
 * from. A projector GGUF (llama.cpp's clip names, read directly) or a Hugging Face directory of a
 * multimodal class (vision_hf.c: the same tensors under transformers' names, the sizes from config.json
 * and preprocessor_config.json). The encoder asks for every tensor by its clip name. */
#ifndef PITH_MODEL_VISION_INTERNAL_H
#define PITH_MODEL_VISION_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "model/vision.h"
#include "pith/modelfile.h"

typedef struct vision_block {
    const pith_weight *ln1_w, *ln1_b, *ln2_w, *ln2_b;
    pith_weight *q, *k, *v, *o, *up, *down;
    const pith_weight *q_b, *k_b, *v_b, *o_b, *up_b, *down_b;
    pith_tensor qkv_view[3]; /* a fused QKV's thirds (hp.fused_qkv) */
} vision_block;

typedef struct vision_qwen vision_qwen;

struct pith_vision {
    pith_vision_hparams hp;
    pith_gguf *g;            /* the projector GGUF, or */
    pith_model_file *mf;     /* the Hugging Face checkpoint */
    const char *path;        /* named in errors */
    pith_backend *be;
    pith_backend *own_be;        /* pith_vision_load's: freed with the encoder */
    /* Gemma 3: SigLIP's embeddings and the projector */
    pith_tensor patch_t, proj_t; /* 2-D views of the patch kernel and of the transposed projection */
    float *proj_data;
    pith_weight *patch_w, *proj;
    const pith_weight *patch_b, *pos, *post_w, *post_b, *soft_norm;
    /* every tower */
    vision_block *blk;
    pith_buf *in, *x, *xb, *q, *k, *v, *att, *hb, *pooled, *normed, *y;
    pith_buf *cs;            /* per-row RoPE tables (Qwen3-VL), NULL: no RoPE in the blocks */
    float *rows;             /* host: the step's patches, [n][3 * patch * patch] */
    int rows_cap;
    vision_qwen *qwen;       /* vision_qwen3vl.c's own */
};

/* vision.c, for the towers */
int vision_get_int(const pith_gguf *g, const char *key, bool required, int dflt, int *out, pith_err *err);
int vision_get_floats3(const pith_gguf *g, const char *key, float dflt, float out[3], pith_err *err);
const pith_tensor *vision_find(const pith_vision *v, const char *name);
/* A float tensor of exactly ne0 x ne1 elements, plus add, as a vector weight. */
int vision_floats(pith_vision *v, const char *name, int64_t ne0, int64_t ne1, float add, const pith_weight **out,
                  pith_err *err);
/* A [rows][cols] matrix (ne = {cols, rows}) bound in the backend. */
int vision_mat(pith_vision *v, const char *name, int rows, int cols, pith_weight **out, pith_err *err);
/* Block l's weights (v.blk.l.*; a fused attn_qkv where hp.fused_qkv). */
int vision_bind_block(pith_vision *v, int l, vision_block *b, pith_err *err);
/* One pre-LayerNorm block over n rows of v->x, attention within spans of `span` rows (RoPE by v->cs
 * when set). */
int vision_block_forward(pith_vision *v, const vision_block *b, int span, int n, pith_err *err);
int vision_matmul1(pith_backend *be, const pith_buf *in, pith_weight *w, pith_buf *out, bool acc, int n, pith_err *err);

/* Qwen3-VL's tower (vision_qwen3vl.c) */
int qwen3vl_gguf_hparams(const pith_gguf *g, pith_vision_hparams *hp, pith_err *err);
/* Binds what is Qwen3-VL's own (the embeddings, the merger) and its buffers; the blocks are bound by
 * pith_vision_open. */
int qwen3vl_open(pith_vision *v, pith_err *err);
void qwen3vl_free(pith_vision *v);
/* One image, [3][height][width] prepared pixels, into its (height / (patch * merge)) x (width / ...)
 * tokens' rows (pith_vision_row_floats: the merger's output, then each DeepStack merger's), row-major. */
int qwen3vl_encode(pith_vision *v, const float *pixels, int height, int width, float *out, pith_err *err);

/* Whether path names a Hugging Face checkpoint (a directory, its config.json, a .safetensors file or
 * index) rather than a GGUF file. */
bool vision_hf_path(const char *path);

/* The hyper-parameters of a Hugging Face multimodal checkpoint's vision tower (f: the opened directory):
 * everything but out_dim and weight_type, which come from the tensors. Refuses classes without a
 * supported vision tower, and processor settings the encoder does not follow, with a message naming
 * them. */
int vision_hf_hparams(const pith_model_file *f, pith_vision_hparams *hp, pith_err *err);

/* The tensor a clip name (v.blk.N.attn_q.weight, mm.input_projection.weight, ...) stands for in a
 * Hugging Face checkpoint, under either of transformers' layouts ("vision_tower.vision_model.*" or
 * "model.vision_tower.vision_model.*"); NULL when absent. A DeepStack merger's v.deepstack.L.* (L the
 * tower's layer) is the hp->deepstack_layer list's entry for L. */
const pith_tensor *vision_hf_tensor(const pith_model_file *f, const pith_vision_hparams *hp, const char *clip_name);

/* The released checkpoints' name for a clip name (for messages); false when there is none. */
bool vision_hf_name(const pith_vision_hparams *hp, const char *clip_name, char *out, size_t cap);

#endif
