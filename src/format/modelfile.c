/* Model files: format detection, the shared tensor table and the accessors (see pith/modelfile.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "format/arch.h"
#include "format/gguf_internal.h"
#include "format/modelfile_internal.h"
#include "format/printable.h"

static int grow(void **arr, int *cap, int need, size_t elem) {
    if (need <= *cap) return 0;
    if (need > (1 << 28)) return -1;
    int ncap = *cap ? *cap : 16;
    while (ncap < need) ncap *= 2;
    void *p = realloc(*arr, (size_t)ncap * elem);
    if (!p) return -1;
    *arr = p;
    *cap = ncap;
    return 0;
}

int pith_mf_arch_params(pith_model_file *f, const pith_arch *arch, pith_err *err) {
    f->hp.arch_params = NULL;
    if (!arch || !arch->params_size) return 0;
    if (arch->params_size > sizeof f->arch_params)
        return pith_errf(err, "%s: architecture %s: %zu bytes of private hyper-parameters", f->path, arch->name,
                         arch->params_size);
    memset(f->arch_params, 0, arch->params_size);
    f->hp.arch_params = f->arch_params;
    return 0;
}

void *pith_mf_alloc(pith_model_file *f, size_t bytes, pith_err *err) {
    if (grow((void **)&f->owned, &f->cap_owned, f->n_owned + 1, sizeof *f->owned)) {
        pith_errf(err, "%s: out of memory", f->path);
        return NULL;
    }
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        pith_errf(err, "%s: out of memory (%zu bytes)", f->path, bytes);
        return NULL;
    }
    f->owned[f->n_owned++] = p;
    return p;
}

int pith_mf_map(pith_model_file *f, const char *path, pith_mapped_file *out, pith_err *err) {
    if (grow((void **)&f->maps, &f->cap_maps, f->n_maps + 1, sizeof *f->maps))
        return pith_errf(err, "%s: out of memory", f->path);
    if (pith_map_file(path, &f->maps[f->n_maps], err)) return -1;
    *out = f->maps[f->n_maps++];
    return 0;
}

int pith_mf_add_tensor(pith_model_file *f, const pith_tensor *t, int copy_name, pith_err *err) {
    if (f->n_tensors >= (1 << 24)) return pith_errf(err, "%s: too many tensors", f->path);
    if (grow((void **)&f->tensors, &f->cap_tensors, f->n_tensors + 1, sizeof *f->tensors))
        return pith_errf(err, "%s: out of memory", f->path);
    pith_tensor copy = *t;
    if (copy_name) {
        size_t len = strlen(t->name);
        char *name = pith_mf_alloc(f, len + 1, err);
        if (!name) return -1;
        memcpy(name, t->name, len + 1);
        copy.name = name;
    }
    f->tensors[f->n_tensors++] = copy;
    return 0;
}

pith_tensor *pith_mf_find(pith_model_file *f, const char *name) {
    if (f->index.entries) {
        int64_t i = pith_name_index_find(&f->index, name, strlen(name));
        return i < 0 ? NULL : &f->tensors[i];
    }
    for (int i = 0; i < f->n_tensors; i++)
        if (!strcmp(f->tensors[i].name, name)) return &f->tensors[i];
    return NULL;
}

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

static bool has_gguf_magic(const char *path) {
    char magic[4];
    size_t n = 0;
    pith_err ignored;
    return !pith_read_file_head(path, magic, sizeof magic, &n, NULL, &ignored) && n == 4 && !memcmp(magic, "GGUF", 4);
}

/* Only now, with every header and tensor checked, are the files read in: a large file whose header is
 * refused costs no reads (pith_prefault_file). */
static void prefault(const pith_model_file *f) {
    for (int i = 0; i < f->n_maps; i++) pith_prefault_file(&f->maps[i]);
    if (f->gguf) pith_prefault_file(&f->gguf->map);
}

static int build_index(pith_model_file *f, pith_err *err) {
    pith_name_entry *e = malloc((size_t)(f->n_tensors ? f->n_tensors : 1) * sizeof *e);
    if (!e) return pith_errf(err, "%s: out of memory", f->path);
    for (int i = 0; i < f->n_tensors; i++) e[i] = (pith_name_entry){{f->tensors[i].name, strlen(f->tensors[i].name)}, i};
    int64_t dup = 0;
    if (pith_name_index_build(&f->index, e, f->n_tensors, &dup)) {
        char shown[PITH_PRINTABLE_CAP];
        const char *n = f->tensors[dup].name;
        return pith_errf(err, "%s: duplicate tensor '%s'", f->path, pith_printable(shown, sizeof shown, n, strlen(n)));
    }
    return 0;
}

static int load(pith_model_file *f, pith_err *err) {
    const char *path = f->path;
    struct stat st;
    if (stat(path, &st)) return pith_errf(err, "%s: cannot open: %s", path, strerror(errno));
    int rc;
    if (S_ISDIR(st.st_mode)) {
        f->format = PITH_FORMAT_SAFETENSORS;
        rc = pith_load_hf(f, err);
    } else if (!S_ISREG(st.st_mode)) {
        return pith_errf(err, "%s: not a regular file or directory", path);
    } else if (has_gguf_magic(path) || ends_with(path, ".gguf")) {
        f->format = PITH_FORMAT_GGUF;
        rc = pith_load_gguf_model(f, err);
    } else if (ends_with(path, ".safetensors") || ends_with(path, ".json")) {
        f->format = PITH_FORMAT_SAFETENSORS;
        rc = pith_load_hf(f, err);
    } else if (ends_with(path, ".bin")) {
        f->format = PITH_FORMAT_LLAMA2C;
        rc = pith_load_llama2c(f, err);
    } else {
        return pith_errf(err, "%s: unrecognised model format (expected a GGUF file, a Hugging Face directory or "
                         ".safetensors file, or a llama2.c .bin checkpoint)", path);
    }
    if (rc) return -1;
    if (build_index(f, err) || pith_model_file_validate(f, err)) return -1;
    prefault(f);
    return 0;
}

int pith_model_file_open(const char *path, pith_model_file **out, pith_err *err) {
    *out = NULL;
    if (!path || !*path) return pith_errf(err, "model path is empty");
    pith_model_file *f = calloc(1, sizeof *f);
    if (!f || !(f->path = strdup(path))) {
        free(f);
        return pith_errf(err, "%s: out of memory", path);
    }
    f->hp.bos_id = f->hp.eos_id = -1;
    if (load(f, err)) {
        pith_model_file_close(f);
        return -1;
    }
    *out = f;
    return 0;
}

void pith_model_file_close(pith_model_file *f) {
    if (!f) return;
    pith_name_index_free(&f->index);
    free(f->tensors);
    for (int i = 0; i < f->n_owned; i++) free(f->owned[i]);
    free(f->owned);
    for (int i = 0; i < f->n_maps; i++) pith_unmap_file(&f->maps[i]);
    free(f->maps);
    pith_gguf_close(f->gguf);
    free(f->dir);
    free(f->path);
    free(f);
}

pith_format pith_model_file_format(const pith_model_file *f) { return f->format; }
const char *pith_model_file_path(const pith_model_file *f) { return f->path; }
const pith_hparams *pith_model_file_hparams(const pith_model_file *f) { return &f->hp; }
const pith_gguf *pith_model_file_gguf(const pith_model_file *f) { return f->gguf; }
const char *pith_model_file_dir(const pith_model_file *f) { return f->dir; }
int pith_model_file_n_tensors(const pith_model_file *f) { return f->n_tensors; }

const pith_tensor *pith_model_file_tensor_at(const pith_model_file *f, int i) {
    return i >= 0 && i < f->n_tensors ? &f->tensors[i] : NULL;
}

const pith_tensor *pith_model_file_tensor(const pith_model_file *f, const char *name) {
    return pith_mf_find((pith_model_file *)f, name);
}
