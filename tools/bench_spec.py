#!/usr/bin/python3
"""Speculative decoding (prompt lookup) against plain decoding at batch 1.

    tools/bench_spec.py [--model assets/default.gguf] [-n 128] [-t 2] [--reps 3]

Three prompt sets: "copy" (a passage, then its opening again: the continuation mostly copies it),
"list" (text with a repeated structure), and "fresh" (ordinary story openings: little to look up).
Each prompt runs alone (`pith run -f ONE_LINE --jsonl`, greedy, --ignore-eos, -n tokens) with
--spec-type off and ngram, alternating, best of --reps; checks that both give the same tokens; and
prints tokens/s, the speed-up, the acceptance (accepted / drafted draft tokens) and forward passes per
token from the stats line pith prints on stderr.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

STORY = ("Once upon a time, there was a little girl named Lily. She loved to play outside in the sun. One day, "
         "she saw a big red ball in the park. She ran to the ball and kicked it very hard. The ball flew up "
         "into the sky and landed in a tree. Lily was sad because she could not reach the ball.")
SETS = {
    "copy": [STORY + " " + STORY[:120],
             STORY.replace("Lily", "Tom").replace("She", "He").replace("she", "he") + " Once upon a time, there was a little boy named Tom."],
    "list": ["One cat sat on the mat. Two cats sat on the mat. Three cats sat on the mat. Four cats sat on the mat. Five cats",
             "The dog said hello. The cat said hello. The bird said hello. The fish said hello. The frog said hello. The cow"],
    "fresh": ["Once upon a time, in a small town, there lived a boy who wanted to fly",
              "Sam and Mia went to the beach with their mom. The water was cold and blue"],
}


def run(pith, model, text, n, threads, spec, workdir):
    path = os.path.join(workdir, "prompt.txt")
    with open(path, "w") as f:
        f.write(text + "\n")
    cmd = [pith, "run", "-m", model, "-f", path, "--jsonl", "-n", str(n), "--temp", "0", "--ignore-eos",
           "-t", str(threads), "--spec-type", spec]
    r = subprocess.run(cmd, capture_output=True, text=True, check=True)
    tokens = json.loads(r.stdout.splitlines()[0])["tokens"]
    m = re.search(r"generated in ([\d.]+) s .*?(\d+) steps.*?(\d+) of (\d+) draft tokens accepted", r.stderr)
    if not m:
        sys.exit("no stats line in: " + r.stderr)
    return tokens, len(tokens) / float(m.group(1)), int(m.group(2)), int(m.group(3)), int(m.group(4))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(ROOT, "assets", "default.gguf"))
    ap.add_argument("--pith", default=os.path.join(ROOT, "build", "pith"))
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("-t", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    print(f"model {os.path.basename(a.model)}, batch 1, greedy, {a.n} tokens per prompt, {a.t} threads, best of {a.reps}")
    print("| set | prompt | off tok/s | ngram tok/s | speed-up | accepted/drafted | passes per token |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as wd:
        for name, prompts in SETS.items():
            for i, text in enumerate(prompts):
                best = {"off": 0.0, "ngram": 0.0}
                info = None
                for _ in range(a.reps):
                    for spec in ("off", "ngram"):
                        toks, rate, steps, acc, drafted = run(a.pith, a.model, text, a.n, a.t, spec, wd)
                        if spec == "off":
                            ref = toks
                        elif toks != ref:
                            sys.exit(f"{name} {i}: speculation changed the output")
                        else:
                            info = (steps, acc, drafted)
                        best[spec] = max(best[spec], rate)
                steps, acc, drafted = info
                print(f"| {name} | {i} | {best['off']:.1f} | {best['ngram']:.1f} | {best['ngram'] / best['off']:.2f}x | "
                      f"{acc}/{drafted} | {steps / a.n:.2f} |")


if __name__ == "__main__":
    main()
