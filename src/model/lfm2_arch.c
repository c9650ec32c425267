/* LFM2 (Liquid AI): a decoder whose layers mix tokens either by GQA attention (with RMS norms on each Q
 * and K head) or by a gated short convolution: in_proj makes B, C and x from the normed input, the
 * layer outputs out_proj(C * conv(B * x)) with a causal depthwise convolution of width L_cache over
 * positions. Every layer has a SwiGLU feed-forward; the final norm is named embedding_norm in Hugging
 * Face checkpoints and token_embd_norm in GGUF (as llama.cpp names it). See model/arch.h; the forward
 * pass is lfm2.c, written from transformers' modeling_lfm2.py and llama.cpp's src/models/lfm2.cpp.
 *
 * GGUF (arch "lfm2"): lfm2.attention.head_count_kv is one count per layer, 0 for a convolution layer
 * (llama.cpp's convention); lfm2.shortconv.l_cache is the convolution width; Q and K rotate halves.
 * config.json: "layer_types" ("full_attention" / "conv"), else "full_attn_idxs", else every layer
 * attends; "conv_L_cache" (default 3); "norm_eps"; "rope_theta" (default 1e6; also "theta");
 * tied embeddings by default ("tie_embedding" is the original key); the feed-forward width is
 * "intermediate_size" (or "block_ff_dim") adjusted as transformers does under
 * "block_auto_adjust_ff_dim" (default true): int(2 * ff / 3), times "block_ffn_dim_multiplier",
 * rounded up to "block_multiple_of". Convolution biases ("conv_bias": true) are refused. */
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>
#include "format/arch.h"
#include "model/lfm2.h"

static const pith_name_map hf_global[] = {
    {"model.embed_tokens.weight", "token_embd.weight"},
    {"model.embedding_norm.weight", "token_embd_norm.weight"},
    {"lm_head.weight", "output.weight"},
    {NULL, NULL},
};

static const pith_name_map hf_layer[] = {
    {"operator_norm.weight", "attn_norm.weight"},
    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.k_proj.weight", "attn_k.weight"},
    {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.out_proj.weight", "attn_output.weight"},
    {"self_attn.q_layernorm.weight", "attn_q_norm.weight"},
    {"self_attn.k_layernorm.weight", "attn_k_norm.weight"},
    {"conv.conv.weight", "shortconv.conv.weight"},
    {"conv.in_proj.weight", "shortconv.in_proj.weight"},
    {"conv.out_proj.weight", "shortconv.out_proj.weight"},
    {"ffn_norm.weight", "ffn_norm.weight"},
    {"feed_forward.w1.weight", "ffn_gate.weight"},
    {"feed_forward.w3.weight", "ffn_up.weight"},
    {"feed_forward.w2.weight", "ffn_down.weight"},
    {NULL, NULL},
};

static bool attn_layer(const pith_hparams *hp, int l) { return !pith_layer_bit(hp->layer_recurrent, l); }
static bool conv_layer(const pith_hparams *hp, int l) { return pith_layer_bit(hp->layer_recurrent, l); }

static const pith_tensor_spec global[] = {
    {"token_embd.weight", PITH_D_DIM, PITH_D_VOCAB, PITH_REQUIRED, NULL},
    {"token_embd_norm.weight", PITH_D_DIM, PITH_D_NONE, PITH_REQUIRED, NULL},
    {"output.weight", PITH_D_DIM, PITH_D_VOCAB, PITH_OPTIONAL, NULL},
    {NULL, 0, 0, 0, NULL},
};

/* shortconv.in_proj ({dim, 3 dim}) and shortconv.conv ({L_cache, dim}; Hugging Face {L_cache, 1, dim})
 * have no symbolic shape: lfm2.c checks them. */
static const pith_tensor_spec layer[] = {
    {"attn_norm.weight", PITH_D_DIM, PITH_D_NONE, PITH_REQUIRED, NULL},
    {"attn_q.weight", PITH_D_DIM, PITH_D_Q, PITH_REQUIRED, attn_layer},
    {"attn_k.weight", PITH_D_DIM, PITH_D_KV, PITH_REQUIRED, attn_layer},
    {"attn_v.weight", PITH_D_DIM, PITH_D_KV, PITH_REQUIRED, attn_layer},
    {"attn_output.weight", PITH_D_Q, PITH_D_DIM, PITH_REQUIRED, attn_layer},
    {"attn_q_norm.weight", PITH_D_HEAD, PITH_D_NONE, PITH_REQUIRED, attn_layer},
    {"attn_k_norm.weight", PITH_D_HEAD, PITH_D_NONE, PITH_REQUIRED, attn_layer},
    {"shortconv.out_proj.weight", PITH_D_DIM, PITH_D_DIM, PITH_REQUIRED, conv_layer},
    {"ffn_norm.weight", PITH_D_DIM, PITH_D_NONE, PITH_REQUIRED, NULL},
    {"ffn_gate.weight", PITH_D_DIM, PITH_D_FFN, PITH_REQUIRED, NULL},
    {"ffn_up.weight", PITH_D_DIM, PITH_D_FFN, PITH_REQUIRED, NULL},
    {"ffn_down.weight", PITH_D_FFN, PITH_D_DIM, PITH_REQUIRED, NULL},
    {NULL, 0, 0, 0, NULL},
};

static int lfm2_read_gguf(const pith_meta *m, pith_hparams *hp) {
    if (pith_meta_int(m, "shortconv.l_cache", true, &hp->conv_kernel)) return -1;
    char key[96];
    snprintf(key, sizeof key, "%s.attention.head_count_kv", m->arch);
    const pith_gguf_kv *kv = pith_gguf_find(m->gguf, key);
    if (!kv || kv->type != PITH_GGUF_ARRAY) {
        if (hp->n_kv_heads == -1) hp->n_kv_heads = hp->n_heads;
        return 0; /* one count for every layer: no convolution layers */
    }
    if (kv->arr_n != (uint64_t)hp->n_layers || hp->n_layers > PITH_MAX_LAYERS)
        return pith_errf(m->err, "%s: %s has %llu entries, expected one per layer (%d)", m->path, key,
                         (unsigned long long)kv->arr_n, hp->n_layers);
    int most = 0;
    for (int l = 0; l < hp->n_layers; l++) {
        int64_t v;
        if (!pith_gguf_arr_i64(kv, (uint64_t)l, &v) || v < 0 || v > hp->n_heads)
            return pith_errf(m->err, "%s: %s entry %d is not a head count in 0..%d", m->path, key, l, hp->n_heads);
        if (most && v && v != most)
            return pith_errf(m->err, "%s: %s: attention layers with different KV head counts (%d, %lld)", m->path,
                             key, most, (long long)v);
        if (v) most = (int)v;
        pith_layer_set(hp->layer_recurrent, l, v == 0);
    }
    hp->n_kv_heads = most ? most : hp->n_heads;
    return 0;
}

static int lfm2_read_hf(const pith_meta *m, pith_hparams *hp) {
    bool tied = true, conv_bias = false, adjust = true, found;
    int multiple = 256, ff = hp->ffn_dim;
    float mult = 1.0f;
    hp->conv_kernel = 3;
    hp->rope_theta = 1e6f;
    if (pith_meta_float(m, "theta", false, &hp->rope_theta) || pith_meta_float(m, "rope_theta", false, &hp->rope_theta) ||
        pith_meta_float(m, "norm_eps", false, &hp->norm_eps) || pith_meta_bool(m, "tie_embedding", &tied) ||
        pith_meta_bool(m, "tie_word_embeddings", &tied) || pith_meta_int(m, "conv_L_cache", false, &hp->conv_kernel) ||
        pith_meta_bool(m, "conv_bias", &conv_bias) || pith_meta_int(m, "block_ff_dim", false, &ff) ||
        pith_meta_bool(m, "block_auto_adjust_ff_dim", &adjust) ||
        pith_meta_int(m, "block_multiple_of", false, &multiple) ||
        pith_meta_float(m, "block_ffn_dim_multiplier", false, &mult))
        return -1;
    hp->tied_embeddings = tied;
    if (conv_bias) return pith_errf(m->err, "%s: \"conv_bias\": true is not supported", m->path);
    if (adjust) {
        if (multiple < 1) return pith_errf(m->err, "%s: \"block_multiple_of\" is %d, expected a positive count", m->path, multiple);
        ff = (int)(2.0 * ff / 3);
        ff = (int)(mult * ff);
        ff = multiple * ((ff + multiple - 1) / multiple);
    }
    hp->ffn_dim = ff;
    /* layer_types, else full_attn_idxs, else every layer attends */
    uint64_t attn[PITH_MAX_LAYERS / 64] = {0};
    if (pith_meta_layers(m, "layer_types", hp->n_layers, "full_attention", attn, &found)) return -1;
    if (!found && pith_meta_has(m, "full_attn_idxs")) {
        const cJSON *idx = cJSON_GetObjectItemCaseSensitive((const cJSON *)m->json, "full_attn_idxs");
        if (!cJSON_IsArray(idx)) return pith_errf(m->err, "%s: \"full_attn_idxs\" is not a list", m->path);
        for (const cJSON *j = idx->child; j; j = j->next) {
            if (!cJSON_IsNumber(j) || j->valuedouble < 0 || j->valuedouble >= hp->n_layers ||
                j->valuedouble != (int)j->valuedouble)
                return pith_errf(m->err, "%s: \"full_attn_idxs\" holds something other than a layer index", m->path);
            pith_layer_set(attn, (int)j->valuedouble, true);
        }
        found = true;
    }
    for (int l = 0; l < hp->n_layers && l < PITH_MAX_LAYERS; l++)
        pith_layer_set(hp->layer_recurrent, l, found && !pith_layer_bit(attn, l));
    return 0;
}

static int lfm2_check(const pith_hparams *hp, const char *path, pith_err *err) {
    bool any = false;
    for (int l = 0; l < hp->n_layers; l++) any |= pith_layer_bit(hp->layer_recurrent, l);
    if (any && (hp->conv_kernel < 2 || hp->conv_kernel > PITH_LFM2_MAX_CONV))
        return pith_errf(err, "%s: short convolution width %d is not in 2..%d", path, hp->conv_kernel, PITH_LFM2_MAX_CONV);
    return 0;
}

const pith_arch pith_arch_lfm2 = {
    .name = "lfm2",
    .hf_archs = (const char *const[]){"Lfm2ForCausalLM", NULL},
    .hf_model_types = (const char *const[]){"lfm2", NULL},
    .rope_gguf = PITH_ROPE_HALF,
    .rope_hf = PITH_ROPE_HALF,
    .hf_global = hf_global,
    .hf_layer = hf_layer,
    .global = global,
    .layer = layer,
    .read_gguf = lfm2_read_gguf,
    .read_hf = lfm2_read_hf,
    .check = lfm2_check,
    .build = pith_lfm2_build,
};
