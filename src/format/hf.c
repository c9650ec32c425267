/* Hugging Face checkpoints as model files: config.json for the hyper-parameters, model.safetensors or a
 * sharded model.safetensors.index.json for the tensors, renamed to canonical (GGUF-style) names by the
 * architecture descriptor's name map (model/arch.h). */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "format/hf_config.h"
#include "format/json_file.h"
#include "format/modelfile_internal.h"
#include "format/printable.h"
#include "format/safetensors.h"

#define MAX_INDEX_BYTES (64u << 20)

/* "model.layers.N." (or the descriptor's hf_layer_prefix) / "mtp.layers.N." prefixes: N (no leading zeros) and what follows, or -1. */
static long layer_prefix(const char *hf, const char *prefix, const char **rest) {
    size_t n = strlen(prefix);
    if (strncmp(hf, prefix, n)) return -1;
    const char *p = hf + n;
    long layer_no = 0;
    int digits = 0;
    for (; *p >= '0' && *p <= '9' && digits < 7; p++, digits++) layer_no = layer_no * 10 + (*p - '0');
    if (!digits || *p != '.' || (digits > 1 && hf[n] == '0')) return -1;
    *rest = p + 1;
    return layer_no;
}

static bool layer_name(const pith_name_map *map, long layer_no, const char *rest, char *out, size_t cap) {
    for (const pith_name_map *l = map; l && l->hf; l++) {
        if (!strcmp(rest, l->hf)) {
            snprintf(out, cap, "blk.%ld.%s", layer_no, l->name);
            return true;
        }
    }
    return false;
}

/* Writes the canonical name of a Hugging Face tensor name, from the architecture's name map, into out;
 * false when it has none. The MTP layers ("mtp.layers.N.", and the head's own "mtp.X" through
 * hf_mtp) become blocks n_layers + N, as llama.cpp's converter numbers them after the decoder's. */
static bool mapped_name(const pith_arch *arch, int n_layers, const char *hf, char *out, size_t cap) {
    for (const pith_name_map *g = arch->hf_global; g && g->hf; g++) {
        if (!strcmp(hf, g->hf)) {
            snprintf(out, cap, "%s", g->name);
            return true;
        }
    }
    const char *rest;
    long layer_no = layer_prefix(hf, arch->hf_layer_prefix ? arch->hf_layer_prefix : "model.layers.", &rest);
    if (layer_no >= 0) return layer_name(arch->hf_layer, layer_no, rest, out, cap);
    if (!arch->hf_mtp) return false;
    layer_no = layer_prefix(hf, "mtp.layers.", &rest);
    if (layer_no >= 0) return layer_name(arch->hf_layer, n_layers + layer_no, rest, out, cap);
    return !strncmp(hf, "mtp.", 4) && layer_name(arch->hf_mtp, n_layers, hf + 4, out, cap);
}

/* The name map's canonical name into out; false when there is none (the tensor then keeps its own
 * name). A multimodal checkpoint's text model (arch->hf_text_config) reads "model.language_model.X" as
 * "model.X", and an unmapped one of those keeps the name "model.X" (experts are read by name); older
 * checkpoints of that kind (transformers 4.x's Mistral3ForConditionalGeneration) name it
 * "language_model.model.X", with "language_model.lm_head.weight", read as "model.X" and "lm_head.weight". */
static bool canonical_name(const pith_arch *arch, int n_layers, const char *hf, char *out, size_t cap) {
    static const char nested[] = "model.language_model.", legacy[] = "language_model.model.",
                      legacy_head[] = "language_model.lm_head.";
    char flat[512];
    if (arch->hf_text_config && !strncmp(hf, legacy, sizeof legacy - 1))
        hf += sizeof legacy - sizeof "model."; /* "language_model.model.X" -> "model.X" */
    else if (arch->hf_text_config && !strncmp(hf, legacy_head, sizeof legacy_head - 1))
        hf += sizeof "language_model." - 1;   /* -> "lm_head.X" */
    if (!arch->hf_text_config || strncmp(hf, nested, sizeof nested - 1) ||
        snprintf(flat, sizeof flat, "model.%s", hf + sizeof nested - 1) >= (int)sizeof flat)
        return mapped_name(arch, n_layers, hf, out, cap);
    if (mapped_name(arch, n_layers, flat, out, cap)) return true;
    size_t n = strlen(flat);
    if (n >= cap) return false;
    memcpy(out, flat, n + 1);
    return true;
}

/* Whether the directory names this file at all: a FIFO there is then opened (non-blocking) and refused
 * with an error naming it, rather than passed over. */
static bool exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

static char *join(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s", dir, name);
    return p;
}

/* The index's shard lists: weight_map names -> shard numbers, and the distinct shard file names. */
typedef struct shard_map {
    pith_name_index names;   /* Hugging Face tensor name -> entry number */
    int *shard_of;           /* per entry */
    bool *found;             /* per entry: seen in its shard */
    const char **entry_name; /* per entry */
    const char **shards;     /* distinct shard file names, sorted */
    int n_entries, n_shards;
    cJSON *json;             /* owns every string above */
} shard_map;

static void shard_map_free(shard_map *s) {
    pith_name_index_free(&s->names);
    free(s->shard_of);
    free(s->found);
    free(s->entry_name);
    free(s->shards);
    cJSON_Delete(s->json);
}

static int cmp_cstr(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

static int shard_number(const shard_map *s, const char *file) {
    const char **hit = bsearch(&file, s->shards, (size_t)s->n_shards, sizeof *s->shards, cmp_cstr);
    return hit ? (int)(hit - s->shards) : -1;
}

static int read_index(const char *path, shard_map *s, pith_err *err) {
    char *text;
    size_t len;
    if (pith_read_small_file(path, MAX_INDEX_BYTES, &text, &len, err)) return -1;
    if (pith_json_count_values(text, len) > PITH_JSON_MAX_VALUES) {
        free(text);
        return pith_errf(err, "%s: more than %zu JSON values", path, PITH_JSON_MAX_VALUES);
    }
    s->json = cJSON_ParseWithLength(text, len);
    free(text);
    const cJSON *wm = cJSON_GetObjectItemCaseSensitive(s->json, "weight_map");
    if (!cJSON_IsObject(wm)) return pith_errf(err, "%s: not JSON with a \"weight_map\" object", path);
    int n = cJSON_GetArraySize(wm);
    if (n <= 0) return pith_errf(err, "%s: \"weight_map\" is empty", path);
    s->shard_of = calloc((size_t)n, sizeof *s->shard_of);
    s->found = calloc((size_t)n, sizeof *s->found);
    s->entry_name = calloc((size_t)n, sizeof *s->entry_name);
    s->shards = calloc((size_t)n, sizeof *s->shards);
    pith_name_entry *entries = calloc((size_t)n, sizeof *entries);
    if (!s->shard_of || !s->found || !s->entry_name || !s->shards || !entries) {
        free(entries);
        return pith_errf(err, "%s: out of memory", path);
    }
    const cJSON *item;
    int i = 0;
    cJSON_ArrayForEach(item, wm) {
        char shown[PITH_PRINTABLE_CAP];
        const char *file = cJSON_IsString(item) ? item->valuestring : NULL;
        /* Shards must sit in the model directory: no paths, no hidden or parent entries. */
        if (!file || !file[0] || file[0] == '.' || strchr(file, '/') || strchr(file, '\\')) {
            free(entries);
            return pith_errf(err, "%s: weight_map entry '%s' does not name a shard file in the same directory",
                             path, pith_printable(shown, sizeof shown, item->string, strlen(item->string)));
        }
        s->entry_name[i] = item->string;
        s->shards[i] = file;
        entries[i] = (pith_name_entry){{item->string, strlen(item->string)}, i};
        i++;
    }
    s->n_entries = n;
    int64_t dup = 0;
    if (pith_name_index_build(&s->names, entries, n, &dup)) {
        char shown[PITH_PRINTABLE_CAP];
        return pith_errf(err, "%s: weight_map lists '%s' twice", path,
                         pith_printable(shown, sizeof shown, s->entry_name[dup], strlen(s->entry_name[dup])));
    }
    /* Shard names were copied per entry; sort and deduplicate them, then number each entry's shard. */
    const char **files = malloc((size_t)n * sizeof *files);
    if (!files) return pith_errf(err, "%s: out of memory", path);
    memcpy(files, s->shards, (size_t)n * sizeof *files);
    qsort(s->shards, (size_t)n, sizeof *s->shards, cmp_cstr);
    int u = 0;
    for (int k = 0; k < n; k++)
        if (!u || strcmp(s->shards[u - 1], s->shards[k])) s->shards[u++] = s->shards[k];
    s->n_shards = u;
    for (int k = 0; k < n; k++) s->shard_of[k] = shard_number(s, files[k]);
    free(files);
    return 0;
}

typedef struct hf_ctx {
    pith_model_file *f;
    const pith_arch *arch;
    bool tie;
    shard_map *index; /* NULL for a single file */
    pith_err *err;
} hf_ctx;

static int load_shard(hf_ctx *c, const char *path, int shard) {
    pith_model_file *f = c->f;
    pith_mapped_file m;
    if (pith_mf_map(f, path, &m, c->err)) return -1;
    pith_tensor *ts;
    int n;
    if (pith_safetensors_parse(path, &m, &ts, &n, c->err)) return -1;
    int rc = 0;
    for (int i = 0; i < n && !rc; i++) {
        char name[96];
        pith_tensor t = ts[i];
        if (c->index) {
            int64_t e = pith_name_index_find(&c->index->names, t.name, strlen(t.name));
            if (e >= 0 && c->index->shard_of[e] == shard) c->index->found[e] = true;
        }
        if (canonical_name(c->arch, pith_model_file_hparams(f)->n_layers, t.name, name, sizeof name)) t.name = name;
        /* A tied checkpoint that still carries lm_head uses the embedding, like transformers does. */
        if (c->tie && !strcmp(t.name, "output.weight")) continue;
        rc = pith_mf_add_tensor(f, &t, 1, c->err);
    }
    pith_safetensors_free(ts, n);
    return rc;
}

static int load_sharded(hf_ctx *c, const char *dir, const char *index_path) {
    shard_map s = {0};
    c->index = &s;
    int rc = read_index(index_path, &s, c->err);
    for (int i = 0; !rc && i < s.n_shards; i++) {
        char *path = join(dir, s.shards[i]);
        rc = path ? load_shard(c, path, i) : pith_errf(c->err, "%s: out of memory", index_path);
        free(path);
    }
    for (int e = 0; !rc && e < s.n_entries; e++) {
        if (s.found[e]) continue;
        char shown[PITH_PRINTABLE_CAP];
        rc = pith_errf(c->err, "%s: weight_map puts '%s' in %s, which does not contain it", index_path,
                       pith_printable(shown, sizeof shown, s.entry_name[e], strlen(s.entry_name[e])),
                       s.shards[s.shard_of[e]]);
    }
    c->index = NULL;
    shard_map_free(&s);
    return rc;
}

static char *parent_dir(const char *path) {
    const char *slash = strrchr(path, '/');
    if (!slash) return strdup(".");
    if (slash == path) return strdup("/");
    return strndup(path, (size_t)(slash - path));
}

int pith_load_hf(pith_model_file *f, pith_err *err) {
    struct stat st;
    bool is_dir = stat(f->path, &st) == 0 && S_ISDIR(st.st_mode);
    const char *base = strrchr(f->path, '/');
    base = base ? base + 1 : f->path;
    f->dir = is_dir ? strdup(f->path) : parent_dir(f->path);
    char *config = f->dir ? join(f->dir, "config.json") : NULL;
    char *index = NULL, *single = NULL;
    int rc = -1;
    if (!config) {
        pith_errf(err, "%s: out of memory", f->path);
        goto done;
    }
    if (is_dir || !strcmp(base, "config.json")) {
        index = join(f->dir, "model.safetensors.index.json");
        single = join(f->dir, "model.safetensors");
        if (!index || !single) {
            pith_errf(err, "%s: out of memory", f->path);
            goto done;
        }
        if (exists(index)) {
            free(single);
            single = NULL;
        } else if (exists(single)) {
            free(index);
            index = NULL;
        } else {
            pith_errf(err, "%s: no model.safetensors or model.safetensors.index.json in %s", f->path, f->dir);
            goto done;
        }
    } else if (strlen(base) >= 5 && !strcmp(base + strlen(base) - 5, ".json")) {
        index = strdup(f->path);
    } else {
        single = strdup(f->path);
    }
    if (!index && !single) {
        pith_errf(err, "%s: out of memory", f->path);
        goto done;
    }
    hf_ctx c = {f, NULL, false, NULL, err};
    f->hp.arch_params = f->arch_params; /* zeroed storage for the descriptor's own hyper-parameters */
    if (pith_hf_parse_config(config, &f->hp, &c.arch, err)) goto done;
    if (c.arch->params_size > sizeof f->arch_params) {
        pith_errf(err, "%s: architecture %s: %zu bytes of private hyper-parameters", f->path, c.arch->name,
                  c.arch->params_size);
        goto done;
    }
    if (!c.arch->params_size) f->hp.arch_params = NULL;
    c.tie = f->hp.tied_embeddings;
    if (index ? load_sharded(&c, f->dir, index) : load_shard(&c, single, 0)) goto done;
    if (!f->hp.n_vocab) {
        const pith_tensor *embd = pith_mf_find(f, "token_embd.weight");
        if (embd && embd->ne[1] <= INT32_MAX) f->hp.n_vocab = (int)embd->ne[1];
    }
    rc = 0;
done:
    free(config);
    free(index);
    free(single);
    return rc;
}
