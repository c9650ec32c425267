// Hostile and careless clients (issue 31): slow senders cannot hold every connection (--header-timeout,
// --min-body-rate, --max-conns-per-ip) and the lines about them are rate-limited; JSON endpoints want
// Content-Type: application/json and a loopback server wants a loopback Host (browsers, DNS
// rebinding); request data cannot forge text log lines; keys come from files or the environment
// instead of the command line.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { after, describe, test } from 'node:test';

import { PITH_BIN, call, errorShape, findModel, metric, sleep, startServer, stopServer, within } from './helpers.mjs';

const T = { timeout: 60000 };
const servers = [];
const tmp = mkdtempSync(path.join(process.env.PITH_TEST_TMP || os.tmpdir(), 'pith-hardening-'));
after(async () => {
  for (const s of servers) {
    const code = await stopServer(s);
    assert.equal(code, 0, `server exit status after SIGTERM:\n${s.log().slice(-3000)}`);
  }
  rmSync(tmp, { recursive: true, force: true });
});

async function serve(args, opts) {
  const s = await startServer(args, opts);
  servers.push(s);
  return s;
}

// A raw connection (optionally from another loopback address); `closed` resolves with the time the
// server closed it, `data` collects what it sent.
function rawConnect(port, localAddress) {
  return new Promise((resolve, reject) => {
    const sock = net.connect({ port, host: '127.0.0.1', ...(localAddress ? { localAddress } : {}) });
    const c = { sock, data: '', closedAt: null };
    c.closed = new Promise((r) => sock.on('close', () => {
      c.closedAt = Date.now();
      r(c.closedAt);
    }));
    sock.on('data', (d) => (c.data += d.toString()));
    sock.on('error', () => {});
    sock.once('connect', () => resolve(c));
    sock.once('error', reject);
  });
}

// One request on a fresh connection (Connection: close): { status, body } or null when the server
// closed it unanswered (or refused it).
async function rawRequest(port, text, { localAddress, ms = 10000 } = {}) {
  let c;
  try {
    c = await rawConnect(port, localAddress);
  } catch {
    return null;
  }
  c.sock.write(text);
  await within(c.closed, ms);
  c.sock.destroy();
  if (!c.data) return null;
  const end = c.data.indexOf('\r\n\r\n');
  const status = Number(c.data.split(' ')[1]);
  let body;
  try {
    body = JSON.parse(c.data.slice(end + 4));
  } catch {}
  return { status, body, text: c.data };
}

const BODY = JSON.stringify({ prompt: 'Hi', max_tokens: 2 });
function post(route, { host = 'localhost', type = 'application/json', body = BODY } = {}) {
  return `POST ${route} HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n` +
    (type ? `Content-Type: ${type}\r\n` : '') + `Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;
}
const get = (route, host) => `GET ${route} HTTP/1.1\r\n${host === null ? '' : `Host: ${host}\r\n`}Connection: close\r\n\r\n`;

// A client that sends its headers one line every `gapMs` and never ends them.
async function slowClient(port, gapMs) {
  const c = await rawConnect(port);
  c.sock.write('POST /v1/completions HTTP/1.1\r\nHost: localhost\r\n');
  let i = 0;
  const timer = setInterval(() => {
    if (!c.closedAt) c.sock.write(`X-Slow-${i++}: ${i}\r\n`);
  }, gapMs);
  c.closed.then(() => clearInterval(timer));
  c.stop = () => {
    clearInterval(timer);
    c.sock.destroy();
  };
  return c;
}

const countLines = (log, re) => log.split('\n').filter((l) => re.test(l)).length;

// Waits (bounded) until the server's log matches re, then asserts it does.
async function logMatches(s, re, ms = 5000) {
  for (const end = Date.now() + ms; !re.test(s.log()) && Date.now() < end;) await sleep(50);
  assert.match(s.log(), re);
}

describe('slow clients', () => {
  test('clients dripping headers are closed at --header-timeout and a normal request gets through', T, async () => {
    // Every slot taken by clients sending a header line every 0.5 s: --timeout (inactivity) never fires.
    const s = await serve(['--max-connections', '6', '--header-timeout', '2']);
    await sleep(300);
    const slow = [];
    for (let i = 0; i < 6; i++) slow.push(await slowClient(s.port, 500));
    const t0 = Date.now();
    let r = null;
    while (!r && Date.now() - t0 < 20000) {
      r = await rawRequest(s.port, post('/v1/completions'), { ms: 5000 });
      if (!r) await sleep(200);
    }
    const took = Date.now() - t0;
    assert.equal(r?.status, 200, `no answer within ${took} ms:\n${s.log().slice(-2000)}`);
    // Generous: the deadline is 2 s; a loaded machine may take a few more.
    assert.ok(took < 15000, `served after ${took} ms`);
    await Promise.all(slow.map((c) => within(c.closed, 10000)));
    for (const c of slow) {
      assert.ok(c.closedAt, 'a slow client was left connected');
      assert.ok(c.closedAt - t0 < 12000, `a slow client was closed after ${c.closedAt - t0} ms`);
      assert.equal(c.data, '', 'nothing is answered before the headers are in');
      c.stop();
    }
    await logMatches(s, /closed the connection from 127\.0\.0\.1: request headers not complete after 2 s/);
  });

  test('a body slower than --min-body-rate is closed; a kept-alive idle connection is not', T, async () => {
    const s = await serve(['--header-timeout', '1', '--min-body-rate', '1000', '--timeout', '30']);
    const c = await rawConnect(s.port);
    c.sock.write('POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{"prompt": "');
    const t0 = Date.now();
    const timer = setInterval(() => c.closedAt || c.sock.write('aaaaaaaaaa'), 200); // 50 bytes/s
    await within(c.closed, 15000);
    clearInterval(timer);
    assert.ok(c.closedAt, 'the slow body was not cut');
    assert.ok(c.closedAt - t0 < 12000, `cut after ${c.closedAt - t0} ms`);
    await logMatches(s, /closed the connection from 127\.0\.0\.1: request body at \d+ bytes\/s, under --min-body-rate 1000/);
    // An idle keep-alive connection is left to --timeout, and its next request is served.
    const k = await rawConnect(s.port);
    const req = `GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n`;
    k.sock.write(req);
    await sleep(2500);
    assert.equal(k.closedAt, null, 'an idle kept-alive connection was closed at --header-timeout');
    k.sock.write(req);
    const answers = () => (k.data.match(/HTTP\/1\.1 200/g) || []).length;
    for (const end = Date.now() + 10000; answers() < 2 && Date.now() < end;) await sleep(50);
    assert.equal(answers(), 2, k.data);
    k.sock.destroy();
  });

  test('--max-conns-per-ip: one address cannot take every slot; refusals are logged at most once a second', T, async () => {
    const s = await serve(['--max-connections', '32', '--max-conns-per-ip', '4', '--header-timeout', '60']);
    await sleep(300);
    const slow = [];
    for (let i = 0; i < 4; i++) slow.push(await slowClient(s.port, 500));
    await sleep(1000); // let the server take them in before the others knock
    // 40 more from the same address: each refused (closed unanswered) at once.
    const extra = await Promise.all(Array.from({ length: 40 }, () => rawRequest(s.port, get('/health', 'localhost'), { ms: 5000 })));
    assert.ok(extra.every((r) => r === null), 'a connection over the per-address limit was served');
    // Another address still gets in (127.0.0.2 is loopback too; skipped where it cannot be bound).
    let other = 'skip';
    try {
      const probe = await rawConnect(s.port, '127.0.0.2');
      probe.sock.destroy();
      other = await rawRequest(s.port, get('/health', 'localhost'), { localAddress: '127.0.0.2' });
    } catch {}
    if (other !== 'skip') assert.equal(other?.status, 200, 'another address was locked out');
    await logMatches(s, /refused a connection/);
    await sleep(300);
    const refusals = countLines(s.log(), /refused a connection/);
    assert.ok(refusals >= 1 && refusals <= 5, `${refusals} refusal lines for 40 refusals:\n${s.log().slice(-3000)}`);
    for (const c of slow) c.stop();
  });
});

describe('request bodies in memory', () => {
  test('bodies over --max-body-memory at once: a request waits, then gets 503; room comes back', T, async () => {
    // Budget 20K (the floor: twice --max-body and a page); two 8K buffers held by stalled uploads.
    const s = await serve(['--max-body', '8K', '--max-body-memory', '20K']);
    const prompt = 'x'.repeat(6900);
    const body = JSON.stringify({ prompt, max_tokens: 1 });
    const stalled = [];
    for (let i = 0; i < 2; i++) {
      const c = await rawConnect(s.port);
      c.sock.write(`POST /tokenize HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n` + body.slice(0, 6000));
      stalled.push(c);
    }
    await sleep(1000); // let the server read them in
    const t0 = Date.now();
    const busy = await rawRequest(s.port, post('/tokenize', { body }));
    errorShape(assert, busy, 503);
    assert.equal(busy.body.error.code, 'server_busy');
    assert.ok(Date.now() - t0 >= 1500, 'answered before waiting for room');
    // The stalled uploads finish: their room comes back and the same request is served.
    for (const c of stalled) c.sock.write(body.slice(6000));
    for (const end = Date.now() + 10000; stalled.some((c) => !c.data) && Date.now() < end;) await sleep(50);
    for (const c of stalled) assert.match(c.data, /^HTTP\/1\.1 200/);
    assert.equal((await rawRequest(s.port, post('/tokenize', { body })))?.status, 200);
    for (const c of stalled) c.sock.destroy();
  });
});

describe('browsers', () => {
  test('POST bodies need Content-Type: application/json (415 otherwise)', T, async () => {
    const s = await serve([]);
    for (const type of [null, 'text/plain', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x', 'application/jsonx']) {
      const r = await rawRequest(s.port, post('/v1/completions', { type }));
      errorShape(assert, r, 415);
      assert.equal(r.body.error.code, 'unsupported_media_type');
    }
    for (const type of ['application/json', 'Application/JSON', 'application/json; charset=utf-8', 'application/json;charset=UTF-8']) {
      const r = await rawRequest(s.port, post('/v1/completions', { type }));
      assert.equal(r?.status, 200, `${type}: ${r?.text}`);
    }
    for (const route of ['/v1/chat/completions', '/tokenize', '/detokenize', '/v1/embeddings', '/v1/responses', '/v1/admin/reload'])
      assert.equal((await rawRequest(s.port, post(route, { type: 'text/plain' })))?.status, 415, route);
    // A POST without a body needs no type (curl -X POST .../v1/admin/pause).
    const empty = await rawRequest(s.port, 'POST /v1/admin/pause HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n');
    assert.equal(empty?.status, 403); // no admin key configured, not 415
    const m = await call(s, 'GET', '/metrics');
    assert.ok(metric(m.text, 'pith_request_errors_total', 'code="415"') >= 11, m.text);
  });

  test('on a loopback address only loopback Host names are answered (DNS rebinding), --allowed-hosts adds more', T, async () => {
    const s = await serve([]);
    for (const host of ['evil.example', 'evil.example:8080', 'localhost.evil.example', '127.0.0.1.evil.example', '[::2]:80', '10.0.0.1', 'localhost:80:80', 'localhost:x']) {
      const r = await rawRequest(s.port, get('/v1/models', host));
      errorShape(assert, r, 403);
      assert.equal(r.body.error.code, 'host_not_allowed', host);
    }
    assert.equal((await rawRequest(s.port, post('/v1/completions', { host: 'evil.example' })))?.status, 403);
    for (const host of ['localhost', `localhost:${s.port}`, 'LOCALHOST', '127.0.0.1', `127.0.0.1:${s.port}`, '127.3.2.1:1', '[::1]', `[::1]:${s.port}`]) {
      const r = await rawRequest(s.port, get('/v1/models', host));
      assert.equal(r?.status, 200, `${host}: ${r?.text}`);
    }
    // No Host at all (HTTP/1.0) is no browser's request.
    const h10 = await rawRequest(s.port, 'GET /health HTTP/1.0\r\n\r\n');
    assert.equal(h10?.status, 200);

    const named = await serve(['--allowed-hosts', 'pith.internal,Other.Test']);
    assert.equal((await rawRequest(named.port, get('/health', 'pith.internal:8080')))?.status, 200);
    assert.equal((await rawRequest(named.port, get('/health', 'other.test')))?.status, 200);
    assert.equal((await rawRequest(named.port, get('/health', 'evil.example')))?.status, 403);
    const any = await serve(['--allowed-hosts', '*']);
    assert.equal((await rawRequest(any.port, get('/health', 'evil.example')))?.status, 200);
  });

  test('a server on a non-loopback address does not check Host', T, async () => {
    const s = await serve(['--host', '0.0.0.0']);
    assert.equal((await rawRequest(s.port, get('/health', 'pith.example.com')))?.status, 200);
  });
});

describe('logs', () => {
  test('control characters in a request path cannot forge a text log line', T, async () => {
    const s = await serve([]);
    const r = await rawRequest(s.port, get('/v1/x%0aFAKE%20line%1b[31m%0dend%c2%9b%ff', 'localhost'));
    assert.equal(r?.status, 404);
    await logMatches(s, /GET \/v1\/x/);
    const log = s.log();
    const lines = log.split('\n');
    assert.ok(!lines.some((l) => l.startsWith('FAKE')), log);
    assert.ok(!/[\x1b\r\x7f]/.test(log), 'a raw control character reached the log');
    const access = lines.find((l) => l.includes('GET /v1/x'));
    assert.ok(access, log);
    assert.ok(access.includes('/v1/x\\nFAKE line\\x1b[31m\\rend\\xc2\\x9b\\xff 404'), access);
  });
});

describe('keys', () => {
  // pith serve exits with an error before listening: its exit status and stderr (bounded wait).
  function refused(args, env = {}) {
    const r = spawnSync(PITH_BIN, ['serve', ...findModel().args, '--port', '0', ...args],
                        { env: { ...process.env, ...env }, timeout: 20000, encoding: 'utf8' });
    return { status: r.status, signal: r.signal, stderr: r.stderr };
  }

  test('PITH_API_KEY and PITH_ADMIN_KEY are used when no key option is given', T, async () => {
    process.env.PITH_API_KEY = 'sk-from-env';
    process.env.PITH_ADMIN_KEY = 'admin-from-env';
    let s;
    try {
      s = await serve([]);
    } finally {
      delete process.env.PITH_API_KEY;
      delete process.env.PITH_ADMIN_KEY;
    }
    assert.equal((await call(s, 'GET', '/v1/models')).status, 401);
    assert.equal((await call(s, 'GET', '/v1/models', { key: 'sk-from-env' })).status, 200);
    assert.equal((await call(s, 'POST', '/v1/admin/resume', { key: 'admin-from-env', body: {} })).status, 200);
    // An option given on the command line wins over the environment.
    process.env.PITH_API_KEY = 'sk-from-env';
    try {
      s = await serve(['--api-key', 'sk-cli']);
    } finally {
      delete process.env.PITH_API_KEY;
    }
    assert.equal((await call(s, 'GET', '/v1/models', { key: 'sk-from-env' })).status, 401);
    assert.equal((await call(s, 'GET', '/v1/models', { key: 'sk-cli' })).status, 200);
  });

  test('key files: read with the newline stripped, refused when empty or not a regular file, warned when shared', T, async () => {
    const file = path.join(tmp, 'keys');
    writeFileSync(file, 'sk-file\n');
    chmodSync(file, 0o600);
    const s = await serve(['--api-key-file', file, '--admin-key-file', file]);
    assert.equal((await call(s, 'GET', '/v1/models', { key: 'sk-file' })).status, 200);
    assert.ok(!/can be read by other users/.test(s.log()), s.log());

    const shared = path.join(tmp, 'shared-keys');
    writeFileSync(shared, 'sk-shared\n');
    chmodSync(shared, 0o644);
    const w = await serve(['--api-key-file', shared]);
    assert.match(w.log(), /warning: the API key file .* can be read by other users/);

    const empty = path.join(tmp, 'empty');
    writeFileSync(empty, '\n# nothing\n');
    let r = refused(['--api-key-file', empty]);
    assert.equal(r.status, 1, r.stderr);
    assert.match(r.stderr, /holds no key/);
    r = refused(['--admin-key-file', tmp]);
    assert.equal(r.status, 1, r.stderr);
    assert.match(r.stderr, /not a regular file/);
    // A FIFO is refused at once, not waited on for ever.
    const fifo = path.join(tmp, 'fifo');
    if (spawnSync('mkfifo', [fifo]).status === 0) {
      r = refused(['--api-key-file', fifo]);
      assert.equal(r.signal, null, 'pith serve hung on a FIFO');
      assert.equal(r.status, 1, r.stderr);
      assert.match(r.stderr, /not a regular file/);
    }
    r = refused([], { PITH_API_KEY: '' });
    assert.equal(r.status, 2, r.stderr);
    assert.match(r.stderr, /PITH_API_KEY is set but empty/);
  });
});
