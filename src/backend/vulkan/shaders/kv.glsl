// K/V cache elements of type KVTYPE (pith/kv.h): F32, F16, BF16, or Q8_0 blocks of 32 (f16 scale, 32
// int8, 17 16-bit words). e is an element index from the layer's base (a Q8_0 run starts on a block).
#define KV_F32 0
#define KV_F16 1
#define KV_BF16 2
#define KV_Q8_0 3

float kv_load(U16 c, uint e) {
#if KVTYPE == KV_F32
    return uintBitsToFloat(uint(c.v[2u * e]) | (uint(c.v[2u * e + 1u]) << 16));
#elif KVTYPE == KV_F16
    return f16_at(c, e);
#elif KVTYPE == KV_BF16
    return bf16_at(c, e);
#else
    uint b = (e >> 5) * 17u;
    return f16_at(c, b) * float(sbyte(byte_at(c, (b + 1u) * 2u + (e & 31u))));
#endif
}

#if KVTYPE == KV_BF16
uint16_t to_bf16(float x) { // round to nearest even, as pith_f32_to_bf16
    uint b = floatBitsToUint(x);
    if ((b & 0x7FFFFFFFu) > 0x7F800000u) return uint16_t((b >> 16) | 0x40u);
    return uint16_t((b + 0x7FFFu + ((b >> 16) & 1u)) >> 16);
}
#endif

// Stores n values of src (shared memory, n a multiple of 32 for Q8_0) at element e, by the workgroup's
// nth invocations (tid its index): each writes whole 16-bit words of its own, so none race.
void kv_store(U16 c, uint e, uint n, uint tid, uint nth) {
#if KVTYPE == KV_F32
    for (uint i = tid; i < n; i += nth) {
        uint b = floatBitsToUint(src[i]);
        c.v[2u * (e + i)] = uint16_t(b & 0xFFFFu);
        c.v[2u * (e + i) + 1u] = uint16_t(b >> 16);
    }
#elif KVTYPE == KV_F16
    for (uint i = tid; i < n; i += nth) c.v[e + i] = uint16_t(packHalf2x16(vec2(src[i], 0.0)) & 0xFFFFu);
#elif KVTYPE == KV_BF16
    for (uint i = tid; i < n; i += nth) c.v[e + i] = to_bf16(src[i]);
#else
    // GGML's Q8_0 as the CPU stores it: d = amax / 127, q = round half away from zero (x / d)
    for (uint blk = tid; blk < n / 32u; blk += nth) {
        float amax = 0.0;
        for (uint i = 0u; i < 32u; i++) amax = max(amax, abs(src[blk * 32u + i]));
        float d = amax / 127.0, id = d != 0.0 ? 1.0 / d : 0.0;
        uint w = ((e >> 5) + blk) * 17u;
        c.v[w] = uint16_t(packHalf2x16(vec2(d, 0.0)) & 0xFFFFu);
        for (uint j = 0u; j < 16u; j++) {
            float x0 = src[blk * 32u + 2u * j] * id, x1 = src[blk * 32u + 2u * j + 1u] * id;
            int q0 = int(sign(x0) * floor(abs(x0) + 0.5)), q1 = int(sign(x1) * floor(abs(x1) + 0.5));
            c.v[w + 1u + j] = uint16_t((uint(q0) & 0xFFu) | ((uint(q1) & 0xFFu) << 8));
        }
    }
#endif
}
