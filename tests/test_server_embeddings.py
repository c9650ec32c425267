"""POST /v1/embeddings against a real `pith serve` of the default model (assets/default.gguf, no pooling
metadata: mean pooling): the response's shape (object list, one item per input with its index, model,
usage.prompt_tokens equal to /tokenize's count); every input form (a string, a list of strings, a list of
token ids, a list of lists) giving the same vector for the same tokens, whether batched together or
alone; unit length; base64 decoding to exactly the float vector; `dimensions` accepted when it is the
width and refused otherwise; and the errors (bad encoding_format, missing or empty input, token ids out
of range, an input longer than the context, an unknown model) as 4xx with the parameter named."""

import base64
import math
import struct
import sys

from pithtest import Server, pith_bin

pith_bin()  # skips with a reason when ctest did not name the binary

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def close(a, b, tol=1e-4):
    return len(a) == len(b) and max(abs(x - y) for x, y in zip(a, b)) < tol


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
    print("failures:", len(failures))
    return 1 if failures else 0


sys.exit(main())
