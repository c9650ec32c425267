#version 450
// out[t][r] (+)= sum_k x[t][k] W[r][k] for rows r of W and tokens t.
//
// Both kernels add in one order, so a token's result does not depend on the batch it is in or on the
// kernel that computed it (batch invariance, as on the CPU): each unit u (32 columns) gives
// s_u = sum_i x_i w_i from 0 in column order; the units of each of VL = 32 classes (u mod 32) add up
// in order, from 0; the 32 class sums add up in class order, from 0. Every accumulator is `precise`,
// so no compiler fuses a product into an add in one kernel and not in the other.
//
// MATVEC (decode, at most 8 tokens): a subgroup per weight row, its lanes taking the classes between
// them (reading the row once, unit by unit); the class sums meet in shared memory, where one lane adds
// them in order. A workgroup takes `rows_per_group` rows (64 / the subgroup size the host was told);
// should its subgroups be wider, each takes more of them in turn.
// PER_ROW (devices whose lanes are a CPU's SIMD, such as lavapipe, where shared memory and barriers
// cost more than they save): an invocation per (row, token), no shared memory; the same order.
// Otherwise (prefill) a 64 x 64 tile of out per workgroup, the units taken class by class: each step
// stages one unit of 64 weight rows and of 64 tokens in shared memory; each invocation keeps 4 x 4
// class sums and 4 x 4 totals.
#include "common.glsl"
#include "dequant.glsl"

layout(push_constant) uniform P {
    U16 w;
    F32 x;
    F32 o;
    uint row_words;   // 16-bit words per weight row
    uint rows, cols;  // W is rows x cols, each row padded with zeros to whole units
    uint x_ld, o_ld;
    uint n;           // tokens
    uint accumulate;
    uint rows_per_group;
} p;

#define VL 32u

#ifdef MATVEC
#extension GL_KHR_shader_subgroup_basic : require
#define NT 8
layout(local_size_x = 64) in;
shared float part[16][NT][VL]; // per subgroup (at least 4 lanes wide: the host checks)

void main() {
    uint first = flat_group() * p.rows_per_group, end = min(p.rows, first + p.rows_per_group);
    uint lane = gl_SubgroupInvocationID, width = gl_SubgroupSize, sg = gl_SubgroupID;
    uint units = (p.cols + 31u) / 32u;
    for (uint row = first + sg; row < end; row += gl_NumSubgroups) {
        uint base = row * p.row_words;
        for (uint cls = lane; cls < VL; cls += width) {
            precise float acc[NT];
            for (uint t = 0u; t < NT; t++) acc[t] = 0.0;
            for (uint u = cls; u < units; u += VL) {
                float v[32];
                dequant_unit(p.w, base, u, v);
                uint lim = min(32u, p.cols - u * 32u); // x's row ends where W's padding starts
                for (uint t = 0u; t < NT; t++) {
                    if (t >= p.n) break;
                    uint xo = t * p.x_ld + u * 32u;
                    precise float s = 0.0;
                    for (uint i = 0u; i < lim; i++) s += v[i] * p.x.v[xo + i];
                    acc[t] += s;
                }
            }
            for (uint t = 0u; t < NT; t++) part[sg][t][cls] = acc[t];
        }
        subgroupMemoryBarrierShared();
        subgroupBarrier();
        if (lane < p.n) {
            precise float r = 0.0;
            for (uint c = 0u; c < VL; c++) r += part[sg][lane][c];
            uint oi = lane * p.o_ld + row;
            p.o.v[oi] = p.accumulate != 0u ? p.o.v[oi] + r : r;
        }
        subgroupBarrier();
    }
}
#elif defined(PER_ROW)
layout(local_size_x = 64) in;

void main() {
    uint row = gl_WorkGroupID.x * 64u + gl_LocalInvocationID.x, t = gl_WorkGroupID.y;
    if (row >= p.rows || t >= p.n) return;
    uint units = (p.cols + 31u) / 32u, base = row * p.row_words;
    precise float tot = 0.0;
    for (uint cls = 0u; cls < VL; cls++) {
        precise float acc = 0.0;
        for (uint u = cls; u < units; u += VL) {
            float v[32];
            dequant_unit(p.w, base, u, v);
            uint lim = min(32u, p.cols - u * 32u), xo = t * p.x_ld + u * 32u;
            precise float s = 0.0;
            for (uint i = 0u; i < lim; i++) s += v[i] * p.x.v[xo + i];
            acc += s;
        }
        tot += acc;
    }
    uint oi = t * p.o_ld + row;
    p.o.v[oi] = p.accumulate != 0u ? p.o.v[oi] + tot : tot;
}
#else
layout(local_size_x = 256) in;
shared float ws[32][65];
shared float xs[32][65];

void main() {
    uint r0 = gl_WorkGroupID.x * 64u, t0 = gl_WorkGroupID.y * 64u, tid = gl_LocalInvocationID.x;
    uint tr = tid & 15u, tt = tid >> 4;
    precise float tot[4][4];
    for (uint a = 0u; a < 4u; a++)
        for (uint b = 0u; b < 4u; b++) tot[a][b] = 0.0;
    uint units = (p.cols + 31u) / 32u;
    for (uint cls = 0u; cls < VL; cls++) {
        precise float acc[4][4];
        for (uint a = 0u; a < 4u; a++)
            for (uint b = 0u; b < 4u; b++) acc[a][b] = 0.0;
        for (uint u = cls; u < units; u += VL) {
            if (tid < 64u) {
                uint row = r0 + tid;
                float v[32];
                if (row < p.rows) dequant_unit(p.w, row * p.row_words, u, v);
                else for (uint i = 0u; i < 32u; i++) v[i] = 0.0;
                for (uint i = 0u; i < 32u; i++) ws[i][tid] = v[i];
            }
            for (uint e = tid; e < 2048u; e += 256u) {
                uint tk = e >> 5, i = e & 31u, tok = t0 + tk;
                xs[i][tk] = tok < p.n && u * 32u + i < p.cols ? p.x.v[tok * p.x_ld + u * 32u + i] : 0.0;
            }
            barrier();
            uint lim = min(32u, p.cols - u * 32u); // as the decode kernel: the padding adds nothing
            for (uint j = 0u; j < 4u; j++)
                for (uint k = 0u; k < 4u; k++) {
                    precise float s = 0.0;
                    for (uint i = 0u; i < lim; i++) s += ws[i][tr + 16u * j] * xs[i][tt + 16u * k];
                    acc[j][k] += s;
                }
            barrier();
        }
        for (uint j = 0u; j < 4u; j++)
            for (uint k = 0u; k < 4u; k++) tot[j][k] += acc[j][k];
    }
    for (uint j = 0u; j < 4u; j++) {
        uint row = r0 + tr + 16u * j;
        if (row >= p.rows) continue;
        for (uint k = 0u; k < 4u; k++) {
            uint tok = t0 + tt + 16u * k;
            if (tok >= p.n) continue;
            uint oi = tok * p.o_ld + row;
            p.o.v[oi] = p.accumulate != 0u ? p.o.v[oi] + tot[j][k] : tot[j][k];
        }
    }
}
#endif
