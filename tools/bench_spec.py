#!/usr/bin/python3
"""Speculative decoding against plain decoding at batch 1, on three prompt sets, through `pith bench`'s
speculative mode.

    tools/bench_spec.py [--model assets/default.gguf] [--spec-type ngram|draft] [--draft-model M]
                        [-n 64] [-t 2] [--reps 3]

Three prompt sets: "copy" (a passage, then its opening again: the continuation mostly copies it),
"list" (text with a repeated structure), and "fresh" (ordinary story openings: little to look up).
Each set goes to `pith bench --spec-type T -f SET --json` (each prompt alone, greedy, EOS ignored, -n
tokens, plain and speculative alternating --reps times; pith checks that both give the same tokens),
and this prints one row per prompt: decode tokens/s both ways (mean over the repetitions), the speed-up,
the acceptance (accepted / drafted draft tokens), the target's forward passes per generated token, and
the cpu column (CPU time / (wall x threads): below 100 % other work shared the cores).
"""
import argparse
import json
import os
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


def bench(pith, model, spec, draft, path, n, threads, reps):
    cmd = [pith, "bench", "-m", model, "--spec-type", spec, "-f", path, "-n", str(n), "-t", str(threads),
           "-r", str(reps), "--json"]
    if draft:
        cmd += ["--draft-model", draft]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        sys.exit(" ".join(cmd) + ": " + r.stderr.strip().splitlines()[-1])
    return [json.loads(line) for line in r.stdout.splitlines()]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(ROOT, "assets", "default.gguf"))
    ap.add_argument("--pith", default=os.path.join(ROOT, "build", "pith"))
    ap.add_argument("--spec-type", default="ngram", choices=["ngram", "draft"])
    ap.add_argument("--draft-model", help="the draft model (--spec-type draft)")
    ap.add_argument("--sets", default=",".join(SETS), help="comma-separated: " + ", ".join(SETS))
    ap.add_argument("-n", type=int, default=64)
    ap.add_argument("-t", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    if a.spec_type == "draft" and not a.draft_model:
        ap.error("--spec-type draft needs --draft-model")
    draft = a.draft_model if a.spec_type == "draft" else None
    print(f"model {os.path.basename(a.model)}, {a.spec_type}" + (f" {os.path.basename(draft)}" if draft else "") +
          f", batch 1, greedy, {a.n} tokens per prompt, {a.t} threads, mean of {a.reps}")
    print("| set | prompt | plain tok/s | spec tok/s | speed-up | accepted/drafted | passes per token | cpu plain/spec |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as wd:
        for name in a.sets.split(","):
            path = os.path.join(wd, name + ".txt")
            with open(path, "w") as f:
                f.write("\n".join(SETS[name]) + "\n")
            for o in bench(a.pith, a.model, a.spec_type, draft, path, a.n, a.t, a.reps):
                which = o.get("prompt_index", "all")
                print(f"| {name} | {which} | {o['tokens_per_s']:.1f} | {o['spec_tokens_per_s']:.1f} | {o['speedup']:.2f}x | "
                      f"{o['accepted_tokens']}/{o['draft_tokens']} | {o['spec_passes_per_token']:.2f} | "
                      f"{100 * o['cpu_share']:.0f}/{100 * o['spec_cpu_share']:.0f} % |", flush=True)


if __name__ == "__main__":
    main()
