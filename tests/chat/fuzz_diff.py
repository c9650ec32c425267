"""Differential fuzzing of the chat-template interpreter against Python's jinja2 (a tool, not a ctest).

Generates random templates, renders them with jinja2 (tests/chat/jinja_ref.py, Hugging Face's settings)
and with pith (`test_chat_template --render`), and prints every case where one fails and the other does
not, or the texts differ.

usage: fuzz_diff.py PATH/TO/test_chat_template {expr|ws} SEED COUNT
  expr: expressions, filters, tests, methods and statements over the context of context.json
  ws:   text, newlines and tags with whitespace control (-, +), comments and raw blocks

Known differences show up too (dict_items and Markup reprs, results Python computes with big integers or
set operations); see docs/chat-templates.md."""
import json
import os
import random
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
binary, mode, seed, count = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
rnd = random.Random(seed)
ctx = json.load(open(os.path.join(HERE, "context.json")))

VARS = list(ctx['vars'].keys()) + ['messages', 'nope', 'bos_token', 'add_generation_prompt']
LITS = ['0', '1', '2', '3', '-1', '10', '0.5', '2.0', '-1.5', "'a'", "'hello'", "''", "' x '", "'A b'", "'1,2'", 'true', 'false', 'none', "'é'", "'\\n'"]
ATTRS = ['role', 'content', 'name', 'a', 'b', 'c', 'x', 'age', 'k']
METHODS = ["strip()", "upper()", "lower()", "split(',')", "split()", "startswith('h')", "endswith('o')", "get('a')", "get('zz', 1)",
           "items()", "keys()", "values()", "replace('l','L')", "find('l')", "rfind('l')", "count('l')", "title()", "capitalize()",
           "lstrip('h')", "rstrip()", "isdigit()", "isalpha()", "splitlines()", "rsplit(',', 1)", "partition(',')", "index(2)", "join(['a','b'])",
           "format(1)", "zfill(4)", "center(7)", "removeprefix('he')"]
FILTERS = ['length', 'trim', 'upper', 'lower', 'first', 'last', 'list', 'sort', 'reverse|list', "join(',')", "join", "default('D')",
           "default('D', true)", 'tojson', 'string', 'int', 'float', 'abs', 'round', 'unique|list', 'items|list', "map('upper')|list",
           "select('odd')|list", "reject('none')|list", "selectattr('age','gt',26)|list", "map(attribute='name')|list", 'sum', 'max', 'min',
           'count', 'capitalize', 'title', 'wordcount', 'indent(2)', 'center(9)', "replace('l','L')", 'dictsort', 'tojson(indent=1)',
           "sort(reverse=true)", "sort(attribute='age')", "e", "safe", "list|length", "select|list", "rejectattr('nick')|list"]
TESTS = ['defined', 'undefined', 'none', 'string', 'number', 'mapping', 'iterable', 'odd', 'even', 'sequence', 'lower', 'upper',
         'in(l)', 'eq(3)', 'integer', 'float', 'boolean', 'true', 'false', 'divisibleby(2)', 'sameas(none)', 'callable', 'gt 2', 'ne(1)']
OPS = ['+', '-', '*', '/', '//', '%', '**', '~', '==', '!=', '<', '<=', '>', '>=', 'in', 'not in', 'and', 'or']

def atom(d):
    r = rnd.random()
    if r < 0.45: return rnd.choice(VARS)
    if r < 0.8: return rnd.choice(LITS)
    if r < 0.9 and d > 0: return '[' + ', '.join(expr(d - 1) for _ in range(rnd.randint(0, 3))) + ']'
    if d > 0: return "{'a': %s, 'b': %s}" % (expr(d - 1), expr(d - 1))
    return rnd.choice(VARS)

def postfix(e, d):
    r = rnd.random()
    if r < 0.2: return e + '.' + rnd.choice(ATTRS)
    if r < 0.35: return e + '[' + rnd.choice(['0', '1', '-1', "'a'", "'role'", '5']) + ']'
    if r < 0.45: return e + '[' + rnd.choice(['1:', ':-1', '::-1', '::2', '-2:', '1:3']) + ']'
    if r < 0.65: return e + '.' + rnd.choice(METHODS)
    return e

def expr(d):
    a = atom(d)
    # jinja2 constant-folds expressions on literals through a forgiving getitem; skip slicing literals
    e = postfix(a, d) if a in VARS else a
    if a in VARS and rnd.random() < 0.3: e = postfix(e, d)
    r = rnd.random()
    if r < 0.3: e = e + '|' + rnd.choice(FILTERS)
    elif r < 0.45: e = e + ' is ' + rnd.choice(['', 'not ']) + rnd.choice(TESTS)
    if d > 0:
        r = rnd.random()
        if r < 0.35: e = '(' + e + ' ' + rnd.choice(OPS) + ' ' + expr(d - 1) + ')'
        elif r < 0.42: e = '(not ' + e + ')'
        elif r < 0.48: e = '(' + e + ' if ' + expr(d - 1) + ' else ' + expr(d - 1) + ')'
        elif r < 0.52: e = '(-' + e + ')'
    return e

def stmt(d):
    r = rnd.random()
    if r < 0.5 or d == 0: return '{{ ' + expr(2) + ' }}'
    if r < 0.65: return '{% if ' + expr(2) + ' %}' + stmt(d - 1) + '{% else %}' + stmt(d - 1) + '{% endif %}'
    if r < 0.8: return '{% for x in ' + expr(1) + ' %}[{{ x }}|{{ loop.index }}]' + stmt(d - 1) + '{% endfor %}'
    if r < 0.9: return '{% set v = ' + expr(2) + ' %}' + stmt(d - 1) + '{{ v }}'
    return '{%- if ' + expr(1) + ' -%}\n  ' + stmt(d - 1) + '\n{% endif %}\n'

TEXT = ['\n', '\n\n', ' ', '  ', '\t', 'a', 'b c', '\n  ', '  \n', ' \t\n', '\u00a0', '\u3000', 'x\n    ', '\r\n', '\r', 'é']
def tag():
    r = rnd.random()
    l = rnd.choice(['', '', '-', '+']); rr = rnd.choice(['', '', '-', '+'])
    if r < 0.3: return '{{%s %s %s}}' % (rnd.choice(['', '-']), rnd.choice(['n', "'v'", 'none', "''", "'\\n'"]), rnd.choice(['', '-']))
    if r < 0.45: return '{#%s c %s#}' % (l, rr)
    if r < 0.55: return '{%%%s raw %s%%}%s{%%%s endraw %s%%}' % (rnd.choice(['', '-']), rnd.choice(['', '-']), rnd.choice(TEXT) + '{{ x }}' + rnd.choice(TEXT), rnd.choice(['', '-', '+']), rnd.choice(['', '-', '+']))
    body = ''.join(rnd.choice(TEXT) + (tag() if rnd.random() < 0.3 else '') for _ in range(rnd.randint(0, 3)))
    kind = rnd.choice(['if t', 'for i in [1, 2]', 'set x', 'if fa'])
    end = {'if t': 'endif', 'for i in [1, 2]': 'endfor', 'set x': 'endset', 'if fa': 'endif'}[kind]
    mid = ''
    if kind.startswith('if') and rnd.random() < 0.4:
        mid = '{%%%s else %s%%}' % (rnd.choice(['', '-', '+']), rnd.choice(['', '-', '+'])) + rnd.choice(TEXT)
    s = '{%%%s %s %s%%}' % (l, kind, rr) + body + mid + '{%%%s %s %s%%}' % (rnd.choice(['', '-', '+']), end, rnd.choice(['', '-', '+']))
    if kind == 'set x': s += '[{{ x }}]'
    return s


reqs = []
for i in range(count):
    if mode == "expr":
        t = " ".join(stmt(2) for _ in range(rnd.randint(1, 3)))
        reqs.append({"template": t, "messages": ctx["messages"], "vars": ctx["vars"], "add_generation_prompt": True,
                     "bos_token": "<s>", "eos_token": "</s>"})
    else:
        t = "".join(rnd.choice(TEXT) + (tag() if rnd.random() < 0.7 else "") for _ in range(rnd.randint(1, 8)))
        reqs.append({"template": t, "messages": [], "vars": {"n": 5, "t": True, "fa": False}, "add_generation_prompt": False})

with tempfile.TemporaryDirectory() as tmp:
    req, ref_out, pith_out = (os.path.join(tmp, n) for n in ("req.json", "ref.json", "pith.json"))
    json.dump(reqs, open(req, "w"), ensure_ascii=False)
    subprocess.run([sys.executable, os.path.join(HERE, "jinja_ref.py"), req, ref_out], check=True)
    subprocess.run([binary, "--render", req, pith_out], check=True)
    ref, got = json.load(open(ref_out)), json.load(open(pith_out))

bad = 0
for q, a, b in zip(reqs, ref, got):
    if a["ok"] != b["ok"] or (a["ok"] and a["text"] != b["text"]):
        bad += 1
        print("---", repr(q["template"][:300]))
        print("   jinja2:", repr(a["text"] if a["ok"] else "ERROR " + a["error"])[:200])
        print("   pith:  ", repr(b["text"] if b["ok"] else "ERROR " + b["error"])[:200])
print(f"{count} templates ({mode}, seed {seed}): jinja2 rendered {sum(1 for r in ref if r['ok'])}, {bad} differences")
sys.exit(1 if bad else 0)
