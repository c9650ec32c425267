#version 450
// Mamba2's SSD scan, recurrent form (backend/cpu/recurrent.h: pith_ssd_recurrent), a workgroup per
// (sequence, head), an invocation per row p of the head's state (head_dim x d_state), token by token
// over the sequence's run. The state rows stay in the slot (each invocation owns its rows, so no
// barrier): zeroed at position 0, copied into a token's checkpoint slot after it. proj's rows are
// [z (inner) | x B C (conv, after the convolution) | dt (heads)].
#include "common.glsl"
#include "recurrent.glsl"
layout(local_size_x = 64) in;
layout(push_constant) uniform P {
    F32 proj, y, dt_bias, A, D;
    I32 step;
    uint64_t pool;
    uint proj_ld, y_ld, heads, groups, head_dim, d_state, inner, conv, group, slot_size, offset, n_seqs;
} p;

void main() {
    uint wg = flat_group(), s = wg / p.heads, h = wg % p.heads, P_ = p.head_dim, N = p.d_state;
    if (s >= p.n_seqs) return;
    uint g = h / (p.heads / p.groups), t0 = seq_first(p.step, p.group, s), t1 = seq_end(p.step, p.group, s);
    uint head = p.offset + h * P_ * N;
    F32 st = slot_floats(p.pool, p.slot_size, state_slot(p.step, p.group, s), head);
    bool zero = starts_at_zero(p.step, t0);
    float A = p.A.v[h], d = p.D.v[h], bias = p.dt_bias.v[h];
    for (uint r = gl_LocalInvocationID.x; r < P_; r += 64u) {
        if (zero)
            for (uint n = 0u; n < N; n++) st.v[r * N + n] = 0.0;
        for (uint t = t0; t < t1; t++) {
            uint row = t * p.proj_ld;
            float raw = p.proj.v[row + p.inner + p.conv + h] + bias;
            float dt = raw > 20.0 ? raw : log(1.0 + exp(raw)); // torch's softplus (threshold 20)
            float decay = exp(dt * A), x = p.proj.v[row + p.inner + h * P_ + r], sx = dt * x;
            uint b0 = row + 2u * p.inner + g * N, c0 = b0 + p.groups * N;
            float acc = 0.0;
            for (uint n = 0u; n < N; n++) {
                float v = decay * st.v[r * N + n] + sx * p.proj.v[b0 + n];
                st.v[r * N + n] = v;
                acc += p.proj.v[c0 + n] * v;
            }
            p.y.v[t * p.y_ld + h * P_ + r] = acc + d * x;
            int ck = checkpoint_of(p.step, p.group, t);
            if (ck >= 0) {
                F32 cp = slot_floats(p.pool, p.slot_size, ck, head);
                for (uint n = 0u; n < N; n++) cp.v[r * N + n] = st.v[r * N + n];
            }
        }
    }
}
