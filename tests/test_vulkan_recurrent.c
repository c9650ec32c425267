/* The Vulkan backend's recurrent mixers (short_conv, mamba2, gdn, gated_norm, attn_gate) against the
 * CPU backend's ops on the same random inputs, with their state in one RECURRENT memory group (each op
 * at its own offset of the slot, as a model's layers are). Three steps on both backends:
 *   A: three sequences from position 0 (slots 0, 1, 2; in the batch last sequence first), which leaves
 *      state in every slot;
 *   B: sequence 0 from position 0 again on slot 0 (its old state must not be read), sequence 1
 *      continuing from its state (positions 7..9), sequence 2 a one-token decode; checkpoints after
 *      token 2 of sequence 0 (slot 3) and token 1 of sequence 1 (slot 4); then copy_blocks copies
 *      slot 3 to slot 5;
 *   C: one token from each of the six slots, so every state (the checkpoints and the copy included)
 *      shows in an output.
 * Widths are awkward on purpose (70 channels: not a multiple of the shaders' 64-wide workgroups; key
 * and value heads of different widths; two B/C groups). Tolerance: the CPU's kernels and the shaders
 * sum in other orders (SIMD lanes, FMA), float32 both: |vk - cpu| <= 1e-4 max|cpu| over the op's
 * output, the errors measured are printed (about 1e-6 relative). Skips (77) when no Vulkan device
 * can run pith here. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/info.h"
#include "check.h"
#include "quant_ref.h"

enum { MAXT = 16, SLOTS = 6, VOCAB = 8 };
/* the ops' shapes */
enum { SC_DIM = 70, SC_K = 3 };
enum { M_H = 4, M_G = 2, M_P = 16, M_N = 8, M_K = 4, M_INNER = M_H * M_P, M_CONV = M_INNER + 2 * M_G * M_N };
enum { G_NK = 2, G_NV = 4, G_DK = 32, G_DV = 16, G_K = 4, G_C = 2 * G_NK * G_DK + G_NV * G_DV };
enum { A_NH = 2, A_HD = 32 };
/* the slot: the short convolution's state, Mamba2's, the DeltaNet's */
#define SC_OFF 0
#define M_OFF (SC_OFF + (SC_K - 1) * SC_DIM)
#define G_OFF (M_OFF + (M_K - 1) * M_CONV + M_H * M_P * M_N)
#define SLOT_FLOATS (G_OFF + (G_K - 1) * G_C + G_NV * G_DK * G_DV)

typedef struct side {
    pith_backend *be;
    pith_buf *sc_in, *sc_out, *m_proj, *m_y, *g_qkv, *g_beta, *g_alpha, *g_out, *g_z, *a_att, *a_qg;
    pith_weight *sc_w, *m_cw, *m_cb, *m_dtb, *m_A, *m_D, *m_norm, *g_cw, *g_dtb, *g_a, *g_nw;
} side;

static side S[2];
static const char *names[2] = {"cpu", "vulkan"};
static int layer0;
static pith_mem_spec spec;

static float *randv(size_t n, float lo, float hi) {
    float *v = malloc(n * sizeof *v);
    for (size_t i = 0; v && i < n; i++) v[i] = rnd_uniform(lo, hi);
    return v;
}

/* the same random vector as a weight of both backends (each takes its own copy) */
static int both_vec(int n, float lo, float hi, bool neg_exp, pith_weight **w0, pith_weight **w1, pith_err *err) {
    float *v = randv((size_t)n, lo, hi);
    if (!v) return pith_errf(err, "out of memory");
    if (neg_exp)
        for (int i = 0; i < n; i++) v[i] = -expf(v[i]);
    float *c0 = malloc((size_t)n * sizeof *c0), *c1 = malloc((size_t)n * sizeof *c1);
    if (!c0 || !c1) return free(v), free(c0), free(c1), pith_errf(err, "out of memory");
    memcpy(c0, v, (size_t)n * sizeof *v), memcpy(c1, v, (size_t)n * sizeof *v);
    free(v);
    if (S[0].be->vt->vector(S[0].be, c0, n, w0, err)) return free(c1), -1;
    return S[1].be->vt->vector(S[1].be, c1, n, w1, err);
}

#define VEC(field, n, lo, hi, ne) both_vec(n, lo, hi, ne, &S[0].field, &S[1].field, err)

static int open_sides(pith_err *err) {
    if (pith_backend_create("cpu", 1, &S[0].be, err) || pith_backend_create("vulkan", 0, &S[1].be, err)) return -1;
    spec.n_groups = 1;
    spec.groups[0] = (pith_mem_group){.kind = PITH_MEM_RECURRENT, .n_layers = 1, .layers = &layer0,
                                      .state_bytes = SLOT_FLOATS * sizeof(float)};
    pith_mem_layout lay = {.block_size = 16, .n_groups = 1, .n_blocks = {SLOTS}};
    pith_be_attn_shape shape = {.n_heads = A_NH, .n_kv_heads = A_NH, .head_dim = A_HD, .scale = 0.125f};
    for (int s = 0; s < 2; s++) {
        side *d = &S[s];
        pith_backend *be = d->be;
        if (be->vt->attn_shape(be, &shape, err) || pith_be_gdn_shape(be, G_DK, G_DV, err)) return -1;
        pith_buf **bufs[] = {&d->sc_in, &d->sc_out, &d->m_proj, &d->m_y, &d->g_qkv, &d->g_beta, &d->g_alpha, &d->g_out,
                             &d->g_z, &d->a_att, &d->a_qg};
        const int cols[] = {3 * SC_DIM, SC_DIM, M_INNER + M_CONV + M_H, M_INNER, G_C, G_NV, G_NV, G_NV * G_DV,
                            G_NV * G_DV, A_NH * A_HD, 2 * A_NH * A_HD};
        for (int i = 0; i < (int)(sizeof cols / sizeof *cols); i++)
            if (!(*bufs[i] = pith_be_buffer(be, cols[i], err))) return -1;
        if (pith_be_reserve(be, MAXT, err) || be->vt->mem_alloc(be, &spec, &lay, err)) return -1;
    }
    if (VEC(sc_w, SC_DIM * SC_K, -1, 1, false) || VEC(m_cw, M_CONV * M_K, -0.6f, 0.6f, false) ||
        VEC(m_cb, M_CONV, -0.2f, 0.2f, false) || VEC(m_dtb, M_H, -1, 1, false) || VEC(m_A, M_H, -1, 0.5f, true) ||
        VEC(m_D, M_H, -1, 1, false) || VEC(m_norm, M_INNER, 0.5f, 1.5f, false) ||
        VEC(g_cw, G_C * G_K, -0.6f, 0.6f, false) || VEC(g_dtb, G_NV, -1, 1, false) || VEC(g_a, G_NV, -1, 0.5f, true) ||
        VEC(g_nw, G_DV, 0.5f, 1.5f, false))
        return -1;
    return 0;
}

/* A step: n_seqs sequences of len[s] tokens from pos0[s], on state slots slot[s]; ck[t] checkpoints. */
typedef struct stepdef {
    int n_seqs, len[SLOTS], pos0[SLOTS], slot[SLOTS];
    bool reversed;       /* the sequences' tokens in the batch last sequence first (batch.h allows any order) */
    int32_t ck[MAXT];
} stepdef;

static int32_t tok[MAXT], pos[MAXT], seq[MAXT], slots[SLOTS];
static uint8_t want[MAXT];
static pith_batch_mem bm;
static pith_batch batch;
static float logits[VOCAB];

static int set_step(const stepdef *d, pith_err *err) {
    int n = 0;
    for (int k = 0; k < d->n_seqs; k++) {
        int s = d->reversed ? d->n_seqs - 1 - k : k;
        slots[s] = d->slot[s];
        for (int i = 0; i < d->len[s]; i++, n++) tok[n] = 0, pos[n] = d->pos0[s] + i, seq[n] = s, want[n] = 0;
    }
    bm = (pith_batch_mem){.state_slots = slots, .checkpoints = d->ck};
    batch = (pith_batch){.n_tokens = n, .tokens = tok, .positions = pos, .seq = seq, .want_logits = want,
                         .n_seqs = d->n_seqs, .n_groups = 1, .mem = &bm};
    for (int s = 0; s < 2; s++)
        if (S[s].be->vt->set_step(S[s].be, &batch, &spec, VOCAB, logits, err)) return -1;
    return n;
}

static int put(pith_buf *b0, pith_buf *b1, int n, float lo, float hi, pith_err *err) {
    float *x = randv((size_t)n * b0->cols, lo, hi);
    int rc = !x || S[0].be->vt->buf_write(S[0].be, b0, n, x, err) || S[1].be->vt->buf_write(S[1].be, b1, n, x, err);
    free(x);
    return rc ? -1 : 0;
}

/* Buffer b of both sides after the ops so far: |vk - cpu| <= 1e-4 max|cpu| */
static void compare(const char *what, const char *step, pith_buf *b0, pith_buf *b1, int n) {
    pith_err err;
    size_t count = (size_t)n * b0->cols;
    float *y0 = malloc(count * sizeof *y0), *y1 = malloc(count * sizeof *y1);
    int rc = !y0 || !y1;
    for (int s = 0; s < 2 && !rc; s++)
        rc = S[s].be->vt->sync(S[s].be, &err) || S[s].be->vt->buf_read(S[s].be, s ? b1 : b0, n, s ? y1 : y0, &err);
    CHECKF(rc == 0, "%s, step %s: %s", what, step, rc ? err.msg : "");
    if (!rc) {
        double big = 0, worst = 0;
        for (size_t i = 0; i < count; i++) big = fmax(big, fabs(y0[i]));
        for (size_t i = 0; i < count; i++) worst = fmax(worst, fabs((double)y1[i] - y0[i]));
        bool finite = true;
        for (size_t i = 0; i < count; i++) finite = finite && isfinite(y1[i]);
        printf("  %-12s step %s: %zu values, max|cpu| %.3g, max|vk - cpu| %.3g (%.2g relative)\n", what, step, count,
               big, worst, big > 0 ? worst / big : 0);
        CHECKF(finite && big > 0 && worst <= 1e-4 * big, "%s, step %s: max|vk - cpu| %.3g of max %.3g", what, step,
               worst, big);
    }
    free(y0), free(y1);
}

static void run_ops(const char *step, int n) {
    pith_err err;
    if (put(S[0].sc_in, S[1].sc_in, n, -1, 1, &err) || put(S[0].m_proj, S[1].m_proj, n, -1, 1, &err) ||
        put(S[0].g_qkv, S[1].g_qkv, n, -1, 1, &err) || put(S[0].g_beta, S[1].g_beta, n, -2, 2, &err) ||
        put(S[0].g_alpha, S[1].g_alpha, n, -2, 2, &err) || put(S[0].g_z, S[1].g_z, n, -2, 2, &err) ||
        put(S[0].a_att, S[1].a_att, n, -1, 1, &err) || put(S[0].a_qg, S[1].a_qg, n, -3, 3, &err)) {
        CHECKF(0, "step %s: inputs: %s", step, err.msg);
        return;
    }
    for (int s = 0; s < 2; s++) {
        side *d = &S[s];
        pith_backend *be = d->be;
        const pith_be_short_conv_args sc = {d->sc_in, d->sc_out, d->sc_w, SC_K, 0, SC_OFF};
        pith_be_short_conv(be, &sc, n);
        const pith_be_mamba2_args m = {.proj = d->m_proj, .y = d->m_y, .conv_w = d->m_cw, .conv_b = d->m_cb,
                                       .dt_bias = d->m_dtb, .A = d->m_A, .D = d->m_D, .norm = d->m_norm,
                                       .kernel = M_K, .n_heads = M_H, .n_groups = M_G, .head_dim = M_P,
                                       .d_state = M_N, .norm_group = M_INNER / 2, .eps = 1e-5f, .out_scale = 0.5f,
                                       .group = 0, .state_offset = M_OFF};
        pith_be_mamba2(be, &m, n);
        const pith_be_gdn_args g = {.qkv = d->g_qkv, .beta = d->g_beta, .alpha = d->g_alpha, .out = d->g_out,
                                    .conv_w = d->g_cw, .dt_bias = d->g_dtb, .ssm_a = d->g_a, .kernel = G_K,
                                    .n_k_heads = G_NK, .n_v_heads = G_NV, .dk = G_DK, .dv = G_DV, .qk_tiled = true,
                                    .group = 0, .state_offset = G_OFF};
        pith_be_gdn(be, &g, n);
    }
    compare("short_conv", step, S[0].sc_out, S[1].sc_out, n);
    compare("mamba2", step, S[0].m_y, S[1].m_y, n);
    compare("mamba2 xBC", step, S[0].m_proj, S[1].m_proj, n);
    compare("gdn", step, S[0].g_out, S[1].g_out, n);
    compare("gdn gates", step, S[0].g_alpha, S[1].g_alpha, n);
    compare("gdn conv", step, S[0].g_qkv, S[1].g_qkv, n);
    for (int s = 0; s < 2; s++) {
        const pith_be_gated_norm_args gn = {S[s].g_out, S[s].g_z, S[s].g_nw, 1e-6f};
        pith_be_gated_norm(S[s].be, &gn, n);
        const pith_be_attn_gate_args ag = {S[s].a_att, S[s].a_qg};
        pith_be_attn_gate(S[s].be, &ag, n);
    }
    compare("gated_norm", step, S[0].g_out, S[1].g_out, n);
    compare("attn_gate", step, S[0].a_att, S[1].a_att, n);
}

int main(void) {
    char devs[8192];
    pith_err err;
    pith_backend_list_devices(devs, sizeof devs, &err);
    bool usable = false;
    for (const char *l = devs; (l = strstr(l, "vulkan:")); l++) {
        const char *eol = strchr(l, '\n');
        size_t len = eol ? (size_t)(eol - l) : strlen(l);
        char line[1024];
        snprintf(line, sizeof line, "%.*s", (int)(len < sizeof line ? len : sizeof line - 1), l);
        if (!strstr(line, "cannot run")) usable = true;
    }
    if (!usable) {
        printf("skip: no Vulkan device can run pith here:\n%s", devs);
        return CHECK_SKIP;
    }
    if (open_sides(&err)) {
        CHECKF(0, "opening the backends: %s", err.msg);
    } else {
        stepdef A = {.n_seqs = 3, .len = {4, 6, 2}, .pos0 = {0, 0, 0}, .slot = {0, 1, 2}, .reversed = true};
        stepdef B = {.n_seqs = 3, .len = {5, 3, 1}, .pos0 = {0, 7, 3}, .slot = {0, 1, 2}};
        stepdef C = {.n_seqs = 6, .len = {1, 1, 1, 1, 1, 1}, .pos0 = {5, 10, 4, 3, 9, 3}, .slot = {0, 1, 2, 3, 4, 5}};
        for (int t = 0; t < MAXT; t++) A.ck[t] = B.ck[t] = C.ck[t] = -1;
        B.ck[2] = 3;     /* after token 2 of sequence 0 */
        B.ck[5 + 1] = 4; /* after token 1 of sequence 1 */
        int n;
        if ((n = set_step(&A, &err)) < 0) CHECKF(0, "step A: %s", err.msg);
        else run_ops("A", n);
        if ((n = set_step(&B, &err)) < 0) CHECKF(0, "step B: %s", err.msg);
        else run_ops("B", n);
        const int32_t src[1] = {3}, dst[1] = {5};
        for (int s = 0; s < 2; s++)
            CHECKF(S[s].be->vt->copy_blocks(S[s].be, 0, src, dst, 1, &err) == 0, "copy_blocks on %s: %s", names[s],
                   err.msg);
        if ((n = set_step(&C, &err)) < 0) CHECKF(0, "step C: %s", err.msg);
        else run_ops("C", n);
    }
    for (int s = 0; s < 2; s++) pith_backend_free(S[s].be);
    return check_summary("test_vulkan_recurrent");
}
