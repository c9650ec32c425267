#!/usr/bin/python3
"""`n` > 1 against a real `pith serve` of the default model (assets/default.gguf): the n choices of one
request share one prefill. Checks through /metrics that the prompt was computed once (computed tokens
grow by the prompt plus each choice's decode tokens), that choice i is what the same request with
n = 1 and seed + i gives, for completions and chat, streaming too, and that the choices differ."""
import json
import os
import unittest
import urllib.request

from pithtest import Server, pith_bin

N, T, SEED = 8, 10, 123
PROMPT = ("Once upon a time there was a little girl named Lily. She loved to play in the park with her dog. "
          "One day she saw a big red ball under a tree and ran to get it")


def sampling(**kw):
    d = {"max_tokens": T, "temperature": 0.9, "top_p": 1, "seed": SEED, "ignore_eos": True}
    d.update(kw)
    return d


def stream(base, route, body):
    req = urllib.request.Request(base + route, data=json.dumps(dict(body, stream=True)).encode(),
                                 headers={"content-type": "application/json"})
    texts = {}
    with urllib.request.urlopen(req, timeout=120) as r:
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            for c in json.loads(line[6:]).get("choices", []):
                piece = c.get("text") if "text" in c else (c.get("delta") or {}).get("content") or ""
                texts[c["index"]] = texts.get(c["index"], "") + (piece or "")
    return texts


class Fork(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        pith_bin()
        cls.srv = Server(["-t", "1", "-c", "256", "--max-num-seqs", "16"])

    @classmethod
    def tearDownClass(cls):
        cls.srv.close()

    def test_completions_computed_once(self):
        s = self.srv
        st, tk = s.post("/tokenize", {"prompt": PROMPT})
        self.assertEqual(st, 200)
        n_prompt = len(tk["tokens"])
        before = s.metric("pith_computed_tokens_total")
        forked = s.metric("pith_forked_sequences_total")
        st, many = s.post("/v1/completions", dict(sampling(n=N), prompt=PROMPT, cache_salt="fork-a"))
        self.assertEqual(st, 200, many)
        self.assertEqual(sorted(c["index"] for c in many["choices"]), list(range(N)))
        self.assertEqual(s.metric("pith_computed_tokens_total") - before, n_prompt + N * (T - 1))
        self.assertEqual(s.metric("pith_forked_sequences_total") - forked, N - 1)
        texts = {c["index"]: c["text"] for c in many["choices"]}
        self.assertGreater(len(set(texts.values())), 1, "choices with different seeds should differ")
        for i in (0, 3, N - 1):
            st, one = s.post("/v1/completions", dict(sampling(n=1, seed=SEED + i), prompt=PROMPT, cache_salt="fork-b"))
            self.assertEqual(st, 200, one)
            self.assertEqual(one["choices"][0]["text"], texts[i], i)
        got = stream(s.base, "/v1/completions", dict(sampling(n=N), prompt=PROMPT))
        self.assertEqual(got, texts)

    def test_chat(self):
        s = self.srv
        msgs = [{"role": "user", "content": PROMPT}]
        st, many = s.post("/v1/chat/completions", dict(sampling(n=4), messages=msgs))
        self.assertEqual(st, 200, many)
        texts = {c["index"]: c["message"]["content"] for c in many["choices"]}
        self.assertEqual(sorted(texts), [0, 1, 2, 3])
        for i in (0, 2):
            st, one = s.post("/v1/chat/completions", dict(sampling(n=1, seed=SEED + i), messages=msgs))
            self.assertEqual(one["choices"][0]["message"]["content"], texts[i], i)
        self.assertEqual(stream(s.base, "/v1/chat/completions", dict(sampling(n=4), messages=msgs)), texts)


if __name__ == "__main__":
    unittest.main()
