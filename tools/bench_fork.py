#!/usr/bin/python3
"""n > 1 from one prefill against n identical prompts, on a ~1k-token prompt.

    tools/bench_fork.py [--model M] [-n 32] [-t 2] [--samples 1,4,16]

For each N: `pith run -f ONE_LINE --samples N` (the N samples fork from one prefill) and `pith run -f`
with N identical lines (each its own request; the prefix cache is all they share), sampled at
temperature 0.8, 32 tokens each; prints computed tokens (prompt + decode, from the stats line), the
engine time and the ratio. Without --model it writes a stories110M-shaped Q8_0 random model (context
2048) with tools/mkmodel.py into --workdir.
"""
import argparse
import os
import random
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(pith, model, path, n, threads, samples, seqs):
    cmd = [pith, "run", "-m", model, "-f", path, "--jsonl", "-n", str(n), "--temp", "0.8", "--seed", "3",
           "-c", "2048", "--max-num-seqs", str(seqs), "-t", str(threads)]
    if samples > 1:
        cmd += ["--samples", str(samples)]
    r = subprocess.run(cmd, capture_output=True, text=True, check=True)
    m = re.search(r"generated in ([\d.]+) s .*?(\d+) tokens computed", r.stderr)
    if not m:
        sys.exit("no stats line: " + r.stderr)
    return float(m.group(1)), int(m.group(2))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model")
    ap.add_argument("--pith", default=os.path.join(ROOT, "build", "pith"))
    ap.add_argument("--workdir", default=tempfile.gettempdir())
    ap.add_argument("-n", type=int, default=32)
    ap.add_argument("-t", type=int, default=2)
    ap.add_argument("--samples", default="1,4,16")
    a = ap.parse_args()
    model = a.model or os.path.join(a.workdir, "bench-fork-st110-q8.gguf")
    if not a.model and not os.path.exists(model):
        subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "tools", "mkmodel.py"), "--preset", "stories110M",
                        "--dtype", "Q8_0", "--ctx", "2048", "--out", model], check=True, stdout=subprocess.DEVNULL)
    rng = random.Random(1)
    line = " ".join(str(rng.randint(0, 999)) for _ in range(330))  # ~1.3k tokens with a llama tokenizer
    one = os.path.join(a.workdir, "bench-fork-1.txt")
    with open(one, "w") as f:
        f.write(line + "\n")
    print(f"model {os.path.basename(model)}, {a.n} tokens per sample at temperature 0.8, {a.t} threads")
    print("| N | forked: computed tokens | time s | N identical lines: computed tokens | time s | time ratio |")
    print("|---:|---:|---:|---:|---:|---:|")
    for n in (int(x) for x in a.samples.split(",")):
        many = os.path.join(a.workdir, f"bench-fork-{n}.txt")
        with open(many, "w") as f:
            f.write((line + "\n") * n)
        tf, cf = run(a.pith, model, one, a.n, a.t, n, max(n, 1))
        tm, cm = run(a.pith, model, many, a.n, a.t, 1, max(n, 1))
        print(f"| {n} | {cf} | {tf:.2f} | {cm} | {tm:.2f} | {tm / tf:.2f}x |")


if __name__ == "__main__":
    main()
