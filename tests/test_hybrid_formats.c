/* Loading the hybrid architectures (lfm2, qwen35, granitehybrid, nemotron_h) from GGUF and from Hugging Face directories, both
 * written by tools/mkmodel.py from one seed: the hyper-parameters each descriptor reads agree across the
 * formats and with the preset (which layers are recurrent, the convolution width, the DeltaNet widths,
 * partial RoPE and its sections, LFM2's adjusted feed-forward width, tied embeddings), the Hugging Face
 * transforms make tensors mean what GGUF stores (Qwen3.5's norms as 1 + w, ssm_a as -exp(A_log)), and
 * malformed config.json values are refused with a message naming the key; Qwen3.5's multimodal layout
 * (Qwen3_5ForConditionalGeneration) gives the logits of the text-only class and of GGUF, and a qwen35
 * GGUF that declares RoPE scaling is refused with a message naming it. Granite 4.0-H: the Mamba2
 * widths, the four multipliers, RoPE or none, the shared MLP's width and the experts. Nemotron-H: the
 * layer kinds (hybrid_override_pattern; GGUF's per-layer KV heads and feed-forward widths), the Mamba2 widths, no RoPE, the same logits from both formats; malformed patterns, flags and per-layer
 * arrays refused with messages naming what is wrong. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "model_mem.h"
#include "model/granitehybrid.h"
#include "model/mamba2.h"
#include "model/qwen35.h"
#include "pith/model.h"
#include "pith/modelfile.h"

static const char *src, *tmp;

static int sh(const char *fmt, const char *a, const char *b, const char *c) {
    char cmd[12000];
    snprintf(cmd, sizeof cmd, fmt, a, b, c);
    return system(cmd);
}

static int mk(const char *preset, const char *out) {
    return sh("/usr/bin/python3 '%s/tools/mkmodel.py' --preset %s --seed 5 --out '%s' >/dev/null 2>&1", src, preset, out);
}

/* Sets config.json's key (a JSON literal) in dir. */
static int set_key(const char *dir, const char *key, const char *json) {
    return sh("/usr/bin/python3 -c \"import json,sys; p=sys.argv[1]+'/config.json'; c=json.load(open(p)); "
              "c[sys.argv[2]]=json.loads(sys.argv[3]); json.dump(c,open(p,'w'))\" '%s' '%s' '%s'",
              dir, key, json);
}

static const pith_qwen35_params *Q(const pith_hparams *hp) { return hp->arch_params; }
static const pith_granite_params *GR(const pith_hparams *hp) { return hp->arch_params; }
static const pith_mamba2_params *M2(const pith_hparams *hp) { return hp->arch_params; }
static size_t arch_params_size(const pith_hparams *hp) {
    return !strcmp(hp->arch, "qwen35") || !strcmp(hp->arch, "qwen35moe") ? sizeof(pith_qwen35_params)
           : !strcmp(hp->arch, "granitehybrid")                           ? sizeof(pith_granite_params)
           : !strcmp(hp->arch, "nemotron_h")                              ? sizeof(pith_mamba2_params)
                                                                          : 0;
}

static void same_hparams(const pith_hparams *a, const pith_hparams *b, const char *what) {
    CHECKF(!memcmp(a->layer_recurrent, b->layer_recurrent, sizeof a->layer_recurrent), "%s: recurrent layers", what);
    CHECKF(a->conv_kernel == b->conv_kernel && a->ffn_dim == b->ffn_dim && a->n_kv_heads == b->n_kv_heads &&
               a->head_dim == b->head_dim && a->tied_embeddings == b->tied_embeddings,
           "%s: conv %d/%d ffn %d/%d kv %d/%d hd %d/%d", what, a->conv_kernel, b->conv_kernel, a->ffn_dim, b->ffn_dim,
           a->n_kv_heads, b->n_kv_heads, a->head_dim, b->head_dim);
    /* the architecture's own hyper-parameters (DeltaNet or Mamba2 widths, partial rotary, multipliers):
     * the same bytes from both formats */
    CHECKF((a->arch_params == NULL) == (b->arch_params == NULL) && !strcmp(a->arch, b->arch) &&
               (!a->arch_params || !memcmp(a->arch_params, b->arch_params, arch_params_size(a))) &&
               fabsf(a->rope_theta - b->rope_theta) <= 1e-6f * a->rope_theta && a->norm_eps == b->norm_eps,
           "%s: the architecture's own hyper-parameters or RoPE differ", what);
}

static bool vec_equal(const pith_model_file *a, const pith_model_file *b, const char *name, double tol) {
    const pith_tensor *x = pith_model_file_tensor(a, name), *y = pith_model_file_tensor(b, name);
    if (!x || !y || x->type != PITH_F32 || y->type != PITH_F32 || pith_tensor_nelems(x) != pith_tensor_nelems(y)) return false;
    for (int64_t i = 0; i < pith_tensor_nelems(x); i++)
        if (fabs((double)((const float *)x->data)[i] - ((const float *)y->data)[i]) > tol) return false;
    return true;
}

static void refused(const char *dir, const char *want) {
    pith_model_file *f = NULL;
    pith_err err = {0};
    int rc = pith_model_file_open(dir, &f, &err);
    CHECKF(rc != 0 && strstr(err.msg, want), "%s: want an error with '%s', got rc %d '%s'", dir, want, rc, err.msg);
    if (!rc) pith_model_file_close(f);
}

/* One seed of a preset as GGUF (g, named after stem) and as a Hugging Face directory (h), both opened
 * into *a and *b (NULL where that failed, with a failed check). */
static void open_pair(const char *preset, const char *stem, char *g, char *h, pith_model_file **a, pith_model_file **b) {
    pith_err err;
    snprintf(g, 4200, "%s/%s.gguf", tmp, stem);
    snprintf(h, 4200, "%s/%s-st", tmp, stem);
    *a = *b = NULL;
    if (mk(preset, g) || mk(preset, h)) {
        CHECKF(0, "mkmodel failed");
        return;
    }
    CHECKF(pith_model_file_open(g, a, &err) == 0, "%s", err.msg);
    CHECKF(pith_model_file_open(h, b, &err) == 0, "%s", err.msg);
}

static void test_lfm2(void) {
    char g[4200], h[4200];
    pith_model_file *a, *b;
    open_pair("test-lfm2", "hy-lfm2", g, h, &a, &b);
    if (a && b) {
        const pith_hparams *ha = pith_model_file_hparams(a), *hb = pith_model_file_hparams(b);
        same_hparams(ha, hb, "lfm2 GGUF vs config.json");
        /* test-lfm2: 6 layers, attention at 2 and 5, L_cache 3, ffn 384 (config.json: 576 adjusted) */
        int rec = 0;
        for (int l = 0; l < 6; l++) rec |= pith_layer_bit(ha->layer_recurrent, l) << l;
        CHECKF(rec == 0x1b && ha->conv_kernel == 3 && ha->ffn_dim == 384 && ha->n_kv_heads == 2 && ha->tied_embeddings,
               "lfm2: recurrent mask %#x conv %d ffn %d kv %d", rec, ha->conv_kernel, ha->ffn_dim, ha->n_kv_heads);
        CHECK(vec_equal(a, b, "token_embd_norm.weight", 0));
    }
    pith_model_file_close(a);
    pith_model_file_close(b);
    /* malformed config.json values */
    CHECK(set_key(h, "conv_bias", "true") == 0);
    refused(h, "conv_bias");
    CHECK(set_key(h, "conv_bias", "false") == 0 && set_key(h, "conv_L_cache", "1") == 0);
    refused(h, "short convolution width 1");
    CHECK(set_key(h, "conv_L_cache", "\"3\"") == 0);
    refused(h, "conv_L_cache");
    CHECK(set_key(h, "conv_L_cache", "3") == 0 && set_key(h, "layer_types", "[\"conv\"]") == 0);
    refused(h, "layer_types");
    CHECK(set_key(h, "layer_types", "null") == 0 && set_key(h, "full_attn_idxs", "[1, 9]") == 0);
    refused(h, "full_attn_idxs");
    /* full_attn_idxs alone: layers 2 and 5 attend, the rest convolve; the file's tensors agree */
    CHECK(set_key(h, "full_attn_idxs", "[2, 5]") == 0);
    pith_model_file *c = NULL;
    pith_err err;
    CHECKF(pith_model_file_open(h, &c, &err) == 0, "full_attn_idxs: %s", err.msg);
    pith_model_file_close(c);
    /* every layer attends without either key: the convolution layers then miss their attention tensors */
    CHECK(set_key(h, "full_attn_idxs", "null") == 0);
    refused(h, "attn_q.weight");
    /* RoPE scaling LFM2's forward pass cannot apply is refused when the model is built, not ignored */
    CHECK(set_key(h, "full_attn_idxs", "[2, 5]") == 0 &&
          set_key(h, "rope_scaling", "{\"rope_type\": \"linear\", \"factor\": 2.0}") == 0);
    pith_model *m = NULL;
    pith_model_options o = {.n_threads = 1};
    int rc = pith_model_load(h, &o, &m, &err);
    CHECKF(rc != 0 && strstr(err.msg, "RoPE scaling linear is not supported for architecture lfm2"),
           "lfm2 with linear RoPE scaling: rc %d '%s'", rc, rc ? err.msg : "");
    if (!rc) pith_model_free(m);
    CHECK(set_key(h, "rope_scaling", "null") == 0);
    CHECKF(pith_model_load(h, &o, &m, &err) == 0, "lfm2 without RoPE scaling: %s", err.msg);
    pith_model_free(m);
}

/* A qwen35 GGUF that declares linear RoPE scaling: the forward pass applies plain frequencies only, so
 * the load refuses the file with a message naming the scaling instead of running it unscaled. */
static void qwen35_rope_scaling(const char *g) {
    char out[4200];
    snprintf(out, sizeof out, "%s/hy-qwen35-linear.gguf", tmp);
    int rc = sh("/usr/bin/python3 -c \"import sys; sys.path.insert(0, sys.argv[1] + '/tools'); import pith_gguf as G; "
                "r = G.GGUFReader(sys.argv[2]); w = G.GGUFWriter(sys.argv[3]); "
                "[w.add(k, v, *r.metadata_types[k]) for k, v in r.metadata.items()]; "
                "w.add_str('qwen35.rope.scaling.type', 'linear'); w.add_f32('qwen35.rope.scaling.factor', 4.0); "
                "[w.add_tensor(n, r.tensors[n][0], r.tensors[n][1], bytes(r.raw(n))) for n in r.tensors]; w.write()\" "
                "'%s' '%s' '%s'",
                src, g, out);
    CHECKF(rc == 0, "writing %s failed", out);
    if (rc) return;
    pith_model *m = NULL;
    pith_model_options o = {.n_threads = 1};
    pith_err err = {0};
    rc = pith_model_load(out, &o, &m, &err);
    CHECKF(rc != 0 && strstr(err.msg, "RoPE scaling linear") && strstr(err.msg, "qwen35"),
           "qwen35 with linear RoPE scaling: want a refusal naming it, got rc %d '%s'", rc, rc ? err.msg : "");
    if (!rc) pith_model_free(m);
}

static void test_qwen35(void) {
    char g[4200], h[4200];
    snprintf(g, sizeof g, "%s/hy-qwen35.gguf", tmp);
    snprintf(h, sizeof h, "%s/hy-qwen35-st", tmp);
    if (mk("test-qwen35", g) || mk("test-qwen35", h)) {
        CHECKF(0, "mkmodel failed");
        return;
    }
    pith_model_file *a = NULL, *b = NULL;
    pith_err err;
    CHECKF(pith_model_file_open(g, &a, &err) == 0, "%s", err.msg);
    CHECKF(pith_model_file_open(h, &b, &err) == 0, "%s", err.msg);
    if (a && b) {
        const pith_hparams *ha = pith_model_file_hparams(a), *hb = pith_model_file_hparams(b);
        same_hparams(ha, hb, "qwen35 GGUF vs config.json");
        int rec = 0;
        for (int l = 0; l < 8; l++) rec |= pith_layer_bit(ha->layer_recurrent, l) << l;
        CHECKF(rec == 0x77 && ha->conv_kernel == 4 && Q(ha)->gdn_k_heads == 2 && Q(ha)->gdn_v_heads == 4 &&
                   Q(ha)->gdn_k_dim == 32 && Q(ha)->gdn_v_dim == 32 && Q(ha)->rope_dim == 16 &&
                   Q(ha)->rope_sections[0] == 3 && Q(ha)->rope_sections[1] == 3 && Q(ha)->rope_sections[2] == 2,
               "qwen35: recurrent mask %#x conv %d heads %d/%d widths %d/%d rope %d", rec, ha->conv_kernel,
               Q(ha)->gdn_k_heads, Q(ha)->gdn_v_heads, Q(ha)->gdn_k_dim, Q(ha)->gdn_v_dim, Q(ha)->rope_dim);
        /* the Hugging Face load makes norms 1 + w and A_log -exp(A_log), as GGUF stores them (float32
         * rounding of the stored sum apart); ssm_a of layer 0 is in grouped head order in both (4 heads,
         * 2 key heads: tiled order 0 2 1 3), so compare head 0 and 3, which do not move */
        CHECK(vec_equal(a, b, "output_norm.weight", 1e-6) && vec_equal(a, b, "blk.3.attn_q_norm.weight", 1e-6) &&
              vec_equal(a, b, "blk.0.post_attention_norm.weight", 1e-6));
        const pith_tensor *sa = pith_model_file_tensor(a, "blk.0.ssm_a"), *sb = pith_model_file_tensor(b, "blk.0.ssm_a");
        CHECK(sa && sb && sb->type == PITH_F32 && sa->type == PITH_F32);
        if (sa && sb && sb->type == PITH_F32 && sa->type == PITH_F32) {
            const float *x = sa->data, *y = sb->data;
            CHECKF(fabsf(x[0] - y[0]) <= 1e-6f * fabsf(x[0]) && fabsf(x[3] - y[3]) <= 1e-6f * fabsf(x[3]) && y[0] < 0,
                   "ssm_a: %g %g vs %g %g", x[0], x[3], y[0], y[3]);
        }
    }
    pith_model_file_close(a);
    pith_model_file_close(b);
    qwen35_rope_scaling(g);
    CHECK(set_key(h, "linear_num_value_heads", "3") == 0);
    refused(h, "not a multiple");
    CHECK(set_key(h, "linear_num_value_heads", "4") == 0 && set_key(h, "rope_parameters", "{\"rope_type\": \"yarn\"}") == 0);
    refused(h, "rope_type");
    CHECK(set_key(h, "rope_parameters", "{\"partial_rotary_factor\": 0}") == 0);
    refused(h, "partial_rotary_factor");
    CHECK(set_key(h, "rope_parameters", "null") == 0 && set_key(h, "full_attention_interval", "0") == 0);
    refused(h, "full_attention_interval");
}

static void granite_pair(const char *preset, pith_model_file **a, pith_model_file **b, char *h) {
    char g[4200], stem[256];
    snprintf(stem, sizeof stem, "hy-%s", preset);
    open_pair(preset, stem, g, h, a, b);
    if (!*a || !*b) return;
    const pith_hparams *ha = pith_model_file_hparams(*a), *hb = pith_model_file_hparams(*b);
    same_hparams(ha, hb, preset);
    CHECKF(GR(ha)->embedding_scale == GR(hb)->embedding_scale && GR(ha)->residual_scale == GR(hb)->residual_scale &&
               ha->query_scale == hb->query_scale && GR(ha)->logit_scale == GR(hb)->logit_scale &&
               !memcmp(ha->layer_no_rope, hb->layer_no_rope, sizeof ha->layer_no_rope) &&
               ha->n_experts == hb->n_experts && ha->n_experts_used == hb->n_experts_used &&
               (!ha->n_experts || (ha->expert_ffn_dim == hb->expert_ffn_dim &&
                                   ha->expert_shared_ffn_dim == hb->expert_shared_ffn_dim)),
           "%s: multipliers (%g %g %g %g vs %g %g %g %g), RoPE layers or experts differ", preset, GR(ha)->embedding_scale,
           GR(ha)->residual_scale, ha->query_scale, GR(ha)->logit_scale, GR(hb)->embedding_scale, GR(hb)->residual_scale,
           hb->query_scale, GR(hb)->logit_scale);
    /* the Hugging Face load turns A_log into ssm_a = -exp(A_log), as GGUF stores it */
    CHECK(vec_equal(*a, *b, "blk.0.ssm_a", 1e-6) && vec_equal(*a, *b, "blk.0.ssm_d", 0));
}

static void test_granitehybrid(void) {
    char h[4200];
    pith_model_file *a, *b;
    granite_pair("test-granitehybrid", &a, &b, h);
    if (a && b) {
        const pith_hparams *hp = pith_model_file_hparams(a);
        /* 6 layers, attention at 2 and 5; 8 Mamba heads of 32, 2 groups of state 16; no RoPE */
        int rec = 0;
        for (int l = 0; l < 6; l++) rec |= pith_layer_bit(hp->layer_recurrent, l) << l;
        CHECKF(rec == 0x1b && hp->conv_kernel == 4 && GR(hp)->ssm.heads == 8 && GR(hp)->ssm.groups == 2 &&
                   GR(hp)->ssm.d_state == 16 && GR(hp)->ssm.head_dim == 32 && hp->ffn_dim == 256 && hp->n_experts == 0 &&
                   pith_layer_bit(hp->layer_no_rope, 2) && GR(hp)->embedding_scale == 4.0f && GR(hp)->residual_scale == 0.5f &&
                   hp->query_scale == 0.125f && GR(hp)->logit_scale == 2.0f,
               "granitehybrid: mask %#x conv %d heads %d groups %d state %d head %d ffn %d", rec, hp->conv_kernel,
               GR(hp)->ssm.heads, GR(hp)->ssm.groups, GR(hp)->ssm.d_state, GR(hp)->ssm.head_dim, hp->ffn_dim);
    }
    pith_model_file_close(a);
    pith_model_file_close(b);
    granite_pair("test-granitehybrid-moe", &a, &b, h);
    if (a) {
        const pith_hparams *hp = pith_model_file_hparams(a);
        CHECKF(hp->n_experts == 4 && hp->n_experts_used == 2 && hp->expert_ffn_dim == 64 && hp->ffn_dim == 128 &&
                   !pith_layer_bit(hp->layer_no_rope, 1),
               "granitehybrid-moe: experts %d/%d width %d shared %d", hp->n_experts, hp->n_experts_used,
               hp->expert_ffn_dim, hp->ffn_dim);
    }
    pith_model_file_close(a);
    pith_model_file_close(b);
    /* malformed config.json values (on the MoE directory) */
    CHECK(set_key(h, "mamba_proj_bias", "true") == 0);
    refused(h, "mamba_proj_bias");
    CHECK(set_key(h, "mamba_proj_bias", "false") == 0 && set_key(h, "mamba_d_head", "48") == 0);
    refused(h, "inner width");
    CHECK(set_key(h, "mamba_d_head", "\"big\"") == 0);
    refused(h, "mamba_d_head");
    CHECK(set_key(h, "mamba_d_head", "\"auto\"") == 0 && set_key(h, "mamba_n_heads", "3") == 0);
    refused(h, "Mamba heads");
    CHECK(set_key(h, "mamba_n_heads", "4") == 0 && set_key(h, "position_embedding_type", "\"alibi\"") == 0);
    refused(h, "position_embedding_type");
    CHECK(set_key(h, "position_embedding_type", "\"rope\"") == 0 && set_key(h, "layer_types", "[\"mamba\"]") == 0);
    refused(h, "layer_types");
    /* every layer Mamba2 without layer_types: the attention layers then miss their Mamba2 tensors (the
     * model's build checks those) */
    CHECK(set_key(h, "layer_types", "null") == 0);
    pith_model *m = NULL;
    pith_err err = {0};
    pith_model_options mo = {.n_threads = 1};
    int rc = pith_model_load(h, &mo, &m, &err);
    CHECKF(rc != 0 && strstr(err.msg, "ssm_in.weight"), "want a missing ssm_in.weight, got rc %d '%s'", rc, err.msg);
    if (!rc) pith_model_free(m);
}

static int last_logits(const char *path, float *out, int n_vocab);

/* test-nemotronh as GGUF with the per-layer array `key` replaced by `json` (mkmodel's writer, patched). */
static int mk_nemotron_gguf(const char *out, const char *key, const char *json) {
    char cmd[12000];
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 -c \"import json,sys; sys.path.insert(0, sys.argv[1] + '/tools'); import mkmodel as M, "
             "pith_gguf as G; a = G.GGUFWriter.add_array; "
             "G.GGUFWriter.add_array = lambda w, k, v, t: a(w, k, json.loads(sys.argv[4]) if k == sys.argv[3] else v, t); "
             "M.write_gguf(M.build_config('test-nemotronh'), sys.argv[2], seed=5)\" '%s' '%s' '%s' '%s' >/dev/null 2>&1",
             src, out, key, json);
    return system(cmd);
}

static void test_nemotronh(void) {
    char g[4200], h[4200], bad[4200];
    snprintf(bad, sizeof bad, "%s/hy-nemotronh-bad.gguf", tmp);
    pith_model_file *a, *b;
    pith_err err;
    open_pair("test-nemotronh", "hy-nemotronh", g, h, &a, &b);
    if (!a || !b) {
        pith_model_file_close(a);
        pith_model_file_close(b);
        return;
    }
    {
        const pith_hparams *ha = pith_model_file_hparams(a), *hb = pith_model_file_hparams(b);
        same_hparams(ha, hb, "nemotron_h GGUF vs config.json");
        /* "M-M*-M-": Mamba2 at 0, 2, 5, attention at 3, MLP at 1, 4, 6; 8 heads of 32, 2 groups of 16 */
        int rec = 0, mlp = 0, rope = 0;
        for (int l = 0; l < 7; l++) {
            rec |= pith_layer_bit(ha->layer_recurrent, l) << l, mlp |= pith_layer_bit(ha->layer_mlp, l) << l;
            rope |= !pith_layer_bit(ha->layer_no_rope, l) << l;
            /* per bit as well (the loop shape GCC 12.2 miscompiled with the old pith_layer_bit) */
            CHECKF(pith_layer_bit(ha->layer_mlp, l) == pith_layer_bit(hb->layer_mlp, l), "nemotron_h: MLP layer %d", l);
        }
        CHECKF(!memcmp(ha->layer_mlp, hb->layer_mlp, sizeof ha->layer_mlp) &&
                   !memcmp(ha->layer_no_rope, hb->layer_no_rope, sizeof ha->layer_no_rope),
               "nemotron_h: MLP or RoPE layers differ between the formats");
        CHECKF(rec == 0x25 && mlp == 0x52 && !rope && ha->conv_kernel == 4 && M2(ha)->heads == 8 &&
                   M2(ha)->groups == 2 && M2(ha)->d_state == 16 && M2(ha)->head_dim == 32 && ha->ffn_dim == 256 &&
                   ha->n_kv_heads == 2 && !ha->tied_embeddings && fabsf(ha->norm_eps - 1e-5f) < 1e-9f,
               "nemotron_h: recurrent %#x mlp %#x rope %#x conv %d heads %d groups %d state %d head %d ffn %d kv %d",
               rec, mlp, rope, ha->conv_kernel, M2(ha)->heads, M2(ha)->groups, M2(ha)->d_state,
               M2(ha)->head_dim, ha->ffn_dim, ha->n_kv_heads);
        CHECK(vec_equal(a, b, "blk.0.ssm_a", 1e-6) && vec_equal(a, b, "blk.5.ssm_norm.weight", 0));
    }
    pith_model_file_close(a);
    pith_model_file_close(b);
    enum { V = 512 };
    static float lg[V], lh[V];
    if (!last_logits(g, lg, V) && !last_logits(h, lh, V)) {
        double diff = 0, lo = lg[0], hi = lg[0];
        for (int i = 0; i < V; i++) diff = fmax(diff, fabs((double)lg[i] - lh[i])), lo = fmin(lo, lg[i]), hi = fmax(hi, lg[i]);
        CHECKF(diff <= 1e-4 * (hi - lo), "nemotron_h: GGUF vs safetensors logits differ by %g (range %g)", diff, hi - lo);
    }
    /* malformed GGUF per-layer arrays */
    CHECK(mk_nemotron_gguf(bad, "nemotron_h.feed_forward_length", "[0, 256, 0, 256, 256, 0, 256]") == 0);
    refused(bad, "both KV heads and a feed-forward width");
    CHECK(mk_nemotron_gguf(bad, "nemotron_h.attention.head_count_kv", "[0, 0, 0, 2]") == 0);
    refused(bad, "expected one per layer");
    CHECK(mk_nemotron_gguf(bad, "nemotron_h.feed_forward_length", "[0, 256, 0, 0, 128, 0, 256]") == 0);
    refused(bad, "differs between layers");
    CHECK(mk_nemotron_gguf(bad, "nemotron_h.attention.head_count_kv", "[0, 0, 0, 9, 0, 0, 0]") == 0);
    refused(bad, "not a count");
    /* an MLP layer the metadata calls Mamba2: its Mamba2 tensors are missing */
    CHECK(mk_nemotron_gguf(bad, "nemotron_h.feed_forward_length", "[0, 0, 0, 0, 256, 0, 256]") == 0);
    pith_model *m = NULL;
    pith_err e2 = {0};
    pith_model_options mo = {.n_threads = 1};
    int rc = pith_model_load(bad, &mo, &m, &e2);
    CHECKF(rc != 0 && strstr(e2.msg, "blk.1.ssm_in.weight"), "want a missing blk.1.ssm_in.weight, got rc %d '%s'", rc, e2.msg);
    if (!rc) pith_model_free(m);
    /* malformed config.json values */
    CHECK(set_key(h, "hybrid_override_pattern", "\"M-M*-M\"") == 0);
    refused(h, "one per layer");
    CHECK(set_key(h, "hybrid_override_pattern", "\"M-M*-ME\"") == 0);
    refused(h, "hybrid_override_pattern");
    CHECK(set_key(h, "hybrid_override_pattern", "\"M-M*-M-\"") == 0 && set_key(h, "mlp_hidden_act", "\"silu\"") == 0);
    refused(h, "mlp_hidden_act");
    CHECK(set_key(h, "mlp_hidden_act", "\"relu2\"") == 0 && set_key(h, "use_bias", "true") == 0);
    refused(h, "use_bias");
    /* Python's json writes transformers' default (0, inf) as [0.0, Infinity]: read; a real clamp refused */
    CHECK(set_key(h, "use_bias", "false") == 0 && set_key(h, "time_step_limit", "[0.0, Infinity]") == 0);
    CHECKF(pith_model_file_open(h, &a, &err) == 0, "time_step_limit [0, Infinity]: %s", err.msg);
    pith_model_file_close(a);
    CHECK(set_key(h, "time_step_limit", "[0.0, 0.1]") == 0);
    refused(h, "time_step_limit");
    CHECK(set_key(h, "time_step_limit", "null") == 0 && set_key(h, "n_groups", "3") == 0);
    refused(h, "not a multiple of 3 groups");
    CHECK(set_key(h, "n_groups", "2") == 0 && set_key(h, "conv_kernel", "0") == 0);
    refused(h, "convolution width 0");
}

/* Logits of the last of 12 tokens (one prefill) from the model at path, into out[n_vocab]. */
static int last_logits(const char *path, float *out, int n_vocab) {
    pith_model_options mo = {.n_threads = 2};
    pith_model *m = NULL;
    pith_err err;
    if (pith_model_load(path, &mo, &m, &err)) {
        CHECKF(0, "%s", err.msg);
        return -1;
    }
    int rc = -1;
    if (m->hp.n_vocab != n_vocab) {
        CHECKF(0, "%s: vocabulary %d", path, m->hp.n_vocab);
    } else if (tm_alloc(m, 16, 4, 16, PITH_F32, &err)) {
        CHECKF(0, "%s: %s", path, err.msg);
    } else {
        enum { P = 12 };
        int32_t tok[P], pos[P], seq[P] = {0}, slot[P], table[1] = {0};
        uint8_t want[P] = {0};
        for (int i = 0; i < P; i++) tok[i] = (i * 53 + 7) % n_vocab, pos[i] = i, slot[i] = i;
        want[P - 1] = 1;
        tm_batch t;
        tm_batch_init(&t, m, P, tok, pos, seq, slot, want, 1, 1, table);
        rc = pith_model_forward(m, &t.b, out, &err);
        CHECKF(rc == 0, "%s: %s", path, err.msg);
        pith_model_mem_free(m);
    }
    pith_model_free(m);
    return rc;
}

/* One seed of a preset as GGUF, as the text-only Hugging Face class and as the multimodal class
 * (Qwen3_5ForConditionalGeneration / Qwen3_5MoeForConditionalGeneration: config.json's text model under
 * text_config, its tensors under model.language_model., a vision tower beside them). The multimodal
 * layout loads as the text-only one does, to the bit (the same tensors, the same transforms), and both
 * match the GGUF form's logits within float32 rounding (GGUF stores the norms as w + 1 and the value
 * heads in another order, so sums round differently: 1e-4 of the logits' range is far above that and
 * far below any misread tensor). */
static void cross_format(const char *preset) {
    char g[4200], h[4200], mm[4200];
    snprintf(g, sizeof g, "%s/hy-%s.gguf", tmp, preset);
    snprintf(h, sizeof h, "%s/hy-%s-text", tmp, preset);
    snprintf(mm, sizeof mm, "%s/hy-%s-mm", tmp, preset);
    if (mk(preset, g) || mk(preset, h) ||
        sh("/usr/bin/python3 '%s/tools/mkmodel.py' --preset %s --hf-type multimodal --seed 5 --out '%s' >/dev/null 2>&1",
           src, preset, mm)) {
        CHECKF(0, "mkmodel failed");
        return;
    }
    enum { V = 512 };
    static float lg[V], lh[V], lm[V];
    if (last_logits(g, lg, V) || last_logits(h, lh, V) || last_logits(mm, lm, V)) return;
    CHECKF(!memcmp(lh, lm, sizeof lh), "%s: the multimodal layout's logits differ from the text-only class's", preset);
    double diff = 0, lo = lg[0], hi = lg[0];
    for (int i = 0; i < V; i++) {
        diff = fmax(diff, fabs((double)lg[i] - lm[i]));
        lo = fmin(lo, lg[i]), hi = fmax(hi, lg[i]);
    }
    CHECKF(diff <= 1e-4 * (hi - lo), "%s: multimodal vs GGUF: logits differ by %g (range %g)", preset, diff, hi - lo);
    printf("%s: multimodal layout gives the text-only class's logits to the bit; GGUF's within %.2g (range %.3g)\n",
           preset, diff, hi - lo);
    /* a text_config that is not an object */
    CHECK(set_key(mm, "text_config", "[1]") == 0);
    refused(mm, "text_config");
}

int main(void) {
    src = getenv("PITH_SOURCE_DIR"), tmp = getenv("PITH_TEST_TMP");
    if (!src || !tmp) {
        printf("SKIP: PITH_SOURCE_DIR / PITH_TEST_TMP not set (run through ctest)\n");
        return CHECK_SKIP;
    }
    test_lfm2();
    test_qwen35();
    test_granitehybrid();
    test_nemotronh();
    cross_format("test-qwen35");
    cross_format("test-qwen35moe");
    return check_summary("test_hybrid_formats");
}
