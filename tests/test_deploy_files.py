"""The deploy files (deploy/Dockerfile, deploy/k8s/, deploy/helm/pith/, docs/deploy.md) against the
binary they run.

Parses every Kubernetes manifest and renders the Helm chart (without helm: a strict renderer of the
part of Go's template language the chart uses, which refuses anything else), then checks what the
probes, ports and arguments depend on: every `--flag` a manifest, the chart, the Dockerfile or a
`pith serve` command in docs/deploy.md passes is one `pith serve --help` lists; the probe paths are
Pith's readiness and liveness routes on the container port, and a real `pith serve` answers them; the
InferencePool selects the Deployment's pods on its port and names the EPP's Service; the EPP's
configuration parses and names the metrics Pith serves; the Dockerfile builds on Debian 12 with
scripts/setup-debian.sh and runs as a non-root user with a HEALTHCHECK on /health. `kubectl kustomize`
(offline) must build deploy/k8s; `kubectl apply --dry-run=client` is tried and reported as skipped
when it cannot run without an API server.

Flags the deploy files use that `pith serve` must have (--kv-events, --models-dir) fail the test with
a message saying so when the binary lacks them."""
import json
import os
import re
import shutil
import subprocess
import sys
import unittest
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pithtest  # noqa: E402

try:
    import yaml
except ImportError:  # python3-yaml is installed by scripts/setup-debian.sh
    pithtest.skip("python3-yaml is not installed")

ROOT = os.environ.get("PITH_SOURCE_DIR") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
DEPLOY = os.path.join(ROOT, "deploy")
K8S = os.path.join(DEPLOY, "k8s")
CHART = os.path.join(DEPLOY, "helm", "pith")

# Flags the deploy files or docs/deploy.md rely on that `pith serve` gained (or is gaining) for fleets.
REQUIRED_NEW_FLAGS = ("--kv-events", "--models-dir")
# The metric names the EPP's default (vLLM) engine profile scrapes from /metrics.
EPP_METRICS = ("vllm:num_requests_waiting", "vllm:num_requests_running", "vllm:kv_cache_usage_perc",
               "vllm:cache_config_info")
READY_PATH, LIVE_PATH = "/health", "/health/live"

_help = None


def serve_flags():
    """The long options `pith serve --help` lists."""
    global _help
    if _help is None:
        r = pithtest.run_pith(["serve", "--help"], timeout=60)
        assert r.returncode == 0, "pith serve --help failed: %s" % r.stderr.decode(errors="replace")
        _help = set(re.findall(r"(?<![\w-])(--[a-z0-9][a-z0-9-]*)", r.stdout.decode()))
    return _help


def flags_in(args):
    """The --flags in an argument list (the name before any '=')."""
    return [a.split("=", 1)[0] for a in args if isinstance(a, str) and a.startswith("--")]


def arg_value(args, flag):
    """The value after `flag` (or in `flag=value`); None when absent."""
    for i, a in enumerate(args):
        if a == flag and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
    return None


# ---- a strict renderer for the chart's templates ------------------------------------------------
class RenderError(Exception):
    pass


_ACTION = re.compile(r"\{\{(-?)(.*?)(-?)\}\}", re.S)


def _lex(src):
    """Text and action tokens, with {{- and -}} whitespace trimming applied to the text."""
    toks, pos = [], 0
    for m in _ACTION.finditer(src):
        text = src[pos:m.start()]
        if m.group(1) == "-" and not m.group(2).startswith(" ") and not m.group(2).startswith("\n"):
            raise RenderError("'{{-' must be followed by a space: %r" % m.group(0))
        if m.group(1):
            text = text.rstrip()
        if toks and toks[-1][0] == "action" and toks[-1][2]:
            text = text.lstrip()
        toks.append(("text", text, False))
        toks.append(("action", m.group(2).strip(), bool(m.group(3))))
        pos = m.end()
    text = src[pos:]
    if toks and toks[-1][0] == "action" and toks[-1][2]:
        text = text.lstrip()
    toks.append(("text", text, False))
    if "{{" in "".join(t[1] for t in toks if t[0] == "text"):
        raise RenderError("unbalanced '{{' in template")
    return toks


def _parse(toks, i, stop):
    """Nodes up to an `end`/`else` in `stop`; returns (nodes, index, the stopping keyword)."""
    nodes = []
    while i < len(toks):
        kind, s, _ = toks[i]
        i += 1
        if kind == "text":
            if s:
                nodes.append(("text", s))
            continue
        if s.startswith("/*"):
            if not s.endswith("*/"):
                raise RenderError("bad comment: %r" % s)
            continue
        word = s.split(None, 1)[0]
        rest = s[len(word):].strip()
        if word in ("end", "else"):
            if word not in stop:
                raise RenderError("unexpected {{ %s }}" % word)
            return nodes, i, word
        if word == "if":
            body, i, kw = _parse(toks, i, ("end", "else"))
            other = []
            if kw == "else":
                other, i, _ = _parse(toks, i, ("end",))
            nodes.append(("if", rest, body, other))
        elif word == "range":
            body, i, _ = _parse(toks, i, ("end",))
            nodes.append(("range", rest, body))
        elif word == "define":
            body, i, _ = _parse(toks, i, ("end",))
            nodes.append(("define", json.loads(rest), body))
        elif word in ("with", "template", "block", "tpl", "required", "printf", "default"):
            raise RenderError("{{ %s }} is outside the subset this renderer knows" % word)
        else:
            nodes.append(("out", s))
    if stop:
        raise RenderError("missing {{ end }}")
    return nodes, i, None


class Renderer:
    def __init__(self, chart_dir, values, release="pith", namespace="default"):
        with open(os.path.join(chart_dir, "Chart.yaml")) as f:
            chart = yaml.safe_load(f)
        self.root = {"Values": values, "Release": {"Name": release, "Namespace": namespace, "Service": "Helm"},
                     "Chart": {"Name": chart["name"], "Version": chart["version"], "AppVersion": chart["appVersion"]}}
        self.defines = {}
        tdir = os.path.join(chart_dir, "templates")
        self.templates = {}
        for name in sorted(os.listdir(tdir)):
            with open(os.path.join(tdir, name)) as f:
                nodes, _, _ = _parse(_lex(f.read()), 0, ())
            if name.startswith("_"):
                for n in nodes:
                    if n[0] == "define":
                        self.defines[n[1]] = n[2]
                    elif n[0] != "text" or n[1].strip():
                        raise RenderError("%s: only defines belong in a helper file" % name)
            else:
                self.templates[name] = nodes

    def lookup(self, path, dot):
        if path == ".":
            return dot
        if path == "$":
            return self.root
        if path.startswith("$."):
            cur, parts = self.root, path[2:].split(".")
        elif path.startswith("."):
            cur, parts = dot, path[1:].split(".")
        else:
            raise RenderError("not a value path: %r" % path)
        for p in parts:
            if not isinstance(cur, dict) or p not in cur:
                raise RenderError("no value at %s" % path)
            cur = cur[p]
        return cur

    @staticmethod
    def truthy(v):
        return v not in (None, False, 0, "", [], {})

    @staticmethod
    def fmt(v):
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (int, float, str)):
            return str(v)
        raise RenderError("cannot print %r as text" % (v,))

    def cond(self, expr, dot):
        words = expr.split()
        if words[0] == "not" and len(words) == 2:
            return not self.truthy(self.lookup(words[1], dot))
        if words[0] == "and" and len(words) >= 3:
            return all(self.truthy(self.lookup(w, dot)) for w in words[1:])
        if len(words) == 1:
            return self.truthy(self.lookup(words[0], dot))
        raise RenderError("condition outside the subset: %r" % expr)

    def pipeline(self, expr, dot):
        stages = [s.strip() for s in expr.split("|")]
        first = stages[0].split()
        if first[0] == "include":
            if len(first) != 3:
                raise RenderError("include takes a name and a context: %r" % expr)
            name = json.loads(first[1])
            if name not in self.defines:
                raise RenderError("no define named %s" % name)
            v = self.nodes(self.defines[name], self.lookup(first[2], dot))
        elif first[0] == "toYaml":
            v = yaml.safe_dump(self.lookup(first[1], dot), default_flow_style=False, sort_keys=True).rstrip("\n")
        elif len(first) == 1:
            v = self.lookup(first[0], dot)
        else:
            raise RenderError("expression outside the subset: %r" % expr)
        for st in stages[1:]:
            w = st.split()
            if w == ["quote"]:
                v = json.dumps(self.fmt(v))
            elif w == ["toYaml"]:
                v = yaml.safe_dump(v, default_flow_style=False, sort_keys=True).rstrip("\n")
            elif len(w) == 2 and w[0] in ("nindent", "indent"):
                pad = " " * int(w[1])
                v = "\n".join(pad + line for line in self.fmt(v).split("\n"))
                if w[0] == "nindent":
                    v = "\n" + v
            else:
                raise RenderError("function outside the subset: %r" % st)
        return self.fmt(v)

    def nodes(self, nodes, dot):
        out = []
        for n in nodes:
            if n[0] == "text":
                out.append(n[1])
            elif n[0] == "out":
                out.append(self.pipeline(n[1], dot))
            elif n[0] == "if":
                out.append(self.nodes(n[2] if self.cond(n[1], dot) else n[3], dot))
            elif n[0] == "range":
                seq = self.lookup(n[1], dot)
                if not isinstance(seq, list):
                    raise RenderError("range over a non-list: %s" % n[1])
                out.extend(self.nodes(n[2], item) for item in seq)
            elif n[0] == "define":
                raise RenderError("define outside a helper file")
        return "".join(out)

    def render(self):
        """{template name: [parsed YAML objects]}."""
        res = {}
        for name, nodes in self.templates.items():
            text = self.nodes(nodes, self.root)
            docs = [yaml.safe_load(d) for d in re.split(r"^---\s*$", text, flags=re.M)]
            res[name] = [d for d in docs if d is not None]
        return res


def chart_values(**overrides):
    with open(os.path.join(CHART, "values.yaml")) as f:
        values = yaml.safe_load(f)
    for dotted, v in overrides.items():
        cur = values
        *head, last = dotted.split("__")
        for h in head:
            cur = cur[h]
        assert last in cur, "no value %s in values.yaml" % dotted
        cur[last] = v
    return values


def render_chart(**overrides):
    objs = []
    for docs in Renderer(CHART, chart_values(**overrides)).render().values():
        objs.extend(docs)
    return objs


def load_manifests():
    objs = []
    for name in sorted(os.listdir(K8S)):
        if name.endswith(".yaml") and name != "kustomization.yaml":
            with open(os.path.join(K8S, name)) as f:
                objs.extend(d for d in yaml.safe_load_all(f) if d is not None)
    return objs


# ---- checks shared by the manifests and the rendered chart ---------------------------------------
def find(objs, kind, name=None):
    return [o for o in objs if o.get("kind") == kind and (name is None or o["metadata"]["name"] == name)]


def pith_container(objs):
    deps = [d for d in find(objs, "Deployment")
            if any(c["name"] == "pith" for c in d["spec"]["template"]["spec"]["containers"])]
    assert len(deps) == 1, "expected one Deployment with a 'pith' container, found %d" % len(deps)
    dep = deps[0]
    return dep, next(c for c in dep["spec"]["template"]["spec"]["containers"] if c["name"] == "pith")


def container_port(c, ref):
    """A probe's or Service's port (a name or a number) as the container port number."""
    for p in c.get("ports", []):
        if ref in (p.get("name"), p["containerPort"]):
            return p["containerPort"]
    raise AssertionError("port %r is not a port of container %s" % (ref, c["name"]))


class Checks:
    def check_objects(self, objs, where):
        flags = serve_flags()
        dep, c = pith_container(objs)
        pod = dep["spec"]["template"]
        labels = pod["metadata"]["labels"]
        self.assertEqual(dep["spec"]["selector"]["matchLabels"],
                         {k: labels[k] for k in dep["spec"]["selector"]["matchLabels"]}, where)
        self.assertEqual(c["command"], ["pith", "serve"], where)
        args = [str(a) for a in c["args"]]
        unknown = [f for f in flags_in(args) if f not in flags]
        self.assertEqual(unknown, [], "%s: flags `pith serve --help` does not list: %s" % (where, unknown))
        self.assertEqual(arg_value(args, "--host"), "0.0.0.0", where + ": must listen on every address")
        port = int(arg_value(args, "--port"))
        self.assertEqual(container_port(c, "http"), port, where + ": containerPort 'http' != --port")
        # Probes: readiness and startup on /health (503 until loaded, asleep, draining), liveness on
        # /health/live; all on Pith's port.
        for probe, path in (("readinessProbe", READY_PATH), ("startupProbe", READY_PATH), ("livenessProbe", LIVE_PATH)):
            self.assertIn(probe, c, where)
            get = c[probe]["httpGet"]
            self.assertEqual(get["path"], path, "%s: %s path" % (where, probe))
            self.assertEqual(container_port(c, get["port"]), port, "%s: %s port" % (where, probe))
        # The startup probe must allow a slow load: at least 5 minutes.
        sp = c["startupProbe"]
        self.assertGreaterEqual(sp["periodSeconds"] * sp["failureThreshold"], 300, where)
        # The grace period covers the preStop pause and the whole drain.
        drain = float(arg_value(args, "--drain-timeout") or 30)
        pre = c.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command", [])
        pause = float(pre[1]) if pre[:1] == ["sleep"] else 0
        grace = pod["spec"]["terminationGracePeriodSeconds"]
        self.assertGreater(grace, drain + pause, "%s: terminationGracePeriodSeconds %s <= drain %s + preStop %s"
                           % (where, grace, drain, pause))
        # Threads = the CPUs requested, so the pod neither oversubscribes nor idles its share.
        self.assertEqual(int(arg_value(args, "--threads")), int(str(c["resources"]["requests"]["cpu"])), where)
        self.assertIn("memory", c["resources"]["limits"], where)
        # Non-root, as the image's USER.
        sc = pod["spec"]["securityContext"]
        self.assertTrue(sc["runAsNonRoot"], where)
        self.assertNotEqual(sc["runAsUser"], 0, where)
        # KV events: a tcp://*:N endpoint with N a container port.
        kv = arg_value(args, "--kv-events")
        if kv is not None:
            m = re.fullmatch(r"tcp://\*:(\d+)", kv)
            self.assertTrue(m, "%s: --kv-events %s is not tcp://*:PORT" % (where, kv))
            self.assertEqual(container_port(c, int(m.group(1))), int(m.group(1)), where)
        # Services over the pods: selector within the pod labels, target port Pith's.
        for svc in find(objs, "Service"):
            sel = svc["spec"]["selector"]
            if sel.items() <= labels.items():
                self.assertEqual(container_port(c, svc["spec"]["ports"][0]["targetPort"]), port, where)
        self.assertTrue(any(s["spec"]["selector"].items() <= labels.items() for s in find(objs, "Service")),
                        where + ": no Service selects the Pith pods")
        for pool in find(objs, "InferencePool"):
            self.check_pool(objs, pool, labels, port, kv, where)
        return args

    def check_pool(self, objs, pool, labels, port, kv, where):
        self.assertEqual(pool["apiVersion"], "inference.networking.k8s.io/v1", where)
        spec = pool["spec"]
        sel = spec["selector"]["matchLabels"]
        self.assertTrue(sel, where + ": empty pool selector")
        self.assertLessEqual(sel.items(), labels.items(), where + ": the pool's selector does not match the pods")
        self.assertEqual(spec["targetPorts"], [{"number": port}], where + ": pool targetPorts != Pith's port")
        ref = spec["endpointPickerRef"]
        self.assertIn(ref.get("failureMode", "FailClose"), ("FailOpen", "FailClose"), where)
        svcs = find(objs, "Service", ref["name"])
        self.assertEqual(len(svcs), 1, "%s: endpointPickerRef names no Service %s" % (where, ref["name"]))
        svc = svcs[0]
        self.assertIn(ref["port"]["number"], [p["port"] for p in svc["spec"]["ports"]], where)
        # The EPP Deployment behind that Service watches this pool.
        epps = [d for d in find(objs, "Deployment")
                if svc["spec"]["selector"].items() <= d["spec"]["template"]["metadata"]["labels"].items()]
        self.assertEqual(len(epps), 1, where + ": no EPP Deployment behind the endpointPickerRef Service")
        epp = epps[0]["spec"]["template"]["spec"]
        ec = epp["containers"][0]
        eargs = [str(a) for a in ec["args"]]
        self.assertEqual(arg_value(eargs, "--pool-name"), pool["metadata"]["name"], where)
        self.assertEqual(arg_value(eargs, "--pool-group"), "inference.networking.k8s.io", where)
        grpc = arg_value(eargs, "--grpc-port") or "9002"
        ext = [p for p in svc["spec"]["ports"] if p["port"] == ref["port"]["number"]][0]
        self.assertEqual(container_port(ec, ext["targetPort"]), int(grpc), where + ": EPP ext-proc port")
        self.assertEqual(epp["serviceAccountName"], find(objs, "ServiceAccount")[0]["metadata"]["name"], where)
        # Its configuration file is in its ConfigMap, and every configuration there is consistent.
        cm_name = next(v["configMap"]["name"] for v in epp["volumes"] if "configMap" in v)
        mount = next(m["mountPath"] for m in ec["volumeMounts"])
        data = find(objs, "ConfigMap", cm_name)[0]["data"]
        cfg_file = arg_value(eargs, "--config-file")
        self.assertTrue(cfg_file.startswith(mount + "/"), where)
        self.assertIn(cfg_file[len(mount) + 1:], data, where + ": --config-file is not in the ConfigMap")
        for key, text in data.items():
            self.check_epp_config(key, yaml.safe_load(text), kv, where)
        for route in find(objs, "HTTPRoute"):
            refs = [b for r in route["spec"]["rules"] for b in r["backendRefs"]]
            self.assertIn(("InferencePool", pool["metadata"]["name"]), [(b["kind"], b["name"]) for b in refs], where)

    def check_epp_config(self, key, cfg, kv, where):
        where = "%s: EPP config %s" % (where, key)
        self.assertEqual(cfg["kind"], "EndpointPickerConfig", where)
        self.assertEqual(cfg["apiVersion"], "llm-d.ai/v1alpha1", where)
        names = {p.get("name", p["type"]): p for p in cfg["plugins"]}
        refs = [p["pluginRef"] for prof in cfg["schedulingProfiles"] for p in prof["plugins"]]
        for src in cfg.get("dataLayer", {}).get("sources", []):
            refs.append(src["pluginRef"])
            refs.extend(e["pluginRef"] for e in src["extractors"])
        missing = [r for r in refs if r not in names]
        self.assertEqual(missing, [], where + ": pluginRefs to undeclared plugins")
        # Metrics come from Pith's /metrics with the default (vLLM) engine profile.
        self.assertEqual(names["metrics-data-source"]["parameters"]["path"], "/metrics", where)
        self.assertNotIn("parameters", names["core-metrics-extractor"], where + ": the vLLM profile is the default")
        if "precise-prefix-cache-producer" in names:
            ev = names["precise-prefix-cache-producer"]["parameters"]["kvEventsConfig"]
            self.assertIsNotNone(kv, where + ": the precise scorer needs Pith's --kv-events")
            self.assertEqual(ev["podDiscoveryConfig"]["socketPort"], int(kv.rsplit(":", 1)[1]), where)
            self.assertTrue(ev["topicFilter"].startswith("kv@"), where)
            self.assertEqual(names["prefix-cache-scorer"]["parameters"]["prefixMatchInfoProducerName"],
                             "precise-prefix-cache-producer", where)


class TestDeployFiles(unittest.TestCase, Checks):
    def test_new_flags_exist(self):
        flags = serve_flags()
        for f in REQUIRED_NEW_FLAGS:
            self.assertTrue(f in flags, "`pith serve --help` does not list %s, which deploy/ and docs/deploy.md "
                            "use: the flag is not implemented in this build yet" % f)

    def test_k8s_manifests(self):
        objs = load_manifests()
        kinds = sorted(o["kind"] for o in objs)
        for k in ("Deployment", "Service", "InferencePool", "ConfigMap", "HTTPRoute"):
            self.assertIn(k, kinds)
        self.check_objects(objs, "deploy/k8s")

    def test_helm_chart_default(self):
        objs = render_chart()
        self.assertEqual(sorted(o["kind"] for o in objs), ["Deployment", "Service"],
                         "the chart's defaults render the Deployment and the Service only")
        self.check_objects(objs, "helm (defaults)")

    def test_helm_chart_with_pool(self):
        objs = render_chart(inferencePool__enabled=True, httpRoute__enabled=True,
                            epp__configFile="precise-prefix.yaml",
                            extraArgs=["--kv-mem", "64M"], model__path="/models/m.gguf", model__name="m")
        self.assertEqual(len(find(objs, "InferencePool")), 1)
        args = self.check_objects(objs, "helm (pool)")
        self.assertEqual(arg_value(args, "--kv-mem"), "64M")
        self.assertEqual(arg_value(args, "--model"), "/models/m.gguf")
        # Without KV events the port and the flag go away.
        objs = render_chart(kvEvents__enabled=False)
        _, c = pith_container(objs)
        self.assertNotIn("--kv-events", c["args"])
        self.assertEqual([p["name"] for p in c["ports"]], ["http"])

    def test_chart_matches_manifests(self):
        """With the pool enabled and release name pith, the chart renders what deploy/k8s holds."""
        k8s = load_manifests()
        helm = render_chart(inferencePool__enabled=True, httpRoute__enabled=True)
        _, kc = pith_container(k8s)
        _, hc = pith_container(helm)
        for field in ("command", "args", "ports", "startupProbe", "readinessProbe", "livenessProbe",
                      "lifecycle", "resources", "securityContext"):
            self.assertEqual([str(a) for a in hc[field]] if field == "args" else hc[field],
                             [str(a) for a in kc[field]] if field == "args" else kc[field], field)
        self.assertEqual(find(helm, "InferencePool")[0]["spec"], find(k8s, "InferencePool")[0]["spec"])
        self.assertEqual(find(helm, "ConfigMap")[0]["data"], find(k8s, "ConfigMap")[0]["data"],
                         "deploy/k8s/epp.yaml and the chart's templates/epp.yaml carry different EPP configurations")
        self.assertEqual(find(helm, "HTTPRoute")[0]["spec"], find(k8s, "HTTPRoute")[0]["spec"])

    def test_renderer_is_strict(self):
        """The renderer refuses what it does not know, rather than rendering it wrong."""
        for bad in ("{{ .Values.nope }}", "{{ default 1 .Values.port }}", "{{ .Values.port | upper }}",
                    "{{- if .Values.port }}x", "{{ with .Values }}x{{ end }}"):
            with self.assertRaises(RenderError, msg=bad):
                r = Renderer(CHART, chart_values())
                r.nodes(_parse(_lex(bad), 0, ())[0], r.root)
        r = Renderer(CHART, chart_values())
        self.assertEqual(r.nodes(_parse(_lex("a:\n  {{- include \"pith.selectorLabels\" . | nindent 2 }}"), 0, ())[0],
                                 r.root), "a:\n  app.kubernetes.io/name: pith\n  app.kubernetes.io/instance: pith")

    def test_dockerfile(self):
        with open(os.path.join(DEPLOY, "Dockerfile")) as f:
            text = f.read()
        lines = [l for l in text.splitlines() if not l.lstrip().startswith("#")]
        instrs = []
        for l in "\n".join(lines).replace("\\\n", " ").splitlines():
            if l.strip():
                word, _, rest = l.strip().partition(" ")
                instrs.append((word.upper(), rest.strip()))
        froms = [i for i, (w, _) in enumerate(instrs) if w == "FROM"]
        self.assertGreaterEqual(len(froms), 2, "multi-stage: a build and a runtime stage")
        for i in froms:
            image = instrs[i][1].split()[0]
            self.assertRegex(image, r"^debian:(12|bookworm)(-slim)?$", "every stage on Debian 12")
        build = instrs[froms[0]:froms[1]]
        runtime = instrs[froms[-1]:]
        self.assertTrue(any(w == "RUN" and "scripts/setup-debian.sh" in r for w, r in build),
                        "the build stage runs scripts/setup-debian.sh")
        self.assertTrue(any(w == "RUN" and "CMAKE_BUILD_TYPE=Release" in r for w, r in build))
        for w, r in build:
            if w == "RUN" and "setup-debian.sh" in r:
                opt = r.split("setup-debian.sh", 1)[1].split()
                if opt:  # the option the Dockerfile passes must be one the script accepts
                    res = subprocess.run(["bash", os.path.join(ROOT, "scripts", "setup-debian.sh"), "--help"],
                                         stdout=subprocess.PIPE, timeout=30)
                    self.assertIn(opt[0], res.stdout.decode(), "setup-debian.sh does not know " + opt[0])
        users = [r for w, r in runtime if w == "USER"]
        self.assertTrue(users, "the runtime stage sets USER")
        self.assertNotIn(users[-1].split(":")[0], ("root", "0"), "the runtime user is not root")
        entry = json.loads(dict(runtime)["ENTRYPOINT"])
        self.assertEqual(entry[:2], ["pith", "serve"])
        self.assertEqual(arg_value(entry, "--host"), "0.0.0.0")
        port = arg_value(entry, "--port")
        unknown = [f for f in flags_in(entry) if f not in serve_flags()]
        self.assertEqual(unknown, [], "ENTRYPOINT flags `pith serve --help` does not list")
        self.assertIn(port, dict(runtime)["EXPOSE"].split())
        health = dict(runtime)["HEALTHCHECK"]
        self.assertRegex(health, r"http://127\.0\.0\.1:%s%s(?![\w/.-])" % (port, re.escape(READY_PATH)),
                         "the HEALTHCHECK asks /health on the server's port")
        # The model comes from the build context: the default ARG names a file in the repository.
        args = dict(r.split("=", 1) for w, r in runtime if w == "ARG" and "=" in r)
        self.assertTrue(os.path.isfile(os.path.join(ROOT, args["MODEL"])), "ARG MODEL default is not a file")
        self.assertTrue(any(w == "COPY" and r.startswith("${MODEL}") for w, r in runtime))
        self.assertTrue(any(w == "ENV" and r.startswith("PITH_DEFAULT_MODEL=") for w, r in runtime))
        # .dockerignore keeps what the build needs.
        with open(os.path.join(ROOT, ".dockerignore")) as f:
            ignored = [l.strip() for l in f if l.strip() and not l.startswith("#")]
        for needed in ("scripts", "src", "assets", "CMakeLists.txt", args["MODEL"]):
            self.assertFalse(any(needed == p or needed.startswith(p.rstrip("/") + "/") for p in ignored),
                             ".dockerignore excludes " + needed)

    def test_setup_script_modes(self):
        script = os.path.join(ROOT, "scripts", "setup-debian.sh")
        r = subprocess.run(["bash", script, "--no-such-mode"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30)
        self.assertEqual(r.returncode, 2, "an unknown option is refused before anything is installed")
        r = subprocess.run(["bash", script, "--help"], stdout=subprocess.PIPE, timeout=30)
        self.assertEqual(r.returncode, 0)
        self.assertIn("--build-only", r.stdout.decode())

    def test_docs_commands(self):
        """Every `pith serve` command in docs/deploy.md uses flags the binary has."""
        with open(os.path.join(ROOT, "docs", "deploy.md")) as f:
            text = f.read().replace("\\\n", " ")
        # The text after each "pith serve", up to the end of its inline code span or line.
        cmds = [seg.split("`", 1)[0] for l in text.splitlines() for seg in l.split("pith serve")[1:]]
        self.assertGreater(len(cmds), 3, "docs/deploy.md shows pith serve commands")
        bad = sorted({f for cmd in cmds for f in flags_in(cmd.split()) if f not in serve_flags()})
        self.assertEqual(bad, [], "docs/deploy.md passes flags `pith serve --help` does not list")

    def test_kustomize(self):
        kubectl = shutil.which("kubectl")
        if not kubectl:
            print("skipped: kubectl is not installed: kustomize build not checked")
            return
        r = subprocess.run([kubectl, "kustomize", K8S], stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr.decode())
        built = sorted((o["kind"], o["metadata"]["name"]) for o in yaml.safe_load_all(r.stdout) if o)
        self.assertEqual(built, sorted((o["kind"], o["metadata"]["name"]) for o in load_manifests()),
                         "kustomization.yaml lists every manifest in deploy/k8s")

    def test_kubectl_dry_run(self):
        kubectl = shutil.which("kubectl")
        if not kubectl:
            print("skipped: kubectl is not installed")
            return
        # A server address nothing listens on, so that no local service (a pith on 8080, say) answers.
        r = subprocess.run([kubectl, "apply", "--dry-run=client", "--server=http://127.0.0.1:9", "-f", K8S],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120,
                           env=dict(os.environ, KUBECONFIG=os.devnull))
        if r.returncode != 0 and re.search(rb"connection refused|failed to download openapi|unable to recognize", r.stderr):
            print("skipped: kubectl apply --dry-run=client needs an API server for discovery, and there is none: "
                  + r.stderr.decode(errors="replace").strip().splitlines()[-1][:200])
            return
        self.assertEqual(r.returncode, 0, r.stderr.decode())

    def test_probe_routes_answer(self):
        """A real `pith serve` with the default model answers the probe paths and serves the metrics the
        EPP configuration reads."""
        _, c = pith_container(load_manifests())
        paths = {c[p]["httpGet"]["path"] for p in ("startupProbe", "readinessProbe", "livenessProbe")}
        with pithtest.Server(["--max-conns-per-ip", "0"]) as srv:
            for path in sorted(paths):
                try:
                    with urllib.request.urlopen(srv.base + path, timeout=10) as r:
                        status = r.status
                except urllib.error.HTTPError as e:
                    status = e.code
                self.assertEqual(status, 200, "GET %s (a probe path in deploy/) answered %d on a ready server"
                                 % (path, status))
            with urllib.request.urlopen(srv.base + "/metrics", timeout=30) as r:
                names = {re.split(r"[{\s]", l, 1)[0] for l in r.read().decode().splitlines()
                         if l and not l.startswith("#")}
            missing = [m for m in EPP_METRICS if m not in names]
            self.assertEqual(missing, [], "Pith's /metrics lacks what the EPP configuration in deploy/ reads")
            self.assertEqual(srv.close(), 0, "pith serve did not drain and exit 0 on SIGTERM")


if __name__ == "__main__":
    pithtest.pith_bin()
    pithtest.main()
