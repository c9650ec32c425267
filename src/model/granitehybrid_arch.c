/* Granite 4.0-H (IBM; transformers' GraniteMoeHybridForCausalLM, llama.cpp's "granitehybrid"): a
 * decoder whose layers mix tokens either by Mamba2 (most layers) or by GQA attention (RoPE only when
 * position_embedding_type is "rope"; Granite 4.0-H uses none), each followed by a SwiGLU FFN, the
 * "shared MLP", plus a routed mixture of experts when num_local_experts > 0 (top-k of the router
 * logits, softmax over the chosen: model/moe.h with norm_topk). Granite's multipliers: embeddings times
 * embedding_multiplier, each block's output times residual_multiplier before it joins the residual,
 * attention scores times attention_multiplier (instead of 1/sqrt(head_dim)), logits divided by
 * logits_scaling. See model/arch.h; the forward pass is granitehybrid.c, written from transformers'
 * modeling_granitemoehybrid.py and llama.cpp's src/models/granite-hybrid.cpp and its Mamba2 layer.
 *
 * Mamba2 layer (per token, n_heads heads of head_dim, n_groups B/C groups of d_state, inner = heads *
 * head_dim): ssm_in gives [z (inner) | xBC (inner + 2 groups d_state) | dt (heads)]; xBC through the
 * causal depthwise convolution (ssm_conv1d, width conv_kernel, with its bias) and SiLU into x, B, C;
 * the SSD scan (backend/cpu/recurrent.h) with ssm_dt.bias, ssm_a = -exp(A_log) and the skip ssm_d;
 * y * silu(z), RMS-normed with ssm_norm (per B/C group in GGUF files, as llama.cpp and Mamba2's own code
 * do; over the whole inner width in Hugging Face ones, as transformers' Granite code does: the same
 * function when n_groups is 1, as in every Granite 4.0-H), then ssm_out.
 * The hyper-parameters live in the ssm_* fields of pith_hparams (see modelfile.h).
 *
 * GGUF (arch "granitehybrid"): attention.head_count_kv is one count per layer, 0 for a Mamba2 layer;
 * ssm.conv_kernel, ssm.state_size (d_state), ssm.group_count, ssm.time_step_rank (heads), ssm.inner_size;
 * embedding_scale, residual_scale, attention.scale, logit_scale; rope.scaling.finetuned true means
 * RoPE (llama.cpp's convention: its converter writes it for Bamba only); expert_count, expert_used_count,
 * expert_feed_forward_length, expert_shared_feed_forward_length. The dense FFN is ffn_{gate,up,down},
 * with experts the shared MLP is ffn_{gate,up,down}_shexp next to ffn_gate_inp and ffn_*_exps. Q and K
 * of attention layers are stored for adjacent-pair RoPE (the converter permutes them like Llama's).
 * config.json: "layer_types" ("mamba" / "attention"; absent: every layer is Mamba2), "mamba_n_heads",
 * "mamba_n_groups", "mamba_d_state", "mamba_d_head" ("auto": inner / heads), "mamba_d_conv",
 * "mamba_expand", "mamba_conv_bias", "mamba_proj_bias" (refused), "shared_intermediate_size",
 * "num_local_experts" (transformers' default 8), "num_experts_per_tok", "intermediate_size" (the
 * experts' width), "position_embedding_type", the four multipliers; tensors mamba.in_proj, conv1d,
 * dt_bias, A_log, D, norm, out_proj; shared_mlp.input_linear ([gate | up] fused, as ffn_gate_up) and
 * output_linear; block_sparse_moe.router.layer, input_linear and output_linear (3-D, experts first). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "format/arch.h"
#include "model/granitehybrid.h"
#include "model/mamba2.h"
#include "model/moe_arch.h"

static const pith_name_map hf_global[] = {
    {"model.embed_tokens.weight", "token_embd.weight"},
    {"model.norm.weight", "output_norm.weight"},
    {"lm_head.weight", "output.weight"},
    {NULL, NULL},
};

static const pith_name_map hf_layer[] = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"post_attention_layernorm.weight", "ffn_norm.weight"},
    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.k_proj.weight", "attn_k.weight"},
    {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"mamba.in_proj.weight", "ssm_in.weight"},
    {"mamba.conv1d.weight", "ssm_conv1d.weight"},
    {"mamba.conv1d.bias", "ssm_conv1d.bias"},
    {"mamba.dt_bias", "ssm_dt.bias"},
    {"mamba.A_log", "ssm_a"},
    {"mamba.D", "ssm_d"},
    {"mamba.norm.weight", "ssm_norm.weight"},
    {"mamba.out_proj.weight", "ssm_out.weight"},
    {"shared_mlp.input_linear.weight", "ffn_gate_up.weight"},
    {"shared_mlp.output_linear.weight", "ffn_down.weight"},
    {"block_sparse_moe.router.layer.weight", "ffn_gate_inp.weight"},
    {"block_sparse_moe.input_linear.weight", "ffn_gate_up_exps.weight"},
    {"block_sparse_moe.output_linear.weight", "ffn_down_exps.weight"},
    {NULL, NULL},
};

static bool attn_layer(const pith_hparams *hp, int l) { return !pith_layer_bit(hp->layer_recurrent, l); }

static const pith_tensor_spec global[] = {
    {"token_embd.weight", PITH_D_DIM, PITH_D_VOCAB, PITH_REQUIRED, NULL},
    {"output_norm.weight", PITH_D_DIM, PITH_D_NONE, PITH_REQUIRED, NULL},
    {"output.weight", PITH_D_DIM, PITH_D_VOCAB, PITH_OPTIONAL, NULL},
    {NULL, 0, 0, 0, NULL},
};

/* The Mamba2 tensors and the FFNs (named by format and by whether there are experts) have no symbolic
 * shape here: granitehybrid.c checks them. */
static const pith_tensor_spec layer[] = {
    {"attn_norm.weight", PITH_D_DIM, PITH_D_NONE, PITH_REQUIRED, NULL},
    {"ffn_norm.weight", PITH_D_DIM, PITH_D_NONE, PITH_REQUIRED, NULL},
    {"attn_q.weight", PITH_D_DIM, PITH_D_Q, PITH_REQUIRED, attn_layer},
    {"attn_k.weight", PITH_D_DIM, PITH_D_KV, PITH_REQUIRED, attn_layer},
    {"attn_v.weight", PITH_D_DIM, PITH_D_KV, PITH_REQUIRED, attn_layer},
    {"attn_output.weight", PITH_D_Q, PITH_D_DIM, PITH_REQUIRED, attn_layer},
    {NULL, 0, 0, 0, NULL},
};

static void set_all(uint64_t *mask, int n_layers, bool on) {
    for (int l = 0; l < n_layers && l < PITH_MAX_LAYERS; l++) pith_layer_set(mask, l, on);
}

static int gh_read_gguf(const pith_meta *m, pith_hparams *hp) {
    pith_granite_params *P = pith_arch_params(hp);
    bool rope = false;
    if (pith_mamba2_read_gguf(m, hp) ||
        pith_meta_float(m, "embedding_scale", false, &P->embedding_scale) ||
        pith_meta_float(m, "residual_scale", false, &P->residual_scale) ||
        pith_meta_float(m, "attention.scale", false, &hp->query_scale) ||
        pith_meta_float(m, "logit_scale", false, &P->logit_scale) ||
        pith_meta_bool(m, "rope.scaling.finetuned", &rope) || pith_moe_read_gguf(m, hp, true))
        return -1;
    set_all(hp->layer_no_rope, hp->n_layers, !rope);
    if (hp->n_experts > 0) {
        if (hp->expert_shared_ffn_dim <= 0)
            return pith_errf(m->err, "%s: %s.expert_shared_feed_forward_length is missing (the shared MLP's width)",
                             m->path, m->arch);
        hp->ffn_dim = hp->expert_shared_ffn_dim;
    } else if (hp->expert_shared_ffn_dim > 0) {
        hp->ffn_dim = hp->expert_shared_ffn_dim;
    }
    /* per-layer KV head counts: 0 marks a Mamba2 layer */
    char key[96];
    snprintf(key, sizeof key, "%s.attention.head_count_kv", m->arch);
    const pith_gguf_kv *kv = pith_gguf_find(m->gguf, key);
    if (!kv || kv->type != PITH_GGUF_ARRAY) {
        if (hp->n_kv_heads == -1) hp->n_kv_heads = hp->n_heads;
        return 0; /* one count for every layer: attention only */
    }
    if (kv->arr_n != (uint64_t)hp->n_layers || hp->n_layers > PITH_MAX_LAYERS)
        return pith_errf(m->err, "%s: %s has %llu entries, expected one per layer (%d)", m->path, key,
                         (unsigned long long)kv->arr_n, hp->n_layers);
    int heads = 0;
    for (int l = 0; l < hp->n_layers; l++) {
        int64_t v;
        if (!pith_gguf_arr_i64(kv, (uint64_t)l, &v) || v < 0 || v > hp->n_heads)
            return pith_errf(m->err, "%s: %s entry %d is not a head count in 0..%d", m->path, key, l, hp->n_heads);
        if (heads && v && v != heads)
            return pith_errf(m->err, "%s: %s: attention layers with different KV head counts (%d, %lld)", m->path,
                             key, heads, (long long)v);
        if (v) heads = (int)v;
        pith_layer_set(hp->layer_recurrent, l, v == 0);
    }
    hp->n_kv_heads = heads ? heads : hp->n_heads;
    return 0;
}

static int gh_read_hf(const pith_meta *m, pith_hparams *hp) {
    pith_granite_params *P = pith_arch_params(hp);
    int expand = 2, d_head = -1, shared = 1024;
    bool conv_bias = true, proj_bias = false, found;
    char pos[32] = "", d_head_s[16] = "";
    hp->conv_kernel = 4, P->ssm.d_state = 256, P->ssm.groups = 1, P->ssm.heads = 128;
    hp->n_experts = 8, hp->n_experts_used = 2, hp->expert_norm_topk = true;
    P->embedding_scale = P->residual_scale = hp->query_scale = P->logit_scale = 1.0f;
    if (pith_meta_int(m, "mamba_n_heads", false, &P->ssm.heads) ||
        pith_meta_int(m, "mamba_n_groups", false, &P->ssm.groups) ||
        pith_meta_int(m, "mamba_d_state", false, &P->ssm.d_state) ||
        pith_meta_int(m, "mamba_d_conv", false, &hp->conv_kernel) ||
        pith_meta_int(m, "mamba_expand", false, &expand) || pith_meta_bool(m, "mamba_conv_bias", &conv_bias) ||
        pith_meta_bool(m, "mamba_proj_bias", &proj_bias) ||
        pith_meta_int(m, "shared_intermediate_size", false, &shared) ||
        pith_meta_int(m, "num_local_experts", false, &hp->n_experts) ||
        pith_meta_int(m, "num_experts_per_tok", false, &hp->n_experts_used) ||
        pith_meta_float(m, "embedding_multiplier", false, &P->embedding_scale) ||
        pith_meta_float(m, "residual_multiplier", false, &P->residual_scale) ||
        pith_meta_float(m, "attention_multiplier", false, &hp->query_scale) ||
        pith_meta_float(m, "logits_scaling", false, &P->logit_scale) ||
        pith_meta_str(m, "position_embedding_type", pos, sizeof pos))
        return -1;
    if (proj_bias) return pith_errf(m->err, "%s: \"mamba_proj_bias\": true is not supported", m->path);
    if (!conv_bias) return pith_errf(m->err, "%s: \"mamba_conv_bias\": false is not supported", m->path);
    if (pos[0] && strcmp(pos, "rope") && strcmp(pos, "nope"))
        return pith_errf(m->err, "%s: position_embedding_type \"%s\" is not supported (\"rope\" or none)", m->path, pos);
    set_all(hp->layer_no_rope, hp->n_layers, strcmp(pos, "rope") != 0);
    /* "mamba_d_head": a number, or "auto" (inner / heads) */
    const cJSON *dh = cJSON_GetObjectItemCaseSensitive((const cJSON *)m->json, "mamba_d_head");
    if (cJSON_IsString(dh)) {
        if (pith_meta_str(m, "mamba_d_head", d_head_s, sizeof d_head_s)) return -1;
        if (strcmp(d_head_s, "auto")) return pith_errf(m->err, "%s: \"mamba_d_head\" is \"%s\", expected a number or \"auto\"", m->path, d_head_s);
    } else if (pith_meta_int(m, "mamba_d_head", false, &d_head)) {
        return -1;
    }
    if (expand < 1 || expand > 64) return pith_errf(m->err, "%s: \"mamba_expand\" %d out of range", m->path, expand);
    int inner = expand * hp->dim;
    if (P->ssm.heads < 1 || (d_head < 0 && inner % P->ssm.heads))
        return pith_errf(m->err, "%s: %d Mamba heads do not divide the inner width %d", m->path, P->ssm.heads, inner);
    if (d_head < 0) d_head = inner / P->ssm.heads;
    if (d_head * P->ssm.heads != inner)
        return pith_errf(m->err, "%s: %d Mamba heads of %d make %d, not the inner width %d", m->path,
                         P->ssm.heads, d_head, d_head * P->ssm.heads, inner);
    P->ssm.head_dim = d_head;
    if (hp->n_experts > 0) {
        hp->expert_ffn_dim = hp->ffn_dim; /* intermediate_size */
        hp->expert_shared_ffn_dim = shared;
        hp->expert_gating = PITH_GATING_SOFTMAX;
    }
    hp->ffn_dim = shared;
    uint64_t attn[PITH_MAX_LAYERS / 64] = {0};
    if (pith_meta_layers(m, "layer_types", hp->n_layers, "attention", attn, &found)) return -1;
    for (int l = 0; l < hp->n_layers && l < PITH_MAX_LAYERS; l++)
        pith_layer_set(hp->layer_recurrent, l, !found || !pith_layer_bit(attn, l));
    return 0;
}

static int gh_check(const pith_hparams *hp, const char *path, pith_err *err) {
    const pith_granite_params *P = pith_arch_params(hp);
    bool any = false;
    for (int l = 0; l < hp->n_layers; l++) any |= pith_layer_bit(hp->layer_recurrent, l);
    if (any && pith_mamba2_check_hparams(hp, path, err)) return -1;
    const float scales[] = {P->embedding_scale, P->residual_scale, P->logit_scale};
    for (int i = 0; i < 3; i++)
        if (!(scales[i] >= 0 && isfinite(scales[i])))
            return pith_errf(err, "%s: a Granite multiplier (%g) is not a non-negative number", path, scales[i]);
    return pith_moe_check_hparams(hp, false, path, err);
}

/* Hugging Face stores A_log; GGUF (and the forward pass) holds ssm_a = -exp(A_log). */
static int gh_finish(pith_model_file *f, pith_hparams *hp, pith_err *err) { return pith_mamba2_finish_hf(f, hp, err); }

const pith_arch pith_arch_granitehybrid = {
    .name = "granitehybrid",
    .hf_archs = (const char *const[]){"GraniteMoeHybridForCausalLM", NULL},
    .hf_model_types = (const char *const[]){"granitemoehybrid", NULL},
    .rope_gguf = PITH_ROPE_ADJACENT,
    .rope_hf = PITH_ROPE_HALF,
    .hf_global = hf_global,
    .hf_layer = hf_layer,
    .global = global,
    .layer = layer,
    .read_gguf = gh_read_gguf,
    .read_hf = gh_read_hf,
    .check = gh_check,
    .finish = gh_finish,
    .build = pith_granitehybrid_build,
    .params_size = sizeof(pith_granite_params),
};
