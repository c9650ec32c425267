#version 450
// The causal depthwise convolution with carried state (backend/cpu/recurrent.h: pith_conv1d), an
// invocation per (sequence, channel) over the sequence's run of the step: the last kernel - 1 inputs
// live in registers, start from the slot (zeros at position 0), are copied into a token's checkpoint
// slot after it and back into the slot at the end. The sum's order is the CPU's: the bias, then the
// taps oldest first. Modes (flags): 1 SiLU; 2 a bias; 4 LFM2's gated short convolution, whose rows x
// are [B | C | x] (3 channels wide): the input is B x, the output C times the convolution.
#include "common.glsl"
#include "recurrent.glsl"
layout(local_size_x = 64) in;
layout(push_constant) uniform P {
    F32 x, y, w, bias;
    I32 step;
    uint64_t pool;
    uint x_ld, y_ld, channels, kernel, flags, group, slot_size, offset, n_seqs;
} p;

void main() {
    uint blocks = (p.channels + 63u) / 64u, wg = flat_group(), s = wg / blocks;
    uint c = (wg % blocks) * 64u + gl_LocalInvocationID.x, C = p.channels, K = p.kernel, H = K - 1u;
    if (s >= p.n_seqs || c >= C) return;
    uint t0 = seq_first(p.step, p.group, s), t1 = seq_end(p.step, p.group, s);
    F32 st = slot_floats(p.pool, p.slot_size, state_slot(p.step, p.group, s), p.offset);
    bool shortc = (p.flags & 4u) != 0u;
    float hist[16], wt[16];
    bool zero = starts_at_zero(p.step, t0);
    for (uint j = 0u; j < H; j++) hist[j] = zero ? 0.0 : st.v[j * C + c];
    for (uint k = 0u; k < K; k++) wt[k] = p.w.v[c * K + k];
    float b = (p.flags & 2u) != 0u ? p.bias.v[c] : 0.0;
    for (uint t = t0; t < t1; t++) {
        uint xr = t * p.x_ld;
        float xc = shortc ? p.x.v[xr + c] * p.x.v[xr + 2u * C + c] : p.x.v[xr + c];
        float acc = b;
        for (uint j = 0u; j < H; j++) acc += wt[j] * hist[j];
        acc += wt[H] * xc;
        for (uint j = 0u; j + 1u < H; j++) hist[j] = hist[j + 1u];
        if (H > 0u) hist[H - 1u] = xc;
        if ((p.flags & 1u) != 0u) acc = acc / (1.0 + exp(-acc));
        if (shortc) acc *= p.x.v[xr + C + c];
        p.y.v[t * p.y_ld + c] = acc;
        int ck = checkpoint_of(p.step, p.group, t);
        if (ck >= 0) {
            F32 cp = slot_floats(p.pool, p.slot_size, ck, p.offset);
            for (uint j = 0u; j < H; j++) cp.v[j * C + c] = hist[j];
        }
    }
    for (uint j = 0u; j < H; j++) st.v[j * C + c] = hist[j];
}
