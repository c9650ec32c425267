/* GGUF as a model file: the common hyper-parameters from "{arch}.*" metadata, the rest from the
 * architecture's descriptor (model/arch.h), tensors as stored (GGUF names are already canonical). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "format/arch.h"
#include "format/modelfile_internal.h"
#include "format/printable.h"

static int read_arch(pith_model_file *f, const pith_gguf *g, pith_err *err) {
    pith_str arch;
    if (!pith_gguf_get_str(g, "general.architecture", &arch))
        return pith_errf(err, "%s: missing metadata key general.architecture (a string)", f->path);
    char shown[PITH_PRINTABLE_CAP];
    if (arch.len == 0 || arch.len >= sizeof f->hp.arch || memchr(arch.ptr, '\0', (size_t)arch.len))
        return pith_errf(err, "%s: invalid general.architecture '%s'", f->path,
                         pith_printable(shown, sizeof shown, arch.ptr, arch.len));
    memcpy(f->hp.arch, arch.ptr, (size_t)arch.len);
    f->hp.arch[arch.len] = '\0';
    return 0;
}

/* RoPE scaling: llama3's comes as rope_freqs.weight; "linear" divides positions by rope.scaling.factor
 * (absent: 1); "yarn" (llama.cpp's keys: rope.scaling.factor, original_context_length, yarn_beta_fast
 * (default 32), yarn_beta_slow (1), attn_factor (1)) as llama.cpp computes it: truncated correction
 * dimensions, cos/sin times attn_factor * (1 + 0.1 ln factor). Any other kind would silently change
 * every logit, so it is refused unless it is the identity (factor 1). */
static int read_rope_scaling(const pith_meta *m, pith_hparams *hp) {
    char key[96];
    pith_str type;
    snprintf(key, sizeof key, "%s.rope.scaling.type", m->arch);
    if (m->lenient || !pith_gguf_get_str(m->gguf, key, &type) || pith_str_eq(type, "none")) return 0;
    float factor = 1.0f;
    if (pith_meta_float(m, "rope.scaling.factor", false, &factor)) return -1;
    if (pith_str_eq(type, "linear")) {
        /* 0 stands for none in pith_hparams, so a zero factor must be refused here, not stored. */
        if (!(factor > 0 && isfinite(factor)))
            return pith_errf(m->err, "%s: linear RoPE scaling factor %g is not a positive number", m->path, factor);
        hp->rope_linear_factor = factor == 1.0f ? 0.0f : factor;
        return 0;
    }
    if (pith_str_eq(type, "yarn") && factor != 1.0f) {
        float attn = 1.0f;
        hp->rope_yarn_factor = factor;
        hp->rope_yarn_beta_fast = 32.0f;
        hp->rope_yarn_beta_slow = 1.0f;
        hp->rope_yarn_truncate = true;
        if (pith_meta_int(m, "rope.scaling.original_context_length", true, &hp->rope_orig_ctx) ||
            pith_meta_float(m, "rope.scaling.yarn_beta_fast", false, &hp->rope_yarn_beta_fast) ||
            pith_meta_float(m, "rope.scaling.yarn_beta_slow", false, &hp->rope_yarn_beta_slow) ||
            pith_meta_float(m, "rope.scaling.attn_factor", false, &attn))
            return -1;
        hp->rope_yarn_mscale = attn * (factor > 1.0f ? 1.0f + 0.1f * logf(factor) : 1.0f);
        return 0;
    }
    if (factor == 1.0f) return 0;
    char shown[PITH_PRINTABLE_CAP];
    return pith_errf(m->err, "%s: RoPE scaling '%s' (factor %g) is not supported (only linear and yarn)", m->path,
                     pith_printable(shown, sizeof shown, type.ptr, type.len), factor);
}

int pith_load_gguf_model(pith_model_file *f, pith_err *err) {
    if (pith_gguf_open(f->path, &f->gguf, err)) return -1;
    const pith_gguf *g = f->gguf;
    if (read_arch(f, g, err)) return -1;
    pith_hparams *hp = &f->hp;
    const pith_arch *arch = pith_arch_find(hp->arch);
    if (pith_mf_arch_params(f, arch, err)) return -1;
    /* Unregistered architectures open leniently: their metadata stays readable, the model layer refuses. */
    pith_meta m = {f->path, hp->arch, g, NULL, arch == NULL, err, NULL};
    hp->rope_style = arch ? arch->rope_gguf : PITH_ROPE_ADJACENT;
    hp->rope_theta = 10000.0f;
    hp->n_kv_heads = -1;
    hp->head_dim = 0;
    int rope_dims = -1, value_dim = -1;
    /* Hybrid models (lfm2) give head_count_kv per layer (0: a recurrent layer): the descriptor reads it. */
    char kv_key[96];
    snprintf(kv_key, sizeof kv_key, "%s.attention.head_count_kv", hp->arch);
    const pith_gguf_kv *kv_heads = pith_gguf_find(g, kv_key);
    bool kv_per_layer = arch && kv_heads && kv_heads->type == PITH_GGUF_ARRAY;
    /* ... and Nemotron-H feed_forward_length too (0: a layer without an MLP). */
    snprintf(kv_key, sizeof kv_key, "%s.feed_forward_length", hp->arch);
    const pith_gguf_kv *ff = pith_gguf_find(g, kv_key);
    bool ff_per_layer = arch && ff && ff->type == PITH_GGUF_ARRAY;
    if (pith_meta_int(&m, "context_length", true, &hp->ctx_len) ||
        pith_meta_int(&m, "embedding_length", true, &hp->dim) ||
        pith_meta_int(&m, "block_count", true, &hp->n_layers) ||
        (!ff_per_layer &&
         pith_meta_int(&m, "feed_forward_length", !pith_meta_has(&m, "expert_feed_forward_length"), &hp->ffn_dim)) ||
        pith_meta_int(&m, "attention.head_count", true, &hp->n_heads) ||
        (!kv_per_layer && pith_meta_int(&m, "attention.head_count_kv", false, &hp->n_kv_heads)) ||
        pith_meta_int(&m, "attention.key_length", false, &hp->head_dim) ||
        pith_meta_int(&m, "attention.value_length", false, &value_dim) ||
        pith_meta_int(&m, "rope.dimension_count", false, &rope_dims) ||
        pith_meta_float(&m, "attention.layer_norm_rms_epsilon", true, &hp->norm_eps) ||
        pith_meta_float(&m, "rope.freq_base", false, &hp->rope_theta) ||
        pith_meta_int(&m, "=tokenizer.ggml.bos_token_id", false, &hp->bos_id) ||
        pith_meta_int(&m, "=tokenizer.ggml.eos_token_id", false, &hp->eos_id) || read_rope_scaling(&m, hp))
        return -1;
    if (hp->n_kv_heads == -1 && !kv_per_layer) hp->n_kv_heads = hp->n_heads;
    if (hp->head_dim <= 0 && hp->n_heads > 0 && hp->dim % hp->n_heads == 0) hp->head_dim = hp->dim / hp->n_heads;
    if (arch && !arch->own_head_widths && value_dim != -1 && value_dim != hp->head_dim)
        return pith_errf(err, "%s: value head size %d differs from key head size %d (not supported)", f->path,
                         value_dim, hp->head_dim);
    if (arch && arch->read_gguf && arch->read_gguf(&m, hp)) return -1;
    /* a partial rotary only where the descriptor reads it itself */
    if (arch && !arch->partial_rotary && rope_dims != -1 && rope_dims != hp->head_dim)
        return pith_errf(err, "%s: RoPE over %d of %d head dimensions (partial rotary) is not supported", f->path,
                         rope_dims, hp->head_dim);

    for (int64_t i = 0; i < pith_gguf_n_tensors(g); i++)
        if (pith_mf_add_tensor(f, pith_gguf_tensor_at(g, i), 0, err)) return -1;

    const pith_gguf_kv *tokens = pith_gguf_find(g, "tokenizer.ggml.tokens");
    const pith_tensor *embd = pith_gguf_find_tensor(g, "token_embd.weight");
    if (tokens && tokens->type == PITH_GGUF_ARRAY)
        hp->n_vocab = tokens->arr_n > INT32_MAX ? INT32_MAX : (int)tokens->arr_n;
    else if (embd)
        hp->n_vocab = embd->ne[1] > INT32_MAX ? INT32_MAX : (int)embd->ne[1];
    return 0;
}
