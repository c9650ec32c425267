#version 450
// RMSNorm of each row of x with weights w, a workgroup per row. mode 0: o = norm(x) w. mode 1 (a
// post-norm joining the residual): x = norm(x) w, then o += x.
#include "common.glsl"
layout(local_size_x = 256) in;
layout(push_constant) uniform P {
    F32 x, w, o;
    uint x_ld, o_ld, cols, mode, n;
    float eps;
} p;
shared float red[256];

void main() {
    uint t = flat_group(), tid = gl_LocalInvocationID.x, xr = t * p.x_ld, orow = t * p.o_ld;
    if (t >= p.n) return;
    float ss = 0.0;
    for (uint i = tid; i < p.cols; i += 256u) ss += p.x.v[xr + i] * p.x.v[xr + i];
    red[tid] = ss;
    barrier();
    for (uint s = 128u; s > 0u; s >>= 1) {
        if (tid < s) red[tid] += red[tid + s];
        barrier();
    }
    float r = inversesqrt(red[0] / float(p.cols) + p.eps);
    for (uint i = tid; i < p.cols; i += 256u) {
        float v = p.x.v[xr + i] * r * p.w.v[i];
        if (p.mode == 0u) {
            p.o.v[orow + i] = v;
        } else {
            p.x.v[xr + i] = v;
            p.o.v[orow + i] += v;
        }
    }
}
