"""Tensor and pipeline parallelism over MPI processes (`mpirun --oversubscribe -np N pith run --tp T --pp P`,
one thread per rank), end to end through the CLI; tests/test_dist_tp.c checks the same code with threads
as ranks, on every sharded architecture and the engine's features.

- --tp 2, --tp 4, --pp 2 and --tp 2 --pp 2 (Llama), --tp 2 (Gemma 3, Granite 4.0-H with experts), --tp 2
  and --pp 2 (Qwen3-MoE): the
  greedy text equals one process's, and every step's logits row (--logits-out) is within 5e-4 of one
  process's relative to the row's largest logit (test_dist_tp.c says why);
- a job of another size than --tp, --tp without mpirun, and a model that does not shard over 3 ranks: each exits 1
  with a message naming the problem, within the time bound, no rank left behind;
- a rank killed (SIGKILL) in the middle of a long generation ends the whole job with an error within
  30 s instead of hanging; a rank stopped (SIGSTOP) there ends it through the others' watchdog within
  PITH_TP_TIMEOUT plus 30 s, saying so;
- `pith serve --tp 2` answers as one process's server does, reloads weights (one process's text on the
  new ones), sleeps and wakes, and a SIGTERM to rank 0 drains: the request in flight completes and every rank exits 0;
- a rank of `pith serve --tp 2` killed with requests in flight: each gets a 503 saying a rank failed (a
  stream as its last event), and the job exits non-zero.

Skips with a reason where mpirun is missing or pith was built without MPI. As root, Open MPI needs
OMPI_ALLOW_RUN_AS_ROOT and its confirmation, which the test sets."""
import os
import signal
import subprocess
import threading
import time
import unittest

import numpy as np

from pithtest import Server, main, pith_bin, run_pith, skip, tmp_dir

SRC = os.environ.get("PITH_SOURCE_DIR") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
# Under the sanitizers (make asan-test) leak checking is off for the MPI processes: Open MPI's own
# components leave allocations at exit (from dlopen'ed modules that LSan cannot name, so no suppression
# matches them). Pith's side of the same code runs leak-checked in test_dist_tp, ranks as threads.
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1",
           ASAN_OPTIONS=":".join(filter(None, [os.environ.get("ASAN_OPTIONS"), "detect_leaks=0"])))
BOUND = 30  # seconds a failed job may take to end everywhere
DRAIN = 300  # seconds a drain may take: a generation of 3000 tokens, slow under the sanitizers


def mpirun():
    for d in os.environ.get("PATH", "/usr/bin").split(":"):
        if os.access(os.path.join(d, "mpirun"), os.X_OK):
            return os.path.join(d, "mpirun")
    return None


def model(preset, dtype="F32", ctx=None, seed=5):
    path = os.path.join(tmp_dir(), "mpi-%s-%s%s%s.gguf" % (preset, dtype, "-%d" % ctx if ctx else "",
                                                          "" if seed == 5 else "-s%d" % seed))
    if not os.path.exists(path):
        subprocess.run(["/usr/bin/python3", os.path.join(SRC, "tools", "mkmodel.py"), "--preset", preset,
                        "--dtype", dtype, "--seed", str(seed), "--out", path] + (["--ctx", str(ctx)] if ctx else []),
                       check=True, stdout=subprocess.DEVNULL)
    return path


def job(n, args, timeout=120):
    cmd = [mpirun(), "--oversubscribe", "-np", str(n), pith_bin()] + args
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout, env=ENV)


class TensorParallel(unittest.TestCase):
    def generate(self, path, tp=1, pp=1, extra=()):
        logits = os.path.join(tmp_dir(), "mpi-logits-%d-%d.f32" % (tp, pp))
        args = ["run", "-m", path, "-p", "The quick brown fox", "-n", "24", "--temp", "0", "-t", "1",
                "--ignore-eos", "--logits-out", logits]
        r = job(tp * pp, args + ["--tp", str(tp), "--pp", str(pp)] + list(extra)) if tp * pp > 1 else run_pith(args)
        self.assertEqual(r.returncode, 0, r.stderr.decode(errors="replace"))
        return r.stdout, np.fromfile(logits, dtype="<f4")

    def check_same(self, preset, layouts, extra=()):
        path = model(preset)
        text, ref = self.generate(path)
        self.assertGreater(ref.size, 0)
        for tp, pp in layouts:
            got_text, got = self.generate(path, tp, pp, extra)
            self.assertEqual(got_text, text, "--tp %d --pp %d: the greedy text differs" % (tp, pp))
            self.assertEqual(got.shape, ref.shape)
            vocab = ref.size // 24
            ref2, got2 = ref.reshape(24, vocab), got.reshape(24, vocab)
            rel = np.abs(got2 - ref2).max(axis=1) / np.abs(ref2).max(axis=1)
            self.assertLessEqual(rel.max(), 5e-4, "--tp %d --pp %d: logits differ by %.3g of the row's largest" %
                                 (tp, pp, rel.max()))
            print("%s --tp %d --pp %d over MPI: same text, logits within %.2g of one process's" % (preset, tp, pp,
                                                                                                 rel.max()))

    def test_llama_2_and_4_ranks(self):
        self.check_same("test-llama", [(2, 1), (4, 1), (1, 2), (2, 2)])

    def test_gemma3_2_ranks(self):
        self.check_same("test-gemma3", [(2, 1)])

    def test_moe_2_ranks(self):
        self.check_same("test-qwen3moe", [(2, 1), (1, 2)])

    def test_moe_experts_by_column(self):
        # --no-ep: every expert's hidden width split across the ranks instead of the experts
        self.check_same("test-qwen3moe", [(2, 1)], ["--no-ep"])

    def test_hybrid_2_ranks(self):
        # Granite 4.0-H with experts: Mamba2 heads split, its one B/C group whole on each rank, the gated
        # norm summed across ranks, the experts split by expert
        self.check_same("test-granitehybrid-moe", [(2, 1)])

    def test_refusals(self):
        path = model("test-llama")
        t = time.time()
        r = job(2, ["run", "-m", path, "-p", "x", "-n", "2", "--tp", "4"])
        self.assertEqual(r.returncode, 1)
        self.assertIn(b"--tp 4 --pp 1 in a job of 2 ranks", r.stderr)
        r = subprocess.run([pith_bin(), "run", "-m", path, "-p", "x", "-n", "2", "--tp", "2"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=120, env=ENV)
        self.assertEqual(r.returncode, 1)
        self.assertIn(b"--tp 2 --pp 1 in a job of 1 ranks", r.stderr)
        r = job(3, ["run", "-m", model("test-llama"), "-p", "x", "-n", "2", "--tp", "3"])
        self.assertNotEqual(r.returncode, 0)
        self.assertIn(b"the number of attention heads (4) does not divide by 3", r.stderr)
        self.assertLess(time.time() - t, 3 * BOUND)

    def test_killed_rank_ends_the_job(self):
        path = model("test-llama", ctx=131072)  # a generation that lasts minutes unless stopped
        cmd = [mpirun(), "--oversubscribe", "-np", "2", pith_bin(), "run", "-m", path, "-p", "Once", "-n", "-1",
               "--ignore-eos", "-t", "1", "--tp", "2"]
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=ENV)
        try:
            victim, deadline = None, time.time() + 30
            while victim is None and time.time() < deadline and p.poll() is None:
                victim = rank_pid(p.pid, 1)
                time.sleep(0.2)
            self.assertIsNotNone(victim, "rank 1 never started")
            time.sleep(1.0)  # mid-generation
            self.assertIsNone(p.poll(), "the job ended before a rank was killed")
            t = time.time()
            os.kill(victim, signal.SIGKILL)
            rc = p.wait(timeout=BOUND)
            took = time.time() - t
            self.assertNotEqual(rc, 0, "the job succeeded with a rank killed")
            print("a killed rank ended the job in %.1f s (exit %d)" % (took, rc))
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
            p.stderr.close()


class ServeTensorParallel(unittest.TestCase):
    def test_serve_drains_on_sigterm(self):
        """`mpirun -np 2 pith serve --tp 2`: the greedy text of one process's server; a weight reload (every
        rank its shard) gives one process's text on the new weights, a reload of a missing file 400 with the
        served weights running on, a sleep and a wake the same text again; SIGTERM to rank 0 with a request
        in flight: the request completes, every rank exits 0."""
        path, other = model("test-llama", ctx=131072), model("test-llama", ctx=131072, seed=6)
        body = {"prompt": "Once upon a time", "max_tokens": 24, "temperature": 0, "ignore_eos": True}
        want = []
        for p in (path, other):
            with Server(["-m", p, "-t", "1"]) as one:
                want.append(one.post("/v1/completions", body)[1]["choices"][0]["text"])
        self.assertNotEqual(want[0], want[1])
        srv = Server(["-m", path, "-t", "1", "--tp", "2", "--admin-key", "k", "--drain-timeout", str(DRAIN)], launcher=[mpirun(), "--oversubscribe", "-np", "2"],
                     env=ENV)
        try:
            status, got = srv.post("/v1/completions", body)
            self.assertEqual(status, 200, got)
            self.assertEqual(got["choices"][0]["text"], want[0])
            # a reload: every rank loads its shard of the new weights; then a sleep and a wake
            status, res = srv.post("/v1/admin/reload", {"path": other, "version": "v2"}, key="k")
            self.assertEqual(status, 200, res)
            status, got = srv.post("/v1/completions", body)
            self.assertEqual(got["choices"][0]["text"], want[1], "after the reload")
            status, res = srv.post("/v1/admin/reload", {"path": "/nonexistent.gguf"}, key="k")
            self.assertEqual(status, 400, res)
            status, res = srv.post("/v1/admin/sleep", {}, key="k")
            self.assertEqual(status, 200, res)
            status, res = srv.post("/v1/admin/wake", {}, key="k")
            self.assertEqual(status, 200, res)
            status, got = srv.post("/v1/completions", body)
            self.assertEqual(got["choices"][0]["text"], want[1], "after a sleep and a wake")
            rank0 = rank_pid(srv.pid, 0)
            self.assertIsNotNone(rank0)
            done = {}

            # long enough to be in flight at the signal (about a second here); the drain may take minutes
            # under the sanitizers with other tests beside it, which is why the waits below are long
            def long_request():
                done["r"] = srv.post("/v1/completions", dict(body, max_tokens=3000), timeout=DRAIN)

            t = threading.Thread(target=long_request)
            t.start()
            time.sleep(0.3)
            os.kill(rank0, signal.SIGTERM)
            t.join(DRAIN)
            self.assertEqual(done.get("r", (0,))[0], 200, "the request in flight was lost")
            self.assertEqual(done["r"][1]["usage"]["completion_tokens"], 3000)
            self.assertEqual(srv.proc.wait(DRAIN), 0, "".join(srv.log))
            self.assertTrue(any("draining" in line for line in srv.log))
        finally:
            if srv.proc.poll() is None:
                srv.proc.kill()
                srv.proc.wait()


class ServeRankDies(unittest.TestCase):
    def test_requests_in_flight_get_an_error(self):
        """`mpirun -np 2 pith serve --tp 2` with two requests in flight (one streamed) when rank 1 is killed:
        rank 0 finds it gone within 100 ms, before the launcher's SIGTERM and SIGKILL (a second apart)
        reach it, and both clients get a 503 naming the failure (the stream as its last event) rather than a
        connection reset; the job exits non-zero within the bound."""
        path = model("test-llama", ctx=131072)
        srv = Server(["-m", path, "-t", "1", "--tp", "2"], launcher=[mpirun(), "--oversubscribe", "-np", "2"], env=ENV)
        try:
            body = {"prompt": "Once upon a time", "max_tokens": 100000, "temperature": 0, "ignore_eos": True}
            got = {}

            def plain():
                got["plain"] = srv.post("/v1/completions", body, timeout=BOUND)

            def streamed():
                import http.client
                import json
                conn = http.client.HTTPConnection(srv.base[len("http://"):], timeout=BOUND)
                conn.request("POST", "/v1/completions", json.dumps(dict(body, stream=True)),
                             {"Content-Type": "application/json"})
                resp = conn.getresponse()
                got["stream"] = (resp.status, resp.read().decode(errors="replace"))
                conn.close()

            threads = [threading.Thread(target=plain), threading.Thread(target=streamed)]
            for t in threads:
                t.start()
            time.sleep(1.5)  # both generating
            victim = rank_pid(srv.pid, 1)
            self.assertIsNotNone(victim)
            t0 = time.time()
            os.kill(victim, signal.SIGKILL)
            for t in threads:
                t.join(BOUND)
            status, err = got.get("plain", (0, None))
            self.assertEqual(status, 503, err)
            self.assertIn("another rank of this tensor-parallel job failed", err["error"]["message"])
            self.assertIn("rank 1", err["error"]["message"])
            sstatus, text = got.get("stream", (0, ""))
            self.assertEqual(sstatus, 200)  # the stream had begun: its error is its last event
            self.assertIn("another rank of this tensor-parallel job failed", text)
            rc = srv.proc.wait(BOUND)
            self.assertNotEqual(rc, 0)
            print("a killed rank: both requests in flight answered with 503, the job ended in %.1f s (exit %d)" %
                  (time.time() - t0, rc))
        finally:
            if srv.proc.poll() is None:
                srv.proc.kill()
                srv.proc.wait()


class StoppedRank(unittest.TestCase):
    def test_stopped_rank_ends_the_job(self):
        """A rank that stops answering (SIGSTOP) mid-generation: the others' watchdog ends the job within
        PITH_TP_TIMEOUT (3 s here) plus the bound, with a message saying so."""
        path = model("test-llama", ctx=131072)
        cmd = [mpirun(), "--oversubscribe", "-np", "2", pith_bin(), "run", "-m", path, "-p", "Once", "-n", "-1",
               "--ignore-eos", "-t", "1", "--tp", "2"]
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=dict(ENV, PITH_TP_TIMEOUT="3"))
        victim = None
        try:
            deadline = time.time() + 30
            while victim is None and time.time() < deadline and p.poll() is None:
                victim = rank_pid(p.pid, 1)
                time.sleep(0.2)
            self.assertIsNotNone(victim, "rank 1 never started")
            time.sleep(1.0)
            self.assertIsNone(p.poll(), "the job ended before a rank was stopped")
            t = time.time()
            os.kill(victim, signal.SIGSTOP)
            rc = p.wait(timeout=3 + BOUND)
            took = time.time() - t
            err = p.stderr.read()
            self.assertNotEqual(rc, 0)
            self.assertIn(b"no answer from the other ranks", err)
            print("a stopped rank ended the job in %.1f s (PITH_TP_TIMEOUT=3, exit %d)" % (took, rc))
        finally:
            if victim:
                try:
                    os.kill(victim, signal.SIGCONT)
                    os.kill(victim, signal.SIGKILL)
                except OSError:
                    pass
            if p.poll() is None:
                p.kill()
                p.wait()
            p.stderr.close()


def rank_pid(root, rank):
    """The pid of the pith process of `rank` under the mpirun process `root`."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/environ" % pid, "rb") as f:
                env = f.read().split(b"\0")
            with open("/proc/%s/stat" % pid, "rb") as f:
                ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == root and b"OMPI_COMM_WORLD_RANK=%d" % rank in env:
            return int(pid)
    return None


if __name__ == "__main__":
    if not mpirun():
        skip("mpirun is not installed (Debian: openmpi-bin)")
    v = run_pith(["--version"]).stdout
    if b"mpi: yes" not in v:
        skip("this pith was built without MPI (Debian: libopenmpi-dev)")
    main()
