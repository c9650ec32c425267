"""RL serving against a real `pith serve` (docs/rl.md) on random-weight models from tools/mkmodel.py:

- token ids in and out: completions prompts as id lists (one, and a list of lists), chat's
  prompt_token_ids; return_token_ids gives back exactly the prompt ids, and token_ids that detokenize to
  the text, streamed (one id per chunk) as not;
- prompt_logprobs equal the float64 reference's log-softmax (tools/reference.py) of the row before each
  prompt token, the first entry null; tolerance 1e-4 with the F32 KV cache, the "float" case of
  docs/testing.md (f32 against f64 arithmetic, logits of standard deviation about 1);
- processed logprobs (logprobs_mode) equal a recomputation, from the raw top-20 logprobs of the same
  seeded request, of top-k, temperature, top-p and min-p renormalised; 1e-4 (float32 on both sides);
- hot reload under streaming load in each mode (drain to a GGUF of another seed, recompute back to the
  first, abort to a BF16 safetensors directory): no request lost (every one answered: 200, or 503
  "aborted" in abort mode only), each response carrying exactly one weight version (a streamed one
  after its last restart chunk), restarted requests carrying the new version and "restarted"; after a
  drain reload greedy outputs equal those of a fresh server on the new weights, and restarted ones
  those of the weights they restarted on; incompatible weights refused with serving unchanged;
- pause (drain, keep), resume, sleep and wake under load: held requests wait and then finish, RSS falls
  while asleep (by at least half the weights file), nothing lost; admin endpoints answer 403 without
  --admin-key and 401 with a wrong key; /metrics exports the version.

Needs /usr/bin/python3 with numpy and torch (skips otherwise)."""

import json
import math
import os
import re
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

from pithtest import SKIP, Server, pith_bin

pith_bin()  # skips with a reason when ctest did not name the binary
try:
    import numpy as np
    import torch  # noqa: F401
except ImportError as e:
    print(f"SKIP: {e.name} is not importable (the float64 reference and mkmodel need numpy and torch)")
    sys.exit(SKIP)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(HERE, "..", "tools"))
import mkmodel  # noqa: E402
import reference  # noqa: E402

KEY = "admin-secret"
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, flush=True)


def request(base, route, body=None, key=None, timeout=60):
    data = json.dumps(body if body is not None else {}).encode()
    headers = {"content-type": "application/json"}
    if key:
        headers["authorization"] = "Bearer " + key
    req = urllib.request.Request(base + route, data=data, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def admin(base, what, body=None, key=KEY):
    return request(base, "/v1/admin/" + what, body, key=key, timeout=120)


def stream(base, route, body, timeout=60):
    """The chunks of a streamed request, or an error object as the last one."""
    req = urllib.request.Request(base + route, data=json.dumps(dict(body, stream=True)).encode(),
                                 headers={"content-type": "application/json"})
    chunks = []
    with urllib.request.urlopen(req, timeout=timeout) as r:
        for line in r:
            line = line.decode().strip()
            if not line.startswith("data: "):
                continue
            if line == "data: [DONE]":
                break
            chunks.append(json.loads(line[6:]))
    return chunks


def serve(model, *extra):
    return Server(["-m", model, "-t", "1", "--max-num-seqs", "8", "--quiet", *extra])


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


PROMPTS = [[1, 17, 300, 42, 99, 5], [1, 400, 401, 402], [1, 7, 7, 7, 7, 7, 7, 7, 9, 1000], [1, 250]]


def greedy_ids(base, prompt, n=12):
    st, r = request(base, "/v1/completions", {"prompt": prompt, "max_tokens": n, "temperature": 0,
                                              "ignore_eos": True, "return_token_ids": True})
    check(st == 200, f"greedy request: {st} {r}")
    return r["choices"][0]["token_ids"] if st == 200 else None


def test_token_ids(base):
    st, r = request(base, "/v1/completions", {"prompt": PROMPTS[0], "max_tokens": 8, "temperature": 0,
                                              "ignore_eos": True, "return_token_ids": True})
    check(st == 200 and r["prompt_token_ids"] == PROMPTS[0], f"completions prompt_token_ids: {r}")
    ch = r["choices"][0]
    check(len(ch["token_ids"]) == 8 and ch["prompt_token_ids"] == PROMPTS[0], "completions token_ids")
    st, d = request(base, "/detokenize", {"tokens": ch["token_ids"]})
    check(st == 200 and d.get("prompt") == ch["text"], f"token_ids detokenize to the text: {d} vs {ch['text']!r}")
    # A list of lists: one choice per prompt, each with its own prompt ids.
    st, r2 = request(base, "/v1/completions", {"prompt": PROMPTS[:3], "max_tokens": 4, "temperature": 0,
                                               "ignore_eos": True, "return_token_ids": True})
    check(st == 200 and [c["prompt_token_ids"] for c in r2["choices"]] == PROMPTS[:3], "per-prompt prompt_token_ids")
    check("prompt_token_ids" not in r2, "no response-level prompt_token_ids for several prompts")
    # Chat with vLLM's prompt_token_ids: used as given.
    st, c = request(base, "/v1/chat/completions", {"messages": [{"role": "user", "content": "ignored"}],
                                                    "prompt_token_ids": PROMPTS[0], "max_tokens": 8,
                                                    "temperature": 0, "ignore_eos": True, "return_token_ids": True})
    check(st == 200 and c["prompt_token_ids"] == PROMPTS[0] and c["choices"][0]["token_ids"] == ch["token_ids"],
          f"chat prompt_token_ids round trip: {c}")
    # Streamed: one id per token chunk, the same ids.
    chunks = stream(base, "/v1/completions", {"prompt": PROMPTS[0], "max_tokens": 8, "temperature": 0,
                                              "ignore_eos": True, "return_token_ids": True})
    ids = [t for k in chunks for c in k["choices"] for t in c.get("token_ids", [])]
    check(ids == ch["token_ids"], f"streamed token_ids {ids} vs {ch['token_ids']}")
    check(chunks[0]["choices"][0].get("prompt_token_ids") == PROMPTS[0], "streamed prompt_token_ids on the first chunk")
    check(all(k.get("weight_version") == "a" and k.get("system_fingerprint") == "pith-a" for k in chunks), "chunk versions")
    st, bad = request(base, "/v1/chat/completions", {"messages": [], "prompt_token_ids": [1, 10 ** 6]})
    check(st == 400 and bad["error"]["param"] == "prompt_token_ids", "out-of-range prompt_token_ids refused")
    st, bad = request(base, "/v1/completions", {"prompt": [1, 2], "logprobs_mode": "raw_logits"})
    check(st == 400 and bad["error"]["param"] == "logprobs_mode", "unknown logprobs_mode refused")


def test_prompt_logprobs(base, model_path):
    prompt = PROMPTS[2] + [33, 77, 500]
    st, r = request(base, "/v1/completions", {"prompt": prompt, "max_tokens": 1, "temperature": 0,
                                              "prompt_logprobs": 3})
    check(st == 200, f"prompt_logprobs request: {r}")
    plp = r["choices"][0]["prompt_logprobs"]
    ref = reference.forward(reference.Model(model_path), prompt).numpy()
    lsm = ref - np.log(np.exp(ref - ref.max(1, keepdims=True)).sum(1, keepdims=True)) - ref.max(1, keepdims=True)
    check(plp[0] is None and len(plp) == len(prompt), "prompt_logprobs: null first, one per prompt token")
    worst = 0.0
    for i in range(1, len(prompt)):
        entry = plp[i]
        got = entry[str(prompt[i])]["logprob"]
        worst = max(worst, abs(got - lsm[i - 1][prompt[i]]))
        order = np.argsort(-lsm[i - 1])
        check(entry[str(prompt[i])]["rank"] == 1 + int((lsm[i - 1] > lsm[i - 1][prompt[i]]).sum()), f"rank at {i}")
        tops = sorted((v["rank"], int(k), v["logprob"]) for k, v in entry.items() if v["rank"] <= 3)
        for rank, tok, lp in tops:
            check(abs(lp - lsm[i - 1][tok]) < 1e-4 and tok == order[rank - 1], f"alternative of rank {rank} at {i}")
    print(f"prompt_logprobs: max |error| against the float64 reference {worst:.2e} (tolerance 1e-4)")
    check(worst < 1e-4, f"prompt logprobs off by {worst}")
    # Chat: on the response object; the same values.
    st, c = request(base, "/v1/chat/completions", {"messages": [], "prompt_token_ids": prompt, "max_tokens": 1,
                                                    "prompt_logprobs": 0})
    check(st == 200 and c["prompt_logprobs"][0] is None and
          abs(c["prompt_logprobs"][3][str(prompt[3])]["logprob"] - plp[3][str(prompt[3])]["logprob"]) < 1e-6,
          "chat prompt_logprobs")


def processed_from_raw(raw_sorted, T, top_k, top_p, min_p):
    """The kept distribution (logprobs, best first) from the raw logprobs sorted best first."""
    x = raw_sorted[:top_k]
    p = [math.exp((v - x[0]) / T) for v in x]
    s = sum(p)
    p = [v / s for v in p]
    cum, keep = 0.0, len(p)
    for i, v in enumerate(p):
        cum += v
        if cum >= top_p:
            keep = i + 1
            break
    p = p[:keep]
    k = 1
    while k < len(p) and p[k] >= p[0] * min_p:
        k += 1
    p = p[:k]
    s = sum(p)
    return [math.log(v / s) for v in p]


def test_processed_logprobs(base):
    T, K, P, M = 0.7, 8, 0.9, 0.05
    body = {"messages": [], "prompt_token_ids": PROMPTS[0], "max_tokens": 16, "temperature": T, "top_k": K,
            "top_p": P, "min_p": M, "seed": 1234, "logprobs": True, "ignore_eos": True}
    st, raw = request(base, "/v1/chat/completions", dict(body, top_logprobs=20, return_token_ids=True))
    st2, pro = request(base, "/v1/chat/completions", dict(body, top_logprobs=K, logprobs_mode="processed_logprobs",
                                                          return_token_ids=True))
    check(st == 200 and st2 == 200, "processed logprobs requests")
    check(raw["choices"][0]["token_ids"] == pro["choices"][0]["token_ids"], "same seed, same tokens in both modes")
    worst, cut = 0.0, 0
    for a, b in zip(raw["choices"][0]["logprobs"]["content"], pro["choices"][0]["logprobs"]["content"]):
        raws = [t["logprob"] for t in a["top_logprobs"]]
        want = processed_from_raw(raws, T, K, P, M)
        idx = min(range(len(raws)), key=lambda i: abs(raws[i] - a["logprob"]))
        check(idx < len(want), "the sampled token is inside the processed distribution")
        if idx < len(want):
            worst = max(worst, abs(b["logprob"] - want[idx]))
        got = [t["logprob"] for t in b["top_logprobs"]]
        check(len(got) == len(want), f"processed alternatives: {len(got)} vs {len(want)}")
        worst = max([worst] + [abs(x - y) for x, y in zip(got, want)])
        cut += len(want) < K
    print(f"processed logprobs: max |error| against the recomputation {worst:.2e} (tolerance 1e-4); "
          f"{cut} of 16 positions cut below top_k by top-p / min-p")
    check(worst < 1e-4, f"processed logprobs off by {worst}")


class Load:
    """Workers sending greedy requests (streamed and not, some long) until stopped; every outcome kept."""

    def __init__(self, base, workers=4):
        self.base, self.stop, self.results, self.lock = base, threading.Event(), [], threading.Lock()
        self.threads = [threading.Thread(target=self.run, args=(i,), daemon=True) for i in range(workers)]
        for t in self.threads:
            t.start()

    def run(self, i):
        k = 0
        while not self.stop.is_set():
            prompt = PROMPTS[(i + k) % len(PROMPTS)]
            n = 60 if (i + k) % 3 == 0 else 12
            body = {"prompt": prompt, "max_tokens": n, "temperature": 0, "ignore_eos": True, "return_token_ids": True}
            rec = {"prompt": prompt, "n": n, "stream": k % 2 == 1}
            try:
                if rec["stream"]:
                    chunks = stream(self.base, "/v1/completions", body)
                    last_restart = max([j for j, c in enumerate(chunks) if c.get("choices") and c["choices"][0].get("restarted")],
                                       default=-1)
                    rec["restarted"] = last_restart >= 0
                    after = chunks[last_restart + 1:]
                    if after and "error" in after[-1]:
                        rec["status"] = after[-1]["error"].get("code")
                    else:
                        rec["status"] = 200
                        rec["versions"] = {c.get("weight_version") for c in after}
                        rec["ids"] = [t for c in after for ch in c.get("choices", []) for t in ch.get("token_ids", [])]
                else:
                    st, r = request(self.base, "/v1/completions", body)
                    rec["status"] = 200 if st == 200 else r["error"].get("code")
                    if st == 200:
                        rec["versions"] = {r["weight_version"]}
                        rec["fingerprint"] = r["system_fingerprint"]
                        rec["ids"] = r["choices"][0]["token_ids"]
                        rec["restarted"] = bool(r["choices"][0].get("restarted"))
            except Exception as e:  # a lost request
                rec["status"] = "exception: %r" % e
            rec["t"] = time.time()
            with self.lock:
                self.results.append(rec)
            k += 1

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join(120)
        check(not any(t.is_alive() for t in self.threads), "load workers finished")
        return self.results


def wait_results(load, n):
    until = time.time() + 60
    while len(load.results) < n and time.time() < until:
        time.sleep(0.02)


def main():
    scratch = os.environ.get("PITH_TEST_TMP")
    if scratch:
        os.makedirs(scratch, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="pith-rl-", dir=scratch)
    cfg = mkmodel.build_config("test-llama", dim=256, layers=4, ffn=768, vocab=2048, ctx=1024)
    a_path, b_path = os.path.join(tmp, "a.gguf"), os.path.join(tmp, "b.gguf")
    b_st = os.path.join(tmp, "b-bf16")
    mkmodel.write_gguf(cfg, a_path, "F32", seed=1)
    mkmodel.write_gguf(cfg, b_path, "F32", seed=2)
    mkmodel.write_safetensors(cfg, b_st, "BF16", seed=3)
    other = os.path.join(tmp, "other.gguf")
    mkmodel.write_gguf(mkmodel.build_config("test-llama", vocab=2048), other, "F32", seed=4)

    # Fresh servers for the reference outputs (the B one also shows admin disabled without a key).
    pb = serve(b_path)
    base_b = pb.base
    want_b = [greedy_ids(base_b, p) for p in PROMPTS]
    st, r = admin(base_b, "pause")
    check(st == 403 and r["error"]["code"] == "admin_disabled", f"no --admin-key: 403 ({st})")
    check(pb.close() == 0, "the fresh server exits 0")

    p = serve(a_path, "--admin-key", KEY, "--weight-version", "a", "--kv-f32")
    base = p.base
    try:
        want_a = [greedy_ids(base, q) for q in PROMPTS]
        check(want_a != want_b, "the two seeds give different greedy outputs")
        test_token_ids(base)
        test_prompt_logprobs(base, a_path)
        test_processed_logprobs(base)
        st, _ = admin(base, "pause", key="wrong")
        check(st == 401, f"wrong admin key: {st}")

        st, r = admin(base, "reload", {"path": other, "mode": "drain"})
        check(st == 400 and r["error"]["code"] == "incompatible_weights", f"incompatible weights refused: {st} {r}")

        load = Load(base)
        wait_results(load, 6)
        reloads = []
        for mode, path, label in (("drain", b_path, "b"), ("recompute", a_path, "a2"), ("abort", b_st, "c")):
            time.sleep(0.3)
            t = time.time()
            st, r = admin(base, "reload", {"path": path, "mode": mode, "version": label})
            check(st == 200 and r["weight_version"] == label, f"reload {mode}: {st} {r}")
            reloads.append((mode, label, t, time.time(), r))
            print(f"reload {mode}: load {r.get('load_s', 0):.3f} s, admission paused {r.get('paused_s', 0):.3f} s, "
                  f"{r.get('restarted')} restarted, {r.get('aborted')} aborted")
            if mode == "recompute" and st == 200:
                # Let the restarted requests finish before the abort reload (a slow build may still be
                # running them then, and they would be aborted).
                until = time.time() + 120
                while time.time() < until:
                    with load.lock:
                        done = sum(1 for rec in load.results if rec.get("restarted"))
                    if done >= r.get("restarted", 0):
                        break
                    time.sleep(0.05)
            if mode == "drain":
                got_b = [greedy_ids(base, q) for q in PROMPTS]
                check(got_b == want_b, "after a drain reload, greedy outputs equal a fresh server's on the new weights")
        time.sleep(0.3)
        results = load.finish()
        abort_t = (reloads[2][2], reloads[2][3])
        weights_of = {"a": want_a, "a2": want_a, "b": want_b}
        n_restarted = 0
        for rec in results:
            if rec["status"] != 200:
                ok = rec["status"] == "aborted" and abort_t[0] - 1 <= rec["t"] and rec["t"] <= abort_t[1] + 60
                check(ok, f"a request failed outside an abort reload: {rec['status']}")
                continue
            vs = rec["versions"]
            check(len(vs) == 1, f"one version per response: {vs}")
            v = next(iter(vs))
            if "fingerprint" in rec:
                check(rec["fingerprint"] == "pith-" + v, "system_fingerprint is pith-<version>")
            if v in weights_of:
                want = weights_of[v][PROMPTS.index(rec["prompt"])]
                check(rec["ids"][:len(want)] == want[:rec["n"]], f"output on weights {v} equals a fresh server's")
            if rec["restarted"]:
                n_restarted += 1
                check(v == "a2", f"restarted requests carry the recompute reload's version, not {v}")
        n_aborted = sum(1 for rec in results if rec["status"] == "aborted")
        print(f"load: {len(results)} requests during the reloads, {n_restarted} restarted, {n_aborted} aborted, "
              f"none lost")
        check(n_restarted > 0, "some request restarted in recompute mode")
        check(reloads[1][4].get("restarted", 0) > 0, "the recompute reload reports restarts")

        # Pause (drain) under load, a request held while paused, resume; sleep and wake.
        load = Load(base, workers=3)
        wait_results(load, 3)
        st, r = admin(base, "pause", {"mode": "drain"})
        check(st == 200 and r["paused"] and r["running"] == 0, f"pause drain: {r}")
        held = {}
        th = threading.Thread(target=lambda: held.update(r=request(base, "/v1/completions", {"prompt": PROMPTS[1], "max_tokens": 4})))
        th.start()
        time.sleep(0.4)
        check(th.is_alive(), "a request sent while paused waits")
        st, r = admin(base, "resume")
        th.join(60)
        check(st == 200 and not r["paused"] and held.get("r", (0,))[0] == 200, "resume: the held request finishes")
        st, r = admin(base, "pause", {"mode": "keep"})
        check(st == 200 and r["paused"], "pause keep")
        rss_awake = rss_kb(p.pid)
        st, r = admin(base, "sleep")
        rss_asleep = rss_kb(p.pid)
        size_kb = sum(os.path.getsize(os.path.join(b_st, f)) for f in os.listdir(b_st) if f.endswith(".safetensors")) // 1024
        print(f"sleep: RSS {rss_awake} kB awake, {rss_asleep} kB asleep (weights file {size_kb} kB)")
        check(st == 200 and r["asleep"], f"sleep: {r}")
        with open(pith_bin(), "rb") as f:
            sanitized = b"__asan_init" in f.read()
        if sanitized:
            # ASan keeps freed memory in its quarantine and allocator caches: RSS says nothing there
            print("sleep: RSS check not made under AddressSanitizer (freed memory stays in its quarantine)")
        else:
            check(rss_asleep < rss_awake - size_kb // 2, "RSS falls while asleep by at least half the weights")
        st, r = admin(base, "wake")
        check(st == 200 and not r["asleep"] and r["paused"], f"wake keeps the pause: {r}")
        st, r = admin(base, "resume")
        check(st == 200 and not r["paused"], "resume after wake")
        time.sleep(0.3)
        results = load.finish()
        check(all(rec["status"] == 200 for rec in results), "pause / sleep / wake lose nothing: " +
              str([rec["status"] for rec in results if rec["status"] != 200][:3]))
        check(all(len(rec["versions"]) == 1 for rec in results if rec["status"] == 200), "one version each")
        st, r = admin(base, "abort")
        check(st == 200 and "aborted" in r, "abort answers")
        with urllib.request.urlopen(base + "/v1/models", timeout=10) as mr:
            models = json.loads(mr.read())
        check(models["data"][0].get("weight_version") == "c", f"/v1/models names the served version: {models}")
        st, emb = request(base, "/v1/embeddings", {"input": [PROMPTS[0]]})
        check(st == 200 and emb.get("weight_version") == "c", f"embeddings carry the version: {st}")
        with urllib.request.urlopen(base + "/metrics", timeout=10) as mr:
            metrics = mr.read().decode()
        check(re.search(r'^pith_weight_version_info\{model_name="[^"]*",version="c"\} 1$', metrics, re.M) and
              re.search(r'^pith_weight_reloads_total\{model_name="[^"]*"\} 3$', metrics, re.M),
              "metrics export the version and the reloads")
    finally:
        code = p.close()
    check(code == 0, f"the server exits 0 after SIGTERM (got {code})")
    if failures:
        print("server log tail:\n" + "".join(p.log[-20:]))
        print(f"{len(failures)} failure(s)")
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
