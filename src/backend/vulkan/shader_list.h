/* Every compute shader the Vulkan backend runs, one line each: X(name, source file, glslc defines).
 * shaders.cmake reads these lines (the one list): it compiles each to SPIR-V with glslc at build time
 * and embeds the words in the library (generated/vk_shaders.c); the backend makes its pipelines from
 * them by enum value (PITH_VK_SH_<name>), lazily, at first use. Weight types are WT_* (dequant.glsl),
 * KV types KV_* (kv.glsl). */
#ifndef PITH_VK_SHADER_LIST_H
#define PITH_VK_SHADER_LIST_H

#define PITH_VK_SHADERS(X) \
    X(matvec_f32, "matmul.comp", "-DWTYPE=0 -DMATVEC") \
    X(matvec_f16, "matmul.comp", "-DWTYPE=1 -DMATVEC") \
    X(matvec_bf16, "matmul.comp", "-DWTYPE=2 -DMATVEC") \
    X(matvec_q8_0, "matmul.comp", "-DWTYPE=3 -DMATVEC") \
    X(matvec_q4_0, "matmul.comp", "-DWTYPE=4 -DMATVEC") \
    X(matvec_q4_k, "matmul.comp", "-DWTYPE=5 -DMATVEC") \
    X(matvec_q5_k, "matmul.comp", "-DWTYPE=6 -DMATVEC") \
    X(matvec_q6_k, "matmul.comp", "-DWTYPE=7 -DMATVEC") \
    X(matvec_mxfp4, "matmul.comp", "-DWTYPE=8 -DMATVEC") \
    X(matvec_iq4_nl, "matmul.comp", "-DWTYPE=9 -DMATVEC") \
    X(matvec_iq4_xs, "matmul.comp", "-DWTYPE=10 -DMATVEC") \
    X(mm_f32, "matmul.comp", "-DWTYPE=0") \
    X(mm_f16, "matmul.comp", "-DWTYPE=1") \
    X(mm_bf16, "matmul.comp", "-DWTYPE=2") \
    X(mm_q8_0, "matmul.comp", "-DWTYPE=3") \
    X(mm_q4_0, "matmul.comp", "-DWTYPE=4") \
    X(mm_q4_k, "matmul.comp", "-DWTYPE=5") \
    X(mm_q5_k, "matmul.comp", "-DWTYPE=6") \
    X(mm_q6_k, "matmul.comp", "-DWTYPE=7") \
    X(mm_mxfp4, "matmul.comp", "-DWTYPE=8") \
    X(mm_iq4_nl, "matmul.comp", "-DWTYPE=9") \
    X(mm_iq4_xs, "matmul.comp", "-DWTYPE=10") \
    X(mmrow_f32, "matmul.comp", "-DWTYPE=0 -DPER_ROW") \
    X(mmrow_f16, "matmul.comp", "-DWTYPE=1 -DPER_ROW") \
    X(mmrow_bf16, "matmul.comp", "-DWTYPE=2 -DPER_ROW") \
    X(mmrow_q8_0, "matmul.comp", "-DWTYPE=3 -DPER_ROW") \
    X(mmrow_q4_0, "matmul.comp", "-DWTYPE=4 -DPER_ROW") \
    X(mmrow_q4_k, "matmul.comp", "-DWTYPE=5 -DPER_ROW") \
    X(mmrow_q5_k, "matmul.comp", "-DWTYPE=6 -DPER_ROW") \
    X(mmrow_q6_k, "matmul.comp", "-DWTYPE=7 -DPER_ROW") \
    X(mmrow_mxfp4, "matmul.comp", "-DWTYPE=8 -DPER_ROW") \
    X(mmrow_iq4_nl, "matmul.comp", "-DWTYPE=9 -DPER_ROW") \
    X(mmrow_iq4_xs, "matmul.comp", "-DWTYPE=10 -DPER_ROW") \
    X(embed_f32, "embed.comp", "-DWTYPE=0") \
    X(embed_f16, "embed.comp", "-DWTYPE=1") \
    X(embed_bf16, "embed.comp", "-DWTYPE=2") \
    X(embed_q8_0, "embed.comp", "-DWTYPE=3") \
    X(embed_q4_0, "embed.comp", "-DWTYPE=4") \
    X(embed_q4_k, "embed.comp", "-DWTYPE=5") \
    X(embed_q5_k, "embed.comp", "-DWTYPE=6") \
    X(embed_q6_k, "embed.comp", "-DWTYPE=7") \
    X(embed_mxfp4, "embed.comp", "-DWTYPE=8") \
    X(embed_iq4_nl, "embed.comp", "-DWTYPE=9") \
    X(embed_iq4_xs, "embed.comp", "-DWTYPE=10") \
    X(qkv_f32, "qkv.comp", "-DKVTYPE=0") \
    X(qkv_f16, "qkv.comp", "-DKVTYPE=1") \
    X(qkv_bf16, "qkv.comp", "-DKVTYPE=2") \
    X(qkv_q8_0, "qkv.comp", "-DKVTYPE=3") \
    X(attn_f32, "attention.comp", "-DKVTYPE=0") \
    X(attn_f16, "attention.comp", "-DKVTYPE=1") \
    X(attn_bf16, "attention.comp", "-DKVTYPE=2") \
    X(attn_q8_0, "attention.comp", "-DKVTYPE=3") \
    X(mtp_attn_f32, "attention.comp", "-DKVTYPE=0 -DDRAFT") \
    X(mtp_attn_f16, "attention.comp", "-DKVTYPE=1 -DDRAFT") \
    X(mtp_attn_bf16, "attention.comp", "-DKVTYPE=2 -DDRAFT") \
    X(mtp_attn_q8_0, "attention.comp", "-DKVTYPE=3 -DDRAFT") \
    X(mtp_input, "mtp.comp", "-DINPUT") \
    X(mtp_save, "mtp.comp", "") \
    X(argmax, "argmax.comp", "") \
    X(rope, "rope.comp", "") \
    X(rmsnorm, "rmsnorm.comp", "") \
    X(eltwise, "eltwise.comp", "") \
    X(attn_temp, "attn_temp.comp", "") \
    X(keep_rows, "rows.comp", "-DKEEP") \
    X(gather_rows, "rows.comp", "") \
    X(copy, "copy.comp", "") \
    X(conv, "conv.comp", "") \
    X(ssd, "ssd.comp", "") \
    X(gdn, "gdn.comp", "") \
    X(gated_norm, "gnorm.comp", "") \
    X(attn_gate, "gate.comp", "") \
    X(moe_route_f32, "moe.comp", "-DWTYPE=0 -DROUTE") \
    X(moe_route_f16, "moe.comp", "-DWTYPE=1 -DROUTE") \
    X(moe_route_bf16, "moe.comp", "-DWTYPE=2 -DROUTE") \
    X(moe_up_f32, "moe.comp", "-DWTYPE=0 -DGATE_UP") \
    X(moe_up_f16, "moe.comp", "-DWTYPE=1 -DGATE_UP") \
    X(moe_up_bf16, "moe.comp", "-DWTYPE=2 -DGATE_UP") \
    X(moe_up_q8_0, "moe.comp", "-DWTYPE=3 -DGATE_UP") \
    X(moe_up_q4_0, "moe.comp", "-DWTYPE=4 -DGATE_UP") \
    X(moe_up_q4_k, "moe.comp", "-DWTYPE=5 -DGATE_UP") \
    X(moe_up_q5_k, "moe.comp", "-DWTYPE=6 -DGATE_UP") \
    X(moe_up_q6_k, "moe.comp", "-DWTYPE=7 -DGATE_UP") \
    X(moe_up_mxfp4, "moe.comp", "-DWTYPE=8 -DGATE_UP") \
    X(moe_up_iq4_nl, "moe.comp", "-DWTYPE=9 -DGATE_UP") \
    X(moe_up_iq4_xs, "moe.comp", "-DWTYPE=10 -DGATE_UP") \
    X(moe_down_f32, "moe.comp", "-DWTYPE=0 -DDOWN") \
    X(moe_down_f16, "moe.comp", "-DWTYPE=1 -DDOWN") \
    X(moe_down_bf16, "moe.comp", "-DWTYPE=2 -DDOWN") \
    X(moe_down_q8_0, "moe.comp", "-DWTYPE=3 -DDOWN") \
    X(moe_down_q4_0, "moe.comp", "-DWTYPE=4 -DDOWN") \
    X(moe_down_q4_k, "moe.comp", "-DWTYPE=5 -DDOWN") \
    X(moe_down_q5_k, "moe.comp", "-DWTYPE=6 -DDOWN") \
    X(moe_down_q6_k, "moe.comp", "-DWTYPE=7 -DDOWN") \
    X(moe_down_mxfp4, "moe.comp", "-DWTYPE=8 -DDOWN") \
    X(moe_down_iq4_nl, "moe.comp", "-DWTYPE=9 -DDOWN") \
    X(moe_down_iq4_xs, "moe.comp", "-DWTYPE=10 -DDOWN") \
    X(moe_gup_f32, "moe.comp", "-DWTYPE=0 -DGATE_UP_GROUPED") \
    X(moe_gup_f16, "moe.comp", "-DWTYPE=1 -DGATE_UP_GROUPED") \
    X(moe_gup_bf16, "moe.comp", "-DWTYPE=2 -DGATE_UP_GROUPED") \
    X(moe_gup_q8_0, "moe.comp", "-DWTYPE=3 -DGATE_UP_GROUPED") \
    X(moe_gup_q4_0, "moe.comp", "-DWTYPE=4 -DGATE_UP_GROUPED") \
    X(moe_gup_q4_k, "moe.comp", "-DWTYPE=5 -DGATE_UP_GROUPED") \
    X(moe_gup_q5_k, "moe.comp", "-DWTYPE=6 -DGATE_UP_GROUPED") \
    X(moe_gup_q6_k, "moe.comp", "-DWTYPE=7 -DGATE_UP_GROUPED") \
    X(moe_gup_mxfp4, "moe.comp", "-DWTYPE=8 -DGATE_UP_GROUPED") \
    X(moe_gup_iq4_nl, "moe.comp", "-DWTYPE=9 -DGATE_UP_GROUPED") \
    X(moe_gup_iq4_xs, "moe.comp", "-DWTYPE=10 -DGATE_UP_GROUPED") \
    X(moe_gdown_f32, "moe.comp", "-DWTYPE=0 -DDOWN_GROUPED") \
    X(moe_gdown_f16, "moe.comp", "-DWTYPE=1 -DDOWN_GROUPED") \
    X(moe_gdown_bf16, "moe.comp", "-DWTYPE=2 -DDOWN_GROUPED") \
    X(moe_gdown_q8_0, "moe.comp", "-DWTYPE=3 -DDOWN_GROUPED") \
    X(moe_gdown_q4_0, "moe.comp", "-DWTYPE=4 -DDOWN_GROUPED") \
    X(moe_gdown_q4_k, "moe.comp", "-DWTYPE=5 -DDOWN_GROUPED") \
    X(moe_gdown_q5_k, "moe.comp", "-DWTYPE=6 -DDOWN_GROUPED") \
    X(moe_gdown_q6_k, "moe.comp", "-DWTYPE=7 -DDOWN_GROUPED") \
    X(moe_gdown_mxfp4, "moe.comp", "-DWTYPE=8 -DDOWN_GROUPED") \
    X(moe_gdown_iq4_nl, "moe.comp", "-DWTYPE=9 -DDOWN_GROUPED") \
    X(moe_gdown_iq4_xs, "moe.comp", "-DWTYPE=10 -DDOWN_GROUPED") \
    X(moe_sort, "moe.comp", "-DWTYPE=0 -DSORT") \
    X(moe_combine, "moe.comp", "-DWTYPE=0 -DCOMBINE") \
    X(head_norm, "headnorm.comp", "") \
    X(copy_cols, "cols.comp", "") \
    X(fma_peak, "fma_peak.comp", "")

typedef enum pith_vk_shader {
#define PITH_VK_ENUM(name, file, defs) PITH_VK_SH_##name,
    PITH_VK_SHADERS(PITH_VK_ENUM)
#undef PITH_VK_ENUM
    PITH_VK_N_SHADERS
} pith_vk_shader;

/* generated/vk_shaders.c: the SPIR-V words and byte sizes, by enum value */
extern const unsigned int *const pith_vk_spirv[PITH_VK_N_SHADERS];
extern const unsigned long pith_vk_spirv_bytes[PITH_VK_N_SHADERS];
extern const char *const pith_vk_shader_names[PITH_VK_N_SHADERS];

#endif
