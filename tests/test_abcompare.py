"""scripts/abcompare, without building two revisions: its command line, the parsing of `pith bench --json`
and the statistics on canned output; a whole A/A run with the built pith as both sides (binaries are not
built, and the bench is tiny: a few seconds); failures (a bench that fails or prints nothing, a revision
git does not know, a build that fails) and their exit statuses; and, in a throwaway clone of this
repository, that the temporary worktrees are gone after a failed build and after SIGTERM mid-build."""
import importlib.machinery
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

from pithtest import main, tmp_dir

SRC = os.environ.get("PITH_SOURCE_DIR") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
SCRIPT = os.path.join(SRC, "scripts", "abcompare")

loader = importlib.machinery.SourceFileLoader("abcompare", SCRIPT)
spec = importlib.util.spec_from_loader("abcompare", loader)
ab = importlib.util.module_from_spec(spec)
loader.exec_module(ab)

# What `pith bench --json -t 1,2 -p 16 -n 4` prints (two lines trimmed of fields abcompare ignores),
# with progress lines such as the table mode's mixed in, which must be skipped.
CANNED = """\
{"model":"/m/a.gguf","format":"F16","threads":1,"test":"pp16","n_tokens":16,"depth":0,"repetitions":2,\
"tokens_per_s":14460.68,"stddev":4154.1,"median_tokens_per_s":14000.5,"samples_ts":[11523.2,17398.0],\
"bandwidth_gbs":95.24,"bandwidth_before_gbs":94.85,"bandwidth_after_gbs":95.63,"ratio":0.73,"cpu_share":0.999}
pith bench: warming up
{"model":"/m/a.gguf","format":"F16","threads":1,"test":"tg4","n_tokens":4,"depth":0,"repetitions":2,\
"tokens_per_s":4884.05,"stddev":1644.9,"median_tokens_per_s":4884.05,"bandwidth_gbs":95.59,"cpu_share":1.0}
not json {
{"model":"/m/a.gguf","format":"F16","threads":2,"test":"tg4","n_tokens":4,"depth":4096,"repetitions":2,\
"tokens_per_s":8120.8,"bandwidth_gbs":135.4,"cpu_share":0.5}
{"model":"/m/a.gguf","threads":2,"test":"spec","prompt_index":0,"tokens_per_s":30.0,"spec_tokens_per_s":45.0,\
"bandwidth_gbs":50.0,"cpu_share":0.98,"spec_cpu_share":0.97}
{"model":"/m/a.gguf","threads":2,"test":"spec-total","tokens_per_s":31.0,"spec_tokens_per_s":44.0,\
"bandwidth_gbs":50.0,"cpu_share":0.98,"spec_cpu_share":0.97}
"""


def run_ab(args, cwd=None, env=None, timeout=300):
    return subprocess.run([sys.executable, SCRIPT] + args, cwd=cwd, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, timeout=timeout)


def fake_pith(name, body):
    """An executable standing in for pith: a shell script with body."""
    path = os.path.join(tmp_dir(), "abcompare-" + name)
    with open(path, "w") as f:
        f.write("#!/bin/sh\n" + body + "\n")
    os.chmod(path, 0o755)
    return path


def result(test, tps, threads=1, bw=50.0, cpu=1.0):
    return {"test": test, "threads": threads, "tps": tps, "bw": bw, "cpu": cpu}


class Parsing(unittest.TestCase):
    def test_help(self):
        r = run_ab(["--help"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("usage: scripts/abcompare", r.stdout)
        self.assertIn("head/base", r.stdout)

    def test_args(self):
        o = ab.parse_args(["-R", "5", "--order", "ab", "main", "-j", "2", "--",
                           "-m", "a.gguf", "-p", "64", "--model", "b.gguf", "--json", "-t", "1,2"])
        self.assertEqual((o["base"], o["head"], o["rounds"], o["order"], o["jobs"]), ("main", "HEAD", 5, "ab", 2))
        self.assertEqual(o["models"], ["a.gguf", "b.gguf"])
        self.assertEqual(o["bench_args"], ["-p", "64", "-t", "1,2"])  # --json dropped, -m taken out
        o = ab.parse_args(["HEAD~1", "."])
        self.assertEqual((o["base"], o["head"], o["models"], o["bench_args"]), ("HEAD~1", ".", [], []))
        self.assertTrue(ab.parse_args(["main", "--help"])["help"])
        for bad in ([], ["a", "b", "c"], ["-R", "0", "main"], ["-R", "x", "main"], ["--order", "ba", "main"],
                    ["main", "-p", "16"], ["main", "--", "-m"], ["main", "--", "-m", "a", "-m", "a"], ["main", "-R"]):
            with self.assertRaises(ab.Failure, msg=bad) as cm:
                ab.parse_args(bad)
            self.assertEqual(cm.exception.status, ab.EXIT_USAGE)

    def test_bench_json(self):
        rs = ab.parse_bench_json(CANNED)
        self.assertEqual([(r["threads"], r["test"]) for r in rs],
                         [(1, "pp16"), (1, "tg4"), (2, "tg4 @ d4096"), (2, "spec p0 plain"), (2, "spec p0 spec"),
                          (2, "spec-total plain"), (2, "spec-total spec")])
        self.assertEqual(rs[0]["tps"], 14000.5)  # the median, where the JSON has one
        self.assertEqual(rs[2]["tps"], 8120.8)  # else the mean
        self.assertEqual((rs[0]["bw"], rs[0]["cpu"]), (95.24, 0.999))
        self.assertEqual((rs[4]["tps"], rs[4]["cpu"]), (45.0, 0.97))
        with self.assertRaises(ValueError):
            ab.parse_bench_json("| model | format |\n|---|---|\n")

    def test_median(self):
        self.assertEqual(ab.median([3, 1, 2]), 2)
        self.assertEqual(ab.median([4, 1, 3, 2]), 2.5)
        self.assertIsNone(ab.median([]))

    def test_summary(self):
        # Three rounds, two tests; base 100/110/90 pp, head 105/99/99: ratios 1.05, 0.90, 1.10.
        runs = []
        for k, (b, h) in enumerate([(100, 105), (110, 99), (90, 99)]):
            runs.append({"round": k, "side": "base", "model": "/m/a.gguf",
                         "results": [result("pp16", b, bw=40 + k), result("tg4", 10.0)]})
            runs.append({"round": k, "side": "head", "model": "/m/a.gguf",
                         "results": [result("pp16", h, bw=60, cpu=0.5), result("tg4", 12.0)]})
        rows = ab.summarize(runs, 3)
        self.assertEqual([r["test"] for r in rows], ["pp16", "tg4"])
        pp = rows[0]
        self.assertEqual((pp["base_median"], pp["head_median"]), (100, 99))
        self.assertAlmostEqual(pp["ratio_min"], 0.9)
        self.assertAlmostEqual(pp["ratio_median"], 1.05)
        self.assertAlmostEqual(pp["ratio_max"], 1.1)
        self.assertEqual((pp["faster"], pp["pairs"]), (2, 3))
        self.assertEqual(pp["base_bw"], [40, 41, 42])
        self.assertAlmostEqual(rows[1]["ratio_median"], 1.2)
        text = ab.format_report(rows, ["/m/a.gguf"], 3, "abba")
        self.assertIn("| a.gguf | 1 | pp16 | 100.00 | 99.00 | 0.900 | 1.050 | 1.100 | 2/3 | 40.0-42.0 | 60.0 |", text)
        self.assertIn("| a.gguf | 1 | pp16 | 2 | head, base | 110.00 | 41.0 | 100 | 99.00 | 60.0 | 50 ! | 0.900 |", text)
        self.assertIn("!: CPU share under 90 %", text)

    def test_summary_missing(self):
        # A test only the head prints (a new test type): listed, no ratio, and a note says so.
        runs = [{"round": 0, "side": "base", "model": "m", "results": [result("pp16", 1.0)]},
                {"round": 0, "side": "head", "model": "m", "results": [result("pp16", 2.0), result("tg4", 3.0)]}]
        rows = ab.summarize(runs, 1)
        self.assertEqual((rows[1]["ratio_median"], rows[1]["pairs"]), (None, 0))
        text = ab.format_report(rows, ["m"], 1, "ab")
        self.assertIn("only the head side printed this test", text)

    def test_model_labels(self):
        self.assertEqual(ab.model_labels(["/x/a.gguf", "/y/a.gguf", "/y/b.gguf"]),
                         {"/x/a.gguf": "/x/a.gguf", "/y/a.gguf": "/y/a.gguf", "/y/b.gguf": "b.gguf"})


class Runs(unittest.TestCase):
    def test_aa_run_with_binaries(self):
        """The built pith as both sides (a path with a '/': used as it is), two models, two rounds."""
        pith = os.environ.get("PITH_BIN")
        if not pith or not os.path.exists(pith):
            self.skipTest("PITH_BIN is not set (run through ctest)")
        model = os.path.join(SRC, "assets", "default.gguf")
        if not os.path.exists(model):
            self.skipTest("no assets/default.gguf")
        other = os.path.join(tmp_dir(), "abcompare-second.gguf")
        shutil.copyfile(model, other)
        out = os.path.join(tmp_dir(), "abcompare-out.json")
        pith = os.path.abspath(pith)
        r = run_ab([pith, pith, "-R", "2", "--json-out", out, "--",
                    "-m", model, "-m", other, "-p", "8", "-n", "2", "-r", "1", "--bw-mib", "8", "-t", "1",
                    "--no-warmup"])
        self.assertEqual(r.returncode, 0, r.stderr)
        for name in ("default.gguf", "abcompare-second.gguf"):
            for test in ("pp8", "tg2"):
                self.assertIn("| %s | 1 | %s | " % (name, test), r.stdout)
        self.assertIn("run 8/8: round 2, base, abcompare-second.gguf", r.stderr)  # abba: base last in round 2
        with open(out) as f:
            j = json.load(f)
        self.assertEqual(len(j["runs"]), 8)
        self.assertEqual([(x["round"], x["side"]) for x in j["runs"][:4]],
                         [(0, "base"), (0, "head"), (0, "base"), (0, "head")])
        self.assertEqual(len(j["summary"]), 4)
        for row in j["summary"]:
            self.assertEqual(row["pairs"], 2)
            self.assertGreater(row["ratio_median"], 0)

    def test_bench_failures(self):
        failing = fake_pith("failing", 'echo "pith bench: -p 9999 needs more positions" >&2; exit 2')
        r = run_ab([failing, failing, "-R", "1", "--", "-p", "9999"])
        self.assertEqual(r.returncode, ab.EXIT_BENCH, r.stderr)
        self.assertIn("pith bench failed on the base side (exit status 2)", r.stderr)
        self.assertIn("needs more positions", r.stderr)
        silent = fake_pith("silent", 'echo "| a table, not JSON |"')
        r = run_ab([silent, silent, "-R", "1"])
        self.assertEqual(r.returncode, ab.EXIT_BENCH, r.stderr)
        self.assertIn("printed no JSON results", r.stderr)
        r = run_ab([silent, silent, "--", "-m", "/nonexistent/model.gguf"])
        self.assertEqual(r.returncode, ab.EXIT_USAGE, r.stderr)
        self.assertIn("does not exist", r.stderr)


class Worktrees(unittest.TestCase):
    """In a throwaway clone, so that this repository's worktree list is never touched."""

    @classmethod
    def setUpClass(cls):
        if shutil.which("git") is None:
            raise unittest.SkipTest("git is not installed")
        if subprocess.run(["git", "-C", SRC, "rev-parse", "HEAD"], stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL).returncode:
            raise unittest.SkipTest("the source is not a git checkout")
        cls.dir = tempfile.mkdtemp(prefix="abcompare-test-", dir=tmp_dir())
        cls.repo = os.path.join(cls.dir, "repo")
        subprocess.run(["git", "clone", "-q", SRC, cls.repo], check=True)
        subprocess.run(["git", "-C", cls.repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q",
                        "--allow-empty", "-m", "second"], check=True)
        cls.tmp = os.path.join(cls.dir, "tmp")  # abcompare's TMPDIR: what it leaves there shows

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    def setUp(self):
        os.makedirs(self.tmp, exist_ok=True)
        self.env = dict(os.environ, TMPDIR=self.tmp)

    def assertClean(self):
        wt = subprocess.run(["git", "-C", self.repo, "worktree", "list", "--porcelain"], stdout=subprocess.PIPE,
                            universal_newlines=True, check=True).stdout
        self.assertEqual(wt.count("worktree "), 1, wt)
        self.assertEqual([n for n in os.listdir(self.tmp) if n.startswith("abcompare-")], [])
        for pid in os.listdir("/proc"):  # no cmake or compiler left running in the temporary directory
            try:
                with open("/proc/%s/cmdline" % pid, "rb") as f:
                    self.assertNotIn(self.tmp.encode(), f.read(), pid)
            except OSError:
                pass

    def test_interrupted_worktree_forgotten(self):
        """A worktree whose directory went without git knowing (what an interrupted `git worktree add`
        can leave): cleanup deletes git's record of it, and only of worktrees under its directory."""
        tmp = tempfile.mkdtemp(prefix="abcompare-", dir=self.tmp)
        other = tempfile.mkdtemp(prefix="other-", dir=self.dir)
        for d in (os.path.join(tmp, "base"), os.path.join(other, "keep")):
            subprocess.run(["git", "-C", self.repo, "worktree", "add", "--detach", "--quiet", d, "HEAD"], check=True)
            shutil.rmtree(d)
        ab.cleanup(self.repo, tmp, False)
        listed = subprocess.run(["git", "-C", self.repo, "worktree", "list", "--porcelain"], stdout=subprocess.PIPE,
                                universal_newlines=True, check=True).stdout
        self.assertNotIn(os.path.join(tmp, "base"), listed)
        self.assertIn(os.path.join(other, "keep"), listed)  # not ours: left to git worktree prune
        subprocess.run(["git", "-C", self.repo, "worktree", "prune"], check=True)
        self.assertClean()

    def test_bad_revision(self):
        r = run_ab(["no-such-branch"], cwd=self.repo, env=self.env)
        self.assertEqual(r.returncode, ab.EXIT_USAGE, r.stderr)
        self.assertIn("'no-such-branch' is not a revision", r.stderr)
        self.assertClean()

    def test_build_failure_cleans_up(self):
        env = dict(self.env, CC="/bin/false")  # CMake's compiler check fails at once
        r = run_ab(["HEAD~1", "HEAD", "-j", "1"], cwd=self.repo, env=env)
        self.assertEqual(r.returncode, ab.EXIT_BUILD, r.stderr)
        self.assertIn("building base", r.stderr)
        self.assertIn("failed", r.stderr)
        self.assertClean()

    def test_sigterm_cleans_up(self):
        p = subprocess.Popen([sys.executable, SCRIPT, "HEAD~1", "HEAD", "-j", "1"], cwd=self.repo, env=self.env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
        # Wait for the build to start (CMake made its directory), then end it.
        until = time.time() + 60
        while time.time() < until and p.poll() is None:
            if any(n.startswith("abcompare-") and os.path.isdir(os.path.join(self.tmp, n, "base-build"))
                   for n in os.listdir(self.tmp)):
                break
            time.sleep(0.05)
        time.sleep(0.5)
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=60)
        self.assertEqual(p.returncode, 130, err)
        self.assertIn("building base", err)  # it was interrupted mid-build
        self.assertIn("interrupted", err)
        self.assertClean()


if __name__ == "__main__":
    main()
