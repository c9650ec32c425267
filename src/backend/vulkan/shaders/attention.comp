#version 450
// Paged attention, a workgroup per (token, query head): the token at position p of sequence s attends
// to positions lo..p of s (lo = p - window + 1 in a window, else 0), read through s's block table from
// the layer's K/V (head-major blocks, as qkv.comp stores them), 64 positions at a time with a running
// max and sum (online softmax); GPT-OSS's sinks add exp(sink) to the denominator.
#include "common.glsl"
layout(local_size_x = 64) in;
shared float src[1];
shared float qs[512];
shared float pr[64];
#include "kv.glsl"

layout(push_constant) uniform P {
    F32 q, o, sinks;
    U16 kc, vc;
    I32 step;
    uint q_ld, o_ld, hd;
    uint heads;   // n_heads | n_kv_heads << 16
    uint bs, kv_dim;
    uint window;
    uint flags;   // bit 0: sinks; 8-15: group
    uint n;
    float scale;
} p;

void main() {
    uint nh = p.heads & 0xFFFFu, nkv = p.heads >> 16, hd = p.hd, tid = gl_LocalInvocationID.x;
    uint wg = flat_group(), t = wg / nh, h = wg % nh, kvh = h / (nh / nkv);
    if (t >= p.n) return;
    int pos = p.step.v[p.step.v[ST_POSITIONS] + int(t)], seq = p.step.v[p.step.v[ST_SEQ] + int(t)];
    uint g = (p.flags >> 8) & 0xFFu;
    int bt = p.step.v[ST_GROUP + 4 * int(g) + ST_TABLES] + seq * p.step.v[ST_GROUP + 4 * int(g) + ST_MAX_BLOCKS];
    int lo = p.window > 0u ? max(0, pos - int(p.window) + 1) : 0;
    for (uint i = tid; i < hd; i += 64u) qs[i] = p.q.v[t * p.q_ld + h * hd + i] * p.scale;
    barrier();
    float acc[8];
    for (uint k = 0u; k < 8u; k++) acc[k] = 0.0;
    float m = -1.0 / 0.0, l = 0.0;
    for (int c = lo; c <= pos; c += 64) {
        int j = c + int(tid);
        float sc = -1.0 / 0.0;
        if (j <= pos) {
            uint blk = uint(p.step.v[bt + j / int(p.bs)]);
            uint e = blk * p.bs * p.kv_dim + (kvh * p.bs + uint(j) % p.bs) * hd;
            sc = 0.0;
            for (uint i = 0u; i < hd; i++) sc += qs[i] * kv_load(p.kc, e + i);
        }
        pr[tid] = sc;
        barrier();
        int cnt = min(64, pos - c + 1);
        float mc = m;
        for (int i = 0; i < cnt; i++) mc = max(mc, pr[i]);
        float alpha = exp(m - mc);
        barrier();
        pr[tid] = j <= pos ? exp(sc - mc) : 0.0;
        barrier();
        float sum = 0.0;
        for (int i = 0; i < cnt; i++) sum += pr[i];
        l = l * alpha + sum;
        for (uint k = 0u; k < 8u; k++) {
            uint d = tid + 64u * k;
            if (d >= hd) break;
            float a = acc[k] * alpha;
            for (int i = 0; i < cnt; i++) {
                int jj = c + i;
                uint blk = uint(p.step.v[bt + jj / int(p.bs)]);
                a += pr[i] * kv_load(p.vc, blk * p.bs * p.kv_dim + (kvh * p.bs + uint(jj) % p.bs) * hd + d);
            }
            acc[k] = a;
        }
        m = mc;
        barrier();
    }
    if ((p.flags & 1u) != 0u) l += exp(p.sinks.v[h] - m);
    for (uint k = 0u; k < 8u; k++) {
        uint d = tid + 64u * k;
        if (d >= hd) break;
        p.o.v[t * p.o_ld + h * hd + d] = acc[k] / l;
    }
}
