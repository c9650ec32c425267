#!/usr/bin/python3
"""Hot weight reload under load: how long `POST /v1/admin/reload` reads the new weights (serving goes on)
and how long it pauses admission, in each mode, against limits measured in the same run.

    tools/bench_reload.py --model-a A.gguf --model-b B.gguf [-c 4] [-n 64] [-t 2] [--reloads 3]

It starts `pith serve` on A (timing the cold start: launch to /health 200, what a restart would cost at
least), measures one greedy -n token request alone (the longest a drain should wait for one request),
then keeps C streaming greedy requests of -n tokens running and reloads alternately B and A, --reloads
times per mode (drain, recompute). Prints a Markdown table: mode, mean and max load_s and paused_s, and
the ratios paused / request time and paused / cold start. Without --model-a/-b it writes two
stories110M-shaped Q8_0 models (tools/mkmodel.py, seeds 1 and 2) into --workdir.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
KEY = "bench-admin"


def post(base, path, body, key=None, timeout=600):
    h = {"content-type": "application/json"}
    if key:
        h["authorization"] = "Bearer " + key
    req = urllib.request.Request(base + path, json.dumps(body).encode(), h)
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def stream(base, body):
    req = urllib.request.Request(base + "/v1/completions", json.dumps(dict(body, stream=True)).encode(),
                                 {"content-type": "application/json"})
    n = 0
    with urllib.request.urlopen(req, timeout=600) as r:
        for line in r:
            if line.startswith(b"data: {") and b'"error"' not in line[:20]:
                n += 1
    return n


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pith", default=os.path.join(ROOT, "build", "pith"))
    ap.add_argument("--model-a")
    ap.add_argument("--model-b")
    ap.add_argument("--workdir", default=tempfile.gettempdir())
    ap.add_argument("-c", "--concurrency", type=int, default=4)
    ap.add_argument("-n", type=int, default=64, help="tokens per request")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--reloads", type=int, default=3, help="reloads per mode")
    a = ap.parse_args()
    for attr, seed in (("model_a", 1), ("model_b", 2)):
        if not getattr(a, attr):
            path = os.path.join(a.workdir, f"bench-reload-{seed}.gguf")
            if not os.path.exists(path):
                subprocess.run([sys.executable, os.path.join(HERE, "mkmodel.py"), "--preset", "stories110M",
                                "--dtype", "Q8_0", "--seed", str(seed), "--out", path], check=True)
            setattr(a, attr, path)

    t0 = time.time()
    p = subprocess.Popen([a.pith, "serve", "-m", a.model_a, "--port", "0", "-t", str(a.threads), "--quiet",
                          "--max-num-seqs", str(a.concurrency + 1), "--admin-key", KEY, "--weight-version", "a"],
                         stderr=subprocess.PIPE, text=True)
    port = None
    for line in p.stderr:
        m = re.search(r"listening on http://[^\s:]+:(\d+)", line)
        if m:
            port = m.group(1)
            break
    threading.Thread(target=lambda: [None for _ in p.stderr], daemon=True).start()
    base = f"http://127.0.0.1:{port}"
    while True:
        try:
            with urllib.request.urlopen(base + "/health", timeout=5) as r:
                if r.status == 200:
                    break
        except Exception:
            time.sleep(0.01)
    cold = time.time() - t0
    body = {"prompt": "Once upon a time", "max_tokens": a.n, "temperature": 0, "ignore_eos": True}
    post(base, "/v1/completions", body)  # warm-up
    t = time.time()
    post(base, "/v1/completions", body)
    alone = time.time() - t

    stop, done = threading.Event(), [0]

    def worker(i):
        while not stop.is_set():
            stream(base, dict(body, prompt=f"Once upon a time {i} {done[0]}"))
            done[0] += 1

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(a.concurrency)]
    for th in threads:
        th.start()
    time.sleep(alone)
    rows = {}
    for mode in ("drain", "recompute"):
        for k in range(a.reloads):
            path = a.model_b if k % 2 == 0 else a.model_a
            r = post(base, "/v1/admin/reload", {"path": path, "mode": mode, "version": f"{mode}{k}"}, KEY)
            rows.setdefault(mode, []).append((r["load_s"], r["paused_s"], r["restarted"]))
            time.sleep(alone / 2)
    stop.set()
    for th in threads:
        th.join(600)
    p.terminate()
    p.wait(60)

    size = os.path.getsize(a.model_a) / 1e6
    print(f"model {os.path.basename(a.model_a)} ({size:.0f} MB), {a.threads} threads, {a.concurrency} streams of "
          f"{a.n} tokens under load, {done[0]} requests served during the reloads")
    print(f"limits measured in this run: cold start (launch to /health) {cold:.3f} s; one {a.n}-token request "
          f"alone {alone:.3f} s\n")
    print("| mode | reloads | load_s mean (max) | paused_s mean (max) | restarted | paused / one request | paused / cold start |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for mode, rs in rows.items():
        ls, ps = [x[0] for x in rs], [x[1] for x in rs]
        pm = sum(ps) / len(ps)
        print(f"| {mode} | {len(rs)} | {sum(ls) / len(ls):.3f} ({max(ls):.3f}) | {pm:.3f} ({max(ps):.3f}) | "
              f"{sum(x[2] for x in rs)} | {pm / alone:.2f}x | {pm / cold:.3f}x |")


if __name__ == "__main__":
    main()
