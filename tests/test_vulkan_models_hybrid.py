"""The Vulkan backend on the hybrid (recurrent) architectures' random-weight models, run by `pith run --device
vulkan`, against the float64 torch references of tests/test_reference_models.py (tools/reference.py):
LFM2 (gated short convolutions), Qwen3.5 (Gated DeltaNet, gated attention with partial RoPE), Granite
4.0-H and Nemotron-H (Mamba2: convolution, SSD scan, grouped gated norm); and the hybrids with experts, Qwen3.5-MoE
and Granite 4.0-H MoE, from BOS in F32 (their mixers are the cases above; their MoE op is checked on
every routing by test_vulkan_moe).

Cases, per preset: GGUF F32 from BOS (24 tokens); Q8_0 from BOS (the shaders decode the weights exactly
and multiply float32 activations, so it is held to the float tolerance, as in test_vulkan_models.py);
the 77-token prompt prefilled 7 tokens at a time (the state carried across every chunk; the engine cuts
the prompt at its state snapshot, a step that wants no logits), then 12 tokens. Tolerance: 1e-4 on logits
of standard deviation ~1 ("float": only float32 arithmetic in another order separates the shaders from
the float64 reference). Then the engine's paths: the prompt case again with PITH_VK_REPLAY=0 (every step
recorded) gives the same logits bit for bit as the replayed steps.

Skips (77) when the build has no Vulkan backend or no device can run it (`pith devices` says why), or
without torch and numpy."""

import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, HERE)

import test_vulkan_models as V  # noqa: E402  (exits 77 itself without a device, torch or numpy)

R, np = V.R, V.np
PRESETS = ["test-lfm2", "test-qwen35", "test-granitehybrid", "test-nemotronh"]
MOE_PRESETS = ["test-qwen35moe", "test-granitehybrid-moe"]


def prompt_logits(tmp, model, n_vocab, replay):
    out = os.path.join(tmp, "vk-hybrid-logits.bin")
    if os.path.exists(out):
        os.remove(out)
    cmd = [V.PITH, "run", "-m", model, "-p", R.PROMPT_TEXT, "-n", str(R.N_GEN_PROMPT), "--temp", "0", "--ignore-eos",
           "--max-batch-tokens", "7", "--logits-out", out]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300,
                       env={**os.environ, "PITH_VK_REPLAY": replay})
    if r.returncode != 0:
        R.fail(f"{model}: pith run (PITH_VK_REPLAY={replay}) failed: {r.stderr.decode(errors='replace').strip()[-300:]}")
        return None
    return np.frombuffer(open(out, "rb").read(), dtype="<f4").reshape(R.N_GEN_PROMPT, n_vocab)


def check_replay(tmp, preset, model, n_vocab):
    """The prompt case replayed (the default) and recorded every step: the same bits."""
    a, b = prompt_logits(tmp, model, n_vocab, "1"), prompt_logits(tmp, model, n_vocab, "0")
    if a is not None and b is not None:
        same = np.array_equal(a, b)
        print(f"vulkan {preset}: replayed vs recorded every step: {'identical' if same else 'DIFFERENT'}")
        if not same:
            R.fail(f"{preset}: replayed steps differ from recorded ones by up to {np.abs(a - b).max():.3e}")


def main():
    import tempfile
    import time
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="vkhybrid-", dir=os.environ.get("PITH_TEST_TMP")) as tmp:
        seed = 960
        for preset in PRESETS:
            for dtype in ("F32", "Q8_0"):
                model, tok, n_vocab = R.make_model(tmp, preset, "gguf", dtype, seed)
                R.compare(V.PITH, tmp, f"vulkan {preset} gguf {dtype}", model, tok, n_vocab, "float")
                seed += 1
            R.compare(V.PITH, tmp, f"vulkan {preset} gguf Q8_0 prompt, chunks of 7", model, tok, n_vocab, "float",
                      n_gen=R.N_GEN_PROMPT, prompt=R.PROMPT_TEXT, extra=("--max-batch-tokens", "7"))
            check_replay(tmp, preset, model, n_vocab)
        for preset in MOE_PRESETS:
            model, tok, n_vocab = R.make_model(tmp, preset, "gguf", "F32", seed)
            R.compare(V.PITH, tmp, f"vulkan {preset} gguf F32", model, tok, n_vocab, "float")
            seed += 1
    print(f"{len(R.failures)} failures in {time.time() - t0:.0f} s")
    for f in R.failures:
        print("FAIL:", f)
    return 1 if R.failures else 0


if __name__ == "__main__":
    sys.exit(main())
