/* Gemma 3 (text): the decoder of llama.c with Gemma's three differences (embeddings scaled by
 * sqrt(hidden), GELU-tanh gated FFN, RMS norms of the attention and FFN outputs); the rest (QK norms,
 * five window layers in six, local and global RoPE bases, query_pre_attn_scalar, logit soft-cap) is in
 * the hyper-parameters that gemma3_arch.c reads, and norms mean (1 + w) in every format because the
 * Hugging Face load adds 1 (gemma3_arch.c). Follows transformers' modeling_gemma3.py. */
#include "model/gemma3.h"

#include <math.h>

#include "model/llama.h"

/* transformers multiplies by sqrt(hidden) as a tensor of the embedding's dtype, so a BF16 or F16
 * checkpoint scales by that rounding of it; llama.cpp (GGUF) scales in F32. */
static float embed_scale(const pith_model_file *file) {
    float s = sqrtf((float)pith_model_file_hparams(file)->dim);
    const pith_tensor *e = pith_model_file_tensor(file, "token_embd.weight");
    if (pith_model_file_format(file) != PITH_FORMAT_SAFETENSORS || !e) return s;
    if (e->type == PITH_BF16) return pith_bf16_to_f32(pith_f32_to_bf16(s));
    if (e->type == PITH_F16) return pith_f16_to_f32(pith_f32_to_f16(s));
    return s;
}

int pith_gemma3_build(pith_model_file *file, const pith_model_options *opt, pith_model **out, pith_err *err) {
    pith_decoder_variant v = {.embed_scale = embed_scale(file), .gelu_tanh = true, .post_norms = true};
    if (pith_decoder_build(file, opt, &v, out, err)) return -1;
    /* images (model/vision.h): the encoder's rows enter unscaled, and an image's tokens see one another
     * (transformers' token_type_ids mask; llama.cpp decodes an image non-causally) */
    (*out)->has_embeds = (*out)->bidirectional_spans = true;
    return 0;
}
