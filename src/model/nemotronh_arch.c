/* Nemotron-H (NVIDIA; transformers' NemotronHForCausalLM, model_type "nemotron_h"; llama.cpp's
 * "nemotron_h"): a decoder whose every layer is exactly one block, x = x + mixer(rmsnorm(x)), the mixer
 * being a Mamba2 layer (model/mamba2.h), GQA attention without positional encoding (no RoPE: transformers'
 * NemotronHAttention applies none, llama.cpp's rope type is NONE; scores times 1/sqrt(head_dim)), or a
 * non-gated MLP, down(relu(up(x))^2) ("relu2"). There is no FFN inside a Mamba2 or attention layer. See
 * model/arch.h; the forward pass is nemotronh.c, written from transformers' modeling_nemotron_h.py and
 * llama.cpp's src/models/nemotron-h.cpp.
 *
 * The Mamba2 layer normalises its gated output per B/C group (MambaRMSNormGated with group_size
 * d_inner / n_groups) in both formats; the inner width is mamba_num_heads x mamba_head_dim.
 *
 * GGUF (arch "nemotron_h"): attention.head_count_kv and feed_forward_length are one value per layer; as
 * llama.cpp decides, a layer with 0 KV heads and 0 feed-forward width is Mamba2, one with KV heads is
 * attention and one with a feed-forward width is an MLP (both non-zero is refused); ssm.conv_kernel,
 * ssm.state_size, ssm.group_count, ssm.time_step_rank (heads), ssm.inner_size. Tensors: attn_norm (every
 * layer's one norm); ssm_in, ssm_conv1d (+ bias), ssm_dt.bias, ssm_a, ssm_d, ssm_norm, ssm_out;
 * attn_q/k/v/output; ffn_up, ffn_down.
 * config.json: "hybrid_override_pattern" (one character per layer: 'M' Mamba2, '*' attention, '-' MLP;
 * 'E', the mixture of experts of later models, is refused), "mamba_num_heads", "mamba_head_dim",
 * "ssm_state_size", "n_groups", "conv_kernel", "layer_norm_epsilon" (its RMSNorm epsilon, default 1e-5),
 * "intermediate_size" (the MLP's width); "use_conv_bias" false, "use_bias", "mlp_bias" or
 * "attention_bias" true, activations other than "relu2" / "silu" and a "time_step_limit" that clamps
 * (anything but [0, inf], which config.json spells [0.0, Infinity]) are refused. Tensors live under
 * "backbone.": embeddings, layers.N.norm, layers.N.mixer.{in_proj, conv1d, dt_bias, A_log, D, norm,
 * out_proj, q_proj, k_proj, v_proj, o_proj, up_proj, down_proj}, norm_f; lm_head beside it. */
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "format/arch.h"
#include "model/mamba2.h"
#include "model/nemotronh.h"

static const pith_name_map hf_global[] = {
    {"backbone.embeddings.weight", "token_embd.weight"},
    {"backbone.norm_f.weight", "output_norm.weight"},
    {"lm_head.weight", "output.weight"},
    {NULL, NULL},
};

static const pith_name_map hf_layer[] = {
    {"norm.weight", "attn_norm.weight"},
    {"mixer.in_proj.weight", "ssm_in.weight"},
    {"mixer.conv1d.weight", "ssm_conv1d.weight"},
    {"mixer.conv1d.bias", "ssm_conv1d.bias"},
    {"mixer.dt_bias", "ssm_dt.bias"},
    {"mixer.A_log", "ssm_a"},
    {"mixer.D", "ssm_d"},
    {"mixer.norm.weight", "ssm_norm.weight"},
    {"mixer.out_proj.weight", "ssm_out.weight"},
    {"mixer.q_proj.weight", "attn_q.weight"},
    {"mixer.k_proj.weight", "attn_k.weight"},
    {"mixer.v_proj.weight", "attn_v.weight"},
    {"mixer.o_proj.weight", "attn_output.weight"},
    {"mixer.up_proj.weight", "ffn_up.weight"},
    {"mixer.down_proj.weight", "ffn_down.weight"},
    {NULL, NULL},
};

static bool mlp_layer(const pith_hparams *hp, int l) { return pith_layer_bit(hp->layer_mlp, l); }
static bool attn_layer(const pith_hparams *hp, int l) {
    return !pith_layer_bit(hp->layer_recurrent, l) && !pith_layer_bit(hp->layer_mlp, l);
}

static const pith_tensor_spec global[] = {
    {"token_embd.weight", PITH_D_DIM, PITH_D_VOCAB, PITH_REQUIRED, NULL},
    {"output_norm.weight", PITH_D_DIM, PITH_D_NONE, PITH_REQUIRED, NULL},
    {"output.weight", PITH_D_DIM, PITH_D_VOCAB, PITH_OPTIONAL, NULL},
    {NULL, 0, 0, 0, NULL},
};

/* The Mamba2 tensors have no symbolic shape here: model/mamba2.c checks them. */
static const pith_tensor_spec layer[] = {
    {"attn_norm.weight", PITH_D_DIM, PITH_D_NONE, PITH_REQUIRED, NULL},
    {"attn_q.weight", PITH_D_DIM, PITH_D_Q, PITH_REQUIRED, attn_layer},
    {"attn_k.weight", PITH_D_DIM, PITH_D_KV, PITH_REQUIRED, attn_layer},
    {"attn_v.weight", PITH_D_DIM, PITH_D_KV, PITH_REQUIRED, attn_layer},
    {"attn_output.weight", PITH_D_Q, PITH_D_DIM, PITH_REQUIRED, attn_layer},
    {"ffn_up.weight", PITH_D_DIM, PITH_D_FFN, PITH_REQUIRED, mlp_layer},
    {"ffn_down.weight", PITH_D_FFN, PITH_D_DIM, PITH_REQUIRED, mlp_layer},
    {NULL, 0, 0, 0, NULL},
};

/* A per-layer count: a GGUF array of n_layers entries, or one value for every layer. */
static int per_layer(const pith_meta *m, const char *name, int n_layers, int max, int *out) {
    char key[96];
    snprintf(key, sizeof key, "%s.%s", m->arch, name);
    const pith_gguf_kv *kv = pith_gguf_find(m->gguf, key);
    if (!kv) return pith_errf(m->err, "%s: %s is missing (one value per layer)", m->path, key);
    if (kv->type != PITH_GGUF_ARRAY) {
        int v = -1;
        if (pith_meta_int(m, name, true, &v)) return -1;
        if (v < 0 || v > max) return pith_errf(m->err, "%s: %s %d is out of range 0..%d", m->path, key, v, max);
        for (int l = 0; l < n_layers; l++) out[l] = v;
        return 0;
    }
    if (kv->arr_n != (uint64_t)n_layers)
        return pith_errf(m->err, "%s: %s has %llu entries, expected one per layer (%d)", m->path, key,
                         (unsigned long long)kv->arr_n, n_layers);
    for (int l = 0; l < n_layers; l++) {
        int64_t v;
        if (!pith_gguf_arr_i64(kv, (uint64_t)l, &v) || v < 0 || v > max)
            return pith_errf(m->err, "%s: %s entry %d is not a count in 0..%d", m->path, key, l, max);
        out[l] = (int)v;
    }
    return 0;
}

/* The common width of the non-zero entries (0 when none); differing ones are refused. */
static int common_width(const pith_meta *m, const char *what, const int *v, int n, int *out) {
    *out = 0;
    for (int l = 0; l < n; l++) {
        if (!v[l]) continue;
        if (*out && v[l] != *out)
            return pith_errf(m->err, "%s: %s differs between layers (%d, %d): not supported", m->path, what, *out, v[l]);
        *out = v[l];
    }
    return 0;
}

static void set_all(uint64_t *mask, int n_layers) {
    for (int l = 0; l < n_layers && l < PITH_MAX_LAYERS; l++) pith_layer_set(mask, l, true);
}

static int nh_read_gguf(const pith_meta *m, pith_hparams *hp) {
    if (hp->n_layers < 1 || hp->n_layers > PITH_MAX_LAYERS)
        return pith_errf(m->err, "%s: %d layers out of range", m->path, hp->n_layers);
    int kv[PITH_MAX_LAYERS], ff[PITH_MAX_LAYERS]; /* 32 KiB of stack */
    if (pith_mamba2_read_gguf(m, hp) || per_layer(m, "attention.head_count_kv", hp->n_layers, hp->n_heads, kv) ||
        per_layer(m, "feed_forward_length", hp->n_layers, 1 << 20, ff) ||
        common_width(m, "attention.head_count_kv", kv, hp->n_layers, &hp->n_kv_heads) ||
        common_width(m, "feed_forward_length", ff, hp->n_layers, &hp->ffn_dim))
        return -1;
    for (int l = 0; l < hp->n_layers && l < PITH_MAX_LAYERS; l++) {
        if (kv[l] && ff[l])
            return pith_errf(m->err, "%s: layer %d has both KV heads and a feed-forward width (one block per layer)",
                             m->path, l);
        pith_layer_set(hp->layer_recurrent, l, !kv[l] && !ff[l]);
        pith_layer_set(hp->layer_mlp, l, ff[l] > 0);
    }
    if (!hp->n_kv_heads) hp->n_kv_heads = hp->n_heads;
    if (!hp->ffn_dim) hp->ffn_dim = 1; /* no MLP layer: the width is never used */
    set_all(hp->layer_no_rope, hp->n_layers);
    return 0;
}

/* config.json's flags whose true (or other) value this forward pass does not implement. */
static int refuse_flag(const pith_meta *m, const char *key, bool supported) {
    bool v = supported;
    if (pith_meta_bool(m, key, &v)) return -1;
    return v != supported ? pith_errf(m->err, "%s: \"%s\": %s is not supported", m->path, key, v ? "true" : "false") : 0;
}

static int refuse_act(const pith_meta *m, const char *key, const char *want) {
    char act[32] = "";
    if (pith_meta_str(m, key, act, sizeof act)) return -1;
    return act[0] && strcmp(act, want) ? pith_errf(m->err, "%s: \"%s\" \"%s\" is not supported (\"%s\")", m->path, key, act, want)
                                       : 0;
}

/* "time_step_limit" [lo, hi] clamps dt after its softplus; the default (0, inf) clamps nothing, and that is
 * all the SSD kernel does (recurrent.h). */
static int refuse_dt_clamp(const pith_meta *m) {
    const cJSON *lim = cJSON_GetObjectItemCaseSensitive((const cJSON *)m->json, "time_step_limit");
    if (!lim || cJSON_IsNull(lim)) return 0;
    const cJSON *lo = cJSON_GetArrayItem(lim, 0), *hi = cJSON_GetArrayItem(lim, 1);
    if (!cJSON_IsArray(lim) || cJSON_GetArraySize(lim) != 2 || !cJSON_IsNumber(lo) || !cJSON_IsNumber(hi))
        return pith_errf(m->err, "%s: \"time_step_limit\" is not a pair of numbers", m->path);
    if (lo->valuedouble > 0 || hi->valuedouble < 1e30)
        return pith_errf(m->err, "%s: \"time_step_limit\" [%g, %g] clamps the time step: not supported (only [0, inf])",
                         m->path, lo->valuedouble, hi->valuedouble);
    return 0;
}

static int nh_read_hf(const pith_meta *m, pith_hparams *hp) {
    pith_mamba2_params *P = pith_arch_params(hp);
    char pattern[PITH_MAX_LAYERS + 2] = "";
    hp->conv_kernel = 4, P->d_state = 128, P->groups = 8, P->heads = 128;
    P->head_dim = 64, hp->norm_eps = 1e-5f;
    if (pith_meta_int(m, "mamba_num_heads", false, &P->heads) ||
        pith_meta_int(m, "mamba_head_dim", false, &P->head_dim) ||
        pith_meta_int(m, "ssm_state_size", false, &P->d_state) ||
        pith_meta_int(m, "n_groups", false, &P->groups) ||
        pith_meta_int(m, "conv_kernel", false, &hp->conv_kernel) ||
        pith_meta_float(m, "layer_norm_epsilon", false, &hp->norm_eps) || refuse_flag(m, "use_conv_bias", true) ||
        refuse_flag(m, "use_bias", false) || refuse_flag(m, "mlp_bias", false) ||
        refuse_flag(m, "attention_bias", false) || refuse_act(m, "mlp_hidden_act", "relu2") ||
        refuse_act(m, "mamba_hidden_act", "silu") || refuse_dt_clamp(m) || pith_meta_str(m, "hybrid_override_pattern", pattern, sizeof pattern))
        return -1;
    if ((int)strlen(pattern) != hp->n_layers)
        return pith_errf(m->err, "%s: \"hybrid_override_pattern\" has %zu characters, expected one per layer (%d)",
                         m->path, strlen(pattern), hp->n_layers);
    for (int l = 0; l < hp->n_layers; l++) {
        char c = pattern[l];
        if (c != 'M' && c != '*' && c != '-')
            return pith_errf(m->err, "%s: \"hybrid_override_pattern\" character %d is '%c' (supported: M, *, -)",
                             m->path, l, c);
        pith_layer_set(hp->layer_recurrent, l, c == 'M');
        pith_layer_set(hp->layer_mlp, l, c == '-');
    }
    set_all(hp->layer_no_rope, hp->n_layers);
    return 0;
}

static int nh_check(const pith_hparams *hp, const char *path, pith_err *err) {
    for (int l = 0; l < hp->n_layers; l++)
        if (pith_layer_bit(hp->layer_recurrent, l)) return pith_mamba2_check_hparams(hp, path, err);
    return 0;
}

static int nh_finish(pith_model_file *f, pith_hparams *hp, pith_err *err) { return pith_mamba2_finish_hf(f, hp, err); }

const pith_arch pith_arch_nemotron_h = {
    .name = "nemotron_h",
    .hf_archs = (const char *const[]){"NemotronHForCausalLM", NULL},
    .hf_model_types = (const char *const[]){"nemotron_h", NULL},
    .rope_gguf = PITH_ROPE_HALF,
    .rope_hf = PITH_ROPE_HALF,
    .hf_global = hf_global,
    .hf_layer = hf_layer,
    .hf_layer_prefix = "backbone.layers.",
    .global = global,
    .layer = layer,
    .read_gguf = nh_read_gguf,
    .read_hf = nh_read_hf,
    .check = nh_check,
    .finish = nh_finish,
    .build = pith_nemotronh_build,
    .params_size = sizeof(pith_mamba2_params),
};
