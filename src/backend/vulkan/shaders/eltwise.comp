#version 450
// Elementwise ops over count floats of a (rows of cols), an invocation per element.
#include "common.glsl"
layout(local_size_x = 256) in;
layout(push_constant) uniform P {
    F32 a, b;
    uint count, cols, op;
    float s, s2;
} p;

#define OP_ADD_BIAS 0u  // a += b[i % cols]
#define OP_SCALE 1u     // a *= s
#define OP_SCALE_ADD 2u // a += s b
#define OP_ZERO 3u      // a = 0
#define OP_RELU2 4u     // a = relu(a)^2
#define OP_SILU_MUL 5u  // a = silu(a) b
#define OP_GELU_MUL 6u  // a = gelu_tanh(a) b
#define OP_LOGITS 7u    // a /= s when s > 0 and s != 1; then a = s2 tanh(a / s2) when s2 > 0

void main() {
    uint i = flat_group() * 256u + gl_LocalInvocationID.x;
    if (i >= p.count) return;
    float x = p.a.v[i];
    switch (p.op) {
    case OP_ADD_BIAS: x += p.b.v[i % p.cols]; break;
    case OP_SCALE: x *= p.s; break;
    case OP_SCALE_ADD: x += p.s * p.b.v[i]; break;
    case OP_ZERO: x = 0.0; break;
    case OP_RELU2: x = x > 0.0 ? x * x : 0.0; break;
    case OP_SILU_MUL: x = x / (1.0 + exp(-x)) * p.b.v[i]; break;
    case OP_GELU_MUL: {
        float u = 0.7978845608028654 * (x + 0.044715 * x * x * x);
        // (1 + tanh(u)) / 2 = 1 / (1 + exp(-2u)): no cancellation where tanh(u) is near -1 (the negative
        // gates, where 1 + tanh loses every digit tanh has), and finite for every u
        x = x / (1.0 + exp(-2.0 * u)) * p.b.v[i];
        break;
    }
    case OP_LOGITS:
        if (p.s > 0.0 && p.s != 1.0) x /= p.s;
        if (p.s2 > 0.0) x = p.s2 * (1.0 - 2.0 / (exp(2.0 * x * (1.0 / p.s2)) + 1.0));
        break;
    }
    p.a.v[i] = x;
}
