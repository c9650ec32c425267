"""Reference renderer for the chat-template tests: renders with Python's jinja2 the way Hugging Face
transformers' apply_chat_template does (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks,
loop controls, a pass-through {% generation %} tag, raise_exception, strftime_now, and a tojson that is
json.dumps(ensure_ascii=False)).

usage: jinja_ref.py REQUESTS.json RESULTS.json
REQUESTS is a list of {template, messages, add_generation_prompt, bos_token, eos_token, vars};
RESULTS gets one {"ok": true, "text": ...} or {"ok": false, "error": ...} per request.
Exits 77 when jinja2 is not installed (the C test then reports a skip)."""
import json
import sys
from datetime import datetime

try:
    import jinja2
    from jinja2 import nodes
    from jinja2.ext import Extension, loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError:
    print("SKIP: python jinja2 is not installed")
    sys.exit(77)


class Generation(Extension):
    """Hugging Face's {% generation %} block: renders its body unchanged."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(fmt):
    return datetime.now().strftime(fmt)


def make_env():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[Generation, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render(env, cache, req):
    try:
        source = req["template"]
        if source not in cache:  # most requests share a family template: compile each once
            cache[source] = env.from_string(source)
        template = cache[source]
        kwargs = dict(req.get("vars") or {})
        kwargs["messages"] = req.get("messages", [])
        kwargs["add_generation_prompt"] = bool(req.get("add_generation_prompt"))
        for name in ("bos_token", "eos_token"):
            if req.get(name) is not None:
                kwargs[name] = req[name]
        return {"ok": True, "text": template.render(**kwargs)}
    except Exception as e:  # any failure counts: the C side must fail too
        return {"ok": False, "error": f"{type(e).__name__}: {e}"}


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    with open(sys.argv[1], encoding="utf-8") as f:
        requests = json.load(f)
    env = make_env()
    cache = {}
    results = [render(env, cache, r) for r in requests]
    with open(sys.argv[2], "w", encoding="utf-8") as f:
        json.dump(results, f, ensure_ascii=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
