"""docs/grafana-dashboard.json: valid JSON that Grafana can import, whose queries are valid PromQL
(checked by `promtool check rules`), use only metrics the server exposes (names read from
src/server/metrics.c), and cover every metric the API fixes (docs/api.md lists the same names)."""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

SKIP = 77
src = os.environ.get("PITH_SOURCE_DIR") or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

FIXED = [
    "pith_requests_running", "pith_requests_waiting", "pith_kv_blocks_in_use", "pith_kv_blocks_total",
    "pith_prefix_cache_hit_tokens_total", "pith_prompt_tokens_total", "pith_generation_tokens_total",
    "pith_request_success_total", "pith_request_errors_total", "pith_preemptions_total",
    "pith_time_to_first_token_seconds", "pith_time_per_output_token_seconds", "pith_e2e_request_latency_seconds",
]
HISTOGRAMS = {"pith_time_to_first_token_seconds", "pith_time_per_output_token_seconds", "pith_e2e_request_latency_seconds"}

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)


with open(os.path.join(src, "docs", "grafana-dashboard.json")) as f:
    dash = json.load(f)
with open(os.path.join(src, "src", "server", "metrics.c")) as f:
    exposed = set(re.findall(r'"(pith_[a-z0-9_]+)"', f.read()))
with open(os.path.join(src, "docs", "api.md")) as f:
    api_doc = f.read()

for name in FIXED:
    check(name in exposed, f"{name} is not exposed by src/server/metrics.c")
    check(f"`{name}" in api_doc, f"{name} is not documented in docs/api.md")

check(dash.get("title") and dash.get("uid") and isinstance(dash.get("schemaVersion"), int), "dashboard header")
exprs, used, boxes = [], set(), []
for p in dash["panels"]:
    check(isinstance(p.get("id"), int) and p.get("title"), f"panel {p.get('id')} needs an id and a title")
    g = p["gridPos"]
    check(0 <= g["x"] and g["x"] + g["w"] <= 24 and g["h"] > 0, f"panel {p['title']} is off the 24-column grid")
    boxes.append((p["title"], g["x"], g["y"], g["w"], g["h"]))
    if p["type"] == "row":
        continue
    check(p.get("targets"), f"panel {p['title']} has no query")
    for t in p.get("targets", []):
        exprs.append(t["expr"])
        for m in re.findall(r"\b(pith_[a-z0-9_]+)", t["expr"]):
            base = re.sub(r"_(bucket|sum|count)$", "", m) if re.sub(r"_(bucket|sum|count)$", "", m) in HISTOGRAMS else m
            check(base in exposed, f"panel {p['title']} queries {m}, which the server does not expose")
            used.add(base)
for name in FIXED:
    check(name in used, f"no panel shows {name}")
for i, a in enumerate(boxes):
    for b in boxes[i + 1:]:
        overlap = a[1] < b[1] + b[3] and b[1] < a[1] + a[3] and a[2] < b[2] + b[4] and b[2] < a[2] + a[4]
        check(not overlap, f"panels '{a[0]}' and '{b[0]}' overlap")

if failures:
    print("\n".join(failures))
    sys.exit(1)

promtool = shutil.which("promtool")
if not promtool:
    print(f"structure checked ({len(exprs)} queries); SKIP the PromQL check: promtool not found (Debian package prometheus)")
    sys.exit(SKIP)
# Grafana's variables, replaced by what they expand to, then every query as a recording rule.
rules = ["groups:", "  - name: dashboard", "    rules:"]
for i, e in enumerate(exprs):
    e = e.replace("$__rate_interval", "1m").replace("$instance", ".*")
    rules += [f"      - record: pith:dashboard_query_{i}", f"        expr: {json.dumps(e)}"]
with tempfile.NamedTemporaryFile("w", suffix=".yml", delete=False) as f:
    f.write("\n".join(rules) + "\n")
    path = f.name
try:
    r = subprocess.run([promtool, "check", "rules", path], capture_output=True, text=True)
finally:
    os.unlink(path)
if r.returncode != 0:
    print("promtool check rules failed:\n" + r.stdout + r.stderr)
    sys.exit(1)
print(f"dashboard: {len(dash['panels'])} panels, {len(exprs)} queries, all valid PromQL over exposed metrics")
