// What an operator meets in the first week: CORS for browser clients (--cors-origin), HEAD and
// OPTIONS, error replies that keep a keep-alive connection open, and client disconnects logged as
// cancels rather than as libmicrohttpd errors.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { after, before, describe, test } from 'node:test';

import { LONG_TOKENS, PITH_BIN, call, findModel, metric, rawConnection, sleep, startServer, stopServer } from './helpers.mjs';

const T = { timeout: 30000 };
const KEY = 'sk-ops';
const APP = 'http://app.example:5173';
const servers = [];
let plain, cors;

async function serve(extra) {
  const s = await startServer(extra);
  servers.push(s);
  return s;
}

before(async () => {
  plain = await serve(['--api-key', KEY, '--max-body', '4K']);
  cors = await serve(['--api-key', KEY, '--cors-origin', APP, '--cors-origin', 'https://other.example']);
});

after(async () => {
  for (const s of servers) {
    const code = await stopServer(s);
    assert.equal(code, 0, `server exit status after SIGTERM:\n${s.log().slice(-3000)}`);
  }
});

const BODY = JSON.stringify({ prompt: 'Hi', max_tokens: 2 });
function post(path, { key = KEY, body = BODY, extra = '' } = {}) {
  return `POST ${path} HTTP/1.1\r\nHost: localhost\r\n${key ? `Authorization: Bearer ${key}\r\n` : ''}` +
    `Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n${extra}\r\n${body}`;
}
const get = (path, method = 'GET', extra = '') => `${method} ${path} HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer ${KEY}\r\n${extra}\r\n`;
const accessControl = (headers) => Object.keys(headers).filter((h) => h.startsWith('access-control-'));

describe('keep-alive after errors', () => {
  test('a bad request and then a good one on the same connection both get answers', T, async () => {
    const c = rawConnection(plain.port);
    const bad = [
      [post('/v1/completions', { key: null }), 401],
      [post('/v1/completions', { key: 'sk-wrong' }), 401],
      [post('/no/such/route'), 404],
      [post('/health'), 405],
      [post('/v1/completions', { body: '{"prompt": ' }), 400],
      [post('/v1/completions', { body: JSON.stringify({ prompt: 'x', temperature: 9 }) }), 400],
      [get('/v1/completions'), 405],
    ];
    for (const [req, status] of bad) {
      await c.send(req);
      const r = await c.next();
      assert.ok(r, `the server closed the connection instead of answering ${status}`);
      assert.equal(r.status, status, r.body);
      assert.notEqual(r.headers.connection, 'close', `${status} closed the connection`);
      assert.equal(JSON.parse(r.body).error.type.length > 0, true);
      if (status === 405) assert.match(r.headers.allow, /OPTIONS/);
      await c.send(post('/v1/completions'));
      const ok = await c.next();
      assert.ok(ok, `no answer after the ${status}`);
      assert.equal(ok.status, 200, ok.body);
      assert.equal(JSON.parse(ok.body).object, 'text_completion');
    }
    // A chunked body over --max-body (4K) is read and dropped, then refused with 413; the connection stays.
    const chunk = 'x'.repeat(3000);
    await c.send(`POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer ${KEY}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n` +
      `${(3000).toString(16)}\r\n${chunk}\r\n${(3000).toString(16)}\r\n${chunk}\r\n0\r\n\r\n`);
    const big = await c.next();
    assert.equal(big?.status, 413);
    assert.notEqual(big.headers.connection, 'close');
    await c.send(post('/v1/completions'));
    assert.equal((await c.next())?.status, 200);
    // Requests pipelined behind a rejected one are answered in order.
    await c.send(post('/v1/completions', { key: null }) + post('/v1/completions') + get('/health'));
    assert.deepEqual([(await c.next()).status, (await c.next()).status, (await c.next()).status], [401, 200, 200]);
    assert.equal(c.closed, false);
    c.close();
  });

  test('a body declared over --max-body gets 413 and Connection: close (it is not read)', T, async () => {
    const c = rawConnection(plain.port);
    await c.send(`POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer ${KEY}\r\nContent-Length: 100000\r\n\r\n{"prompt":`);
    const r = await c.next();
    assert.equal(r.status, 413);
    assert.equal(r.headers.connection, 'close');
    assert.equal(await c.next(), null);
  });
});

describe('HEAD and OPTIONS', () => {
  test('HEAD on GET routes: the GET status and headers, no body', T, async () => {
    const c = rawConnection(plain.port);
    for (const path of ['/health', '/v1/models', '/metrics']) {
      await c.send(get(path, 'HEAD'), { head: true });
      const h = await c.next();
      assert.equal(h.status, 200, `HEAD ${path}`);
      assert.equal(h.body, '');
      await c.send(get(path));
      const g = await c.next(); // parses only if HEAD sent no body bytes
      assert.equal(g.status, 200, `GET ${path} after HEAD`);
      assert.equal(h.headers['content-type'], g.headers['content-type']);
      if (path !== '/metrics') assert.equal(h.headers['content-length'], g.headers['content-length']);
    }
    // HEAD needs the key where GET does.
    await c.send('HEAD /v1/models HTTP/1.1\r\nHost: localhost\r\n\r\n', { head: true });
    assert.equal((await c.next()).status, 401);
    c.close();
    assert.equal((await fetch(`${plain.base}/health`, { method: 'HEAD' })).status, 200);
  });

  test('OPTIONS answers 204 with Allow, no key needed; unknown routes stay 404', T, async () => {
    let r = await call(plain, 'OPTIONS', '/v1/chat/completions');
    assert.equal(r.status, 204);
    assert.equal(r.headers.get('allow'), 'POST, OPTIONS');
    r = await call(plain, 'OPTIONS', '/v1/models');
    assert.equal(r.status, 204);
    assert.equal(r.headers.get('allow'), 'GET, HEAD, OPTIONS');
    assert.equal((await call(plain, 'OPTIONS', '/nope')).status, 404);
  });
});

describe('CORS', () => {
  const preflight = (srv, path, origin) => call(srv, 'OPTIONS', path, {
    headers: { origin, 'access-control-request-method': 'POST', 'access-control-request-headers': 'authorization, content-type' },
  });

  test('a preflight from an allowed origin: 204, the origin, methods, headers and max-age, no key', T, async () => {
    for (const path of ['/v1/chat/completions', '/v1/completions', '/tokenize', '/v1/models', '/health', '/metrics']) {
      const r = await preflight(cors, path, APP);
      assert.equal(r.status, 204, `${path}: ${r.text}`);
      const h = r.headers;
      assert.equal(h.get('access-control-allow-origin'), APP);
      assert.match(h.get('vary'), /Origin/);
      assert.match(h.get('access-control-allow-methods'), path.startsWith('/v1/models') || path === '/health' || path === '/metrics' ? /GET/ : /POST/);
      assert.match(h.get('access-control-allow-headers'), /Authorization/);
      assert.match(h.get('access-control-allow-headers'), /Content-Type/);
      assert.ok(Number(h.get('access-control-max-age')) > 0);
    }
  });

  test('responses (errors too) carry Access-Control-Allow-Origin for allowed origins only', T, async () => {
    const body = { prompt: 'Hi', max_tokens: 2 };
    let r = await call(cors, 'POST', '/v1/completions', { body, key: KEY, headers: { origin: APP } });
    assert.equal(r.status, 200);
    assert.equal(r.headers.get('access-control-allow-origin'), APP);
    r = await call(cors, 'POST', '/v1/completions', { body, headers: { origin: 'HTTPS://OTHER.example' } });
    assert.equal(r.status, 401, 'a preflight needs no key, the request itself does');
    assert.equal(r.headers.get('access-control-allow-origin'), 'HTTPS://OTHER.example');
    r = await call(cors, 'GET', '/health', { headers: { origin: 'http://evil.example' } });
    assert.equal(r.status, 200);
    assert.equal(r.headers.get('access-control-allow-origin'), null);
    assert.match(r.headers.get('vary'), /Origin/);
    r = await preflight(cors, '/v1/completions', 'http://evil.example');
    assert.equal(r.headers.get('access-control-allow-origin'), null);
    assert.equal(r.headers.get('access-control-allow-methods'), null);
    // Streaming responses too.
    const s = await fetch(`${cors.base}/v1/completions`, {
      method: 'POST', headers: { origin: APP, authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
      body: JSON.stringify({ ...body, stream: true }),
    });
    assert.equal(s.headers.get('access-control-allow-origin'), APP);
    assert.match(await s.text(), /\[DONE\]/);
  });

  test('--cors-origin "*" allows any origin; without the option there are no CORS headers', T, async () => {
    const any = await serve(['--cors-origin', '*']);
    let r = await call(any, 'GET', '/v1/models', { headers: { origin: 'http://anything.example' } });
    assert.equal(r.headers.get('access-control-allow-origin'), '*');
    r = await preflight(any, '/v1/chat/completions', 'http://anything.example');
    assert.equal(r.status, 204);
    assert.equal(r.headers.get('access-control-allow-origin'), '*');
    for (const [method, path] of [['GET', '/health'], ['OPTIONS', '/v1/completions'], ['POST', '/v1/completions']]) {
      const p = await call(plain, method, path, { headers: { origin: APP, 'access-control-request-method': 'POST' } });
      assert.deepEqual([...p.headers.keys()].filter((k) => k.startsWith('access-control-')), [], `${method} ${path}`);
      assert.equal(p.headers.get('vary'), null);
    }
  });

  test('an origin with a path or trailing slash is refused at startup', T, () => {
    for (const bad of ['http://app.example/', 'app.example', 'http://app.example/x']) {
      const r = spawnSync(PITH_BIN, ['serve', ...findModel().args, '--port', '0', '--cors-origin', bad], { encoding: 'utf8', timeout: 10000 });
      assert.notEqual(r.status, 0, bad);
      assert.match(r.stderr, /CORS origin '.*' is not/, r.stderr);
    }
  });
});

describe('client disconnects', () => {
  async function runningNow(srv) {
    const until = Date.now() + 5000;
    while (!(metric((await call(srv, 'GET', '/metrics', { key: KEY })).text, 'pith_requests_running') > 0)) {
      assert.ok(Date.now() < until, 'the request never started');
      await sleep(2);
    }
  }
  async function cancelLogged(srv, from) {
    const until = Date.now() + 5000;
    for (;;) {
      const m = srv.log().slice(from).match(/request (\d+) cancelled: client disconnected/);
      if (m) return m;
      assert.ok(Date.now() < until, `no cancel line:\n${srv.log().slice(from)}`);
      await sleep(10);
    }
  }
  const long = (stream) => JSON.stringify({ prompt: 'Once upon a time', max_tokens: LONG_TOKENS, ignore_eos: true, n: 8, stream });

  for (const stream of [false, true]) {
    test(`a vanished ${stream ? 'streaming' : 'waiting'} client is logged as a cancel, not an internal error`, T, async () => {
      const from = plain.log().length;
      const c = rawConnection(plain.port);
      await c.send(post('/v1/completions', { body: long(stream) }));
      await runningNow(plain);
      c.close();
      await cancelLogged(plain, from);
      await sleep(100);
      const log = plain.log().slice(from);
      assert.doesNotMatch(log, /internal error|http: /i, log);
      assert.equal(log.match(/cancelled: client disconnected/g).length, 1, log);
      assert.match(log, /POST \/v1\/completions \d+ id=\d+ .*total_s=[\d.]+ ended="client gone"/, log);
      assert.equal((await call(plain, 'GET', '/health')).status, 200);
    });
  }
});
