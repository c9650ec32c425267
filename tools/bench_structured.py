#!/usr/bin/env python3
"""Generation throughput with a JSON Schema against without, in the same run: starts `pith serve` on
MODEL (default: the default model), then alternates a constrained request (guided_json: five strings of
20 characters) and an unconstrained one of the same length (ignore_eos), ROUNDS times at temperature 0
and at 1, one request at a time, and prints tok/s of each and their ratio (issue 15: >= 0.9).

    python3 tools/bench_structured.py [--pith build/pith] [-m MODEL] [-t THREADS] [--rounds 24]
"""
import argparse
import json
import re
import subprocess
import threading
import time
import urllib.request


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pith", default="build/pith")
    ap.add_argument("-m", "--model")
    ap.add_argument("-t", "--threads", default="1")
    ap.add_argument("--rounds", type=int, default=24)
    a = ap.parse_args()
    cmd = [a.pith, "serve", "--port", "0", "-t", a.threads] + (["-m", a.model] if a.model else [])
    p = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    log, ready = [], threading.Event()

    def reader():
        for line in p.stderr:
            log.append(line)
            if "listening on" in line:
                ready.set()
        ready.set()

    threading.Thread(target=reader, daemon=True).start()
    ready.wait(120)
    m = re.search(r"listening on http://[^\s:]+:(\d+)", "".join(log))
    if not m:
        p.kill()
        raise SystemExit("server did not start: " + "".join(log))
    base = "http://127.0.0.1:%s" % m.group(1)
    for _ in range(600):
        try:
            with urllib.request.urlopen(base + "/health", timeout=5) as r:
                if r.status == 200:
                    break
        except OSError:
            time.sleep(0.1)

    def post(body):
        req = urllib.request.Request(base + "/v1/completions", data=json.dumps(body).encode(),
                                     headers={"content-type": "application/json"})
        t = time.time()
        with urllib.request.urlopen(req, timeout=600) as r:
            out = json.loads(r.read())
        return out["usage"]["completion_tokens"], time.time() - t

    schema = {"type": "array", "items": {"type": "string", "minLength": 20, "maxLength": 20},
              "minItems": 5, "maxItems": 5}
    try:
        print("model %s, %s thread(s), %d rounds; schema: %s" % (a.model or "default", a.threads, a.rounds,
                                                               json.dumps(schema)))
        for temp in (0.0, 1.0):
            tot = {"schema": [0, 0.0], "plain": [0, 0.0]}
            for r in range(a.rounds):
                n, dt = post({"prompt": "And God said", "max_tokens": 200, "temperature": temp, "seed": r,
                              "guided_json": schema})
                tot["schema"][0] += n
                tot["schema"][1] += dt
                n2, dt2 = post({"prompt": "And God said", "max_tokens": n, "temperature": temp, "seed": r,
                                "ignore_eos": True})
                tot["plain"][0] += n2
                tot["plain"][1] += dt2
            s = tot["schema"][0] / tot["schema"][1]
            u = tot["plain"][0] / tot["plain"][1]
            print("temperature %g: with the schema %.0f tok/s (%d tokens), without %.0f tok/s (%d tokens), "
                  "ratio %.2f (target >= 0.9)" % (temp, s, tot["schema"][0], u, tot["plain"][0], s / u))
    finally:
        p.terminate()
        p.wait()


if __name__ == "__main__":
    main()
