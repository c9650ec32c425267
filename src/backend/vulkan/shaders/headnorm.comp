#version 450
// RMSNorm of each head of each row without a weight, in place: a workgroup per (token, head). Gemma 4's
// V norm (backend.h: pith_be_qkv_args.v_norm), run before qkv.comp stores V.
#include "common.glsl"
layout(local_size_x = 64) in;
layout(push_constant) uniform P {
    F32 x;
    uint ld, hd, heads, n;
    float eps;
} p;
shared float red[64];

void main() {
    uint wg = flat_group(), t = wg / p.heads, h = wg % p.heads, tid = gl_LocalInvocationID.x;
    if (t >= p.n) return;
    uint off = t * p.ld + h * p.hd;
    float ss = 0.0;
    for (uint i = tid; i < p.hd; i += 64u) ss += p.x.v[off + i] * p.x.v[off + i];
    red[tid] = ss;
    barrier();
    for (uint s = 32u; s > 0u; s >>= 1) {
        if (tid < s) red[tid] += red[tid + s];
        barrier();
    }
    float r = inversesqrt(red[0] / float(p.hd) + p.eps);
    for (uint i = tid; i < p.hd; i += 64u) p.x.v[off + i] *= r;
}
