/* Gemma 3 forward pass: not written yet; loading and validation are complete (gemma3_arch.c). */
#include "model/gemma3.h"

int pith_gemma3_build(pith_model_file *file, const pith_model_options *opt, pith_model **out, pith_err *err) {
    (void)opt;
    *out = NULL;
    return pith_errf(err, "%s: the gemma3 forward pass is not implemented yet (the file itself loads and validates)",
                     pith_model_file_path(file));
}
