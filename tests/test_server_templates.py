"""Where `pith serve` finds a model's chat template, checked against a real server process: the GGUF's
tokenizer.chat_template; a Hugging Face directory's tokenizer_config.json (string, or a list of named
templates where "default" wins) and chat_template.jinja (which takes precedence); ChatML when the model
has none or when its template cannot be compiled. Each case renders a conversation through /tokenize
and compares the ids with those of the text the template must produce, tokenized directly."""

import json
import os
import re
import sys
import tempfile
import urllib.error
import urllib.request

SKIP = 77
sys.dont_write_bytecode = True
here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "tools"))
try:
    import mkmodel  # noqa: E402  (needs numpy)
    import pith_gguf as G  # noqa: E402
except ImportError as e:
    print(f"SKIP: the model writer cannot be imported ({e})")
    sys.exit(SKIP)

from pithtest import Server, pith_bin  # noqa: E402

pith_bin()  # skips with a reason when ctest did not name the binary

failures = []
MESSAGES = [{"role": "system", "content": "Be kind."}, {"role": "user", "content": "Hello there"}]
# [role]content per message, then "<gen>" for the generation prompt: easy to write down the expected text.
TEMPLATE = "{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}{% if add_generation_prompt %}<gen>{% endif %}"
OTHER = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
EXPECTED = "[system]Be kind.[user]Hello there<gen>"
CHATML = "<|im_start|>system\nBe kind.<|im_end|>\n<|im_start|>user\nHello there<|im_end|>\n<|im_start|>assistant\n"


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def post(base, route, body):
    req = urllib.request.Request(base + route, data=json.dumps(body).encode(), headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=20) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def case(what, args, expected_text, log_pattern=None):
    server = Server(["-t", "1", *args])
    base = server.base
    try:
        st, via_template = post(base, "/tokenize", {"messages": MESSAGES})
        check(st == 200, f"{what}: /tokenize messages gave {st} {via_template}")
        st, direct = post(base, "/tokenize", {"prompt": expected_text})
        check(st == 200, f"{what}: /tokenize prompt gave {st}")
        check(via_template.get("tokens") == direct.get("tokens"),
              f"{what}: the template rendered something else than {expected_text!r}")
        st, chat = post(base, "/v1/chat/completions", {"messages": MESSAGES, "max_tokens": 3, "temperature": 0})
        check(st == 200 and chat["usage"]["prompt_tokens"] == direct.get("count"), f"{what}: chat {st} {chat}")
    finally:
        code = server.close(timeout=20)
    check(code == 0, f"{what}: exit status {code}")
    text = "".join(server.log)
    if log_pattern:
        check(re.search(log_pattern, text) is not None, f"{what}: log lacks /{log_pattern}/:\n{text}")


def gguf_with_template(path, template):
    original = G.GGUFWriter.write

    def write(self):
        if template is not None:
            self.add_str("tokenizer.chat_template", template)
        original(self)

    G.GGUFWriter.write = write
    try:
        mkmodel.write_gguf(mkmodel.build_config("test-llama"), path)
    finally:
        G.GGUFWriter.write = original


with tempfile.TemporaryDirectory(dir=os.environ.get("PITH_TEST_TMP")) as tmp:
    g = os.path.join(tmp, "with-template.gguf")
    gguf_with_template(g, TEMPLATE)
    case("GGUF tokenizer.chat_template", ["-m", g], EXPECTED)

    bad = os.path.join(tmp, "bad-template.gguf")
    gguf_with_template(bad, "{% for m in messages %}{{ m.content | no_such_filter }}{% endfor %}")
    case("uncompilable template falls back to ChatML", ["-m", bad], CHATML, r"cannot be used .*ChatML")

    none = os.path.join(tmp, "no-template.gguf")
    gguf_with_template(none, None)
    case("no template: ChatML", ["-m", none], CHATML, r"no chat template")
    override = os.path.join(tmp, "override.jinja")
    with open(override, "w") as f:
        f.write(TEMPLATE)
    case("--chat-template overrides", ["-m", bad, "--chat-template", override], EXPECTED)

    hf = os.path.join(tmp, "hf")
    mkmodel.write_safetensors(mkmodel.build_config("test-llama"), hf)
    with open(os.path.join(hf, "tokenizer_config.json"), "w") as f:
        json.dump({"chat_template": [{"name": "tool_use", "template": OTHER}, {"name": "default", "template": TEMPLATE}]}, f)
    case("tokenizer_config.json, named templates", ["-m", hf], EXPECTED)
    with open(os.path.join(hf, "tokenizer_config.json"), "w") as f:
        json.dump({"chat_template": TEMPLATE}, f)
    case("tokenizer_config.json, one template", ["-m", hf], EXPECTED)
    with open(os.path.join(hf, "chat_template.jinja"), "w") as f:
        f.write(OTHER)
    case("chat_template.jinja takes precedence", ["-m", hf], "<system>Be kind.<user>Hello there")

if failures:
    print(f"{len(failures)} failure(s)")
    sys.exit(1)
print("chat templates: GGUF, tokenizer_config.json (string and list), chat_template.jinja, override, ChatML fallback")
