/* The forward pass on small random models of every supported shape, against a plain float64 forward pass
 * written here from the architecture definitions (full recomputation per position, no cache, no batching).
 *
 * The models are written to scratch files (GGUF, or a Hugging Face directory with config.json and
 * model.safetensors) and loaded through pith_model_load, so each case runs the real path: qwen3 (per-head
 * Q/K RMSNorm, head_dim * n_heads != dim, rotate-half RoPE), qwen2 (Q/K/V bias, tied output), llama
 * with rope_freqs.weight (adjacent-pair RoPE), llama from Hugging Face with "llama3" rope scaling, and
 * every weight type (F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K), with grouped-query attention throughout.
 *
 * Each model runs a 40-token sequence as one prefill, as single-token decode steps and in 7-token chunks
 * (paged F32 KV cache, block size 8, reversed block table); every logits row is compared with the
 * reference, and the three runs must agree bit for bit.
 * The reference reads the weights at their stored (rounded, quantized) values and, for block-quantized
 * weights, rounds each matmul input to 8 bits per block as the engine's kernels are specified to.
 * Tolerance: 2e-4 of the logit scale (max |logit|, at least 1) for float weights: float32 rounding over
 * sums of a few hundred terms through two layers. For quantized weights 2e-3: float32 and float64 may
 * round an activation that sits within float error of a half-step differently, moving it by one step
 * (1/127 of its block's maximum), which propagates as a small fraction of a logit.
 * Each case also checks that the feature under test matters: the reference with the feature switched
 * off (RoPE scaling, rope_freqs, bias, QK-norm, rope style) must differ by much more than the tolerance. */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "model_mem.h"
#include "pith/batch.h"
#include "pith/kv.h"
#include "pith/model.h"
#include "quant_ref.h"
#include "test_formats_util.h"

#define SEQ 40
#define MAX_TENSORS 64

typedef struct spec {
    const char *name;
    const char *arch;
    bool hf;
    int dim, n_layers, n_heads, n_kv_heads, head_dim, ffn, vocab;
    bool bias, qk_norm, tied, rope_freqs, llama3;
    bool half_rope;     /* what the file format implies: qwen GGUF and every HF file rotate halves */
    pith_dtype wtype;   /* matrices */
    pith_dtype wtype2;  /* attn_v, ffn_down and output (K-quant mixes); 0 means wtype */
    float theta;
    int threads;
} spec;

typedef struct tdata {
    char name[64];
    pith_dtype type;
    int ne0, ne1;      /* ne1 == 0: vector */
    float *vals;       /* values as stored (after rounding/quantization) */
    uint8_t *bytes;
    size_t nbytes;
} tdata;

typedef struct synth {
    const spec *s;
    tdata t[MAX_TENSORS];
    int nt;
} synth;

static const tdata *find(const synth *m, const char *name) {
    for (int i = 0; i < m->nt; i++)
        if (!strcmp(m->t[i].name, name)) return &m->t[i];
    return NULL;
}

static const float *tv(const synth *m, const char *name) {
    const tdata *t = find(m, name);
    return t ? t->vals : NULL;
}

static const float *lv(const synth *m, int l, const char *suffix) {
    char n[64];
    snprintf(n, sizeof n, "blk.%d.%s", l, suffix);
    return tv(m, n);
}

static void add(synth *m, const char *name, pith_dtype type, int ne0, int ne1, float lo, float hi) {
    tdata *t = &m->t[m->nt++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->type = type;
    t->ne0 = ne0;
    t->ne1 = ne1;
    int rows = ne1 ? ne1 : 1;
    size_t n = (size_t)ne0 * rows;
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++) x[i] = rnd_uniform(lo, hi);
    t->nbytes = pith_dtype_row_bytes(type, ne0) * rows;
    t->bytes = malloc(t->nbytes);
    t->vals = malloc(n * sizeof *t->vals);
    size_t rb = pith_dtype_row_bytes(type, ne0);
    for (int r = 0; r < rows; r++) {
        ref_quantize(type, x + (size_t)r * ne0, ne0, t->bytes + r * rb);
        for (int i = 0; i < ne0; i++) {
            double mag;
            t->vals[(size_t)r * ne0 + i] = (float)ref_elem(type, t->bytes + r * rb, i, &mag);
        }
    }
    free(x);
}

static void make_model(synth *m, const spec *s) {
    memset(m, 0, sizeof *m);
    m->s = s;
    int q = s->n_heads * s->head_dim, kv = s->n_kv_heads * s->head_dim;
    pith_dtype w2 = s->wtype2 ? s->wtype2 : s->wtype;
    pith_dtype vt = s->hf ? s->wtype : PITH_F32; /* GGUF keeps vectors in F32, HF in the model's type */
    float ws = 1.0f / sqrtf((float)s->dim), wf = 1.0f / sqrtf((float)s->ffn), wq = 1.0f / sqrtf((float)q);
    add(m, "token_embd.weight", s->wtype, s->dim, s->vocab, -1, 1);
    add(m, "output_norm.weight", vt, s->dim, 0, 0.8f, 1.2f);
    if (!s->tied) add(m, "output.weight", w2, s->dim, s->vocab, -2 * ws, 2 * ws);
    if (s->rope_freqs) add(m, "rope_freqs.weight", PITH_F32, s->head_dim / 2, 0, 1, 8);
    for (int l = 0; l < s->n_layers; l++) {
        char n[64];
#define L(suffix) (snprintf(n, sizeof n, "blk.%d.%s", l, suffix), n)
        add(m, L("attn_norm.weight"), vt, s->dim, 0, 0.8f, 1.2f);
        add(m, L("attn_q.weight"), s->wtype, s->dim, q, -2 * ws, 2 * ws);
        add(m, L("attn_k.weight"), s->wtype, s->dim, kv, -2 * ws, 2 * ws);
        add(m, L("attn_v.weight"), w2, s->dim, kv, -2 * ws, 2 * ws);
        add(m, L("attn_output.weight"), s->wtype, q, s->dim, -wq, wq);
        if (s->bias) {
            add(m, L("attn_q.bias"), vt, q, 0, -0.5f, 0.5f);
            add(m, L("attn_k.bias"), vt, kv, 0, -0.5f, 0.5f);
            add(m, L("attn_v.bias"), vt, kv, 0, -0.5f, 0.5f);
        }
        if (s->qk_norm) {
            add(m, L("attn_q_norm.weight"), vt, s->head_dim, 0, 0.5f, 1.5f);
            add(m, L("attn_k_norm.weight"), vt, s->head_dim, 0, 0.5f, 1.5f);
        }
        add(m, L("ffn_norm.weight"), vt, s->dim, 0, 0.8f, 1.2f);
        add(m, L("ffn_gate.weight"), s->wtype, s->dim, s->ffn, -2 * ws, 2 * ws);
        add(m, L("ffn_up.weight"), s->wtype, s->dim, s->ffn, -2 * ws, 2 * ws);
        add(m, L("ffn_down.weight"), w2, s->ffn, s->dim, -wf, wf);
#undef L
    }
}

static void free_model(synth *m) {
    for (int i = 0; i < m->nt; i++) free(m->t[i].vals), free(m->t[i].bytes);
}

/* ---------------- writers ---------------- */

static int write_gguf(const synth *m, const char *path) {
    const spec *s = m->s;
    buf kv = {0}, out = {0};
    char key[96];
    int n_kv = 0;
#define AK(suffix) (snprintf(key, sizeof key, "%s.%s", s->arch, suffix), key)
    gguf_kv_str(&kv, "general.architecture", s->arch), n_kv++;
    gguf_kv_u32(&kv, AK("context_length"), 256), n_kv++;
    gguf_kv_u32(&kv, AK("embedding_length"), (uint32_t)s->dim), n_kv++;
    gguf_kv_u32(&kv, AK("block_count"), (uint32_t)s->n_layers), n_kv++;
    gguf_kv_u32(&kv, AK("feed_forward_length"), (uint32_t)s->ffn), n_kv++;
    gguf_kv_u32(&kv, AK("attention.head_count"), (uint32_t)s->n_heads), n_kv++;
    gguf_kv_u32(&kv, AK("attention.head_count_kv"), (uint32_t)s->n_kv_heads), n_kv++;
    gguf_kv_u32(&kv, AK("attention.key_length"), (uint32_t)s->head_dim), n_kv++;
    gguf_kv_u32(&kv, AK("attention.value_length"), (uint32_t)s->head_dim), n_kv++;
    gguf_kv_f32(&kv, AK("attention.layer_norm_rms_epsilon"), 1e-5f), n_kv++;
    gguf_kv_f32(&kv, AK("rope.freq_base"), s->theta), n_kv++;
#undef AK
    gguf_header(&out, 3, (uint64_t)m->nt, (uint64_t)n_kv);
    buf_put(&out, kv.p, kv.n);
    uint64_t off = 0;
    for (int i = 0; i < m->nt; i++) {
        const tdata *t = &m->t[i];
        uint64_t ne[2] = {(uint64_t)t->ne0, (uint64_t)t->ne1};
        gguf_tensor_info(&out, t->name, t->ne1 ? 2 : 1, ne, (uint32_t)t->type, off);
        off = (off + t->nbytes + 31) / 32 * 32;
    }
    put_pad(&out, 32);
    for (int i = 0; i < m->nt; i++) {
        buf_put(&out, m->t[i].bytes, m->t[i].nbytes);
        put_pad(&out, 32);
    }
    int rc = write_file(path, out.p, out.n);
    buf_free(&kv);
    buf_free(&out);
    return rc;
}

/* Canonical name -> Hugging Face name. */
static void hf_name(const char *canon, char *out, size_t cap) {
    static const char *map[][2] = {
        {"attn_norm.weight", "input_layernorm.weight"},   {"attn_q.weight", "self_attn.q_proj.weight"},
        {"attn_k.weight", "self_attn.k_proj.weight"},     {"attn_v.weight", "self_attn.v_proj.weight"},
        {"attn_output.weight", "self_attn.o_proj.weight"}, {"attn_q.bias", "self_attn.q_proj.bias"},
        {"attn_k.bias", "self_attn.k_proj.bias"},         {"attn_v.bias", "self_attn.v_proj.bias"},
        {"attn_q_norm.weight", "self_attn.q_norm.weight"}, {"attn_k_norm.weight", "self_attn.k_norm.weight"},
        {"ffn_norm.weight", "post_attention_layernorm.weight"}, {"ffn_gate.weight", "mlp.gate_proj.weight"},
        {"ffn_up.weight", "mlp.up_proj.weight"},          {"ffn_down.weight", "mlp.down_proj.weight"},
    };
    int l;
    char rest[64];
    if (sscanf(canon, "blk.%d.%63s", &l, rest) == 2) {
        for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
            if (!strcmp(rest, map[i][0])) {
                snprintf(out, cap, "model.layers.%d.%s", l, map[i][1]);
                return;
            }
    }
    snprintf(out, cap, "%s",
             !strcmp(canon, "token_embd.weight") ? "model.embed_tokens.weight"
             : !strcmp(canon, "output_norm.weight") ? "model.norm.weight"
             : !strcmp(canon, "output.weight") ? "lm_head.weight" : canon);
}

static int write_hf(const synth *m, const char *dir) {
    const spec *s = m->s;
    if (make_dir(dir)) return -1;
    char path[4200], cfg[2048];
    snprintf(cfg, sizeof cfg,
             "{\"architectures\": [\"%s\"], \"hidden_size\": %d, \"intermediate_size\": %d, "
             "\"num_hidden_layers\": %d, \"num_attention_heads\": %d, \"num_key_value_heads\": %d, "
             "\"head_dim\": %d, \"rms_norm_eps\": 1e-05, \"rope_theta\": %g, \"max_position_embeddings\": 256, "
             "\"vocab_size\": %d, \"tie_word_embeddings\": %s%s}",
             !strcmp(s->arch, "llama") ? "LlamaForCausalLM" : !strcmp(s->arch, "qwen2") ? "Qwen2ForCausalLM"
                                                                                          : "Qwen3ForCausalLM",
             s->dim, s->ffn, s->n_layers, s->n_heads, s->n_kv_heads, s->head_dim, s->theta, s->vocab,
             s->tied ? "true" : "false",
             s->llama3 ? ", \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0, "
                         "\"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 32}"
                       : "");
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (write_text(path, cfg)) return -1;
    buf h = {0}, out = {0};
    buf_put(&h, "{", 1);
    uint64_t off = 0;
    for (int i = 0; i < m->nt; i++) {
        const tdata *t = &m->t[i];
        char name[128], item[512];
        hf_name(t->name, name, sizeof name);
        const char *dt = t->type == PITH_F32 ? "F32" : t->type == PITH_F16 ? "F16" : "BF16";
        int k = t->ne1 ? snprintf(item, sizeof item, "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[%d,%d],\"data_offsets\":[%llu,%llu]}",
                                  i ? "," : "", name, dt, t->ne1, t->ne0, (unsigned long long)off,
                                  (unsigned long long)(off + t->nbytes))
                       : snprintf(item, sizeof item, "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[%d],\"data_offsets\":[%llu,%llu]}",
                                  i ? "," : "", name, dt, t->ne0, (unsigned long long)off,
                                  (unsigned long long)(off + t->nbytes));
        buf_put(&h, item, (size_t)k);
        off += t->nbytes;
    }
    buf_put(&h, "}", 1);
    while (h.n % 8) put_u8(&h, ' ');
    put_u64(&out, h.n);
    buf_put(&out, h.p, h.n);
    for (int i = 0; i < m->nt; i++) buf_put(&out, m->t[i].bytes, m->t[i].nbytes);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    int rc = write_file(path, out.p, out.n);
    buf_free(&h);
    buf_free(&out);
    return rc;
}

/* ---------------- reference forward (float64) ---------------- */

typedef struct ref_opts {
    bool no_scaling;   /* ignore rope_freqs / llama3 scaling */
    bool no_bias;
    bool no_qk_norm;
    bool flip_rope;    /* use the other rope style */
} ref_opts;

static void ref_rmsnorm(double *out, const double *x, const float *w, int n) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    double r = 1.0 / sqrt(ss / n + 1e-5);
    for (int i = 0; i < n; i++) out[i] = x[i] * r * w[i];
}

/* On the Vulkan backend (PITH_DEVICE=vulkan: test_vulkan_engine.sh runs this test there too) the shaders
 * multiply float activations by the exactly decoded weights: the reference then leaves x as it is, and
 * every weight type is held to the float tolerance. */
static bool float_acts;

/* y = W x for the weight `name`. Block-quantized weights are multiplied, as the CPU kernels specify, with x
 * rounded to 8 bits per block of the weight's block size: d = max|x| / 127, x ~ d * round(x / d). */
static void ref_matvec(const synth *m, const char *name, double *y, const double *x, int rows, int cols) {
    const tdata *t = find(m, name);
    int be = (int)pith_dtype_block_elems(t->type);
    double *xq = malloc(cols * sizeof *xq);
    for (int b = 0; b < cols; b += be) {
        double amax = 0;
        for (int i = b; i < b + be; i++) amax = fmax(amax, fabs(x[i]));
        for (int i = b; i < b + be; i++)
            xq[i] = be == 1 || float_acts ? x[i] : amax == 0 ? 0 : amax / 127 * nearbyint(x[i] * 127 / amax);
    }
    for (int r = 0; r < rows; r++) {
        double s = 0;
        for (int c = 0; c < cols; c++) s += (double)t->vals[(size_t)r * cols + c] * xq[c];
        y[r] = s;
    }
    free(xq);
}

static double ref_freq(const synth *m, int i, const ref_opts *o) {
    const spec *s = m->s;
    double f = pow(s->theta, -2.0 * i / s->head_dim);
    if (o->no_scaling) return f;
    if (s->rope_freqs) return f / tv(m, "rope_freqs.weight")[i];
    if (s->llama3) { /* Hugging Face's llama3 rule: factor 8, low 1, high 4, original context 32 */
        double wavelen = 2 * M_PI / f, low_wl = 32.0 / 1.0, high_wl = 32.0 / 4.0;
        if (wavelen < high_wl) return f;
        if (wavelen > low_wl) return f / 8;
        double smooth = (32.0 / wavelen - 1.0) / (4.0 - 1.0);
        return (1 - smooth) * f / 8 + smooth * f;
    }
    return f;
}

static void ref_rope(const synth *m, double *v, int pos, const ref_opts *o) {
    int hd = m->s->head_dim, half = hd / 2;
    bool half_style = m->s->half_rope != o->flip_rope;
    for (int i = 0; i < half; i++) {
        double a = pos * ref_freq(m, i, o), c = cos(a), sn = sin(a);
        int i0 = half_style ? i : 2 * i, i1 = half_style ? i + half : 2 * i + 1;
        double x0 = v[i0], x1 = v[i1];
        v[i0] = x0 * c - x1 * sn;
        v[i1] = x0 * sn + x1 * c;
    }
}

/* "blk.L.suffix" in a ring of static buffers */
static const char *LN(int l, const char *suffix) {
    static char ring[4][64];
    static int k;
    char *p = ring[k++ % 4];
    snprintf(p, 64, "blk.%d.%s", l, suffix);
    return p;
}

/* logits[p][vocab] for the sequence tok[0..n) */
static void ref_forward(const synth *m, const int *tok, int n, double *logits, const ref_opts *o) {
    const spec *s = m->s;
    int dim = s->dim, hd = s->head_dim, q_dim = s->n_heads * hd, kvd = s->n_kv_heads * hd, group = s->n_heads / s->n_kv_heads;
    double *x = calloc((size_t)n * dim, sizeof *x), *xb = malloc(dim * sizeof *xb);
    double *K = malloc((size_t)n * kvd * sizeof *K), *V = malloc((size_t)n * kvd * sizeof *V);
    double *q = malloc(q_dim * sizeof *q), *att = malloc(q_dim * sizeof *att), *tmp = malloc((dim > s->ffn ? dim : s->ffn) * sizeof *tmp);
    double *g = malloc(s->ffn * sizeof *g), *u = malloc(s->ffn * sizeof *u), *sc = malloc(n * sizeof *sc);
    const float *embd = tv(m, "token_embd.weight");
    for (int p = 0; p < n; p++)
        for (int i = 0; i < dim; i++) x[(size_t)p * dim + i] = embd[(size_t)tok[p] * dim + i];
    for (int l = 0; l < s->n_layers; l++) {
        /* K and V of every position first (causality comes from the score range below) */
        for (int p = 0; p < n; p++) {
            ref_rmsnorm(xb, x + (size_t)p * dim, lv(m, l, "attn_norm.weight"), dim);
            ref_matvec(m, LN(l, "attn_k.weight"), K + (size_t)p * kvd, xb, kvd, dim);
            ref_matvec(m, LN(l, "attn_v.weight"), V + (size_t)p * kvd, xb, kvd, dim);
            for (int i = 0; s->bias && !o->no_bias && i < kvd; i++) {
                K[(size_t)p * kvd + i] += lv(m, l, "attn_k.bias")[i];
                V[(size_t)p * kvd + i] += lv(m, l, "attn_v.bias")[i];
            }
            for (int h = 0; h < s->n_kv_heads; h++) {
                double *k = K + (size_t)p * kvd + h * hd;
                if (s->qk_norm && !o->no_qk_norm) ref_rmsnorm(k, k, lv(m, l, "attn_k_norm.weight"), hd);
                ref_rope(m, k, p, o);
            }
        }
        double *xn = malloc((size_t)n * dim * sizeof *xn);
        memcpy(xn, x, (size_t)n * dim * sizeof *xn);
        for (int p = 0; p < n; p++) {
            ref_rmsnorm(xb, x + (size_t)p * dim, lv(m, l, "attn_norm.weight"), dim);
            ref_matvec(m, LN(l, "attn_q.weight"), q, xb, q_dim, dim);
            for (int i = 0; s->bias && !o->no_bias && i < q_dim; i++) q[i] += lv(m, l, "attn_q.bias")[i];
            for (int h = 0; h < s->n_heads; h++) {
                double *qh = q + h * hd;
                if (s->qk_norm && !o->no_qk_norm) ref_rmsnorm(qh, qh, lv(m, l, "attn_q_norm.weight"), hd);
                ref_rope(m, qh, p, o);
                int kh = h / group;
                double mx = -INFINITY, sum = 0;
                for (int j = 0; j <= p; j++) {
                    double d = 0;
                    for (int e = 0; e < hd; e++) d += qh[e] * K[(size_t)j * kvd + kh * hd + e];
                    sc[j] = d / sqrt(hd);
                    mx = fmax(mx, sc[j]);
                }
                for (int j = 0; j <= p; j++) sum += sc[j] = exp(sc[j] - mx);
                for (int e = 0; e < hd; e++) {
                    double a = 0;
                    for (int j = 0; j <= p; j++) a += sc[j] * V[(size_t)j * kvd + kh * hd + e];
                    att[h * hd + e] = a / sum;
                }
            }
            ref_matvec(m, LN(l, "attn_output.weight"), tmp, att, dim, q_dim);
            for (int i = 0; i < dim; i++) xn[(size_t)p * dim + i] += tmp[i];
        }
        for (int p = 0; p < n; p++) {
            double *xp = xn + (size_t)p * dim;
            ref_rmsnorm(xb, xp, lv(m, l, "ffn_norm.weight"), dim);
            ref_matvec(m, LN(l, "ffn_gate.weight"), g, xb, s->ffn, dim);
            ref_matvec(m, LN(l, "ffn_up.weight"), u, xb, s->ffn, dim);
            for (int i = 0; i < s->ffn; i++) g[i] = g[i] / (1 + exp(-g[i])) * u[i];
            ref_matvec(m, LN(l, "ffn_down.weight"), tmp, g, dim, s->ffn);
            for (int i = 0; i < dim; i++) xp[i] += tmp[i];
        }
        memcpy(x, xn, (size_t)n * dim * sizeof *x);
        free(xn);
    }
    for (int p = 0; p < n; p++) {
        ref_rmsnorm(xb, x + (size_t)p * dim, tv(m, "output_norm.weight"), dim);
        ref_matvec(m, s->tied ? "token_embd.weight" : "output.weight", logits + (size_t)p * s->vocab, xb, s->vocab, dim);
    }
    free(x), free(xb), free(K), free(V), free(q), free(att), free(tmp), free(g), free(u), free(sc);
}

/* ---------------- engine runs ---------------- */

/* All SEQ tokens in batches of `chunk` tokens (chunk 1: decode steps); logits of every row. */
static int engine_run(pith_model *pm, const int *tok, int chunk, float *logits) {
    const int bs = 8, n_blocks = (SEQ + bs - 1) / bs;
    pith_err err;
    if (tm_alloc(pm, bs, n_blocks, SEQ, PITH_F32, &err)) return -1;
    int32_t table[8], tokens[SEQ], pos[SEQ], seq[SEQ], slot[SEQ];
    uint8_t want[SEQ];
    for (int i = 0; i < n_blocks; i++) table[i] = n_blocks - 1 - i;
    int rc = 0;
    for (int p0 = 0; p0 < SEQ && !rc; p0 += chunk) {
        int n = SEQ - p0 < chunk ? SEQ - p0 : chunk;
        for (int i = 0; i < n; i++) {
            int p = p0 + i;
            tokens[i] = tok[p], pos[i] = p, seq[i] = 0, want[i] = 1;
            slot[i] = table[p / bs] * bs + p % bs;
        }
        tm_batch b;
        tm_batch_init(&b, pm, n, tokens, pos, seq, slot, want, 1, n_blocks, table);
        rc = pith_model_forward(pm, &b.b, logits + (size_t)p0 * pm->hp.n_vocab, &err);
        if (rc) fprintf(stderr, "forward: %s\n", err.msg);
    }
    pith_model_mem_free(pm);
    return rc;
}

static double max_abs(const double *a, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs(a[i]));
    return m;
}

static double max_diff_d(const double *a, const double *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs(a[i] - b[i]));
    return m;
}

static double max_diff_f(const float *a, const double *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs(a[i] - b[i]);
        if (!(d <= m)) m = d;
    }
    return m;
}

static void run_case(const spec *s, int idx) {
    synth m;
    make_model(&m, s);
    char path[256];
    snprintf(path, sizeof path, s->hf ? "synth_%d_hf" : "synth_%d.gguf", idx);
    const char *file = tmp_path(path);
    if (s->hf ? write_hf(&m, file) : write_gguf(&m, file)) {
        CHECKF(0, "%s: cannot write %s", s->name, file);
        free_model(&m);
        return;
    }
    int tok[SEQ];
    for (int i = 0; i < SEQ; i++) tok[i] = (int)(rnd_u64() % (uint64_t)s->vocab);
    size_t nl = (size_t)SEQ * s->vocab;
    double *ref = malloc(nl * sizeof *ref), *alt = malloc(nl * sizeof *alt);
    ref_opts none = {0};
    ref_forward(&m, tok, SEQ, ref, &none);
    bool quantized = pith_dtype_block_elems(s->wtype) > 1;
    double scale = fmax(1.0, max_abs(ref, nl));
    double tol = (quantized && !float_acts ? 2e-3 : 2e-4) * scale;

    /* the features this case exists for must change the result by far more than the tolerance */
    ref_opts offs[4] = {{.no_scaling = true}, {.no_bias = true}, {.no_qk_norm = true}, {.flip_rope = true}};
    bool relevant[4] = {s->rope_freqs || s->llama3, s->bias, s->qk_norm, true};
    const char *what[4] = {"RoPE scaling", "bias", "QK-norm", "RoPE style"};
    for (int k = 0; k < 4; k++) {
        if (!relevant[k]) continue;
        ref_forward(&m, tok, SEQ, alt, &offs[k]);
        double d = max_diff_d(ref, alt, nl);
        CHECKF(d > 10 * tol, "%s: switching off %s changes the reference by only %g (tolerance %g)", s->name, what[k], d, tol);
    }

    pith_model_options opt = {.n_threads = s->threads};
    pith_model *pm;
    pith_err err;
    if (pith_model_load(file, &opt, &pm, &err)) {
        CHECKF(0, "%s: load: %s", s->name, err.msg);
    } else {
        CHECK(pm->hp.n_vocab == s->vocab && pm->mem.n_groups == 1 && pm->mem.groups[0].k_dim == s->n_kv_heads * s->head_dim);
        float *got[3];
        int chunks[3] = {SEQ, 1, 7};
        const char *how[3] = {"one prefill", "decode steps", "7-token chunks"};
        for (int c = 0; c < 3; c++) {
            got[c] = malloc(nl * sizeof *got[c]);
            for (size_t i = 0; i < nl; i++) got[c][i] = NAN;
            CHECKF(engine_run(pm, tok, chunks[c], got[c]) == 0, "%s: forward failed", s->name);
            double d = max_diff_f(got[c], ref, nl);
            CHECKF(d <= tol, "%s, %s: logits differ from the reference by %g (tolerance %g)", s->name, how[c], d, tol);
            printf("%-48s %-14s max |logit - ref| = %.3g (logit scale %.3g, tolerance %.3g)\n", s->name, how[c], d,
                   scale, tol);
        }
        /* A token's logits must not depend on the batch around it: bit-identical in every split
         * (the engine relies on this to give the same tokens batched, alone, or after preemption). */
        CHECKF(!memcmp(got[0], got[1], nl * sizeof(float)) && !memcmp(got[0], got[2], nl * sizeof(float)),
               "%s: logits depend on how the sequence was split into batches", s->name);
        for (int c = 0; c < 3; c++) free(got[c]);
        pith_model_free(pm);
    }
    free(ref);
    free(alt);
    free_model(&m);
}

int main(void) {
    const char *dev = getenv("PITH_DEVICE");
    float_acts = dev && !strncmp(dev, "vulkan", 6);
    const char *tmp = getenv("PITH_TEST_TMP");
    if (!tmp || !*tmp) printf("note: PITH_TEST_TMP unset, writing models under /tmp\n");
    static const spec cases[] = {
        {"qwen3 GGUF F32 (QK-norm, head_dim*heads != dim)", "qwen3", false, 48, 2, 4, 2, 16, 80, 37,
         .qk_norm = true, .half_rope = true, .wtype = PITH_F32, .theta = 10000, .threads = 1},
        {"qwen2 GGUF F16 (bias, tied output)", "qwen2", false, 64, 2, 4, 1, 16, 96, 50,
         .bias = true, .tied = true, .half_rope = true, .wtype = PITH_F16, .theta = 10000, .threads = 2},
        {"llama GGUF BF16 (rope_freqs.weight)", "llama", false, 40, 2, 4, 2, 10, 72, 33,
         .rope_freqs = true, .wtype = PITH_BF16, .theta = 10000, .threads = 1},
        {"llama HF F32 (llama3 rope scaling)", "llama", true, 32, 2, 2, 1, 16, 48, 30,
         .llama3 = true, .half_rope = true, .wtype = PITH_F32, .theta = 10000, .threads = 2},
        {"qwen3 HF BF16 (QK-norm, tied)", "qwen3", true, 32, 1, 4, 2, 16, 64, 29,
         .qk_norm = true, .tied = true, .half_rope = true, .wtype = PITH_BF16, .theta = 1000000, .threads = 1},
        {"llama GGUF Q8_0 (untied)", "llama", false, 64, 2, 4, 2, 16, 128, 64,
         .wtype = PITH_Q8_0, .theta = 10000, .threads = 2},
        /* This case comes closest to its tolerance, through one rounding tie, not a kernel error. Measured
         * (gcc 12, AVX-512 VNNI table): max 0.0434 of 0.0571, on every logit of position 0 and on no other
         * position; with PITH_FORCE_SCALAR=1, 3.8e-6. At position 0 the input of blk.1's ffn_gate/ffn_up,
         * column 57, sits at x * 127 / amax = -6.500012 in the float64 reference: 1.2e-5 of a step (about
         * 2e-7) from a tie, which the reference rounds to -7. The SIMD Q4_0 tiles round differently in float32
         * (the -8 offset comes out through the activation sums, kernels_avx2.c, and lanes are summed in
         * another order): 3-4x the error of the scalar tile's exact per-block integer sums (rms 2-3e-8 against
         * 8e-9 of sum |w x| for rows of 64 and 96), enough to land on the other side of the tie (-6); the
         * scalar path lands on the reference's side. Rounding that one element the other way in the reference
         * makes the SIMD run match to 4e-6 and the scalar run miss by 0.0434; the AVX2 table (whole 8-row
         * groups for the 40 output rows) and the AVX-512 one (two 16-row groups and 8 rows through the plain
         * tile) give the same 0.0434, and so does the AVX-512 table with Q4_0 unpacked. The step is that large
         * because the tied Q4_0 embedding, whose entries reach 1 (logit scale 28.6), is the output matrix. */
        {"llama GGUF Q4_0 (tied, quantized embeddings)", "llama", false, 64, 2, 4, 4, 16, 96, 40,
         .tied = true, .wtype = PITH_Q4_0, .theta = 10000, .threads = 1},
        {"qwen2 GGUF Q4_K + Q6_K (bias)", "qwen2", false, 256, 1, 8, 2, 32, 256, 32,
         .bias = true, .half_rope = true, .wtype = PITH_Q4_K, .wtype2 = PITH_Q6_K, .theta = 10000, .threads = 2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(&cases[i], (int)i);
    return check_summary("test_llama_synthetic");
}
