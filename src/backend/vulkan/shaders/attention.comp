#version 450
// Paged attention, a workgroup per (token, query head): the token at position p of sequence s attends
// to positions lo..p of s (lo = p - window + 1 in a window, else 0), read through s's block table from
// the layer's K/V (head-major blocks, as qkv.comp stores them), 64 positions at a time with a running
// max and sum (online softmax); GPT-OSS's sinks add exp(sink) to the denominator.
// DRAFT: an MTP draft's step (backend.h: mtp_attention; the step buffer holds the draft's batch, one
// token per sequence at p0): positions 1..p0-1 from the pool, then the draft positions p0..p0+dstep from
// the draft's float32 rows (common.glsl); flag bit 1: times sigmoid of the gate half of the head's row
// in gate (rows of heads x [query | gate]).
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
#ifdef DRAFT
    F32 dk, dv, gate;
    uint gate_ld, dstep;
#endif
} p;

uint kvh, p0, t;
int bt;

// where position j's K (or V) head starts: the pool's element index, or the draft's row (j >= p0)
uint kv_at(int j) {
#ifdef DRAFT
    if (j >= int(p0)) return (t * MTP_MAX_STEPS + uint(j) - p0) * p.kv_dim + kvh * p.hd;
#endif
    uint blk = uint(p.step.v[bt + j / int(p.bs)]);
    return blk * p.bs * p.kv_dim + (kvh * p.bs + uint(j) % p.bs) * p.hd;
}

float key(int j, uint e, uint i) {
#ifdef DRAFT
    if (j >= int(p0)) return p.dk.v[e + i];
#endif
    return kv_load(p.kc, e + i);
}

float value(int j, uint e, uint i) {
#ifdef DRAFT
    if (j >= int(p0)) return p.dv.v[e + i];
#endif
    return kv_load(p.vc, e + i);
}

void main() {
    uint nh = p.heads & 0xFFFFu, nkv = p.heads >> 16, hd = p.hd, tid = gl_LocalInvocationID.x;
    uint wg = flat_group(), h = wg % nh;
    t = wg / nh, kvh = h / (nh / nkv);
    if (t >= p.n) return;
    int pos = p.step.v[p.step.v[ST_POSITIONS] + int(t)], seq = p.step.v[p.step.v[ST_SEQ] + int(t)];
    uint g = (p.flags >> 8) & 0xFFu;
    bt = p.step.v[ST_GROUP + 4 * int(g) + ST_TABLES] + seq * p.step.v[ST_GROUP + 4 * int(g) + ST_MAX_BLOCKS];
    int lo = p.window > 0u ? max(0, pos - int(p.window) + 1) : 0;
    p0 = uint(pos);
#ifdef DRAFT
    lo = 1; // position 0 holds a pair the head never reads (model/qwen35_mtp.c)
    pos += int(p.dstep);
#endif
    for (uint i = tid; i < hd; i += 64u) qs[i] = p.q.v[t * p.q_ld + h * hd + i] * p.scale;
    barrier();
    float acc[8];
    for (uint k = 0u; k < 8u; k++) acc[k] = 0.0;
    float m = -1.0 / 0.0, l = 0.0;
    for (int c = lo; c <= pos; c += 64) {
        int j = c + int(tid);
        float sc = -1.0 / 0.0;
        if (j <= pos) {
            uint e = kv_at(j);
            sc = 0.0;
            for (uint i = 0u; i < hd; i++) sc += qs[i] * key(j, e, i);
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
            for (int i = 0; i < cnt; i++) a += pr[i] * value(c + i, kv_at(c + i), d);
            acc[k] = a;
        }
        m = mc;
        barrier();
    }
    if ((p.flags & 1u) != 0u) l += exp(p.sinks.v[h] - m);
    for (uint k = 0u; k < 8u; k++) {
        uint d = tid + 64u * k;
        if (d >= hd) break;
        float o = acc[k] / l;
#ifdef DRAFT
        if ((p.flags & 2u) != 0u) o *= 1.0 / (1.0 + exp(-p.gate.v[t * p.gate_ld + h * 2u * hd + hd + d]));
#endif
        p.o.v[t * p.o_ld + h * hd + d] = o;
    }
}
