/* Vision towers from Hugging Face directories: transformers' names mapped to llama.cpp's clip names (what
 * vision.c asks for), and the sizes from config.json ("vision_config") and preprocessor_config.json. Two
 * families: Gemma3ForConditionalGeneration (SiglipVisionModel and Gemma3MultiModalProjector, with
 * Gemma3ImageProcessor), and Qwen3VLForConditionalGeneration, Qwen3VLMoeForConditionalGeneration,
 * Qwen3_5ForConditionalGeneration and Qwen3_5MoeForConditionalGeneration (Qwen3VLVisionModel, Qwen3.5's
 * without DeepStack, with Qwen2VLImageProcessor). transformers saves only what differs from a config
 * class's defaults, so absent keys take the classes' defaults. */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "format/arch.h"
#include "format/json_file.h"
#include "model/vision_internal.h"

#define CONFIG_MAX_BYTES (4u << 20)

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

bool vision_hf_path(const char *path) {
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) return true;
    return ends_with(path, "config.json") || ends_with(path, ".safetensors") || ends_with(path, ".index.json");
}

/* dir/name parsed into *out (an object); with optional, an absent file gives 0 and *out NULL. */
static int read_json(const char *dir, const char *name, bool optional, cJSON **out, pith_err *err) {
    char path[4096];
    *out = NULL;
    if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path) return pith_errf(err, "%s: path too long", dir);
    if (pith_json_read(path, CONFIG_MAX_BYTES, 1u << 16, optional, out, err)) return -1;
    if (*out && !cJSON_IsObject(*out)) {
        cJSON_Delete(*out);
        *out = NULL;
        return pith_errf(err, "%s: not a JSON object", path);
    }
    return 0;
}

static bool names_class(const cJSON *config, const char *cls) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(config, "architectures");
    const cJSON *it;
    cJSON_ArrayForEach(it, a) if (cJSON_IsString(it) && !strcmp(it->valuestring, cls)) return true;
    return false;
}

/* Qwen3.5's (no DeepStack) and Qwen3-VL's, dense and MoE (DeepStack unless the config says none) */
static const char *const qwen_classes[] = {"Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration",
                                           "Qwen3VLForConditionalGeneration", "Qwen3VLMoeForConditionalGeneration"};

/* The tower a config's class has (pith_vision_projector), or -1. */
static int tower_of(const cJSON *config) {
    if (names_class(config, "Gemma3ForConditionalGeneration")) return PITH_VISION_GEMMA3;
    for (size_t i = 0; i < sizeof qwen_classes / sizeof *qwen_classes; i++)
        if (names_class(config, qwen_classes[i])) return PITH_VISION_QWEN3VL;
    return -1;
}

bool pith_vision_in_model(const char *model_path) {
    if (!model_path || !vision_hf_path(model_path)) return false;
    char dir[4096];
    struct stat st;
    snprintf(dir, sizeof dir, "%s", model_path);
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        char *slash = strrchr(dir, '/');
        if (slash) *slash = '\0';
        else snprintf(dir, sizeof dir, ".");
    }
    pith_err err = {{0}};
    cJSON *config;
    bool yes = !read_json(dir, "config.json", false, &config, &err) &&
               cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(config, "vision_config")) && tower_of(config) >= 0;
    cJSON_Delete(config);
    return yes;
}

static int floats3(const pith_meta *m, const char *key, float out[3]) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(m->json, key);
    if (!a || cJSON_IsNull(a)) return 0;
    if (cJSON_IsNumber(a)) { /* transformers accepts one number for every channel */
        for (int c = 0; c < 3; c++) out[c] = (float)a->valuedouble;
        return 0;
    }
    if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != 3)
        return pith_errf(m->err, "%s: \"%s\" is not a list of 3 numbers", m->path, key);
    for (int c = 0; c < 3; c++) {
        const cJSON *x = cJSON_GetArrayItem(a, c);
        if (!cJSON_IsNumber(x)) return pith_errf(m->err, "%s: \"%s\" is not a list of 3 numbers", m->path, key);
        out[c] = (float)x->valuedouble;
    }
    return 0;
}

static bool is_filter(int f) {
    return f == PITH_RESIZE_BILINEAR || f == PITH_RESIZE_BICUBIC || f == PITH_RESIZE_LANCZOS || f == PITH_RESIZE_NEAREST;
}

/* What both image processors read alike: mean, std and the resize filter (hp holds the class's defaults),
 * and the rescale and normalize flags, of which only the defaults are followed. */
static int processor_common(const pith_meta *m, pith_vision_hparams *hp, pith_err *err) {
    int resample = hp->resample;
    bool normalize = true, rescale = true;
    float factor = 1.0f / 255.0f;
    if (floats3(m, "image_mean", hp->mean) || floats3(m, "image_std", hp->std) ||
        pith_meta_int(m, "resample", false, &resample) || pith_meta_bool(m, "do_normalize", &normalize) ||
        pith_meta_bool(m, "do_rescale", &rescale) || pith_meta_float(m, "rescale_factor", false, &factor))
        return -1;
    if (!is_filter(resample)) return pith_errf(err, "%s: resample %d is not a filter Pith has (0-3)", m->path, resample);
    if (!normalize || !rescale || factor < 0.0039215f || factor > 0.0039216f)
        return pith_errf(err, "%s: only the default preprocessing is followed (rescale by 1/255 and normalize)", m->path);
    hp->resample = resample;
    return 0;
}

/* Gemma3ImageProcessor: a square of the tower's size, no pan and scan. */
static int gemma_processor(const pith_meta *m, pith_vision_hparams *hp, pith_err *err) {
    int h = hp->image_size, w = hp->image_size;
    bool pan_and_scan = false;
    if (pith_meta_bool(m, "do_pan_and_scan", &pan_and_scan)) return -1;
    const cJSON *size = cJSON_GetObjectItemCaseSensitive(m->json, "size");
    if (cJSON_IsObject(size)) {
        pith_meta sm = {.path = m->path, .json = size, .err = err};
        if (pith_meta_int(&sm, "height", false, &h) || pith_meta_int(&sm, "width", false, &w)) return -1;
    }
    if (h != hp->image_size || w != hp->image_size)
        return pith_errf(err, "%s: size %dx%d differs from the vision tower's image size %d", m->path, w, h,
                         hp->image_size);
    if (pan_and_scan) return pith_errf(err, "%s: only the default preprocessing is followed (no pan and scan)", m->path);
    return 0;
}

/* Qwen2VLImageProcessor: the tower's patch sizes, and the pixel budget, "size" {"shortest_edge",
 * "longest_edge"} (newer) or "min_pixels" / "max_pixels" (older). */
static int qwen_processor(const pith_meta *m, pith_vision_hparams *hp, pith_err *err) {
    int patch = hp->patch_size, merge = hp->merge, temporal = hp->temporal;
    float min_px = (float)hp->min_pixels, max_px = (float)hp->max_pixels;
    if (pith_meta_int(m, "patch_size", false, &patch) || pith_meta_int(m, "merge_size", false, &merge) ||
        pith_meta_int(m, "temporal_patch_size", false, &temporal) || pith_meta_float(m, "min_pixels", false, &min_px) ||
        pith_meta_float(m, "max_pixels", false, &max_px))
        return -1;
    const cJSON *size = cJSON_GetObjectItemCaseSensitive(m->json, "size");
    if (cJSON_IsObject(size)) {
        pith_meta sm = {.path = m->path, .json = size, .err = err};
        if (pith_meta_float(&sm, "shortest_edge", false, &min_px) || pith_meta_float(&sm, "longest_edge", false, &max_px))
            return -1;
    }
    if (patch != hp->patch_size || merge != hp->merge || temporal != hp->temporal)
        return pith_errf(err, "%s: patches of %d, merged %d x %d, %d frames differ from the vision tower's (%d, %d, %d)",
                         m->path, patch, merge, merge, temporal, hp->patch_size, hp->merge, hp->temporal);
    if (!(min_px >= 1 && max_px >= min_px && max_px <= 1e9f))
        return pith_errf(err, "%s: the pixel budget %g to %g is not a range of positive sizes", m->path, min_px, max_px);
    hp->min_pixels = (long)min_px;
    hp->max_pixels = (long)max_px;
    return 0;
}

/* preprocessor_config.json, optional: without it the processor class's defaults (in hp) stand. */
static int processor(const char *dir, pith_vision_hparams *hp, pith_err *err) {
    cJSON *j;
    if (read_json(dir, "preprocessor_config.json", true, &j, err)) return -1;
    if (!j) return 0;
    char path[4096];
    snprintf(path, sizeof path, "%s/preprocessor_config.json", dir);
    pith_meta m = {.path = path, .json = j, .err = err};
    int rc = processor_common(&m, hp, err);
    if (!rc) rc = hp->projector == PITH_VISION_QWEN3VL ? qwen_processor(&m, hp, err) : gemma_processor(&m, hp, err);
    cJSON_Delete(j);
    return rc;
}

/* SiglipVisionConfig's defaults (with Gemma3ImageProcessor's), then the file's; Gemma3Config's
 * mm_tokens_per_image. */
static int gemma_hparams(const pith_meta *top, const pith_meta *v, pith_vision_hparams *hp, pith_err *err) {
    *hp = (pith_vision_hparams){.projector = PITH_VISION_GEMMA3, .image_size = 224, .patch_size = 16, .dim = 768,
                                .ffn = 3072, .n_layers = 12, .n_heads = 12, .eps = 1e-6f,
                                .mean = {0.5f, 0.5f, 0.5f}, .std = {0.5f, 0.5f, 0.5f}, .resample = PITH_RESIZE_BILINEAR};
    int tokens = 256, channels = 3;
    char act[32] = "gelu_pytorch_tanh", type[64] = "siglip_vision_model";
    if (pith_meta_int(v, "image_size", false, &hp->image_size) || pith_meta_int(v, "patch_size", false, &hp->patch_size) ||
        pith_meta_int(v, "hidden_size", false, &hp->dim) || pith_meta_int(v, "intermediate_size", false, &hp->ffn) ||
        pith_meta_int(v, "num_hidden_layers", false, &hp->n_layers) ||
        pith_meta_int(v, "num_attention_heads", false, &hp->n_heads) ||
        pith_meta_int(v, "num_channels", false, &channels) || pith_meta_float(v, "layer_norm_eps", false, &hp->eps) ||
        pith_meta_str(v, "hidden_act", act, sizeof act) || pith_meta_str(v, "model_type", type, sizeof type) ||
        pith_meta_int(top, "mm_tokens_per_image", false, &tokens))
        return -1;
    if (strcmp(act, "gelu_pytorch_tanh") || strcmp(type, "siglip_vision_model") || channels != 3)
        return pith_errf(err, "%s: vision tower '%s' (%s, %d channels) is not supported (siglip_vision_model, "
                         "gelu_pytorch_tanh, 3 channels)", v->path, type, act, channels);
    if (hp->patch_size < 1 || hp->image_size % hp->patch_size || hp->image_size / hp->patch_size > 4096)
        return pith_errf(err, "%s: image size %d is not a multiple of the patch size %d", v->path, hp->image_size,
                         hp->patch_size);
    /* Gemma3MultiModalProjector pools the patch grid down to sqrt(mm_tokens_per_image) a side */
    int side = hp->image_size / hp->patch_size, out = 1;
    while (out * out < tokens) out++;
    if (out * out != tokens || side % out)
        return pith_errf(err, "%s: mm_tokens_per_image %d is not a square that divides the %dx%d patch grid", v->path,
                         tokens, side, side);
    hp->pool = side / out;
    return 0;
}

/* Qwen3VLVisionConfig's defaults (Qwen3_5VisionConfig's: no DeepStack), then the file's */
static int qwen_hparams(const pith_meta *v, bool deepstack_default, pith_vision_hparams *hp, pith_err *err) {
    /* and Qwen2VLImageProcessor's: OpenAI CLIP's mean and std, bicubic, 56 x 56 to 28 x 28 x 1280 pixels */
    *hp = (pith_vision_hparams){.projector = PITH_VISION_QWEN3VL, .patch_size = 16, .dim = 1152, .ffn = 4304,
                                .n_layers = 27, .n_heads = 16, .eps = 1e-6f, .merge = 2, .temporal = 2, .pool = 1,
                                .rope_theta = 10000.0f, .fused_qkv = true,
                                .mean = {0.48145466f, 0.4578275f, 0.40821073f},
                                .std = {0.26862954f, 0.26130258f, 0.27577711f}, .resample = PITH_RESIZE_BICUBIC,
                                .min_pixels = 56 * 56, .max_pixels = 28 * 28 * 1280};
    int channels = 3, n_pos = 2304;
    char act[32] = "gelu_pytorch_tanh";
    if (pith_meta_int(v, "depth", false, &hp->n_layers) || pith_meta_int(v, "hidden_size", false, &hp->dim) ||
        pith_meta_int(v, "intermediate_size", false, &hp->ffn) || pith_meta_int(v, "num_heads", false, &hp->n_heads) ||
        pith_meta_int(v, "in_channels", false, &channels) || pith_meta_int(v, "patch_size", false, &hp->patch_size) ||
        pith_meta_int(v, "spatial_merge_size", false, &hp->merge) ||
        pith_meta_int(v, "temporal_patch_size", false, &hp->temporal) ||
        pith_meta_int(v, "num_position_embeddings", false, &n_pos) || pith_meta_str(v, "hidden_act", act, sizeof act))
        return -1;
    const cJSON *deep = cJSON_GetObjectItemCaseSensitive(v->json, "deepstack_visual_indexes");
    if (deep && !cJSON_IsNull(deep)) {
        if (!cJSON_IsArray(deep) || cJSON_GetArraySize(deep) > PITH_VISION_MAX_DEEPSTACK)
            return pith_errf(err, "%s: deepstack_visual_indexes is not a list of at most %d layers", v->path,
                             PITH_VISION_MAX_DEEPSTACK);
        const cJSON *it;
        cJSON_ArrayForEach(it, deep) {
            if (!cJSON_IsNumber(it) || it->valuedouble < 0 || it->valuedouble >= hp->n_layers ||
                (hp->n_deepstack && it->valuedouble <= hp->deepstack_layer[hp->n_deepstack - 1]))
                return pith_errf(err, "%s: deepstack_visual_indexes holds something other than increasing layers "
                                 "of the %d", v->path, hp->n_layers);
            hp->deepstack_layer[hp->n_deepstack++] = (int)it->valuedouble;
        }
    } else if (deepstack_default) { /* Qwen3VLVisionConfig's */
        static const int dflt[3] = {8, 16, 24};
        for (int i = 0; i < 3 && dflt[i] < hp->n_layers; i++) hp->deepstack_layer[hp->n_deepstack++] = dflt[i];
    }
    if (strcmp(act, "gelu_pytorch_tanh") || channels != 3)
        return pith_errf(err, "%s: vision tower (%s, %d channels) is not supported (gelu_pytorch_tanh, 3 channels)",
                         v->path, act, channels);
    int side = 1;
    while (side * side < n_pos) side++;
    if (side * side != n_pos) return pith_errf(err, "%s: num_position_embeddings %d is not a square", v->path, n_pos);
    hp->pos_side = side;
    return 0;
}

int vision_hf_hparams(const pith_model_file *f, pith_vision_hparams *hp, pith_err *err) {
    const char *dir = pith_model_file_dir(f);
    if (!dir) return pith_errf(err, "%s: not a Hugging Face directory", pith_model_file_path(f));
    cJSON *config;
    if (read_json(dir, "config.json", false, &config, err)) return -1;
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    const cJSON *vc = cJSON_GetObjectItemCaseSensitive(config, "vision_config");
    int tower = tower_of(config), rc = 0;
    if (tower < 0 || !cJSON_IsObject(vc))
        rc = pith_errf(err, "%s: no vision tower Pith can run (supported: Gemma3ForConditionalGeneration, "
                       "Qwen3VLForConditionalGeneration, Qwen3VLMoeForConditionalGeneration, "
                       "Qwen3_5ForConditionalGeneration and Qwen3_5MoeForConditionalGeneration with a \"vision_config\")", path);
    pith_meta top = {.path = path, .json = config, .err = err}, v = {.path = path, .json = vc, .err = err};
    if (!rc)
        rc = tower == PITH_VISION_GEMMA3 ? gemma_hparams(&top, &v, hp, err)
                                          : qwen_hparams(&v, names_class(config, "Qwen3VLForConditionalGeneration") ||
                                                                     names_class(config, "Qwen3VLMoeForConditionalGeneration"),
                                                         hp, err);
    cJSON_Delete(config);
    if (rc) return -1;
    return processor(dir, hp, err);
}

/* clip name -> transformers' name (after the tower's or the projector's prefix) */
typedef struct name_pair {
    const char *clip, *hf;
    bool projector;
} name_pair;

static const name_pair gemma_global[] = {
    {"v.patch_embd.weight", "embeddings.patch_embedding.weight", false},
    {"v.patch_embd.bias", "embeddings.patch_embedding.bias", false},
    {"v.position_embd.weight", "embeddings.position_embedding.weight", false},
    {"v.post_ln.weight", "post_layernorm.weight", false},
    {"v.post_ln.bias", "post_layernorm.bias", false},
    {"mm.input_projection.weight", "mm_input_projection_weight", true},
    {"mm.soft_emb_norm.weight", "mm_soft_emb_norm.weight", true},
    {NULL, NULL, false},
};
static const name_pair gemma_layer[] = {
    {"ln1", "layer_norm1", false},          {"ln2", "layer_norm2", false},
    {"attn_q", "self_attn.q_proj", false},  {"attn_k", "self_attn.k_proj", false},
    {"attn_v", "self_attn.v_proj", false},  {"attn_out", "self_attn.out_proj", false},
    {"ffn_up", "mlp.fc1", false},           {"ffn_down", "mlp.fc2", false},
    {NULL, NULL, false},
};
/* Qwen3-VL: llama.cpp keeps the merger's LayerNorm as the tower's post_ln and its MLP as mm.0 / mm.2 */
static const name_pair qwen_global[] = {
    {"v.patch_embd.weight", "patch_embed.proj.weight", false},
    {"v.patch_embd.bias", "patch_embed.proj.bias", false},
    {"v.position_embd.weight", "pos_embed.weight", false},
    {"v.post_ln.weight", "merger.norm.weight", false},
    {"v.post_ln.bias", "merger.norm.bias", false},
    {"mm.0.weight", "merger.linear_fc1.weight", false},
    {"mm.0.bias", "merger.linear_fc1.bias", false},
    {"mm.2.weight", "merger.linear_fc2.weight", false},
    {"mm.2.bias", "merger.linear_fc2.bias", false},
    {NULL, NULL, false},
};
static const name_pair qwen_layer[] = {
    {"ln1", "norm1", false},           {"ln2", "norm2", false},
    {"attn_qkv", "attn.qkv", false},   {"attn_out", "attn.proj", false},
    {"ffn_up", "mlp.linear_fc1", false}, {"ffn_down", "mlp.linear_fc2", false},
    {NULL, NULL, false},
};

/* The name after the tower's or the projector's prefix into part; false for a name with no counterpart. */
static bool hf_part(const pith_vision_hparams *hp, const char *clip_name, char *part, size_t cap, bool *proj) {
    bool qwen = hp->projector == PITH_VISION_QWEN3VL;
    int layer, at = 0;
    if (qwen && sscanf(clip_name, "v.deepstack.%d.%n", &layer, &at) == 1 && at > 0) { /* a DeepStack merger */
        static const struct { const char *clip, *hf; } ds[] = {{"norm.", "norm."}, {"fc1.", "linear_fc1."},
                                                               {"fc2.", "linear_fc2."}};
        int k = 0;
        while (k < hp->n_deepstack && hp->deepstack_layer[k] != layer) k++;
        for (size_t i = 0; k < hp->n_deepstack && i < sizeof ds / sizeof *ds; i++)
            if (!strncmp(clip_name + at, ds[i].clip, strlen(ds[i].clip))) {
                *proj = false;
                return snprintf(part, cap, "deepstack_merger_list.%d.%s%s", k, ds[i].hf,
                                clip_name + at + strlen(ds[i].clip)) < (int)cap;
            }
        return false;
    }
    for (const name_pair *g = qwen ? qwen_global : gemma_global; g->clip; g++)
        if (!strcmp(clip_name, g->clip)) {
            *proj = g->projector;
            return snprintf(part, cap, "%s", g->hf) < (int)cap;
        }
    int l, n = 0;
    if (sscanf(clip_name, "v.blk.%d.%n", &l, &n) != 1 || n == 0 || l < 0) return false;
    const char *rest = clip_name + n, *dot = strchr(rest, '.');
    if (!dot) return false;
    *proj = false;
    for (const name_pair *p = qwen ? qwen_layer : gemma_layer; p->clip; p++) {
        size_t k = strlen(p->clip);
        if ((size_t)(dot - rest) == k && !strncmp(rest, p->clip, k))
            return snprintf(part, cap, qwen ? "blocks.%d.%s%s" : "encoder.layers.%d.%s%s", l, p->hf, dot) < (int)cap;
    }
    return false;
}

/* Each tower's prefixes, the released checkpoints' first. */
static const char *const *prefixes(pith_vision_projector projector, bool proj) {
    static const char *const gemma_tower[] = {"vision_tower.vision_model.", "model.vision_tower.vision_model.", NULL};
    static const char *const gemma_proj[] = {"multi_modal_projector.", "model.multi_modal_projector.", NULL};
    static const char *const qwen[] = {"model.visual.", "visual.", NULL};
    if (projector == PITH_VISION_QWEN3VL) return qwen;
    return proj ? gemma_proj : gemma_tower;
}

const pith_tensor *vision_hf_tensor(const pith_model_file *f, const pith_vision_hparams *hp, const char *clip_name) {
    char part[200], name[256];
    bool proj;
    if (!hf_part(hp, clip_name, part, sizeof part, &proj)) return NULL;
    for (const char *const *p = prefixes(hp->projector, proj); *p; p++) {
        snprintf(name, sizeof name, "%s%s", *p, part);
        const pith_tensor *t = pith_model_file_tensor(f, name);
        if (t) return t;
    }
    return NULL;
}

bool vision_hf_name(const pith_vision_hparams *hp, const char *clip_name, char *out, size_t cap) {
    char part[200];
    bool proj;
    return hf_part(hp, clip_name, part, sizeof part, &proj) &&
           snprintf(out, cap, "%s%s", prefixes(hp->projector, proj)[0], part) < (int)cap;
}
