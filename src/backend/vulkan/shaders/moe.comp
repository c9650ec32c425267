#version 450
// The routed mixture-of-experts FFN (backend/cpu/moe.h has the math), in three passes that read the
// routing only from device memory (the route rows), so a recorded step replays:
//   ROUTE   a workgroup per token: the router's logits (+ bias), softmax or sigmoid scores, the
//           group-limited choice, top_k by score + selection bias (ties to the lower index), the
//           weights (normalised, times the expert's scale and routed_scale); and the shared expert's
//           gate logit. Route row t: [K experts (as floats) | K weights | shared gate logit].
//   GATE_UP an invocation per (token, rank, hidden row): gate and up rows of the chosen expert (stacked:
//           expert e's rows start at row e * rows) times the token's input, biases, the activation;
//           into h row t at rank * rows. SHARED mode: expert 0 of the shared weights, rank 0, SiLU,
//           times sigmoid(shared gate logit) when gated.
//   DOWN    an invocation per (token, output row): out += sum over ranks in rank order of w_j (down_e h_j
//           + down bias); SHARED mode: out += down h.
// The grouped form (vk_moe.c's default) replaces GATE_UP and DOWN by SORT (the pairs by expert),
// GATE_UP_GROUPED and DOWN_GROUPED (a workgroup per expert and 64 rows, over its gathered pairs) and
// COMBINE (each token's expert outputs summed in rank order): the same sums, so the same bits.
// Every dot product adds its 32-column units in matmul.comp's order (classes of u mod 32).
#include "common.glsl"
#include "dequant.glsl"

layout(push_constant) uniform P {
    uint64_t w;    // ROUTE: router; GATE_UP: gate; DOWN: down (a stack of experts)
    uint64_t v;    // ROUTE: the shared expert's gate vector (0: none); GATE_UP: up
    uint64_t x;    // ROUTE, GATE_UP: the op's input rows; DOWN: h
    uint64_t o;    // GATE_UP: h; DOWN: the op's output rows
    uint64_t r;    // the route rows
    uint64_t a1;   // ROUTE: router bias; GATE_UP: gate bias; DOWN: down bias (0: none)
    uint64_t a2;   // ROUTE: selection bias; GATE_UP: up bias
    uint64_t a3;   // ROUTE: per-expert scale
    uint row_words, rows, cols; // one expert's rows x cols
    uint x_ld, o_ld, r_ld;
    uint n, E, K;
    uint flags;    // bits 0-1 act (0 SiLU, 1 clamped SwiGLU, 2 GELU-tanh); 4 sigmoid gating; 8 norm_topk;
                   // 16 SHARED mode; 32 the shared expert is gated
    uint groups;   // n_group | topk_group << 16 (n_group <= 1: none)
    float routed_scale, alpha, limit;
} p;

#define VL 32u
#define NEG_INF uintBitsToFloat(0xFF800000u)

// row `row` of w (row_words apart) times x from xo on, in matmul.comp's order
float dot_row(U16 w, uint row, F32 x, uint xo) {
    uint units = (p.cols + 31u) / 32u, base = row * p.row_words;
    precise float tot = 0.0;
    for (uint cls = 0u; cls < VL; cls++) {
        precise float acc = 0.0;
        for (uint u = cls; u < units; u += VL) {
            float v[32];
            dequant_unit(w, base, u, v);
            uint lim = min(32u, p.cols - u * 32u), xu = xo + u * 32u;
            precise float s = 0.0;
            for (uint i = 0u; i < lim; i++) s += v[i] * x.v[xu + i];
            acc += s;
        }
        tot += acc;
    }
    return tot;
}

// The expert's activation of gate gv and up uv (row: the stacked row, for the biases; ~0: the shared
// expert, SiLU without biases)
float activate(float gv, float uv, uint row) {
    uint act = p.flags & 3u;
    if (row == ~0u) {
        act = 0u;
    } else {
        if (p.a1 != 0ul) gv += F32(p.a1).v[row];
        if (p.a2 != 0ul) uv += F32(p.a2).v[row];
    }
    if (act == 0u) return gv / (1.0 + exp(-gv)) * uv;
    if (act == 2u) { // gelu_tanh as eltwise.comp writes it: (1 + tanh(u)) / 2 = 1 / (1 + exp(-2u))
        float z = 0.7978845608028654 * (gv + 0.044715 * gv * gv * gv);
        return gv / (1.0 + exp(-2.0 * z)) * uv;
    }
    float gc = min(gv, p.limit), uc = clamp(uv, -p.limit, p.limit);
    return (uc + 1.0) * gc / (1.0 + exp(-p.alpha * gc));
}

#ifdef ROUTE
layout(local_size_x = 64) in;
shared float sc[1024];  // scores (PITH_BE_MAX_EXPERTS)
shared float key[1024]; // selection keys; -inf: closed or taken

void main() {
    uint t = flat_group();
    if (t >= p.n) return;
    uint E = p.E, K = p.K, lid = gl_LocalInvocationID.x;
    F32 x = F32(p.x);
    for (uint e = lid; e < E; e += 64u) {
        float l = dot_row(U16(p.w), e, x, t * p.x_ld);
        if (p.a1 != 0ul) l += F32(p.a1).v[e];
        sc[e] = l;
    }
    barrier();
    if (lid != 0u) return;
    bool sigm = (p.flags & 4u) != 0u;
    if (!sigm) {
        float mx = sc[0];
        for (uint e = 1u; e < E; e++) mx = max(mx, sc[e]);
        float sum = 0.0;
        for (uint e = 0u; e < E; e++) sum += exp(sc[e] - mx);
        for (uint e = 0u; e < E; e++) sc[e] = exp(sc[e] - mx) / sum;
    } else {
        for (uint e = 0u; e < E; e++) sc[e] = 1.0 / (1.0 + exp(-sc[e]));
    }
    for (uint e = 0u; e < E; e++) key[e] = sc[e] + (p.a2 != 0ul ? F32(p.a2).v[e] : 0.0);
    uint G = p.groups & 0xFFFFu, TG = p.groups >> 16;
    if (G > 1u) { // close all but the topk_group best groups (their best key, or the sum of two with sigmoid)
        uint per = E / G;
        uint open_mask[32]; // 1024 groups at most
        for (uint i = 0u; i < 32u; i++) open_mask[i] = 0u;
        for (uint j = 0u; j < TG; j++) {
            int best = -1;
            float bs = 0.0;
            for (uint g = 0u; g < G; g++) {
                if ((open_mask[g >> 5] & (1u << (g & 31u))) != 0u) continue;
                float first = NEG_INF, second = NEG_INF;
                for (uint e = g * per; e < (g + 1u) * per; e++) {
                    float k = key[e];
                    if (k > first) { second = first; first = k; }
                    else if (k > second) second = k;
                }
                float s = sigm && per > 1u ? first + second : first;
                if (best < 0 || s > bs) { best = int(g); bs = s; }
            }
            open_mask[uint(best) >> 5] |= 1u << (uint(best) & 31u);
        }
        for (uint e = 0u; e < E; e++)
            if ((open_mask[(e / per) >> 5] & (1u << ((e / per) & 31u))) == 0u) key[e] = NEG_INF;
    }
    F32 r = F32(p.r);
    uint ro = t * p.r_ld;
    float chosen = 0.0;
    for (uint j = 0u; j < K; j++) {
        int best = -1;
        float bk = 0.0;
        for (uint e = 0u; e < E; e++) {
            float k = key[e];
            if (isinf(k) && k < 0.0) continue;
            if (best < 0 || k > bk) { best = int(e); bk = k; }
        }
        if (best < 0) best = 0; // never: the config leaves top_k experts open
        key[best] = NEG_INF;
        r.v[ro + j] = float(best);
        r.v[ro + K + j] = sc[best];
        chosen += sc[best];
    }
    for (uint j = 0u; j < K; j++) {
        float wj = r.v[ro + K + j];
        if ((p.flags & 8u) != 0u && chosen > 0.0) wj = wj / chosen;
        if (p.a3 != 0ul) wj *= F32(p.a3).v[uint(r.v[ro + j])];
        if (p.routed_scale > 0.0 && p.routed_scale != 1.0) wj *= p.routed_scale;
        r.v[ro + K + j] = wj;
    }
    if (p.v != 0ul) {
        F32 sv = F32(p.v);
        float d = 0.0;
        for (uint i = 0u; i < p.cols; i++) d += x.v[t * p.x_ld + i] * sv.v[i];
        r.v[ro + 2u * K] = d;
    }
}
#elif defined(GATE_UP)
layout(local_size_x = 64) in;

void main() {
    uint per_pair = (p.rows + 63u) / 64u, g = flat_group();
    uint pair = g / per_pair, i = (g % per_pair) * 64u + gl_LocalInvocationID.x;
    bool shared_mode = (p.flags & 16u) != 0u;
    uint K = shared_mode ? 1u : p.K;
    if (pair >= p.n * K || i >= p.rows) return;
    uint t = pair / K, j = pair % K;
    F32 r = F32(p.r);
    uint e = shared_mode ? 0u : uint(r.v[t * p.r_ld + j]);
    uint row = e * p.rows + i;
    F32 x = F32(p.x);
    float gv = dot_row(U16(p.w), row, x, t * p.x_ld);
    float uv = dot_row(U16(p.v), row, x, t * p.x_ld);
    float h = activate(gv, uv, shared_mode ? ~0u : row);
    if (shared_mode && (p.flags & 32u) != 0u) h *= 1.0 / (1.0 + exp(-r.v[t * p.r_ld + 2u * p.K]));
    F32(p.o).v[t * p.o_ld + j * p.rows + i] = h;
}
#elif defined(DOWN)
layout(local_size_x = 64) in;

void main() {
    uint per_tok = (p.rows + 63u) / 64u, g = flat_group();
    uint t = g / per_tok, i = (g % per_tok) * 64u + gl_LocalInvocationID.x;
    if (t >= p.n || i >= p.rows) return;
    F32 o = F32(p.o), x = F32(p.x);
    uint oi = t * p.o_ld + i;
    precise float acc = o.v[oi];
    if ((p.flags & 16u) != 0u) {
        acc += dot_row(U16(p.w), i, x, t * p.x_ld);
    } else {
        F32 r = F32(p.r);
        for (uint j = 0u; j < p.K; j++) {
            uint e = uint(r.v[t * p.r_ld + j]);
            float wj = r.v[t * p.r_ld + p.K + j];
            float s = dot_row(U16(p.w), e * p.rows + i, x, t * p.x_ld + j * p.cols);
            if (p.a1 != 0ul) s += F32(p.a1).v[e * p.rows + i];
            acc += wj * s;
        }
    }
    o.v[oi] = acc;
}
#elif defined(SORT)
// The grouped form's counting sort (one invocation: n * top_k pairs): the sort rows hold offsets[E + 1],
// then list[n K] (the pair t * K + j of each gathered row, experts in index order, tokens in batch order
// within an expert), then pos[n K] (the gathered row of each pair).
layout(local_size_x = 1) in;
shared uint cursor[1024];

void main() {
    uint E = p.E, K = p.K, NK = p.n * p.K;
    F32 r = F32(p.r);
    I32 so = I32(p.a3);
    for (uint e = 0u; e < E; e++) cursor[e] = 0u;
    for (uint q = 0u; q < NK; q++) cursor[uint(r.v[(q / K) * p.r_ld + q % K])]++;
    uint at = 0u;
    for (uint e = 0u; e < E; e++) {
        so.v[e] = int(at);
        uint c = cursor[e];
        cursor[e] = at;
        at += c;
    }
    so.v[E] = int(at);
    for (uint q = 0u; q < NK; q++) {
        uint e = uint(r.v[(q / K) * p.r_ld + q % K]), row = cursor[e]++;
        so.v[E + 1u + row] = int(q);
        so.v[E + 1u + NK + q] = int(row);
    }
}
#elif defined(GATE_UP_GROUPED) || defined(DOWN_GROUPED)
// The grouped products: a workgroup per (expert, 64 rows); each invocation reads its row of the expert
// once per NT of the expert's gathered rows and keeps a sum per row, adding in dot_row's order, so every
// result has the bits of the per-(token, rank) form. GATE_UP: x the op's input (row of pair q: token
// q / K), o the hidden rows (gathered row g at g * rows). DOWN: x the hidden rows (g * cols), o the expert
// outputs (g * rows).
layout(local_size_x = 64) in;
#define NT 8u

void main() {
    uint per_e = (p.rows + 63u) / 64u, g = flat_group();
    uint e = g / per_e, i = (g % per_e) * 64u + gl_LocalInvocationID.x;
    if (e >= p.E || i >= p.rows) return;
    I32 so = I32(p.a3);
    uint E = p.E, g0 = uint(so.v[e]), g1 = uint(so.v[e + 1u]);
    uint row = e * p.rows + i, units = (p.cols + 31u) / 32u, base = row * p.row_words;
    F32 x = F32(p.x), o = F32(p.o);
    for (uint c0 = g0; c0 < g1; c0 += NT) {
        uint nt = min(NT, g1 - c0);
        uint xo[NT];
        for (uint k = 0u; k < NT; k++) {
#ifdef GATE_UP_GROUPED
            xo[k] = k < nt ? (uint(so.v[E + 1u + c0 + k]) / p.K) * p.x_ld : 0u;
#else
            xo[k] = (c0 + k) * p.x_ld;
#endif
        }
        precise float tot[NT];
#ifdef GATE_UP_GROUPED
        precise float totu[NT];
#endif
        for (uint k = 0u; k < NT; k++) {
            tot[k] = 0.0;
#ifdef GATE_UP_GROUPED
            totu[k] = 0.0;
#endif
        }
        for (uint cls = 0u; cls < VL; cls++) {
            precise float acc[NT];
#ifdef GATE_UP_GROUPED
            precise float accu[NT];
#endif
            for (uint k = 0u; k < NT; k++) {
                acc[k] = 0.0;
#ifdef GATE_UP_GROUPED
                accu[k] = 0.0;
#endif
            }
            for (uint u = cls; u < units; u += VL) {
                float v[32];
                dequant_unit(U16(p.w), base, u, v);
                uint lim = min(32u, p.cols - u * 32u);
                for (uint k = 0u; k < nt; k++) {
                    precise float s = 0.0;
                    for (uint q = 0u; q < lim; q++) s += v[q] * x.v[xo[k] + u * 32u + q];
                    acc[k] += s;
                }
#ifdef GATE_UP_GROUPED
                dequant_unit(U16(p.v), base, u, v);
                for (uint k = 0u; k < nt; k++) {
                    precise float s = 0.0;
                    for (uint q = 0u; q < lim; q++) s += v[q] * x.v[xo[k] + u * 32u + q];
                    accu[k] += s;
                }
#endif
            }
            for (uint k = 0u; k < nt; k++) {
                tot[k] += acc[k];
#ifdef GATE_UP_GROUPED
                totu[k] += accu[k];
#endif
            }
        }
        for (uint k = 0u; k < nt; k++) {
#ifdef GATE_UP_GROUPED
            o.v[(c0 + k) * p.o_ld + i] = activate(tot[k], totu[k], row);
#else
            o.v[(c0 + k) * p.o_ld + i] = tot[k];
#endif
        }
    }
}
#elif defined(COMBINE)
// The grouped form's sum: out[t][i] += w_j (expert output of (t, j) + down bias) over ranks j in order.
layout(local_size_x = 64) in;

void main() {
    uint per_tok = (p.rows + 63u) / 64u, g = flat_group();
    uint t = g / per_tok, i = (g % per_tok) * 64u + gl_LocalInvocationID.x;
    if (t >= p.n || i >= p.rows) return;
    F32 o = F32(p.o), x = F32(p.x), r = F32(p.r);
    I32 so = I32(p.a3);
    uint NK = p.n * p.K, oi = t * p.o_ld + i;
    precise float acc = o.v[oi];
    for (uint j = 0u; j < p.K; j++) {
        uint e = uint(r.v[t * p.r_ld + j]);
        float wj = r.v[t * p.r_ld + p.K + j];
        uint gr = uint(so.v[p.E + 1u + NK + t * p.K + j]);
        float s = x.v[gr * p.x_ld + i];
        if (p.a1 != 0ul) s += F32(p.a1).v[e * p.rows + i];
        acc += wj * s;
    }
    o.v[oi] = acc;
}
#endif
