// Connections and shutdown: idle and stalled clients are cut off after --timeout, connections are
// bounded by --max-connections, and SIGTERM drains (stop accepting, finish what runs, cancel what is
// left at the deadline, exit 0).
import assert from 'node:assert/strict';
import http from 'node:http';
import net from 'node:net';
import { after, describe, test } from 'node:test';

import { LONG_TOKENS, readSSE, sleep, startServer, stopServer, within } from './helpers.mjs';

const T = { timeout: 30000 };
const servers = [];

after(async () => {
  for (const s of servers) {
    const code = await stopServer(s);
    assert.equal(code, 0, `server exit status:\n${s.log().slice(-3000)}`);
  }
});

async function serve(args, opts) {
  const s = await startServer(args, opts);
  servers.push(s);
  return s;
}

// Opens a raw connection; resolves once connected. The returned object records when it closed and
// what the server sent.
function rawConnect(port) {
  return new Promise((resolve, reject) => {
    const sock = net.connect(port, '127.0.0.1');
    const c = { sock, data: '', closed: null, error: null };
    c.closedP = new Promise((r) => sock.on('close', () => {
      c.closed = Date.now();
      r();
    }));
    sock.on('data', (d) => (c.data += d.toString()));
    sock.on('error', (e) => (c.error = e));
    sock.once('connect', () => resolve(c));
    sock.once('error', reject);
  });
}

// GET /health on a fresh raw connection: the status line, or null when the server closed it unanswered.
async function rawHealth(port) {
  let c;
  try {
    c = await rawConnect(port);
  } catch {
    return null;
  }
  c.sock.write('GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n');
  await within(c.closedP, 5000);
  c.sock.destroy();
  return c.data ? c.data.split('\r\n')[0] : null;
}

describe('timeouts and connection limits', () => {
  test('idle and stalled connections are closed after --timeout; the limit refuses extra ones', T, async () => {
    const s = await serve(['--timeout', '1', '--max-connections', '3']);
    await sleep(1500); // let the readiness probe's keep-alive connection time out

    const idle = await rawConnect(s.port);
    const t0 = Date.now();
    const stalled = await rawConnect(s.port);
    stalled.sock.write('POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Length: 50\r\n\r\n{"prom');
    const third = await rawConnect(s.port);
    // All three slots are taken: a fourth connection is closed without an answer.
    assert.equal(await rawHealth(s.port), null);
    await Promise.all([within(idle.closedP, 5000), within(stalled.closedP, 5000), within(third.closedP, 5000)]);
    for (const c of [idle, stalled, third]) {
      assert.ok(c.closed, 'closed by the server');
      const dt = c.closed - t0;
      assert.ok(dt >= 500 && dt < 4000, `closed after ${dt} ms`);
    }
    // Slots are free again and the server is fine. The server frees a slot after it closed the socket,
    // which the client may see first: give it a moment instead of racing it.
    let status = null;
    for (const until = Date.now() + 2000; status === null && Date.now() < until;) {
      status = await rawHealth(s.port);
      if (status === null) await sleep(50);
    }
    assert.equal(status, 'HTTP/1.1 200 OK');
  });
});

// A streaming completion over node:http whose body is not read until resume() is called.
function pausedStream(port, body) {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, method: 'POST', path: '/v1/completions',
      headers: { 'content-type': 'application/json', connection: 'close' } }, (res) => {
      res.pause();
      const done = new Promise((r, j) => {
        let text = '';
        res.on('data', (d) => (text += d.toString()));
        res.on('end', () => r(text));
        res.on('error', j);
      });
      resolve({ res, resume: () => (res.resume(), done) });
    });
    req.on('error', reject);
    req.end(JSON.stringify(body));
  });
}

function parseSSEText(text) {
  const events = [];
  let done = false;
  for (const line of text.split('\n')) {
    if (!line.startsWith('data: ')) continue;
    if (line === 'data: [DONE]') done = true;
    else events.push(JSON.parse(line.slice(6)));
  }
  return { events, done };
}

describe('SIGTERM', () => {
  test('drains: refuses new connections, lets a running stream finish, exits 0', T, async () => {
    const s = await serve([]);
    // Unread, the response (with 20 logprobs per token, megabytes) outgrows the socket buffers, so the
    // request stays in flight however fast the model is.
    const n = 16, max = Math.min(300, LONG_TOKENS);
    const st = await pausedStream(s.port, {
      prompt: 'Once upon a time', n, max_tokens: max, temperature: 0, ignore_eos: true, stream: true,
      stream_options: { include_usage: true }, logprobs: 20,
    });
    assert.equal(st.res.statusCode, 200);
    await sleep(100);
    s.proc.kill('SIGTERM');
    await sleep(400);
    assert.equal(s.proc.exitCode, null, 'still draining while a request runs');
    await assert.rejects(rawConnect(s.port), (e) => e.code === 'ECONNREFUSED', 'the listener is closed');
    const { events, done } = parseSSEText(await st.resume());
    assert.ok(done, 'the stream ran to [DONE]');
    const finishes = events.flatMap((e) => e.choices.filter((c) => c.finish_reason).map((c) => c.finish_reason));
    assert.deepEqual(finishes, Array(n).fill('length'));
    assert.equal(events.at(-1).usage.completion_tokens, n * max);
    assert.equal(await within(s.exited, 5000), 0);
  });

  test('cancels what is still running at --drain-timeout, then exits 0', T, async () => {
    const s = await serve(['--drain-timeout', '0.2', '--max-num-seqs', '1']);
    const r = await fetch(`${s.base}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ prompt: 'Once upon a time', n: 16, max_tokens: LONG_TOKENS, temperature: 0, ignore_eos: true, stream: true }),
    });
    assert.equal(r.status, 200);
    const reader = r.body.getReader();
    await reader.read(); // the first chunk: generation is under way
    const t0 = Date.now();
    s.proc.kill('SIGTERM');
    let text = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      text += new TextDecoder().decode(value);
    }
    const { events, done } = parseSSEText(text);
    assert.ok(!done, 'no [DONE] after a cancellation');
    const last = events.at(-1);
    assert.ok(last.error, `the stream ends with an error event: ${JSON.stringify(last)}`);
    assert.equal(last.error.code, 'shutting_down');
    const finished = events.filter((e) => e.choices?.some((c) => c.finish_reason)).length;
    assert.ok(finished < 16, `${finished} of 16 choices finished before the deadline`);
    assert.equal(await within(s.exited, 10000), 0);
    assert.ok(Date.now() - t0 < 5000, `exit took ${Date.now() - t0} ms`);
  });
});
