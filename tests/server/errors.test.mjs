// Every error the server answers, with its status and OpenAI's shape, and the server healthy after
// them; API keys (flag and key file); 503 while the model loads; /metrics accepted by promtool.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { call, errorShape, idleMetrics, loadOpenAI, metric, promtoolProblems, startServer, stopServer, waitHealthy } from './helpers.mjs';

const T = { timeout: 30000 };
const KEY = 'sk-main';
const tmp = mkdtempSync(path.join(process.env.PITH_TEST_TMP || os.tmpdir(), 'pith-serve-'));
const keyFile = path.join(tmp, 'keys.txt');
writeFileSync(keyFile, '# team keys\nsk-file-one\n\n   sk-file-two  \n');

let srv, OpenAI, model;
const servers = [];

// No internal detail (file paths, library messages) in what a client sees.
function noInternals(e) {
  assert.ok(!/\/(tmp|work|home|usr|proc)\//.test(e.message), `path leaked: ${e.message}`);
  assert.ok(!/0x[0-9a-f]{6,}/.test(e.message), `pointer leaked: ${e.message}`);
}

async function expectError(status, method, route, opts = {}, code) {
  const r = await call(srv, method, route, { key: KEY, ...opts });
  const e = errorShape(assert, r, status);
  assert.match(r.headers.get('content-type'), /application\/json/);
  if (code !== undefined) assert.equal(e.code, code);
  noInternals(e);
  return e;
}

before(async () => {
  OpenAI = await loadOpenAI();
  srv = await startServer(['--api-key', KEY, '--api-key-file', keyFile, '--max-body', '4K', '--max-queue', '1', '--max-num-seqs', '1']);
  servers.push(srv);
  model = (await call(srv, 'GET', '/v1/models', { key: KEY })).body.data[0].id;
});

after(async () => {
  for (const s of servers) {
    const code = await stopServer(s);
    assert.equal(code, 0, `server exit status after SIGTERM:\n${s.log().slice(-3000)}`);
  }
});

describe('authentication', () => {
  test('401 without a key or with a wrong one; every configured key works', T, async () => {
    const body = { model, prompt: 'Hi', max_tokens: 2 };
    let e = await expectError(401, 'POST', '/v1/completions', { body, key: null }, 'invalid_api_key');
    assert.equal(e.type, 'authentication_error');
    await expectError(401, 'POST', '/v1/completions', { body, key: 'sk-wrong' }, 'invalid_api_key');
    await expectError(401, 'POST', '/v1/completions', { body, key: 'sk-mai' }, 'invalid_api_key');
    await expectError(401, 'POST', '/v1/completions', { body, key: 'sk-mainX' }, 'invalid_api_key');
    await expectError(401, 'POST', '/v1/completions', { body, key: null, headers: { authorization: 'Basic c2stbWFpbg==' } });
    await expectError(401, 'GET', '/metrics', { key: null });
    await expectError(401, 'GET', '/v1/models', { key: 'nope' });
    for (const key of [KEY, 'sk-file-one', 'sk-file-two']) {
      const r = await call(srv, 'POST', '/v1/completions', { body, key });
      assert.equal(r.status, 200, `key ${key}: ${r.text}`);
    }
    // /health needs no key.
    assert.equal((await call(srv, 'GET', '/health')).status, 200);
    const client = new OpenAI({ apiKey: 'sk-wrong', baseURL: `${srv.base}/v1`, maxRetries: 0 });
    await assert.rejects(client.completions.create(body), (err) => err.status === 401 && err.code === 'invalid_api_key');
  });
});

describe('bad requests', () => {
  test('400 for malformed JSON and bad parameters, naming the parameter', T, async () => {
    await expectError(400, 'POST', '/v1/completions', { raw: '{"prompt": "x",', headers: { 'content-type': 'application/json' } }, 'invalid_json');
    await expectError(400, 'POST', '/v1/chat/completions', { raw: 'not json', headers: { 'content-type': 'application/json' } }, 'invalid_json');
    await expectError(400, 'POST', '/v1/completions', { raw: '', headers: { 'content-type': 'application/json' } }, 'invalid_json');
    await expectError(400, 'POST', '/v1/completions', { body: [1, 2] });
    const cases = [
      [{ prompt: 'x', temperature: 5 }, 'temperature'],
      [{ prompt: 'x', temperature: 'hot' }, 'temperature'],
      [{ prompt: 'x', top_p: 0 }, 'top_p'],
      [{ prompt: 'x', n: 0 }, 'n'],
      [{ prompt: 'x', n: 1.5 }, 'n'],
      [{ prompt: 'x', max_tokens: 'ten' }, 'max_tokens'],
      [{ prompt: 'x', max_tokens: 0 }, 'max_tokens'],
      [{ prompt: 'x', max_tokens: 100000 }, 'max_tokens'],
      [{ prompt: 'x', stop: [1] }, 'stop'],
      [{ prompt: 'x', stop: [''] }, 'stop'],
      [{ prompt: 'x', seed: 0.5 }, 'seed'],
      [{ prompt: 'x', logprobs: 50 }, 'logprobs'],
      [{ prompt: 'x', echo: true }, 'echo'],
      [{ prompt: 'x', logit_bias: { 1: 5 } }, 'logit_bias'],
      [{ prompt: 'x', stream: 'yes' }, 'stream'],
      [{ prompt: 'x', stream_options: { include_usage: true } }, 'stream_options'],
      [{ prompt: 'x', presence_penalty: -3 }, 'presence_penalty'],
      [{ prompt: 'x', model: 7 }, 'model'],
      [{}, 'prompt'],
      [{ prompt: [] }, 'prompt'],
      [{ prompt: [1, 2, 1e9] }, 'prompt'],
      [{ prompt: [[1, 2], 'x', {}] }, 'prompt'],
    ];
    for (const [body, param] of cases) {
      const e = await expectError(400, 'POST', '/v1/completions', { body: { model, ...body } });
      assert.equal(e.param, param, `param for ${JSON.stringify(body)}: ${e.message}`);
      assert.equal(e.type, 'invalid_request_error');
    }
    const chat = [
      [{}, 'messages'],
      [{ messages: [] }, 'messages'],
      [{ messages: 'hi' }, 'messages'],
      [{ messages: [{ content: 'no role' }] }, 'messages'],
      [{ messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'x' } }] }] }, 'messages'],
      [{ messages: [{ role: 'user', content: 'x' }], top_logprobs: 2 }, 'top_logprobs'],
      [{ messages: [{ role: 'user', content: 'x' }], max_completion_tokens: -1 }, 'max_completion_tokens'],
    ];
    for (const [body, param] of chat) {
      const e = await expectError(400, 'POST', '/v1/chat/completions', { body: { model, ...body } });
      assert.equal(e.param, param, `param for ${JSON.stringify(body)}: ${e.message}`);
    }
    await expectError(400, 'POST', '/tokenize', { body: { nothing: 1 } });
    await expectError(400, 'POST', '/detokenize', { body: { tokens: [-1] } });
    // Through the SDK: a typed error with the same fields.
    const client = new OpenAI({ apiKey: KEY, baseURL: `${srv.base}/v1`, maxRetries: 0 });
    await assert.rejects(client.completions.create({ model, prompt: 'x', temperature: 9 }),
      (err) => err.status === 400 && err.param === 'temperature' && err.type === 'invalid_request_error');
  });

  test('404 for unknown routes and models, 405 for a wrong method', T, async () => {
    await expectError(404, 'GET', '/v1/nothing-here', {}, 'not_found');
    await expectError(404, 'POST', '/v2/completions', { body: {} }, 'not_found');
    await expectError(404, 'GET', '/v1/models/some-other-model', {}, 'model_not_found');
    let e = await expectError(404, 'POST', '/v1/completions', { body: { model: 'gpt-4o', prompt: 'x' } }, 'model_not_found');
    assert.equal(e.param, 'model');
    e = await expectError(404, 'POST', '/v1/chat/completions', { body: { model: 'gpt-4o', messages: [{ role: 'user', content: 'x' }] } }, 'model_not_found');
    await expectError(405, 'GET', '/v1/completions', {}, 'method_not_allowed');
    await expectError(405, 'DELETE', '/health', {}, 'method_not_allowed');
    const client = new OpenAI({ apiKey: KEY, baseURL: `${srv.base}/v1`, maxRetries: 0 });
    await assert.rejects(client.chat.completions.create({ model: 'nope', messages: [{ role: 'user', content: 'x' }] }),
      (err) => err.status === 404 && err.code === 'model_not_found');
    assert.equal((await call(srv, 'GET', `/v1/models/${model}`, { key: KEY })).body.id, model);
  });

  test('413 for a body over --max-body, with or without Content-Length', T, async () => {
    const big = JSON.stringify({ model, prompt: 'a'.repeat(8000) });
    await expectError(413, 'POST', '/v1/completions', { raw: big, headers: { 'content-type': 'application/json' } }, 'request_too_large');
    // Chunked transfer: no Content-Length, the limit is found while reading.
    const chunked = new ReadableStream({
      start(c) {
        c.enqueue(new TextEncoder().encode(big.slice(0, 3000)));
        c.enqueue(new TextEncoder().encode(big.slice(3000)));
        c.close();
      },
    });
    const r = await fetch(`${srv.base}/v1/completions`, {
      method: 'POST', body: chunked, duplex: 'half', headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
    });
    const res = { status: r.status, text: await r.text() };
    res.body = JSON.parse(res.text);
    assert.equal(errorShape(assert, res, 413).code, 'request_too_large');
    // Just under the limit is fine.
    const ok = await call(srv, 'POST', '/v1/completions', { key: KEY, body: { model, prompt: 'Hi', user: 'u'.repeat(3500), max_tokens: 1 } });
    assert.equal(ok.status, 200, ok.text);
  });

  test('429 when the queue is full, and the accepted requests still complete', T, async () => {
    // One sequence runs at a time and one may wait: of 10 long requests sent at once, most are refused.
    const body = { model, prompt: 'Once upon a time', max_tokens: 200, temperature: 0, ignore_eos: true };
    const results = await Promise.all(Array.from({ length: 10 }, () => call(srv, 'POST', '/v1/completions', { key: KEY, body })));
    const ok = results.filter((r) => r.status === 200);
    const busy = results.filter((r) => r.status === 429);
    assert.equal(ok.length + busy.length, 10, results.map((r) => r.status).join(','));
    assert.ok(ok.length >= 1 && busy.length >= 1, `statuses: ${results.map((r) => r.status).join(',')}`);
    for (const r of busy) {
      const e = errorShape(assert, r, 429);
      assert.equal(e.code, 'queue_full');
      assert.equal(e.type, 'rate_limit_error');
    }
    for (const r of ok) assert.equal(r.body.usage.completion_tokens, 200);
    assert.equal(new Set(ok.map((r) => r.body.choices[0].text)).size, 1, 'greedy: the same text every time');
  });

  test('every field with every JSON type: a clean answer each time, never a crash', T, async () => {
    const values = [null, true, false, 0, -1, 2 ** 31, 1e308, -1e308, 0.5, '', 'x', '\u0000\u00ff\ud83d\ude00', [], [1],
      ['a', 2], [[]], {}, { a: 1 }, { type: 'text', text: 1 }];
    const fields = ['model', 'prompt', 'messages', 'max_tokens', 'max_completion_tokens', 'temperature', 'top_p', 'top_k',
      'min_p', 'presence_penalty', 'frequency_penalty', 'repetition_penalty', 'seed', 'stop', 'n', 'logprobs',
      'top_logprobs', 'user', 'stream', 'stream_options', 'ignore_eos', 'priority', 'cache_salt', 'stop_token_ids',
      'echo', 'suffix', 'best_of', 'logit_bias', 'response_format', 'tools', 'chat_template_kwargs', 'add_generation_prompt'];
    const bases = [
      ['/v1/completions', { model, prompt: 'Hi', max_tokens: 2 }],
      ['/v1/chat/completions', { model, messages: [{ role: 'user', content: 'Hi' }], max_tokens: 2 }],
    ];
    const seen = new Set();
    for (const [route, base] of bases) {
      for (const field of fields) {
        // One at a time: this server queues at most one request.
        for (const v of values) {
          const r = await call(srv, 'POST', route, { key: KEY, body: { ...base, [field]: v } });
          seen.add(r.status);
          assert.ok([200, 400, 404].includes(r.status), `${route} ${field}: ${r.status} ${r.text.slice(0, 200)}`);
          if (r.status !== 200) errorShape(assert, r, r.status);
          else if (!r.text.startsWith('data: ')) assert.ok(r.body.choices, r.text);
        }
      }
      // Message shapes.
      for (const m of [null, 1, 'x', [], {}, { role: 1 }, { role: '' }, { role: 'user', content: 5 },
        { role: 'user', content: [{ type: 'text' }] }, { role: 'user', content: [1] }, { role: 'user', content: null },
        { role: 'tool', content: 'x', tool_call_id: 'a' }, { role: 'user', content: [{ type: 'text', text: 'a' }, { type: 'text', text: 'b' }] }]) {
        const r = await call(srv, 'POST', '/v1/chat/completions', { key: KEY, body: { model, messages: [m], max_tokens: 2 } });
        assert.ok([200, 400].includes(r.status), `message ${JSON.stringify(m)}: ${r.status} ${r.text}`);
      }
    }
    // Hostile bodies: deep nesting, invalid UTF-8, a NUL, numbers out of every range.
    const hostile = ['['.repeat(3000) + ']'.repeat(3000), '{"prompt": "\xff\xfe\x00"}', '{"prompt": [1e999]}',
      '{"prompt": "a", "max_tokens": 1e400}', '{"prompt": "' + '\\u00'.repeat(10) + '"}', '{"prompt":"x"}\u0000trailing', '\u0000'];
    for (const raw of hostile) {
      const r = await call(srv, 'POST', '/v1/completions', { key: KEY, raw, headers: { 'content-type': 'application/json' } });
      assert.ok([200, 400, 413].includes(r.status), `${JSON.stringify(raw.slice(0, 40))}: ${r.status}`);
      if (r.status !== 200) errorShape(assert, r, r.status);
    }
    const bytes = Buffer.concat([Buffer.from('{"model": "' + model + '", "max_tokens": 3, "prompt": "ok '), Buffer.from([0xff, 0xc3, 0x28, 0xe2, 0x82]), Buffer.from('"}')]);
    const r = await call(srv, 'POST', '/v1/completions', { key: KEY, raw: bytes, headers: { 'content-type': 'application/json' } });
    assert.ok([200, 400].includes(r.status), `invalid UTF-8: ${r.status} ${r.text}`);
    assert.ok(seen.has(200) && seen.has(400));
  });

  test('the server is healthy after all of that, and counted the errors', T, async () => {
    assert.equal((await call(srv, 'GET', '/health')).status, 200);
    const r = await call(srv, 'POST', '/v1/chat/completions', { key: KEY, body: { model, messages: [{ role: 'user', content: 'Hi' }], max_tokens: 3 } });
    assert.equal(r.status, 200, r.text);
    const text = await idleMetrics(srv, KEY);
    for (const code of [400, 401, 404, 405, 413, 429])
      assert.ok(metric(text, 'pith_request_errors_total', `code="${code}"`) >= 1, `errors{code="${code}"}`);
    assert.ok(metric(text, 'pith_kv_blocks_total') > 0);
    assert.ok(metric(text, 'pith_request_success_total', 'finish_reason="length"') >= 1);
    assert.ok(metric(text, 'pith_e2e_request_latency_seconds_count') >= 1);
  });
});

describe('metrics', () => {
  test('promtool check metrics accepts /metrics', T, async () => {
    const which = spawnSync('sh', ['-c', 'command -v promtool']);
    assert.equal(which.status, 0, 'promtool not found: install the Debian package prometheus (scripts/setup-debian.sh)');
    const r = await call(srv, 'GET', '/metrics', { key: KEY });
    assert.equal(r.status, 200);
    assert.match(r.headers.get('content-type'), /^text\/plain; version=0\.0\.4/);
    const names = ['pith_requests_running', 'pith_requests_waiting', 'pith_kv_blocks_in_use', 'pith_kv_blocks_total',
      'pith_prefix_cache_hit_tokens_total', 'pith_prompt_tokens_total', 'pith_generation_tokens_total',
      'pith_request_success_total', 'pith_request_errors_total', 'pith_preemptions_total',
      'pith_time_to_first_token_seconds', 'pith_time_per_output_token_seconds', 'pith_e2e_request_latency_seconds'];
    for (const n of names) assert.match(r.text, new RegExp(`^# TYPE ${n} `, 'm'), n);
    assert.equal(promtoolProblems(r.text), null);
  });
});

describe('not ready', () => {
  test('503 while the model loads; ready once the chat template arrives', T, async () => {
    // The chat template comes through a FIFO: loading blocks on it, so the server is up but not ready.
    const fifo = path.join(tmp, 'template.fifo');
    execFileSync('mkfifo', [fifo]);
    const s = await startServer(['--chat-template', fifo], { waitReady: false });
    servers.push(s);
    const save = srv;
    srv = s;
    try {
      let e = await expectError(503, 'GET', '/health', {}, 'model_not_ready');
      assert.equal(e.type, 'service_unavailable');
      await expectError(503, 'POST', '/v1/completions', { body: { prompt: 'x' } }, 'model_not_ready');
      await expectError(503, 'POST', '/v1/chat/completions', { body: { messages: [{ role: 'user', content: 'x' }] } }, 'model_not_ready');
      await expectError(503, 'POST', '/tokenize', { body: { prompt: 'x' } }, 'model_not_ready');
      assert.equal((await call(s, 'GET', '/v1/models')).status, 200);
      const m = await call(s, 'GET', '/metrics');
      assert.equal(m.status, 200);
      assert.equal(metric(m.text, 'pith_request_errors_total', 'code="503"'), 4);
      writeFileSync(fifo, '{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}');
      await waitHealthy(s);
      const viaTemplate = await call(s, 'POST', '/tokenize', { body: { messages: [{ role: 'user', content: 'Hi there' }] } });
      const direct = await call(s, 'POST', '/tokenize', { body: { prompt: '[user]Hi there' } });
      assert.deepEqual(viaTemplate.body.tokens, direct.body.tokens, 'the template from --chat-template is used');
    } finally {
      srv = save;
    }
  });

  test('a model that cannot load ends the server with status 1', T, async () => {
    const s = await startServer(['-m', path.join(tmp, 'missing.gguf')], { waitReady: false });
    const code = await s.exited;
    assert.equal(code, 1);
    assert.match(s.log(), /cannot load the model/);
  });
});
