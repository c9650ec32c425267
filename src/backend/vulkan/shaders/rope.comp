#version 450
// RoPE's tables for the step's positions: row t = [cos | sin] of (pos[t] + pos_add) * inv_freq[i], times
// mscale (pos_add: an MTP draft's step, backend.h: mtp_attention; 0 otherwise).
// The angle is reduced exactly: freq holds each frequency in turns per position as a 64-bit fixed-point
// fraction (vk_rope.c), so pos * freq mod 2^64 is the angle's fraction of a turn with no error growing
// with the position (the CPU computes the angle in double for the same reason); cos and sin then come
// from polynomials on [-pi/4, pi/4] and the quadrant, accurate to a float's rounding on every device.
#include "common.glsl"
layout(local_size_x = 64) in;
layout(push_constant) uniform P {
    U64 freq;
    F32 cs;
    I32 step;
    uint half_, cs_ld, n;
    float mscale;
    int pos_add;
} p;

void main() {
    uint id = flat_group() * 64u + gl_LocalInvocationID.x;
    if (id >= p.n * p.half_) return;
    uint t = id / p.half_, i = id % p.half_;
    uint64_t pos = uint64_t(p.step.v[p.step.v[ST_POSITIONS] + int(t)] + p.pos_add);
    uint64_t turns = pos * p.freq.v[i];
    uint q = uint((turns + (uint64_t(1) << 61)) >> 62) & 3u;
    int64_t r = int64_t(turns - (uint64_t(q) << 62));
    float x = float(int(r >> 32)) * 1.4629180792671596e-09; // 2 pi / 2^32
    float x2 = x * x;
    float s = x * (1.0 + x2 * (-1.0 / 6.0 + x2 * (1.0 / 120.0 + x2 * (-1.0 / 5040.0 + x2 * (1.0 / 362880.0)))));
    float c = 1.0 + x2 * (-0.5 + x2 * (1.0 / 24.0 + x2 * (-1.0 / 720.0 + x2 * (1.0 / 40320.0 + x2 * (-1.0 / 3628800.0)))));
    float co = q == 0u ? c : q == 1u ? -s : q == 2u ? -c : s;
    float si = q == 0u ? s : q == 1u ? c : q == 2u ? -s : -c;
    p.cs.v[t * p.cs_ld + i] = co * p.mscale;
    p.cs.v[t * p.cs_ld + p.half_ + i] = si * p.mscale;
}
