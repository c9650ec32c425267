/* Gemma 3's vision tower from a Hugging Face directory (Gemma3ForConditionalGeneration): the names of
 * transformers' SiglipVisionModel and Gemma3MultiModalProjector mapped to llama.cpp's clip names, and the
 * sizes from config.json ("vision_config", "mm_tokens_per_image") and preprocessor_config.json
 * (Gemma3ImageProcessor). transformers saves only what differs from a config class's defaults, so absent
 * keys take SiglipVisionConfig's and Gemma3Config's defaults. */
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
    bool yes = !read_json(dir, "config.json", false, &config, &err) && cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(config, "vision_config")) &&
               names_class(config, "Gemma3ForConditionalGeneration");
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

/* preprocessor_config.json (optional: Gemma3ImageProcessor's defaults without it). */
static int processor(const char *dir, pith_vision_hparams *hp, pith_err *err) {
    cJSON *j;
    if (read_json(dir, "preprocessor_config.json", true, &j, err)) return -1;
    if (!j) return 0;
    char path[4096];
    snprintf(path, sizeof path, "%s/preprocessor_config.json", dir);
    pith_meta m = {.path = path, .json = j, .err = err};
    int resample = PITH_RESIZE_BILINEAR, h = hp->image_size, w = hp->image_size;
    bool pan_and_scan = false, normalize = true, rescale = true;
    float factor = 1.0f / 255.0f;
    int rc = floats3(&m, "image_mean", hp->mean) || floats3(&m, "image_std", hp->std) ||
             pith_meta_int(&m, "resample", false, &resample) || pith_meta_bool(&m, "do_pan_and_scan", &pan_and_scan) ||
             pith_meta_bool(&m, "do_normalize", &normalize) || pith_meta_bool(&m, "do_rescale", &rescale) ||
             pith_meta_float(&m, "rescale_factor", false, &factor) ? -1 : 0;
    const cJSON *size = cJSON_GetObjectItemCaseSensitive(j, "size");
    if (!rc && cJSON_IsObject(size)) {
        pith_meta sm = {.path = path, .json = size, .err = err};
        rc = pith_meta_int(&sm, "height", false, &h) || pith_meta_int(&sm, "width", false, &w) ? -1 : 0;
    }
    if (!rc && (h != hp->image_size || w != hp->image_size))
        rc = pith_errf(err, "%s: size %dx%d differs from the vision tower's image size %d", path, w, h, hp->image_size);
    if (!rc && resample != PITH_RESIZE_BILINEAR && resample != PITH_RESIZE_BICUBIC && resample != PITH_RESIZE_LANCZOS &&
        resample != PITH_RESIZE_NEAREST)
        rc = pith_errf(err, "%s: resample %d is not a filter Pith has (0-3)", path, resample);
    if (!rc && (pan_and_scan || !normalize || !rescale || factor < 0.0039215f || factor > 0.0039216f))
        rc = pith_errf(err, "%s: only the default preprocessing is followed (no pan and scan; rescale by 1/255 and "
                       "normalize)", path);
    hp->resample = resample;
    cJSON_Delete(j);
    return rc;
}

int vision_hf_hparams(const pith_model_file *f, pith_vision_hparams *hp, pith_err *err) {
    const char *dir = pith_model_file_dir(f);
    if (!dir) return pith_errf(err, "%s: not a Hugging Face directory", pith_model_file_path(f));
    cJSON *config;
    if (read_json(dir, "config.json", false, &config, err)) return -1;
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    const cJSON *vc = cJSON_GetObjectItemCaseSensitive(config, "vision_config");
    int rc = 0;
    if (!names_class(config, "Gemma3ForConditionalGeneration") || !cJSON_IsObject(vc))
        rc = pith_errf(err, "%s: no vision tower Pith can run (supported: Gemma3ForConditionalGeneration with a "
                       "\"vision_config\")", path);
    /* SiglipVisionConfig's defaults, then the file's */
    *hp = (pith_vision_hparams){.projector = PITH_VISION_GEMMA3, .image_size = 224, .patch_size = 16, .dim = 768,
                                .ffn = 3072, .n_layers = 12, .n_heads = 12, .eps = 1e-6f,
                                .mean = {0.5f, 0.5f, 0.5f}, .std = {0.5f, 0.5f, 0.5f}, .resample = PITH_RESIZE_BILINEAR};
    pith_meta top = {.path = path, .json = config, .err = err}, v = {.path = path, .json = vc, .err = err};
    int tokens = 256, channels = 3;
    char act[32] = "gelu_pytorch_tanh", type[64] = "siglip_vision_model";
    if (!rc && (pith_meta_int(&v, "image_size", false, &hp->image_size) ||
                pith_meta_int(&v, "patch_size", false, &hp->patch_size) ||
                pith_meta_int(&v, "hidden_size", false, &hp->dim) ||
                pith_meta_int(&v, "intermediate_size", false, &hp->ffn) ||
                pith_meta_int(&v, "num_hidden_layers", false, &hp->n_layers) ||
                pith_meta_int(&v, "num_attention_heads", false, &hp->n_heads) ||
                pith_meta_int(&v, "num_channels", false, &channels) ||
                pith_meta_float(&v, "layer_norm_eps", false, &hp->eps) || pith_meta_str(&v, "hidden_act", act, sizeof act) ||
                pith_meta_str(&v, "model_type", type, sizeof type) ||
                pith_meta_int(&top, "mm_tokens_per_image", false, &tokens)))
        rc = -1;
    if (!rc && (strcmp(act, "gelu_pytorch_tanh") || strcmp(type, "siglip_vision_model") || channels != 3))
        rc = pith_errf(err, "%s: vision tower '%s' (%s, %d channels) is not supported (siglip_vision_model, "
                       "gelu_pytorch_tanh, 3 channels)", path, type, act, channels);
    if (!rc && (hp->image_size % hp->patch_size || hp->image_size / hp->patch_size > 4096))
        rc = pith_errf(err, "%s: image size %d is not a multiple of the patch size %d", path, hp->image_size,
                       hp->patch_size);
    if (!rc) { /* Gemma3MultiModalProjector pools the patch grid down to sqrt(mm_tokens_per_image) a side */
        int side = hp->image_size / hp->patch_size, out = 1;
        while (out * out < tokens) out++;
        if (out * out != tokens || side % out)
            rc = pith_errf(err, "%s: mm_tokens_per_image %d is not a square that divides the %dx%d patch grid",
                           path, tokens, side, side);
        else hp->pool = side / out;
    }
    cJSON_Delete(config);
    return rc ? -1 : processor(dir, hp, err);
}

/* clip name -> transformers' name (after the tower's or the projector's prefix) */
static const struct { const char *clip, *hf; bool projector; } global_names[] = {
    {"v.patch_embd.weight", "embeddings.patch_embedding.weight", false},
    {"v.patch_embd.bias", "embeddings.patch_embedding.bias", false},
    {"v.position_embd.weight", "embeddings.position_embedding.weight", false},
    {"v.post_ln.weight", "post_layernorm.weight", false},
    {"v.post_ln.bias", "post_layernorm.bias", false},
    {"mm.input_projection.weight", "mm_input_projection_weight", true},
    {"mm.soft_emb_norm.weight", "mm_soft_emb_norm.weight", true},
};
static const struct { const char *clip, *hf; } layer_names[] = {
    {"ln1", "layer_norm1"},          {"ln2", "layer_norm2"},         {"attn_q", "self_attn.q_proj"},
    {"attn_k", "self_attn.k_proj"},  {"attn_v", "self_attn.v_proj"}, {"attn_out", "self_attn.out_proj"},
    {"ffn_up", "mlp.fc1"},           {"ffn_down", "mlp.fc2"},
};

/* The name after the tower's or the projector's prefix into part; false for a name with no counterpart. */
static bool hf_part(const char *clip_name, char *part, size_t cap, bool *projector) {
    for (size_t i = 0; i < sizeof global_names / sizeof *global_names; i++)
        if (!strcmp(clip_name, global_names[i].clip)) {
            *projector = global_names[i].projector;
            return snprintf(part, cap, "%s", global_names[i].hf) < (int)cap;
        }
    int l, n = 0;
    if (sscanf(clip_name, "v.blk.%d.%n", &l, &n) != 1 || n == 0 || l < 0) return false;
    const char *rest = clip_name + n, *dot = strchr(rest, '.');
    if (!dot) return false;
    *projector = false;
    for (size_t i = 0; i < sizeof layer_names / sizeof *layer_names; i++) {
        size_t k = strlen(layer_names[i].clip);
        if ((size_t)(dot - rest) == k && !strncmp(rest, layer_names[i].clip, k))
            return snprintf(part, cap, "encoder.layers.%d.%s%s", l, layer_names[i].hf, dot) < (int)cap;
    }
    return false;
}

static const char *const towers[] = {"vision_tower.vision_model.", "model.vision_tower.vision_model."};
static const char *const projectors[] = {"multi_modal_projector.", "model.multi_modal_projector."};

const pith_tensor *vision_hf_tensor(const pith_model_file *f, const char *clip_name) {
    char part[200], name[256];
    bool projector;
    if (!hf_part(clip_name, part, sizeof part, &projector)) return NULL;
    for (int i = 0; i < 2; i++) {
        snprintf(name, sizeof name, "%s%s", projector ? projectors[i] : towers[i], part);
        const pith_tensor *t = pith_model_file_tensor(f, name);
        if (t) return t;
    }
    return NULL;
}

bool vision_hf_name(const char *clip_name, char *out, size_t cap) {
    char part[200];
    bool projector;
    return hf_part(clip_name, part, sizeof part, &projector) &&
           snprintf(out, cap, "%s%s", projector ? projectors[0] : towers[0], part) < (int)cap;
}
