#version 450
// The device's float throughput: eight independent chains of vec4 FMAs per invocation, `iters` times
// (64 flops an iteration), summed into out so nothing is optimised away. `pith bench --device vulkan`
// divides prefill's work by it.
#extension GL_EXT_buffer_reference : require
layout(buffer_reference, std430, buffer_reference_align = 4) buffer F32 { float v[]; };
layout(local_size_x = 256) in;
layout(push_constant) uniform P {
    F32 o;
    uint iters;
    float seed;
} p;

void main() {
    uint id = gl_GlobalInvocationID.x;
    vec4 a[8];
    for (int k = 0; k < 8; k++) a[k] = vec4(float(id) * 1e-9 + float(k));
    vec4 m = vec4(p.seed), c = vec4(1e-7);
    for (uint i = 0u; i < p.iters; i++)
        for (int k = 0; k < 8; k++) a[k] = fma(a[k], m, c);
    vec4 s = vec4(0.0);
    for (int k = 0; k < 8; k++) s += a[k];
    p.o.v[id] = s.x + s.y + s.z + s.w;
}
