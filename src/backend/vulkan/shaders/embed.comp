#version 450
// out[t] = table[tokens[t]] (times scale when it is not 0), a workgroup per token.
#include "common.glsl"
#include "dequant.glsl"
layout(local_size_x = 64) in;
layout(push_constant) uniform P {
    U16 table;
    F32 o;
    I32 step;
    uint row_words, cols, o_ld, n;
    float scale;
} p;

void main() {
    uint t = flat_group();
    if (t >= p.n) return;
    uint token = uint(p.step.v[p.step.v[ST_TOKENS] + int(t)]);
    float s = p.scale != 0.0 ? p.scale : 1.0;
    for (uint u = gl_LocalInvocationID.x; u < (p.cols + 31u) / 32u; u += 64u) {
        float v[32];
        dequant_unit(p.table, token * p.row_words, u, v);
        for (uint i = 0u; i < min(32u, p.cols - u * 32u); i++) p.o.v[t * p.o_ld + u * 32u + i] = p.scale != 0.0 ? v[i] * s : v[i];
    }
}
