// The model-server contract of the Kubernetes Gateway API Inference Extension (its endpoint picker, as
// llm-d runs it; docs/api.md#metrics and #health-and-readiness): the vllm: gauges it scrapes, with their
// names, types and labels, read under load against Pith's own series; an exposition parsed strictly
// (HELP and TYPE once per family, a family's samples together, model_name on every sample); and
// readiness apart from liveness through loading, pause, sleep and wake, and the drain after SIGTERM.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { LONG_TOKENS, call, metric, promtoolProblems, rawConnection, sleep, startServer, stopServer, waitHealthy, within } from './helpers.mjs';

const T = { timeout: 60000 };
const ADMIN = 'admin-gw';
const BLOCK = 16;
const tmp = mkdtempSync(path.join(process.env.PITH_TEST_TMP || os.tmpdir(), 'pith-gw-'));
const servers = [];
let srv, model;

before(async () => {
  // Two sequences at a time, so that more concurrent requests than that wait.
  srv = await startServer(['--max-num-seqs', '2', '--block-size', String(BLOCK), '--admin-key', ADMIN]);
  servers.push(srv);
  model = (await call(srv, 'GET', '/v1/models')).body.data[0].id;
});

after(async () => {
  for (const s of servers) {
    const code = await stopServer(s);
    assert.equal(code, 0, `server exit status after SIGTERM:\n${s.log().slice(-3000)}`);
  }
});

// The exposition, parsed strictly (text format 0.0.4): every line a HELP, a TYPE or a sample; a family's
// HELP then TYPE once, before its samples, which come together; a histogram's samples named NAME_bucket
// (with le), NAME_sum or NAME_count; label values quoted with \\, \" and \n escapes; model_name the first
// label of every sample. Returns Map(family -> { type, help, samples: [{ name, labels, value }] }).
function parseExposition(text) {
  assert.ok(text.endsWith('\n'), 'the exposition ends with a newline');
  const families = new Map();
  let current = null;
  const closed = new Set();
  const label = /^([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\["\\n])*)"/;
  for (const line of text.slice(0, -1).split('\n')) {
    let m;
    if ((m = line.match(/^# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) (.+)$/))) {
      assert.ok(!families.has(m[1]), `HELP ${m[1]} appears twice`);
      if (current) closed.add(current);
      current = m[1];
      families.set(current, { help: m[2], type: null, samples: [] });
      continue;
    }
    if ((m = line.match(/^# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram|summary|untyped)$/))) {
      assert.equal(m[1], current, `TYPE ${m[1]} does not follow its HELP`);
      assert.equal(families.get(current).type, null, `TYPE ${m[1]} appears twice`);
      families.get(current).type = m[2];
      continue;
    }
    assert.ok(!line.startsWith('#') && line.length, `unexpected line: ${JSON.stringify(line)}`);
    m = line.match(/^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})? (\S+)$/);
    assert.ok(m, `not a sample: ${line}`);
    const [, name, braces = '', value] = m;
    const labels = {};
    const keys = [];
    if (braces) {
      let rest = braces.slice(1, -1);
      while (rest.length) {
        const l = rest.match(label);
        assert.ok(l, `bad labels in ${line}`);
        assert.ok(!(l[1] in labels), `label ${l[1]} twice in ${line}`);
        labels[l[1]] = l[2].replace(/\\(.)/g, (_, c) => (c === 'n' ? '\n' : c));
        keys.push(l[1]);
        rest = rest.slice(l[0].length);
        if (rest.startsWith(',')) rest = rest.slice(1);
        else assert.equal(rest, '', `bad labels in ${line}`);
      }
    }
    assert.ok(current, `sample before any HELP: ${line}`);
    const fam = families.get(current);
    assert.ok(fam.type, `sample of ${current} before its TYPE`);
    let base = name;
    if (fam.type === 'histogram') {
      const h = name.match(/^(.*)_(bucket|sum|count)$/);
      assert.ok(h, `histogram sample ${name}`);
      base = h[1];
      if (h[2] === 'bucket') assert.ok('le' in labels, `bucket without le: ${line}`);
    }
    assert.ok(!closed.has(base), `a sample of ${base} after its family ended: ${line}`);
    assert.equal(base, current, `sample ${name} inside family ${current}`);
    assert.equal(keys[0], 'model_name', `model_name is not the first label: ${line}`);
    assert.ok(/^([-+]?(\d+\.?\d*([eE][-+]?\d+)?|\.\d+)|[-+]?Inf|NaN)$/.test(value), `bad value in ${line}`);
    fam.samples.push({ name, labels, value: Number(value) });
  }
  for (const [name, f] of families) assert.ok(f.type, `${name} has no TYPE`);
  return families;
}

// The one sample of `family` named `name` (the family's name by default).
function only(families, family, name = family) {
  const f = families.get(family);
  assert.ok(f, `no family ${family}`);
  const s = f.samples.filter((x) => x.name === name);
  assert.equal(s.length, 1, `${name}: ${JSON.stringify(s)}`);
  return s[0];
}

const scrape = async (s = srv) => {
  const r = await call(s, 'GET', '/metrics');
  assert.equal(r.status, 200);
  return r.text;
};

describe('the endpoint picker\'s gauges', () => {
  test('names, types, labels and HELP/TYPE once per family; promtool accepts it', T, async () => {
    const text = await scrape();
    const fams = parseExposition(text);
    for (const name of ['vllm:num_requests_waiting', 'vllm:num_requests_running', 'vllm:kv_cache_usage_perc', 'vllm:cache_config_info'])
      assert.equal(fams.get(name)?.type, 'gauge', name);
    for (const [name, f] of fams)
      for (const s of f.samples) assert.equal(s.labels.model_name, model, `${s.name} names the served model`);
    const info = only(fams, 'vllm:cache_config_info');
    assert.deepEqual(Object.keys(info.labels).sort(), ['block_size', 'model_name', 'num_gpu_blocks']);
    assert.equal(info.value, 1);
    assert.equal(info.labels.block_size, String(BLOCK));
    // The model has one full-attention group: its pool is the engine's whole KV pool.
    assert.ok(Number(info.labels.num_gpu_blocks) > 0);
    assert.equal(Number(info.labels.num_gpu_blocks), only(fams, 'pith_kv_blocks_total').value);
    assert.ok(!text.includes('lora'), 'no LoRA series: Pith serves no adapters');
    // Pith's own families are all still there.
    for (const name of ['pith_requests_running', 'pith_requests_waiting', 'pith_kv_blocks_in_use', 'pith_kv_blocks_total',
      'pith_memory_units', 'pith_request_success_total', 'pith_request_errors_total', 'pith_e2e_request_latency_seconds',
      'pith_weight_version_info', 'pith_asleep'])
      assert.ok(fams.has(name), name);
    assert.equal(promtoolProblems(text), null);
  });

  test('under load: running and waiting counted, KV usage as Pith\'s own KV series imply', T, async () => {
    // Six long streams against two sequences at a time: two run, four wait.
    const body = JSON.stringify({ model, prompt: 'Once upon a time', max_tokens: LONG_TOKENS, ignore_eos: true, stream: true });
    const streams = Array.from({ length: 6 }, () =>
      fetch(`${srv.base}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body })
        .then((r) => r.text()));
    let seen = null;
    const until = Date.now() + 20000;
    while (!seen && Date.now() < until) {
      const text = await scrape();
      const fams = parseExposition(text);
      const running = only(fams, 'vllm:num_requests_running').value;
      const waiting = only(fams, 'vllm:num_requests_waiting').value;
      if (running > 0 && waiting > 0) seen = { text, fams, running, waiting };
    }
    const texts = await Promise.all(streams);
    for (const t of texts) assert.match(t, /data: \[DONE\]/);
    assert.ok(seen, 'no scrape saw requests running and waiting at once');
    const { text, fams, running, waiting } = seen;
    assert.equal(running, only(fams, 'pith_requests_running').value);
    assert.equal(waiting, only(fams, 'pith_requests_waiting').value);
    assert.ok(running <= 2, `--max-num-seqs 2 bounds running (${running})`);
    const usage = only(fams, 'vllm:kv_cache_usage_perc').value;
    assert.ok(usage > 0 && usage <= 1, `kv usage ${usage}`);
    // Pith's series: blocks in use over the pool, and the fullest KV group of pith_memory_units.
    const inUse = only(fams, 'pith_kv_blocks_in_use').value;
    const total = only(fams, 'pith_kv_blocks_total').value;
    assert.ok(Math.abs(usage - inUse / total) < 1e-8, `${usage} against ${inUse}/${total}`);
    const groups = new Map();
    for (const s of fams.get('pith_memory_units').samples) {
      if (s.labels.kind === 'recurrent') continue;
      const g = groups.get(s.labels.group) ?? { used: 0, all: 0 };
      g.all += s.value;
      if (s.labels.state === 'used') g.used += s.value;
      groups.set(s.labels.group, g);
    }
    const fullest = Math.max(...[...groups.values()].map((g) => g.used / g.all));
    assert.ok(Math.abs(usage - fullest) < 1e-8, `${usage} against the fullest group ${fullest}`);
    assert.equal(promtoolProblems(text), null);
    // Idle again: nothing running or waiting, no block held.
    const idleUntil = Date.now() + 5000;
    for (;;) {
      const f = parseExposition(await scrape());
      const idle = only(f, 'vllm:num_requests_running').value === 0 && only(f, 'vllm:num_requests_waiting').value === 0 &&
        only(f, 'vllm:kv_cache_usage_perc').value === 0;
      if (idle) break;
      assert.ok(Date.now() < idleUntil, 'the gauges never went back to 0');
      await sleep(10);
    }
  });
});

// POST an admin operation; its parsed answer.
async function admin(s, op) {
  const r = await call(s, 'POST', `/v1/admin/${op}`, { key: ADMIN, body: {} });
  assert.equal(r.status, 200, `${op}: ${r.text}`);
  return r.body;
}

async function expectReady(s) {
  const r = await call(s, 'GET', '/health');
  assert.equal(r.status, 200, r.text);
  return r.body;
}

async function expectNotReady(s, code) {
  const r = await call(s, 'GET', '/health');
  assert.equal(r.status, 503, r.text);
  assert.equal(r.body?.error?.code, code, r.text);
  assert.equal(r.body.error.type, 'service_unavailable');
  const live = await call(s, 'GET', '/health/live');
  assert.equal(live.status, 200, `liveness while ${code}`);
  assert.deepEqual(live.body, { status: 'ok' });
}

describe('readiness apart from liveness', () => {
  test('loading: 503 model_not_ready while live, then 200', T, async () => {
    // The chat template comes through a FIFO: loading blocks on it, so the server is up but not ready.
    const fifo = path.join(tmp, 'template.fifo');
    execFileSync('mkfifo', [fifo]);
    const s = await startServer(['--chat-template', fifo], { waitReady: false });
    servers.push(s);
    await expectNotReady(s, 'model_not_ready');
    const head = await fetch(`${s.base}/health/live`, { method: 'HEAD' });
    assert.equal(head.status, 200);
    assert.equal(await head.text(), '');
    writeFileSync(fifo, '{% for m in messages %}{{ m.content }}{% endfor %}');
    await waitHealthy(s);
    assert.deepEqual(await expectReady(s), { status: 'ok' });
    assert.equal((await call(s, 'GET', '/health/live')).status, 200);
  });

  test('pause: still ready (requests wait, not refused); sleep: 503 sleeping; wake: 200', T, async () => {
    assert.deepEqual(await expectReady(srv), { status: 'ok' });
    await admin(srv, 'pause');
    assert.deepEqual(await expectReady(srv), { status: 'ok', paused: true });
    // A request sent now is held, and served at the resume: the pod can keep taking traffic.
    const held = call(srv, 'POST', '/v1/completions', { body: { model, prompt: 'Hi', max_tokens: 2 } });
    assert.equal(await within(held, 300, 'held'), 'held');
    await admin(srv, 'resume');
    assert.equal((await held).status, 200);
    assert.deepEqual(await expectReady(srv), { status: 'ok' });

    await admin(srv, 'sleep');
    await expectNotReady(srv, 'sleeping');
    const fams = parseExposition(await scrape());
    assert.equal(only(fams, 'pith_asleep').value, 1);
    await admin(srv, 'wake');
    assert.deepEqual(await expectReady(srv), { status: 'ok' });
    const r = await call(srv, 'POST', '/v1/completions', { body: { model, prompt: 'Hi', max_tokens: 2 } });
    assert.equal(r.status, 200, r.text);
  });

  test('drain after SIGTERM: /health 503 shutting_down while /health/live answers 200', T, async () => {
    const s = await startServer(['--admin-key', ADMIN, '--drain-timeout', '3']);
    servers.push(s);
    // Two kept-alive connections, open before the signal (the listening socket closes at once then);
    // each carries one request during the drain, whose replies close them.
    const a = rawConnection(s.port), b = rawConnection(s.port);
    const get = (p) => `GET ${p} HTTP/1.1\r\nHost: localhost\r\n\r\n`;
    for (const c of [a, b]) {
      await c.send(get('/health/live'));
      assert.equal((await c.next())?.status, 200);
    }
    // A request held by a pause keeps the drain going until --drain-timeout.
    await admin(s, 'pause');
    const held = call(s, 'POST', '/v1/completions', { body: { prompt: 'Hi', max_tokens: 2 } }).catch((e) => e);
    for (const until = Date.now() + 5000; !(metric(await scrape(s), 'vllm:num_requests_waiting') > 0);) {
      assert.ok(Date.now() < until, 'the held request never showed as waiting');
      await sleep(5);
    }
    s.proc.kill('SIGTERM');
    // The signal is taken on the server's own time: ask until the drain shows (a 200 before it keeps
    // the connection open; the 503 closes it).
    let ready;
    for (const until = Date.now() + 3000; ;) {
      await a.send(get('/health'));
      ready = await a.next();
      if (ready?.status !== 200) break;
      assert.ok(Date.now() < until, `no drain:\n${s.log()}`);
      await sleep(5);
    }
    assert.equal(ready?.status, 503, `${JSON.stringify(ready)}\n${s.log()}`);
    assert.equal(JSON.parse(ready.body).error.code, 'shutting_down');
    assert.match(s.log(), /SIGTERM: draining/);
    await b.send(get('/health/live'));
    const live = await b.next();
    assert.equal(live?.status, 200, JSON.stringify(live));
    assert.deepEqual(JSON.parse(live.body), { status: 'ok' });
    a.close();
    b.close();
    assert.equal(await within(s.exited, 10000), 0, s.log());
    await held;
  });
});
