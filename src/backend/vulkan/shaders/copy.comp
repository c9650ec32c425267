#version 450
// b = a, 16 bytes per invocation: the memory-bandwidth probe `pith bench --device vulkan` measures with.
#extension GL_EXT_buffer_reference : require
layout(buffer_reference, std430, buffer_reference_align = 16) buffer V4 { uvec4 v[]; };
layout(local_size_x = 256) in;
layout(push_constant) uniform P {
    V4 a, b;
    uint count;
} p;

void main() {
    uint i = (gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x) * 256u + gl_LocalInvocationID.x;
    if (i < p.count) p.b.v[i] = p.a.v[i];
}
