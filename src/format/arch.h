/* Architecture descriptors: everything particular to one model architecture, in one place, as the
 * formats see it.
 *
 * This header lives in src/format/ because the loaders read through it: src/format/ includes nothing
 * from src/model/ (tests/test_layering.py), while src/model/ includes this header to define the
 * descriptors. Each architecture's own file under src/model/ (llama_arch.c, gemma3_arch.c, ...) defines
 * one `const pith_arch pith_arch_<name>`, and src/model/registry.c lists it on one line. The generic
 * loaders (src/format/gguf_model.c, hf_config.c, hf.c), the validator (src/format/validate.c) and
 * pith_model_load consult the registry and call the descriptor for everything that is not common to all
 * architectures:
 *
 *   - names: its GGUF general.architecture (also pith_hparams.arch), its Hugging Face config.json
 *     "architectures" values and "model_type" values;
 *   - RoPE style per format (how the file lays out Q and K);
 *   - the Hugging Face -> canonical tensor-name map (global names, and per-layer names after
 *     "model.layers.N." -> "blk.N.");
 *   - the tensor schema: canonical names, shapes in symbolic hyper-parameter dimensions, and whether each
 *     is required, optional, or in every layer or none; a per-layer predicate expresses layers that differ;
 *   - its metadata reading beyond the common keys (GGUF "{arch}.*" keys, config.json keys), through the
 *     format-neutral pith_meta readers below;
 *   - its own hyper-parameter checks, its load-time tensor transforms, and its build function.
 *
 * Invariants: names are unique across the registry (an HF name maps to one descriptor); every table ends
 * with a NULL name; descriptors are immutable and static. The common keys (widths, counts, eps, RoPE base
 * and scaling, token ids, tied embeddings) are read by the loaders before the descriptor's hook runs; a
 * hook overrides them only where the architecture's defaults differ. */
#ifndef PITH_FORMAT_ARCH_H
#define PITH_FORMAT_ARCH_H

#include <stddef.h>

#include "pith/model.h"
#include "pith/modelfile.h"

struct cJSON;

/* ---- metadata: one reader over GGUF "{arch}.*" keys and config.json members ---- */

typedef struct pith_meta {
    const char *path;          /* named in errors: the GGUF file or config.json */
    const char *arch;          /* GGUF: keys are read as "{arch}.{key}" */
    const pith_gguf *gguf;     /* GGUF metadata, or NULL */
    const struct cJSON *json;  /* config.json object, or NULL */
    bool lenient;              /* unregistered GGUF architecture: malformed values are skipped, not errors */
    pith_err *err;
    const struct cJSON *outer; /* config.json's whole object when json is its "text_config" (a multimodal
                                  class: what the text model needs from beside it), else NULL */
} pith_meta;

/* Each reader: absent (or JSON null) leaves *out as it is (the caller's default), which is an error only
 * when `required`; present but of the wrong type or out of range is an error naming the key. GGUF keys
 * are given without the "{arch}." prefix; a key starting with '=' is taken literally ("=general.name"). */
bool pith_meta_has(const pith_meta *m, const char *key);
int pith_meta_int(const pith_meta *m, const char *key, bool required, int *out);
int pith_meta_float(const pith_meta *m, const char *key, bool required, float *out);
int pith_meta_bool(const pith_meta *m, const char *key, bool *out);
/* A string into out (truncation is an error); absent leaves out as it is. */
int pith_meta_str(const pith_meta *m, const char *key, char *out, size_t cap);
/* A list of integers in [lo, hi] (M-RoPE's sections): present, out[0..max_n) is zeroed and takes its
 * first max_n entries (later ones are ignored: llama.cpp writes four sections where three are used);
 * absent leaves out as it is. A non-list or an entry out of range is an error naming the key. */
int pith_meta_ints(const pith_meta *m, const char *key, int max_n, int lo, int hi, int *out);
/* A per-layer list of exactly n_layers items (strings, numbers or booleans): bit l of *mask is set where
 * item l equals `on` (compared as text: numbers as "%d", booleans as "true"/"false"), cleared elsewhere.
 * *found tells whether the key was there (absent: *mask untouched). */
int pith_meta_layers(const pith_meta *m, const char *key, int n_layers, const char *on, uint64_t *mask,
                     bool *found);

/* ---- tensor schema ---- */

typedef enum pith_dim {
    PITH_D_NONE = 0,  /* as ne1: the tensor is a vector of ne0 elements */
    PITH_D_DIM,       /* embedding width */
    PITH_D_FFN,       /* feed-forward width */
    PITH_D_VOCAB,
    PITH_D_Q,         /* n_heads * head_dim */
    PITH_D_KV,        /* n_kv_heads * head_dim */
    PITH_D_HEAD,      /* head_dim */
    PITH_D_HALF_HEAD, /* head_dim / 2 */
    PITH_D_HEADS,     /* n_heads (GPT-OSS's attention sinks) */
} pith_dim;

typedef enum pith_presence {
    PITH_REQUIRED,
    PITH_OPTIONAL,
    PITH_ALL_OR_NONE, /* per layer: in every layer it applies to, or in none (layer 0 decides) */
} pith_presence;

typedef struct pith_tensor_spec {
    const char *name;       /* global: the full canonical name; per layer: the part after "blk.N." */
    pith_dim ne0, ne1;      /* ne = {ne0, ne1}; ne1 PITH_D_NONE: a vector (made F32 at load) */
    pith_presence presence;
    /* Per-layer variation: does layer l have this tensor at all? NULL = every layer. */
    bool (*in_layer)(const pith_hparams *hp, int l);
} pith_tensor_spec;

typedef struct pith_name_map {
    const char *hf, *name;  /* Hugging Face name -> canonical name (per layer: both without the prefix) */
} pith_name_map;

/* ---- the descriptor ---- */

typedef int (*pith_build_fn)(pith_model_file *file, const pith_model_options *opt, pith_model **out,
                             pith_err *err);

typedef struct pith_arch {
    const char *name;                    /* GGUF general.architecture; pith_hparams.arch */
    const char *const *hf_archs;         /* config.json "architectures" values (NULL-terminated) */
    const char *const *hf_model_types;   /* config.json "model_type" values (NULL-terminated), or NULL */
    bool hf_text_config;                 /* a nested "text_config" holds the text model's config (multimodal
                                            classes); tensors may sit under "model.language_model." */
    pith_rope_style rope_gguf, rope_hf;  /* how each format lays out Q and K */
    const pith_name_map *hf_global;      /* NULL-terminated */
    const pith_name_map *hf_layer;       /* after "model.layers.N." -> after "blk.N."; NULL-terminated */
    const char *hf_layer_prefix;         /* what stands for "model.layers." (Nemotron-H: "backbone.layers.");
                                            NULL: "model.layers." */
    const pith_name_map *hf_mtp;         /* after "mtp." -> after "blk.{n_layers}." (the MTP head's own
                                            tensors; its layers "mtp.layers.N." map through hf_layer);
                                            NULL: "mtp.*" keep their names */
    const pith_tensor_spec *global;      /* NULL-terminated */
    const pith_tensor_spec *layer;       /* NULL-terminated */
    /* Reads the architecture's own metadata after the common keys (NULL: none). */
    int (*read_gguf)(const pith_meta *m, pith_hparams *hp);
    int (*read_hf)(const pith_meta *m, pith_hparams *hp);
    /* Hyper-parameter checks beyond the generic ones, before the tensor schema is checked (NULL: none).
     * Errors name path. */
    int (*check)(const pith_hparams *hp, const char *path, pith_err *err);
    /* After the schema holds: derive flags from which optional tensors exist and transform tensors so
     * that they mean the same in every format (NULL: none). */
    int (*finish)(pith_model_file *f, pith_hparams *hp, pith_err *err);
    pith_build_fn build;
    /* Bytes of the architecture's private hyper-parameters (0: none): a struct of its own, defined in
     * its header, zeroed before its metadata hooks run and reached by them, its check hook and its
     * forward pass through pith_arch_params (what pith_hparams would otherwise grow a field for). */
    size_t params_size;
    /* The architecture reads GGUF's rope.dimension_count itself (a partial rotary); otherwise the loader
     * refuses one that differs from the head dimension. */
    bool partial_rotary;
    /* config.json "rope_scaling" kinds ("rope_type" / "type") the descriptor reads itself in read_hf
     * (phi3's "longrope"), which the loader then leaves alone instead of refusing them (NULL-terminated;
     * NULL: none). */
    const char *const *hf_rope_kinds;
    /* The architecture reads GGUF's attention.key_length / value_length itself (DeepSeek's MLA: key and
     * value heads of different widths); otherwise the loader refuses a value width other than the key's. */
    bool own_head_widths;
    /* The text config class's defaults, as a JSON object (NULL: none): transformers saves only the keys
     * that differ from its class's defaults (Gemma3ForConditionalGeneration's "text_config" leaves out the
     * head counts and the vocabulary), so a key the text config lacks is read as this object gives it. */
    const char *hf_defaults;
} pith_arch;

/* The architecture's private hyper-parameters (NULL when it declares none). Hooks write through it. */
static inline void *pith_arch_params(const pith_hparams *hp) { return (void *)hp->arch_params; }

/* ---- registry (src/model/registry.c, where the descriptors are listed) ---- */

/* NULL when no descriptor has that name. */
const pith_arch *pith_arch_find(const char *name);
const pith_arch *pith_arch_find_hf(const char *hf_arch, const char *model_type);
/* The registered names, comma-separated, into buf: GGUF names, or (hf) the "architectures" values. */
const char *pith_arch_names(char *buf, size_t cap, bool hf);

/* ---- helpers for finish hooks (src/format/validate.c) ---- */

/* Replaces the named vector (F32 after validation) with an owned copy, returned for editing in place
 * with its element count; *data is NULL when the tensor is absent. */
int pith_mf_own_vector(pith_model_file *f, const char *name, float **data, int64_t *n, pith_err *err);
/* Replaces the named tensor's bytes (any type, any shape) with an owned copy, returned for editing in place
 * (Qwen3-Next's fused projections have their rows reordered) with the tensor; *data is NULL when absent. */
int pith_mf_own_bytes(pith_model_file *f, const char *name, void **data, const pith_tensor **t, pith_err *err);

#endif
