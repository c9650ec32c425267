"""The embedded default model: `pith run` with no -m must write what the torch reference wrote.

Expected outputs (tests/data/default_expected*) were computed by tools/train_default.py in float64 torch
from the weights as stored in assets/default.gguf (F16 decoded), and decoded with SentencePiece; Pith
computed none of them. Checked here:
  1. `pith run -n 20 --temp 0` with no -m (the copy installed next to the binary) prints exactly the
     reference's greedy text, and that copy is byte-identical to assets/default.gguf;
  2. the logits of each of those 20 steps (--logits-out) match the reference's;
  3. $PITH_DEFAULT_MODEL and an explicit -m select the same model and give the same text;
  4. prompts (one needing byte fallback) give the reference's logits and greedy text;
  5. `pith tokenize` reproduces SentencePiece's ids on held-out chapters and on edge cases (spaces,
     newlines, non-ASCII and 4-byte UTF-8 through byte fallback, special-token texts as plain text).

Logit tolerance: Pith multiplies the same F16 weights with float32 activations, but keeps K and V in an
F16 cache (relative rounding 2^-11); the reference is float64 throughout. Measured: torch's own float32
forward is within 1.5e-5 of the reference, the same with K and V rounded to F16 within 2.4e-3, Pith within
2.1e-3 (logits of magnitude 7-14). 1e-2 leaves a 5x margin and still catches small mistakes, measured by
running Pith on altered copies of the model: norm epsilon 1e-6 instead of 1e-5 moves logits by 0.018,
1e-4 by 0.17, RoPE theta 5e5 by 16.6, two KV heads swapped by 13.7. Greedy text is compared exactly:
where the reference's top-2 gap exceeds 2 * 1e-2, logits within tolerance cannot pick another token
(smallest gap: 0.096 over the 20 steps from BOS, 0.147 for the prompts; recorded in
docs/default-model.md and default_expected_prompts.json).
"""

import filecmp
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

SKIP = 77
LOGIT_TOL = 1e-2

failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)
        print("FAIL:", msg, file=sys.stderr)


def run_pith(pith, args, env_extra=None, drop_default_env=True):
    env = dict(os.environ)
    if drop_default_env:
        env.pop("PITH_DEFAULT_MODEL", None)
    if env_extra:
        env.update(env_extra)
    r = subprocess.run([pith, "run"] + args, env=env, capture_output=True, timeout=120)
    if r.returncode != 0:
        failures.append(f"pith run {' '.join(args)} exited {r.returncode}: {r.stderr.decode(errors='replace')}")
        print("FAIL:", failures[-1], file=sys.stderr)
        return None
    return r.stdout.decode("utf-8")


def same_text(out, expected):
    # The CLI may end its output with a newline; nothing else may differ.
    return out is not None and (out == expected or out == expected + "\n")


def read_logits(path, n_vocab):
    raw = np.fromfile(path, dtype="<f4")
    if raw.size % n_vocab:
        return None
    return raw.reshape(-1, n_vocab)


def check_logits(got, want, what):
    if got is None:
        check(False, f"{what}: logits file has a size that is not a whole number of rows")
        return
    check(got.shape == want.shape, f"{what}: logits shape {got.shape}, expected {want.shape}")
    if got.shape == want.shape:
        err = float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64))))
        print(f"{what}: max |logit - reference| = {err:.2e} (tolerance {LOGIT_TOL})")
        check(err <= LOGIT_TOL, f"{what}: logits differ from the reference by {err:.3e} > {LOGIT_TOL}")


def main():
    src = os.environ.get("PITH_SOURCE_DIR") or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    pith = os.environ.get("PITH_BIN", "")
    if not pith or not os.access(pith, os.X_OK):
        print(f"SKIP: the pith binary is missing (PITH_BIN={pith!r})")
        return SKIP
    data = os.path.join(src, "tests", "data")
    asset = os.path.join(src, "assets", "default.gguf")
    with open(os.path.join(data, "default_expected.txt"), encoding="utf-8") as f:
        expected = f.read()
    want_logits = np.load(os.path.join(data, "default_expected_logits.npy"))
    n_steps, n_vocab = want_logits.shape
    with open(os.path.join(data, "default_expected_prompts.json"), encoding="utf-8") as f:
        prompt_cases = json.load(f)["cases"]
    check(os.path.getsize(asset) <= 8 * 1024 * 1024, "assets/default.gguf is larger than 8 MB")

    installed = os.path.join(os.path.dirname(os.path.abspath(pith)), "pith-default.gguf")
    check(os.path.exists(installed), f"{installed} is missing: the build must install the default model")
    if os.path.exists(installed):
        check(filecmp.cmp(installed, asset, shallow=False),
              f"{installed} differs from assets/default.gguf (stale copy)")

    tmp = os.environ.get("PITH_TEST_TMP") or tempfile.gettempdir()
    os.makedirs(tmp, exist_ok=True)
    logits_path = os.path.join(tmp, "default_model_logits.f32")

    # 1 + 2: no -m at all.
    if os.path.exists(logits_path):
        os.remove(logits_path)
    out = run_pith(pith, ["-n", str(n_steps), "--temp", "0", "--logits-out", logits_path])
    check(same_text(out, expected), f"no -m: got {out!r}, expected {expected!r}")
    if out is not None:
        check_logits(read_logits(logits_path, n_vocab), want_logits, "no -m")
    out_plain = run_pith(pith, ["-n", str(n_steps), "--temp", "0"])
    check(same_text(out_plain, expected), f"no -m, no --logits-out: got {out_plain!r}")

    # 3: the other two ways to name the model.
    out = run_pith(pith, ["-n", str(n_steps), "--temp", "0"], {"PITH_DEFAULT_MODEL": asset},
                   drop_default_env=False)
    check(same_text(out, expected), f"PITH_DEFAULT_MODEL: got {out!r}")
    out = run_pith(pith, ["-m", asset, "-n", str(n_steps), "--temp", "0"])
    check(same_text(out, expected), f"-m assets/default.gguf: got {out!r}")

    # 4: prompts.
    prompt_logits = np.load(os.path.join(data, "default_expected_prompt_logits.npy"))
    check(len(prompt_logits) == len(prompt_cases), "prompt logits and prompt cases disagree in number")
    for case, want in zip(prompt_cases, prompt_logits):
        if os.path.exists(logits_path):
            os.remove(logits_path)
        out = run_pith(pith, ["-p", case["prompt"], "-n", str(len(want)), "--temp", "0",
                              "--logits-out", logits_path])
        what = f"prompt {case['prompt']!r}"
        if out is None:
            continue
        check_logits(read_logits(logits_path, n_vocab), want, what)
        # Logits within LOGIT_TOL of the reference cannot change the argmax where the reference's top-2
        # gap exceeds 2 * LOGIT_TOL, so the text must then match exactly.
        if case["text"] is not None and case["min_gap"] > 2 * LOGIT_TOL:
            text = case["text"]
            check(same_text(out, text), f"{what}: got {out!r}, expected {text!r}")

    # 5: the tokenizer, against SentencePiece's ids.
    with open(os.path.join(data, "default_tokenizer_cases.json"), encoding="utf-8") as f:
        tok_cases = json.load(f)["cases"]
    for case in tok_cases:
        r = subprocess.run([pith, "tokenize", "-m", asset, "--no-bos", "--no-parse-special"],
                           input=case["text"].encode("utf-8"), capture_output=True, timeout=60)
        got = r.stdout.decode().split() if r.returncode == 0 else None
        check(got is not None and [int(t) for t in got] == case["ids"],
              f"tokenize {case['text'][:40]!r}: got {got if got is None else got[:20]}..., "
              f"expected {case['ids'][:20]}... (exit {r.returncode}: {r.stderr.decode(errors='replace')})")
    print(f"tokenizer: {len(tok_cases)} cases, {sum(len(c['ids']) for c in tok_cases)} ids compared")

    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    print("default model: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
