#version 450
// Rows by the step's lists. KEEP: the rows a list names (the kept rows, or the logits rows of the head's
// scratch) to the front of src, in order (one workgroup; invocation c moves column c of every row, in row order, so no row is
// overwritten before it is read: kept[r] >= r). Otherwise: dst[k] = src[list[k]], a workgroup per row.
#include "common.glsl"
layout(local_size_x = 256) in;
layout(push_constant) uniform P {
    F32 src, dst;
    I32 step;
    uint cols, src_ld, dst_ld, list, n;
} p;

void main() {
    uint tid = gl_LocalInvocationID.x;
#ifdef KEEP
    int n = p.step.v[p.n], kept = p.step.v[p.list]; // the header's count and list: kept rows, or logits rows
    for (int r = 0; r < n; r++) {
        uint from = uint(p.step.v[kept + r]);
        if (from == uint(r)) continue;
        for (uint c = tid; c < p.cols; c += 256u) p.src.v[uint(r) * p.src_ld + c] = p.src.v[from * p.src_ld + c];
    }
#else
    uint k = flat_group();
    if (k >= p.n) return;
    uint from = uint(p.step.v[p.step.v[p.list] + int(k)]);
    for (uint c = tid; c < p.cols; c += 256u) p.dst.v[k * p.dst_ld + c] = p.src.v[from * p.src_ld + c];
#endif
}
