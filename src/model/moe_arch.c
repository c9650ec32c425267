/* Mixture-of-experts metadata (see moe_arch.h). Key names are llama.cpp's (src/llama-arch.cpp:
 * LLM_KV_EXPERT_*). */
#include "model/moe_arch.h"

#include <cjson/cJSON.h>

#include "backend/backend.h"

int pith_moe_read_gguf(const pith_meta *m, pith_hparams *hp, bool norm_default) {
    int gating = 0;
    hp->expert_norm_topk = norm_default;
    if (pith_meta_int(m, "expert_count", false, &hp->n_experts) ||
        pith_meta_int(m, "expert_used_count", false, &hp->n_experts_used) ||
        pith_meta_int(m, "expert_feed_forward_length", false, &hp->expert_ffn_dim) ||
        pith_meta_int(m, "expert_shared_feed_forward_length", false, &hp->expert_shared_ffn_dim) ||
        pith_meta_bool(m, "expert_weights_norm", &hp->expert_norm_topk) ||
        pith_meta_int(m, "expert_gating_func", false, &gating) ||
        pith_meta_int(m, "expert_group_count", false, &hp->expert_groups) ||
        pith_meta_int(m, "expert_group_used_count", false, &hp->expert_groups_used) ||
        pith_meta_float(m, "expert_weights_scale", false, &hp->expert_weights_scale) ||
        pith_meta_int(m, "leading_dense_block_count", false, &hp->expert_dense_leading))
        return -1;
    if (gating < 0 || gating > 2)
        return pith_errf(m->err, "%s: %s.expert_gating_func %d is not supported (softmax 1, sigmoid 2)", m->path,
                         m->arch, gating);
    hp->expert_gating = gating == 2 ? PITH_GATING_SIGMOID : PITH_GATING_SOFTMAX;
    if (hp->n_experts > 0 && hp->expert_ffn_dim <= 0) hp->expert_ffn_dim = hp->ffn_dim;
    return 0;
}

int pith_moe_read_hf_qwen(const pith_meta *m, pith_hparams *hp) {
    int step = 1;
    if (pith_meta_int(m, "num_experts", true, &hp->n_experts) ||
        pith_meta_int(m, "num_experts_per_tok", true, &hp->n_experts_used) ||
        pith_meta_int(m, "moe_intermediate_size", true, &hp->expert_ffn_dim) ||
        pith_meta_bool(m, "norm_topk_prob", &hp->expert_norm_topk) || pith_meta_int(m, "decoder_sparse_step", false, &step))
        return -1;
    const cJSON *dense = cJSON_GetObjectItemCaseSensitive(m->json, "mlp_only_layers");
    if (step != 1 || (cJSON_IsArray(dense) && cJSON_GetArraySize(dense) > 0))
        return pith_errf(m->err, "%s: dense layers among the expert layers (mlp_only_layers, decoder_sparse_step) "
                                 "are not supported", m->path);
    return 0;
}

int pith_moe_check_hparams(const pith_hparams *hp, bool required, const char *path, pith_err *err) {
    if (hp->n_experts == 0 && !required) return 0;
    if (hp->n_experts < 1 || hp->n_experts > PITH_BE_MAX_EXPERTS)
        return pith_errf(err, "%s: expert count %d, expected 1..%d", path, hp->n_experts, PITH_BE_MAX_EXPERTS);
    if (hp->n_experts_used < 1 || hp->n_experts_used > hp->n_experts)
        return pith_errf(err, "%s: %d experts used per token, expected 1..%d", path, hp->n_experts_used,
                         hp->n_experts);
    if (hp->expert_ffn_dim < 1 || hp->expert_ffn_dim > (1 << 20) || hp->expert_shared_ffn_dim < 0 ||
        hp->expert_shared_ffn_dim > (1 << 20))
        return pith_errf(err, "%s: expert feed-forward width %d (shared %d) out of range", path, hp->expert_ffn_dim,
                         hp->expert_shared_ffn_dim);
    if (hp->expert_groups < 0 || hp->expert_groups > hp->n_experts ||
        (hp->expert_groups > 1 && hp->n_experts % hp->expert_groups != 0))
        return pith_errf(err, "%s: %d expert groups do not divide %d experts", path, hp->expert_groups, hp->n_experts);
    if (hp->expert_groups > 1) {
        int per_group = hp->n_experts / hp->expert_groups;
        if (hp->expert_groups_used < 1 || hp->expert_groups_used > hp->expert_groups ||
            hp->expert_groups_used * per_group < hp->n_experts_used)
            return pith_errf(err, "%s: %d of %d expert groups used leave fewer than the %d experts a token uses", path,
                             hp->expert_groups_used, hp->expert_groups, hp->n_experts_used);
    }
    if (!(hp->expert_weights_scale >= 0 && hp->expert_weights_scale <= 1e6f))
        return pith_errf(err, "%s: expert weights scale %g out of range", path, (double)hp->expert_weights_scale);
    if (hp->expert_dense_leading < 0 || hp->expert_dense_leading > hp->n_layers)
        return pith_errf(err, "%s: %d leading dense layers, expected 0..%d", path, hp->expert_dense_leading,
                         hp->n_layers);
    return 0;
}

bool pith_moe_dense_layer(const pith_hparams *hp, int l) {
    return hp->n_experts == 0 || l < hp->expert_dense_leading;
}
