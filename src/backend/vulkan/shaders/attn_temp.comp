#version 450
// Llama 4's attention temperature (backend.h: attn_temp): row t of y times 1 + beta ln(1 + floor(pos[t] /
// length)), an invocation per element; the floor is an exact integer division (positions are non-negative).
#include "common.glsl"
layout(local_size_x = 256) in;
layout(push_constant) uniform P {
    F32 y;
    I32 step;
    uint count, cols, period;
    float beta;
} p;

void main() {
    uint i = flat_group() * 256u + gl_LocalInvocationID.x;
    if (i >= p.count) return;
    uint pos = uint(p.step.v[p.step.v[ST_POSITIONS] + int(i / p.cols)]);
    p.y.v[i] *= 1.0 + p.beta * log(1.0 + float(pos / p.period));
}
