/* Loading Qwen3-Next (qwen3next_arch.c) from GGUF (llama.cpp's current layout: attn_qkv, attn_gate and
 * ssm_ba; and its older one: the fused ssm_in) and from a Hugging Face directory (in_proj_qkvz,
 * in_proj_ba), all written by tools/mkmodel.py from one seed:
 *   - the hyper-parameters agree across the formats and with the preset (recurrent layers, DeltaNet widths,
 *     a quarter of each head rotated, no M-RoPE sections, grouped value heads, experts, no MTP layer);
 *   - the load's transforms: the fused projections' rows ungrouped into [q | k | v | z] (the older GGUF's
 *     ssm_in and the Hugging Face in_proj_qkvz then hold exactly the current GGUF's attn_qkv and attn_gate
 *     rows) and [beta | alpha] (the three files' ssm_ba agree), Hugging Face norms made 1 + w and A_log
 *     -exp(A_log), as GGUF stores them;
 *   - the three files give the same logits;
 *   - malformed values and files are refused with a message naming what is wrong: config.json's
 *     decoder_sparse_step, mlp_only_layers, norm_topk_prob, num_experts, partial_rotary_factor, attention_bias,
 *     linear_num_value_heads; GGUF's attention.recurrent_layers, expert_count and ssm.group_count; a
 *     missing or misshapen fused tensor; a load that asks for the MTP head (not read). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "model_mem.h"
#include "model/qwen35.h"
#include "pith/model.h"
#include "pith/modelfile.h"

static const char *src, *tmp;

static int sh(const char *fmt, const char *a, const char *b, const char *c, const char *d) {
    char cmd[16000];
    snprintf(cmd, sizeof cmd, fmt, a, b, c, d);
    return system(cmd);
}

static int mk(const char *preset, const char *out) {
    return sh("/usr/bin/python3 '%s/tools/mkmodel.py' --preset %s --seed 5 --out '%s' >/dev/null 2>&1%s", src, preset,
              out, "");
}

/* Sets config.json's key (a JSON literal) in dir. */
static int set_key(const char *dir, const char *key, const char *json) {
    return sh("/usr/bin/python3 -c \"import json,sys; p=sys.argv[1]+'/config.json'; c=json.load(open(p)); "
              "c[sys.argv[2]]=json.loads(sys.argv[3]); json.dump(c,open(p,'w'))\" '%s' '%s' '%s'%s",
              dir, key, json, "");
}

/* Replaces bytes `from` by `to` (the same length) in dir's model.safetensors: a tensor renamed or
 * reshaped in the header, the offsets unchanged. */
static int st_replace(const char *dir, const char *from, const char *to) {
    return sh("/usr/bin/python3 -c \"import sys; p=sys.argv[1]+'/model.safetensors'; b=open(p,'rb').read(); "
              "f,t=sys.argv[2].encode(),sys.argv[3].encode(); assert len(f)==len(t) and f in b; "
              "open(p,'wb').write(b.replace(f,t,1))\" '%s' '%s' '%s'%s",
              dir, from, to, "");
}

/* Copies the GGUF file g to out, leaving out the metadata key `drop` (or none: "") and adding the
 * statement `add` (a pith_gguf writer call on w, or "0"). */
static int gguf_edit(const char *g, const char *out, const char *drop, const char *add) {
    char py[4000];
    snprintf(py, sizeof py,
             "import sys; sys.path.insert(0, sys.argv[1] + '/tools'); import pith_gguf as G; "
             "r = G.GGUFReader(sys.argv[2]); w = G.GGUFWriter(sys.argv[3]); "
             "[w.add(k, v, *r.metadata_types[k]) for k, v in r.metadata.items() if k != '%s']; %s; "
             "[w.add_tensor(n, r.tensors[n][0], r.tensors[n][1], bytes(r.raw(n))) for n in r.tensors]; w.write()",
             drop, add);
    return sh("/usr/bin/python3 -c \"%s\" '%s' '%s' '%s'", py, src, g, out);
}

static const pith_qwen35_params *Q(const pith_hparams *hp) { return hp->arch_params; }

static void refused(const char *path, const char *want) {
    pith_model_file *f = NULL;
    pith_err err = {0};
    int rc = pith_model_file_open(path, &f, &err);
    CHECKF(rc != 0 && strstr(err.msg, want), "%s: want an error with '%s', got rc %d '%s'", path, want, rc, err.msg);
    if (!rc) pith_model_file_close(f);
}

/* The model opens but its load with the MTP head is refused with `want` (Qwen3-Next's MTP layer is not
 * read: see qwen3next_arch.c). */
static void mtp_refused(const char *path, const char *want) {
    pith_model *m = NULL;
    pith_model_options o = {.n_threads = 1, .mtp = true};
    pith_err err = {0};
    int rc = pith_model_load(path, &o, &m, &err);
    CHECKF(rc != 0 && strstr(err.msg, want), "%s: want a load error with '%s', got rc %d '%s'", path, want, rc,
           rc ? err.msg : "");
    if (!rc) pith_model_free(m);
}

/* Rows [row0, row0 + n) of a (validated, F32) matrix of the given width, or NULL. */
static const float *rows(const pith_model_file *f, const char *name, int width, int row0, int n) {
    const pith_tensor *t = pith_model_file_tensor(f, name);
    if (!t || t->type != PITH_F32 || t->ne[0] != width || t->ne[1] < row0 + n) return NULL;
    return (const float *)t->data + (size_t)row0 * (size_t)width;
}

static bool same_rows(const pith_model_file *a, const char *na, int ra, const pith_model_file *b, const char *nb,
                      int rb, int n, int width) {
    const float *x = rows(a, na, width, ra, n), *y = rows(b, nb, width, rb, n);
    return x && y && !memcmp(x, y, sizeof(float) * (size_t)n * (size_t)width);
}

static bool vec_equal(const pith_model_file *a, const pith_model_file *b, const char *name, double rel) {
    const pith_tensor *x = pith_model_file_tensor(a, name), *y = pith_model_file_tensor(b, name);
    if (!x || !y || x->type != PITH_F32 || y->type != PITH_F32 || pith_tensor_nelems(x) != pith_tensor_nelems(y))
        return false;
    for (int64_t i = 0; i < pith_tensor_nelems(x); i++) {
        double u = ((const float *)x->data)[i], v = ((const float *)y->data)[i];
        if (fabs(u - v) > rel * fmax(1.0, fabs(u))) return false;
    }
    return true;
}

/* Logits of the last of 12 tokens (one prefill), into out[n_vocab]. */
static int last_logits(const char *path, float *out, int n_vocab) {
    pith_model_options mo = {.n_threads = 2};
    pith_model *m = NULL;
    pith_err err;
    if (pith_model_load(path, &mo, &m, &err)) {
        CHECKF(0, "%s", err.msg);
        return -1;
    }
    int rc = -1;
    if (tm_alloc(m, 16, 4, 16, PITH_F32, &err)) {
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

/* test-qwen3next: dim 128, 4 layers (attention at 3), 2 key heads and 4 value heads of 32, head 64 with 16
 * rotated, 8 experts of 64 (2 used), a shared expert of 96, conv 4. */
static void check_hparams(const pith_hparams *h, const char *what) {
    int rec = 0;
    for (int l = 0; l < 4; l++) rec |= pith_layer_bit(h->layer_recurrent, l) << l;
    const pith_qwen35_params *P = Q(h);
    CHECKF(!strcmp(h->arch, "qwen3next") && h->n_layers == 4 && rec == 0x7 && h->conv_kernel == 4 &&
               P->gdn_k_heads == 2 && P->gdn_v_heads == 4 && P->gdn_k_dim == 32 && P->gdn_v_dim == 32 &&
               P->rope_dim == 16 && !P->rope_sections[0] && !P->rope_sections[1] && !P->rope_sections[2] &&
               P->qk_grouped && h->n_mtp_layers == 0 && h->n_experts == 8 && h->n_experts_used == 2 &&
               h->expert_ffn_dim == 64 && h->expert_shared_ffn_dim == 96 && h->expert_norm_topk &&
               h->expert_gating == PITH_GATING_SOFTMAX && !h->tied_embeddings && h->head_dim == 64 &&
               h->n_kv_heads == 2,
           "%s: arch %s layers %d recurrent %#x conv %d heads %d/%d widths %d/%d rope %d grouped %d mtp %d experts "
           "%d/%d/%d/%d norm %d",
           what, h->arch, h->n_layers, rec, h->conv_kernel, P->gdn_k_heads, P->gdn_v_heads, P->gdn_k_dim, P->gdn_v_dim,
           P->rope_dim, P->qk_grouped, h->n_mtp_layers, h->n_experts, h->n_experts_used, h->expert_ffn_dim,
           h->expert_shared_ffn_dim, h->expert_norm_topk);
}

static void test_formats(const char *g, const char *l, const char *h) {
    pith_model_file *a = NULL, *b = NULL, *c = NULL;
    pith_err err;
    CHECKF(pith_model_file_open(g, &a, &err) == 0, "%s", err.msg);
    CHECKF(pith_model_file_open(l, &b, &err) == 0, "%s", err.msg);
    CHECKF(pith_model_file_open(h, &c, &err) == 0, "%s", err.msg);
    if (a && b && c) {
        check_hparams(pith_model_file_hparams(a), "GGUF");
        check_hparams(pith_model_file_hparams(b), "GGUF (ssm_in)");
        check_hparams(pith_model_file_hparams(c), "config.json");
        /* conv channels 2 * 64 + 128 = 256, value width 128, 4 value heads; width 128 */
        enum { D = 128, CV = 256, VD = 128, NV = 4 };
        for (int l0 = 0; l0 < 3; l0++) {
            char qkv[64], gate[64], in[64], ba[64];
            snprintf(qkv, sizeof qkv, "blk.%d.attn_qkv.weight", l0);
            snprintf(gate, sizeof gate, "blk.%d.attn_gate.weight", l0);
            snprintf(in, sizeof in, "blk.%d.ssm_in.weight", l0);
            snprintf(ba, sizeof ba, "blk.%d.ssm_ba.weight", l0);
            CHECKF(same_rows(a, qkv, 0, b, in, 0, CV, D) && same_rows(a, gate, 0, b, in, CV, VD, D),
                   "layer %d: the older GGUF's ssm_in, ungrouped, is not [attn_qkv | attn_gate]", l0);
            CHECKF(same_rows(a, qkv, 0, c, in, 0, CV, D) && same_rows(a, gate, 0, c, in, CV, VD, D),
                   "layer %d: in_proj_qkvz, ungrouped, is not GGUF's [attn_qkv | attn_gate]", l0);
            CHECKF(same_rows(a, ba, 0, b, ba, 0, 2 * NV, D) && same_rows(a, ba, 0, c, ba, 0, 2 * NV, D),
                   "layer %d: ssm_ba differs between the files after the load", l0);
        }
        /* (1 + w) norms and -exp(A_log), as GGUF stores them (float32 rounding of the stored values apart);
         * the value heads are in the same (grouped) order in both formats */
        CHECK(vec_equal(a, c, "output_norm.weight", 1e-6) && vec_equal(a, c, "blk.3.attn_q_norm.weight", 1e-6) &&
              vec_equal(a, c, "blk.0.post_attention_norm.weight", 1e-6) && vec_equal(a, c, "blk.1.ssm_a", 1e-6) &&
              vec_equal(a, c, "blk.2.ssm_norm.weight", 0));
        const pith_tensor *sa = pith_model_file_tensor(c, "blk.0.ssm_a");
        CHECK(sa && sa->type == PITH_F32 && ((const float *)sa->data)[0] < 0);
    }
    pith_model_file_close(a);
    pith_model_file_close(b);
    pith_model_file_close(c);
    enum { V = 512 };
    static float lg[V], ll[V], lh[V];
    if (last_logits(g, lg, V) || last_logits(l, ll, V) || last_logits(h, lh, V)) return;
    double diff = 0, lo = lg[0], hi = lg[0];
    for (int i = 0; i < V; i++) {
        diff = fmax(diff, fabs((double)lg[i] - lh[i]));
        lo = fmin(lo, lg[i]), hi = fmax(hi, lg[i]);
    }
    CHECKF(!memcmp(lg, ll, sizeof lg), "the older GGUF layout's logits differ from the current one's");
    CHECKF(diff <= 1e-4 * (hi - lo), "GGUF vs config.json: logits differ by %g (range %g)", diff, hi - lo);
    printf("qwen3next: both GGUF layouts give the same logits to the bit; config.json's within %.2g (range %.3g)\n",
           diff, hi - lo);
}

static void test_malformed_hf(const char *h) {
    pith_model_file *f = NULL;
    pith_err err;
    CHECK(set_key(h, "decoder_sparse_step", "2") == 0);
    refused(h, "decoder_sparse_step");
    CHECK(set_key(h, "decoder_sparse_step", "1") == 0 && set_key(h, "mlp_only_layers", "[1]") == 0);
    refused(h, "mlp_only_layers");
    CHECK(set_key(h, "mlp_only_layers", "[]") == 0 && set_key(h, "norm_topk_prob", "\"yes\"") == 0);
    refused(h, "norm_topk_prob");
    CHECK(set_key(h, "norm_topk_prob", "false") == 0);
    CHECKF(pith_model_file_open(h, &f, &err) == 0, "norm_topk_prob false: %s", err.msg);
    if (f) CHECK(!pith_model_file_hparams(f)->expert_norm_topk);
    pith_model_file_close(f);
    CHECK(set_key(h, "norm_topk_prob", "true") == 0 && set_key(h, "num_experts", "0") == 0);
    refused(h, "expert count 0");
    CHECK(set_key(h, "num_experts", "8") == 0 && set_key(h, "num_experts_per_tok", "9") == 0);
    refused(h, "experts used per token");
    CHECK(set_key(h, "num_experts_per_tok", "2") == 0 && set_key(h, "partial_rotary_factor", "2") == 0);
    refused(h, "partial_rotary_factor");
    /* absent: Qwen3NextConfig's 0.25; 0.5: half of each head */
    const int want[2] = {16, 32};
    const char *val[2] = {"null", "0.5"};
    for (int i = 0; i < 2; i++) {
        f = NULL;
        CHECK(set_key(h, "partial_rotary_factor", val[i]) == 0);
        CHECKF(pith_model_file_open(h, &f, &err) == 0, "partial_rotary_factor %s: %s", val[i], err.msg);
        if (f)
            CHECKF(Q(pith_model_file_hparams(f))->rope_dim == want[i], "partial_rotary_factor %s: rope over %d",
                   val[i], Q(pith_model_file_hparams(f))->rope_dim);
        pith_model_file_close(f);
    }
    CHECK(set_key(h, "partial_rotary_factor", "0.25") == 0 && set_key(h, "attention_bias", "true") == 0);
    refused(h, "attention_bias");
    CHECK(set_key(h, "attention_bias", "false") == 0 && set_key(h, "linear_num_value_heads", "3") == 0);
    refused(h, "not a multiple");
    CHECK(set_key(h, "linear_num_value_heads", "4") == 0);
    /* the fused tensors: absent (renamed), or of the wrong shape (same element count) */
    CHECK(st_replace(h, "layers.1.linear_attn.in_proj_ba", "layers.1.linear_attn.in_proj_xx") == 0);
    refused(h, "missing tensor blk.1.ssm_ba.weight");
    CHECK(st_replace(h, "layers.1.linear_attn.in_proj_xx", "layers.1.linear_attn.in_proj_ba") == 0);
    CHECK(st_replace(h, "layers.0.linear_attn.in_proj_qkvz", "layers.0.linear_attn.in_proj_qkvy") == 0);
    refused(h, "missing tensor blk.0.ssm_in.weight");
    CHECK(st_replace(h, "layers.0.linear_attn.in_proj_qkvy", "layers.0.linear_attn.in_proj_qkvz") == 0);
    CHECK(st_replace(h, "\"model.layers.2.linear_attn.in_proj_ba.weight\":{\"dtype\":\"F32\",\"shape\":[8,128]",
                     "\"model.layers.2.linear_attn.in_proj_ba.weight\":{\"dtype\":\"F32\",\"shape\":[4,256]") == 0);
    refused(h, "blk.2.ssm_ba.weight: shape [256, 4], expected [256, 8]");
}

static void test_malformed_gguf(const char *g) {
    char out[4200];
    snprintf(out, sizeof out, "%s/fq3n-edit.gguf", tmp);
    /* attention.recurrent_layers (llama.cpp: preferred over the interval): a list of the wrong length, a
     * list that moves the attention layer (its tensors then miss), a list that agrees */
    CHECK(gguf_edit(g, out, "", "w.add_array('qwen3next.attention.recurrent_layers', [True, False], G.BOOL)") == 0);
    refused(out, "attention.recurrent_layers has 2 entries");
    CHECK(gguf_edit(g, out, "",
                    "w.add_array('qwen3next.attention.recurrent_layers', [False, True, True, True], G.BOOL)") == 0);
    refused(out, "blk.0.attn_k.weight");
    CHECK(gguf_edit(g, out, "",
                    "w.add_array('qwen3next.attention.recurrent_layers', [True, True, True, False], G.BOOL)") == 0);
    pith_model_file *f = NULL;
    pith_err err;
    CHECKF(pith_model_file_open(out, &f, &err) == 0, "recurrent_layers: %s", err.msg);
    pith_model_file_close(f);
    /* no experts: llama.cpp refuses a qwen3next without them, as does the descriptor */
    CHECK(gguf_edit(g, out, "qwen3next.expert_count", "0") == 0);
    refused(out, "expert count 0");
    /* no shared width: llama.cpp's fallback, the dense width (test-qwen3next: 128, its shared expert 96, so
     * the shared expert's tensors then have the wrong shape) */
    CHECK(gguf_edit(g, out, "qwen3next.expert_shared_feed_forward_length", "0") == 0);
    f = NULL;
    CHECKF(pith_model_file_open(out, &f, &err) == 0, "no shared width: %s", err.msg);
    if (f) CHECKF(pith_model_file_hparams(f)->expert_shared_ffn_dim == 128, "no shared width: %d",
                  pith_model_file_hparams(f)->expert_shared_ffn_dim);
    pith_model_file_close(f);
    CHECK(gguf_edit(g, out, "qwen3next.ssm.group_count", "0") == 0);
    refused(out, "ssm.group_count");
}

int main(void) {
    src = getenv("PITH_SOURCE_DIR"), tmp = getenv("PITH_TEST_TMP");
    if (!src || !tmp) {
        printf("SKIP: PITH_SOURCE_DIR / PITH_TEST_TMP not set (run through ctest)\n");
        return CHECK_SKIP;
    }
    char g[4200], l[4200], h[4200];
    snprintf(g, sizeof g, "%s/fq3n.gguf", tmp);
    snprintf(l, sizeof l, "%s/fq3n-legacy.gguf", tmp);
    snprintf(h, sizeof h, "%s/fq3n-st", tmp);
    if (mk("test-qwen3next", g) || mk("test-qwen3next-legacy", l) || mk("test-qwen3next", h)) {
        CHECKF(0, "mkmodel failed");
        return check_summary("test_formats_qwen3next");
    }
    test_formats(g, l, h);
    mtp_refused(g, "no multi-token-prediction (MTP) layers");
    test_malformed_hf(h);
    test_malformed_gguf(g);
    return check_summary("test_formats_qwen3next");
}
