#version 450
// The Gated DeltaNet scan, recurrent form (backend/cpu/recurrent.h: pith_gdn_recurrent), a workgroup
// per (sequence, value head) token by token over the sequence's run: the token's query and key heads
// L2-normed into shared memory (q also times 1/sqrt(dk)), its gates made in place by invocation 0
// (beta = sigmoid(beta), g = ssm_a softplus(alpha + dt_bias)), then each invocation updates its columns
// e of the head's dk x dv state, which stays in the slot (zeroed at position 0, copied into a token's
// checkpoint slot after it): S = exp(g) S, delta = beta (v - S^T k), S += k delta^T, out = S^T q.
// qkv's rows are [q (nk dk) | k (nk dk) | v (nv dv)] after the convolution.
#include "common.glsl"
#include "recurrent.glsl"
layout(local_size_x = 64) in;
layout(push_constant) uniform P {
    F32 qkv, beta, alpha, out_, dt_bias, ssm_a;
    I32 step;
    uint64_t pool;
    uint qkv_ld, gb_ld, out_ld, nk, nv, dk, dv, tiled, group, slot_size, offset, n_seqs;
} p;
shared float qn[256], kn[256], rq[64], rk[64], gates[2];

void main() {
    uint wg = flat_group(), s = wg / p.nv, h = wg % p.nv, tid = gl_LocalInvocationID.x, dk = p.dk, dv = p.dv;
    if (s >= p.n_seqs) return;
    uint qh = p.tiled != 0u ? h % p.nk : h / (p.nv / p.nk);
    uint t0 = seq_first(p.step, p.group, s), t1 = seq_end(p.step, p.group, s);
    uint head = p.offset + h * dk * dv;
    F32 st = slot_floats(p.pool, p.slot_size, state_slot(p.step, p.group, s), head);
    if (starts_at_zero(p.step, t0))
        for (uint e = tid; e < dv; e += 64u)
            for (uint d = 0u; d < dk; d++) st.v[d * dv + e] = 0.0;
    float scale = 1.0 / sqrt(float(dk));
    for (uint t = t0; t < t1; t++) {
        uint row = t * p.qkv_ld, qo = row + qh * dk, ko = row + p.nk * dk + qh * dk, vo = row + 2u * p.nk * dk + h * dv;
        float sq = 0.0, sk = 0.0;
        for (uint d = tid; d < dk; d += 64u) {
            float a = p.qkv.v[qo + d], b = p.qkv.v[ko + d];
            qn[d] = a, kn[d] = b;
            sq += a * a, sk += b * b;
        }
        rq[tid] = sq, rk[tid] = sk;
        if (tid == 0u) {
            uint gi = t * p.gb_ld + h;
            float b = 1.0 / (1.0 + exp(-p.beta.v[gi])), x = p.alpha.v[gi] + p.dt_bias.v[h];
            float g = p.ssm_a.v[h] * (x > 20.0 ? x : log(1.0 + exp(x)));
            p.beta.v[gi] = b, p.alpha.v[gi] = g;
            gates[0] = b, gates[1] = g;
        }
        barrier();
        for (uint k = 32u; k > 0u; k >>= 1) {
            if (tid < k) rq[tid] += rq[tid + k], rk[tid] += rk[tid + k];
            barrier();
        }
        float fq = scale / sqrt(rq[0] + 1e-6), fk = 1.0 / sqrt(rk[0] + 1e-6);
        for (uint d = tid; d < dk; d += 64u) qn[d] *= fq, kn[d] *= fk;
        barrier();
        float decay = exp(gates[1]), beta = gates[0];
        int ck = checkpoint_of(p.step, p.group, t);
        for (uint e = tid; e < dv; e += 64u) {
            float kv = 0.0;
            for (uint d = 0u; d < dk; d++) {
                float v = st.v[d * dv + e] * decay;
                st.v[d * dv + e] = v;
                kv += kn[d] * v;
            }
            float delta = beta * (p.qkv.v[vo + e] - kv), o = 0.0;
            for (uint d = 0u; d < dk; d++) {
                float v = st.v[d * dv + e] + kn[d] * delta;
                st.v[d * dv + e] = v;
                o += qn[d] * v;
            }
            p.out_.v[t * p.out_ld + h * dv + e] = o;
            if (ck >= 0) {
                F32 cp = slot_floats(p.pool, p.slot_size, ck, head);
                for (uint d = 0u; d < dk; d++) cp.v[d * dv + e] = st.v[d * dv + e];
            }
        }
        barrier(); // the next token's q and k go into the shared arrays these read
    }
}
