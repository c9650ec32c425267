/* llama2.c tokenizer file: the input's first byte picks n_vocab (0 = all entries, else 1..255), the
 * rest is the file. A tokenizer that loads encodes a fixed text. */
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    char path[512];
    fuzz_path(path, sizeof path, "tokenizer.bin");
    if (fuzz_write(path, data + 1, size - 1)) return 0;
    pith_err err;
    pith_tokenizer *t = NULL;
    if (pith_tokenizer_load_llama2c(path, data[0], &t, &err) == 0) {
        static const char text[] = "Once upon a time \xc3\xa9\xf0\x9f\x98\x80 \xff";
        int32_t *ids = NULL;
        int n = 0;
        if (pith_tokenizer_encode(t, text, sizeof text - 1, PITH_TOK_ADD_BOS, &ids, &n, &err) == 0) {
            fuzz_decode_all(t, ids, n);
            free(ids);
        }
        pith_tokenizer_free(t);
    }
    unlink(path);
    return 0;
}
