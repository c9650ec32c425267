/* Hugging Face directory: the input is config.json, a NUL byte, then model.safetensors; both are
 * written into a scratch directory, which is opened as a model file. */
#include "fuzz_util.h"
#include "pith/modelfile.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char dir[512], cfg[600], st[600];
    fuzz_path(dir, sizeof dir, "hf");
    mkdir(dir, 0700);
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    snprintf(st, sizeof st, "%s/model.safetensors", dir);
    size_t n_cfg, n_st;
    const uint8_t *rest;
    fuzz_split(data, size, &n_cfg, &rest, &n_st);
    if (fuzz_write(cfg, data, n_cfg) || fuzz_write(st, rest, n_st)) return 0;
    pith_err err;
    pith_model_file *mf = NULL;
    if (pith_model_file_open(dir, &mf, &err) == 0) pith_model_file_close(mf);
    unlink(cfg);
    unlink(st);
    rmdir(dir);
    return 0;
}
