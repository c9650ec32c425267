"""Pith's logits against an independent float64 torch reference, on random-weight models in real
configurations, in GGUF (F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K, a Q4_K_M mix) and Hugging Face
safetensors (F32, F16, BF16), with the KV cache in F32 and, once per configuration, in pith run's
default F16; plus linear RoPE scaling (GGUF and safetensors, F32).

For each case: tools/mkmodel.py writes a small model, `pith run` generates 24 tokens greedily from BOS
writing every logits row it chose from, and tools/reference.py teacher-forces the same sequence
[BOS, argmax(row 0), argmax(row 1), ...] and computes all rows in float64. Tolerances and why they are
what they are: docs/testing.md. Before trusting the reference this test checks it twice: against the
independent float64 logits of stories260K in ../shared, and for self-consistency across formats (a GGUF
llama file, whose Q/K rows are permuted for adjacent-pair RoPE, must give the same logits as the
safetensors directory of the same seed, which uses rotate-half).

Environment: PITH_BIN (pith binary), PITH_TEST_TMP (scratch), PITH_SHARED (optional assets).
Exit 77 (skip) when torch or numpy is missing."""

import os
import struct
import subprocess
import sys
import tempfile
import time

try:
    import numpy as np
    import torch  # noqa: F401  (reference.py needs it)
except ImportError as e:
    print(f"skip: {e.name} is not importable (the float64 reference needs numpy and torch)")
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True   # keep the source tree clean (it may be read-only)
sys.path.insert(0, os.path.join(HERE, "..", "tools"))
import mkmodel  # noqa: E402
import pith_gguf as G  # noqa: E402
import reference  # noqa: E402

N_GEN = 24
# Absolute logit tolerances (the test models' logits have a standard deviation of about 1); the reasons
# and the measurements behind them are in docs/testing.md.
#   name: (max |error|, mean |error| or None, activation block of pith's integer kernels or None)
TOLERANCES = {
    # Float weights, F32 cache: the reference computes with the same weights; only f32-vs-f64 arithmetic.
    "float": (1e-4, None, None),
    # Float weights, pith run's default F16 cache, against the reference rounding the cache likewise
    # (rounding-boundary cases differ by one f16 step).
    "float-kv16": (5e-4, None, None),
    # Q8_0 / Q4_0: pith rounds activations to 8 bits per block of 32 for integer dot products.
    "q32": (0.3, 0.04, 32),
    # Q4_K / Q6_K: the same per block of 256 (a larger block max, so a larger step).
    "qk": (0.4, 0.05, 256),
}
# With the F16 cache, the exact reference is this far at most (the cache rounding alone moves logits by
# up to 3e-3 on these models).
TOL_KV16_VS_EXACT = 1e-2

PRESETS = ["test-llama", "test-llama-gqa", "test-qwen2", "test-qwen3"]
GGUF_TYPES = ["F32", "F16", "BF16", "Q8_0", "Q4_0"]
ST_TYPES = ["F32", "F16", "BF16"]
# K-quant blocks span 256 values: only presets whose matrix rows are multiples of 256.
KQUANT_PRESETS = ["test-llama-gqa", "test-qwen3-k"]
KQUANT_TYPES = ["Q4_K", "Q6_K", "Q4_K_M"]


def tolerance_kind(dtype):
    if dtype in ("Q8_0", "Q4_0"):
        return "q32"
    if dtype.startswith(("Q4_K", "Q6_K")):
        return "qk"
    return "float"


failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL:", msg, flush=True)


def check_reference_on_stories260k(tmp):
    """Convert the real stories260K checkpoint to GGUF and compare with the shared float64 logits."""
    shared = os.environ.get("PITH_SHARED") or os.path.join(HERE, "..", "..", "shared")
    d = os.path.join(shared, "models", "stories260K")
    try:
        blob = open(os.path.join(d, "stories260K.bin"), "rb").read()
        want = np.load(os.path.join(d, "reference", "stories260K_greedy_logits.npy"))
        gen = [int(t) for t in open(os.path.join(d, "reference", "stories260K_greedy_tokens.txt")).read().split()]
    except OSError:
        print(f"note: {d} is absent; the reference is not checked against stories260K")
        return
    dim, hidden, layers, heads, kv_heads, vocab, seq = struct.unpack("<7i", blob[:28])
    w = np.frombuffer(blob, dtype="<f4", offset=28)
    hd, pos = dim // heads, [0]

    def take(*shape):
        n = int(np.prod(shape))
        a = w[pos[0]:pos[0] + n].reshape(shape)
        pos[0] += n
        return a

    emb = take(abs(vocab), dim)
    names = [("attn_norm", (dim,)), ("attn_q", (dim, dim)), ("attn_k", (kv_heads * hd, dim)),
             ("attn_v", (kv_heads * hd, dim)), ("attn_output", (dim, dim)), ("ffn_norm", (dim,)),
             ("ffn_gate", (hidden, dim)), ("ffn_down", (dim, hidden)), ("ffn_up", (hidden, dim))]
    per_layer = {n: take(layers, *s) for n, s in names}
    final = take(dim)
    path = os.path.join(tmp, "stories260K.gguf")
    g = G.GGUFWriter(path)
    g.add_str("general.architecture", "llama")
    for k, v in (("embedding_length", dim), ("block_count", layers), ("feed_forward_length", hidden),
                 ("attention.head_count", heads), ("attention.head_count_kv", kv_heads), ("context_length", seq)):
        g.add_u32("llama." + k, v)
    g.add_f32("llama.attention.layer_norm_rms_epsilon", 1e-5)
    g.add_f32("llama.rope.freq_base", 10000.0)
    g.add_tensor("token_embd.weight", emb.shape, "F32", emb)
    for i in range(layers):
        for n, _ in names:
            g.add_tensor(f"blk.{i}.{n}.weight", per_layer[n][i].shape, "F32", per_layer[n][i])
    g.add_tensor("output_norm.weight", final.shape, "F32", final)
    g.write()
    got = reference.forward(reference.Model(path), [1] + gen[:want.shape[0] - 1]).numpy()
    err = float(np.abs(got - want).max())
    print(f"reference vs stories260K float64 logits: max |diff| {err:.2e} over {want.shape[0]} steps")
    # The shared logits are float32 (|logit| <= 22, so about 1e-6 of rounding).
    if err > 1e-5:
        fail(f"reference disagrees with the stories260K logits by {err:.2e}")


def check_cross_format(tmp):
    """A GGUF llama/qwen file and a safetensors directory of the same seed encode the same function."""
    tokens = [1] + list(np.random.default_rng(7).integers(3, 512, 30))
    for preset in PRESETS:
        cfg = mkmodel.build_config(preset)
        gpath, spath = os.path.join(tmp, f"x-{preset}.gguf"), os.path.join(tmp, f"x-{preset}-st")
        mkmodel.write_gguf(cfg, gpath, "F32", seed=11)
        mkmodel.write_safetensors(cfg, spath, "F32", seed=11, shards=2)
        a = reference.forward(reference.Model(gpath), tokens).numpy()
        b = reference.forward(reference.Model(spath), tokens).numpy()
        err = float(np.abs(a - b).max())
        # Only the float32 storage of rope_freqs.weight (Llama 3 scaling) separates the two.
        if err > 1e-6:
            fail(f"{preset}: GGUF and safetensors of one seed differ in the reference by {err:.2e}")


def run_pith(pith, model, tokenizer, out, kv_f32):
    cmd = [pith, "run", "-m", model, "-p", "", "-n", str(N_GEN), "--temp", "0", "--ignore-eos", "-t", "2",
           "--logits-out", out]
    if tokenizer:
        cmd += ["--tokenizer", tokenizer]
    if kv_f32:
        cmd.append("--kv-f32")
    try:
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
    except subprocess.TimeoutExpired:
        return "timed out after 120 s"
    if r.returncode != 0:
        return f"exit {r.returncode}: {r.stderr.decode(errors='replace').strip()[-400:]}"
    return None


def make_model(tmp, preset, fmt, dtype, seed):
    cfg = mkmodel.build_config(preset)
    if fmt == "gguf":
        model, tokenizer = os.path.join(tmp, f"{preset}-{dtype}.gguf"), None
        mkmodel.write_gguf(cfg, model, dtype, seed=seed)
    else:
        model = os.path.join(tmp, f"{preset}-{dtype}-st")
        # The BF16 directories go through a sharded index.
        mkmodel.write_safetensors(cfg, model, dtype, seed=seed, shards=2 if dtype == "BF16" else 1)
        tokenizer = os.path.join(model, "tokenizer.bin")
    return model, tokenizer, cfg.vocab


def compare(pith, tmp, name, model, tokenizer, n_vocab, kind, kv_f32=True):
    """Run pith on the model and check its logits rows against the reference. Returns the max error."""
    out = os.path.join(tmp, "logits.bin")
    if os.path.exists(out):
        os.remove(out)
    err = run_pith(pith, model, tokenizer, out, kv_f32)
    if err:
        fail(f"{name}: pith run failed: {err}")
        return None
    raw = open(out, "rb").read()
    if len(raw) != N_GEN * n_vocab * 4:
        fail(f"{name}: --logits-out wrote {len(raw)} bytes, expected {N_GEN} x {n_vocab} float32")
        return None
    got = np.frombuffer(raw, dtype="<f4").reshape(N_GEN, n_vocab).astype(np.float64)
    if not np.all(np.isfinite(got)):
        fail(f"{name}: non-finite logits")
        return None
    chosen = got.argmax(axis=1)
    tokens = [mkmodel.BOS_ID] + [int(t) for t in chosen[:-1]]
    m = reference.Model(model)
    exact = reference.forward(m, tokens).numpy()
    err_exact = np.abs(got - exact)
    tol, tol_mean, act_block = TOLERANCES[kind]
    info = ""
    if kind == "float-kv16":
        ref = reference.forward(m, tokens, kv_f16=True).numpy()
        if err_exact.max() > TOL_KV16_VS_EXACT:
            fail(f"{name}: max |error| vs the exact reference {err_exact.max():.2e} > {TOL_KV16_VS_EXACT}")
        info = f"  vs exact {err_exact.max():.1e}"
    else:
        ref = exact
    err = np.abs(got - ref)
    if act_block:
        # For information only: distance to a reference that rounds activations as integer kernels do
        # (the scheme is the kernels' choice, so it is not asserted).
        sim = reference.forward(m, tokens, act_q8=act_block).numpy()
        info = f"  vs act-q8/{act_block} sim {np.abs(got - sim).max():.1e}"
    worst = float(err.max())
    row, col = np.unravel_index(int(err.argmax()), err.shape)
    if worst > tol:
        fail(f"{name}: max |logit error| {worst:.3e} > {tol} (step {row}, token {col})")
    if tol_mean is not None and err.mean() > tol_mean:
        fail(f"{name}: mean |logit error| {err.mean():.4f} > {tol_mean}")
    # Where the reference's top-2 gap exceeds twice the tolerance, the greedy choices must agree.
    top2 = np.sort(ref, axis=1)[:, -2:]
    decisive = (top2[:, 1] - top2[:, 0]) > 2 * tol
    disagree = [i for i in range(N_GEN) if decisive[i] and ref[i].argmax() != chosen[i]]
    if disagree:
        fail(f"{name}: greedy token differs from the reference's at steps {disagree}")
    print(f"{name:34s} max|err| {worst:.2e} (tol {tol:g})  mean {err.mean():.1e}  "
          f"argmax checked {int(decisive.sum()):2d}/{N_GEN}{info}", flush=True)
    return worst


LINEAR_FACTOR = 4.0


def check_linear_scaling(pith, tmp, seed):
    """Linear RoPE scaling (factor 4, so every frequency and each position's angle shrinks fourfold) in
    GGUF metadata and in config.json. The reference must also tell the scaled model from the unscaled
    one by far more than the tolerance, or the comparison could not catch a loader that drops it."""
    cfg = mkmodel.build_config("test-llama", rope_scaling="linear", rope_factor=LINEAR_FACTOR)
    for fmt in ("gguf", "safetensors"):
        if fmt == "gguf":
            model, tok = os.path.join(tmp, f"linear-{seed}.gguf"), None
            mkmodel.write_gguf(cfg, model, "F32", seed=seed)
        else:
            model = os.path.join(tmp, f"linear-{seed}-st")
            mkmodel.write_safetensors(cfg, model, "F32", seed=seed)
            tok = os.path.join(model, "tokenizer.bin")
        m = reference.Model(model)
        if m.position_scale != 1 / LINEAR_FACTOR:
            fail(f"linear {fmt}: the reference read position scale {m.position_scale}")
        tokens = [mkmodel.BOS_ID] + list(np.random.default_rng(seed).integers(3, cfg.vocab, N_GEN - 1))
        scaled = reference.forward(m, tokens).numpy()
        m.position_scale = 1.0
        unscaled = reference.forward(m, tokens).numpy()
        moved = float(np.abs(scaled - unscaled).max())
        print(f"linear {fmt}: scaling moves the reference logits by up to {moved:.2f}")
        if moved < 100 * TOLERANCES["float"][0]:
            fail(f"linear {fmt}: scaling changes the logits by only {moved:.2e}; the case would not test it")
        compare(pith, tmp, f"test-llama {fmt} F32 linear x{LINEAR_FACTOR:g}", model, tok, cfg.vocab, "float")
        seed += 1


def main():
    pith = os.environ.get("PITH_BIN")
    if not pith or not os.access(pith, os.X_OK):
        print(f"FAIL: PITH_BIN ({pith!r}) is not an executable pith binary")
        return 1
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="refmodels-", dir=os.environ.get("PITH_TEST_TMP")) as tmp:
        check_reference_on_stories260k(tmp)
        check_cross_format(tmp)
        # A file written by llama.cpp's tools rather than ours (F16, dim 8, 32,000-token vocabulary).
        fixture = os.path.join(os.environ.get("PITH_SHARED") or os.path.join(HERE, "..", "..", "shared"),
                               "models", "fixtures", "llama-2-tiny-random.gguf")
        if os.path.exists(fixture):
            compare(pith, tmp, "llama-2-tiny-random (llama.cpp)", fixture, None, 32000, "float")
        else:
            print(f"note: {fixture} is absent; skipping that case")
        seed = 100
        for preset in PRESETS:
            for fmt, types in (("gguf", GGUF_TYPES), ("safetensors", ST_TYPES)):
                for dtype in types:
                    model, tok, n_vocab = make_model(tmp, preset, fmt, dtype, seed)
                    compare(pith, tmp, f"{preset} {fmt} {dtype}", model, tok, n_vocab, tolerance_kind(dtype))
                    if dtype == "F32" and fmt == "gguf":
                        # pith run's default cache type, once per configuration.
                        compare(pith, tmp, f"{preset} {fmt} {dtype} kv-f16", model, tok, n_vocab,
                                "float-kv16", kv_f32=False)
                    seed += 1
        for preset in KQUANT_PRESETS:
            for dtype in KQUANT_TYPES:
                model, tok, n_vocab = make_model(tmp, preset, "gguf", dtype, seed)
                compare(pith, tmp, f"{preset} gguf {dtype}", model, tok, n_vocab, tolerance_kind(dtype))
                seed += 1
        check_linear_scaling(pith, tmp, seed)
    print(f"{time.time() - t0:.1f} s")
    if failures:
        print(f"{len(failures)} failure(s)")
        return 1
    print("all reference model checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
