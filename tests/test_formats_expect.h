/* Expectations shared by the malformed-input tests (include after check.h): a refusal must return -1,
 * leave the output NULL and name the offending path and problem; whatever opens must be readable. */
#ifndef PITH_TEST_FORMATS_EXPECT_H
#define PITH_TEST_FORMATS_EXPECT_H

#include <unistd.h>

#include "pith/modelfile.h"
#include "test_formats_util.h"

static int n_refused;

static inline void expect_fail_at(const char *path, int rc, const pith_err *err, const char *needle, const char *label) {
    n_refused++;
    CHECKF(rc == -1, "%s: accepted", label);
    CHECKF(strstr(err->msg, path) != NULL, "%s: message does not name %s: %s", label, path, err->msg);
    CHECKF(!needle || strstr(err->msg, needle) != NULL, "%s: message '%s' lacks '%s'", label, err->msg, needle);
}


static inline void model_fail(const char *label, const char *path, const char *needle_path, const char *needle) {
    pith_model_file *f = (pith_model_file *)1;
    pith_err err = {{0}};
    int rc = pith_model_file_open(path, &f, &err);
    CHECK(f == NULL);
    expect_fail_at(needle_path, rc, &err, needle, label);
    if (!rc) pith_model_file_close(f);
}

static inline void touch_model(const pith_model_file *f) {
    const pith_hparams *hp = pith_model_file_hparams(f);
    /* other architectures open unvalidated (the model layer refuses them) */
    bool supported = !strcmp(hp->arch, "llama") || !strcmp(hp->arch, "qwen2") || !strcmp(hp->arch, "qwen3");
    CHECKF(!supported || (hp->dim > 0 && hp->n_layers > 0 && hp->n_vocab > 0 && hp->head_dim > 0), "%s", hp->arch);
    unsigned sum = 0;
    for (int i = 0; i < pith_model_file_n_tensors(f); i++) {
        const pith_tensor *t = pith_model_file_tensor_at(f, i);
        for (size_t k = 0; k < t->nbytes; k++) sum += ((const uint8_t *)t->data)[k];
        CHECK(pith_model_file_tensor(f, t->name) == t);
    }
    (void)sum;
}

static const mspec tiny = {
    .arch = "llama", .dim = 8, .n_layers = 1, .n_heads = 2, .n_kv_heads = 2, .head_dim = 4, .ffn = 16,
    .vocab = 10, .ctx = 64, .wtype = 1, .ntype = 0, .bos = 1, .eos = 2,
};

#endif
