"""Self-check of tools/pith_gguf.py: the quantizers against plain per-element transliterations of GGML's
reference loops, the K-quant block layouts against scalar decoders written from GGML's dequantizers, and
a written file (every metadata type, every tensor type) read back field by field."""

import math
import os
import struct
import sys
import tempfile

try:
    import numpy as np
except ImportError:
    print("skip: numpy is not importable")
    sys.exit(77)

sys.dont_write_bytecode = True   # keep the source tree clean (it may be read-only)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import pith_gguf as G  # noqa: E402

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


f32 = np.float32


def c_roundf(v):
    return math.copysign(math.floor(abs(v) + 0.5), v)


def scalar_q8_0(block):
    amax = f32(0)
    for v in block:
        amax = max(amax, abs(f32(v)))
    d = f32(amax / f32(127))
    inv = f32(1) / d if d != 0 else f32(0)
    return np.float16(d), [int(c_roundf(float(f32(f32(v) * inv)))) for v in block]


def scalar_q4_0(block):
    amax, vmax = f32(0), f32(0)
    for v in block:
        if amax < abs(f32(v)):
            amax, vmax = abs(f32(v)), f32(v)
    d = f32(vmax / f32(-8))
    inv = f32(1) / d if d != 0 else f32(0)
    q = [min(15, int(f32(f32(f32(v) * inv) + f32(8.5)))) for v in block]
    return np.float16(d), q


def check_q8_0_q4_0(rng):
    x = rng.standard_normal(32 * 40).astype(np.float32)
    x[32:64] = 0.0                                  # all-zero block: d = 0, q = 0
    x[64:96] = np.linspace(-1, 1, 32)               # ties between +max and -max: first one wins
    x[96:128] = rng.integers(-127, 128, 32) / 127   # values that land on .5 boundaries
    x[128:160] *= 1e-6
    b8 = np.frombuffer(G.quantize_q8_0(x), dtype=np.uint8).reshape(-1, 34)
    b4 = np.frombuffer(G.quantize_q4_0(x), dtype=np.uint8).reshape(-1, 18)
    for i in range(x.size // 32):
        blk = x[32 * i:32 * i + 32]
        d, q = scalar_q8_0(blk)
        check(b8[i, 0:2].tobytes() == d.astype("<f2").tobytes(), f"q8_0 block {i}: scale")
        check(list(b8[i, 2:].view(np.int8)) == q, f"q8_0 block {i}: quants")
        d, q = scalar_q4_0(blk)
        check(b4[i, 0:2].tobytes() == d.astype("<f2").tobytes(), f"q4_0 block {i}: scale")
        packed = [q[j] | (q[j + 16] << 4) for j in range(16)]
        check(list(b4[i, 2:]) == packed, f"q4_0 block {i}: quants")
    # Round trip: Q8_0 error at most half a step (plus the f16 rounding of d); Q4_0 at most one step.
    for t, steps in ((G.Q8_0, 0.5), (G.Q4_0, 1.0)):
        y = G.dequantize(G.encode(x, t), t, x.size)
        blocks = x.reshape(-1, 32)
        levels = 127 if t == G.Q8_0 else 8
        step = (np.abs(blocks).max(axis=1) / levels).astype(np.float32)
        # The scale is stored as f16: its rounding moves the largest quant by up to levels * |f16(d) - d|.
        d_err = np.abs(step.astype(np.float16).astype(np.float64) - step)
        err = np.abs(y.reshape(-1, 32) - blocks).max(axis=1)
        bound = steps * step * 1.0001 + (levels + 8) * d_err + 1e-12
        check(np.all(err <= bound), f"{G.type_name(t)} round-trip error within step")


def scalar_dequant_q4_k(b):
    d = float(np.frombuffer(b[0:2], "<f2")[0])
    dmin = float(np.frombuffer(b[2:4], "<f2")[0])
    s, qs = b[4:16], b[16:144]

    def scale_min(j):
        if j < 4:
            return s[j] & 63, s[j + 4] & 63
        return (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4), (s[j + 4] >> 4) | ((s[j] >> 6) << 4)

    y = []
    for chunk in range(4):
        sc1, m1 = scale_min(2 * chunk)
        sc2, m2 = scale_min(2 * chunk + 1)
        q = qs[32 * chunk:32 * chunk + 32]
        y += [d * sc1 * (v & 0xF) - dmin * m1 for v in q]
        y += [d * sc2 * (v >> 4) - dmin * m2 for v in q]
    return y


def scalar_dequant_q6_k(b):
    ql, qh = b[0:128], b[128:192]
    sc = np.frombuffer(bytes(b[192:208]), np.int8)
    d = float(np.frombuffer(b[208:210], "<f2")[0])
    y = [0.0] * 256
    for half in range(2):
        L, H, S, base = ql[64 * half:], qh[32 * half:], sc[8 * half:], 128 * half
        for l in range(32):
            is_ = l // 16
            q1 = ((L[l] & 0xF) | (((H[l] >> 0) & 3) << 4)) - 32
            q2 = ((L[l + 32] & 0xF) | (((H[l] >> 2) & 3) << 4)) - 32
            q3 = ((L[l] >> 4) | (((H[l] >> 4) & 3) << 4)) - 32
            q4 = ((L[l + 32] >> 4) | (((H[l] >> 6) & 3) << 4)) - 32
            y[base + l] = d * S[is_] * q1
            y[base + l + 32] = d * S[is_ + 2] * q2
            y[base + l + 64] = d * S[is_ + 4] * q3
            y[base + l + 96] = d * S[is_ + 6] * q4
    return y


def check_k_quants(rng):
    x = (rng.standard_normal(256 * 6) * np.repeat(rng.uniform(0.01, 2, 6 * 16), 16)).astype(np.float32)
    x[256:512] = 0.0
    x[512:768] = np.abs(x[512:768])   # all positive: min offset is zero
    for t, scalar, nbytes in ((G.Q4_K, scalar_dequant_q4_k, 144), (G.Q6_K, scalar_dequant_q6_k, 210)):
        buf = G.encode(x, t)
        check(len(buf) == x.size // 256 * nbytes, f"{G.type_name(t)} size")
        y = G.dequantize(buf, t, x.size)
        ref = np.concatenate([np.array(scalar(np.frombuffer(buf[i * nbytes:(i + 1) * nbytes], np.uint8)))
                              for i in range(x.size // 256)])
        check(np.allclose(y, ref, rtol=1e-6, atol=1e-7), f"{G.type_name(t)} vectorised vs scalar decode")
        # Accuracy: relative to each sub-block's range the error must be a fraction of one quant step.
        sub = 32 if t == G.Q4_K else 16
        levels = 15 if t == G.Q4_K else 63
        xb = x.reshape(-1, sub)
        rng_ = np.maximum(xb.max(axis=1), 0) - np.minimum(xb.min(axis=1), 0)
        err = np.abs(y.reshape(-1, sub) - xb).max(axis=1)
        worst = float(np.max(err / np.maximum(rng_ / levels, 1e-30)))
        check(worst < 1.5, f"{G.type_name(t)} error {worst:.2f} quant steps")


def check_mxfp4(rng):
    """MXFP4: decoding against the E2M1 bit definition, values the format holds exactly round-trip, the
    OCP scale choice (2^(floor(log2 amax) - 2)) and saturation at 6 times the scale."""
    def e2m1(code):
        s, e, m = code >> 3 & 1, code >> 1 & 3, code & 1
        v = 0.5 * m if e == 0 else (1 + 0.5 * m) * 2.0 ** (e - 1)
        return -v if s else v
    raw = bytes([130] + [(j % 16) | ((15 - j % 16) << 4) for j in range(16)])
    got = G.dequantize(raw, "MXFP4", 32)
    want = [e2m1(j % 16) * 2.0 ** 3 for j in range(16)] + [e2m1(15 - j % 16) * 2.0 ** 3 for j in range(16)]
    check(list(got) == want, "MXFP4 decode: low nibbles are values 0..15, high nibbles 16..31, scale 2^(e-127)")
    exact = np.array([e2m1(int(c)) * 0.25 for c in rng.integers(0, 16, 32 * 8)], dtype=np.float32)
    exact[::32] = 1.5   # amax 1.5: scale 2^(0 - 2)
    back = G.dequantize(G.encode(exact, "MXFP4"), "MXFP4", exact.size)
    check(np.array_equal(back, exact), "MXFP4: values on the grid round-trip exactly")
    block = np.zeros(32, dtype=np.float32)
    block[0], block[1] = 7.9, 0.3   # amax 7.9: scale 2^0 ... 4 -> 2^(2 - 2) = 1, 7.9 saturates to 6
    b = G.encode(block, "MXFP4")
    check(b[0] == 127 and G.dequantize(b, "MXFP4", 32)[0] == 6.0 and G.dequantize(b, "MXFP4", 32)[1] == 0.5,
          "MXFP4: OCP scale choice and saturation")
    check(G.encode(np.zeros(32, np.float32), "MXFP4")[0] == 0, "MXFP4: a zero block has e = 0")


def check_file(tmp, rng):
    path = os.path.join(tmp, "all.gguf")
    w = G.GGUFWriter(path)
    scalars = [("u8", 200, G.UINT8), ("i8", -100, G.INT8), ("u16", 60000, G.UINT16), ("i16", -30000, G.INT16),
               ("u32", 4_000_000_000, G.UINT32), ("i32", -2_000_000_000, G.INT32), ("f32", 1.5, G.FLOAT32),
               ("b", True, G.BOOL), ("s", "héllo", G.STRING), ("u64", 2**63 + 5, G.UINT64),
               ("i64", -2**62, G.INT64), ("f64", 1e-300, G.FLOAT64)]
    for k, v, t in scalars:
        w.add(k, v, t)
    w.add_array("arr.str", ["a", "", "<0x0A>", "▁the"], G.STRING)
    w.add_array("arr.i32", [1, -2, 3], G.INT32)
    w.add_array("arr.f32", np.array([0.5, -1.25], dtype=np.float32))
    w.add_array("arr.u8", [1, 2, 255], G.UINT8)
    w.add_array("arr.empty", [], G.INT32)
    tensors = {}
    for name, shape, t in (("a.f32", (3, 5), G.F32), ("b.f16", (2, 7), G.F16), ("c.bf16", (7,), G.BF16),
                           ("d.q8", (3, 64), G.Q8_0), ("e.q4", (2, 32), G.Q4_0), ("f.q4k", (2, 256), G.Q4_K),
                           ("g.q6k", (1, 512), G.Q6_K)):
        x = rng.standard_normal(shape).astype(np.float32)
        tensors[name] = (x, t)
        w.add_tensor(name, shape, t, (lambda x=x: x) if t == G.F16 else x)   # callables are pulled lazily
    try:
        w.add_tensor("bad", (3, 33), G.Q8_0, np.zeros((3, 33)))
        check(False, "row not a multiple of the block is refused")
    except ValueError:
        pass
    w.write()

    raw = open(path, "rb").read()
    check(raw[:4] == b"GGUF" and struct.unpack("<I", raw[4:8])[0] == 3, "magic and version")
    r = G.GGUFReader(path)
    for k, v, t in scalars:
        got = r.metadata[k]
        check(r.metadata_types[k][0] == t, f"type of {k}")
        check(got == v if t != G.FLOAT32 else abs(got - v) < 1e-7, f"value of {k}: {got!r} != {v!r}")
    check(r.metadata["arr.str"] == ["a", "", "<0x0A>", "▁the"], "string array")
    check(list(r.metadata["arr.i32"]) == [1, -2, 3] and r.metadata_types["arr.i32"] == (G.ARRAY, G.INT32),
          "int array")
    check(list(r.metadata["arr.f32"]) == [0.5, -1.25], "float array")
    check(list(r.metadata["arr.u8"]) == [1, 2, 255], "u8 array")
    check(len(r.metadata["arr.empty"]) == 0, "empty array")
    check(r.data_start % 32 == 0, "data section aligned")
    for name, (x, t) in tensors.items():
        shape, tt, start, n = r.tensors[name]
        check(shape == x.shape and tt == t, f"{name}: shape/type")
        check((start - r.data_start) % 32 == 0, f"{name}: offset aligned")
        y = r.tensor(name)
        tol = {G.F32: 0, G.F16: 1e-3, G.BF16: 8e-3, G.Q8_0: 0.02, G.Q4_0: 0.3, G.Q4_K: 0.5,
               G.Q6_K: 0.1}[t] * max(1.0, float(np.abs(x).max()))
        check(np.max(np.abs(y - x)) <= tol, f"{name}: read back within {tol}")
    check(np.array_equal(r.tensor("a.f32"), tensors["a.f32"][0]), "F32 exact")
    bf = G.bf16_bits_to_f32(G.f32_to_bf16_bits(np.array([1.0, 1.00390625, 1.01171875, -3.0], np.float32)))
    check(list(bf) == [1.0, 1.0, 1.015625, -3.0], "bf16 rounds to nearest even")
    r.close()


def check_mkmodel(tmp):
    """Structure of what mkmodel writes: safetensors headers that tile their files, a complete shard
    index, a llama2.c tokenizer matching the GGUF vocabulary, and clear refusals of impossible options."""
    import json
    import subprocess
    import mkmodel
    cfg = mkmodel.build_config("test-qwen3")
    d = os.path.join(tmp, "st")
    mkmodel.write_safetensors(cfg, d, "BF16", seed=1, shards=3)
    index = json.load(open(os.path.join(d, "model.safetensors.index.json")))
    specs = mkmodel.tensor_specs(cfg)
    check(sorted(index["weight_map"]) == sorted(h for _, h, _, _ in specs), "index names every tensor")
    files = sorted(set(index["weight_map"].values()))
    check(len(files) == 3, "three shards")
    total = 0
    for fn in files:
        blob = open(os.path.join(d, fn), "rb").read()
        (hlen,) = struct.unpack("<Q", blob[:8])
        check(hlen % 8 == 0, f"{fn}: header length aligned")
        header = json.loads(blob[8:8 + hlen])
        header.pop("__metadata__")
        spans = sorted(v["data_offsets"] for v in header.values())
        check(spans[0][0] == 0 and all(a[1] == b[0] for a, b in zip(spans, spans[1:]))
              and spans[-1][1] == len(blob) - 8 - hlen, f"{fn}: tensors tile the data section")
        for name, v in header.items():
            check(v["dtype"] == "BF16" and (v["data_offsets"][1] - v["data_offsets"][0]) ==
                  2 * int(np.prod(v["shape"])), f"{fn}: {name} size")
        total += len(blob) - 8 - hlen
    check(index["metadata"]["total_size"] == total, "index total_size")
    config = json.load(open(os.path.join(d, "config.json")))
    check(config["head_dim"] == 64 and config["num_key_value_heads"] == 2 and config["tie_word_embeddings"],
          "config.json fields")
    tok = open(os.path.join(d, "tokenizer.bin"), "rb").read()
    pieces, scores, _ = mkmodel.vocabulary(cfg.vocab)
    pos, got = 4, []
    for _ in range(cfg.vocab):
        sc, n = struct.unpack("<fi", tok[pos:pos + 8])
        got.append(tok[pos + 8:pos + 8 + n].decode())
        pos += 8 + n
    check(pos == len(tok), "tokenizer.bin holds exactly n_vocab entries")
    want = [p.replace("▁", " ") for p in pieces]
    want[1], want[2] = "\n<s>\n", "\n</s>\n"
    check(got == want, "tokenizer.bin vocabulary equals the GGUF one")
    check(len(set(pieces)) == len(pieces), "pieces are unique")
    tool = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools", "mkmodel.py")
    for bad in (["--format", "safetensors", "--dtype", "Q8_0"], ["--arch", "llama", "--qk-norm"],
                ["--heads", "4", "--kv-heads", "3"]):
        r = subprocess.run([sys.executable, tool, "--out", os.path.join(tmp, "bad")] + bad,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        check(r.returncode == 2 and b"mkmodel:" in r.stderr, f"mkmodel refuses {bad}")


class _F32Safetensors:
    """Just enough of a safetensors reader (F32) for these checks, without torch."""

    def __init__(self, path):
        import json
        self.blob = open(path, "rb").read()
        (n,) = struct.unpack("<Q", self.blob[:8])
        self.header, self.base = json.loads(self.blob[8:8 + n]), 8 + n

    def tensor(self, name):
        info = self.header[name]
        b, e = info["data_offsets"]
        return np.frombuffer(self.blob[self.base + b:self.base + e], dtype="<f4").reshape(info["shape"])


def check_new_archs(tmp):
    """What mkmodel writes for Mistral windows, SmolLM3 and Gemma 3: llama.cpp's GGUF keys and tensor
    conventions, transformers' config.json fields, and refusals of what GGUF cannot express."""
    import json
    import mkmodel
    cfg = mkmodel.build_config("test-gemma3-softcap")
    g, d = os.path.join(tmp, "g3.gguf"), os.path.join(tmp, "g3-st")
    mkmodel.write_gguf(cfg, g, "F32", seed=3)
    mkmodel.write_safetensors(cfg, d, "F32", seed=3)
    r = G.GGUFReader(g)
    md = r.metadata
    check(md["general.architecture"] == "gemma3" and md["gemma3.attention.sliding_window"] == 16 and
          md["gemma3.attention.key_length"] == 96 and md["gemma3.rope.freq_base"] == 1e6 and
          md["gemma3.rope.scaling.type"] == "linear" and md["gemma3.rope.scaling.factor"] == 8.0 and
          md["gemma3.final_logit_softcapping"] == 2.0, "gemma3 GGUF metadata")
    names = set(r.tensors)
    check({"blk.0.post_attention_norm.weight", "blk.0.ffn_norm.weight", "blk.0.post_ffw_norm.weight",
           "blk.0.attn_q_norm.weight", "blk.0.attn_k_norm.weight"} <= names and "output.weight" not in names,
          "gemma3 GGUF tensor names (llama.cpp's), tied output")
    st = _F32Safetensors(os.path.join(d, "model.safetensors"))
    for gname, hname in (("blk.2.post_ffw_norm.weight", "model.layers.2.post_feedforward_layernorm.weight"),
                         ("output_norm.weight", "model.norm.weight"),
                         ("blk.0.attn_q_norm.weight", "model.layers.0.self_attn.q_norm.weight")):
        check(np.array_equal(r.tensor(gname), st.tensor(hname) + np.float32(1)), f"GGUF {gname} = HF + 1")
    check(np.array_equal(r.tensor("blk.1.attn_q.weight"), st.tensor("model.layers.1.self_attn.q_proj.weight")),
          "gemma3 GGUF Q is not permuted (rotate-half RoPE)")
    r.close()
    c = json.load(open(os.path.join(d, "config.json")))
    check(c["model_type"] == "gemma3_text" and c["sliding_window_pattern"] == 6 and
          c["layer_types"][5] == "full_attention" and c["layer_types"].count("full_attention") == 1 and
          c["rope_local_base_freq"] == 10000.0 and c["rope_scaling"] == {"rope_type": "linear", "factor": 8.0}
          and c["query_pre_attn_scalar"] == 96 and c["final_logit_softcapping"] == 2.0, "gemma3 config.json")
    cfg = mkmodel.build_config("test-smollm3")
    g, d = os.path.join(tmp, "smol.gguf"), os.path.join(tmp, "smol-st")
    mkmodel.write_gguf(cfg, g, "F32", seed=3)
    mkmodel.write_safetensors(cfg, d, "F32", seed=3)
    c = json.load(open(os.path.join(d, "config.json")))
    check(c["no_rope_layers"] == [1, 1, 1, 0, 1] and c["architectures"] == ["SmolLM3ForCausalLM"],
          "smollm3 config.json: no_rope_layers 0 on layer 3")
    r = G.GGUFReader(g)
    st = _F32Safetensors(os.path.join(d, "model.safetensors"))
    q = st.tensor("model.layers.0.self_attn.k_proj.weight")
    check(r.metadata["general.architecture"] == "smollm3" and
          np.array_equal(r.tensor("blk.0.attn_k.weight"), mkmodel.permute_for_adjacent_rope(q, cfg.kv_heads)),
          "smollm3 GGUF: K permuted as for llama")
    r.close()
    cfg = mkmodel.build_config("test-mistral-swa")
    g, d = os.path.join(tmp, "mis.gguf"), os.path.join(tmp, "mis-st")
    mkmodel.write_gguf(cfg, g, "F32", seed=3)
    mkmodel.write_safetensors(cfg, d, "F32", seed=3)
    r = G.GGUFReader(g)
    c = json.load(open(os.path.join(d, "config.json")))
    check(r.metadata["general.architecture"] == "llama" and r.metadata["llama.attention.sliding_window"] == 20
          and c["architectures"] == ["MistralForCausalLM"] and c["sliding_window"] == 20, "mistral window keys")
    r.close()
    for preset, kw in (("test-gemma3-st", {}), ("test-smollm3", dict(no_rope_interval=2)),
                       ("test-gemma3", dict(query_pre_attn_scalar=64.0)),
                       ("test-gemma3", dict(rope_local_theta=5e4))):
        try:
            mkmodel.write_gguf(mkmodel.build_config(preset, **kw), os.path.join(tmp, "no.gguf"))
            check(False, f"GGUF refuses {preset} {kw}")
        except ValueError:
            pass


def main():
    rng = np.random.default_rng(1234)
    check_q8_0_q4_0(rng)
    check_k_quants(rng)
    check_mxfp4(rng)
    with tempfile.TemporaryDirectory(dir=os.environ.get("PITH_TEST_TMP")) as tmp:
        check_file(tmp, rng)
        check_mkmodel(tmp)
        check_new_archs(tmp)
    if failures:
        print(f"{len(failures)} failure(s)")
        return 1
    print("pith_gguf self-check passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
