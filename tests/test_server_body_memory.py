"""Large request bodies and answers against a real `pith serve --max-body 8000000` of the default model
(issue 31, item 5), measured in the server's own /proc/PID/status:

- /tokenize of 3.7 MB of text (about 990,000 tokens) answers every token, and the server's peak RSS
  (VmHWM) grows by less than 60 MB over its size before (a cJSON node per token took it 90 MB higher);
- a body of more JSON values than the server parses (2M token ids) is refused with 413 before parsing,
  naming the limit; /tokenize of text giving more tokens than it answers is refused with 400, naming it;
- a prompt of 1M token ids is refused for the context, as are 1M ids to /v1/embeddings, and after each
  of these requests RSS is back within 30 MB of where it started (a parsed body's freed pages stayed
  with the process: 80 MB and more);
- the server still answers, and exits 0.
Under AddressSanitizer (its allocator keeps freed memory in quarantine) only the answers are checked."""

import json
import sys
import time
import urllib.error
import urllib.request

from pithtest import Server, pith_bin

pith_bin()  # skips with a reason when ctest did not name the binary

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, flush=True)


def status_mb(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    return 0


def post(base, route, body):
    req = urllib.request.Request(base + route, data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def main():
    server = Server(["-t", "1", "--max-body", "8000000", "--quiet"])
    base, pid = server.base, server.pid
    with open(f"/proc/{pid}/maps") as f:
        measure = "libasan" not in f.read()
    if not measure:
        print("AddressSanitizer build: memory is not measured", flush=True)
    try:
        st, _ = post(base, "/tokenize", {"prompt": "warm up"})
        check(st == 200, "warm-up")
        time.sleep(0.2)
        rss0, hwm0 = status_mb(pid, "VmRSS"), status_mb(pid, "VmHWM")
        text = "And God said, let there be light. " * 110000
        st, r = post(base, "/tokenize", {"prompt": text})
        check(st == 200 and r.get("count") == len(r.get("tokens", [])) > 900000, f"/tokenize 3.7 MB: {st}")
        grew = status_mb(pid, "VmHWM") - max(hwm0, rss0)
        print(f"/tokenize of {len(text)} bytes: peak RSS {grew:.0f} MB over the start", flush=True)
        check(grew < 60 or not measure, f"/tokenize of 3.7 MB raised the peak RSS by {grew:.0f} MB")

        st, r = post(base, "/tokenize", {"prompt": text + text[:400000]})
        e = r.get("error", {})
        check(st == 400 and e.get("code") == "too_many_tokens" and "1048576" in e.get("message", ""),
              f"/tokenize over the token limit: {st} {r}")

        for route, body, status, code in [
            ("/v1/completions", {"prompt": [0] * 2000000}, 413, "request_too_large"),
            ("/detokenize", {"tokens": [0] * 2000000}, 413, "request_too_large"),
            ("/v1/completions", {"prompt": [0] * 1000000}, 400, "context_length_exceeded"),
            ("/v1/embeddings", {"input": [0] * 1000000}, 400, "context_length_exceeded"),
            ("/v1/completions", {"prompt": [0] * 1000000}, 400, "context_length_exceeded"),
        ]:
            st, r = post(base, route, body)
            e = r.get("error", {})
            check(st == status and e.get("code") == code, f"{route} of {len(next(iter(body.values())))} ids: {st} {r}")
            if status == 413:
                check("1048576" in e.get("message", ""), f"the 413 names the limit: {r}")
            time.sleep(0.3)
            rss = status_mb(pid, "VmRSS")
            print(f"{route}: RSS {rss:.0f} MB after (started at {rss0:.0f} MB)", flush=True)
            check(rss < rss0 + 30 or not measure, f"{route} of {len(next(iter(body.values())))} ids left RSS at {rss:.0f} MB (from {rss0:.0f})")
        st, r = post(base, "/v1/completions", {"prompt": "In the beginning", "max_tokens": 3})
        check(st == 200, f"serving afterwards: {st} {r}")
    finally:
        code = server.close()
    check(code == 0, f"exit status {code}: {''.join(server.log)[-2000:]}")
    print("failures:", len(failures))
    return 1 if failures else 0


sys.exit(main())
