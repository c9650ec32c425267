/* Qwen3.5 (dense, text): a decoder whose layers are Gated DeltaNet (linear attention) layers, with a
 * gated full-attention layer every full_attention_interval-th layer (three DeltaNet layers, then one
 * attention layer, repeated). See model/arch.h; the forward pass is qwen35.c, written from transformers'
 * modeling_qwen3_5.py / modeling_qwen3_next.py and llama.cpp's src/models/qwen35.cpp.
 *
 * Attention layers: attn_q gives each head's query and its output gate side by side ({dim, 2 * heads *
 * head_dim}, per head [query | gate]), RMS norms on each Q and K head, partial RoPE (halves, over the
 * first rope_dim dimensions; M-RoPE sections, which for text are plain RoPE), the attention output times
 * sigmoid(gate). DeltaNet layers: attn_qkv (queries, keys, values) through a causal depthwise convolution
 * of width conv_kernel with SiLU, L2-normed q and k, beta = sigmoid(ssm_beta x), decay g = ssm_a *
 * softplus(ssm_alpha x + ssm_dt.bias) with ssm_a = -exp(A_log), the delta rule, then an RMSNorm of each
 * head gated by silu(attn_gate x) and ssm_out. Every layer: post_attention_norm and a SwiGLU FFN.
 *
 * Norms: Qwen3.5's RMSNorm multiplies by (1 + w) in Hugging Face checkpoints; GGUF stores w + 1 (llama.cpp's
 * converter), so the Hugging Face load adds 1 to every norm except the DeltaNet's gated one (ssm_norm),
 * and turns A_log into ssm_a = -exp(A_log), as the converter does.
 *
 * GGUF (arch "qwen35"): qwen35.ssm.conv_kernel, .ssm.state_size (the head width of q, k and v),
 * .ssm.group_count (query/key heads), .ssm.time_step_rank (value heads), .ssm.inner_size (value width),
 * .full_attention_interval (default 4), .rope.dimension_count (partial rotary), .rope.dimension_sections.
 * llama.cpp repeats query/key heads by tiling (value head h reads query/key head h % groups; its converter
 * reorders the value heads to match), Hugging Face by repeat_interleave (h / (value heads / groups)).
 * config.json: "layer_types" ("linear_attention" / "full_attention") else "full_attention_interval";
 * "linear_conv_kernel_dim", "linear_key_head_dim", "linear_value_head_dim", "linear_num_key_heads",
 * "linear_num_value_heads"; RoPE from "rope_parameters" ("rope_theta", "partial_rotary_factor",
 * "mrope_section") or the same keys at the top level. The MTP head (qwen35_mtp.c): GGUF's
 * qwen35.nextn_predict_layers (block_count counts it), config.json's "mtp_num_hidden_layers". The multimodal Qwen3_5ForConditionalGeneration
 * nests all of this under "text_config" and its text tensors under "model.language_model." (read as
 * "model."; the vision tower's tensors, "model.visual.*", are ignored). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "format/arch.h"
#include "model/moe_arch.h"
#include "model/qwen35.h"

const pith_name_map pith_qwen35_hf_global[] = {
    {"model.embed_tokens.weight", "token_embd.weight"},
    {"model.norm.weight", "output_norm.weight"},
    {"lm_head.weight", "output.weight"},
    {NULL, NULL},
};

/* with qwen35moe's router, shared expert and fused experts (the released checkpoints' gate_up_proj,
 * [experts][2 ffn][dim], each expert's gate rows then its up rows, and down_proj, [experts][dim][ffn]: GGUF's
 * 3-D layout; per-expert tensors are read by name: model/moe.h) */
const pith_name_map pith_qwen35_hf_layer[] = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"post_attention_layernorm.weight", "post_attention_norm.weight"},
    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.k_proj.weight", "attn_k.weight"},
    {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"self_attn.q_norm.weight", "attn_q_norm.weight"},
    {"self_attn.k_norm.weight", "attn_k_norm.weight"},
    {"linear_attn.in_proj_qkv.weight", "attn_qkv.weight"},
    {"linear_attn.in_proj_z.weight", "attn_gate.weight"},
    {"linear_attn.in_proj_b.weight", "ssm_beta.weight"},
    {"linear_attn.in_proj_a.weight", "ssm_alpha.weight"},
    {"linear_attn.conv1d.weight", "ssm_conv1d.weight"},
    {"linear_attn.dt_bias", "ssm_dt.bias"},
    {"linear_attn.A_log", "ssm_a"},
    {"linear_attn.norm.weight", "ssm_norm.weight"},
    {"linear_attn.out_proj.weight", "ssm_out.weight"},
    {"mlp.gate_proj.weight", "ffn_gate.weight"},
    {"mlp.up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
    {"mlp.gate.weight", "ffn_gate_inp.weight"},
    {"mlp.shared_expert.gate_proj.weight", "ffn_gate_shexp.weight"},
    {"mlp.shared_expert.up_proj.weight", "ffn_up_shexp.weight"},
    {"mlp.shared_expert.down_proj.weight", "ffn_down_shexp.weight"},
    {"mlp.shared_expert_gate.weight", "ffn_gate_inp_shexp.weight"},
    {"mlp.experts.gate_up_proj", "ffn_gate_up_exps.weight"},
    {"mlp.experts.down_proj", "ffn_down_exps.weight"},
    {NULL, NULL},
};

/* The MTP head's own tensors (after "mtp."), as blk.{n_layers}.nextn.* like llama.cpp's converter */
const pith_name_map pith_qwen35_hf_mtp[] = {
    {"fc.weight", "nextn.eh_proj.weight"},
    {"pre_fc_norm_embedding.weight", "nextn.enorm.weight"},
    {"pre_fc_norm_hidden.weight", "nextn.hnorm.weight"},
    {"norm.weight", "nextn.shared_head_norm.weight"},
    {NULL, NULL},
};

static bool attn_layer(const pith_hparams *hp, int l) { return !pith_layer_bit(hp->layer_recurrent, l); }

const pith_tensor_spec pith_qwen35_global[] = {
    {"token_embd.weight", PITH_D_DIM, PITH_D_VOCAB, PITH_REQUIRED, NULL},
    {"output_norm.weight", PITH_D_DIM, PITH_D_NONE, PITH_REQUIRED, NULL},
    {"output.weight", PITH_D_DIM, PITH_D_VOCAB, PITH_OPTIONAL, NULL},
    {NULL, 0, 0, 0, NULL},
};

/* attn_q ({dim, 2 Q}) and the DeltaNet tensors have no symbolic shape: qwen35.c checks them. */
const pith_tensor_spec pith_qwen35_layer[] = {
    {"attn_norm.weight", PITH_D_DIM, PITH_D_NONE, PITH_REQUIRED, NULL},
    {"post_attention_norm.weight", PITH_D_DIM, PITH_D_NONE, PITH_REQUIRED, NULL},
    {"attn_k.weight", PITH_D_DIM, PITH_D_KV, PITH_REQUIRED, attn_layer},
    {"attn_v.weight", PITH_D_DIM, PITH_D_KV, PITH_REQUIRED, attn_layer},
    {"attn_output.weight", PITH_D_Q, PITH_D_DIM, PITH_REQUIRED, attn_layer},
    {"attn_q_norm.weight", PITH_D_HEAD, PITH_D_NONE, PITH_REQUIRED, attn_layer},
    {"attn_k_norm.weight", PITH_D_HEAD, PITH_D_NONE, PITH_REQUIRED, attn_layer},
    /* qwen35moe: the experts' tensors are checked by model/moe_load.c */
    {"ffn_gate.weight", PITH_D_DIM, PITH_D_FFN, PITH_REQUIRED, pith_moe_dense_layer},
    {"ffn_up.weight", PITH_D_DIM, PITH_D_FFN, PITH_REQUIRED, pith_moe_dense_layer},
    {"ffn_down.weight", PITH_D_FFN, PITH_D_DIM, PITH_REQUIRED, pith_moe_dense_layer},
    {NULL, 0, 0, 0, NULL},
};

static void every_nth_attends(pith_hparams *hp, int interval) {
    for (int l = 0; l < hp->n_layers && l < PITH_MAX_LAYERS; l++)
        pith_layer_set(hp->layer_recurrent, l, (l + 1) % interval != 0);
}

int pith_qwen35_read_gguf(const pith_meta *m, pith_hparams *hp) {
    pith_qwen35_params *P = pith_arch_params(hp);
    int interval = 4, inner = 0;
    if (pith_meta_int(m, "ssm.conv_kernel", true, &hp->conv_kernel) ||
        pith_meta_int(m, "ssm.state_size", true, &P->gdn_k_dim) ||
        pith_meta_int(m, "ssm.group_count", true, &P->gdn_k_heads) ||
        pith_meta_int(m, "ssm.time_step_rank", true, &P->gdn_v_heads) ||
        pith_meta_int(m, "ssm.inner_size", true, &inner) ||
        pith_meta_int(m, "full_attention_interval", false, &interval) ||
        pith_meta_int(m, "rope.dimension_count", false, &P->rope_dim) ||
        pith_meta_int(m, "nextn_predict_layers", false, &hp->n_mtp_layers))
        return -1;
    /* block_count counts the MTP layers, which follow the decoder's */
    if (hp->n_mtp_layers < 0 || hp->n_mtp_layers >= hp->n_layers)
        return pith_errf(m->err, "%s: nextn_predict_layers %d of %d blocks", m->path, hp->n_mtp_layers, hp->n_layers);
    hp->n_layers -= hp->n_mtp_layers;
    if (interval < 1) return pith_errf(m->err, "%s: full_attention_interval %d is not positive", m->path, interval);
    if (P->gdn_v_heads < 1 || inner % P->gdn_v_heads)
        return pith_errf(m->err, "%s: ssm.inner_size %d is not a multiple of %d value heads", m->path, inner,
                         P->gdn_v_heads);
    P->gdn_v_dim = inner / P->gdn_v_heads;
    every_nth_attends(hp, interval);
    return pith_meta_ints(m, "rope.dimension_sections", 4, 0, 1 << 20, P->rope_sections);
}

int pith_qwen35_read_hf(const pith_meta *m, pith_hparams *hp) {
    pith_qwen35_params *P = pith_arch_params(hp);
    int interval = 4;
    float partial = 1.0f;
    bool found;
    hp->conv_kernel = 4, P->gdn_k_dim = 128, P->gdn_v_dim = 128;
    P->gdn_k_heads = 16, P->gdn_v_heads = 32;
    /* Qwen3_5TextRotaryEmbedding's mrope_section when a Qwen3.5 config has none (Qwen3-Next, which
     * shares this reader, has plain RoPE) */
    char type[32] = "";
    if (pith_meta_str(m, "model_type", type, sizeof type)) return -1;
    if (!strncmp(type, "qwen3_5", 7)) P->rope_sections[0] = 11, P->rope_sections[1] = 11, P->rope_sections[2] = 10;
    if (pith_meta_int(m, "linear_conv_kernel_dim", false, &hp->conv_kernel) ||
        pith_meta_int(m, "linear_key_head_dim", false, &P->gdn_k_dim) ||
        pith_meta_int(m, "linear_value_head_dim", false, &P->gdn_v_dim) ||
        pith_meta_int(m, "linear_num_key_heads", false, &P->gdn_k_heads) ||
        pith_meta_int(m, "linear_num_value_heads", false, &P->gdn_v_heads) ||
        pith_meta_int(m, "full_attention_interval", false, &interval) ||
        pith_meta_int(m, "mtp_num_hidden_layers", false, &hp->n_mtp_layers) ||
        pith_meta_float(m, "partial_rotary_factor", false, &partial))
        return -1;
    if (hp->n_mtp_layers < 0 || hp->n_mtp_layers > 64)
        return pith_errf(m->err, "%s: \"mtp_num_hidden_layers\" is %d", m->path, hp->n_mtp_layers);
    const cJSON *rp = cJSON_GetObjectItemCaseSensitive((const cJSON *)m->json, "rope_parameters");
    if (rp && !cJSON_IsNull(rp)) {
        if (!cJSON_IsObject(rp)) return pith_errf(m->err, "%s: \"rope_parameters\" is not an object", m->path);
        pith_meta r = *m;
        r.json = rp;
        if (pith_meta_float(&r, "rope_theta", false, &hp->rope_theta) ||
            pith_meta_float(&r, "partial_rotary_factor", false, &partial))
            return -1;
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(rp, "rope_type");
        if (type && !(cJSON_IsString(type) && !strcmp(type->valuestring, "default")))
            return pith_errf(m->err, "%s: rope_parameters.rope_type other than \"default\" is not supported", m->path);
        if (pith_meta_ints(&r, "mrope_section", 4, 0, 1 << 20, P->rope_sections)) return -1;
    }
    if (!(partial > 0 && partial <= 1))
        return pith_errf(m->err, "%s: partial_rotary_factor %g is not in (0, 1]", m->path, partial);
    /* transformers: int(head_dim * partial_rotary_factor), head_dim defaulting to hidden / heads */
    int hd = hp->head_dim > 0 ? hp->head_dim : hp->n_heads > 0 ? hp->dim / hp->n_heads : 0;
    P->rope_dim = (int)(hd * (double)partial);
    if (interval < 1) return pith_errf(m->err, "%s: \"full_attention_interval\" is %d, expected a positive count", m->path, interval);
    uint64_t attn[PITH_MAX_LAYERS / 64] = {0};
    if (pith_meta_layers(m, "layer_types", hp->n_layers, "full_attention", attn, &found)) return -1;
    if (!found) every_nth_attends(hp, interval);
    else
        for (int l = 0; l < hp->n_layers && l < PITH_MAX_LAYERS; l++) pith_layer_set(hp->layer_recurrent, l, !pith_layer_bit(attn, l));
    return 0;
}

int pith_qwen35_check(const pith_hparams *hp, const char *path, pith_err *err) {
    const pith_qwen35_params *P = pith_arch_params(hp);
    if (P->rope_dim < 0 || P->rope_dim > hp->head_dim || P->rope_dim % 2)
        return pith_errf(err, "%s: RoPE over %d of %d head dimensions", path, P->rope_dim, hp->head_dim);
    if (hp->conv_kernel < 1 || hp->conv_kernel > 16)
        return pith_errf(err, "%s: DeltaNet convolution width %d is not in 1..16", path, hp->conv_kernel);
    const int w[] = {P->gdn_k_heads, P->gdn_v_heads, P->gdn_k_dim, P->gdn_v_dim};
    for (int i = 0; i < 4; i++)
        if (w[i] < 1 || w[i] > 1 << 14) return pith_errf(err, "%s: DeltaNet head count or width %d out of range", path, w[i]);
    if (P->gdn_v_heads % P->gdn_k_heads)
        return pith_errf(err, "%s: %d DeltaNet value heads are not a multiple of %d key heads", path, P->gdn_v_heads,
                         P->gdn_k_heads);
    return 0;
}

static int add_one(pith_model_file *f, const char *name, pith_err *err) {
    float *v;
    int64_t n;
    if (pith_mf_own_vector(f, name, &v, &n, err)) return -1;
    for (int64_t i = 0; i < n; i++) v[i] += 1.0f;
    return 0;
}

/* Hugging Face: norms mean (1 + w) and A_log is stored; GGUF holds w + 1 and -exp(A_log). The MTP
 * layers' norms too, when the checkpoint carries them (only a load with the head reads them). */
int pith_qwen35_finish(pith_model_file *f, pith_hparams *hp, pith_err *err) {
    if (pith_model_file_format(f) != PITH_FORMAT_SAFETENSORS) return 0;
    char name[96];
    if (add_one(f, "output_norm.weight", err)) return -1;
    for (int l = 0; l < hp->n_layers + hp->n_mtp_layers; l++) {
        static const char *norms[] = {"attn_norm.weight", "post_attention_norm.weight", "attn_q_norm.weight",
                                      "attn_k_norm.weight", "nextn.enorm.weight", "nextn.hnorm.weight",
                                      "nextn.shared_head_norm.weight"};
        bool mtp = l >= hp->n_layers;
        for (int k = 0; k < (mtp ? 7 : 4); k++) {
            snprintf(name, sizeof name, "blk.%d.%s", l, norms[k]);
            if ((!mtp || pith_model_file_tensor(f, name)) && add_one(f, name, err)) return -1;
        }
        if (mtp) continue;
        float *v;
        int64_t n;
        snprintf(name, sizeof name, "blk.%d.ssm_a", l);
        if (pith_mf_own_vector(f, name, &v, &n, err)) return -1;
        for (int64_t i = 0; i < n; i++) v[i] = -expf(v[i]);
    }
    return 0;
}

const pith_arch pith_arch_qwen35 = {
    .name = "qwen35",
    .hf_archs = (const char *const[]){"Qwen3_5ForCausalLM", "Qwen3_5ForConditionalGeneration", NULL},
    .hf_model_types = (const char *const[]){"qwen3_5_text", "qwen3_5", NULL},
    .hf_text_config = true,
    .rope_gguf = PITH_ROPE_HALF,
    .rope_hf = PITH_ROPE_HALF,
    .hf_global = pith_qwen35_hf_global,
    .hf_layer = pith_qwen35_hf_layer,
    .hf_mtp = pith_qwen35_hf_mtp,
    .global = pith_qwen35_global,
    .layer = pith_qwen35_layer,
    .read_gguf = pith_qwen35_read_gguf,
    .read_hf = pith_qwen35_read_hf,
    .check = pith_qwen35_check,
    .finish = pith_qwen35_finish,
    .build = pith_qwen35_build,
    .params_size = sizeof(pith_qwen35_params),
    .partial_rotary = true,
};
