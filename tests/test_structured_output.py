"""Structured output end to end: `pith serve` of a tiny random-weight model (tools/mkmodel.py test-llama,
512-token SentencePiece-style vocabulary) answers requests constrained by JSON Schemas, GBNF grammars,
regular expressions and choice lists, sampled at temperature 1 with random seeds (so the outputs are
random walks through each grammar), through completions and chat, streamed and not, n = 1 and 2, with
a KV pool small enough that sequences are preempted and recomputed.

- 200 random JSON Schemas of growing depth (0..4: strings with lengths, formats and patterns, integers
  and numbers with bounds, enums, consts, nullable types, anyOf, nested objects with required and
  optional properties, arrays with item counts, $defs / $ref, oneOf of disjoint branches: different
  types, a discriminator const, disjoint enums, a required key the other branch forbids; a quarter
  sent with strict: true, which refuses a oneOf it cannot prove exact): every output parses and validates with
  an independent validator, npm ajv (Ajv2020 + ajv-formats); skipped with a reason when node or ajv is
  absent. 100 % must validate.
- GBNF grammars (fixed and randomly generated): every output is accepted by an independent recognizer
  written here (a memoised recursive-descent matcher over the grammar's own text).
- regex and choice constraints: checked with Python's re module and set membership.
- a schema or grammar that does not compile is a 400 naming the parameter and the problem; one that
  would expand past the grammar size limit (84 KB of 6,500 x "a"{10000}, a regex of bounded repeats) is a
  400 naming the limit, at once, and a plain request right after it is served as usual.
"""
import json
import os
import random
import re
import subprocess
import sys
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

from pithtest import SKIP, Server, pith_bin

pith_bin()  # skips with a reason when ctest did not name the binary
SRC = os.environ.get("PITH_SOURCE_DIR") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
NPM = os.environ.get("PITH_NPM_DIR") or SRC
TMP = os.environ.get("PITH_TEST_TMP") or "/tmp/pith-test"
os.makedirs(TMP, exist_ok=True)
sys.path.insert(0, os.path.join(SRC, "tools"))
try:
    import mkmodel  # noqa: E402
except ImportError as e:
    print("SKIP: cannot import tools/mkmodel.py (numpy missing?): %s" % e)
    sys.exit(SKIP)

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def post(base, route, body, timeout=120):
    req = urllib.request.Request(base + route, data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            raw = r.read().decode()
            if body.get("stream"):
                return r.status, raw
            return r.status, json.loads(raw)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def stream_text(raw):
    """Joins the streamed choices' texts by index; returns ({index: text}, {index: finish})."""
    texts, fins = {}, {}
    for line in raw.split("\n"):
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        ev = json.loads(line[6:])
        for c in ev.get("choices", []):
            i = c["index"]
            piece = c.get("text")
            if piece is None:
                piece = (c.get("delta") or {}).get("content") or ""
            texts[i] = texts.get(i, "") + piece
            if c.get("finish_reason"):
                fins[i] = c["finish_reason"]
    return texts, fins


def serve(model):
    # a small pool (blocks of 16 tokens) and several sequences at once: preemption happens
    return Server(["-m", model, "-t", "1", "--kv-blocks", "40", "--max-num-seqs", "8"])


# ---------------------------------------------------------------- random schemas
KEYS = ["a", "name", "id", "x y", "ключ", "q\"uote", "back\\slash", "n1", "value", "tags", "ok"]
FORMATS = ["date", "date-time", "time", "uuid", "email", "ipv4", "hostname"]
PATTERNS = ["^[a-z]{2,5}$", "^\\d{3}-\\d{2}$", "^(ab|cd){1,3}x?$", "^[A-Z][a-z]{0,4}\\.$", "^[0-9]{2}$",
            "^\\w{1,4}@\\w{1,3}$", "^(?:red|green|blue)$", "^[^\\s\"]{1,3}$"]


def leaf(rng):
    k = rng.choice(["string", "string", "integer", "number", "boolean", "null", "enum", "const", "format",
                    "pattern", "nullable", "intrange"])
    if k == "string":
        lo = rng.randint(0, 3)
        return {"type": "string", "minLength": lo, "maxLength": lo + rng.randint(0, 5)}
    if k == "integer":
        return {"type": "integer"}
    if k == "intrange":
        lo = rng.randint(-150, 150)
        s = {"type": "integer", "minimum": lo}
        if rng.random() < 0.7:
            s["maximum"] = lo + rng.choice([0, 1, 9, 10, 99, 1000, 123456])
        if rng.random() < 0.3:
            s = {"type": "integer", "exclusiveMaximum": rng.randint(-20, 20)}
        return s
    if k == "number":
        if rng.random() < 0.5:
            return {"type": "number"}
        lo = rng.randint(0, 50)
        return {"type": "number", "minimum": lo, "maximum": lo + rng.randint(0, 100)}
    if k == "boolean":
        return {"type": "boolean"}
    if k == "null":
        return {"type": "null"}
    if k == "enum":
        pool = ["red", "green", "x\"y", "ü", 1, 2.5, -3, True, False, None, "", "a b"]
        return {"enum": rng.sample(pool, rng.randint(1, 4))}
    if k == "const":
        return {"const": rng.choice(["fixed", 42, None, True, "é\n"])}
    if k == "format":
        return {"type": "string", "format": rng.choice(FORMATS)}
    if k == "pattern":
        return {"type": "string", "pattern": rng.choice(PATTERNS)}
    return {"type": [rng.choice(["string", "integer", "boolean"]), "null"], "maxLength": 4}


def schema(rng, depth, defs):
    if depth == 0 or rng.random() < 0.2:
        s = leaf(rng)
        if s.get("type") == ["integer", "null"] or s.get("type") == ["boolean", "null"]:
            s.pop("maxLength", None)
        return s
    k = rng.choice(["object", "object", "array", "anyOf", "ref", "oneOf"])
    if k == "oneOf":
        return one_of(rng, depth, defs)
    if k == "object":
        keys = rng.sample(KEYS, rng.randint(0, 3))
        props = {key: schema(rng, depth - 1, defs) for key in keys}
        req = [key for key in keys if rng.random() < 0.6]
        return {"type": "object", "properties": props, "required": req, "additionalProperties": False}
    if k == "array":
        lo = rng.randint(0, 2)
        return {"type": "array", "items": schema(rng, depth - 1, defs), "minItems": lo,
                "maxItems": lo + rng.randint(0, 2)}
    if k == "anyOf":
        return {"anyOf": [schema(rng, depth - 1, defs) for _ in range(rng.randint(1, 3))]}
    name = "d%d" % len(defs)
    defs[name] = None
    defs[name] = schema(rng, depth - 1, defs)
    return {"$ref": "#/$defs/" + name, "description": "a reference"}


def one_of(rng, depth, defs):
    """A oneOf whose branches exclude each other, of the kinds the compiler proves disjoint (so that a
    strict request compiles it and ajv, which checks oneOf exactly, finds one branch matching)."""
    k = rng.choice(["types", "discriminator", "enums", "forbidden"])
    if k == "types":
        pool = [{"type": "string", "maxLength": 6}, {"type": "integer"}, {"type": "boolean"}, {"type": "null"},
                {"type": "array", "items": leaf(rng), "maxItems": 2},
                {"type": "object", "properties": {"v": leaf(rng)}, "required": ["v"], "additionalProperties": False}]
        return {"oneOf": rng.sample(pool, rng.randint(2, 4))}
    if k == "discriminator":
        branches = []
        for tag in rng.sample(["cat", "dog", "fish", "bird"], rng.randint(2, 3)):
            props = {"kind": {"const": tag}}
            for key in rng.sample(["a", "name", "n1"], rng.randint(0, 2)):
                props[key] = schema(rng, max(0, depth - 1), defs)
            req = ["kind"] + [key for key in props if key != "kind" and rng.random() < 0.5]
            branches.append({"type": "object", "properties": props, "required": req, "additionalProperties": False})
        return {"oneOf": branches}
    if k == "enums":
        pool = ["red", "green", "blue", 1, 2, None, True, "x y"]
        rng.shuffle(pool)
        cut = rng.randint(1, len(pool) - 1)
        return {"oneOf": [{"enum": pool[:cut]}, {"enum": pool[cut:]}]}
    # each branch requires a key the other forbids
    keys = rng.sample(["a", "b", "c", "d"], 2)
    return {"oneOf": [{"type": "object", "properties": {key: schema(rng, max(0, depth - 1), defs)},
                       "required": [key], "additionalProperties": False} for key in keys]}


def make_schemas(n, seed):
    rng = random.Random(seed)
    out = []
    for i in range(n):
        depth = min(4, i * 5 // n)
        defs = {}
        s = schema(rng, depth, defs)
        if defs:
            s = {"$defs": defs, **s} if "$ref" not in s else {"$defs": defs, "allOf": [s]}
        out.append(s)
    return out


# ---------------------------------------------------------------- GBNF, checked independently
def parse_gbnf(text):
    """GBNF -> {rule: alternatives}, each alternative a list of items: ('lit', str), ('cls', neg, ranges),
    ('ref', name), ('grp', alternatives), with a repetition (min, max or None)."""
    pos = 0
    rules = {}

    def ws(nl=True):
        nonlocal pos
        while pos < len(text):
            if text[pos] == "#":
                while pos < len(text) and text[pos] != "\n":
                    pos += 1
            elif text[pos] in " \t" or (nl and text[pos] in "\r\n"):
                pos += 1
            else:
                break

    def name():
        nonlocal pos
        m = re.compile(r"[A-Za-z0-9_-]+").match(text, pos)
        pos = m.end()
        return m.group(0)

    def char():
        nonlocal pos
        c = text[pos]
        pos += 1
        if c != "\\":
            return c
        e = text[pos]
        pos += 1
        simple = {"n": "\n", "r": "\r", "t": "\t"}
        if e in simple:
            return simple[e]
        if e in "xuU":
            n = {"x": 2, "u": 4, "U": 8}[e]
            v = int(text[pos:pos + n], 16)
            pos += n
            return chr(v)
        return e

    def at_def():
        return re.compile(r"[A-Za-z0-9_-]+[ \t]*::=").match(text, pos) is not None

    def alts():
        nonlocal pos
        out = [seq()]
        while pos < len(text) and text[pos] == "|":
            pos += 1
            out.append(seq())
        return out

    def seq():
        nonlocal pos
        items = []
        while True:
            ws()
            if pos >= len(text) or text[pos] in "|)" or at_def():
                return items
            c = text[pos]
            if c == '"':
                pos += 1
                s = ""
                while text[pos] != '"':
                    s += char()
                pos += 1
                it = ("lit", s)
            elif c == "[":
                pos += 1
                neg = text[pos] == "^"
                if neg:
                    pos += 1
                rs = []
                while text[pos] != "]":
                    a = char()
                    b = a
                    if text[pos] == "-" and text[pos + 1] != "]":
                        pos += 1
                        b = char()
                    rs.append((a, b))
                pos += 1
                it = ("cls", neg, rs)
            elif c == ".":
                pos += 1
                it = ("cls", True, [])
            elif c == "(":
                pos += 1
                a = alts()
                ws()
                pos += 1
                it = ("grp", a)
            else:
                it = ("ref", name())
            lo, hi = 1, 1
            if pos < len(text) and text[pos] in "*+?{":
                q = text[pos]
                pos += 1
                if q == "*":
                    lo, hi = 0, None
                elif q == "+":
                    lo, hi = 1, None
                elif q == "?":
                    lo, hi = 0, 1
                else:
                    m = re.compile(r"\s*(\d*)\s*(,?)\s*(\d*)\s*\}").match(text, pos)
                    pos = m.end()
                    lo = int(m.group(1) or 0)
                    hi = lo if not m.group(2) else (int(m.group(3)) if m.group(3) else None)
            items.append((it, lo, hi))

    while True:
        ws()
        if pos >= len(text):
            break
        n = name()
        ws(False)
        assert text[pos:pos + 3] == "::="
        pos += 3
        rules[n] = alts()
    return rules


def gbnf_accepts(rules, s):
    """Whether s (a str) matches rule root whole; sets of end positions, memoised."""
    memo = {}

    def item_ends(it, i):
        kind = it[0]
        if kind == "lit":
            return {i + len(it[1])} if s.startswith(it[1], i) else set()
        if kind == "cls":
            if i >= len(s):
                return set()
            c = s[i]
            inside = any(a <= c <= b for a, b in it[2])
            return {i + 1} if inside != it[1] else set()
        if kind == "ref":
            return rule_ends(it[1], i)
        return alts_ends(it[1], i)

    def rep_ends(it, lo, hi, i):
        cur, out, k = {i}, set(), 0
        seen = set()
        while cur:
            if k >= lo:
                out |= cur
            if hi is not None and k == hi:
                break
            nxt = set()
            for j in cur:
                nxt |= item_ends(it, j)
            nxt -= seen
            seen |= nxt
            cur = nxt
            k += 1
        return out

    def seq_ends(items, i):
        cur = {i}
        for it, lo, hi in items:
            nxt = set()
            for j in cur:
                nxt |= rep_ends(it, lo, hi, j)
            cur = nxt
            if not cur:
                break
        return cur

    def alts_ends(alts, i):
        out = set()
        for a in alts:
            out |= seq_ends(a, i)
        return out

    def rule_ends(name, i):
        key = (name, i)
        if key not in memo:
            memo[key] = set()
            memo[key] = alts_ends(rules[name], i)
        return memo[key]

    return len(s) in rule_ends("root", 0)


FIXED_GBNF = [
    'root ::= "yes" | "no" | "maybe"',
    'root ::= [a-z]{1,6} ("," " "? [a-z]{1,6}){0,3} "."',
    'root ::= expr\nexpr ::= term (("+" | "-") term){0,3}\nterm ::= [0-9]{1,3} | "(" expr ")"',
    'root ::= "<" tag ">" [^<>]{0,8} "</" tag ">"\ntag ::= "b" | "i" | "em"',
    'root ::= item{2,4}\nitem ::= "- " [A-Za-z\\u00e9 ]{1,10} "\\n"',
    '# a comment\nroot ::= ( "\\x41" | [\\u0430-\\u044f] )+ "!"?\n',
]


def random_gbnf(rng):
    def atom(d):
        k = rng.choice(["lit", "cls", "grp", "ref"] if d > 0 else ["lit", "cls"])
        if k == "lit":
            return '"%s"' % rng.choice(["a", "bc", "x y", "\\n", "é", "\\\"", "ok"])
        if k == "cls":
            return rng.choice(["[a-c]", "[^a-z\\n]", "[0-9]", "[xyz]", "."])
        if k == "ref":
            return "r%d" % rng.randint(0, 1)
        return "(" + alt(d - 1) + ")"

    def item(d):
        q = rng.choice(["", "", "?", "{1,3}", "{2}", "*", "+"])
        a = atom(d)
        return a + q

    def seq(d):
        return " ".join(item(d) for _ in range(rng.randint(1, 3)))

    def alt(d):
        return " | ".join(seq(d) for _ in range(rng.randint(1, 3)))

    g = "root ::= " + alt(2) + "\nr0 ::= " + alt(1) + "\nr1 ::= \"(\" " + alt(0) + " \")\"\n"
    # repetitions of something that may match nothing are refused by Pith (and loop); keep grammars
    # whose starred items are not nullable: drop * and + on groups and refs
    g = re.sub(r"(\)|r\d)[*+]", r"\1{0,2}", g)
    return g


def run():
    node = subprocess.run(["sh", "-c", "command -v node"], capture_output=True, text=True).stdout.strip()
    have_ajv = bool(node) and os.path.exists(os.path.join(NPM, "node_modules", "ajv")) and \
        os.path.exists(os.path.join(NPM, "node_modules", "ajv-formats"))
    if not have_ajv:
        print("note: node or npm ajv/ajv-formats absent (run npm ci): JSON Schema outputs are checked for "
              "syntax only")
    model = os.path.join(TMP, "structured-test-llama-2k.gguf")
    if not os.path.exists(model):
        mkmodel.main(["--preset", "test-llama", "--seed", "7", "--ctx", "2048", "--format", "gguf", "--out", model + ".tmp"])
        os.replace(model + ".tmp", model)
    server = serve(model)
    base = server.base
    try:
        rng = random.Random(1234)
        schemas = make_schemas(200, 99)
        jobs = []
        for i, s in enumerate(schemas):
            route = "/v1/chat/completions" if i % 3 == 0 else "/v1/completions"
            body = {"max_tokens": 560, "temperature": 1.0, "seed": rng.randint(0, 1 << 30),
                    "stream": i % 4 == 1, "n": 2 if i % 10 == 0 else 1}
            if route.endswith("chat/completions"):
                body["messages"] = [{"role": "user", "content": "json please %d" % i}]
            else:
                body["prompt"] = "Data %d:" % i
            form = i % 4
            if form == 0:
                body["response_format"] = {"type": "json_schema", "json_schema": {"name": "s%d" % i, "strict": True,
                                                                                   "schema": s}}
            elif form == 1:
                body["guided_json"] = s
            elif form == 2:
                body["structured_outputs"] = {"json": s}
            else:
                body["json_schema"] = s
            jobs.append((route, body, s))

        # first, eight long outputs at once (about 150 tokens each, 640 in the pool): some are preempted
        # and recomputed with their matcher kept
        long_schema = {"type": "array", "items": {"type": "string", "minLength": 20, "maxLength": 20},
                       "minItems": 6, "maxItems": 6}
        for k in range(8):
            jobs.insert(0, ("/v1/completions", {"prompt": "Long %d:" % k, "max_tokens": 560, "temperature": 1.0,
                                                "seed": 500 + k, "stream": k % 2 == 1, "n": 1,
                                                "guided_json": long_schema}, long_schema))

        def one(job):
            route, body, s = job
            st, r = post(base, route, body)
            if st != 200:
                return st, r, None, None
            if body.get("stream"):
                texts, fins = stream_text(r)
                return st, r, [texts.get(k, "") for k in range(body["n"])], [fins.get(k) for k in range(body["n"])]
            outs, fins = [], []
            for c in r["choices"]:
                outs.append(c["text"] if "text" in c else c["message"]["content"])
                fins.append(c["finish_reason"])
            return st, r, outs, fins

        with ThreadPoolExecutor(8) as ex:
            results = list(ex.map(one, jobs))
        pairs = []
        n_outputs = 0
        for (route, body, s), (st, r, outs, fins) in zip(jobs, results):
            check(st == 200, "schema request refused: %s %s" % (json.dumps(s)[:300], r))
            if st != 200:
                continue
            for out, fin in zip(outs, fins):
                n_outputs += 1
                check(fin == "stop", "finish %s for %s: %r" % (fin, json.dumps(s)[:200], out[:200]))
                try:
                    json.loads(out)
                except ValueError:
                    check(False, "not JSON: %r for %s" % (out[:300], json.dumps(s)[:300]))
                    continue
                pairs.append({"schema": s, "output": out})
        print("schema outputs: %d over %d schemas" % (n_outputs, len(schemas)))
        with urllib.request.urlopen(base + "/metrics", timeout=10) as mr:
            m = re.search(r"^pith_preemptions_total(?:\{model_name=\"[^\"]*\"\})? (\d+)", mr.read().decode(), re.M)
        print("preemptions: %s" % (m.group(1) if m else "?"))
        check(m is not None and int(m.group(1)) > 0, "no sequence was preempted: the recompute path went untested")
        check(n_outputs >= 200, "too few schema outputs")
        if have_ajv:
            path = os.path.join(TMP, "structured-pairs.json")
            with open(path, "w") as f:
                json.dump(pairs, f)
            v = subprocess.run([node, os.path.join(SRC, "tests", "structured_validate.cjs"), path],
                               capture_output=True, text=True, cwd=NPM, timeout=120)
            print(v.stdout.strip()[-2000:])
            check(v.returncode == 0, "ajv: " + (v.stdout + v.stderr)[-3000:])

        # GBNF
        grammars = FIXED_GBNF + [random_gbnf(random.Random(s)) for s in range(24)]
        n_gbnf = 0
        for gi, g in enumerate(grammars):
            try:
                rules = parse_gbnf(g)
            except Exception as e:  # the test's own parser must read every grammar it made
                check(False, "test parser failed on %r: %s" % (g, e))
                continue
            for k in range(2):
                body = {"prompt": "G%d" % gi, "max_tokens": 400, "temperature": 1.0, "seed": gi * 10 + k,
                        "grammar": g, "stream": k == 1}
                st, r = post(base, "/v1/completions", body)
                if st == 400 and "left-recursive" in json.dumps(r):
                    break  # a random grammar with a nullable repetition: refused, as it should be
                check(st == 200, "grammar refused: %r: %s" % (g, r))
                if st != 200:
                    break
                if k == 1:
                    texts, fins = stream_text(r)
                    out, fin = texts.get(0, ""), fins.get(0)
                else:
                    out, fin = r["choices"][0]["text"], r["choices"][0]["finish_reason"]
                if fin != "stop":
                    continue  # cut by max_tokens: a prefix, not a sentence of the grammar
                n_gbnf += 1
                check(gbnf_accepts(rules, out), "GBNF output rejected by the independent parser: %r for %r" % (out, g))
        print("GBNF outputs checked: %d" % n_gbnf)
        check(n_gbnf >= 30, "too few finished GBNF outputs (%d)" % n_gbnf)

        # regex and choice
        for i, rx in enumerate(["[0-9]{3}-[a-z]{2,4}", "(ab|c)+d?", "\\d{1,2}(\\.\\d)?%", "[A-Z][a-z]{1,5}( [A-Z][a-z]{1,5})?"]):
            for k in range(4):
                st, r = post(base, "/v1/completions", {"prompt": "R", "max_tokens": 200, "seed": k, "guided_regex": rx})
                check(st == 200, "regex refused: %s" % r)
                if st == 200 and r["choices"][0]["finish_reason"] == "stop":
                    out = r["choices"][0]["text"]
                    check(re.fullmatch(rx, out) is not None, "regex %r: output %r" % (rx, out))
        choices = ["alpha", "beta gamma", "δ"]
        for k in range(6):
            st, r = post(base, "/v1/chat/completions", {"messages": [{"role": "user", "content": "pick"}], "seed": k,
                                                        "guided_choice": choices})
            check(st == 200 and r["choices"][0]["message"]["content"] in choices, "choice: %s" % r)
        st, r = post(base, "/v1/completions", {"prompt": "J", "seed": 3, "max_tokens": 560,
                                                "response_format": {"type": "json_object"}})
        check(st == 200, "json_object: %s" % r)
        if st == 200 and r["choices"][0]["finish_reason"] == "stop":
            check(isinstance(json.loads(r["choices"][0]["text"]), dict), "json_object output is not an object")

        # errors: fail closed, naming the parameter and the problem
        blowup = "root ::= " + " ".join(['"a"{10000}'] * 6500)
        too_large = "more than 1048576 elements, the limit"
        bad = [
            ({"grammar": blowup}, "grammar", too_large),
            ({"guided_grammar": blowup}, "guided_grammar", too_large),
            ({"guided_regex": "a{10000}" * 200}, "guided_regex", too_large),
            ({"grammar": "root ::= foo"}, "grammar", "'foo' is used"),
            ({"grammar": 5}, "grammar", "must be a string"),
            ({"guided_json": {"type": "object", "patternProperties": {"a": {}}}}, "guided_json", "patternProperties"),
            ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "string", "format": "ipv6"}}}},
             "response_format.json_schema.schema", "format 'ipv6'"),
            ({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}, "response_format.json_schema.schema", "required"),
            ({"response_format": {"type": "xml"}}, "response_format", "'text', 'json_object' or 'json_schema'"),
            ({"guided_regex": "a(?=b)"}, "guided_regex", "lookaround"),
            ({"guided_regex": "(a"}, "guided_regex", "unclosed"),
            ({"guided_choice": []}, "guided_choice", "non-empty"),
            ({"grammar": "root ::= \"a\"", "guided_regex": "a"}, "guided_regex", "both constrain"),
            ({"structured_outputs": {"json": {"$ref": "http://example.com/s.json"}}}, "structured_outputs.json", "$ref"),
            ({"guided_json": "{not json"}, "guided_json", "not valid JSON"),
            ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "strict": True, "schema": {
                "type": "object", "properties": {"p": {"oneOf": [{"type": "string"}, {"type": "string", "maxLength": 2}]}},
                "required": ["p"], "additionalProperties": False}}}},
             "response_format.json_schema.schema", "oneOf branches 0 and 1 may both match"),
        ]
        # ... the same oneOf without strict is compiled as anyOf (documented: its output may match both)
        st, r = post(base, "/v1/completions", {"prompt": "x", "max_tokens": 5, "response_format": {
            "type": "json_schema", "json_schema": {"name": "x", "schema": {"oneOf": [{"type": "string"},
                                                                              {"type": "string", "maxLength": 2}]}}}})
        check(st == 200, "oneOf that may overlap, not strict: %s %s" % (st, r))
        for extra, param, needle in bad:
            body = {"prompt": "x", "max_tokens": 5}
            body.update(extra)
            st, r = post(base, "/v1/completions", body)
            err = r.get("error", {}) if isinstance(r, dict) else {}
            check(st == 400 and err.get("param") == param and needle in err.get("message", ""),
                  "error for %s: %s %s" % (json.dumps(extra)[:120], st, r))
        # after the refused grammars, a plain request and a small grammar are served as usual
        st, r = post(base, "/v1/completions", {"prompt": "x", "max_tokens": 5}, timeout=30)
        check(st == 200, "plain request after the refused grammars: %s %s" % (st, r))
        st, r = post(base, "/v1/completions", {"prompt": "x", "max_tokens": 5, "grammar": 'root ::= "a"{3}'}, timeout=30)
        check(st == 200 and r["choices"][0]["text"] in ("a", "aa", "aaa"), "small grammar after the refused ones: %s %s" % (st, r))
    finally:
        server.close(timeout=20)
    if failures:
        print("%d failures" % len(failures))
        sys.exit(1)
    print("ok")


if __name__ == "__main__":
    run()
