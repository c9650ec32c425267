#version 450
// The gated RMSNorms of the recurrent mixers, a workgroup per (row, group of `group` elements) of x:
// mode 0, Mamba2's (pith_gated_rmsnorm_grouped): x = x silu(z) first, then RMS-normed per group, times
// w (the row's weights) and times scale (0: none); mode 1, Qwen3.5's DeltaNet output (pith_gated_rmsnorm
// per head): x = rms(x) w silu(z), w of one group's width.
#include "common.glsl"
layout(local_size_x = 64) in;
layout(push_constant) uniform P {
    F32 x, z, w;
    uint x_ld, z_ld, group, n_groups, mode, n;
    float eps, scale;
} p;
shared float red[64];

float silu(float v) { return v / (1.0 + exp(-v)); }

void main() {
    uint wg = flat_group(), t = wg / p.n_groups, g0 = (wg % p.n_groups) * p.group, tid = gl_LocalInvocationID.x;
    if (t >= p.n) return;
    uint xr = t * p.x_ld + g0, zr = t * p.z_ld + g0;
    float ss = 0.0;
    for (uint i = tid; i < p.group; i += 64u) {
        float v = p.x.v[xr + i];
        if (p.mode == 0u) v *= silu(p.z.v[zr + i]);
        ss += v * v;
    }
    red[tid] = ss;
    barrier();
    for (uint k = 32u; k > 0u; k >>= 1) {
        if (tid < k) red[tid] += red[tid + k];
        barrier();
    }
    float r = 1.0 / sqrt(red[0] / float(p.group) + p.eps);
    for (uint i = tid; i < p.group; i += 64u) {
        float v = p.x.v[xr + i];
        if (p.mode == 0u) {
            v = v * silu(p.z.v[zr + i]) * r * p.w.v[g0 + i];
            if (p.scale != 0.0 && p.scale != 1.0) v *= p.scale;
        } else {
            v = v * r * p.w.v[i] * silu(p.z.v[zr + i]);
        }
        p.x.v[xr + i] = v;
    }
}
