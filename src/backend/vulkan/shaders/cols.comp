#version 450
// dst = src's columns [col0, col0 + cols) of each row (backend.h: copy_cols; Gemma 4's per-layer slice).
#include "common.glsl"
layout(local_size_x = 256) in;
layout(push_constant) uniform P {
    F32 src, dst;
    uint src_ld, dst_ld, col0, cols, count;
} p;

void main() {
    uint i = flat_group() * 256u + gl_LocalInvocationID.x;
    if (i >= p.count) return;
    uint t = i / p.cols, c = i % p.cols;
    p.dst.v[t * p.dst_ld + c] = p.src.v[t * p.src_ld + p.col0 + c];
}
