"""Partial offload (src/backend/split/split.c): one model across the CPU and the Vulkan device, run by
`pith run --device vulkan -ngl N` (and --cpu-moe), against the float64 torch references of
tests/test_reference_models.py and against the CPU alone and the device alone.

Cases (random-weight models of tools/mkmodel.py, F32, F32 cache unless said):
  - Llama (GQA), Qwen3 (QK norm) and Gemma 3 (two KV groups, local and global layers, split across the
    sides) with -ngl at a middle layer: the float tolerance (1e-4) against the reference, the
    same greedy tokens as the CPU alone and the device alone, their logits within it too; Gemma 3's
    prompt prefilled in chunks of 7 as well; OLMo 2, Phi-3 and Mistral 3 against the CPU alone;
  - the device's steps replayed (PITH_VK_REPLAY=1) give the bits of steps recorded every time (0);
  - many prompts at once, in a pool that forces preemption, with prefix-cache hits: the text of the CPU
    alone, and the run reports preemptions;
  - Qwen3-MoE with --cpu-moe (attention on the device, experts on the CPU; every device step goes to
    the CPU and back), with and without -ngl, against the reference, and batched as above;
  - the hybrids, whose recurrent state is split by layer (each side's slots hold its layers' share):
    LFM2, Qwen3.5, Granite 4.0-H and Nemotron-H with -ngl at a middle layer against the reference, in
    one chunk and in chunks of 7, and against the CPU alone and the device alone; Qwen3.5-MoE with
    -ngl and --cpu-moe against the reference; Gemma 4 (two attention shapes), Gemma 4 E (per-layer
    inputs; KV-shared layers on the device attending over K and V the CPU holds), Gemma 4's MoE kind
    (with -ngl, and with --cpu-moe) and GLM-4.5 against the CPU alone;
  - the hybrids batched as above with speculative decoding from a draft model (a random Qwen3: drafts
    proposed and rejected, so each side rolls its share of the state back to a checkpoint): the text of
    the CPU alone;
  - -ngl auto reports what it placed (every layer with the device's memory, a part of them under
    PITH_VK_MEMORY, and then runs within the tolerance);
  - refusals with the reason: -ngl -3, -ngl abc, -ngl without a device, and a Qwen3.5 MTP head
    (--spec-type mtp) split at load; the same head on the whole device gives the CPU's greedy text.
The memory split itself (the device holds only its layers' KV and state): tests/test_backend_split.c.

Skips (77) when the build has no Vulkan backend or no device can run it, or without torch and numpy."""

import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, HERE)

import test_vulkan_models as V  # noqa: E402  (exits 77 without a device, torch or numpy; sets PITH_DEVICE)

R, np, PITH = V.R, V.np, V.PITH
TOL = R.TOLERANCES["float"][0]
PROMPTS = ["Once upon a time, in a quiet village by the sea",
           "Once upon a time, in a quiet village by the sea, a small girl",
           "The cat sat on the mat and looked at the dog",
           "A dog ran to the park with a red ball in its mouth",
           "Once upon a time there was",
           "The sun rose over the hills and the birds began to sing"]


def logits(tmp, model, tok, n_vocab, n_gen, device, extra=(), env=None):
    return V.run_logits(tmp, model, tok, n_vocab, n_gen, env={"PITH_DEVICE": device, **(env or {})},
                        extra=("--kv-f32", *extra))


def check_model(tmp, preset, seed, ngl, chunked=False, n_gen=R.N_GEN):
    model, tok, n_vocab = R.make_model(tmp, preset, "gguf", "F32", seed)
    extra = ("-ngl", str(ngl))
    R.compare(PITH, tmp, f"{preset} -ngl {ngl}", model, tok, n_vocab, "float", n_gen=n_gen, extra=extra)
    if chunked:
        R.compare(PITH, tmp, f"{preset} -ngl {ngl}, prompt in chunks of 7", model, tok, n_vocab, "float",
                  n_gen=R.N_GEN_PROMPT, prompt=R.PROMPT_TEXT, extra=("--max-batch-tokens", "7", *extra))
    split = logits(tmp, model, tok, n_vocab, n_gen, V.DEVICE, extra)
    for other, dev in (("the CPU alone", "cpu"), ("the device alone", V.DEVICE)):
        ref = logits(tmp, model, tok, n_vocab, n_gen, dev)
        if split is None or ref is None:
            continue
        same = np.array_equal(split.argmax(axis=1), ref.argmax(axis=1))
        err = float(np.abs(split - ref).max())
        print(f"{preset} -ngl {ngl} vs {other}: greedy tokens {'equal' if same else 'DIFFERENT'}, max |diff| {err:.2e}")
        if not same or err > 2 * TOL:
            R.fail(f"{preset} -ngl {ngl} vs {other}: tokens equal {same}, max |diff| {err:.3e} > {2 * TOL}")


def check_against_cpu(tmp, preset, seed, ngl, extra=()):
    """Architectures whose reference is their own test's: the split against the CPU alone."""
    model, tok, n_vocab = R.make_model(tmp, preset, "gguf", "F32", seed)
    args = ("-ngl", str(ngl), *extra)
    split = logits(tmp, model, tok, n_vocab, 12, V.DEVICE, args)
    cpu = logits(tmp, model, tok, n_vocab, 12, "cpu")
    if split is None or cpu is None:
        return
    err = float(np.abs(split - cpu).max())
    same = np.array_equal(split.argmax(axis=1), cpu.argmax(axis=1))
    name = f"{preset} {' '.join(args)}"
    print(f"{name} vs the CPU alone: greedy tokens {'equal' if same else 'DIFFERENT'}, max |diff| {err:.2e}")
    if not same or err > 2 * TOL:
        R.fail(f"{name} vs the CPU alone: tokens equal {same}, max |diff| {err:.3e}")


def check_replay(tmp):
    model, tok, n_vocab = R.make_model(tmp, "test-qwen3", "gguf", "F32", 811)
    a = logits(tmp, model, tok, n_vocab, 24, V.DEVICE, ("-ngl", "1"), env={"PITH_VK_REPLAY": "1"})
    b = logits(tmp, model, tok, n_vocab, 24, V.DEVICE, ("-ngl", "1"), env={"PITH_VK_REPLAY": "0"})
    if a is not None and b is not None:
        same = np.array_equal(a, b)
        print(f"-ngl 1: 24 steps replayed vs recorded every step: {'identical' if same else 'DIFFERENT'}")
        if not same:
            R.fail(f"-ngl 1: replayed steps differ from recorded ones by up to {np.abs(a - b).max():.3e}")


def run_batch(tmp, model, device, extra):
    path = os.path.join(tmp, "prompts.txt")
    with open(path, "w") as f:
        f.write("\n".join(PROMPTS) + "\n")
    cmd = [PITH, "run", "-m", model, "-f", path, "-n", "16", "--temp", "0", "--ignore-eos", *extra]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300,
                       env={**os.environ, "PITH_DEVICE": device})
    if r.returncode != 0:
        R.fail(f"{' '.join(cmd[3:])}: exit {r.returncode}: {r.stderr.decode(errors='replace')[-300:]}")
        return None, ""
    return r.stdout, r.stderr.decode(errors="replace")


def check_batch(tmp, preset, seed, split_extra, draft=False):
    model, _, _ = R.make_model(tmp, preset, "gguf", "F32", seed)
    pool = ("--kv-blocks", "24", "--block-size", "4", "--max-batch-tokens", "7")
    if draft:  # a random Qwen3 of the same vocabulary: it proposes, the target mostly rejects
        pool += ("-md", R.make_model(tmp, "test-qwen3", "gguf", "F32", seed + 100)[0])
    cpu, _ = run_batch(tmp, model, "cpu", pool)
    split, log = run_batch(tmp, model, V.DEVICE, (*pool, *split_extra))
    m = re.search(r"(\d+) preemptions, prefix cache (\d+) of", log)
    d = re.search(r"(\d+) of (\d+) draft tokens accepted", log)
    print(f"{preset} {' '.join(split_extra)}{' with a draft model' if draft else ''}, 6 prompts at once: text "
          f"{'equal' if cpu == split else 'DIFFERENT'} to the CPU alone's; {m.group(0) if m else 'no engine line'}"
          f"{'; ' + d.group(0) if draft and d else ''}")
    if cpu is None or split is None:
        return
    if cpu != split:
        R.fail(f"{preset} {' '.join(split_extra)}: batched text differs from the CPU alone's")
    if not m or int(m.group(1)) == 0 or (not draft and int(m.group(2)) == 0):
        R.fail(f"{preset}: expected preemptions and prefix-cache hits: {log[-300:]}")
    if draft and (not d or int(d.group(2)) == 0 or int(d.group(1)) == int(d.group(2))):
        R.fail(f"{preset}: expected drafts, some of them rejected: {log[-300:]}")


def check_hybrids(tmp):
    for i, (preset, ngl) in enumerate((("test-lfm2", 3), ("test-qwen35", 3), ("test-granitehybrid", 3),
                                       ("test-nemotronh", 3))):
        check_model(tmp, preset, 820 + i, ngl, chunked=True)
    model, tok, n_vocab = R.make_model(tmp, "test-qwen35moe", "gguf", "F32", 825)
    R.compare(PITH, tmp, "test-qwen35moe -ngl 2 --cpu-moe", model, tok, n_vocab, "float",
              extra=("-ngl", "2", "--cpu-moe"))
    for i, (preset, ngl) in enumerate((("test-gemma4", 3), ("test-gemma4-e", 2), ("test-glm4moe", 1),
                                       ("test-gemma4-moe", 2))):
        check_against_cpu(tmp, preset, 826 + i, ngl)
    check_against_cpu(tmp, "test-gemma4-moe", 829, 3, ("--cpu-moe",))


def check_moe(tmp):
    model, tok, n_vocab = R.make_model(tmp, "test-qwen3moe", "gguf", "F32", 812)
    for extra in (("--cpu-moe",), ("-ngl", "1", "--cpu-moe")):
        R.compare(PITH, tmp, f"test-qwen3moe {' '.join(extra)}", model, tok, n_vocab, "float", extra=extra)


def refused(model, extra, want, device=None):
    cmd = [PITH, "run", "-m", model, "-p", "", "-n", "2", "--temp", "0", *extra]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120,
                       env={**os.environ, "PITH_DEVICE": device or V.DEVICE})
    msg = r.stderr.decode(errors="replace").strip()
    print(f"{' '.join(extra)} ({device or V.DEVICE}): exit {r.returncode}: {msg.splitlines()[-1] if msg else ''}")
    if r.returncode == 0 or r.returncode >= 128 or want not in msg:
        R.fail(f"{' '.join(extra)}: expected a refusal naming {want!r}, got exit {r.returncode}: {msg[-300:]}")


def check_refusals(tmp):
    model, _, _ = R.make_model(tmp, "test-llama-gqa", "gguf", "F32", 813)
    refused(model, ("-ngl", "-3"), "expected a number of layers")
    refused(model, ("-ngl", "abc"), "expected a number of layers")
    refused(model, ("-ngl", "1"), "--device vulkan", device="cpu")
    mtp = os.path.join(tmp, "qwen35-mtp.gguf")
    R.mkmodel.write_gguf(R.mkmodel.build_config("test-qwen35", mtp=1), mtp, "F32", seed=814)
    refused(mtp, ("-ngl", "2", "--spec-type", "mtp"), "does not run MTP heads")
    # whole on the device, the head drafts there (vk_mtp.c): the CPU's greedy text without speculation
    texts = []
    for device, extra in (("cpu", ()), (V.DEVICE, ("-ngl", "99", "--spec-type", "mtp"))):
        cmd = [PITH, "run", "-m", mtp, "-p", "", "-n", "24", "--temp", "0", *extra]
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300,
                           env={**os.environ, "PITH_DEVICE": device})
        if r.returncode:
            R.fail(f"{' '.join(cmd)} on {device}: exit {r.returncode}: {r.stderr.decode(errors='replace')[-300:]}")
        texts.append(r.stdout)
    print(f"Qwen3.5 with its MTP head drafting on {V.DEVICE}: {'the CPU' if texts[0] == texts[1] else 'NOT the CPU'}'s "
          "text without speculation")
    if texts[0] != texts[1]:
        R.fail("the MTP head's drafts on the device changed the greedy text")


def check_auto(tmp):
    model, tok, n_vocab = R.make_model(tmp, "test-gemma3", "gguf", "F32", 815)
    for cap, want in ((None, r"-ngl auto: 7 of 7 layers"), ("32M", r"-ngl auto: [1-6] of 7 layers")):
        env = {**os.environ, **({"PITH_VK_MEMORY": cap} if cap else {})}
        out = os.path.join(tmp, "auto.bin")
        cmd = [PITH, "run", "-m", model, "-p", "", "-n", "8", "--temp", "0", "--ignore-eos", "--kv-f32",
               "--logits-out", out, "-ngl", "auto", "-c", "256"]
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120, env=env)
        msg = r.stderr.decode(errors="replace")
        line = next((ln for ln in msg.splitlines() if "offload" in ln), "")
        print(f"PITH_VK_MEMORY={cap or '(none)'}: {line}")
        if r.returncode != 0 or not re.search(want, line):
            R.fail(f"-ngl auto (PITH_VK_MEMORY={cap}): exit {r.returncode}, expected /{want}/: {msg[-300:]}")
            continue
        got = np.frombuffer(open(out, "rb").read(), dtype="<f4").reshape(8, n_vocab)
        cpu = logits(tmp, model, tok, n_vocab, 8, "cpu")
        if cpu is not None and float(np.abs(got - cpu).max()) > 2 * TOL:
            R.fail(f"-ngl auto (PITH_VK_MEMORY={cap}): {np.abs(got - cpu).max():.3e} from the CPU alone")


def main():
    import tempfile
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="vksplit-", dir=os.environ.get("PITH_TEST_TMP")) as tmp:
        check_model(tmp, "test-llama-gqa", 801, 1)
        check_model(tmp, "test-qwen3", 802, 1)
        check_model(tmp, "test-gemma3", 803, 3, chunked=True)
        for i, (preset, ngl) in enumerate((("test-olmo2", 2), ("test-phi3", 1), ("test-mistral3", 1))):
            check_against_cpu(tmp, preset, 804 + i, ngl)
        check_replay(tmp)
        check_batch(tmp, "test-qwen3", 809, ("-ngl", "1"))
        check_batch(tmp, "test-qwen3moe", 810, ("-ngl", "1", "--cpu-moe"))
        check_hybrids(tmp)
        check_batch(tmp, "test-qwen35", 830, ("-ngl", "3"), draft=True)
        check_batch(tmp, "test-granitehybrid", 831, ("-ngl", "3"), draft=True)
        check_moe(tmp)
        check_auto(tmp)
        check_refusals(tmp)
    print(f"{len(R.failures)} failures in {time.time() - t0:.0f} s")
    for f in R.failures:
        print("FAIL:", f)
    return 1 if R.failures else 0


if __name__ == "__main__":
    sys.exit(main())
