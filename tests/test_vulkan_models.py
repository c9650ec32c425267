"""The Vulkan backend on whole models: every dense architecture's random-weight model, run by `pith run
--device vulkan`, against the independent float64 torch references of tests/test_reference_models.py
(whose machinery this test reuses: tools/mkmodel.py writes the models, tools/reference.py or the test's
own by-hand references compute the float64 logits).

Tolerances, and why they differ from the CPU's: the Vulkan shaders multiply float32 activations by the
weights decoded exactly (dequant.glsl), where the CPU kernels round activations to 8 bits per block
for integer dot products. So every weight type, Q8_0, Q4_0, the K-quants and IQ4_NL / IQ4_XS included,
is held to the float tolerance (1e-4 on logits of standard deviation ~1): only float32 arithmetic in
another order separates the shaders from the float64 reference. (The decode itself is exact: an IQ4
value is an f16 scale times a 6-bit sub-block scale times a table entry of at most 7 bits, 23
significant bits at most, so float32 holds the reference's weight exactly.) The F16 cache cases use the reference's F16-cache
simulation and its bound (1e-3), as on the CPU.

Cases: Llama (MHA and GQA with Llama 3 RoPE scaling), Qwen2 (biases), Qwen3 (QK norm) in GGUF F32, F16,
BF16, Q8_0 and Q4_0 and safetensors F32; the K-quants (Q4_K, Q5_K, Q6_K, Q4_K_M, Q5_K_M) and IQ4_NL and
IQ4_XS; Mistral's
sliding window, SmolLM3's no-RoPE layers and Gemma 3 (local and global layers, soft-capping) over 72
generated tokens (more than three windows), and their 77-token prompt prefilled in chunks of 7 and in
one chunk; linear RoPE scaling and YaRN; OLMo 2 (its whole-projection QK norm, against its own
reference). Then the engine's paths on the device: the replayed decode steps give the logits of steps
recorded every time (PITH_VK_REPLAY=0) bit for bit; the BF16 and Q8_0 caches against the CPU's (both
round the cache the same way); a DeepSeek file (latent attention) is refused at load with the reason.
The hybrid (recurrent) architectures have their own device test: tests/test_vulkan_models_hybrid.py.

Skips (77) when the build has no Vulkan backend or no device can run it (`pith devices` says why), or
without torch and numpy."""

import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, HERE)

PITH = os.environ.get("PITH_BIN")


def vulkan_device():
    """The first Vulkan device `pith devices` says can run pith, or None with the reason printed."""
    if not PITH:
        print("skip: PITH_BIN is not set")
        return None
    r = subprocess.run([PITH, "devices"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
    lines = r.stdout.decode(errors="replace").splitlines()
    for line in lines:
        if line.startswith("vulkan:") and line[7:8].isdigit() and "cannot run" not in line:
            return line.split(":")[0] + ":" + line.split(":")[1]
    print("skip: no Vulkan device can run pith here: " + " | ".join(lines))
    return None


DEVICE = vulkan_device()
if DEVICE is None:
    sys.exit(77)

import numpy as np  # noqa: E402
import test_reference_models as R  # noqa: E402  (exits 77 itself without torch and numpy)

os.environ["PITH_DEVICE"] = DEVICE   # every pith the reference machinery runs, runs on the device
import mkmodel  # noqa: E402  (on the path R set)


def run_logits(tmp, model, tok, n_vocab, n_gen, env=None, extra=()):
    out = os.path.join(tmp, "vk-logits.bin")
    if os.path.exists(out):
        os.remove(out)
    cmd = [PITH, "run", "-m", model, "-p", "", "-n", str(n_gen), "--temp", "0", "--ignore-eos", "--logits-out", out,
           *extra]
    if tok:
        cmd += ["--tokenizer", tok]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300, env={**os.environ, **(env or {})})
    if r.returncode != 0:
        R.fail(f"{model}: pith run {' '.join(extra)} failed: {r.stderr.decode(errors='replace').strip()[-300:]}")
        return None
    return np.frombuffer(open(out, "rb").read(), dtype="<f4").reshape(n_gen, n_vocab)


def check_replay(tmp):
    """Replayed decode steps against steps recorded every time: the same command buffers' work, so the same
    bits."""
    model, tok, n_vocab = R.make_model(tmp, "test-qwen3", "gguf", "Q8_0", 700)
    a = run_logits(tmp, model, tok, n_vocab, 24, env={"PITH_VK_REPLAY": "1"})
    b = run_logits(tmp, model, tok, n_vocab, 24, env={"PITH_VK_REPLAY": "0"})
    if a is not None and b is not None:
        same = np.array_equal(a, b)
        print(f"replay: 24 decode steps replayed vs recorded every step: {'identical' if same else 'DIFFERENT'}")
        if not same:
            R.fail(f"replayed steps differ from recorded ones by up to {np.abs(a - b).max():.3e}")


def check_kv_types(tmp):
    """BF16 and Q8_0 caches: the device rounds K and V as the CPU does (RNE bf16; Q8_0 d = amax / 127,
    round half away from zero), so on an F32 model (no activation rounding on the CPU either) the two
    differ by float arithmetic, plus a cache rounding step where a value sits on a boundary: 0.05."""
    model, tok, n_vocab = R.make_model(tmp, "test-llama-gqa", "gguf", "F32", 701)
    for kv in ("bf16", "q8_0"):
        gpu = run_logits(tmp, model, tok, n_vocab, 24, extra=("--kv-type", kv))
        cpu = run_logits(tmp, model, tok, n_vocab, 24, env={"PITH_DEVICE": "cpu"}, extra=("--kv-type", kv))
        if gpu is None or cpu is None:
            continue
        err = float(np.abs(gpu - cpu).max())
        print(f"test-llama-gqa F32, {kv} cache: Vulkan vs CPU max |diff| {err:.2e}")
        if err > 0.05:
            R.fail(f"{kv} cache: Vulkan and CPU logits differ by {err:.3e} > 0.05")


def check_refusals(tmp):
    for preset, dtype, want in (("test-deepseek2", "F32", "latent attention"),):
        model = os.path.join(tmp, f"refused-{preset}.gguf")
        subprocess.run([sys.executable, os.path.join(HERE, "..", "tools", "mkmodel.py"), "--preset", preset, "--dtype",
                        dtype, "--seed", "702", "--out", model], check=True, stdout=subprocess.DEVNULL)
        cmd = [PITH, "run", "-m", model, "-p", "", "-n", "2", "--temp", "0"]
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
        msg = r.stderr.decode(errors="replace")
        print(f"{preset} {dtype} on Vulkan: exit {r.returncode}: {msg.strip().splitlines()[-1] if msg.strip() else ''}")
        if r.returncode == 0 or r.returncode >= 128 or want not in msg:
            R.fail(f"{preset} {dtype}: expected a refusal naming {want!r}, got exit {r.returncode}: {msg[-300:]}")


def main():
    import tempfile
    import time
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="vkmodels-", dir=os.environ.get("PITH_TEST_TMP")) as tmp:
        seed = 500
        for preset in R.PRESETS:
            for fmt, types in (("gguf", R.GGUF_TYPES), ("safetensors", ["F32"])):
                for dtype in types:
                    model, tok, n_vocab = R.make_model(tmp, preset, fmt, dtype, seed)
                    R.compare(PITH, tmp, f"vulkan {preset} {fmt} {dtype}", model, tok, n_vocab, "float")
                    if dtype == "F32" and fmt == "gguf":
                        R.compare(PITH, tmp, f"vulkan {preset} {fmt} {dtype} kv-f16", model, tok, n_vocab,
                                  "float-kv16", kv_f32=False)
                    seed += 1
        for preset in R.KQUANT_PRESETS:
            for dtype in ("Q4_K", "Q5_K", "Q6_K", "Q4_K_M", "Q5_K_M", "IQ4_NL", "IQ4_XS"):
                model, tok, n_vocab = R.make_model(tmp, preset, "gguf", dtype, seed)
                R.compare(PITH, tmp, f"vulkan {preset} gguf {dtype}", model, tok, n_vocab, "float")
                seed += 1
        R.check_linear_scaling(PITH, tmp, seed)
        seed += 2
        for preset in R.YARN_PRESETS:
            model, tok, n_vocab = R.make_model(tmp, preset, "gguf", "F32", seed)
            R.compare(PITH, tmp, f"vulkan {preset} gguf F32", model, tok, n_vocab, "float")
            seed += 1
        for preset in R.NEW_PRESETS:
            model, tok, n_vocab = R.make_model(tmp, preset, "gguf", "F32", seed)
            R.compare(PITH, tmp, f"vulkan {preset} gguf F32", model, tok, n_vocab, "float", n_gen=R.N_GEN_LONG)
            for chunk in ("7", "2048"):
                R.compare(PITH, tmp, f"vulkan {preset} prompt, chunks of {chunk}", model, tok, n_vocab, "float",
                          n_gen=R.N_GEN_PROMPT, prompt=R.PROMPT_TEXT, extra=("--max-batch-tokens", chunk))
            seed += 1
        R.check_olmo2(PITH, tmp)
        check_replay(tmp)
        check_kv_types(tmp)
        check_refusals(tmp)
    print(f"{len(R.failures)} failures in {time.time() - t0:.0f} s")
    for f in R.failures:
        print("FAIL:", f)
    return 1 if R.failures else 0


if __name__ == "__main__":
    sys.exit(main())
