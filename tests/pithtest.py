"""Helpers shared by the Python tests that ctest runs (tests/test_*.py).

Each test file is a unittest module run as a script. ctest passes PITH_BIN (the pith binary),
PITH_SHARED (test assets), PITH_SOURCE_DIR and PITH_TEST_TMP. A test that cannot run exits with
SKIP (77) after printing why, which ctest reports as skipped, never as passed."""
import os
import re
import subprocess
import sys
import unittest

SKIP = 77


def skip(reason):
    print("SKIP: " + reason)
    sys.exit(SKIP)


def pith_bin():
    b = os.environ.get("PITH_BIN")
    if not b or not os.path.exists(b):
        skip("PITH_BIN is not set or missing (run through ctest)")
    return b


def shared_dir():
    d = os.environ.get("PITH_SHARED") or os.path.join(os.path.dirname(__file__), "..", "..", "shared")
    if not os.path.exists(os.path.join(d, "README.md")):
        skip("shared test assets not found at %s (set PITH_SHARED)" % d)
    return d


def tmp_dir():
    d = os.environ.get("PITH_TEST_TMP") or "/tmp/pith-test"
    os.makedirs(d, exist_ok=True)
    return d


def run_pith(args, timeout=300, input=None):
    """Runs pith with args; returns CompletedProcess with bytes stdout/stderr."""
    return subprocess.run([pith_bin()] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          timeout=timeout, input=input)


class Server:
    """`pith serve --port 0 ARGS` for a test: base URL, JSON posts, the log. Use as a context manager."""

    def __init__(self, args, ready_timeout=60, launcher=(), env=None):
        """launcher: words before the pith binary (mpirun and its options); env: the process's environment."""
        import re
        import threading
        import time
        import urllib.request
        self.log = []
        self.proc = subprocess.Popen(list(launcher) + [pith_bin(), "serve", "--port", "0"] + list(args),
                                     stderr=subprocess.PIPE, text=True, env=env)
        found = threading.Event()

        def reader():
            for line in self.proc.stderr:
                self.log.append(line)
                if "listening on" in line:
                    found.set()
            found.set()

        self.reader = threading.Thread(target=reader, daemon=True)
        self.reader.start()
        found.wait(ready_timeout)
        m = re.search(r"listening on http://[^\s:]+:(\d+)", "".join(self.log))
        if not m:
            self.proc.kill()
            raise RuntimeError("server did not start: " + "".join(self.log))
        self.base = "http://127.0.0.1:%s" % m.group(1)
        until = time.time() + ready_timeout
        while True:
            try:
                with urllib.request.urlopen(self.base + "/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.time() > until:
                self.close()
                raise RuntimeError("server not ready: " + "".join(self.log))
            time.sleep(0.02)

    def post(self, route, body, timeout=120, key=None):
        """(status, parsed JSON body); key: a bearer token (--api-key, --admin-key)."""
        import json
        import urllib.error
        import urllib.request
        headers = {"content-type": "application/json"}
        if key:
            headers["authorization"] = "Bearer " + key
        req = urllib.request.Request(self.base + route, data=json.dumps(body).encode(), headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    def metric(self, name):
        """The value of a metric in /metrics with no label but model_name (every series carries it)."""
        import urllib.request
        with urllib.request.urlopen(self.base + "/metrics", timeout=30) as r:
            for line in r.read().decode().splitlines():
                series, _, value = line.rpartition(" ")
                if series == name or re.fullmatch(re.escape(name) + r'\{model_name="(?:[^"\\]|\\.)*"\}', series):
                    return float(value)
        raise KeyError(name)

    @property
    def pid(self):
        return self.proc.pid

    def close(self, timeout=60):
        """SIGTERM and wait; the exit status (0 after a clean drain; a sanitizer build reports leaks
        through it; negative if it had to be killed)."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.reader.join(5)
        return self.proc.returncode

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def main():
    """unittest.main that exits 1 on failure and 0 on success (never 77 after running tests)."""
    prog = unittest.main(exit=False, verbosity=2)
    sys.exit(0 if prog.result.wasSuccessful() else 1)
