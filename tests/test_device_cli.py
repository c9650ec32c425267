"""Choosing the device from the command line (docs/vulkan.md), with the committed default model:

- `pith devices` lists the CPU with its kernel table, then the Vulkan devices or why there are none;
- a bad --device / -dev / PITH_DEVICE is a clear error: usage status 2 for the option (run, bench,
  serve), status 1 naming the variable for the environment;
- where a Vulkan device can run Pith: `pith run --device vulkan` (alone, and speculating with a draft
  model, which runs on the target's device) writes the CPU's greedy text (batch
  invariance holds across backends only up to float rounding, so the check is the text of a short
  greedy run, whose top-2 gaps are far above the ~1e-6 the two differ by), -dev and PITH_DEVICE do the
  same, `pith bench --device vulkan` prints the device's probes, and `pith serve --device vulkan`
  answers a completion (and one constrained by a grammar) and logs its device, and gives the same completion after a weight reload and
  after sleep and wake (the device's pools freed and allocated again, its recorded steps dropped);
- out of device memory (PITH_VK_MEMORY caps the heap): with every layer asked for (-ngl 99), weights or
  a KV pool that do not fit are refused at load with the sizes (status 1, never a crash), and the same
  model runs once they fit; without -ngl (auto, the default with a device) the model runs with what
  fits on the device, the rest on the CPU, says so, and writes the CPU's text."""
import json
import os
import re
import subprocess
import unittest
import urllib.error
import urllib.request

from pithtest import Server, main, pith_bin, run_pith

SRC = os.environ.get("PITH_SOURCE_DIR") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
MODEL = os.path.join(SRC, "assets", "default.gguf")
PROMPT = "And God said"


def devices():
    r = run_pith(["devices"])
    return r.returncode, r.stdout.decode()


def vulkan_device():
    """vulkan:N of the first device that can run pith, or None."""
    _, out = devices()
    for line in out.splitlines():
        m = re.match(r"(vulkan:\d+):", line)
        if m and "cannot run" not in line:
            return m.group(1)
    return None


def greedy(extra, env=None):
    e = dict(os.environ)
    e.pop("PITH_DEVICE", None)
    e.update(env or {})
    r = subprocess.run([pith_bin(), "run", "-m", MODEL, "-t", "1", "-p", PROMPT, "-n", "24", "--temp", "0"] + extra,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=e, timeout=300)
    return r.returncode, r.stdout.decode(), r.stderr.decode()


class Listing(unittest.TestCase):
    def test_devices(self):
        rc, out = devices()
        self.assertEqual(rc, 0, out)
        self.assertRegex(out.splitlines()[0], r"^cpu: \S+ kernels$")
        self.assertTrue(re.search(r"^vulkan:\d+: ", out, re.M) or "Vulkan" in out, out)

    def test_help(self):
        r = run_pith(["devices", "--help"])
        self.assertEqual(r.returncode, 0)
        self.assertIn(b"--device", r.stdout)
        self.assertEqual(run_pith(["devices", "extra"]).returncode, 2)


class BadDevice(unittest.TestCase):
    def test_option(self):
        for cmd in (["run", "-m", MODEL, "-p", "x"], ["bench", "-m", MODEL], ["serve", "-m", MODEL]):
            for opt in ("--device", "-dev"):
                for bad in ("gpu", "vulkan:x", "vulkan:", ""):
                    r = run_pith(cmd + [opt, bad], timeout=60)
                    self.assertEqual(r.returncode, 2, (cmd, opt, bad, r.stderr))
                    self.assertIn(b"device", r.stderr)

    def test_environment(self):
        rc, _, err = greedy([], env={"PITH_DEVICE": "tpu"})
        self.assertEqual(rc, 1, err)
        self.assertIn("unknown device \"tpu\"", err)

    def test_cpu(self):
        base = greedy([])
        self.assertEqual(base[0], 0, base[2])
        self.assertEqual(greedy(["--device", "cpu"])[1], base[1])
        self.assertEqual(greedy([], env={"PITH_DEVICE": "cpu"})[1], base[1])


@unittest.skipUnless(vulkan_device(), "no Vulkan device can run pith here")
class OnVulkan(unittest.TestCase):
    def test_run(self):
        cpu = greedy(["--device", "cpu"])
        self.assertEqual(cpu[0], 0, cpu[2])
        for extra, env in ((["--device", "vulkan"], None), (["-dev", vulkan_device()], None),
                           ([], {"PITH_DEVICE": "vulkan"}),
                           (["--device", "vulkan", "--spec-type", "draft", "-md", MODEL], None)):
            rc, out, err = greedy(extra, env)
            self.assertEqual(rc, 0, err)
            self.assertEqual(out, cpu[1], (extra, env))

    def test_out_of_memory(self):
        cpu_text = greedy(["--device", "cpu"])[1]
        rc, _, err = greedy(["--device", "vulkan", "-ngl", "99"], env={"PITH_VK_MEMORY": "4M"})
        self.assertEqual(rc, 1, err)
        self.assertRegex(err, r"tensor \S+ \([0-9.]+ MiB\): Vulkan: [0-9.]+ MiB do not fit on .*4\.0 MiB heap \(PITH_VK_MEMORY\)")
        rc, _, err = greedy(["--device", "vulkan", "-ngl", "99", "--kv-blocks", "20000"], env={"PITH_VK_MEMORY": "64M"})
        self.assertEqual(rc, 1, err)
        self.assertRegex(err, r"the KV pool of group 0 \(20000 blocks of 16 tokens, K and V [0-9.]+ MiB each\)")
        rc, out, err = greedy(["--device", "vulkan"], env={"PITH_VK_MEMORY": "64M"})
        self.assertEqual(rc, 0, err)
        self.assertEqual(out, cpu_text)
        self.assertRegex(err, r"-ngl auto: (\d+) of \1 layers on the device")
        # the default fits what it can: no layer (the CPU alone), or some of them (split)
        for cap, want in (("4M", r"-ngl auto: 0 of 4 layers on the device"),
                          ("32M", r"-ngl auto: [1-3] of 4 layers on the device .*; layers 0-\d on the CPU")):
            rc, out, err = greedy(["--device", "vulkan"], env={"PITH_VK_MEMORY": cap})
            self.assertEqual(rc, 0, err)
            self.assertEqual(out, cpu_text, cap)
            self.assertRegex(err, want, cap)
        rc, _, err = greedy(["--device", "vulkan"], env={"PITH_VK_MEMORY": "lots"})
        self.assertEqual(rc, 1, err)
        self.assertIn("PITH_VK_MEMORY=lots", err)
        e = dict(os.environ, PITH_VK_MEMORY="4M")
        r = subprocess.run([pith_bin(), "serve", "-m", MODEL, "--port", "0", "--device", "vulkan", "-ngl", "99"], env=e,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn(b"do not fit", r.stderr)

    def test_bench(self):
        r = run_pith(["bench", "-m", MODEL, "--device", "vulkan", "-p", "16", "-n", "4", "-r", "1", "-t", "1"])
        out = r.stdout.decode()
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("device: vulkan", out)
        self.assertRegex(out, r"\| pp16 \|")
        self.assertRegex(out, r"\| tg4 \|")
        r = run_pith(["bench", "-m", MODEL, "--device", "vulkan", "-p", "16", "-n", "4", "-r", "1", "-t", "1", "--json"])
        self.assertEqual(r.returncode, 0, r.stderr)
        rows = [json.loads(line) for line in r.stdout.decode().splitlines()]
        self.assertEqual([row["test"] for row in rows], ["pp16", "tg4"])
        for row in rows:
            self.assertEqual(row["device"], "vulkan")
            self.assertTrue(row["device_name"])
            self.assertGreater(row["bandwidth_gbs"], 0)
            self.assertAlmostEqual(row["ratio"], (row.get("achieved_gbs") or row.get("achieved_gops")) /
                                   (row["bandwidth_gbs"] if row["test"] == "tg4" else row["peak_gops"]), places=6)
        r = run_pith(["bench", "-m", MODEL, "--device", "vulkan", "--spec-type", "ngram", "-f", MODEL])
        self.assertEqual(r.returncode, 2)

    def test_serve(self):
        key = "device-test-key"

        def admin(s, what, body=None):
            req = urllib.request.Request(s.base + "/v1/admin/" + what, data=json.dumps(body or {}).encode(),
                                         headers={"content-type": "application/json", "authorization": "Bearer " + key})
            try:
                with urllib.request.urlopen(req, timeout=120) as r:
                    return r.status, json.loads(r.read())
            except urllib.error.HTTPError as e:
                return e.code, json.loads(e.read())

        with Server(["-m", MODEL, "-t", "1", "-c", "64", "--device", "vulkan", "--admin-key", key]) as s:
            def text():
                status, body = s.post("/v1/completions", {"prompt": PROMPT, "max_tokens": 8, "temperature": 0})
                self.assertEqual(status, 200, body)
                return body["choices"][0]["text"]
            first = text()
            self.assertTrue(first)
            # a grammar's token masks apply to the device's logits as to the CPU's
            status, body = s.post("/v1/completions", {"prompt": PROMPT, "max_tokens": 8, "temperature": 1,
                                                      "guided_choice": ["Moses", "Aaron"]})
            self.assertEqual(status, 200, body)
            self.assertIn(body["choices"][0]["text"], ("Moses", "Aaron"))
            self.assertTrue(any("device" in line and "vulkan" in line for line in s.log), "".join(s.log))
            status, body = admin(s, "reload", {"path": MODEL, "mode": "drain", "version": "again"})
            self.assertEqual((status, body.get("weight_version")), (200, "again"), body)
            self.assertEqual(text(), first)
            for what in ("pause", "sleep", "wake", "resume"):
                status, body = admin(s, what)
                self.assertEqual(status, 200, (what, body))
            self.assertEqual(text(), first)


if __name__ == "__main__":
    main()
