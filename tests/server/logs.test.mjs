// Logs (docs/api.md, Logs): --log-format json writes one parseable object per line with ts, level,
// msg and fields (the start-up summary, the access line with tokens and timings); --log-level error
// silences info lines; bad values of either option are usage errors.
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import net from 'node:net';
import { after, describe, test } from 'node:test';

import { LONG_TOKENS, PITH_BIN, call, findModel, sleep, startServer, stopServer } from './helpers.mjs';

const T = { timeout: 30000 };
const servers = [];
after(async () => {
  for (const s of servers) await stopServer(s);
});

// Every non-empty line parsed as JSON (a line that does not parse fails the test, naming it).
function jsonLines(log) {
  return log.split('\n').filter((l) => l.trim()).map((l) => {
    try {
      return JSON.parse(l);
    } catch {
      assert.fail(`not a JSON line: ${l}`);
    }
  });
}

async function until(pred, ms = 5000) {
  const end = Date.now() + ms;
  while (!pred() && Date.now() < end) await sleep(20);
  return pred();
}

describe('--log-format json', () => {
  test('every line is an object with ts, level and msg; summary and access lines carry fields', T, async () => {
    const s = await startServer(['--log-format', 'json']);
    servers.push(s);
    const r = await call(s, 'POST', '/v1/completions', { body: { prompt: 'Once upon a time', max_tokens: 4, temperature: 0 } });
    assert.equal(r.status, 200);
    await call(s, 'GET', '/nope');
    assert.ok(await until(() => s.log().includes('/nope')), s.log());
    assert.equal(await stopServer(s), 0);
    const lines = jsonLines(s.log());
    for (const l of lines) {
      assert.match(l.ts, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
      assert.ok(['error', 'warn', 'info', 'debug'].includes(l.level), l.level);
      assert.equal(typeof l.msg, 'string');
    }
    const summary = lines.find((l) => /loaded in/.test(l.msg));
    assert.ok(summary, 'a start-up summary line');
    assert.equal(summary.level, 'info');
    for (const k of ['path', 'arch', 'weights', 'kernels', 'listen']) assert.equal(typeof summary[k], 'string', k);
    assert.ok(summary.threads >= 1);
    assert.ok(summary.mem_groups >= 1 && typeof summary.mem0 === 'string' && /blocks|states/.test(summary.mem0));
    assert.ok(summary.mem_bytes > 0 && summary.load_s >= 0);
    assert.equal(summary.listen, s.base);

    const gen = lines.find((l) => l.path === '/v1/completions');
    assert.ok(gen, 'an access line for the completion');
    assert.equal(gen.status, 200);
    assert.equal(gen.method, 'POST');
    assert.ok(Number.isInteger(gen.id) && gen.id > 0);
    assert.equal(gen.prompt_tokens, r.body.usage.prompt_tokens);
    assert.equal(gen.completion_tokens, r.body.usage.completion_tokens);
    assert.ok(gen.ttft_s >= 0 && gen.total_s >= gen.ttft_s, JSON.stringify(gen));
    const miss = lines.find((l) => l.path === '/nope');
    assert.equal(miss.status, 404);
    assert.equal(miss.prompt_tokens, undefined, 'no token counts for a request that generated nothing');
    assert.ok(lines.some((l) => l.msg === 'stopped'));
  });
});

describe('access line of a stream the client cancelled', () => {
  test('counts the prompt and the tokens sent before the cancel', T, async () => {
    const s = await startServer(['--log-format', 'json']);
    servers.push(s);
    const ac = new AbortController();
    const r = await fetch(`${s.base}/v1/completions`, {
      method: 'POST', signal: ac.signal, headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ prompt: 'Once upon a time', max_tokens: LONG_TOKENS, temperature: 0, ignore_eos: true, stream: true }),
    });
    const reader = r.body.getReader();
    let text = '';
    while ((text.match(/"text"/g) || []).length < 3) text += new TextDecoder().decode((await reader.read()).value);
    ac.abort();
    const chunks = (text.match(/"text"/g) || []).length;
    assert.ok(await until(() => /"ended":"client gone"/.test(s.log())), s.log());
    const line = jsonLines(s.log()).find((l) => l.path === '/v1/completions');
    assert.ok(line.prompt_tokens > 0, JSON.stringify(line));
    assert.ok(line.completion_tokens >= chunks && line.completion_tokens < LONG_TOKENS, JSON.stringify(line));
  });
});

// A port free a moment ago (the silenced server does not log where it listens).
function freePort() {
  return new Promise((resolve) => {
    const srv = net.createServer();
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

describe('--log-level', () => {
  test('error silences the summary and the access lines', T, async () => {
    const port = await freePort();
    const proc = spawn(PITH_BIN, ['serve', ...findModel().args, '--port', String(port), '-t', '1', '--log-level', 'error'],
      { stdio: ['ignore', 'ignore', 'pipe'] });
    let log = '';
    proc.stderr.on('data', (d) => (log += d.toString()));
    const exited = new Promise((resolve) => proc.on('exit', (code) => resolve(code)));
    const base = `http://127.0.0.1:${port}`;
    let ok = false;
    for (let i = 0; i < 500 && !ok; i++) {
      try {
        ok = (await fetch(`${base}/health`)).status === 200;
      } catch {}
      if (!ok) await sleep(20);
    }
    try {
      assert.ok(ok, `server not healthy:\n${log}`);
      const r = await fetch(`${base}/v1/completions`, {
        method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ prompt: 'Hi', max_tokens: 2 }),
      });
      assert.equal(r.status, 200);
    } finally {
      proc.kill('SIGTERM');
    }
    assert.equal(await exited, 0);
    assert.equal(log, '', 'nothing below error is written');
  });

  test('text lines at the default level include the access line with tokens and timings', T, async () => {
    const s = await startServer();
    servers.push(s);
    await call(s, 'POST', '/v1/completions', { body: { prompt: 'Hi', max_tokens: 3 } });
    assert.ok(await until(() => /POST \/v1\/completions 200 id=\d+/.test(s.log())), s.log());
    assert.match(s.log(), /prompt_tokens=\d+ completion_tokens=\d+ ttft_s=[\d.]+ total_s=[\d.]+/);
    assert.match(s.log(), /loaded in [\d.]+ s .*kernels=\S+ .*mem0=/);
  });

  test('bad values are usage errors naming the choices', () => {
    for (const [opt, val, want] of [['--log-level', 'loud', /error, warn, info or debug/], ['--log-format', 'xml', /text or json/]]) {
      const r = spawnSync(PITH_BIN, ['serve', opt, val], { encoding: 'utf8' });
      assert.equal(r.status, 2, r.stderr);
      assert.match(r.stderr, want);
    }
  });
});
