#!/usr/bin/python3
"""llama.cpp's extra samplers (DRY, XTC, typical-p, top-n-sigma) against a reference written here
independently, in plain Python float64, from llama.cpp's definitions (src/llama-sampling.cpp) and Pith's
documented order (include/pith/sampler.h): penalties, DRY, then top-n-sigma, top-k, temperature,
softmax, typical-p, top-p, min-p, XTC. The reference DRY is the brute-force definition (for every earlier
position the longest run of the window's last tokens ending there, found by direct comparison), not a
Z-function as in src/sample/dry.c.

Each case goes through `test_sampler_llamacpp --case` (the C test binary beside pith), which samples once
with recording on and prints the row after penalties and DRY and the recorded distribution.
Tolerances: DRY logits agree to 1e-6 relative (both round the penalty to float as llama.cpp does);
the recorded distribution must hold the same tokens and log-probabilities within 2e-4 (relative beyond
1; Pith's softmax is float32); cases where a filter's decision lies within 1e-4 of its threshold (where float32 and float64
may rightly disagree) are skipped and counted, and at most a tenth may be.

Then end to end on the default model (assets/default.gguf): `pith run` with --top-nsigma tiny at
temperature 1 writes the greedy text, a large --dry-multiplier changes a repetitive greedy text, bad
values exit 2; `pith serve` with the same through /v1/completions and /v1/chat/completions fields, and
400s naming each out-of-range parameter."""
import math
import os
import random
import struct
import subprocess
import unittest

from pithtest import Server, pith_bin, run_pith

SRC = os.environ.get("PITH_SOURCE_DIR") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
MODEL = os.path.join(SRC, "assets", "default.gguf")
EPS = 1e-4


def f32(x):
    return struct.unpack("f", struct.pack("f", x))[0]


def helper():
    return os.path.join(os.path.dirname(pith_bin()), "test_sampler_llamacpp")


class Close(Exception):
    """A filter's decision within EPS of its threshold: the case is skipped."""


def near_threshold(a, b):
    if abs(a - b) <= EPS * max(1.0, abs(b)):
        raise Close()


def ref_penalties(row, hist, rep, pres, freq):
    counts = {}
    for t in hist:
        if 0 <= t < len(row):
            counts[t] = counts.get(t, 0) + 1
    for t, c in counts.items():
        l = row[t]
        if rep != 1.0:
            l = f32(l / rep) if l > 0 else f32(l * rep)
        row[t] = f32(l - f32(c * freq + pres))


def ref_dry(row, hist, mult, base, allowed, last_n, restarts):
    """llama.cpp's DRY by its definition. restarts: lists of ids, head first."""
    if mult == 0 or base < 1 or last_n == 0:
        return
    w = len(hist) if last_n < 0 else min(last_n, len(hist))
    win = hist[len(hist) - w:]
    if w <= allowed:
        return
    # the most recent position where a restart sequence starts and fits in the window: the repeat
    # may reach back only over the tokens after its end (the longest such sequence at that position)
    limit = w
    for j in range(w - 1, -1, -1):
        best = -1
        for seq in restarts:
            if j + len(seq) <= w and win[j:j + len(seq)] == seq:
                best = max(best, len(seq) - 1)
        if best >= 0:
            limit = (w - 1 - j) - best
            break
    if limit < allowed:
        return
    longest = {}
    for e in range(w - 1):  # a run ending at e, followed by win[e + 1]
        n = 0
        while n <= e and win[e - n] == win[w - 1 - n]:
            n += 1
        n = min(n, limit)
        if n >= allowed:
            t = win[e + 1]
            longest[t] = max(longest.get(t, -1), n)
    single = {seq[0] for seq in restarts if len(seq) == 1}
    max_exp = int(f32(f32(88.7228391) / f32(math.log(base)))) if base > 1.000001 else 0
    for t, n in longest.items():
        if t in single or not (0 <= t < len(row)):
            continue
        e = n - allowed
        if max_exp > 0 and e > max_exp:
            e = max_exp
        row[t] = f32(row[t] - f32(mult * base ** e))


def ref_filters(row, p):
    """The recorded distribution at temperature > 0: {id: probability}."""
    cand = [(i, l) for i, l in enumerate(row) if l != -math.inf and not math.isnan(l)]
    if p["top_n_sigma"] > 0:
        ls = [l for _, l in cand]
        mx = max(ls)
        mean = sum(ls) / len(ls)
        sd = math.sqrt(sum((l - mean) ** 2 for l in ls) / len(ls))
        floor = mx - p["top_n_sigma"] * sd
        for _, l in cand:
            if l != mx:
                near_threshold(l, floor)
        cand = [(i, l) for i, l in cand if l >= floor]
    cand.sort(key=lambda c: (-c[1], c[0]))
    k = p["top_k"]
    if 0 < k < len(row) and k < len(cand):
        near_threshold(cand[k - 1][1], cand[k][1])
        cand = cand[:k]
    mx = cand[0][1]
    es = [math.exp((l - mx) / p["temp"]) for _, l in cand]
    tot = sum(es)
    probs = [(i, e / tot) for (i, _), e in zip(cand, es)]  # best first

    def renorm(ps):
        s = sum(q for _, q in ps)
        return [(i, q / s) for i, q in ps]

    if 0 < p["typical"] < 1:
        h = -sum(q * math.log(q) for _, q in probs if q > 0)
        scored = sorted(probs, key=lambda c: (abs(-math.log(c[1]) - h) if c[1] > 0 else math.inf, -c[1], c[0]))
        cum, keep = 0.0, []
        for i, q in scored:
            keep.append((i, q))
            cum += q
            near_threshold(cum, p["typical"])
            if cum > p["typical"]:
                break
        ss = [abs(-math.log(q) - h) for _, q in scored if q > 0]
        for a, b in zip(ss, ss[1:]):
            near_threshold(a, b)
        probs = renorm(sorted(keep, key=lambda c: (-c[1], c[0])))
    if p["top_p"] < 1:
        cum = 0.0
        for n, (_, q) in enumerate(probs):
            cum += q
            near_threshold(cum, p["top_p"])
            if cum >= p["top_p"]:
                probs = probs[:n + 1]
                break
    if p["min_p"] > 0:
        floor = probs[0][1] * p["min_p"]
        for _, q in probs[1:]:
            near_threshold(q, floor)
        probs = [c for c in probs if c[1] >= floor]
    if p["xtc_p"] >= 1 and p["xtc_t"] <= 0.5 and len(probs) >= 2:
        probs = renorm(probs)
        above = 0
        for _, q in probs:
            near_threshold(q, p["xtc_t"])
            if q < p["xtc_t"]:
                break
            above += 1
        if above >= 2:
            probs = probs[above - 1:]
    return dict(renorm(probs))


def run_case(row, hist, p, restarts):
    head = [p["temp"], p["top_k"], p["top_p"], p["min_p"], p["rep"], p["pres"], p["freq"], p["dry_mult"],
            p["dry_base"], p["dry_allowed"], p["dry_last_n"], p["xtc_p"], p["xtc_t"], p["typical"],
            p["top_n_sigma"], p["seed"]]
    text = " ".join(repr(x) for x in head) + "\n%d\n" % len(row)
    text += " ".join("-inf" if l == -math.inf else repr(l) for l in row) + "\n"
    text += "%d %s\n%d\n" % (len(hist), " ".join(map(str, hist)), len(restarts))
    text += "".join("%d %s\n" % (len(s), " ".join(map(str, s))) for s in restarts)
    r = subprocess.run([helper(), "--case"], input=text.encode(), stdout=subprocess.PIPE, timeout=60)
    assert r.returncode == 0, r
    lines = r.stdout.decode().splitlines()
    assert not lines[0].startswith("error"), lines[0]
    tok = int(lines[0].split()[1])
    out_row = [float(x) for x in lines[1].split()[1:]]
    n = int(lines[2].split()[1])
    dist = {int(a): float(b) for a, b in (l.split() for l in lines[3:3 + n])}
    return tok, out_row, dist


def defaults(**kw):
    p = dict(temp=1.0, top_k=0, top_p=1.0, min_p=0.0, rep=1.0, pres=0.0, freq=0.0, dry_mult=0.0, dry_base=1.75,
             dry_allowed=2, dry_last_n=-1, xtc_p=0.0, xtc_t=0.1, typical=1.0, top_n_sigma=-1.0, seed=7)
    p.update(kw)
    return p


def repetitive_history(rng, v, n):
    """Runs copied from earlier in the history, so that DRY has repeats of every length to find."""
    h = [rng.randrange(v) for _ in range(4)]
    while len(h) < n:
        if rng.random() < 0.6 and len(h) > 4:
            a = rng.randrange(len(h) - 2)
            h += h[a:a + rng.randint(1, 8)]
        else:
            h.append(rng.randrange(v))
    return h[:n]


class Reference(unittest.TestCase):
    def test_dry_against_reference(self):
        if not os.path.exists(helper()):
            self.skipTest("no test_sampler_llamacpp beside pith")
        rng = random.Random(1)
        for case in range(150):
            v = rng.choice([6, 12, 40])
            hist = repetitive_history(rng, v, rng.randint(0, 120))
            restarts = []
            for _ in range(rng.choice([0, 0, 1, 2, 3])):
                restarts.append([rng.randrange(v) for _ in range(rng.choice([1, 1, 2, 3]))])
            p = defaults(temp=0.0, dry_mult=rng.choice([0.0, 0.8, 2.5]), dry_base=rng.choice([1.0, 1.75, 3.0, 100.0]),
                         dry_allowed=rng.choice([0, 1, 2, 4]), dry_last_n=rng.choice([-1, 0, 5, 17, 64]),
                         rep=rng.choice([1.0, 1.3]), pres=rng.choice([0.0, 0.4]), freq=rng.choice([0.0, 0.2]))
            row = [f32(rng.gauss(0, 3)) for _ in range(v)]
            _, out, dist = run_case(row, hist, p, restarts)
            want = list(row)
            ref_penalties(want, hist, p["rep"], p["pres"], p["freq"])
            ref_dry(want, hist, p["dry_mult"], p["dry_base"], p["dry_allowed"], p["dry_last_n"], restarts)
            for i in range(v):
                if math.isinf(want[i]):
                    self.assertEqual(out[i], want[i], (case, i))
                else:
                    self.assertLessEqual(abs(out[i] - want[i]), 1e-6 * max(1.0, abs(want[i])), (case, i, p, hist, restarts))
            # greedy records the log-softmax of that row
            fin = [x for x in want if not math.isinf(x)]
            if fin and max(fin) < 1e30:
                mx = max(fin)
                lse = mx + math.log(sum(math.exp(x - mx) for x in fin))
                for i, lp in dist.items():
                    self.assertLess(abs(lp - (want[i] - lse)), 2e-4 * max(1.0, abs(want[i] - lse)), (case, i))

    def test_filters_against_reference(self):
        if not os.path.exists(helper()):
            self.skipTest("no test_sampler_llamacpp beside pith")
        rng = random.Random(2)
        skipped = n = 0
        for case in range(400):
            v = rng.choice([5, 30, 300])
            row = [f32(rng.gauss(0, rng.choice([1.0, 3.0]))) for _ in range(v)]
            if rng.random() < 0.2:
                for _ in range(v // 5):
                    row[rng.randrange(v)] = -math.inf
            if all(math.isinf(x) for x in row):
                continue
            xtc = rng.random() < 0.3
            p = defaults(temp=rng.choice([0.5, 1.0, 1.7]), top_k=rng.choice([0, 0, 3, 20]),
                         top_p=rng.choice([1.0, 1.0, 0.9, 0.6]), min_p=rng.choice([0.0, 0.0, 0.05, 0.2]),
                         typical=rng.choice([1.0, 1.0, 0.9, 0.5, 0.2]), top_n_sigma=rng.choice([-1.0, 0.0, 0.5, 1.0, 2.5]),
                         xtc_p=1.0 if xtc else 0.0, xtc_t=rng.choice([0.02, 0.1, 0.2, 0.3]), seed=case)
            hist = []
            if rng.random() < 0.3:  # DRY in front of the filters
                hist = repetitive_history(rng, v, 60)
                p["dry_mult"] = 0.5
            want_row = list(row)
            ref_dry(want_row, hist, p["dry_mult"], p["dry_base"], p["dry_allowed"], p["dry_last_n"], [])
            try:
                want = ref_filters(want_row, p)
            except Close:
                skipped += 1
                continue
            n += 1
            tok, _, dist = run_case(row, hist, p, [])
            dist = {i: lp for i, lp in dist.items() if lp != -math.inf}  # -inf logits, recorded as such
            self.assertEqual(sorted(dist), sorted(want), (case, p))
            self.assertIn(tok, want)
            for i, q in want.items():
                self.assertLess(abs(dist[i] - math.log(q)), 2e-4, (case, i, p))
        self.assertLessEqual(skipped, 40, "too many borderline cases")
        self.assertGreater(n, 300)

    def test_xtc_probability_one(self):
        """XTC at probability 1: of the tokens at or above the threshold all but the least likely go; with
        fewer than two above it nothing changes."""
        if not os.path.exists(helper()):
            self.skipTest("no test_sampler_llamacpp beside pith")
        probs = [0.35, 0.25, 0.15, 0.12, 0.08, 0.05]
        row = [f32(math.log(q)) for q in probs]
        for t, kept in [(0.1, [3, 4, 5]), (0.2, [1, 2, 3, 4, 5]), (0.3, list(range(6))), (0.04, [5]), (0.6, list(range(6)))]:
            _, _, dist = run_case(row, [], defaults(xtc_p=1.0, xtc_t=t), [])
            self.assertEqual(sorted(dist), kept, t)


class EndToEnd(unittest.TestCase):
    PROMPT = "And God said"

    def run_text(self, *extra):
        r = run_pith(["run", "-m", MODEL, "-t", "1", "-p", self.PROMPT, "-n", "40"] + list(extra))
        self.assertEqual(r.returncode, 0, r.stderr)
        return r.stdout.decode()

    def test_cli(self):
        greedy = self.run_text("--temp", "0")
        sigma = self.run_text("--temp", "1", "--top-k", "0", "--top-p", "1", "--min-p", "0", "--top-nsigma", "0.0001", "-s", "3")
        self.assertEqual(sigma, greedy)
        free = self.run_text("--temp", "1", "--top-k", "0", "--top-p", "1", "--min-p", "0", "-s", "3")
        self.assertNotEqual(free, greedy)  # the filter did the work
        dry = self.run_text("--temp", "0", "--dry-multiplier", "3")
        self.assertNotEqual(dry, greedy)
        self.assertEqual(self.run_text("--temp", "0", "--dry-multiplier", "0"), greedy)
        # breakers reach it (resolved against the model's vocabulary): with nearly every token a breaker
        # ("e", " ", "a", "o", "t" are in most pieces) no repeat reaches the allowed length
        br = []
        for b in ("e", " ", "a", "o", "t"):
            br += ["--dry-sequence-breaker", b]
        self.assertEqual(self.run_text("--temp", "0", "--dry-multiplier", "3", *br), greedy)
        self.assertEqual(self.run_text("--temp", "0", "--dry-multiplier", "3", "--dry-sequence-breaker", "none"), dry)
        for bad in (["--xtc-probability", "1.5"], ["--typical", "0"], ["--top-nsigma", "101"], ["--dry-base", "0.5"],
                    ["--dry-penalty-last-n", "-2"], ["--dry-allowed-length", "-1"], ["--dry-sequence-breaker", ""]):
            r = run_pith(["run", "-m", MODEL, "-n", "1"] + bad)
            self.assertEqual(r.returncode, 2, bad)
        r = run_pith(["run", "--help"])
        for flag in ("--dry-multiplier", "--dry-base", "--dry-allowed-length", "--dry-penalty-last-n",
                     "--dry-sequence-breaker", "--xtc-probability", "--xtc-threshold", "--typical", "--top-nsigma"):
            self.assertIn(flag, r.stdout.decode())
        # XTC at probability 1 with threshold 0 leaves one token: the least likely of all
        xa = self.run_text("--temp", "1", "--xtc-probability", "1", "--xtc-threshold", "0", "-s", "1")
        xb = self.run_text("--temp", "1", "--xtc-probability", "1", "--xtc-threshold", "0", "-s", "2")
        self.assertEqual(xa, xb)

    def test_server(self):
        with Server(["-m", MODEL, "-t", "1"]) as srv:
            def complete(**kw):
                body = dict(prompt=self.PROMPT, max_tokens=32, seed=3)
                body.update(kw)
                st, r = srv.post("/v1/completions", body)
                self.assertEqual(st, 200, r)
                return r["choices"][0]["text"]

            greedy = complete(temperature=0)
            self.assertEqual(complete(temperature=1, top_n_sigma=0.0001), greedy)
            self.assertNotEqual(complete(temperature=1), greedy)
            self.assertNotEqual(complete(temperature=0, dry_multiplier=3), greedy)
            self.assertEqual(complete(temperature=0, dry_multiplier=3, dry_penalty_last_n=0), greedy)
            self.assertEqual(complete(temperature=0, dry_multiplier=3, dry_sequence_breakers=["e", " ", "a", "o", "t"]),
                             greedy)
            self.assertEqual(complete(temperature=0, dry_multiplier=3, dry_sequence_breakers=[]),
                             complete(temperature=0, dry_multiplier=3))
            a = complete(temperature=1, xtc_probability=1, xtc_threshold=0, seed=1)
            self.assertEqual(complete(temperature=1, xtc_probability=1, xtc_threshold=0, seed=2), a)
            self.assertEqual(complete(temperature=1, typical_p=1e-6, seed=1), complete(temperature=1, typical_p=1e-6, seed=2))
            st, r = srv.post("/v1/chat/completions", dict(messages=[{"role": "user", "content": "Hi"}], max_tokens=8,
                                                          temperature=0, dry_multiplier=1, typical_p=0.9, top_n_sigma=1,
                                                          xtc_probability=0.5, xtc_threshold=0.2))
            self.assertEqual(st, 200, r)
            for field, value in [("dry_multiplier", -1), ("dry_base", 0.5), ("dry_allowed_length", -1),
                                 ("dry_penalty_last_n", -2), ("dry_sequence_breakers", [1]),
                                 ("dry_sequence_breakers", "x"), ("dry_sequence_breakers", [""]),
                                 ("xtc_probability", 1.5), ("xtc_threshold", -0.5), ("typical_p", 0),
                                 ("typical_p", 2), ("top_n_sigma", 101), ("dry_allowed_length", 1.5)]:
                for route, extra in (("/v1/completions", dict(prompt="x")),
                                     ("/v1/chat/completions", dict(messages=[{"role": "user", "content": "x"}]))):
                    body = dict(extra, max_tokens=1)
                    body[field] = value
                    st, r = srv.post(route, body)
                    self.assertEqual(st, 400, (route, field, value, r))
                    self.assertEqual(r["error"]["param"], field)


if __name__ == "__main__":
    from pithtest import main
    main()
