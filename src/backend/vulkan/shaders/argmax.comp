#version 450
// An MTP draft step's greedy tokens (backend.h: mtp_logits), a workgroup per sequence s: the first
// index of the largest of the n_vocab logits of row s (as pith_row_argmax), into the draft's tokens
// (ST_DRAFT, [s][dstep]) and into the step's tokens, which the next step's embedding reads.
#include "common.glsl"
layout(local_size_x = 64) in;
layout(push_constant) uniform P {
    F32 logits;
    I32 step;
    uint n_vocab, ld, n, n_steps, dstep;
} p;
shared float best[64];
shared uint at[64];

void main() {
    uint s = flat_group(), tid = gl_LocalInvocationID.x;
    if (s >= p.n) return;
    float b = -1.0 / 0.0;
    uint bi = 0xFFFFFFFFu;
    for (uint i = tid; i < p.n_vocab; i += 64u) {
        float x = p.logits.v[s * p.ld + i];
        if (x > b || bi == 0xFFFFFFFFu) b = x, bi = i;
    }
    best[tid] = b, at[tid] = bi;
    barrier();
    for (uint k = 32u; k > 0u; k >>= 1) {
        if (tid < k) {
            float o = best[tid + k];
            uint oi = at[tid + k];
            if (oi != 0xFFFFFFFFu && (at[tid] == 0xFFFFFFFFu || o > best[tid] || (o == best[tid] && oi < at[tid])))
                best[tid] = o, at[tid] = oi;
        }
        barrier();
    }
    if (tid == 0u) {
        p.step.v[p.step.v[ST_DRAFT] + int(s * p.n_steps + p.dstep)] = int(at[0]);
        p.step.v[p.step.v[ST_TOKENS] + int(s)] = int(at[0]);
    }
}
