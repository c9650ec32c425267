"""POST /v1/embeddings against a real `pith serve` of the default model (assets/default.gguf, no pooling
metadata: mean pooling): the response's shape (object list, one item per input with its index, model,
usage.prompt_tokens equal to /tokenize's count); every input form (a string, a list of strings, a list of
token ids, a list of lists) giving the same vector for the same tokens, whether batched together or
alone; unit length; base64 decoding to exactly the float vector; `dimensions` accepted when it is the
width and refused otherwise; and the errors (bad encoding_format, missing or empty input, token ids out
of range, an input longer than the context, an unknown model) as 4xx with the parameter named.

Then a safetensors directory from tools/mkmodel.py with a sentence-transformers 1_Pooling/config.json
(issue 31, item 4): its cls pooling is honoured (every input's vector is then the BOS token's), the
config is read once when the weights load (replacing it by a FIFO changes nothing for the running
model), and a FIFO there when the weights load (a wake, a reload, a start) is refused without blocking:
the wake answers, embeddings answer 400 naming the file, generation goes on. Skipped without numpy."""

import base64
import json
import math
import os
import shutil
import struct
import sys
import tempfile
import urllib.error
import urllib.request

from pithtest import Server, pith_bin

pith_bin()  # skips with a reason when ctest did not name the binary

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def close(a, b, tol=1e-4):
    return len(a) == len(b) and max(abs(x - y) for x, y in zip(a, b)) < tol


KEY = "embed-admin-key"


def admin(base, what, body=None):
    req = urllib.request.Request(base + "/v1/admin/" + what, data=json.dumps(body or {}).encode(),
                                 headers={"content-type": "application/json", "authorization": "Bearer " + KEY})
    try:
        with urllib.request.urlopen(req, timeout=20) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())
    except OSError as e:
        return 0, repr(e)


def post(server, route, body):
    try:
        return server.post(route, body, timeout=20)
    except OSError as e:  # a handler blocked on the config (a FIFO) holds the others up: timed out
        return 0, {"error": {"message": repr(e)}}


def embed(server, text):
    return post(server, "/v1/embeddings", {"input": text})


def set_config(d, cfg):
    """1_Pooling/config.json as `cfg` (a dict), or a FIFO when cfg is None."""
    path = os.path.join(d, "1_Pooling", "config.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if os.path.lexists(path):
        os.remove(path)
    if cfg is None:
        os.mkfifo(path)
    else:
        with open(path, "w") as f:
            json.dump(cfg, f)


def pooling_config_checks():
    try:
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
        import mkmodel
    except ImportError as e:
        print(f"skipping the 1_Pooling checks: {e}")
        return
    scratch = os.environ.get("PITH_TEST_TMP")
    if scratch:
        os.makedirs(scratch, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="pith-embed-", dir=scratch)
    d = os.path.join(tmp, "st")
    mkmodel.write_safetensors(mkmodel.build_config("test-llama"), d, "F32", seed=1)
    cls = {"pooling_mode_cls_token": True, "pooling_mode_mean_tokens": False}
    set_config(d, cls)
    try:
        server = Server(["-m", d, "-t", "1", "--quiet", "--admin-key", KEY])
        try:
            st, a = embed(server, "hello there")
            st2, b = embed(server, "a different text")
            check(st == 200 and st2 == 200, f"cls model: {st} {st2}")
            if st == 200 and st2 == 200:  # cls: the BOS token's vector whatever follows (causal attention)
                check(close(a["data"][0]["embedding"], b["data"][0]["embedding"]), "cls pooling not honoured")
            set_config(d, None)
            st, c = embed(server, "hello there")
            check(st == 200 and close(c["data"][0]["embedding"], a["data"][0]["embedding"]),
                  f"the pooling config is read per request (a FIFO now): {st} {c}")
            st, r = admin(server.base, "sleep")
            check(st == 200, f"sleep: {st} {r}")
            st, r = admin(server.base, "wake")
            check(st == 200, f"wake with a FIFO for the pooling config: {st} {r}")
            st, e = embed(server, "hello there")
            msg = e.get("error", {}).get("message", "")
            check(st == 400 and "1_Pooling/config.json: not a regular file" in msg, f"FIFO config: {st} {e}")
            st, g = post(server, "/v1/completions", {"prompt": "hello", "max_tokens": 2})
            check(st == 200, f"generation after a wake with a FIFO config: {st} {g}")
            set_config(d, {"pooling_mode_mean_tokens": True})
            st, r = admin(server.base, "reload", {"path": d})
            check(st == 200, f"reload: {st} {r}")
            st, a = embed(server, "hello there")
            st2, b = embed(server, "a different text")
            check(st == 200 and st2 == 200 and not close(a["data"][0]["embedding"], b["data"][0]["embedding"], 1e-3),
                  f"mean pooling after the reload: {st} {st2}")
        finally:
            code = server.close()
        check(code == 0, f"exit status {code}: {''.join(server.log)[-2000:]}")
        set_config(d, None)
        server = Server(["-m", d, "-t", "1", "--quiet"])
        try:
            st, e = embed(server, "hello there")
            check(st == 400 and "not a regular file" in e.get("error", {}).get("message", ""), f"FIFO at start: {st} {e}")
            check("embeddings are unavailable" in "".join(server.log), "no warning at start: " + "".join(server.log))
        finally:
            code = server.close()
        check(code == 0, f"exit status {code}: {''.join(server.log)[-2000:]}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    server = Server(["-t", "1", "-c", "64"])
    base = server.base

    def post(_base, route, body):
        return server.post(route, body, timeout=30)

    try:
        st, one = post(base, "/v1/embeddings", {"input": "And God said"})
        check(st == 200, f"string input: {st} {one}")
        check(one.get("object") == "list" and len(one.get("data", [])) == 1, f"shape: {one}")
        d0 = one["data"][0]
        v = d0["embedding"]
        dim = len(v)
        check(d0.get("object") == "embedding" and d0.get("index") == 0 and dim > 0, f"item: {d0.keys()}")
        check(abs(math.sqrt(sum(x * x for x in v)) - 1) < 1e-5, "not unit length")
        check(isinstance(one.get("model"), str) and one["model"], "model name")
        st, tk = post(base, "/tokenize", {"prompt": "And God said"})
        ids = tk["tokens"]
        check(one["usage"]["prompt_tokens"] == len(ids) and one["usage"]["total_tokens"] == len(ids), f"usage {one['usage']}")

        st, many = post(base, "/v1/embeddings", {"input": ["In the beginning", "And God said", "Let there be light"]})
        check(st == 200 and [d["index"] for d in many["data"]] == [0, 1, 2], f"list of strings: {st}")
        check(close(many["data"][1]["embedding"], v), "batched vector differs from the one alone")
        check(not close(many["data"][0]["embedding"], v, 1e-3), "different inputs gave the same vector")

        st, byid = post(base, "/v1/embeddings", {"input": ids})
        check(st == 200 and close(byid["data"][0]["embedding"], v), "token ids differ from the string")
        st, lists = post(base, "/v1/embeddings", {"input": [ids, ids[:2]], "dimensions": dim, "encoding_format": "float"})
        check(st == 200 and len(lists["data"]) == 2 and close(lists["data"][0]["embedding"], v), f"list of lists: {st}")

        st, b = post(base, "/v1/embeddings", {"input": "And God said", "encoding_format": "base64"})
        check(st == 200 and isinstance(b["data"][0]["embedding"], str), f"base64: {st}")
        raw = base64.b64decode(b["data"][0]["embedding"])
        fl = list(struct.unpack("<%df" % (len(raw) // 4), raw))
        check(len(raw) == 4 * dim and fl == [struct.unpack("<f", struct.pack("<f", x))[0] for x in v],
              "base64 does not decode to the float vector")

        for body, status, param in [
            ({"input": "x", "dimensions": dim - 1}, 400, "dimensions"),
            ({"input": "x", "encoding_format": "int8"}, 400, "encoding_format"),
            ({}, 400, "input"),
            ({"input": []}, 400, "input"),
            ({"input": [[]]}, 400, "input"),
            ({"input": [10 ** 9]}, 400, "input"),
            ({"input": [{"a": 1}]}, 400, "input"),
            ({"input": [1] * 100}, 400, "input"),
            ({"input": "x", "model": "no-such-model"}, 404, None),
        ]:
            st, err = post(base, "/v1/embeddings", body)
            e = err.get("error", {})
            check(st == status and e.get("message") and (param is None or e.get("param") == param),
                  f"{body}: {st} {err}")
        st, err = post(base, "/v1/embeddings", {"input": ["ok", [1] * 100]})
        check(st == 400 and err["error"].get("code") == "context_length_exceeded" and "input 1" in err["error"]["message"],
              f"too long: {st} {err}")
        st, _ = post(base, "/v1/embeddings", {"input": "still serving"})
        check(st == 200, "server unwell after the errors")
    finally:
        code = server.close()
    check(code == 0, f"exit status {code}: {''.join(server.log)[-2000:]}")
    pooling_config_checks()
    print("failures:", len(failures))
    return 1 if failures else 0


sys.exit(main())
