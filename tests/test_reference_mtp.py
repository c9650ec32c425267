"""Qwen3.5's multi-token-prediction head (src/model/qwen35_mtp.c) against an independent float64 torch
reference (tools/reference.py: qwen35_mtp_logits, transcribed from vLLM's qwen3_next_mtp.py and its
EAGLE-style proposer, which number the head's positions from 0 where Pith stores them one later).

Random-weight test-qwen35 models with an MTP layer (tools/mkmodel.py --mtp 1), GGUF and Hugging Face
safetensors, F32 weights: tests/tool_mtp_logits prefills several sequences together through the model
API (K/V in F32), in chunks of 7 tokens (the head's last hidden state carried across batches and the
head's K/V across chunks) and in one chunk, then drafts 6 tokens for all of them in one mtp_draft call.
Every row (the decoder's last logits row and each draft step's) must match the reference within 1e-4
(the float tolerance of test_reference_models.py: float32 against float64 arithmetic; measured about
1e-5 here), and each draft token must be its row's argmax (the tool checks that). A prompt of 70 tokens
is longer than two of the DeltaNet's 64-token chunks.

Where a Vulkan device can run pith (lavapipe in CI), the GGUF model's cases run again on the device
(PITH_DEVICE=vulkan: src/backend/vulkan/vk_mtp.c), held to the same tolerance as every F32 case there.

The test checks its own power: the hidden-state input, the embedding input and the head's attention over
earlier positions each move the reference's draft logits by far more than the tolerance.

Environment: PITH_MTP_LOGITS (the tool), PITH_TEST_TMP. Exit 77 (skip) without torch and numpy."""

import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
except ImportError as e:
    print(f"skip: {e.name} is not importable (the float64 reference needs numpy and torch)")
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(HERE, "..", "tools"))
import mkmodel  # noqa: E402
import reference  # noqa: E402

TOL = 1e-4
STEPS = 6


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def sequences(vocab):
    rng = np.random.default_rng(5)
    lens = [70, 9, 33]
    return [[1] + [int(t) for t in rng.integers(3, vocab, size=n - 1)] for n in lens]


def run_tool(tool, model, chunk, seqs, out, device=None):
    args = [tool, model, str(STEPS), str(chunk), out] + [",".join(map(str, s)) for s in seqs]
    env = dict(os.environ, PITH_DEVICE=device) if device else None
    r = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=600, env=env)
    if r.returncode:
        fail(f"{' '.join(args[:5])}: {r.stderr.decode(errors='replace')}")
    return np.fromfile(out, dtype=np.float32)


def check_power(m, toks):
    """The head's inputs and attention must matter, or matching the reference would prove little."""
    base = reference.qwen35_mtp_logits(m, toks, 2).numpy()
    names = dict(m.mtp_names)
    for what, name, change in (("the hidden-state input", "mtp.pre_fc_norm_hidden.weight", "zero"),
                               ("the embedding input", "mtp.pre_fc_norm_embedding.weight", "zero"),
                               ("the head's attention", "mtp.layers.0.self_attn.o_proj.weight", "zero")):
        canon = names.get(name, name)
        orig = m._fetch

        def fetch(c, orig=orig, canon=canon):
            t = orig(c)
            if c != canon:
                return t
            t = np.zeros_like(np.asarray(t, dtype=np.float64))
            # a norm weight w means (1 + w) in safetensors and w itself in GGUF: zero the factor
            return t - m.norm_offset if "norm" in name else t
        m._fetch = fetch
        moved = np.abs(reference.qwen35_mtp_logits(m, toks, 2).numpy() - base).max()
        m._fetch = orig
        print(f"  {what}: moves the reference's draft logits by up to {moved:.2f}")
        if moved < 100 * TOL:
            fail(f"{what} moves the draft logits by only {moved:.2e}")


def vulkan_device():
    """The first Vulkan device that can run pith, or None (the device cases then say so)."""
    pith = os.environ.get("PITH_BIN")
    if not pith or not os.path.exists(pith):
        return None
    r = subprocess.run([pith, "devices"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
    for line in r.stdout.decode(errors="replace").splitlines():
        if line.startswith("vulkan:") and "cannot run" not in line:
            return ":".join(line.split(":")[:2])
    return None


def main():
    tool = os.environ.get("PITH_MTP_LOGITS")
    if not tool or not os.path.exists(tool):
        print("skip: PITH_MTP_LOGITS is not set (run through ctest)")
        return 77
    tmp = tempfile.mkdtemp(prefix="mtp-", dir=os.environ.get("PITH_TEST_TMP"))
    worst = 0.0
    device = vulkan_device()
    print(f"Vulkan: {device or 'no device can run pith here: the CPU cases only'}")
    for fmt in ("gguf", "safetensors"):
        path = os.path.join(tmp, "q35-mtp.gguf" if fmt == "gguf" else "q35-mtp-st")
        cfg = mkmodel.build_config("test-qwen35", mtp=1)
        if fmt == "gguf":
            mkmodel.write_gguf(cfg, path, "F32", seed=3)
        else:
            mkmodel.write_safetensors(cfg, path, "F32", seed=3)
        m = reference.Model(path)
        seqs = sequences(m.n_vocab)
        want = []
        for s in seqs:
            target = reference.forward(m, s[:-1])[-1].numpy()
            want.append(np.concatenate([target[None], reference.qwen35_mtp_logits(m, s, STEPS).numpy()]))
        devices = [None] + ([device] if fmt == "gguf" and device else [])
        for dev, chunk in [(d, c) for d in devices for c in (7, 1000)]:
            got = run_tool(tool, path, chunk, seqs, os.path.join(tmp, "out.bin"), dev)
            got = got.reshape(len(seqs), STEPS + 1, -1)
            where = f"{fmt}{' on ' + dev if dev else ''}"
            for i, s in enumerate(seqs):
                err = np.abs(got[i] - want[i]).max(axis=1)
                worst = max(worst, float(err.max()))
                print(f"{where}, chunks of {chunk}, sequence of {len(s)} tokens: max |error| target {err[0]:.1e}, "
                      f"drafts {' '.join(f'{e:.1e}' for e in err[1:])}")
                if err.max() > TOL:
                    fail(f"{where} chunk {chunk} sequence {i}: logits off by {err.max():.2e} (tolerance {TOL})")
        if fmt == "gguf":
            check_power(m, seqs[0])
    print(f"MTP head against the float64 reference: max |error| {worst:.2e} (tolerance {TOL})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
