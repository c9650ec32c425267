"""tools/soak.py: its checks classify answers correctly (a truncated stream, a missing choice or an
unfinished choice is a loss), and a short soak (PITH_SOAK_SECONDS, default 20) against a real
`pith serve` (PITH_BIN; a sanitizer build is detected and its leak report checked) passes: no request
lost, the server idle afterwards by /metrics, RSS flat after the warm-up, exit 0 after SIGTERM, with admin
transitions, oversized grammars and slow-header clients in the mix."""
import json
import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pithtest  # noqa: E402

SRC = os.environ.get("PITH_SOURCE_DIR") or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(SRC, "tools"))
import soak  # noqa: E402


class Checks(unittest.TestCase):
    def setUp(self):
        self.s = soak.Soak.__new__(soak.Soak)

    def test_stream_complete(self):
        b = {"n": 1, "stream": True}
        ev = [{"choices": [{"index": 0, "text": "a", "finish_reason": None}]},
              {"choices": [{"index": 0, "text": "", "finish_reason": "stop"}]}, "[DONE]"]
        self.assertEqual(self.s.check_stream(b, ev, True), ("ok", None))

    def test_stream_truncated_is_lost(self):
        b = {"n": 1, "stream": True}
        ev = [{"choices": [{"index": 0, "text": "a", "finish_reason": None}]}]
        self.assertEqual(self.s.check_stream(b, ev, False)[0], "lost")

    def test_stream_unfinished_choice_is_lost(self):
        b = {"n": 2, "stream": True}
        ev = [{"choices": [{"index": 0, "text": "", "finish_reason": "length"}]}, "[DONE]"]
        self.assertEqual(self.s.check_stream(b, ev, True)[0], "lost")

    def test_stream_usage_asked_and_missing_is_lost(self):
        b = {"stream": True, "stream_options": {"include_usage": True}}
        ev = [{"choices": [{"index": 0, "text": "", "finish_reason": "stop"}]}, "[DONE]"]
        self.assertEqual(self.s.check_stream(b, ev, True)[0], "lost")

    def test_stream_error_event(self):
        ev = [{"choices": [{"index": 0, "text": "a", "finish_reason": None}]},
              {"error": {"message": "server shutting down"}}]
        self.assertEqual(self.s.check_stream({}, ev, False)[0], "error")

    def test_json_answer(self):
        b = {"n": 2, "ignore_eos": True}
        good = {"choices": [{"text": "a", "finish_reason": "length"}] * 2, "usage": {"completion_tokens": 8}}
        self.assertIsNone(self.s.check_json_answer(b, json.dumps(good), False))
        one = dict(good, choices=good["choices"][:1])
        self.assertIsNotNone(self.s.check_json_answer(b, json.dumps(one), False))
        stopped = dict(good, choices=[{"text": "a", "finish_reason": "stop"}] * 2)
        self.assertIsNotNone(self.s.check_json_answer(b, json.dumps(stopped), False))
        self.assertIsNotNone(self.s.check_json_answer(b, "{\"choices\": ", False))

    def test_metrics_parse(self):
        m = soak.metrics_values('# HELP x y\npith_kv_blocks_in_use 3\npith_request_errors_total{code="400"} 2\n')
        self.assertEqual(m["pith_kv_blocks_in_use"], 3.0)
        self.assertEqual(m['pith_request_errors_total{code="400"}'], 2.0)
        # every series of a one-model server carries model_name: left out of the keys
        m = soak.metrics_values('pith_kv_blocks_in_use{model_name="m"} 4\n'
                                'pith_request_errors_total{model_name="a\\"b",code="404"} 5\n')
        self.assertEqual(m["pith_kv_blocks_in_use"], 4.0)
        self.assertEqual(m['pith_request_errors_total{code="404"}'], 5.0)


class ShortSoak(unittest.TestCase):
    def test_soak(self):
        pith = pithtest.pith_bin()
        seconds = os.environ.get("PITH_SOAK_SECONDS", "20")
        out = os.path.join(pithtest.tmp_dir(), "soak-%d.json" % os.getpid())
        r = subprocess.run([sys.executable, os.path.join(SRC, "tools", "soak.py"), "--pith", pith,
                            "--duration", seconds, "--json", out], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, timeout=900)
        sys.stderr.write(r.stderr)
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        rep = json.load(open(out))
        os.unlink(out)
        self.assertEqual(rep["failures"], [])
        self.assertEqual(rep["outcomes"].get("lost", 0), 0)
        self.assertGreater(rep["outcomes"].get("ok", 0), 0)
        self.assertGreater(rep["outcomes"].get("cut", 0), 0)
        self.assertEqual(rep["idle_after_load"], {"kv_blocks_in_use": 0, "requests_running": 0,
                                                  "requests_waiting": 0})
        self.assertEqual(rep["exit_status"], 0)
        # The pool is small enough that the load exhausts it: the test runs the preemption path.
        self.assertGreater(rep["preemptions"], 0)
        # The hostile mixes ran: admin transitions under load, grammars over the compiler's bound (400),
        # clients that never finish their headers (dropped at the deadline; a miss would be a loss above).
        kinds = rep["by_kind"]
        self.assertGreater(kinds.get("admin_sleep", {}).get("ok", 0) + kinds.get("admin_pause", {}).get("ok", 0), 0)
        self.assertGreater(kinds.get("big_grammar", {}).get("error", 0), 0)
        self.assertGreater(sum(kinds.get("slow_headers", {}).values()), 0)


if __name__ == "__main__":
    pithtest.main()
