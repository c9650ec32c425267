// Several models in one server (--models-dir, -m NAME=PATH; docs/api.md, Several models): the request's
// "model" picks one, loaded on first use and unloaded least recently used under --models-max and
// --models-mem or after --models-ttl; a failed load leaves the others serving; unloading waits for the
// model's running requests; the admin endpoints load and unload at will.
import assert from 'node:assert/strict';
import { mkdirSync, symlinkSync, writeFileSync, existsSync, statSync } from 'node:fs';
import path from 'node:path';
import { after, describe, test } from 'node:test';

import { call, errorShape, metric, promtoolProblems, readSSE, sleep, startServer, stopServer } from './helpers.mjs';

const T = { timeout: 60000 };
const ADMIN = 'models-admin-key';
// A long reply within the default model's context (256 tokens), whatever model the other tests run.
const LONG = 200;
const src = process.env.PITH_SOURCE_DIR;
const DEFAULT = src && path.join(src, 'assets', 'default.gguf');
const servers = [];

after(async () => {
  for (const s of servers) {
    const code = await stopServer(s);
    assert.equal(code, 0, `server exit status:\n${s.log().slice(-3000)}`);
    assert.doesNotMatch(s.log(), /invariant broken/, 'the registry bookkeeping held after every load and unload');
  }
});

// A directory of models: alpha, beta and gamma (the default model under three names) and broken (not a
// GGUF file), plus an entry that is no model (notes.txt) and the second part of a split file.
function modelsDir() {
  const dir = path.join(process.env.PITH_TEST_TMP || '/tmp', `models-${process.pid}-${Date.now()}`);
  mkdirSync(dir, { recursive: true });
  for (const n of ['alpha', 'beta', 'gamma']) symlinkSync(DEFAULT, path.join(dir, `${n}.gguf`));
  writeFileSync(path.join(dir, 'broken.gguf'), 'not a model at all');
  writeFileSync(path.join(dir, 'notes.txt'), 'ignored');
  symlinkSync(DEFAULT, path.join(dir, 'split-00002-of-00002.gguf'));
  return dir;
}

async function serve(args) {
  const s = await startServer(['--admin-key', ADMIN, ...args], { model: { args: [] } });
  servers.push(s);
  return s;
}

const complete = (srv, model, extra = {}) =>
  call(srv, 'POST', '/v1/completions', { body: { model, prompt: 'Once upon a time', max_tokens: 4, ...extra } });

async function statuses(srv) {
  const r = await call(srv, 'GET', '/v1/models');
  assert.equal(r.status, 200);
  return Object.fromEntries(r.body.data.map((m) => [m.id, m.status.value]));
}

async function waitStatus(srv, id, want, ms = 10000) {
  const until = Date.now() + ms;
  for (;;) {
    const s = await statuses(srv);
    if (s[id] === want) return;
    if (Date.now() > until) assert.fail(`model ${id} is ${s[id]}, not ${want}:\n${srv.log().slice(-2000)}`);
    await sleep(50);
  }
}

describe('several models', { skip: !DEFAULT || !existsSync(DEFAULT) ? 'no assets/default.gguf' : false }, () => {
  test('routes by "model", lists every model with its state, refuses unknown and missing names', T, async () => {
    const srv = await serve(['--models-dir', modelsDir()]);
    assert.deepEqual(await statuses(srv), { alpha: 'unloaded', beta: 'unloaded', broken: 'unloaded', gamma: 'unloaded' },
      'the directory listing: NAME.gguf files, not other files nor a split file\'s later parts');
    const h = await call(srv, 'GET', '/health');
    assert.equal(h.status, 200, 'ready with nothing loaded: models load on demand');

    // two models at once, both first requests (each waits for its load)
    const [a, b] = await Promise.all([complete(srv, 'alpha'), complete(srv, 'beta')]);
    assert.equal(a.status, 200, a.text);
    assert.equal(b.status, 200, b.text);
    assert.equal(a.body.model, 'alpha');
    assert.equal(b.body.model, 'beta');
    const s = await statuses(srv);
    assert.equal(s.alpha, 'loaded');
    assert.equal(s.beta, 'loaded');
    const one = await call(srv, 'GET', '/v1/models/alpha');
    assert.equal(one.status, 200);
    assert.equal(one.body.max_model_len > 0, true, 'a loaded model says its context');

    const unknown = errorShape(assert, await complete(srv, 'nope'), 404);
    assert.equal(unknown.code, 'model_not_found');
    assert.match(unknown.message, /alpha, beta, broken, gamma/, 'the 404 lists the models served');
    errorShape(assert, await call(srv, 'GET', '/v1/models/nope'), 404);
    const missing = errorShape(assert, await call(srv, 'POST', '/v1/completions', { body: { prompt: 'x', max_tokens: 1 } }), 400);
    assert.equal(missing.code, 'model_required');
    const bad = errorShape(assert, await call(srv, 'POST', '/v1/completions', { raw: '{"model": ', headers: { 'content-type': 'application/json' } }), 400);
    assert.equal(bad.code, 'invalid_json');

    // chat and the other per-model routes go to the model too
    const chat = await call(srv, 'POST', '/v1/chat/completions', { body: { model: 'beta', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 } });
    assert.equal(chat.status, 200, chat.text);
    assert.equal(chat.body.model, 'beta');
    const tok = await call(srv, 'POST', '/tokenize', { body: { model: 'alpha', content: 'hello' } });
    assert.equal(tok.status, 200, tok.text);

    // a model added to the directory later is found when a request names it
    const dir = srv.proc.spawnargs[srv.proc.spawnargs.indexOf('--models-dir') + 1];
    symlinkSync(DEFAULT, path.join(dir, 'delta.gguf'));
    const d = await complete(srv, 'delta');
    assert.equal(d.status, 200, d.text);

    // both models' series in one exposition, each family's HELP once
    const text = (await call(srv, 'GET', '/metrics')).text;
    assert.equal(metric(text, 'pith_models_loaded'), 3);
    assert.equal(metric(text, 'pith_models_known'), 5);
    const helps = text.split('\n').filter((l) => l.startsWith('# HELP '));
    assert.equal(new Set(helps).size, helps.length, 'every family is described once');
    for (const m of ['alpha', 'beta', 'delta']) {
      assert.ok(text.includes(`model_name="${m}"`), `series for ${m}`);
      assert.ok(metric(text, 'vllm:num_requests_running', `model_name="${m}"`) === 0, `the gateway's gauge for ${m}`);
    }
    assert.equal(promtoolProblems(text), null, 'promtool accepts the exposition of several models');
  });

  test('two first requests for one model load it once', T, async () => {
    const srv = await serve(['--models-dir', modelsDir()]);
    const rs = await Promise.all([1, 2, 3].map(() => complete(srv, 'gamma')));
    for (const r of rs) assert.equal(r.status, 200, r.text);
    assert.equal(metric((await call(srv, 'GET', '/metrics')).text, 'pith_model_loads_total'), 1);
  });

  test('--models-max: the least recently used idle model makes room', T, async () => {
    const srv = await serve(['--models-dir', modelsDir(), '--models-max', '2']);
    for (const m of ['alpha', 'beta', 'alpha', 'gamma']) assert.equal((await complete(srv, m)).status, 200);
    // beta was used before alpha's second request: it went
    const s = await statuses(srv);
    assert.equal(s.alpha, 'loaded');
    assert.equal(s.gamma, 'loaded');
    assert.equal(s.beta, 'unloaded');
    const text = (await call(srv, 'GET', '/metrics')).text;
    assert.equal(metric(text, 'pith_models_loaded'), 2);
    assert.equal(metric(text, 'pith_model_unloads_total'), 1);
  });

  test('--models-mem: loads within the byte budget, refuses a model larger than all of it', T, async () => {
    // one model takes its file plus its KV pool: a budget of 1.5 models holds one at a time
    const dir = modelsDir();
    const first = await serve(['--models-dir', dir]);
    assert.equal((await complete(first, 'alpha')).status, 200);
    const one = metric((await call(first, 'GET', '/metrics')).text, 'pith_models_loaded_bytes');
    assert.ok(one > statSync(DEFAULT).size, `a model's bytes (${one}) count its pools besides its file`);
    const srv = await serve(['--models-dir', dir, '--models-mem', String(Math.floor(one * 1.5))]);
    assert.equal((await complete(srv, 'alpha')).status, 200);
    assert.equal((await complete(srv, 'beta')).status, 200);
    const s = await statuses(srv);
    assert.equal(s.alpha, 'unloaded');
    assert.equal(s.beta, 'loaded');
    assert.ok(metric((await call(srv, 'GET', '/metrics')).text, 'pith_models_loaded_bytes') <= one * 1.5);

    const tiny = await serve(['--models-dir', dir, '--models-mem', '1K']);
    const e = errorShape(assert, await complete(tiny, 'alpha'), 503);
    assert.equal(e.code, 'model_too_large');
  });

  test('a model that fails to load gets a clear error and the others keep serving', T, async () => {
    const srv = await serve(['--models-dir', modelsDir()]);
    assert.equal((await complete(srv, 'alpha')).status, 200);
    const e = errorShape(assert, await complete(srv, 'broken'), 503);
    assert.equal(e.code, 'model_load_failed');
    assert.doesNotMatch(e.message, /\//, 'a client sees no path');
    assert.match(srv.log(), /model broken: cannot load: .*not a GGUF file/, 'the log says why');
    // retried only after a while: the next request fails at once
    const again = errorShape(assert, await complete(srv, 'broken'), 503);
    assert.equal(again.code, 'model_load_failed');
    assert.equal((await complete(srv, 'alpha')).status, 200, 'the other model still serves');
    assert.equal((await statuses(srv)).broken, 'failed');
    // the operator asks for it: tried again, and told why
    const adm = errorShape(assert, await call(srv, 'POST', '/v1/admin/models/load', { key: ADMIN, body: { model: 'broken' } }), 500);
    assert.match(adm.message, /not a GGUF file/);
    assert.equal(metric((await call(srv, 'GET', '/metrics')).text, 'pith_model_load_failures_total'), 2);
  });

  test('unloading waits for the running request, which completes; admin load and unload', T, async () => {
    const srv = await serve(['-m', `alpha=${DEFAULT}`, '-m', `beta=${DEFAULT}`]);
    assert.deepEqual(await statuses(srv), { alpha: 'unloaded', beta: 'unloaded' });
    errorShape(assert, await call(srv, 'POST', '/v1/admin/models/load', { body: { model: 'alpha' } }), 401);
    errorShape(assert, await call(srv, 'POST', '/v1/admin/models/load', { key: ADMIN, body: {} }), 400);
    errorShape(assert, await call(srv, 'POST', '/v1/admin/models/load', { key: ADMIN, body: { model: 'zeta' } }), 404);
    const ld = await call(srv, 'POST', '/v1/admin/models/load', { key: ADMIN, body: { model: 'alpha' } });
    assert.equal(ld.status, 200, ld.text);
    assert.equal(ld.body.status.value, 'loaded');

    // per-model admin calls go to the model named, and never load one
    const sl = errorShape(assert, await call(srv, 'POST', '/v1/admin/sleep', { key: ADMIN, body: { model: 'beta' } }), 409);
    assert.equal(sl.code, 'model_not_loaded');

    const stream = fetch(`${srv.base}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'alpha', prompt: 'Once', max_tokens: LONG, stream: true, ignore_eos: true }),
    });
    const res = await stream;
    assert.equal(res.status, 200);
    const body = readSSE(res);
    await sleep(50);
    const t0 = Date.now();
    const un = await call(srv, 'POST', '/v1/admin/models/unload', { key: ADMIN, body: { model: 'alpha' } });
    assert.equal(un.status, 200, un.text);
    assert.equal(un.body.status.value, 'unloaded');
    const { events, done } = await body;
    assert.ok(done, 'the running stream finished with [DONE]');
    const last = events.filter((e) => e.choices && e.choices.length).pop();
    assert.equal(last.choices[0].finish_reason, 'length', 'it ran to its end, not cancelled');
    assert.ok(Date.now() - t0 >= 0);
    const log = srv.log();
    const streamed = log.search(/POST \/v1\/completions 200 id=\d+ .*model=alpha .*completion_tokens=[1-9]/);
    assert.ok(streamed >= 0 && streamed < log.indexOf('model alpha unloaded'), 'the stream ended before the model unloaded');
    assert.equal((await statuses(srv)).alpha, 'unloaded');
    // and the next request loads it again
    assert.equal((await complete(srv, 'alpha')).status, 200);
  });

  test('a request waits (bounded) for room beside a busy model', T, async () => {
    const srv = await serve(['--models-dir', modelsDir(), '--models-max', '1', '--models-load-timeout', '0.4']);
    assert.equal((await complete(srv, 'alpha')).status, 200);
    // alpha's admission paused: a request to it is held, and holds alpha loaded
    const p = await call(srv, 'POST', '/v1/admin/pause', { key: ADMIN, body: { model: 'alpha' } });
    assert.equal(p.status, 200, p.text);
    const held = complete(srv, 'alpha');
    await sleep(100);
    const t0 = Date.now();
    const e = errorShape(assert, await complete(srv, 'beta'), 503);
    assert.equal(e.code, 'model_load_timeout');
    assert.ok(Date.now() - t0 >= 350, 'it waited for the timeout');
    assert.equal((await statuses(srv)).alpha, 'loaded', 'the busy model stayed');
    // a request that arrives while alpha is busy waits its turn and is served once alpha is idle
    const waiting = complete(srv, 'beta', { max_tokens: 1 });
    await sleep(100);
    const r = await call(srv, 'POST', '/v1/admin/resume', { key: ADMIN, body: { model: 'alpha' } });
    assert.equal(r.status, 200, r.text);
    assert.equal((await held).status, 200, 'the held request ran once resumed');
    const w = await waiting;
    assert.ok(w.status === 200 || w.body?.error?.code === 'model_load_timeout', w.text);
    assert.equal((await complete(srv, 'beta')).status, 200);
    assert.equal((await statuses(srv)).alpha, 'unloaded');
  });

  test('--models-ttl unloads an idle model', T, async () => {
    const srv = await serve(['--models-dir', modelsDir(), '--models-ttl', '1']);
    assert.equal((await complete(srv, 'alpha')).status, 200);
    assert.equal((await statuses(srv)).alpha, 'loaded');
    await waitStatus(srv, 'alpha', 'unloaded', 5000);
    assert.match(srv.log(), /model alpha: unloading \(idle\)/);
  });

  test('SIGTERM drains: a running request on a model finishes, exit 0', T, async () => {
    const srv = await startServer(['--models-dir', modelsDir()], { model: { args: [] } });
    const res = await fetch(`${srv.base}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'beta', prompt: 'Once', max_tokens: LONG, stream: true, ignore_eos: true }),
    });
    assert.equal(res.status, 200);
    const body = readSSE(res);
    await sleep(50);
    srv.proc.kill('SIGTERM');
    await sleep(100);
    const h = await fetch(`${srv.base}/health`).then((r) => r.status).catch(() => 'closed');
    assert.ok(h === 503 || h === 'closed', `health while draining: ${h}`);
    const { done } = await body;
    assert.ok(done, 'the request finished during the drain');
    assert.equal(await stopServer(srv), 0);
  });

  test('usage errors', T, async () => {
    const { spawnSync } = await import('node:child_process');
    const run = (args) => spawnSync(process.env.PITH_BIN, ['serve', ...args], { encoding: 'utf8', timeout: 10000 });
    let r = run(['-m', `a=${DEFAULT}`, '-m', DEFAULT]);
    assert.notEqual(r.status, 0);
    assert.match(r.stderr, /every -m needs a NAME=/);
    r = run(['-m', `a=${DEFAULT}`, '-m', `a=${DEFAULT}`, '--port', '0']);
    assert.notEqual(r.status, 0);
    assert.match(r.stderr, /given twice/);
    r = run(['--models-dir', '/nonexistent-dir', '--port', '0']);
    assert.notEqual(r.status, 0);
    assert.match(r.stderr, /not a directory/);
    // KV events serve several models (each under kv@HOST@NAME, tests/test_kv_events.py); one given
    // topic cannot name them all
    r = run(['--models-dir', path.dirname(DEFAULT), '--kv-events', 'tcp://127.0.0.1:1', '--kv-events-topic', 'kv@h@m', '--port', '0']);
    assert.notEqual(r.status, 0);
    assert.match(r.stderr, /--kv-events-topic names one model's topic/);
    r = run(['-m', DEFAULT, '--models-max', '2']);
    assert.notEqual(r.status, 0);
    assert.match(r.stderr, /need several models/);
  });
});
