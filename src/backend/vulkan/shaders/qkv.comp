#version 450
// The QK norm and RoPE of one head of one token (a workgroup each: the n_heads query heads, then the
// n_kv_heads K heads), then, for a K head, that head's K and V into the token's slot of the layer's KV
// group (backend.h: pith_be_qkv_args; biases are added before, by the eltwise shader). Head-major
// blocks: head h of slot s is at block * bs * kv_dim + (h * bs + s % bs) * hd of the layer. An MTP
// draft's step (flag bit 5; kc and vc the draft's float32 rows, common.glsl) stores K and V as the
// draft position's row instead, the draft step in flag bits 16-23.
#include "common.glsl"
layout(local_size_x = 64) in;
shared float src[512];
shared float red[64];
#include "kv.glsl"

layout(push_constant) uniform P {
    F32 q, k, v, qn, kn, cs;
    I32 step;
    U16 kc, vc;
    uint q_ld, k_ld, v_ld, hd;
    uint heads;   // n_heads | n_kv_heads << 16
    uint bs, kv_dim;
    uint flags;   // bits 0-1: QK norm (1 per head; 2, the whole projection, see below); 3: RoPE; 4: adjacent pairs;
                  // 5: an MTP draft's K/V; 8-15: group; 16-23: the draft step
    uint cs_ld, n;
    float eps;
} p;

float wg_sum(float x, uint tid) {
    red[tid] = x;
    barrier();
    for (uint s = 32u; s > 0u; s >>= 1) {
        if (tid < s) red[tid] += red[tid + s];
        barrier();
    }
    float r = red[0];
    barrier();
    return r;
}

void main() {
    uint nh = p.heads & 0xFFFFu, nkv = p.heads >> 16, hd = p.hd, tid = gl_LocalInvocationID.x;
    uint wg = flat_group(), t = wg / (nh + nkv), h = wg % (nh + nkv);
    if (t >= p.n) return;
    bool isq = h < nh;
    uint head = isq ? h : h - nh, qk = p.flags & 3u;
    F32 buf = isq ? p.q : p.k;
    F32 nw = isq ? p.qn : p.kn;
    uint row = t * (isq ? p.q_ld : p.k_ld), off = row + head * hd;
    float r = 1.0;
    if (qk == 2u) { // RMSNorm of the whole projection: only when no other workgroup writes this token's heads
                    // (the backend runs that norm before, by rows: the heads here are written back in place)
        uint len = (isq ? nh : nkv) * hd;
        float ss = 0.0;
        for (uint i = tid; i < len; i += 64u) ss += buf.v[row + i] * buf.v[row + i];
        r = inversesqrt(wg_sum(ss, tid) / float(len) + p.eps);
    }
    for (uint i = tid; i < hd; i += 64u) src[i] = qk == 2u ? buf.v[off + i] * r * nw.v[head * hd + i] : buf.v[off + i];
    barrier();
    if (qk == 1u) { // RMSNorm of the head
        float ss = 0.0;
        for (uint i = tid; i < hd; i += 64u) ss += src[i] * src[i];
        r = inversesqrt(wg_sum(ss, tid) / float(hd) + p.eps);
        for (uint i = tid; i < hd; i += 64u) src[i] *= r * nw.v[i];
        barrier();
    }
    if ((p.flags & 8u) != 0u) {
        uint half_ = p.cs_ld / 2u;
        bool adj = (p.flags & 16u) != 0u;
        for (uint i = tid; i < half_; i += 64u) {
            uint a = adj ? 2u * i : i, b = adj ? 2u * i + 1u : i + half_;
            float c = p.cs.v[t * p.cs_ld + i], s = p.cs.v[t * p.cs_ld + half_ + i];
            float x0 = src[a], x1 = src[b];
            src[a] = x0 * c - x1 * s;
            src[b] = x0 * s + x1 * c;
        }
        barrier();
    }
    for (uint i = tid; i < hd; i += 64u) buf.v[off + i] = src[i];
    if (isq) return;
    uint g = (p.flags >> 8) & 0xFFu, e;
    if ((p.flags & 32u) != 0u) {
        e = (t * MTP_MAX_STEPS + ((p.flags >> 16) & 0xFFu)) * p.kv_dim + head * hd;
    } else {
        int base = p.step.v[ST_GROUP + 4 * int(g) + ST_SLOTS];
        uint slot = uint(p.step.v[base + int(t)]);
        e = (slot / p.bs) * p.bs * p.kv_dim + (head * p.bs + slot % p.bs) * hd;
    }
    kv_store(p.kc, e, hd, tid, 64u);
    barrier();
    for (uint i = tid; i < hd; i += 64u) src[i] = p.v.v[t * p.v_ld + head * hd + i];
    barrier();
    kv_store(p.vc, e, hd, tid, 64u);
}
