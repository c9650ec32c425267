#version 450
// The MTP head's rows that live in the recurrent state (backend.h: mtp_input, mtp_save; vk_mtp.c): a
// sequence's last hidden state sits in its RECURRENT slot of group g at float tail.
// INPUT, a workgroup per row t of o (rows of [embedding | hidden], dim each; the embedding half already
// holds the token's row): o[t] = [enorm(o[t][0, dim)) | hnorm(prev)], prev being by mode
//   0 (a forward): hidden's row t - 1 in t's sequence, else the slot's (the sequence's first token at a
//     position > 0), else zeros (position 0);
//   1 (a draft's step 0): the slot of sequence t;   2 (later steps): hidden's row t.
// SAVE, a workgroup per sequence then per token: hidden's row of each sequence's last token into its
// slot, and the row of each token the step names a checkpoint for into that slot.
#include "common.glsl"
#include "recurrent.glsl"
layout(local_size_x = 256) in;
layout(push_constant) uniform P {
    F32 o, hidden, en, hn;
    uint64_t pool;
    I32 step;
    uint dim, o_ld, h_ld, slot_size, tail, g, mode, n;
    float eps;
} p;
shared float red[256];

float wg_sum(float x, uint tid) {
    red[tid] = x;
    barrier();
    for (uint s = 128u; s > 0u; s >>= 1) {
        if (tid < s) red[tid] += red[tid + s];
        barrier();
    }
    float r = red[0];
    barrier();
    return r;
}

#ifdef INPUT
// o[t][at, at + dim) = rmsnorm(src[0, dim)) * w
void norm_into(F32 src, uint64_t at_src, F32 w, uint at, uint t, uint tid) {
    F32 x = F32(uint64_t(src) + 4ul * at_src);
    float ss = 0.0;
    for (uint i = tid; i < p.dim; i += 256u) ss += x.v[i] * x.v[i];
    float r = inversesqrt(wg_sum(ss, tid) / float(p.dim) + p.eps);
    for (uint i = tid; i < p.dim; i += 256u) p.o.v[t * p.o_ld + at + i] = x.v[i] * r * w.v[i];
}

void main() {
    uint t = flat_group(), tid = gl_LocalInvocationID.x;
    if (t >= p.n) return;
    norm_into(p.o, uint64_t(t) * p.o_ld, p.en, 0u, t, tid);
    int slot = -1;
    bool from_hidden = p.mode == 2u;
    if (p.mode == 1u) {
        slot = state_slot(p.step, p.g, t);
    } else if (p.mode == 0u) {
        uint s = uint(p.step.v[p.step.v[ST_SEQ] + int(t)]);
        if (t > seq_first(p.step, p.g, s)) from_hidden = true;
        else if (!starts_at_zero(p.step, t)) slot = state_slot(p.step, p.g, s);
    }
    if (from_hidden) {
        norm_into(p.hidden, uint64_t(p.mode == 2u ? t : t - 1u) * p.h_ld, p.hn, p.dim, t, tid);
    } else if (slot >= 0) {
        F32 tail = slot_floats(p.pool, p.slot_size, slot, p.tail);
        norm_into(tail, 0ul, p.hn, p.dim, t, tid);
    } else {
        for (uint i = tid; i < p.dim; i += 256u) p.o.v[t * p.o_ld + p.dim + i] = 0.0;
    }
}
#else
void main() {
    uint wg = flat_group(), tid = gl_LocalInvocationID.x, n_seqs = uint(p.step.v[ST_N_SEQS]);
    uint row;
    int slot;
    if (wg < n_seqs) {
        row = seq_end(p.step, p.g, wg) - 1u;
        slot = state_slot(p.step, p.g, wg);
    } else {
        row = wg - n_seqs;
        if (row >= p.n) return;
        slot = checkpoint_of(p.step, p.g, row);
        if (slot < 0) return;
    }
    F32 tail = slot_floats(p.pool, p.slot_size, slot, p.tail);
    for (uint i = tid; i < p.dim; i += 256u) tail.v[i] = p.hidden.v[row * p.h_ld + i];
}
#endif
