#include "pith/model.h"

#include <string.h>

#include "format/printable.h"
#include "model/arch.h"

int pith_model_load(const char *path, const pith_model_options *opt, pith_model **out, pith_err *err) {
    *out = NULL;
    pith_model_file *file;
    if (pith_model_file_open(path, &file, err)) return -1;
    const pith_hparams *hp = pith_model_file_hparams(file);
    pith_model_options defaults = {0};
    if (!opt) opt = &defaults;
    const pith_arch *arch = pith_arch_find(hp->arch);
    int rc;
    if (arch && arch->build) {
        rc = arch->build(file, opt, out, err);
    } else {
        char names[256], shown[PITH_PRINTABLE_CAP];
        rc = pith_errf(err, "%s: unsupported architecture '%s' (supported: %s)", path,
                       pith_printable(shown, sizeof shown, hp->arch, strlen(hp->arch)),
                       pith_arch_names(names, sizeof names, false));
    }
    if (rc) pith_model_file_close(file);
    return rc;
}

int pith_model_forward(pith_model *m, pith_kv_cache *kv, const pith_batch *b, float *logits, pith_err *err) {
    return m->ops->forward(m, kv, b, logits, err);
}

void pith_model_free(pith_model *m) {
    if (!m) return;
    pith_model_file *file = m->file;
    m->ops->destroy(m);
    pith_model_file_close(file);
}
