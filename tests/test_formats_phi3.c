/* Loading Phi-3 / Phi-4 (`phi3`, model/phi3_arch.c) from GGUF and from Hugging Face directories, both
 * written by tools/mkmodel.py from one seed:
 *   - the hyper-parameters the descriptor reads agree across the formats, to the bytes of its own struct
 *     (the partial rotary, LongRoPE's lists, original context and attention factor; the sliding window on
 *     every layer, or none; tied embeddings), and "su" (LongRoPE's former name) reads as "longrope", and
 *     newer transformers' "rope_parameters" as "rope_scaling";
 *   - the same logits from both formats, with the short factors (a configured context of 64, the original
 *     one) and the long ones (128), which differ; a GGUF with separate attn_q/k/v instead of the fused
 *     attn_qkv gives the fused file's logits;
 *   - malformed files are refused with a message naming the tensor or key: missing or misshapen fused
 *     tensors, one LongRoPE list without the other, lists of the wrong length or with a non-positive
 *     factor, an odd rotated width, bad attention factor, original context, window, partial_rotary_factor,
 *     factor lists that are not lists of numbers;
 *   - a file carrying Phi-3's chat template (<|user|> ... <|end|> <|assistant|>, tests/chat/phi3.jinja) or
 *     Phi-4's (<|im_start|>, tests/chat/phi4.jinja) loads and chats through `pith run --chat` (the
 *     templates' rendering itself: test_chat_template). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "model_mem.h"
#include "model/phi3.h"
#include "pith/model.h"
#include "pith/modelfile.h"

static const char *src, *tmp;
static char edit_py[4200];

/* Rewrites a GGUF (argv: tools dir, in, out, JSON ops): "meta" {key: [value, type id]} replaces or adds
 * keys, "drop" removes tensors, "set" replaces (or adds) a tensor as an F32 vector, "rows" keeps a
 * matrix's first rows, "split_qkv" [q, kv] writes attn_qkv as attn_q, attn_k and attn_v. A Hugging Face
 * directory (in == out): "move" [[old, new]] renames config.json members, then "config" {key or key.sub:
 * value} sets them, "rename" [[old, new]] renames
 * tensors in model.safetensors' header (names of the same length). */
static const char EDIT_PY[] =
    "import json, sys\n"
    "sys.path.insert(0, sys.argv[1] + '/tools')\n"
    "import numpy as np, pith_gguf as G\n"
    "op = json.loads(sys.argv[4])\n"
    "if sys.argv[2] == sys.argv[3]:\n"
    "    d = sys.argv[2]\n"
    "    c = json.load(open(d + '/config.json'))\n"
    "    for a, b in op.get('move', []): c[b] = c.pop(a)\n"
    "    for k, v in op.get('config', {}).items():\n"
    "        o = c\n"
    "        *path, last = k.split('.')\n"
    "        for p in path: o = o[p]\n"
    "        o[last] = v\n"
    "    json.dump(c, open(d + '/config.json', 'w'))\n"
    "    if op.get('rename'):\n"
    "        raw = bytearray(open(d + '/model.safetensors', 'rb').read())\n"
    "        for a, b in op['rename']:\n"
    "            i = raw.find(a.encode()); assert i > 0 and len(a) == len(b); raw[i:i + len(a)] = b.encode()\n"
    "        open(d + '/model.safetensors', 'wb').write(raw)\n"
    "    sys.exit(0)\n"
    "r = G.GGUFReader(sys.argv[2]); w = G.GGUFWriter(sys.argv[3])\n"
    "meta = op.get('meta', {})\n"
    "for k, v in r.metadata.items():\n"
    "    if k not in meta: w.add(k, v, *r.metadata_types[k])\n"
    "for k, (v, t) in meta.items(): w.add(k, v, t)\n"
    "for n in r.tensors:\n"
    "    shape, t = r.tensors[n][0], r.tensors[n][1]\n"
    "    if n in op.get('drop', []): continue\n"
    "    if n in op.get('set', {}):\n"
    "        a = np.array(op['set'][n], dtype=np.float32); w.add_tensor(n, a.shape, G.F32, a); continue\n"
    "    if n in op.get('rows', {}):\n"
    "        a = np.ascontiguousarray(r.tensor(n)[:op['rows'][n]]); w.add_tensor(n, a.shape, G.F32, a); continue\n"
    "    if op.get('split_qkv') and n.endswith('attn_qkv.weight'):\n"
    "        x = r.tensor(n); q, kv = op['split_qkv']; b = n[:-len('attn_qkv.weight')]\n"
    "        for part, a in (('attn_q.weight', x[:q]), ('attn_k.weight', x[q:q + kv]), ('attn_v.weight', x[q + kv:])):\n"
    "            w.add_tensor(b + part, a.shape, G.F32, np.ascontiguousarray(a))\n"
    "        continue\n"
    "    w.add_tensor(n, shape, t, bytes(r.raw(n)))\n"
    "for n, v in op.get('set', {}).items():\n"
    "    if n not in r.tensors: a = np.array(v, dtype=np.float32); w.add_tensor(n, a.shape, G.F32, a)\n"
    "w.write()\n";

static int edit(const char *in, const char *out, const char *json) {
    char cmd[16000];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 '%s' '%s' '%s' '%s' '%s' >/dev/null", edit_py, src, in, out, json);
    return system(cmd);
}

static int mk(const char *preset, const char *out) {
    char cmd[12000];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 '%s/tools/mkmodel.py' --preset %s --seed 5 --out '%s' >/dev/null 2>&1",
             src, preset, out);
    return system(cmd);
}

static const pith_phi3_params *P(const pith_hparams *hp) { return hp->arch_params; }

static void refused(const char *path, const char *want) {
    pith_model_file *f = NULL;
    pith_err err = {0};
    int rc = pith_model_file_open(path, &f, &err);
    CHECKF(rc != 0 && strstr(err.msg, want), "%s: want an error with '%s', got rc %d '%s'", path, want, rc,
           rc ? err.msg : "");
    if (!rc) pith_model_file_close(f);
}

/* The last row's logits of a 12-token prompt, the model prepared for a context of ctx positions. */
static int last_logits(const char *path, int ctx, float *out, int n_vocab) {
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
    } else if (tm_alloc(m, 16, ctx / 16, 16, PITH_F32, &err)) {
        CHECKF(0, "%s: %s", path, err.msg);
    } else {
        enum { N = 12 };
        int32_t tok[N], pos[N], seq[N] = {0}, slot[N], table[1] = {0};
        uint8_t want[N] = {0};
        for (int i = 0; i < N; i++) tok[i] = (i * 53 + 7) % n_vocab, pos[i] = i, slot[i] = i;
        want[N - 1] = 1;
        tm_batch t;
        tm_batch_init(&t, m, N, tok, pos, seq, slot, want, 1, 1, table);
        rc = pith_model_forward(m, &t.b, out, &err);
        CHECKF(rc == 0, "%s: %s", path, err.msg);
        pith_model_mem_free(m);
    }
    pith_model_free(m);
    return rc;
}

static double max_diff(const float *a, const float *b, int n) {
    double d = 0;
    for (int i = 0; i < n; i++) d = fmax(d, fabs((double)a[i] - b[i]));
    return d;
}

static void same_params(const pith_model_file *a, const pith_model_file *b, const char *what) {
    const pith_hparams *ha = pith_model_file_hparams(a), *hb = pith_model_file_hparams(b);
    CHECKF(!strcmp(ha->arch, "phi3") && !strcmp(hb->arch, "phi3") && ha->arch_params && hb->arch_params &&
               !memcmp(ha->arch_params, hb->arch_params, sizeof(pith_phi3_params)),
           "%s: phi3's own hyper-parameters differ (rope_dim %d/%d, factors %d/%d, original %d/%d, attention %.9g/%.9g)",
           what, P(ha)->rope_dim, P(hb)->rope_dim, P(ha)->n_factors, P(hb)->n_factors, P(ha)->orig_ctx, P(hb)->orig_ctx,
           P(ha)->attn_factor, P(hb)->attn_factor);
    CHECKF(ha->sliding_window == hb->sliding_window && !memcmp(ha->layer_swa, hb->layer_swa, sizeof ha->layer_swa) &&
               ha->tied_embeddings == hb->tied_embeddings && ha->head_dim == hb->head_dim &&
               ha->n_kv_heads == hb->n_kv_heads && ha->rope_style == hb->rope_style && ha->rope_theta == hb->rope_theta,
           "%s: window %d/%d, tied %d/%d, head_dim %d/%d", what, ha->sliding_window, hb->sliding_window,
           ha->tied_embeddings, hb->tied_embeddings, ha->head_dim, hb->head_dim);
}

static void test_longrope(void) {
    char g[4200], h[4200], bad[4200], split[4200];
    snprintf(g, sizeof g, "%s/phi3.gguf", tmp);
    snprintf(h, sizeof h, "%s/phi3-st", tmp);
    snprintf(bad, sizeof bad, "%s/phi3-bad.gguf", tmp);
    snprintf(split, sizeof split, "%s/phi3-split.gguf", tmp);
    if (mk("test-phi3", g) || mk("test-phi3", h)) {
        CHECKF(0, "mkmodel failed");
        return;
    }
    pith_model_file *a = NULL, *b = NULL;
    pith_err err;
    CHECKF(pith_model_file_open(g, &a, &err) == 0, "%s", err.msg);
    CHECKF(pith_model_file_open(h, &b, &err) == 0, "%s", err.msg);
    if (a && b) {
        same_params(a, b, "test-phi3 GGUF vs config.json");
        const pith_hparams *hp = pith_model_file_hparams(a);
        const pith_phi3_params *p = P(hp);
        /* mkmodel_phi3: 0.75 of 64, original context 64 of 512, sqrt(1 + ln 8 / ln 64) = sqrt(1.5) */
        CHECKF(p->rope_dim == 48 && p->n_factors == 24 && p->orig_ctx == 64 &&
                   fabs(p->attn_factor - sqrt(1.5)) < 1e-6 && p->short_factor[0] == 1.0f &&
                   fabsf(p->short_factor[23] - 1.6f) < 1e-6f && p->long_factor[0] == 1.25f &&
                   fabsf(p->long_factor[23] - 16.0f) < 1e-5f && hp->tied_embeddings && hp->sliding_window == 0 &&
                   hp->n_kv_heads == 2 && hp->rope_style == PITH_ROPE_HALF,
               "test-phi3: rope_dim %d, %d factors, original %d, attention %g, short %g..%g, long %g..%g",
               p->rope_dim, p->n_factors, p->orig_ctx, p->attn_factor, p->short_factor[0], p->short_factor[23],
               p->long_factor[0], p->long_factor[23]);
    }
    pith_model_file_close(a);
    pith_model_file_close(b);

    /* logits: the formats agree, with either list; the lists differ */
    enum { V = 512 };
    static float gs[V], hs[V], gl[V], hl[V], sl[V];
    if (!last_logits(g, 64, gs, V) && !last_logits(h, 64, hs, V) && !last_logits(g, 128, gl, V) &&
        !last_logits(h, 128, hl, V)) {
        double d_short = max_diff(gs, hs, V), d_long = max_diff(gl, hl, V), d_lists = max_diff(gs, gl, V);
        CHECKF(d_short <= 1e-5 && d_long <= 1e-5, "GGUF vs safetensors: %g (short), %g (long)", d_short, d_long);
        CHECKF(d_lists > 1e-2, "the short and long factors give the same logits (%g)", d_lists);
        printf("test-phi3: GGUF vs safetensors %.1g (short factors), %.1g (long); short vs long %.3g\n", d_short,
               d_long, d_lists);
    }
    /* separate attn_q/k/v (llama.cpp accepts them) give the fused file's logits */
    CHECK(edit(g, split, "{\"split_qkv\": [256, 128]}") == 0);
    if (!last_logits(split, 128, sl, V)) {
        CHECKF(max_diff(sl, gl, V) <= 1e-5, "separate Q/K/V: logits differ by %g", max_diff(sl, gl, V));
        printf("test-phi3: separate attn_q/k/v vs fused attn_qkv: %.1g\n", max_diff(sl, gl, V));
    }

    /* malformed GGUF */
    CHECK(edit(g, bad, "{\"drop\": [\"blk.1.attn_qkv.weight\"]}") == 0);
    refused(bad, "missing tensor 'blk.1.attn_qkv.weight'");
    CHECK(edit(g, bad, "{\"drop\": [\"blk.2.ffn_up.weight\"]}") == 0);
    refused(bad, "missing tensor 'blk.2.ffn_up.weight'");
    CHECK(edit(g, bad, "{\"rows\": {\"blk.0.ffn_up.weight\": 512}}") == 0);
    refused(bad, "tensor 'blk.0.ffn_up.weight' has shape [256, 512, 1, 1], expected [256, 1024]");
    CHECK(edit(g, bad, "{\"rows\": {\"blk.0.attn_qkv.weight\": 256}}") == 0);
    refused(bad, "tensor 'blk.0.attn_qkv.weight' has shape [256, 256, 1, 1], expected [256, 512]");
    CHECK(edit(split, bad, "{\"drop\": [\"blk.2.attn_k.weight\"]}") == 0);
    refused(bad, "blk.2.attn_k.weight");
    CHECK(edit(g, bad, "{\"set\": {\"blk.0.attn_qkv.bias\": [0, 0]}}") == 0);
    refused(bad, "tensor 'blk.0.attn_qkv.bias' is not supported for architecture phi3");
    CHECK(edit(g, bad, "{\"drop\": [\"rope_factors_short.weight\"]}") == 0);
    refused(bad, "missing tensor 'rope_factors_short.weight'");
    CHECK(edit(g, bad, "{\"set\": {\"rope_factors_long.weight\": [1, 2, 3]}}") == 0);
    refused(bad, "tensor 'rope_factors_long.weight' has shape [3, 1, 1, 1], expected [24]");
    CHECK(edit(g, bad, "{\"set\": {\"rope_factors_long.weight\": [0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, "
                       "1, 1, 1, 1, 1, 1, 1]}}") == 0);
    refused(bad, "LongRoPE factor 0 (short 1, long 0) is not a positive number");
    CHECK(edit(g, bad, "{\"meta\": {\"phi3.rope.dimension_count\": [47, 4]}}") == 0);
    refused(bad, "RoPE over 47 of 64 head dimensions");
    CHECK(edit(g, bad, "{\"meta\": {\"phi3.rope.scaling.attn_factor\": [-1.0, 6]}}") == 0);
    refused(bad, "LongRoPE attention factor -1 is not a positive number");
    CHECK(edit(g, bad, "{\"meta\": {\"phi3.rope.scaling.original_context_length\": [0, 4]}}") == 0);
    refused(bad, "LongRoPE original context 0 is not positive");
    CHECK(edit(g, bad, "{\"meta\": {\"phi3.attention.sliding_window\": [-4, 5]}}") == 0);
    refused(bad, "phi3.attention.sliding_window = -4 is out of range");
    CHECK(edit(g, bad, "{\"meta\": {\"phi3.rope.scaling.attn_factor\": [\"x\", 8]}}") == 0);
    refused(bad, "rope.scaling.attn_factor");

    /* config.json: "su" is LongRoPE's former name */
    char cmd[16000], su[4300];
    snprintf(su, sizeof su, "%s-su", h);
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -r '%s' '%s'", su, h, su);
    CHECK(system(cmd) == 0);
    CHECK(edit(su, su, "{\"config\": {\"rope_scaling.type\": \"su\"}}") == 0);
    CHECKF(pith_model_file_open(g, &a, &err) == 0, "%s", err.msg);
    CHECKF(pith_model_file_open(su, &b, &err) == 0, "%s", err.msg);
    if (a && b) same_params(a, b, "test-phi3 GGUF vs config.json with \"su\"");
    pith_model_file_close(a);
    pith_model_file_close(b);
    /* newer transformers' "rope_parameters" (rope_theta and the kind inside) */
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -r '%s' '%s'", su, h, su);
    CHECK(system(cmd) == 0);
    CHECK(edit(su, su, "{\"move\": [[\"rope_scaling\", \"rope_parameters\"]], \"config\": {\"rope_parameters.rope_type\": "
                       "\"longrope\", \"rope_parameters.rope_theta\": 10000.0}}") == 0);
    CHECKF(pith_model_file_open(g, &a, &err) == 0, "%s", err.msg);
    CHECKF(pith_model_file_open(su, &b, &err) == 0, "%s", err.msg);
    if (a && b) same_params(a, b, "test-phi3 GGUF vs config.json with \"rope_parameters\"");
    pith_model_file_close(a);
    pith_model_file_close(b);

    /* malformed config.json: each case on a fresh copy */
    const struct { const char *ops, *want; } cases[] = {
        {"{\"config\": {\"rope_scaling.long_factor\": [1, 2]}}",
         "LongRoPE \"short_factor\" has 24 entries and \"long_factor\" 2"},
        {"{\"config\": {\"rope_scaling.long_factor\": [1, 2], \"rope_scaling.short_factor\": [1, 2]}}",
         "LongRoPE has 2 factors per list, expected 24 (half the 48 rotated dimensions)"},
        {"{\"config\": {\"rope_scaling.short_factor\": 1.0}}", "LongRoPE \"short_factor\" is missing or not a list"},
        {"{\"config\": {\"rope_scaling.long_factor\": [\"a\"]}}", "LongRoPE \"long_factor\" entry 0 is not a number"},
        {"{\"config\": {\"rope_scaling.short_factor\": [-1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, "
         "1, 1, 1, 1]}}", "LongRoPE factor 0 (short -1, long 1.25) is not a positive number"},
        {"{\"config\": {\"rope_scaling.attention_factor\": -2.0}}", "LongRoPE attention factor -2"},
        {"{\"config\": {\"original_max_position_embeddings\": 0}}", "\"original_max_position_embeddings\" 0 is not positive"},
        {"{\"config\": {\"partial_rotary_factor\": 1.5}}", "partial_rotary_factor 1.5 is not in (0, 1]"},
        {"{\"config\": {\"partial_rotary_factor\": 0.7}}", "expected 22 (half the 44 rotated dimensions)"},
        {"{\"config\": {\"sliding_window\": -1}}", "sliding_window -1 is negative"},
        {"{\"config\": {\"sliding_window\": \"x\"}}", "sliding_window"},
        {"{\"config\": {\"rope_scaling\": [1]}}", "rope_scaling"},
        {"{\"config\": {\"rope_scaling\": null, \"rope_parameters\": {\"rope_type\": \"linear\", \"factor\": 2.0}}}",
         "rope_parameters.rope_type 'linear' is not supported for phi3"},
        {"{\"rename\": [[\"layers.1.self_attn.qkv_proj\", \"layers.1.self_attn.qkv_prox\"]]}",
         "missing tensor 'blk.1.attn_qkv.weight'"},
        {"{\"rename\": [[\"layers.0.mlp.gate_up_proj\", \"layers.0.mlp.gate_up_prox\"]]}",
         "missing tensor 'blk.0.ffn_up.weight'"},
    };
    char copy[4300];
    snprintf(copy, sizeof copy, "%s-bad", h);
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -r '%s' '%s'", copy, h, copy);
        CHECK(system(cmd) == 0);
        CHECKF(edit(copy, copy, cases[i].ops) == 0, "editing with %s failed", cases[i].ops);
        refused(copy, cases[i].want);
    }
}

static void test_plain(void) {
    char g[4200], h[4200];
    snprintf(g, sizeof g, "%s/phi3-plain.gguf", tmp);
    snprintf(h, sizeof h, "%s/phi3-plain-st", tmp);
    if (mk("test-phi3-plain", g) || mk("test-phi3-plain", h)) {
        CHECKF(0, "mkmodel failed");
        return;
    }
    pith_model_file *a = NULL, *b = NULL;
    pith_err err;
    CHECKF(pith_model_file_open(g, &a, &err) == 0, "%s", err.msg);
    CHECKF(pith_model_file_open(h, &b, &err) == 0, "%s", err.msg);
    if (a && b) {
        same_params(a, b, "test-phi3-plain GGUF vs config.json");
        const pith_hparams *hp = pith_model_file_hparams(a);
        bool every = true;
        for (int l = 0; l < hp->n_layers; l++) every &= pith_hparams_layer_swa(hp, l);
        CHECKF(hp->sliding_window == 16 && every && P(hp)->n_factors == 0 && P(hp)->rope_dim == 64 &&
                   !hp->tied_embeddings,
               "test-phi3-plain: window %d (every layer %d), %d factors, rope_dim %d", hp->sliding_window, every,
               P(hp)->n_factors, P(hp)->rope_dim);
    }
    pith_model_file_close(a);
    pith_model_file_close(b);
    enum { V = 512 };
    static float lg[V], lh[V];
    if (!last_logits(g, 64, lg, V) && !last_logits(h, 64, lh, V))
        CHECKF(max_diff(lg, lh, V) <= 1e-5, "test-phi3-plain: GGUF vs safetensors logits differ by %g", max_diff(lg, lh, V));
    /* a window no shorter than the trained context (the 128k models' 262144) is none */
    char big[4300], cmd[16000];
    snprintf(big, sizeof big, "%s-bigwindow", h);
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -r '%s' '%s'", big, h, big);
    CHECK(system(cmd) == 0);
    CHECK(edit(big, big, "{\"config\": {\"sliding_window\": 262144}}") == 0);
    CHECKF(pith_model_file_open(big, &a, &err) == 0, "%s", err.msg);
    if (a) {
        const pith_hparams *hp = pith_model_file_hparams(a);
        CHECKF(hp->sliding_window == 0 && !pith_hparams_layer_swa(hp, 0), "window 262144 of 256: %d", hp->sliding_window);
        pith_model_file_close(a);
    }
}

/* Phi-3's and Phi-4's chat templates in a test-phi3 GGUF: one chat turn through the CLI. */
static void test_chat_templates(void) {
    const char *pith = getenv("PITH_BIN");
    if (!pith) {
        printf("chat templates skipped: PITH_BIN not set\n");
        return;
    }
    const char *names[] = {"phi3", "phi4"};
    for (int i = 0; i < 2; i++) {
        char g[4200], cmd[16000];
        snprintf(g, sizeof g, "%s/phi3-chat-%s.gguf", tmp, names[i]);
        snprintf(cmd, sizeof cmd,
                 "/usr/bin/python3 '%s/tools/mkmodel.py' --preset test-phi3 --seed 5 --chat-template "
                 "'%s/tests/chat/%s.jinja' --out '%s' >/dev/null 2>&1 && echo 'Hello there' | '%s' run -m '%s' --chat "
                 "-n 3 --temp 0 -t 2 >/dev/null 2>&1",
                 src, src, names[i], g, pith, g);
        CHECKF(system(cmd) == 0, "a chat turn with %s.jinja failed: %s", names[i], cmd);
    }
}

int main(void) {
    src = getenv("PITH_SOURCE_DIR"), tmp = getenv("PITH_TEST_TMP");
    if (!src || !tmp) {
        printf("SKIP: PITH_SOURCE_DIR / PITH_TEST_TMP not set (run through ctest)\n");
        return CHECK_SKIP;
    }
    snprintf(edit_py, sizeof edit_py, "%s/phi3_edit.py", tmp);
    FILE *f = fopen(edit_py, "w");
    CHECK(f && fputs(EDIT_PY, f) >= 0);
    if (f) fclose(f);
    test_longrope();
    test_plain();
    test_chat_templates();
    return check_summary("test_formats_phi3");
}
