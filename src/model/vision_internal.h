/* What the vision encoder's loaders share (model/vision.h): where its tensors and hyper-parameters come
 * from. A projector GGUF (llama.cpp's clip names, read directly) or a Hugging Face directory of a
 * multimodal class (vision_hf.c: the same tensors under transformers' names, the sizes from config.json
 * and preprocessor_config.json). The encoder asks for every tensor by its clip name. */
#ifndef PITH_MODEL_VISION_INTERNAL_H
#define PITH_MODEL_VISION_INTERNAL_H

#include <stdbool.h>

#include "model/vision.h"
#include "pith/modelfile.h"

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
 * "model.vision_tower.vision_model.*"); NULL when absent. */
const pith_tensor *vision_hf_tensor(const pith_model_file *f, const char *clip_name);

/* The released checkpoints' name for a clip name (for messages); false when there is none. */
bool vision_hf_name(const char *clip_name, char *out, size_t cap);

#endif
