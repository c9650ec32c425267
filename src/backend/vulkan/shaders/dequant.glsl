// A weight row's values, 32 at a time (a "unit": unit u holds columns 32u..32u+31), for the GGUF type
// WTYPE, read from the file's own blocks (uploaded as they are: every block size is a whole number of
// 16-bit words). base is the row's first 16-bit word. The formats (GGML's):
//   Q8_0: per 32: f16 d, 32 int8            x = d q
//   Q4_0: per 32: f16 d, 16 bytes of nibbles (low: 0..15, high: 16..31)   x = d (q - 8)
//   Q4_K: per 256: f16 d, f16 dmin, 12 bytes of 6-bit scales and mins, 128 bytes of nibbles
//         (64 values per 32 bytes: low nibbles then high)      x = d sc q - dmin m
//   Q5_K: Q4_K with 32 bytes of fifth bits (bit u of byte l: unit u, value l) before the nibbles
//   Q6_K: per 256: 128 bytes of low nibbles, 64 of 2-bit highs, 16 int8 scales, f16 d
//         x = d sc (q - 32)
//   MXFP4: per 32: one E8M0 byte e, 16 bytes of E2M1 codes (low nibbles 0..15, high 16..31): 17 bytes, so
//         a block starts on any byte (a row of an even number of blocks is whole words)
//         x = kv[code] 2^(e - 128), kv the doubled E2M1 values (backend/cpu/mxfp4.h)
//   IQ4_NL: Q4_0's block, the nibble an index into the 16-entry non-linear table V   x = d V[q]
//   IQ4_XS: per 256: f16 d, 16 bits of scale highs (2 per sub-block), 4 bytes of scale lows (a nibble
//         per sub-block), then per 32 16 bytes of nibbles as IQ4_NL's     x = d (ls - 32) V[q]
#define WT_F32 0
#define WT_F16 1
#define WT_BF16 2
#define WT_Q8_0 3
#define WT_Q4_0 4
#define WT_Q4_K 5
#define WT_Q5_K 6
#define WT_Q6_K 7
#define WT_MXFP4 8
#define WT_IQ4_NL 9
#define WT_IQ4_XS 10

#if WTYPE == WT_IQ4_NL || WTYPE == WT_IQ4_XS
// GGML's kvalues_iq4nl (the CPU's pith_iq4_values)
const float iq4_values[16] = float[16](-127.0, -104.0, -83.0, -65.0, -49.0, -35.0, -22.0, -10.0, 1.0, 13.0, 25.0, 38.0,
                                       53.0, 69.0, 89.0, 113.0);
#endif

#if WTYPE == WT_Q4_K || WTYPE == WT_Q5_K
// GGML's 6-bit scale and min of sub-block j (0..7) from the 12 bytes at byte offset s
void scale_min_k4(U16 w, uint s, uint j, out float sc, out float m) {
    if (j < 4u) {
        sc = float(byte_at(w, s + j) & 63u);
        m = float(byte_at(w, s + j + 4u) & 63u);
    } else {
        sc = float((byte_at(w, s + j + 4u) & 0xFu) | ((byte_at(w, s + j - 4u) >> 6) << 4));
        m = float((byte_at(w, s + j + 4u) >> 4) | ((byte_at(w, s + j) >> 6) << 4));
    }
}
#endif

void dequant_unit(U16 w, uint base, uint u, out float o[32]) {
#if WTYPE == WT_F32
    uint s = base + u * 64u;
    for (uint i = 0u; i < 32u; i++) o[i] = uintBitsToFloat(uint(w.v[s + 2u * i]) | (uint(w.v[s + 2u * i + 1u]) << 16));
#elif WTYPE == WT_F16
    uint s = base + u * 32u;
    for (uint i = 0u; i < 32u; i++) o[i] = f16_at(w, s + i);
#elif WTYPE == WT_BF16
    uint s = base + u * 32u;
    for (uint i = 0u; i < 32u; i++) o[i] = bf16_at(w, s + i);
#elif WTYPE == WT_Q8_0
    uint s = base + u * 17u;
    float d = f16_at(w, s);
    for (uint j = 0u; j < 16u; j++) {
        uint q = uint(w.v[s + 1u + j]);
        o[2u * j] = d * float(sbyte(q));
        o[2u * j + 1u] = d * float(sbyte(q >> 8));
    }
#elif WTYPE == WT_Q4_0
    uint s = base + u * 9u;
    float d = f16_at(w, s);
    for (uint j = 0u; j < 8u; j++) {
        uint q = uint(w.v[s + 1u + j]);
        o[2u * j] = d * (float(q & 0xFu) - 8.0);
        o[2u * j + 1u] = d * (float((q >> 8) & 0xFu) - 8.0);
        o[2u * j + 16u] = d * (float((q >> 4) & 0xFu) - 8.0);
        o[2u * j + 17u] = d * (float(q >> 12) - 8.0);
    }
#elif WTYPE == WT_Q4_K || WTYPE == WT_Q5_K
#if WTYPE == WT_Q4_K
    uint sb = base + (u >> 3) * 72u;
#else
    uint sb = base + (u >> 3) * 88u;
#endif
    uint j = u & 7u, B = sb * 2u;
    float d = f16_at(w, sb), dmin = f16_at(w, sb + 1u), sc, m;
    scale_min_k4(w, B + 4u, j, sc, m);
    float a = d * sc, c = dmin * m;
#if WTYPE == WT_Q4_K
    uint qs = B + 16u + 32u * (j >> 1);
#else
    uint qs = B + 48u + 32u * (j >> 1), qh = B + 16u;
#endif
    for (uint l = 0u; l < 32u; l++) {
        uint q = byte_at(w, qs + l);
        q = (j & 1u) != 0u ? q >> 4 : q & 0xFu;
#if WTYPE == WT_Q5_K
        q += ((byte_at(w, qh + l) >> j) & 1u) << 4;
#endif
        o[l] = a * float(q) - c;
    }
#elif WTYPE == WT_Q6_K
    uint sb = base + (u >> 3) * 105u, B = sb * 2u;
    uint j = u & 7u, n = j >> 2, k = j & 3u;
    float d = f16_at(w, sb + 104u);
    uint ql = B + 64u * n + (k & 1u) * 32u, qh = B + 128u + 32u * n, sc = B + 192u + 8u * n + 2u * k;
    for (uint l = 0u; l < 32u; l++) {
        uint lo = byte_at(w, ql + l);
        lo = k >= 2u ? lo >> 4 : lo & 0xFu;
        uint hi = (byte_at(w, qh + l) >> (2u * k)) & 3u;
        o[l] = d * float(sbyte(byte_at(w, sc + (l >> 4)))) * float(int(lo | (hi << 4)) - 32);
    }
#elif WTYPE == WT_MXFP4
    const float kv[16] = float[16](0.0, 1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 0.0, -1.0, -2.0, -3.0, -4.0, -6.0, -8.0, -12.0);
    uint B = base * 2u + u * 17u;
    float d = ldexp(1.0, int(byte_at(w, B)) - 128);
    for (uint j = 0u; j < 16u; j++) {
        uint q = byte_at(w, B + 1u + j);
        o[j] = d * kv[q & 0xFu];
        o[j + 16u] = d * kv[q >> 4];
    }
#elif WTYPE == WT_IQ4_NL
    uint s = base + u * 9u;
    float d = f16_at(w, s);
    for (uint j = 0u; j < 8u; j++) {
        uint q = uint(w.v[s + 1u + j]);
        o[2u * j] = d * iq4_values[q & 0xFu];
        o[2u * j + 1u] = d * iq4_values[(q >> 8) & 0xFu];
        o[2u * j + 16u] = d * iq4_values[(q >> 4) & 0xFu];
        o[2u * j + 17u] = d * iq4_values[q >> 12];
    }
#elif WTYPE == WT_IQ4_XS
    uint sb = base + (u >> 3) * 68u, j = u & 7u, B = sb * 2u;
    uint ls = ((byte_at(w, B + 4u + (j >> 1)) >> (4u * (j & 1u))) & 0xFu) | (((uint(w.v[sb + 1u]) >> (2u * j)) & 3u) << 4);
    float a = f16_at(w, sb) * float(int(ls) - 32);
    uint qs = sb + 4u + 8u * j;
    for (uint l = 0u; l < 8u; l++) {
        uint q = uint(w.v[qs + l]);
        o[2u * l] = a * iq4_values[q & 0xFu];
        o[2u * l + 1u] = a * iq4_values[(q >> 8) & 0xFu];
        o[2u * l + 16u] = a * iq4_values[(q >> 4) & 0xFu];
        o[2u * l + 17u] = a * iq4_values[q >> 12];
    }
#else
#error "unknown WTYPE"
#endif
}
