/* SentencePiece .model (protobuf): the input is the file. A model that loads encodes a fixed text. */
#include "fuzz_util.h"
#include "tokenizer/tok_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[512];
    fuzz_path(path, sizeof path, "tokenizer.model");
    if (fuzz_write(path, data, size)) return 0;
    pith_err err;
    pith_tokenizer *t = NULL;
    if (tok_load_spm_model(path, &t, &err) == 0) {
        static const char text[] = "Hello world! \xc3\xa9\xf0\x9f\x98\x80 <s> \xff";
        int32_t *ids = NULL;
        int n = 0;
        if (pith_tokenizer_encode(t, text, sizeof text - 1, PITH_TOK_ADD_BOS | PITH_TOK_PARSE_SPECIAL, &ids, &n,
                                  &err) == 0) {
            fuzz_decode_all(t, ids, n);
            free(ids);
        }
        pith_tokenizer_free(t);
    }
    unlink(path);
    return 0;
}
