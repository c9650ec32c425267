#!/usr/bin/python3
"""Soak test of `pith serve`: a mixed load against a real server process for a given duration.

    tools/soak.py [--pith build/pith] [--duration 60] [--concurrency 12] [--json OUT.json]

Starts `pith serve --port 0` with a small KV pool (so that concurrent requests exhaust it and the engine
preempts), then CONCURRENCY client threads send, until DURATION seconds have passed, a random mix of:
streaming and non-streaming completions and chat completions (some with n = 2, some with
ignore_eos), three completions on one keep-alive connection, streams the client cuts after a few
events, non-streaming requests the client abandons (cancels), half-sent requests, oversize bodies
with and without Content-Length (413), invalid JSON and out-of-range parameters (400), prompts over
the context (400), unknown routes (404), wrong methods (405), /metrics scrapes, /tokenize and /detokenize
round trips, grammars and regexes over the compiler's bound (400) and clients that send one header line
every half second (dropped at --header-timeout). An admin thread meanwhile pauses and resumes, puts the
server to sleep and wakes it, and reloads the same weights, in turn every --admin-period seconds. At the end it
waits for the server to go idle, starts a few long streams and sends SIGTERM while they run.

It fails (exit 1, one line per failure) unless:
  - no request is lost: each got a complete answer (a JSON body with every choice finished, or a stream
    ending in [DONE] with every choice finished), the error reply its kind expects, or was cut by the
    client on purpose; a reset, a timeout, a truncated stream or an unexpected status is a loss;
  - after the load, /metrics reads 0 KV blocks in use, 0 requests running and 0 waiting, and its
    pith_request_errors_total{code} counts exactly the error replies the clients saw;
  - RSS (VmRSS of /proc/PID/status, sampled every second) after the warm-up never exceeds the largest
    warm-up sample by more than --rss-bound-mib (default 16 MiB, 64 MiB for a sanitizer build);
  - the streams in flight at SIGTERM end with [DONE] or an error event, and the server exits 0;
  - for an AddressSanitizer build (detected from the binary), its log holds no LeakSanitizer,
    AddressSanitizer or UndefinedBehaviorSanitizer report.
Python 3 standard library only; Linux (it reads /proc)."""
import argparse
import http.client
import json
import os
import random
import re
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

PROMPTS = [
    "And God said", "In the beginning", "And it came to pass, when the king", "The LORD is my shepherd",
    "Blessed are the meek: for they", "And Moses went up unto the mount", "Now the serpent was more subtil",
    "And he said unto them, Go ye into all the world", "For God so loved the world, that he gave",
    "And the children of Israel did evil in the sight of the LORD, and served Baalim, and they forsook",
]

# What each kind of request must get back: a set of acceptable HTTP statuses. 429 (queue full) is an
# error reply any generation request may get.
KINDS = {
    # kind: (weight, expected statuses)
    "completion": (14, {200, 429}),
    "completion_stream": (14, {200, 429}),
    "chat": (12, {200, 429}),
    "chat_stream": (12, {200, 429}),
    "stream_cut": (8, None),       # the client closes after a few events
    "cancel": (6, None),           # non-streaming; the client closes before the answer
    "half_sent": (2, None),        # the client sends part of the body, then closes
    "oversize": (3, {413}),
    "invalid_json": (3, {400}),
    "invalid_value": (3, {400}),
    "context_exceeded": (3, {400}),
    "not_found": (1, {404}),
    "wrong_method": (1, {405}),
    "metrics": (2, {200}),
    "keepalive": (3, {200, 429}),  # three short completions on one connection
    "tokenize": (2, {200}),        # /tokenize and /detokenize: they read the tokenizer during admin transitions
    "big_grammar": (2, {400}),     # a grammar or regex whose expansion is over the compiler's bound
    "slow_headers": (2, None),     # one header line every 0.5 s: the server must drop it at its header deadline
}

# Grammars that expand far past the compiler's bound (issue 31): each must be refused quickly with a 400,
# never compiled (seconds of CPU and gigabytes before the bound existed).
BIG_GRAMMARS = [
    ("grammar", "root ::= " + '"a"{10000} ' * 2000),
    ("guided_regex", "a{10000}" * 200),
    ("guided_regex", "[a-z]{1000}" * 2000),
]


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.by_kind = {}      # kind -> {outcome: count}
        self.errors = {}       # HTTP status (or "stream_error") -> count
        self.failures = []     # one line each, for requests lost or answered unexpectedly

    def add(self, kind, outcome, status=None, failure=None):
        with self.lock:
            d = self.by_kind.setdefault(kind, {})
            d[outcome] = d.get(outcome, 0) + 1
            if outcome == "error" and status is not None:
                self.errors[str(status)] = self.errors.get(str(status), 0) + 1
            if failure and len(self.failures) < 200:
                self.failures.append(f"{kind}: {failure}")


def metrics_values(text):
    """Prometheus text -> {name or name{labels}: float}, the model_name label every series of a
    one-model server carries left out (pith_kv_blocks_in_use, pith_request_errors_total{code="400"})."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        parts = line.rsplit(" ", 1)
        if len(parts) == 2:
            key = re.sub(r'\{model_name="(?:[^"\\]|\\.)*",?', "{", parts[0], count=1).replace("{}", "")
            try:
                out[key] = float(parts[1])
            except ValueError:
                pass
    return out


def vmrss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


class Soak:
    def __init__(self, a):
        self.a = a
        self.stats = Stats()
        self.port = None
        self.proc = None
        self.rss = []          # (seconds since start, KiB)
        self.rss_asleep = []   # the same, sampled just after each /v1/admin/sleep: weights and KV released
        self.metrics_max = {"kv_in_use": 0.0, "running": 0.0, "waiting": 0.0}
        self.stop_load = threading.Event()
        self.stop_sampler = threading.Event()
        self.t0 = time.time()
        self.failures = []
        self.admin_key = "soak-admin-%d" % random.Random(a.seed).randint(0, 1 << 40)
        self.model_path = None  # from the startup log, for reloads
        self.model_bytes = 0

    # ---------------------------------------------------------------- server
    def start_server(self):
        a = self.a
        self.logf = tempfile.NamedTemporaryFile(prefix="pith-soak-", suffix=".log", delete=False)
        env = dict(os.environ)
        if a.asan:
            # Leak checking on; the quarantine of freed memory (256 MiB by default) capped, else it grows
            # the RSS for minutes and hides a real leak's growth. Options already set take precedence.
            env["ASAN_OPTIONS"] = "detect_leaks=1:quarantine_size_mb=%d:" % a.asan_quarantine_mib + env.get("ASAN_OPTIONS", "")
            env.setdefault("UBSAN_OPTIONS", "print_stacktrace=1")
        cmd = [a.pith, "serve", "--port", "0", "-t", str(a.threads), "--kv-blocks", str(a.kv_blocks),
               "--block-size", str(a.block_size), "--max-seq-len", str(a.max_seq_len),
               "--max-num-seqs", str(a.max_num_seqs), "--max-body", str(a.max_body), "--timeout", "30",
               "--drain-timeout", str(a.drain_timeout), "--header-timeout", str(a.header_timeout), "--quiet"]
        if a.admin_period > 0:
            cmd += ["--admin-key-file", self.key_file()]
        if a.model:
            cmd += ["-m", a.model]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=self.logf, env=env)
        until = time.time() + a.start_timeout
        while time.time() < until:
            m = re.search(r"listening on http://\S+:(\d+)", self.log())
            if m:
                self.port = int(m.group(1))
                break
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        if self.port is None:
            raise RuntimeError("server did not start: " + self.log()[-2000:])
        while time.time() < until:
            try:
                st, _ = self.request("GET", "/health", timeout=5)
                if st == 200:
                    m = re.search(r" path=(\S+)", self.log())
                    self.model_path = a.model or (m.group(1) if m else None)
                    try:
                        self.model_bytes = os.path.getsize(self.model_path) if self.model_path else 0
                    except OSError:
                        self.model_bytes = 0
                    return
                if st == 503:  # still loading: an error reply the server counts too
                    self.stats.add("health_at_start", "error", status=503)
            except OSError:
                pass
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError("server not ready: " + self.log()[-2000:])

    def key_file(self):
        f = tempfile.NamedTemporaryFile("w", prefix="pith-soak-key-", delete=False)
        os.chmod(f.name, 0o600)
        f.write(self.admin_key + "\n")
        f.close()
        self.key_path = f.name
        return f.name

    def log(self):
        with open(self.logf.name, errors="replace") as f:
            return f.read()

    def conn(self, timeout=None):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout or self.a.request_timeout)

    def request(self, method, path, body=None, timeout=None, headers=None):
        c = self.conn(timeout)
        try:
            hdr = {"Content-Type": "application/json"} if body is not None else {}
            hdr.update(headers or {})
            c.request(method, path, body=body, headers=hdr)
            r = c.getresponse()
            return r.status, r.read()
        finally:
            c.close()

    def scrape(self):
        st, body = self.request("GET", "/metrics", timeout=30)
        if st != 200:
            raise RuntimeError(f"/metrics answered {st}")
        return metrics_values(body.decode())

    # ---------------------------------------------------------------- requests
    def gen_body(self, rng, chat, stream, long=False, max_tokens=None):
        p = rng.choice(PROMPTS)
        if rng.random() < 0.3:
            p = p + " " + rng.choice(PROMPTS).lower()
        b = {"max_tokens": max_tokens or (rng.randint(96, 160) if long else rng.randint(4, 120)),
             "temperature": rng.choice([0, 0.7, 1.0]), "seed": rng.randint(0, 1 << 30)}
        if long or rng.random() < 0.4:
            b["ignore_eos"] = True
        if rng.random() < 0.15 and not long:
            b["n"] = 2
        if chat:
            b["messages"] = [{"role": "user", "content": p}]
        else:
            b["prompt"] = p
        if stream:
            b["stream"] = True
            if rng.random() < 0.5:
                b["stream_options"] = {"include_usage": True}
        return b

    def check_json_answer(self, b, data, chat):
        """Returns None when data is a complete answer to b, else why not."""
        try:
            j = json.loads(data)
        except ValueError:
            return "200 with a body that is not JSON"
        ch = j.get("choices")
        n = b.get("n", 1)
        if not isinstance(ch, list) or len(ch) != n:
            return f"200 with {0 if not isinstance(ch, list) else len(ch)} choices, {n} asked"
        for c in ch:
            if c.get("finish_reason") not in ("stop", "length"):
                return f"choice finish_reason {c.get('finish_reason')!r}"
            if chat and not isinstance(c.get("message", {}).get("content"), str):
                return "chat choice without message.content"
            if not chat and not isinstance(c.get("text"), str):
                return "choice without text"
            if b.get("ignore_eos") and c["finish_reason"] != "length":
                return "ignore_eos choice finished with " + c["finish_reason"]
        u = j.get("usage") or {}
        if not isinstance(u.get("completion_tokens"), int) or u["completion_tokens"] < n:
            return f"usage.completion_tokens {u.get('completion_tokens')!r}"
        return None

    def read_events(self, r, limit=None):
        """Reads SSE data lines from response r; returns (events, ended_cleanly). events are the parsed
        JSON objects, or the string "[DONE]"; stops after limit events when given."""
        events = []
        while limit is None or len(events) < limit:
            line = r.readline()
            if not line:
                return events, False
            line = line.strip()
            if not line.startswith(b"data: "):
                continue
            payload = line[6:]
            if payload == b"[DONE]":
                events.append("[DONE]")
                return events, True
            try:
                events.append(json.loads(payload))
            except ValueError:
                events.append({"_malformed": payload[:80].decode(errors="replace")})
        return events, False

    def check_stream(self, b, events, ended):
        """(outcome, why): outcome "ok", "error" (an error event ended it) or "lost"."""
        if events and isinstance(events[-1], dict) and "error" in events[-1]:
            return "error", events[-1]["error"].get("message")
        if not ended:
            return "lost", f"stream ended without [DONE] after {len(events)} events"
        n = b.get("n", 1)
        finished = {}
        usage = False
        for e in events[:-1]:
            if "_malformed" in e:
                return "lost", "malformed event " + e["_malformed"]
            for c in e.get("choices", []):
                if c.get("finish_reason") is not None:
                    finished[c.get("index")] = c["finish_reason"]
            if e.get("usage"):
                usage = True
        if len(finished) != n:
            return "lost", f"{len(finished)} of {n} choices finished before [DONE]"
        if b.get("ignore_eos") and any(v != "length" for v in finished.values()):
            return "lost", "ignore_eos choice finished with " + repr(finished)
        if b.get("stream_options", {}).get("include_usage") and not usage:
            return "lost", "no usage chunk"
        return "ok", None

    def one(self, rng, kind):
        expect = KINDS[kind][1]
        chat = kind.startswith("chat")
        path = "/v1/chat/completions" if chat else "/v1/completions"
        st = self.stats
        if kind in ("completion", "chat"):
            b = self.gen_body(rng, chat, False)
            status, data = self.request("POST", path, json.dumps(b))
            if status == 200:
                why = self.check_json_answer(b, data, chat)
                st.add(kind, "lost" if why else "ok", failure=why)
            else:
                self.error_reply(kind, status, data, expect)
        elif kind in ("completion_stream", "chat_stream"):
            b = self.gen_body(rng, chat, True)
            c = self.conn()
            try:
                c.request("POST", path, body=json.dumps(b), headers={"Content-Type": "application/json"})
                r = c.getresponse()
                if r.status != 200:
                    self.error_reply(kind, r.status, r.read(), expect)
                    return
                events, ended = self.read_events(r)
            finally:
                c.close()
            outcome, why = self.check_stream(b, events, ended)
            st.add(kind, outcome, status="stream_error" if outcome == "error" else None,
                   failure=(why if outcome == "lost" else f"unexpected error event: {why}" if why else None))
        elif kind == "keepalive":
            c = self.conn()
            try:
                for _ in range(3):
                    b = {"prompt": rng.choice(PROMPTS), "max_tokens": rng.randint(1, 8), "temperature": 0}
                    c.request("POST", "/v1/completions", body=json.dumps(b),
                              headers={"Content-Type": "application/json"})
                    r = c.getresponse()
                    data = r.read()
                    if r.status == 200:
                        why = self.check_json_answer(b, data, False)
                        st.add(kind, "lost" if why else "ok", failure=why)
                    else:
                        self.error_reply(kind, r.status, data, expect)
            finally:
                c.close()
        elif kind == "stream_cut":
            chat = rng.random() < 0.5
            b = self.gen_body(rng, chat, True, long=True)
            c = self.conn()
            try:
                c.request("POST", "/v1/chat/completions" if chat else "/v1/completions", body=json.dumps(b),
                          headers={"Content-Type": "application/json"})
                r = c.getresponse()
                if r.status != 200:
                    self.error_reply(kind, r.status, r.read(), {429})
                    return
                events, ended = self.read_events(r, limit=rng.randint(1, 12))
                if ended or (events and isinstance(events[-1], dict) and "error" in events[-1]):
                    st.add(kind, "lost", failure=f"stream ended after {len(events)} events, before the cut")
                    return
                if rng.random() < 0.5:  # half of the cuts are resets rather than orderly closes
                    c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            finally:
                c.close()
            st.add(kind, "cut")
        elif kind == "cancel":
            b = self.gen_body(rng, rng.random() < 0.5, False, long=True)
            s = socket.create_connection(("127.0.0.1", self.port), timeout=self.a.request_timeout)
            body = json.dumps(b).encode()
            p = "/v1/chat/completions" if "messages" in b else "/v1/completions"
            s.sendall(b"POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                      b"Content-Length: %d\r\n\r\n%s" % (p.encode(), len(body), body))
            time.sleep(rng.uniform(0.0, 0.4))
            s.close()
            st.add(kind, "cut")
        elif kind == "tokenize":
            text = rng.choice(PROMPTS)
            status, data = self.request("POST", "/tokenize", json.dumps({"prompt": text}))
            if status != 200:
                return self.error_reply(kind, status, data, expect)
            toks = json.loads(data).get("tokens")
            status, data = self.request("POST", "/detokenize", json.dumps({"tokens": toks}))
            if status != 200:
                return self.error_reply(kind, status, data, expect)
            back = json.loads(data).get("prompt", "")
            st.add(kind, "ok" if text in back else "lost",
                   failure=None if text in back else f"detokenize gave {back!r} for {text!r}")
        elif kind == "big_grammar":
            field, g = rng.choice(BIG_GRAMMARS)
            status, data = self.request("POST", "/v1/completions",
                                        json.dumps({"prompt": "a", "max_tokens": 4, field: g}), timeout=60)
            self.error_reply(kind, status, data, expect)
        elif kind == "slow_headers":
            self.slow_headers(rng)
        elif kind == "half_sent":
            s = socket.create_connection(("127.0.0.1", self.port), timeout=self.a.request_timeout)
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                      b"Content-Length: 200\r\n\r\n{\"prompt\": \"And")
            time.sleep(rng.uniform(0.0, 0.2))
            s.close()
            st.add(kind, "cut")
        else:
            method, p, body = "POST", "/v1/completions", None
            if kind == "oversize":
                body = json.dumps({"prompt": "x" * (self.a.max_body + rng.randint(1, 100000))})
            elif kind == "invalid_json":
                body = rng.choice(['{"prompt": "And', '{"prompt": }', "[1, 2", "\xff\xfe", ""])
            elif kind == "invalid_value":
                body = json.dumps(rng.choice([{"prompt": "a", "temperature": 5},
                                              {"prompt": "a", "max_tokens": 0},
                                              {"prompt": "a", "top_p": 0},
                                              {"prompt": "a", "n": 99},
                                              {"prompt": 7},
                                              {"messages": "hi"}]))
                if '"messages"' in body:
                    p = "/v1/chat/completions"
            elif kind == "context_exceeded":
                body = json.dumps({"prompt": "And God said", "max_tokens": self.a.max_seq_len + 1})
            elif kind == "not_found":
                method, p = "GET", "/v1/nothing-here"
            elif kind == "wrong_method":
                method, p = "GET", "/v1/completions"
            elif kind == "metrics":
                method, p = "GET", "/metrics"
            try:
                if kind == "oversize" and rng.random() < 0.5:  # the same, chunked (no Content-Length)
                    data_ = body.encode()
                    c = self.conn()
                    try:
                        c.request(method, p, body=(data_[i:i + 8192] for i in range(0, len(data_), 8192)),
                                  headers={"Content-Type": "application/json"}, encode_chunked=True)
                        r = c.getresponse()
                        status, data = r.status, r.read()
                    finally:
                        c.close()
                else:
                    status, data = self.request(method, p, body)
            except (ConnectionResetError, BrokenPipeError) as e:
                if kind == "oversize":
                    # The server may answer 413 and close before it has read the whole body; the client
                    # then sees a reset on send. Python's client loses the reply in that case.
                    st.add(kind, "error", status="413-reset")
                    return
                raise e
            if kind == "metrics" and status == 200:
                st.add(kind, "ok" if b"pith_kv_blocks_in_use" in data else "lost",
                       failure=None if b"pith_kv_blocks_in_use" in data else "metrics without pith_kv_blocks_in_use")
            else:
                self.error_reply(kind, status, data, expect)

    def slow_headers(self, rng):
        """A client that sends one header line every 0.5 s and never ends its headers: the server must
        close the connection (or answer 408) within its header deadline, plus slack for a loaded machine."""
        kind = "slow_headers"
        limit = self.a.header_timeout + 10
        s = socket.create_connection(("127.0.0.1", self.port), timeout=limit)
        t0 = time.time()
        reply = b""
        try:
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            s.settimeout(0.5)
            i = 0
            while time.time() - t0 < limit:
                try:
                    chunk = s.recv(4096)
                    if not chunk:
                        break
                    reply += chunk
                except socket.timeout:
                    s.sendall(b"X-Slow-%d: %d\r\n" % (i, rng.randint(0, 9)))
                    i += 1
        except (ConnectionResetError, BrokenPipeError):
            pass
        finally:
            s.close()
        took = time.time() - t0
        if took >= limit:
            self.stats.add(kind, "lost", failure=f"a client sending headers slowly was still connected after {took:.1f} s "
                                                 f"(header deadline {self.a.header_timeout} s)")
        elif reply.startswith(b"HTTP/1.1 408") or reply.startswith(b"HTTP/1.0 408"):
            self.stats.add(kind, "error", status=408)
        else:
            self.stats.add(kind, "cut")

    def admin_cycle(self):
        """Every --admin-period seconds one admin transition, in turn: pause (keep) and resume, sleep and
        wake, reload of the same weights (recompute): each must answer 200 while the load goes on."""
        auth = {"Authorization": "Bearer " + self.admin_key}
        steps = [[("/v1/admin/pause", {"mode": "keep"}), ("/v1/admin/resume", {})],
                 [("/v1/admin/sleep", {}), ("/v1/admin/wake", {})]]
        if self.model_path:
            steps.append([("/v1/admin/reload", {"path": self.model_path, "mode": "recompute"})])
        i = 0
        while not self.stop_load.wait(self.a.admin_period):
            for path, body in steps[i % len(steps)]:
                kind = "admin_" + path.rsplit("/", 1)[1]
                try:
                    status, data = self.request("POST", path, json.dumps(body), timeout=120, headers=auth)
                except (OSError, http.client.HTTPException) as e:
                    self.stats.add(kind, "lost", failure=f"{type(e).__name__}: {e}")
                    continue
                if status == 200:
                    self.stats.add(kind, "ok")
                    if kind == "admin_sleep":
                        kib = vmrss_kib(self.proc.pid)
                        if kib is not None:
                            self.rss_asleep.append((time.time() - self.t0, kib))
                else:
                    self.error_reply(kind, status, data, {200})
                time.sleep(0.3)
            i += 1

    def error_reply(self, kind, status, data, expect):
        try:
            j = json.loads(data)
            well_formed = isinstance(j.get("error", {}).get("message"), str)
        except (ValueError, AttributeError):
            well_formed = False
        if not well_formed:
            self.stats.add(kind, "lost", failure=f"{status} without a JSON error body")
        elif expect is None or status not in expect:
            self.stats.add(kind, "error", status=status, failure=f"unexpected status {status}: {data[:200]!r}")
        else:
            self.stats.add(kind, "error", status=status)

    def worker(self, wid):
        rng = random.Random(self.a.seed * 1000 + wid)
        kinds = list(KINDS)
        weights = [KINDS[k][0] for k in kinds]
        while not self.stop_load.is_set():
            kind = rng.choices(kinds, weights)[0]
            try:
                self.one(rng, kind)
            except (OSError, http.client.HTTPException) as e:
                self.stats.add(kind, "lost", failure=f"{type(e).__name__}: {e}")
            except Exception as e:  # a bug of this client: counted and shown, never a silent dead thread
                self.stats.add(kind, "lost", failure=f"client error {type(e).__name__}: {e}")

    def sampler(self):
        n = 0
        while not self.stop_sampler.wait(1.0):
            kib = vmrss_kib(self.proc.pid)
            if kib is not None:
                self.rss.append((time.time() - self.t0, kib))
            n += 1
            if n % 2 == 0:
                try:
                    m = self.scrape()
                except (OSError, http.client.HTTPException, RuntimeError):
                    continue
                for key, name in (("kv_in_use", "pith_kv_blocks_in_use"), ("running", "pith_requests_running"),
                                  ("waiting", "pith_requests_waiting")):
                    self.metrics_max[key] = max(self.metrics_max[key], m.get(name, 0.0))

    def check_error_counts(self):
        """Every error reply the clients saw is in the server's pith_request_errors_total{code}, and no
        other. The server may count a reply just after sending it: a mismatch is looked at again once."""
        seen = {}
        with self.stats.lock:
            for k, v in self.stats.errors.items():
                code = "413" if k == "413-reset" else "500" if k == "stream_error" else k
                seen[code] = seen.get(code, 0) + v
        for attempt in range(2):
            served = {k.split('"')[1]: int(v) for k, v in self.final_metrics.items()
                      if k.startswith("pith_request_errors_total{") and v}
            if seen == served:
                return
            if attempt == 0:
                time.sleep(1)
                self.final_metrics = self.scrape()
        self.failures.append(f"errors seen by the clients {seen} differ from the server's "
                             f"pith_request_errors_total {served}")

    # ---------------------------------------------------------------- phases
    def sigterm_phase(self):
        """Starts a few long streams, sends SIGTERM once each has its first event, and checks that each
        ends with [DONE] or an error event and that the process exits 0."""
        results = []
        started = threading.Barrier(self.a.sigterm_streams + 1, timeout=self.a.request_timeout)

        def stream(i):
            rng = random.Random(i)
            b = self.gen_body(rng, i % 2 == 1, True, long=True, max_tokens=self.a.max_seq_len // 2)
            c = self.conn()
            try:
                c.request("POST", "/v1/chat/completions" if i % 2 else "/v1/completions", body=json.dumps(b),
                          headers={"Content-Type": "application/json"})
                r = c.getresponse()
                first, _ = self.read_events(r, limit=1)
                try:
                    started.wait()
                except threading.BrokenBarrierError:
                    pass
                if r.status != 200:
                    results.append(("lost", f"status {r.status}"))
                    return
                rest, ended = self.read_events(r)
                outcome, why = self.check_stream(b, first + rest, ended)
                results.append((outcome, why))
            except (OSError, http.client.HTTPException) as e:
                results.append(("lost", f"{type(e).__name__}: {e}"))
                try:
                    started.wait()
                except threading.BrokenBarrierError:
                    pass
            finally:
                c.close()

        ts = [threading.Thread(target=stream, args=(i,)) for i in range(self.a.sigterm_streams)]
        for t in ts:
            t.start()
        try:
            started.wait()
        except threading.BrokenBarrierError:
            self.failures.append("SIGTERM phase: the streams did not all start")
        self.proc.send_signal(signal.SIGTERM)
        for t in ts:
            t.join(self.a.drain_timeout + self.a.request_timeout)
        try:
            rc = self.proc.wait(self.a.drain_timeout + 60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
            self.failures.append("the server did not exit within the drain timeout + 60 s after SIGTERM")
        for outcome, why in results:
            self.stats.add("sigterm_stream", outcome, status="stream_error" if outcome == "error" else None,
                           failure=why if outcome == "lost" else None)
        return rc

    def run(self):
        a = self.a
        self.start_server()
        sampler = threading.Thread(target=self.sampler, daemon=True)
        sampler.start()
        workers = [threading.Thread(target=self.worker, args=(i,), daemon=True) for i in range(a.concurrency)]
        for w in workers:
            w.start()
        admin = None
        if a.admin_period > 0:
            admin = threading.Thread(target=self.admin_cycle, daemon=True)
            admin.start()
        load_end = self.t0 + a.duration
        while time.time() < load_end:
            if self.proc.poll() is not None:
                self.failures.append(f"the server exited with status {self.proc.returncode} during the load")
                break
            time.sleep(0.2)
        self.stop_load.set()
        if admin:
            admin.join(150)
            if admin.is_alive():
                self.failures.append("the admin thread did not finish its last transition")
        for w in workers:
            w.join(a.request_timeout + 10)
            if w.is_alive():
                self.failures.append("a client thread did not finish its last request")
        alive = self.proc.poll() is None
        idle = None
        if alive:
            # Cancellations are taken at the engine's next step: poll briefly for the idle state.
            until = time.time() + 15
            while True:
                try:
                    m = self.scrape()
                    idle = {k: m.get(n, -1) for k, n in (("kv_blocks_in_use", "pith_kv_blocks_in_use"),
                                                           ("requests_running", "pith_requests_running"),
                                                           ("requests_waiting", "pith_requests_waiting"))}
                    if all(v == 0 for v in idle.values()) or time.time() > until:
                        break
                except (OSError, http.client.HTTPException, RuntimeError) as e:
                    self.failures.append(f"/metrics after the load: {e}")
                    break
                time.sleep(0.2)
            if idle and not all(v == 0 for v in idle.values()):
                self.failures.append(f"not idle after the load: {idle}")
            self.final_metrics = m if idle else {}
            if idle:
                self.check_error_counts()
        kib = vmrss_kib(self.proc.pid)
        if kib is not None:
            self.rss.append((time.time() - self.t0, kib))
        self.stop_sampler.set()
        sampler.join()
        rc = self.sigterm_phase() if alive else self.proc.returncode
        if rc != 0:
            self.failures.append(f"the server exited with status {rc} after SIGTERM (0 expected)")
        log = self.log()
        if a.asan:
            for pat in ("ERROR: LeakSanitizer", "ERROR: AddressSanitizer", "runtime error:",
                        "LeakSanitizer has encountered a fatal error"):
                if pat in log:
                    self.failures.append(f"sanitizer report in the server log ({pat}); see {self.logf.name}")
                    break
        return self.report(idle, rc)

    def report(self, idle, rc):
        a = self.a
        warm = [k for t, k in self.rss if t <= a.warmup]
        after = [k for t, k in self.rss if t > a.warmup]
        rss = {}
        if warm and after:
            base = max(warm)
            rss = {"warmup_end_mib": round(warm[-1] / 1024, 1), "warmup_max_mib": round(base / 1024, 1),
                   "after_max_mib": round(max(after) / 1024, 1), "end_mib": round(after[-1] / 1024, 1),
                   "first_mib": round(self.rss[0][1] / 1024, 1), "bound_mib": a.rss_bound_mib,
                   "samples": len(self.rss),
                   # ten evenly spaced samples, [seconds, MiB], for a look at the trend
                   "profile": [[round(t), round(k / 1024, 1)] for t, k in
                               (self.rss[i * (len(self.rss) - 1) // 9] for i in range(10))]}
            # A reload holds the old weights and the new ones, each with its repacked copies, for a moment:
            # with admin transitions in the mix a sample may catch that, so the awake bound grows by three
            # times the weights file; the asleep samples below are the finer leak check.
            allowance = 3 * self.model_bytes / 1024 if self.a.admin_period > 0 else 0
            rss["reload_allowance_mib"] = round(allowance / 1024, 1)
            if max(after) - base > a.rss_bound_mib * 1024 + allowance:
                self.failures.append(f"RSS grew after the warm-up: {rss['warmup_max_mib']} MiB at most during it, "
                                     f"{rss['after_max_mib']} MiB after (bound +{a.rss_bound_mib} MiB"
                                     f" + {rss['reload_allowance_mib']} MiB for a reload)")
            # Asleep, the server holds neither weights nor KV cache: what it holds then is what requests
            # and transitions left behind, and must stay flat.
            sw = [k for t, k in self.rss_asleep if t <= a.warmup] or [k for _, k in self.rss_asleep[:1]]
            sa = [k for t, k in self.rss_asleep if t > a.warmup]
            if sw and sa:
                rss["asleep_mib"] = [round(k / 1024, 1) for _, k in self.rss_asleep]
                if max(sa) - max(sw) > a.rss_bound_mib * 1024:
                    self.failures.append(f"RSS while asleep grew: {round(max(sw) / 1024, 1)} MiB at first, "
                                         f"{round(max(sa) / 1024, 1)} MiB later (bound +{a.rss_bound_mib} MiB)")
        else:
            self.failures.append("too few RSS samples after the warm-up (make --duration longer than --warmup)")
        self.failures += self.stats.failures
        by_kind = self.stats.by_kind
        totals = {}
        for d in by_kind.values():
            for k, v in d.items():
                totals[k] = totals.get(k, 0) + v
        if totals.get("lost"):
            self.failures.insert(0, f"{totals['lost']} requests lost")
        fm = getattr(self, "final_metrics", {})
        out = {
            "duration_s": a.duration, "concurrency": a.concurrency, "asan": a.asan,
            "server": {"kv_blocks": a.kv_blocks, "block_size": a.block_size, "max_seq_len": a.max_seq_len,
                       "max_num_seqs": a.max_num_seqs, "threads": a.threads},
            "requests": sum(totals.values()), "outcomes": totals, "by_kind": by_kind,
            "errors_by_status": self.stats.errors, "rss": rss, "idle_after_load": idle,
            "metrics_max": self.metrics_max,
            "preemptions": fm.get("pith_preemptions_total"),
            "generation_tokens": fm.get("pith_generation_tokens_total"),
            "finish_reasons": {k.split('"')[1]: v for k, v in fm.items()
                               if k.startswith("pith_request_success_total{")},
            "server_errors_by_code": {k.split('"')[1]: v for k, v in fm.items()
                                      if k.startswith("pith_request_errors_total{") and v},
            "exit_status": rc, "log": self.logf.name, "failures": self.failures,
        }
        return out


def is_asan(path):
    try:
        with open(path, "rb") as f:
            return b"__asan_init" in f.read()
    except OSError:
        return False


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 2)[2])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--pith", default=os.path.join(here, "..", "build", "pith"), help="the pith binary")
    ap.add_argument("-m", "--model", help="model (default: the one installed next to the binary)")
    ap.add_argument("--duration", type=float, default=60, help="seconds of load (default 60)")
    ap.add_argument("--warmup", type=float, help="seconds before RSS must stay flat (default: a quarter of "
                    "--duration, at most 60)")
    ap.add_argument("--concurrency", type=int, default=12, help="client threads (default 12)")
    ap.add_argument("--threads", type=int, default=1, help="server model threads (default 1)")
    ap.add_argument("--kv-blocks", type=int, default=24, help="server KV pool in blocks (default 24)")
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--max-seq-len", type=int, default=256)
    ap.add_argument("--max-num-seqs", type=int, default=8)
    ap.add_argument("--max-body", type=int, default=65536, help="server --max-body (default 65536)")
    ap.add_argument("--drain-timeout", type=int, default=2, help="server --drain-timeout (default 2, so "
                    "that some streams in flight at SIGTERM are cancelled)")
    ap.add_argument("--rss-bound-mib", type=float, help="allowed RSS growth after the warm-up (default 16, "
                    "64 for a sanitizer build)")
    ap.add_argument("--asan-quarantine-mib", type=int, default=16, help="ASan quarantine_size_mb for a sanitizer "
                    "build (default 16)")
    ap.add_argument("--header-timeout", type=int, default=2, help="server --header-timeout (default 2, so that "
                    "the slow_headers clients are dropped quickly)")
    ap.add_argument("--admin-period", type=float, default=4, help="seconds between admin transitions (pause/resume, "
                    "sleep/wake, reload) during the load; 0: none (default 4)")
    ap.add_argument("--sigterm-streams", type=int, default=8, help="streams in flight at SIGTERM (default 8)")
    ap.add_argument("--request-timeout", type=float, default=300, help="client socket timeout (default 300)")
    ap.add_argument("--start-timeout", type=float, default=60)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", help="also write the report here")
    ap.add_argument("--keep-log", action="store_true", help="keep the server log even when the run passes")
    a = ap.parse_args()
    if not os.path.exists(a.pith):
        print(f"soak: {a.pith}: no such binary (build it first)", file=sys.stderr)
        return 2
    if not os.path.exists("/proc/self/status"):
        print("soak: needs Linux /proc to sample RSS", file=sys.stderr)
        return 2
    a.asan = is_asan(a.pith)
    if a.warmup is None:
        a.warmup = min(60.0, a.duration / 4)
    if a.rss_bound_mib is None:
        a.rss_bound_mib = 64.0 if a.asan else 16.0
    s = Soak(a)
    try:
        rep = s.run()
    except RuntimeError as e:
        print(f"soak: {e}", file=sys.stderr)
        if s.proc and s.proc.poll() is None:
            s.proc.kill()
        return 1
    finally:
        if s.proc and s.proc.poll() is None:
            s.proc.kill()
        if getattr(s, "key_path", None):
            os.unlink(s.key_path)
    text = json.dumps(rep, indent=2, sort_keys=True)
    if a.json:
        with open(a.json, "w") as f:
            f.write(text + "\n")
    print(text)
    if rep["failures"]:
        for f in rep["failures"]:
            print("FAIL: " + f, file=sys.stderr)
        print(f"soak: FAILED ({len(rep['failures'])} problems); server log kept at {rep['log']}", file=sys.stderr)
        return 1
    if not a.keep_log:
        os.unlink(rep["log"])
    r = rep["rss"]
    print(f"soak: OK: {rep['requests']} requests in {a.duration:g} s, 0 lost, {rep['preemptions']:g} preemptions, "
          f"RSS {r['warmup_max_mib']} -> {r['after_max_mib']} MiB (bound +{a.rss_bound_mib:g}), exit 0", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
