"""Each K/V cache type (--kv-type f32, f16, bf16, q8_0) on random float models against the float64 torch
reference (tools/reference.py) that rounds the cached keys (after RoPE) and values the same way, and
the accuracy each type costs against the F32 cache, printed for docs/performance.md.

Tolerances (absolute, on logits with a standard deviation of about 1; test_reference_models.py sets
f16's): the engine computes K and V in float32 and the reference in float64, so an element that lies
within float32 error of a rounding boundary of the cache type rounds the other way on one side: one
step of that type. A step is 2^-11 relative for F16, 2^-8 for BF16 and max|block| / 127 for Q8_0 (about
2^-7 of the block's largest element); F16's 1e-3 measured bound scales by 8 for BF16 and by 16 for
Q8_0. Against the exact (unrounded) reference the cache rounding itself moves the logits: bounded here
at about 10x the largest distance measured on these models (1.3e-3 F16, 9.6e-3 BF16, 3.7e-2 Q8_0), so
a cache that rounds worse than its type fails. The distance to the F32 cache's own run (max |logit
difference| and the KL divergence of the next-token distributions) is printed, not asserted."""
import os
import subprocess
import sys

from pithtest import pith_bin, skip, tmp_dir

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(HERE, "..", "tools"))
try:
    import numpy as np
    import torch  # noqa: F401  (reference.py needs it)
    import mkmodel  # noqa: E402
    import reference  # noqa: E402
except ImportError as e:  # numpy or torch missing
    skip("cannot import the reference tools (the float64 reference needs numpy and torch): %s" % e)

N_GEN = 48
PRESETS = ["test-llama-gqa", "test-qwen3", "test-mistral-swa", "test-lfm2", "test-qwen35"]  # hybrids: their attention layers
# kind: (max |error| vs the reference rounding likewise, max |error| vs the exact reference)
TOLERANCES = {"f32": (1e-4, 1e-4), "f16": (1e-3, 1.5e-2), "bf16": (8e-3, 1e-1), "q8_0": (1.6e-2, 4e-1)}

failures = []


def run(model, kv, out):
    cmd = [pith_bin(), "run", "-m", model, "-p", "", "-n", str(N_GEN), "--temp", "0", "--ignore-eos", "-t", "2",
           "--kv-type", kv, "--logits-out", out]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
    if r.returncode != 0:
        failures.append(f"{model} --kv-type {kv}: exit {r.returncode}: {r.stderr.decode(errors='replace')[-300:]}")
        return None
    return np.fromfile(out, dtype="<f4").astype(np.float64)


def log_softmax(x):
    m = x.max(axis=1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=1, keepdims=True))


def check():
    tmp = tmp_dir()
    out = os.path.join(tmp, "kv-logits.bin")
    seed = 700
    for preset in PRESETS:
        cfg = mkmodel.build_config(preset)
        model = os.path.join(tmp, f"kvtypes-{preset}.gguf")
        mkmodel.write_gguf(cfg, model, "F32", seed=seed)
        seed += 1
        m = reference.Model(model)
        base = None
        for kv in ("f32", "f16", "bf16", "q8_0"):
            got = run(model, kv, out)
            if got is None:
                continue
            got = got.reshape(N_GEN, cfg.vocab)
            # The reference follows this run's own greedy tokens.
            tokens = [mkmodel.BOS_ID] + [int(t) for t in got.argmax(axis=1)[:-1]]
            exact = reference.forward(m, tokens).numpy()
            ref = exact if kv == "f32" else reference.forward(m, tokens, kv_f16=kv).numpy()
            tol, tol_exact = TOLERANCES[kv]
            name = f"{preset} kv {kv}"
            err, err_exact = np.abs(got - ref).max(), np.abs(got - exact).max()
            if err > tol:
                failures.append(f"{name}: max |logit error| {err:.2e} vs the reference rounding likewise > {tol}")
            if err_exact > tol_exact:
                failures.append(f"{name}: max |logit error| {err_exact:.2e} vs the exact reference > {tol_exact}")
            if base is None:
                base = got
            # Against the F32 cache's run: the rows both runs computed from the same tokens (all of them,
            # unless a near tie flipped a greedy choice).
            flip = np.nonzero(got.argmax(axis=1) != base.argmax(axis=1))[0]
            n = N_GEN if len(flip) == 0 else int(flip[0]) + 1
            lb, lg = log_softmax(base[:n]), log_softmax(got[:n])
            kl = (np.exp(lb) * (lb - lg)).sum(axis=1)
            print(f"{name:24s} vs ref {err:.1e} (tol {tol:g})  vs exact {err_exact:.1e} (tol {tol_exact:g})  "
                  f"vs the f32 cache over {n} rows: max {np.abs(got[:n] - base[:n]).max():.1e}, "
                  f"mean KL {kl.mean():.1e}, max KL {kl.max():.1e}", flush=True)
    if failures:
        for f in failures:
            print("FAIL:", f)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(check())
