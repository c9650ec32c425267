#!/usr/bin/python3
"""Offline engine throughput: C requests at once through `pith run -f PROMPTS --jsonl`.

    tools/bench_engine.py --model /tmp/stories110M-q8.gguf [--concurrency 1,4,16,64] [-n 64] [-t 4]

For each concurrency C it writes C distinct short prompts, runs them in one engine with
--max-num-seqs C, greedy and --ignore-eos so every request generates exactly -n tokens, checks every
JSON line, and reads the generated-token rate from the stats line pith prints on stderr (engine time:
from the first submission to the last token, model loading excluded). Prints a Markdown table with the
rate and its ratio to the single-request rate.

Without --model it writes a stories110M-shaped random model with tools/mkmodel.py (--dtype, default
Q8_0) into --workdir.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

WORDS = ["cat", "dog", "tree", "ball", "girl", "boy", "sun", "park", "bird", "fish", "car", "house"]


def prompts(n):
    # Distinct from the first word on, so the prefix cache does not turn this into a cache benchmark.
    return [f"{WORDS[i % len(WORDS)]} {i} saw a {WORDS[(i * 7 + 3) % len(WORDS)]} and said" for i in range(n)]


def run_one(pith, model, c, n, threads, workdir, extra):
    path = os.path.join(workdir, f"prompts-{c}.txt")
    with open(path, "w") as f:
        f.write("\n".join(prompts(c)) + "\n")
    cmd = [pith, "run", "-m", model, "-f", path, "--jsonl", "-n", str(n), "--temp", "0", "--ignore-eos",
           "--max-num-seqs", str(c)] + (["-t", str(threads)] if threads else []) + extra
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stderr}")
    lines = [json.loads(x) for x in p.stdout.splitlines() if x.strip()]
    if len(lines) != c or any(len(o["tokens"]) != n or o["finish_reason"] != "length" for o in lines):
        sys.exit(f"unexpected output for C={c}:\n{p.stdout[:2000]}")
    m = re.search(r"(\d+) generated in ([0-9.]+) s \(([0-9.]+) tok/s\); (\d+) steps, (\d+) preemptions", p.stderr)
    if not m:
        sys.exit(f"no stats line in:\n{p.stderr}")
    return dict(generated=int(m.group(1)), seconds=float(m.group(2)), rate=float(m.group(3)),
                steps=int(m.group(4)), preemptions=int(m.group(5)))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pith", default=os.path.join(ROOT, "build", "pith"))
    ap.add_argument("--model")
    ap.add_argument("--dtype", default="Q8_0", help="weight type when writing the model (mkmodel.py --dtype)")
    ap.add_argument("--workdir", default=tempfile.gettempdir())
    ap.add_argument("--concurrency", default="1,4,16,64")
    ap.add_argument("-n", type=int, default=64, help="tokens generated per request")
    ap.add_argument("-t", "--threads", type=int, default=0)
    ap.add_argument("extra", nargs="*", help="more pith run options (after --)")
    a = ap.parse_args()

    model = a.model
    if not model:
        model = os.path.join(a.workdir, f"bench-stories110M-{a.dtype}.gguf")
        if not os.path.exists(model):
            subprocess.run([sys.executable, os.path.join(HERE, "mkmodel.py"), "--preset", "stories110M",
                            "--dtype", a.dtype, "--out", model], check=True)
    rows = []
    for c in [int(x) for x in a.concurrency.split(",")]:
        r = run_one(a.pith, model, c, a.n, a.threads, a.workdir, a.extra)
        rows.append((c, r))
        print(f"C={c}: {r['rate']:.1f} tok/s ({r['generated']} tokens, {r['seconds']:.2f} s, {r['steps']} steps)",
              file=sys.stderr)
    base = rows[0][1]["rate"] if rows and rows[0][0] == 1 else None
    print(f"| concurrent requests | generated tokens | seconds | output tok/s | vs 1 request |")
    print(f"|---:|---:|---:|---:|---:|")
    for c, r in rows:
        ratio = f"{r['rate'] / base:.2f}x" if base else "-"
        print(f"| {c} | {r['generated']} | {r['seconds']:.2f} | {r['rate']:.1f} | {ratio} |")


if __name__ == "__main__":
    main()
