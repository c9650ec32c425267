"""The Vulkan backend's mixture-of-experts layers on whole models: the random-weight MoE models of
tests/test_reference_models.py (tools/mkmodel.py writes them), run by `pith run --device vulkan`, against
the float64 references of tools/reference.py (test_vulkan_models.py's machinery and reasons).

Tolerance: "float" (1e-4 on logits of standard deviation ~1) for every weight type, Q8_0, MXFP4 and IQ4
included: the shaders multiply float32 activations by the weights decoded exactly, so no 8-bit rounding
upstream can flip a router's choice as it can on the CPU (whose quantized MoE cases get moe-q32's 1.0):
only float32 arithmetic in another order separates the device from the reference.

Cases: Qwen3-MoE (softmax, norm_topk) and Mixtral in GGUF F32, Q8_0 and MXFP4 (stacked 3-D experts; Qwen3-MoE
also IQ4_NL and IQ4_XS) and
safetensors F32 (one tensor per expert, Hugging Face names); test-qwen3moe-st (norm_topk_prob false);
GPT-OSS (clamped SwiGLU with expert biases, sinks, windows) in GGUF F32 and MXFP4 and safetensors F32
(the fused gate_up experts the loader rearranges), over 72 tokens; GLM-4.5 (sigmoid routing, selection
bias, expert groups, shared expert, routed scale) in GGUF F32 and Q8_0 against test_ref_glm4moe.py's
reference; the prompt (many tokens on each
expert) prefilled in chunks of 7 and in one for Qwen3-MoE and GPT-OSS F32; then the replayed decode steps
(PITH_VK_REPLAY=1, the default) give the logits of steps recorded every time (PITH_VK_REPLAY=0) bit for
bit. Skips (77) as test_vulkan_models.py does."""

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

CASES = [  # preset, format, type, tokens generated, prompt cases
    ("test-qwen3moe", "gguf", "F32", R.N_GEN, True),
    ("test-qwen3moe", "gguf", "Q8_0", R.N_GEN, False),
    ("test-qwen3moe", "gguf", "MXFP4", R.N_GEN, False),
    ("test-qwen3moe", "gguf", "IQ4_NL", R.N_GEN, False),
    ("test-qwen3moe", "gguf", "IQ4_XS", R.N_GEN, False),
    ("test-qwen3moe", "safetensors", "F32", R.N_GEN, False),
    ("test-qwen3moe-st", "safetensors", "F32", R.N_GEN, False),
    ("test-mixtral", "gguf", "F32", R.N_GEN, False),
    ("test-mixtral", "gguf", "Q8_0", R.N_GEN, False),
    ("test-mixtral", "safetensors", "F32", R.N_GEN, False),
    ("test-gpt-oss", "gguf", "F32", R.N_GEN_LONG, True),
    ("test-gpt-oss", "gguf", "MXFP4", R.N_GEN_LONG, False),
    ("test-gpt-oss", "safetensors", "F32", R.N_GEN, False),
]


def run_logits(tmp, model, tok, n_vocab, n_gen, env):
    out = os.path.join(tmp, "vk-logits.bin")
    if os.path.exists(out):
        os.remove(out)
    cmd = [PITH, "run", "-m", model, "-p", "", "-n", str(n_gen), "--temp", "0", "--ignore-eos", "--logits-out", out]
    if tok:
        cmd += ["--tokenizer", tok]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300, env={**os.environ, **env})
    if r.returncode != 0:
        R.fail(f"{model}: pith run failed: {r.stderr.decode(errors='replace').strip()[-300:]}")
        return None
    return np.frombuffer(open(out, "rb").read(), dtype="<f4").reshape(n_gen, n_vocab)


def check_glm(tmp, seed):
    """GLM-4.5 (sigmoid routing with a selection bias, expert groups in test-glm4moe-qk, a shared expert,
    the routed scale) against tests/test_ref_glm4moe.py's float64 forward written from transformers."""
    import test_ref_glm4moe as GL
    for preset, dtype in (("test-glm4moe", "F32"), ("test-glm4moe-qk", "F32"), ("test-glm4moe-qk", "Q8_0")):
        cfg = R.mkmodel.build_config(preset)
        model, tok, n_vocab = R.make_model(tmp, preset, "gguf", dtype, seed)
        weights = GL.glm_weights(cfg, path=model)

        def ref(toks, kv_f16, cfg=cfg, weights=weights):
            return GL.glm_by_hand(cfg, weights, toks, kv_f16=kv_f16)
        R.compare(PITH, tmp, f"vulkan {preset} gguf {dtype}", model, tok, n_vocab, "float", ref_fn=ref)
        seed += 1


def check_replay(tmp):
    model, tok, n_vocab = R.make_model(tmp, "test-qwen3moe", "gguf", "Q8_0", 760)
    a = run_logits(tmp, model, tok, n_vocab, 24, {"PITH_VK_REPLAY": "1"})
    b = run_logits(tmp, model, tok, n_vocab, 24, {"PITH_VK_REPLAY": "0"})
    if a is not None and b is not None:
        same = np.array_equal(a, b)
        print(f"replay (test-qwen3moe Q8_0): 24 decode steps replayed vs recorded every step: "
              f"{'identical' if same else 'DIFFERENT'}")
        if not same:
            R.fail(f"replayed MoE steps differ from recorded ones by up to {np.abs(a - b).max():.3e}")


def main():
    import tempfile
    import time
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="vkmoe-", dir=os.environ.get("PITH_TEST_TMP")) as tmp:
        seed = 740
        for preset, fmt, dtype, n_gen, prompts in CASES:
            model, tok, n_vocab = R.make_model(tmp, preset, fmt, dtype, seed)
            R.compare(PITH, tmp, f"vulkan {preset} {fmt} {dtype}", model, tok, n_vocab, "float", n_gen=n_gen)
            if prompts:
                for chunk in ("7", "2048"):
                    R.compare(PITH, tmp, f"vulkan {preset} prompt, chunks of {chunk}", model, tok, n_vocab, "float",
                              n_gen=R.N_GEN_PROMPT, prompt=R.PROMPT_TEXT, extra=("--max-batch-tokens", chunk))
            seed += 1
        check_glm(tmp, seed)
        check_replay(tmp)
    print(f"{len(R.failures)} failures in {time.time() - t0:.0f} s")
    for f in R.failures:
        print("FAIL:", f)
    return 1 if R.failures else 0


if __name__ == "__main__":
    sys.exit(main())
