"""Every endpoint under load while an administrator cycles the weights (issue 31, item 2), against a real
`pith serve` of the default model (assets/default.gguf: it serves generation and embeddings alike).

Worker threads send /v1/embeddings (strings, token ids, and a list whose text input is tokenized before
its token-id input is checked: the widest window for a handler that reads the model between the two),
/v1/completions, /v1/chat/completions, /tokenize, /detokenize, /v1/models and /metrics without pause,
while another thread cycles /v1/admin/sleep, /wake, /reload (the same weights), /pause and /resume for
about 12 seconds. Checked: the server never dies (a handler that reads the model while a sleep frees it
segfaulted, and after a reload read freed memory: a sanitizer build reports that and exits non-zero);
every answer is a success or a JSON error object with a code from the list below (never a 500, never a
dropped connection); every admin transition happened several times; afterwards each endpoint answers
normally, and the server exits 0 on SIGTERM (a sanitizer build's leak check is in that status)."""

import json
import os
import sys
import threading
import time
import urllib.error
import urllib.request

from pithtest import Server, pith_bin

pith_bin()  # skips with a reason when ctest did not name the binary

KEY = "race-admin-key"
SECONDS = 12.0
HERE = os.path.dirname(os.path.abspath(__file__))
MODEL = os.path.join(os.environ.get("PITH_SOURCE_DIR") or os.path.join(HERE, ".."), "assets", "default.gguf")
# Clean refusals a request may meet while the weights change under it.
OK_ERRORS = {503: {"asleep", "aborted", "model_not_ready"}, 429: {"queue_full"}}

failures = []
lock = threading.Lock()


def check(cond, what):
    if not cond:
        with lock:
            failures.append(what)
        print("FAIL:", what, flush=True)


def call(base, route, body=None, key=None, timeout=120):
    """(status, parsed JSON or text); status 0 with the exception text when the connection failed."""
    data = None if body is None else json.dumps(body).encode()
    headers = {"content-type": "application/json"}
    if key:
        headers["authorization"] = "Bearer " + key
    req = urllib.request.Request(base + route, data=data, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            raw = r.read()
            status = r.status
    except urllib.error.HTTPError as e:
        raw, status = e.read(), e.code
    except OSError as e:
        return 0, repr(e)
    if route == "/metrics" and status == 200:
        return status, raw.decode()
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw[:200]


def main():
    if not os.path.exists(MODEL):
        print("SKIP: %s not found" % MODEL)
        return 77
    server = Server(["-m", MODEL, "-t", "1", "-c", "128", "--max-num-seqs", "8", "--quiet", "--admin-key", KEY])
    base = server.base
    stop = threading.Event()
    counts = {}
    long_text = "In the beginning God created the heaven and the earth. " * 2000

    def note(kind):
        with lock:
            counts[kind] = counts.get(kind, 0) + 1

    # (route, body or None for GET, the 400 code this request may meet by design)
    requests = [
        ("/v1/embeddings", {"input": [1, 2, 3, 4]}, None),
        ("/v1/embeddings", {"input": "And God said"}, None),
        ("/v1/embeddings", {"input": [long_text, [5, 6, 7]]}, "context_length_exceeded"),
        ("/v1/completions", {"prompt": "In the beginning", "max_tokens": 3, "temperature": 0}, None),
        ("/v1/completions", {"prompt": [1, 2, 3], "max_tokens": 2}, None),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}, None),
        ("/tokenize", {"prompt": "And God said"}, None),
        ("/detokenize", {"tokens": [1, 2, 3, 4]}, None),
        ("/v1/models", None, None),
        ("/metrics", None, None),
    ]

    def worker(first, only=None):
        i = first
        while not stop.is_set():
            route, body, allowed = requests[only if only is not None else i % len(requests)]
            i += 1
            st, r = call(base, route, body)
            note(route)
            if st == 200:
                continue
            code = r.get("error", {}).get("code") if isinstance(r, dict) else None
            ok = (st in OK_ERRORS and code in OK_ERRORS[st]) or (st == 400 and allowed and code == allowed)
            check(ok, "%s %s: %s %s" % (route, json.dumps(body)[:80] if body else "", st, str(r)[:300]))
            if st == 0:
                stop.set()  # the server is gone: no point going on

    done = {}

    def admin():
        # (endpoint, body, answers it may give): sleeping while paused, resuming while asleep and waking
        # from that are the documented 409s where the order allows them.
        cycle = [("sleep", {}, (200,)), ("wake", {}, (200,)), ("reload", {"path": MODEL, "mode": "drain"}, (200,)),
                 ("pause", {"mode": "keep"}, (200,)), ("resume", {}, (200,)),
                 ("reload", {"path": MODEL, "mode": "recompute"}, (200,)), ("pause", {}, (200,)),
                 ("sleep", {}, (200, 409)), ("resume", {}, (200, 409)), ("wake", {}, (200, 409)), ("resume", {}, (200,))]
        i = 0
        while not stop.is_set():
            what, body, allowed = cycle[i % len(cycle)]
            i += 1
            st, r = call(base, "/v1/admin/" + what, body, key=KEY)
            check(st in allowed, "admin %s: %s %s" % (what, st, r))
            if st == 200:
                done[what] = done.get(what, 0) + 1
            if st == 0:
                stop.set()
            time.sleep(0.05)
        call(base, "/v1/admin/wake", {}, key=KEY)  # leave it serving
        call(base, "/v1/admin/resume", {}, key=KEY)

    threads = [threading.Thread(target=worker, args=(k * 3,)) for k in range(5)]
    # Two that keep a handler between its first look at the model and its reading the ids after the text.
    threads += [threading.Thread(target=worker, args=(0, 2)) for _ in range(2)]
    threads.append(threading.Thread(target=admin))
    try:
        for t in threads:
            t.start()
        time.sleep(SECONDS)
        stop.set()
        for t in threads:
            t.join(300)
            check(not t.is_alive(), "a thread did not finish")
        alive = server.proc.poll() is None
        check(alive, "the server died: " + "".join(server.log)[-3000:])
        print("requests:", counts, "admin:", done, flush=True)
        for what in ("sleep", "wake", "reload", "pause", "resume"):
            check(done.get(what, 0) >= 2, "admin %s happened %d times" % (what, done.get(what, 0)))
        check(counts.get("/v1/embeddings", 0) >= 20, "too few embeddings requests ran: %s" % counts)
        # Serving normally afterwards.
        for route, body, allowed in requests if alive else []:
            if allowed:
                continue
            st, r = call(base, route, body)
            check(st == 200, "after the cycles %s: %s %s" % (route, st, str(r)[:300]))
    finally:
        stop.set()
        code = server.close()
    log = "".join(server.log)
    check("Sanitizer" not in log, "sanitizer report: " + log[-4000:])
    check(code == 0, "exit status %s: %s" % (code, log[-3000:]))
    print("failures:", len(failures))
    return 1 if failures else 0


sys.exit(main())
