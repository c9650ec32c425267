#version 450
// Gated attention's two halves of the query projection (rows of heads x [query | gate], hd each), an
// invocation per element of a: mode 0 copies each head's query half into a (rows of heads x hd); mode 1
// multiplies the attention output a by sigmoid of the gate half.
#include "common.glsl"
layout(local_size_x = 256) in;
layout(push_constant) uniform P {
    F32 a, qg;
    uint a_ld, qg_ld, hd, heads, mode, count;
} p;

void main() {
    uint i = flat_group() * 256u + gl_LocalInvocationID.x, w = p.heads * p.hd;
    if (i >= p.count) return;
    uint t = i / w, r = i % w, h = r / p.hd, e = r % p.hd, q = t * p.qg_ld + h * 2u * p.hd + e;
    if (p.mode == 0u) p.a.v[t * p.a_ld + r] = p.qg.v[q];
    else p.a.v[t * p.a_ld + r] *= 1.0 / (1.0 + exp(-p.qg.v[q + p.hd]));
}
