/* GGUF: the input is a .gguf file, opened as a model file (reader, metadata, tensor extents,
 * hyper-parameter validation), as a raw GGUF handle, and as a tokenizer source. */
#include "fuzz_util.h"
#include "pith/gguf.h"
#include "pith/modelfile.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[512];
    fuzz_path(path, sizeof path, "model.gguf");
    if (fuzz_write(path, data, size)) return 0;
    pith_err err;
    pith_model_file *mf = NULL;
    if (pith_model_file_open(path, &mf, &err) == 0) {
        for (int i = 0; i < pith_model_file_n_tensors(mf); i++) (void)pith_model_file_tensor_at(mf, i);
        pith_model_file_close(mf);
    }
    pith_gguf *g = NULL;
    if (pith_gguf_open(path, &g, &err) == 0) {
        pith_tokenizer *t = NULL;
        if (pith_tokenizer_from_gguf(g, &t, &err) == 0) {
            int32_t *ids = NULL;
            int n = 0;
            if (pith_tokenizer_encode(t, "Hello, world! <s> \xe2\x96\x81x", 21, PITH_TOK_ADD_BOS | PITH_TOK_PARSE_SPECIAL,
                                      &ids, &n, &err) == 0) {
                fuzz_decode_all(t, ids, n);
                free(ids);
            }
            pith_tokenizer_free(t);
        }
        pith_gguf_close(g);
    }
    unlink(path);
    return 0;
}
