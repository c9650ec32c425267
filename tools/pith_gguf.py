"""GGUF v3 writer and reader with numpy quantizers, for Pith's test and benchmark tools.

Independent of Pith's C code on purpose: tests use it to write model files and to read them back for the
float64 reference, so a bug in the C reader cannot hide behind the same bug here.

Conventions
- Shapes given to and returned by this module are numpy order (slowest dimension first), e.g. a weight
  matrix is (out_features, in_features). GGUF stores ne[] fastest first, so the file holds the reverse.
- Quantized block layouts follow GGML's (the formats llama.cpp reads and writes):
    Q8_0 (34 bytes / 32 values): f16 d, int8 q[32];               x = d * q
    Q4_0 (18 bytes / 32 values): f16 d, u8 qs[16];                x = d * (nibble - 8); low nibbles hold
                                  values 0..15 of the block, high nibbles values 16..31
    Q4_K (144 bytes / 256 values): f16 d, f16 dmin, u8 scales[12] (8 six-bit scales and mins), u8 qs[128]
    Q5_K (176 bytes / 256 values): as Q4_K with u8 qh[32] between the scales and qs: bit s of qh[l] is
                                  the fifth bit of value l of sub-block s (q in 0..31)
    Q6_K (210 bytes / 256 values): u8 ql[128], u8 qh[64], int8 scales[16], f16 d
    MXFP4 (17 bytes / 32 values): u8 e (E8M0), u8 qs[16] of 4-bit E2M1 codes (low nibbles values 0..15,
                                  high nibbles 16..31); x = E2M1(code) * 2^(e - 127)
    IQ4_NL (18 bytes / 32 values): f16 d, u8 qs[16] (nibbles as Q4_0's); x = d * IQ4_VALUES[nibble]
    IQ4_XS (136 bytes / 256 values): f16 d, u16 scales_h, u8 scales_l[4], u8 qs[128]: 8 sub-blocks of 32,
                                  ls = nibble s of scales_l | bit pair s of scales_h << 4, 16 bytes of
                                  nibbles each (as IQ4_NL's); x = d * (ls - 32) * IQ4_VALUES[nibble]
  Q8_0 and Q4_0 quantize exactly as GGML's reference quantizers (same rounding), so a file written here
  matches one converted by llama.cpp from the same float32 weights. Q4_K, Q5_K, Q6_K, IQ4_NL and IQ4_XS use simpler (plain
  min/max) quantizers than llama.cpp's search-based ones: the blocks are valid, only slightly less accurate.

Writing is streaming: add_tensor takes an array or a callable producing it, and write() pulls each
tensor's data only when it gets to it, so large models never sit in memory twice.
"""

import mmap
import struct

import numpy as np

GGUF_MAGIC = b"GGUF"
GGUF_VERSION = 3
DEFAULT_ALIGNMENT = 32

# Metadata value types.
UINT8, INT8, UINT16, INT16, UINT32, INT32, FLOAT32, BOOL, STRING, ARRAY, UINT64, INT64, FLOAT64 = range(13)

_SCALAR_FMT = {
    UINT8: "<B", INT8: "<b", UINT16: "<H", INT16: "<h", UINT32: "<I", INT32: "<i",
    FLOAT32: "<f", BOOL: "<?", UINT64: "<Q", INT64: "<q", FLOAT64: "<d",
}
_SCALAR_NP = {
    UINT8: "<u1", INT8: "<i1", UINT16: "<u2", INT16: "<i2", UINT32: "<u4", INT32: "<i4",
    FLOAT32: "<f4", BOOL: "<u1", UINT64: "<u8", INT64: "<i8", FLOAT64: "<f8",
}

# Tensor types (GGML ids).
F32, F16, Q4_0, Q8_0, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, BF16, MXFP4 = 0, 1, 2, 8, 12, 13, 14, 20, 23, 30, 39
TYPE_NAMES = {"F32": F32, "F16": F16, "Q4_0": Q4_0, "Q8_0": Q8_0, "Q4_K": Q4_K, "Q5_K": Q5_K, "Q6_K": Q6_K,
              "IQ4_NL": IQ4_NL, "IQ4_XS": IQ4_XS, "BF16": BF16, "MXFP4": MXFP4}
# GGML's kvalues_iq4nl: the non-linear grid IQ4_NL and IQ4_XS nibbles index.
IQ4_VALUES = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], dtype=np.int8)
# type -> (values per block, bytes per block)
BLOCK = {F32: (1, 4), F16: (1, 2), BF16: (1, 2), Q8_0: (32, 34), Q4_0: (32, 18), Q4_K: (256, 144),
         Q5_K: (256, 176), Q6_K: (256, 210), IQ4_NL: (32, 18), IQ4_XS: (256, 136), MXFP4: (32, 17)}


def type_id(t):
    """Accepts a GGML type id or its name ("Q8_0")."""
    if isinstance(t, str):
        if t.upper() not in TYPE_NAMES:
            raise ValueError(f"unknown tensor type {t!r}")
        return TYPE_NAMES[t.upper()]
    if t not in BLOCK:
        raise ValueError(f"unsupported tensor type id {t}")
    return t


def type_name(t):
    for name, tid in TYPE_NAMES.items():
        if tid == t:
            return name
    return f"type{t}"


def tensor_nbytes(shape, t):
    t = type_id(t)
    per_block, block_bytes = BLOCK[t]
    n = int(np.prod(shape, dtype=np.int64)) if len(shape) else 1
    row = shape[-1] if len(shape) else 1
    if row % per_block:
        raise ValueError(f"row length {row} is not a multiple of {type_name(t)}'s block of {per_block}")
    return n // per_block * block_bytes


# ---------------------------------------------------------------------------------------------------------
# Scalar conversions matching GGML's.

def f32_to_bf16_bits(x):
    """Round to nearest even, NaN kept quiet (as GGML's fp32 -> bf16)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = ((u.astype(np.uint64) + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(x)
    if np.any(nan):
        rounded = np.where(nan, ((u >> 16) | 64).astype(np.uint16), rounded)
    return rounded


def bf16_bits_to_f32(b):
    return (np.asarray(b, dtype=np.uint32) << 16).view(np.float32)


def _round_half_away(v):
    """C roundf: halves go away from zero (numpy's round goes to even). Exact in float64."""
    v = np.asarray(v, dtype=np.float64)
    return np.sign(v) * np.floor(np.abs(v) + 0.5)


# ---------------------------------------------------------------------------------------------------------
# Quantizers: float32 array (..., n) with n a multiple of the block -> bytes.

def quantize_q8_0(x):
    x = np.ascontiguousarray(x, dtype=np.float32).reshape(-1, 32)
    amax = np.max(np.abs(x), axis=1)
    d = (amax / np.float32(127)).astype(np.float32)
    with np.errstate(divide="ignore"):
        inv = np.where(d != 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
    q = _round_half_away(x * inv[:, None]).astype(np.int8)   # x * inv in float32, as GGML does
    out = np.empty((x.shape[0], 34), dtype=np.uint8)
    out[:, 0:2] = d.astype("<f2").view(np.uint8).reshape(-1, 2)
    out[:, 2:] = q.view(np.uint8)
    return out.tobytes()


def quantize_q4_0(x):
    x = np.ascontiguousarray(x, dtype=np.float32).reshape(-1, 32)
    # The signed value of largest magnitude (first one on ties) maps to -8, so the full range is used.
    idx = np.argmax(np.abs(x), axis=1)
    vmax = x[np.arange(x.shape[0]), idx]
    d = (vmax / np.float32(-8)).astype(np.float32)
    with np.errstate(divide="ignore"):
        inv = np.where(d != 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
    shifted = (x * inv[:, None]).astype(np.float32) + np.float32(8.5)   # float32 add, as GGML
    q = np.minimum(15, np.trunc(shifted).astype(np.int32)).astype(np.uint8)
    out = np.empty((x.shape[0], 18), dtype=np.uint8)
    out[:, 0:2] = d.astype("<f2").view(np.uint8).reshape(-1, 2)
    out[:, 2:] = q[:, :16] | (q[:, 16:] << 4)
    return out.tobytes()


def quantize_q4_k(x, bits=4):
    """Q4_K, or with bits=5 Q5_K (the same fields, 31 levels, and qh[32] for the fifth bits)."""
    qmax = (1 << bits) - 1
    x = np.ascontiguousarray(x, dtype=np.float32).reshape(-1, 8, 32).astype(np.float64)
    nb = x.shape[0]
    lo = np.minimum(x.min(axis=2), 0.0)                    # x = scale * q - min, q in 0..qmax, min >= 0
    hi = np.maximum(x.max(axis=2), 0.0)
    sub_scale = (hi - lo) / qmax
    sub_min = -lo
    d = (sub_scale.max(axis=1) / 63.0).astype(np.float16)
    dmin = (sub_min.max(axis=1) / 63.0).astype(np.float16)
    d64, dmin64 = d.astype(np.float64), dmin.astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        sc = np.where(d64[:, None] > 0, np.ceil(sub_scale / d64[:, None] - 1e-9), 0)
        mn = np.where(dmin64[:, None] > 0, _round_half_away(sub_min / dmin64[:, None]), 0)
    sc = np.clip(sc, 0, 63).astype(np.uint8)
    mn = np.clip(mn, 0, 63).astype(np.uint8)
    step = d64[:, None] * sc
    offs = dmin64[:, None] * mn
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(step[:, :, None] > 0, _round_half_away((x + offs[:, :, None]) / step[:, :, None]), 0)
    q = np.clip(q, 0, qmax).astype(np.uint8).reshape(nb, 256)
    qh = np.zeros((nb, 32), dtype=np.uint8)
    for s in range(8):                                    # Q5_K: bit s of qh[l] = bit 4 of value 32 s + l
        qh |= ((q[:, 32 * s:32 * s + 32] >> 4) & 1) << s
    q &= 0xF

    scales = np.zeros((nb, 12), dtype=np.uint8)
    scales[:, 0:4] = (sc[:, 0:4] & 63) | ((sc[:, 4:8] >> 4) << 6)
    scales[:, 4:8] = (mn[:, 0:4] & 63) | ((mn[:, 4:8] >> 4) << 6)
    scales[:, 8:12] = (sc[:, 4:8] & 0xF) | ((mn[:, 4:8] & 0xF) << 4)
    qs = np.empty((nb, 128), dtype=np.uint8)
    for c in range(4):   # 64 values per chunk: sub-block 2c in the low nibbles, 2c+1 in the high ones
        qs[:, 32 * c:32 * c + 32] = q[:, 64 * c:64 * c + 32] | (q[:, 64 * c + 32:64 * c + 64] << 4)
    head = 16 + (32 if bits == 5 else 0)
    out = np.empty((nb, head + 128), dtype=np.uint8)
    out[:, 0:2] = d.astype("<f2").view(np.uint8).reshape(-1, 2)
    out[:, 2:4] = dmin.astype("<f2").view(np.uint8).reshape(-1, 2)
    out[:, 4:16] = scales
    if bits == 5:
        out[:, 16:48] = qh
    out[:, head:] = qs
    return out.tobytes()


def quantize_q5_k(x):
    return quantize_q4_k(x, bits=5)


def _iq4_indices(v):
    """Index of the nearest IQ4_VALUES entry to each of v (float64)."""
    return np.abs(v[..., None] - IQ4_VALUES.astype(np.float64)).argmin(axis=-1).astype(np.uint8)


def _iq4_scale(x):
    """Per group (last axis): d mapping the element of largest magnitude onto -127, the grid's end."""
    big = np.take_along_axis(x, np.abs(x).argmax(axis=-1)[..., None], axis=-1)[..., 0]
    return -big / 127.0


def _iq4_nibbles(q):
    """Indices of 32 values per group -> 16 bytes: byte j holds value j (low nibble) and j + 16 (high)."""
    return q[..., :16] | (q[..., 16:] << 4)


def quantize_iq4_nl(x):
    x = np.ascontiguousarray(x, dtype=np.float32).reshape(-1, 32).astype(np.float64)
    d = _iq4_scale(x).astype(np.float16)
    d64 = d.astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(d64[:, None] != 0, _iq4_indices(x / d64[:, None]), 8)
    out = np.empty((x.shape[0], 18), dtype=np.uint8)
    out[:, 0:2] = d.astype("<f2").view(np.uint8).reshape(-1, 2)
    out[:, 2:] = _iq4_nibbles(q.astype(np.uint8))
    return out.tobytes()


def quantize_iq4_xs(x):
    x = np.ascontiguousarray(x, dtype=np.float32).reshape(-1, 8, 32).astype(np.float64)
    nb = x.shape[0]
    dl = _iq4_scale(x)                                     # wanted per sub-block scale (signed)
    d = (np.abs(dl).max(axis=1) / 31.0).astype(np.float16)
    d64 = d.astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        sc = np.where(d64[:, None] > 0, np.round(dl / d64[:, None]), 0)
    sc = np.clip(sc, -32, 31).astype(np.int64)
    step = d64[:, None] * sc
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(step[:, :, None] != 0, _iq4_indices(x / step[:, :, None]), 8).astype(np.uint8)
    ls = (sc + 32).astype(np.uint32)
    scales_h = np.zeros(nb, dtype=np.uint32)
    for s in range(8):
        scales_h |= (ls[:, s] >> 4) << (2 * s)
    scales_l = ((ls[:, 0::2] & 15) | ((ls[:, 1::2] & 15) << 4)).astype(np.uint8)
    out = np.empty((nb, 136), dtype=np.uint8)
    out[:, 0:2] = d.astype("<f2").view(np.uint8).reshape(-1, 2)
    out[:, 2:4] = scales_h.astype("<u2").view(np.uint8).reshape(-1, 2)
    out[:, 4:8] = scales_l
    out[:, 8:] = _iq4_nibbles(q).reshape(nb, 128)
    return out.tobytes()


def quantize_q6_k(x):
    x = np.ascontiguousarray(x, dtype=np.float32).reshape(-1, 16, 16).astype(np.float64)
    nb = x.shape[0]
    sub_scale = np.abs(x).max(axis=2) / 31.0              # x = d * sc * (q - 32), q - 32 in -32..31
    d = (sub_scale.max(axis=1) / 127.0).astype(np.float16)
    d64 = d.astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        sc = np.where(d64[:, None] > 0, np.ceil(sub_scale / d64[:, None] - 1e-9), 0)
    sc = np.clip(sc, -128, 127).astype(np.int8)
    step = d64[:, None] * sc
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(step[:, :, None] != 0, _round_half_away(x / step[:, :, None]), 0)
    q = (np.clip(q, -32, 31) + 32).astype(np.uint8).reshape(nb, 256)

    ql = np.empty((nb, 128), dtype=np.uint8)
    qh = np.empty((nb, 64), dtype=np.uint8)
    for half in range(2):
        b = q[:, 128 * half:128 * half + 128]
        q1, q2, q3, q4 = b[:, 0:32], b[:, 32:64], b[:, 64:96], b[:, 96:128]
        ql[:, 64 * half:64 * half + 32] = (q1 & 0xF) | ((q3 & 0xF) << 4)
        ql[:, 64 * half + 32:64 * half + 64] = (q2 & 0xF) | ((q4 & 0xF) << 4)
        qh[:, 32 * half:32 * half + 32] = (q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6)
    out = np.empty((nb, 210), dtype=np.uint8)
    out[:, 0:128] = ql
    out[:, 128:192] = qh
    out[:, 192:208] = sc.view(np.uint8)
    out[:, 208:210] = d.astype("<f2").view(np.uint8).reshape(-1, 2)
    return out.tobytes()


# E2M1 codes 0..15 as values (sign bit 3): 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives.
E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], dtype=np.float64)


def quantize_mxfp4(x):
    """MXFP4 per the OCP Microscaling spec: the shared scale 2^(floor(log2(amax)) - 2) (E2M1's largest
    exponent is 2), each value the nearest E2M1 code of x / scale (saturating at +-6; ties to the smaller
    magnitude). A zero block gets e = 0."""
    x = np.ascontiguousarray(x, dtype=np.float32).reshape(-1, 32).astype(np.float64)
    amax = np.max(np.abs(x), axis=1)
    with np.errstate(divide="ignore"):
        exp = np.where(amax > 0, np.floor(np.log2(np.where(amax > 0, amax, 1))) - 2, -127)
    e = np.clip(exp + 127, 0, 254).astype(np.int64)
    scaled = x / np.ldexp(1.0, (e - 127))[:, None]
    # nearest of the 8 magnitudes (a value exactly between two takes the smaller), then the sign
    mids = (E2M1[:7] + E2M1[1:8]) / 2
    mag = np.searchsorted(mids, np.abs(scaled), side="left")
    code = (mag | np.where((scaled < 0) & (mag > 0), 8, 0)).astype(np.uint8)
    out = np.empty((x.shape[0], 17), dtype=np.uint8)
    out[:, 0] = e.astype(np.uint8)
    out[:, 1:] = code[:, :16] | (code[:, 16:] << 4)
    return out.tobytes()


def encode(x, t):
    """float array -> the bytes GGUF stores for tensor type t."""
    t = type_id(t)
    if t == F32:
        return np.ascontiguousarray(x, dtype="<f4").tobytes()
    if t == F16:
        return np.ascontiguousarray(x, dtype=np.float32).astype("<f2").tobytes()
    if t == BF16:
        return f32_to_bf16_bits(x).astype("<u2").tobytes()
    return {Q8_0: quantize_q8_0, Q4_0: quantize_q4_0, Q4_K: quantize_q4_k, Q5_K: quantize_q5_k,
            Q6_K: quantize_q6_k, IQ4_NL: quantize_iq4_nl, IQ4_XS: quantize_iq4_xs, MXFP4: quantize_mxfp4}[t](x)


# ---------------------------------------------------------------------------------------------------------
# Dequantizers: bytes of n values -> float32 array of n.

def dequantize(buf, t, n):
    t = type_id(t)
    raw = np.frombuffer(buf, dtype=np.uint8, count=n // BLOCK[t][0] * BLOCK[t][1])
    if t == F32:
        return raw.view("<f4").astype(np.float32)
    if t == F16:
        return raw.view("<f2").astype(np.float32)
    if t == BF16:
        return bf16_bits_to_f32(raw.view("<u2"))
    if t == Q8_0:
        b = raw.reshape(-1, 34)
        d = b[:, 0:2].copy().view("<f2").astype(np.float32)
        return (d * b[:, 2:].view(np.int8).astype(np.float32)).reshape(-1)
    if t == Q4_0:
        b = raw.reshape(-1, 18)
        d = b[:, 0:2].copy().view("<f2").astype(np.float32)
        qs = b[:, 2:]
        q = np.concatenate([qs & 0xF, qs >> 4], axis=1).astype(np.float32) - 8
        return (d * q).reshape(-1)
    if t == MXFP4:
        b = raw.reshape(-1, 17)
        d = np.ldexp(np.float32(1), b[:, 0].astype(np.int32) - 127).astype(np.float32)
        q = np.concatenate([b[:, 1:] & 0xF, b[:, 1:] >> 4], axis=1)
        return (E2M1.astype(np.float32)[q] * d[:, None]).reshape(-1)
    if t in (Q4_K, Q5_K):
        b = raw.reshape(-1, BLOCK[t][1])
        d = b[:, 0:2].copy().view("<f2").astype(np.float32)
        dmin = b[:, 2:4].copy().view("<f2").astype(np.float32)
        s = b[:, 4:16]
        sc = np.empty((b.shape[0], 8), dtype=np.uint8)
        mn = np.empty((b.shape[0], 8), dtype=np.uint8)
        sc[:, 0:4] = s[:, 0:4] & 63
        mn[:, 0:4] = s[:, 4:8] & 63
        sc[:, 4:8] = (s[:, 8:12] & 0xF) | ((s[:, 0:4] >> 6) << 4)
        mn[:, 4:8] = (s[:, 8:12] >> 4) | ((s[:, 4:8] >> 6) << 4)
        qs = b[:, 16:] if t == Q4_K else b[:, 48:]
        q = np.empty((b.shape[0], 8, 32), dtype=np.float32)
        for c in range(4):
            q[:, 2 * c] = qs[:, 32 * c:32 * c + 32] & 0xF
            q[:, 2 * c + 1] = qs[:, 32 * c:32 * c + 32] >> 4
        if t == Q5_K:
            for s in range(8):
                q[:, s] += 16 * ((b[:, 16:48] >> s) & 1)
        y = (d * sc.astype(np.float32))[:, :, None] * q - (dmin * mn.astype(np.float32))[:, :, None]
        return y.reshape(-1)
    if t == Q6_K:
        b = raw.reshape(-1, 210)
        ql, qh = b[:, 0:128], b[:, 128:192]
        sc = b[:, 192:208].view(np.int8).astype(np.float32)
        d = b[:, 208:210].copy().view("<f2").astype(np.float32)
        q = np.empty((b.shape[0], 256), dtype=np.int32)
        for half in range(2):
            l0, l1 = ql[:, 64 * half:64 * half + 32], ql[:, 64 * half + 32:64 * half + 64]
            h = qh[:, 32 * half:32 * half + 32]
            base = 128 * half
            q[:, base + 0:base + 32] = (l0 & 0xF) | (((h >> 0) & 3) << 4)
            q[:, base + 32:base + 64] = (l1 & 0xF) | (((h >> 2) & 3) << 4)
            q[:, base + 64:base + 96] = (l0 >> 4) | (((h >> 4) & 3) << 4)
            q[:, base + 96:base + 128] = (l1 >> 4) | (((h >> 6) & 3) << 4)
        y = (d * sc)[:, :, None] * (q - 32).astype(np.float32).reshape(-1, 16, 16)
        return y.reshape(-1)
    if t == IQ4_NL:
        b = raw.reshape(-1, 18)
        d = b[:, 0:2].copy().view("<f2").astype(np.float32)
        qs = b[:, 2:]
        q = IQ4_VALUES[np.concatenate([qs & 0xF, qs >> 4], axis=1)].astype(np.float32)
        return (d * q).reshape(-1)
    if t == IQ4_XS:
        b = raw.reshape(-1, 136)
        d = b[:, 0:2].copy().view("<f2").astype(np.float32)
        h = b[:, 2:4].copy().view("<u2").astype(np.int32)[:, 0]
        ls = np.empty((b.shape[0], 8), dtype=np.int32)
        for s in range(8):
            ls[:, s] = ((b[:, 4 + s // 2] >> (4 * (s % 2))) & 15) | (((h >> (2 * s)) & 3) << 4)
        qs = b[:, 8:].reshape(-1, 8, 16)
        q = IQ4_VALUES[np.concatenate([qs & 0xF, qs >> 4], axis=2)].astype(np.float32)
        y = (d * (ls - 32).astype(np.float32))[:, :, None] * q
        return y.reshape(-1)
    raise ValueError(f"cannot dequantize {type_name(t)}")


# ---------------------------------------------------------------------------------------------------------
# Writer.

def _pack_string(s):
    b = s.encode("utf-8") if isinstance(s, str) else bytes(s)
    return struct.pack("<Q", len(b)) + b


def _infer_type(v):
    if isinstance(v, bool):
        return BOOL
    if isinstance(v, (int, np.integer)):
        return INT32 if -2**31 <= v < 2**31 else INT64
    if isinstance(v, (float, np.floating)):
        return FLOAT32
    if isinstance(v, (str, bytes)):
        return STRING
    if isinstance(v, (list, tuple, np.ndarray)):
        return ARRAY
    raise TypeError(f"cannot store {type(v).__name__} in GGUF metadata")


def _pack_value(v, vtype, arr_type=None):
    if vtype == STRING:
        return _pack_string(v)
    if vtype == ARRAY:
        if arr_type is None:
            if isinstance(v, np.ndarray):
                arr_type = {np.dtype(np.float32): FLOAT32, np.dtype(np.float64): FLOAT64,
                            np.dtype(np.int32): INT32, np.dtype(np.int64): INT64,
                            np.dtype(np.uint8): UINT8, np.dtype(np.uint32): UINT32}.get(v.dtype)
                if arr_type is None:
                    raise TypeError(f"no GGUF array type for dtype {v.dtype}")
            elif len(v) == 0:
                arr_type = INT32
            else:
                arr_type = _infer_type(v[0])
        head = struct.pack("<IQ", arr_type, len(v))
        if arr_type == STRING:
            return head + b"".join(_pack_string(s) for s in v)
        if arr_type == ARRAY:
            raise TypeError("nested arrays are not supported")
        return head + np.asarray(v).astype(_SCALAR_NP[arr_type]).tobytes()
    return struct.pack(_SCALAR_FMT[vtype], v)


def _chunks(name, shape, data):
    """Tensor data as a sequence of pieces: an array of the full shape, bytes, or a callable returning
    either or an iterable of row blocks (arrays of shape (rows, *shape[1:])) or of byte strings."""
    if callable(data):
        data = data()
    if isinstance(data, (bytes, bytearray, memoryview, np.ndarray)):
        return [data]
    if isinstance(data, (list, tuple)) and not (len(data) and isinstance(data[0], (np.ndarray, bytes))):
        return [np.asarray(data)]
    return data


class GGUFWriter:
    """Collect metadata and tensor descriptions, then write() the file in one streaming pass."""

    def __init__(self, path, alignment=DEFAULT_ALIGNMENT):
        self.path = path
        self.alignment = alignment
        self.kv = []        # (key, packed value bytes with type prefix)
        self.tensors = []   # (name, numpy shape, type id, data or callable)
        if alignment != DEFAULT_ALIGNMENT:
            self.add("general.alignment", alignment, UINT32)

    def add(self, key, value, vtype=None, arr_type=None):
        """Metadata value; vtype defaults from the Python type (int -> INT32, float -> FLOAT32)."""
        if vtype is None:
            vtype = _infer_type(value)
        if any(k == key for k, _ in self.kv):
            raise ValueError(f"duplicate metadata key {key}")
        self.kv.append((key, struct.pack("<I", vtype) + _pack_value(value, vtype, arr_type)))

    def add_u32(self, key, v):
        self.add(key, int(v), UINT32)

    def add_f32(self, key, v):
        self.add(key, float(v), FLOAT32)

    def add_str(self, key, v):
        self.add(key, v, STRING)

    def add_array(self, key, values, arr_type=None):
        self.add(key, values, ARRAY, arr_type)

    def add_tensor(self, name, shape, ttype, data):
        """shape in numpy order; data: a float array of that shape, raw bytes already encoded, or a
        callable returning either or an iterable of row blocks / byte strings (pulled during write(), so
        only one block is in memory at a time)."""
        ttype = type_id(ttype)
        shape = tuple(int(s) for s in shape)
        tensor_nbytes(shape, ttype)   # validates block alignment now, not halfway through writing
        if any(n == name for n, *_ in self.tensors):
            raise ValueError(f"duplicate tensor {name}")
        self.tensors.append((name, shape, ttype, data))

    def _pad(self, n):
        return (-n) % self.alignment

    def write(self):
        offsets, off = [], 0
        for _, shape, t, _ in self.tensors:
            offsets.append(off)
            off += tensor_nbytes(shape, t)
            off += self._pad(off)
        with open(self.path, "wb") as f:
            f.write(GGUF_MAGIC + struct.pack("<IQQ", GGUF_VERSION, len(self.tensors), len(self.kv)))
            for key, packed in self.kv:
                f.write(_pack_string(key) + packed)
            for (name, shape, t, _), o in zip(self.tensors, offsets):
                ne = tuple(reversed(shape)) if shape else (1,)
                f.write(_pack_string(name) + struct.pack("<I", len(ne)) + struct.pack(f"<{len(ne)}Q", *ne)
                        + struct.pack("<IQ", t, o))
            f.write(b"\0" * self._pad(f.tell()))
            start = f.tell()
            for (name, shape, t, data), o in zip(self.tensors, offsets):
                assert f.tell() - start == o
                written = 0
                for chunk in _chunks(name, shape, data):
                    if not isinstance(chunk, (bytes, bytearray, memoryview)):
                        chunk = np.asarray(chunk)
                        if chunk.ndim == 0 or chunk.shape[1:] != shape[1:] and chunk.shape != shape:
                            raise ValueError(f"{name}: chunk shape {chunk.shape} does not fit {shape}")
                        chunk = encode(chunk, t)
                    f.write(chunk)
                    written += len(chunk)
                if written != tensor_nbytes(shape, t):
                    raise ValueError(f"{name}: {written} bytes, expected {tensor_nbytes(shape, t)}")
                f.write(b"\0" * self._pad(f.tell() - start))


# ---------------------------------------------------------------------------------------------------------
# Reader (trusting only what it checks; meant for files this project writes or downloads).

class GGUFReader:
    def __init__(self, path):
        self.path = path
        self._file = open(path, "rb")
        self._map = mmap.mmap(self._file.fileno(), 0, access=mmap.ACCESS_READ)
        self._pos = 0
        if self._take(4) != GGUF_MAGIC:
            raise ValueError(f"{path}: not a GGUF file")
        self.version = self._u32()
        if self.version not in (2, 3):
            raise ValueError(f"{path}: unsupported GGUF version {self.version}")
        n_tensors, n_kv = self._u64(), self._u64()
        self.metadata = {}
        self.metadata_types = {}
        for _ in range(n_kv):
            key = self._str()
            vtype = self._u32()
            self.metadata[key], self.metadata_types[key] = self._value(vtype)
        self.alignment = int(self.metadata.get("general.alignment", DEFAULT_ALIGNMENT))
        infos = []
        for _ in range(n_tensors):
            name = self._str()
            n_dims = self._u32()
            ne = [self._u64() for _ in range(n_dims)]
            t, off = self._u32(), self._u64()
            infos.append((name, tuple(reversed(ne)), t, off))
        self.data_start = self._pos + (-self._pos) % self.alignment
        self.tensors = {}
        for name, shape, t, off in infos:
            n = tensor_nbytes(shape, t)
            if self.data_start + off + n > len(self._map):
                raise ValueError(f"{path}: tensor {name} extends past the end of the file")
            self.tensors[name] = (shape, t, self.data_start + off, n)

    def close(self):
        self._map.close()
        self._file.close()

    def _take(self, n):
        if self._pos + n > len(self._map):
            raise ValueError(f"{self.path}: truncated header")
        b = self._map[self._pos:self._pos + n]
        self._pos += n
        return b

    def _u32(self):
        return struct.unpack("<I", self._take(4))[0]

    def _u64(self):
        return struct.unpack("<Q", self._take(8))[0]

    def _str(self):
        return self._take(self._u64()).decode("utf-8", errors="surrogateescape")

    def _value(self, vtype):
        if vtype == STRING:
            return self._str(), (STRING, None)
        if vtype == ARRAY:
            at, n = self._u32(), self._u64()
            if at == STRING:
                return [self._str() for _ in range(n)], (ARRAY, STRING)
            if at not in _SCALAR_NP:
                raise ValueError(f"{self.path}: bad array element type {at}")
            dt = np.dtype(_SCALAR_NP[at])
            arr = np.frombuffer(self._take(n * dt.itemsize), dtype=dt).copy()
            return (arr.astype(bool) if at == BOOL else arr), (ARRAY, at)
        if vtype not in _SCALAR_FMT:
            raise ValueError(f"{self.path}: bad metadata type {vtype}")
        fmt = _SCALAR_FMT[vtype]
        return struct.unpack(fmt, self._take(struct.calcsize(fmt)))[0], (vtype, None)

    def raw(self, name):
        shape, t, start, n = self.tensors[name]
        return self._map[start:start + n]

    def tensor(self, name):
        """Dequantized float32 array in numpy shape order."""
        shape, t, start, n = self.tensors[name]
        count = int(np.prod(shape, dtype=np.int64))
        return dequantize(self._map[start:start + n], t, count).reshape(shape)

    def tensor_type(self, name):
        return self.tensors[name][1]


def rewrite(src, dst, key=lambda k: k, meta=None):
    """Copy a GGUF file with each metadata key renamed to key(k) (None drops it), its type kept, and
    meta's {key: (type, value) or (ARRAY, values, element type)} added; the tensors as stored."""
    r = GGUFReader(src)
    w = GGUFWriter(dst, int(r.metadata.get("general.alignment", DEFAULT_ALIGNMENT)))
    for k, v in r.metadata.items():
        name = key(k)
        if name is None or name == "general.alignment" or name in (meta or {}):
            continue
        vtype, arr_type = r.metadata_types[k]
        w.add(name, v, vtype, arr_type)
    for k, spec in (meta or {}).items():
        w.add(k, spec[1], spec[0], spec[2] if len(spec) > 2 else None)
    for name, (shape, t, _, _) in r.tensors.items():
        w.add_tensor(name, shape, t, bytes(r.raw(name)))
    w.write()
    r.close()
