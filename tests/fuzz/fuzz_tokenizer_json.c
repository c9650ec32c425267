/* tokenizer.json: the input is tokenizer.json, optionally a NUL byte and tokenizer_config.json. A
 * tokenizer that loads encodes a fixed text and its own input's first bytes, and decodes the result. */
#include "fuzz_util.h"
#include "tokenizer/tok_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char tj[512], tc[512];
    fuzz_path(tj, sizeof tj, "tokenizer.json");
    fuzz_path(tc, sizeof tc, "tokenizer_config.json");
    size_t n_json, n_cfg;
    const uint8_t *rest;
    fuzz_split(data, size, &n_json, &rest, &n_cfg);
    if (fuzz_write(tj, data, n_json)) return 0;
    bool has_cfg = n_cfg > 0 && fuzz_write(tc, rest, n_cfg) == 0;
    pith_err err;
    pith_tokenizer *t = NULL;
    if (tok_load_hf_json(tj, has_cfg ? tc : NULL, &t, &err) == 0) {
        static const char text[] = "Hello  world!\n<|im_start|>user 123 \xc3\xa9\xf0\x9f\x98\x80 \xff";
        int32_t *ids = NULL;
        int n = 0;
        if (pith_tokenizer_encode(t, text, sizeof text - 1, PITH_TOK_ADD_BOS | PITH_TOK_PARSE_SPECIAL, &ids, &n,
                                  &err) == 0) {
            fuzz_decode_all(t, ids, n);
            free(ids);
        }
        (void)pith_tokenizer_chat_template(t);
        pith_tokenizer_free(t);
    }
    unlink(tj);
    if (has_cfg) unlink(tc);
    return 0;
}
