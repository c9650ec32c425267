// POST /v1/messages (Anthropic's Messages API) and /v1/messages/count_tokens through the official
// @anthropic-ai/sdk client: a plain message (same text as chat), stop reasons (max_tokens,
// stop_sequence with the matched string, end_turn from an output_config JSON schema), messages.stream()
// with its helpers and the raw event order, a tool loop of three model turns (forced calls through the
// tools grammar, tool_result fed back, a last turn with tool_choice none), thinking blocks, count_tokens,
// x-api-key authentication, errors in Anthropic's shape, and the SSE stream read with fetch (event
// names, ping, indexes, an error event for a request aborted mid-stream). The test model is tiny, so
// the servers run the short templates of tests/server/templates. Skips (saying why) without the SDK.
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath, pathToFileURL } from 'node:url';

import { startServer, stopServer } from './helpers.mjs';

const T = { timeout: 30000 };
const here = path.dirname(fileURLToPath(import.meta.url));
const templates = path.join(here, 'templates');
const KEY = 'anthropic-test-key';
const ADMIN = 'anthropic-test-admin';

async function loadAnthropic() {
  const dir = process.env.PITH_NPM_DIR || process.env.PITH_SOURCE_DIR || process.cwd();
  try {
    const req = createRequire(path.join(dir, 'package.json'));
    const mod = await import(pathToFileURL(req.resolve('@anthropic-ai/sdk')).href);
    return mod.default || mod.Anthropic;
  } catch {
    return null;
  }
}

const Anthropic = await loadAnthropic();
const skip = Anthropic ? false : 'the @anthropic-ai/sdk npm package is not installed (run `npm ci` in the source tree)';
if (skip) console.log(`SKIP: anthropic tests: ${skip}`);

let srv, think, keyed, client, thinkClient, model, ctx;

const weather = {
  type: 'object',
  properties: { city: { enum: ['Paris', 'Rome', 'Oslo'] }, tomorrow: { type: 'boolean' } },
  required: ['city', 'tomorrow'],
  additionalProperties: false,
};
const tools = [
  { name: 'get_weather', description: 'Weather in a city', input_schema: weather },
  { name: 'get_time', description: 'The time', input_schema: { type: 'object', properties: {}, additionalProperties: false } },
];
const user = (content) => ({ role: 'user', content });

before(async () => {
  if (skip) return;
  srv = await startServer(['--chat-template', path.join(templates, 'tools-short.jinja')]);
  think = await startServer(['--chat-template', path.join(templates, 'think-short.jinja')]);
  keyed = await startServer(['--api-key', KEY, '--admin-key', ADMIN, '--chat-template', path.join(templates, 'tools-short.jinja')]);
  client = new Anthropic({ apiKey: 'x', baseURL: srv.base, maxRetries: 0, timeout: 20000 });
  thinkClient = new Anthropic({ apiKey: 'x', baseURL: think.base, maxRetries: 0, timeout: 20000 });
  const info = (await (await fetch(`${srv.base}/v1/models`)).json()).data[0];
  model = info.id;
  ctx = info.max_model_len;
});

after(async () => {
  for (const s of [srv, think, keyed]) {
    if (!s) continue;
    const code = await stopServer(s);
    assert.equal(code, 0, `server exit status after SIGTERM:\n${s.log().slice(-3000)}`);
  }
});

// An SSE body as [{event, data}] (comment lines skipped).
async function readEvents(response) {
  const text = await response.text();
  const out = [];
  for (const block of text.split('\n\n')) {
    let event = null, data = null;
    for (const line of block.split('\n')) {
      if (line.startsWith('event: ')) event = line.slice(7);
      else if (line.startsWith('data: ')) data = JSON.parse(line.slice(6));
    }
    if (event || data) out.push({ event, data });
  }
  return out;
}

function post(srvx, route, body, headers = {}) {
  return fetch(srvx.base + route, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });
}

// max_tokens for a forced call: up to 200, within what the context leaves after the prompt.
async function room(params) {
  const { input_tokens } = await client.messages.countTokens({ model, messages: params.messages, tools: params.tools });
  return Math.min(200, ctx - input_tokens - 1);
}

function checkError(e, status, type) {
  assert.equal(e.status, status, String(e));
  assert.equal(e.error?.type, 'error', JSON.stringify(e.error));
  assert.equal(e.error.error.type, type);
  assert.equal(typeof e.error.error.message, 'string');
  assert.ok(e.error.error.message.length > 0);
}

function checkInput(input) {
  assert.equal(typeof input, 'object');
  assert.ok(['Paris', 'Rome', 'Oslo'].includes(input.city), JSON.stringify(input));
  assert.equal(typeof input.tomorrow, 'boolean');
  assert.deepEqual(Object.keys(input).sort(), ['city', 'tomorrow']);
}

describe('Anthropic messages', { skip }, () => {
  test('create: a text block, max_tokens, usage, the same text as chat and count_tokens', T, async () => {
    const params = { model, max_tokens: 8, temperature: 0, system: 'Be brief.', messages: [user('Tell me a story.')] };
    const m = await client.messages.create(params);
    assert.match(m.id, /^msg_/);
    assert.equal(m.type, 'message');
    assert.equal(m.role, 'assistant');
    assert.equal(m.model, model);
    assert.equal(m.content.length, 1);
    assert.equal(m.content[0].type, 'text');
    assert.equal(m.stop_reason, 'max_tokens');
    assert.equal(m.stop_sequence, null);
    assert.equal(m.usage.output_tokens, 8);
    const chat = await (await post(srv, '/v1/chat/completions', {
      model, max_tokens: 8, temperature: 0, messages: [{ role: 'system', content: 'Be brief.' }, user('Tell me a story.')],
    })).json();
    assert.equal(m.content[0].text, chat.choices[0].message.content);
    assert.equal(m.usage.input_tokens, chat.usage.prompt_tokens);
    const count = await client.messages.countTokens({ model, system: 'Be brief.', messages: [user('Tell me a story.')] });
    assert.equal(count.input_tokens, m.usage.input_tokens);
    // System as text blocks, content as text blocks: the same prompt.
    const blocks = await client.messages.create({
      ...params, system: [{ type: 'text', text: 'Be brief.' }], messages: [user([{ type: 'text', text: 'Tell me a story.' }])],
    });
    assert.equal(blocks.content[0].text, m.content[0].text);
    // anthropic-version and anthropic-beta are accepted and ignored; metadata is ignored.
    const r = await post(srv, '/v1/messages', { ...params, metadata: { user_id: 'u1' } }, { 'anthropic-version': '2023-06-01', 'anthropic-beta': 'x' });
    assert.equal(r.status, 200);
  });

  test('stop_sequences: stop_reason stop_sequence with the string that matched; end_turn', T, async () => {
    let seen = 0;
    for (const seed of [1, 2, 3, 4]) {
      const m = await client.messages.create({ model, max_tokens: 60, seed, stop_sequences: ['e', 'zzqq'], messages: [user('Hello')] });
      if (m.stop_reason !== 'stop_sequence') continue;
      seen++;
      assert.equal(m.stop_sequence, 'e');
      assert.ok(!(m.content[0]?.text ?? '').includes('e'), JSON.stringify(m.content));
    }
    assert.ok(seen > 0, 'a stop sequence ended some message');
    // A JSON schema (output_config.format) ends the output when the value is complete: end_turn.
    const schema = { type: 'object', properties: { ok: { type: 'boolean' } }, required: ['ok'], additionalProperties: false };
    const m = await client.messages.create({ model, max_tokens: 60, messages: [user('Answer')], output_config: { format: { type: 'json_schema', schema } } });
    assert.equal(m.stop_reason, 'end_turn');
    assert.equal(typeof JSON.parse(m.content[0].text).ok, 'boolean');
  });

  test('stream(): on("text"), finalMessage() and the event order equal the whole message', T, async () => {
    const params = { model, max_tokens: 12, temperature: 0, messages: [user('Once upon a time')] };
    const whole = await client.messages.create(params);
    const stream = client.messages.stream(params);
    let text = '';
    const types = [];
    stream.on('text', (delta) => {
      text += delta;
    });
    stream.on('streamEvent', (e) => types.push(e.type));
    const final = await stream.finalMessage();
    assert.equal(text, whole.content[0].text);
    assert.deepEqual(final.content, whole.content);
    assert.equal(final.stop_reason, whole.stop_reason);
    assert.ok(['max_tokens', 'end_turn'].includes(final.stop_reason));
    assert.equal(final.usage.output_tokens, whole.usage.output_tokens);
    assert.equal(final.usage.input_tokens, whole.usage.input_tokens);
    assert.equal(types[0], 'message_start');
    assert.equal(types[1], 'content_block_start');
    assert.deepEqual(types.slice(-3), ['content_block_stop', 'message_delta', 'message_stop']);
    assert.ok(types.slice(2, -3).every((t) => t === 'content_block_delta'), types.join());
  });

  test('a tool loop of three turns: forced calls, tool_result fed back, then text', T, async () => {
    const messages = [user('What is the weather in Paris and Rome?')];
    // Turn 1: a named tool.
    const t1 = await client.messages.create({ model, max_tokens: await room({ messages, tools }), seed: 1, tools, tool_choice: { type: 'tool', name: 'get_weather' }, messages });
    assert.equal(t1.stop_reason, 'tool_use', JSON.stringify(t1));
    const call1 = t1.content.find((b) => b.type === 'tool_use');
    assert.match(call1.id, /^toolu_/);
    assert.equal(call1.name, 'get_weather');
    checkInput(call1.input);
    messages.push({ role: 'assistant', content: t1.content });
    messages.push(user([{ type: 'tool_result', tool_use_id: call1.id, content: '{"temperature": 21}' }]));
    // Turn 2: any tool, one call only; its result is an error (text blocks, is_error).
    const t2 = await client.messages.create({
      model, max_tokens: await room({ messages, tools }), seed: 2, tools, tool_choice: { type: 'any', disable_parallel_tool_use: true }, messages,
    });
    assert.equal(t2.stop_reason, 'tool_use', JSON.stringify(t2));
    const calls2 = t2.content.filter((b) => b.type === 'tool_use');
    assert.equal(calls2.length, 1);
    if (calls2[0].name === 'get_weather') checkInput(calls2[0].input);
    else assert.deepEqual(calls2[0].input, {});
    assert.notEqual(calls2[0].id, call1.id);
    messages.push({ role: 'assistant', content: t2.content });
    messages.push(user([
      { type: 'tool_result', tool_use_id: calls2[0].id, is_error: true, content: [{ type: 'text', text: 'unavailable' }] },
      { type: 'text', text: 'Now answer.' },
    ]));
    // Turn 3: tool_choice none: text, no call.
    const t3 = await client.messages.create({ model, max_tokens: 10, seed: 3, tools, tool_choice: { type: 'none' }, messages });
    assert.ok(['max_tokens', 'end_turn'].includes(t3.stop_reason), t3.stop_reason);
    assert.ok(t3.content.every((b) => b.type === 'text'), JSON.stringify(t3.content));
    // The same history streamed with a forced call: input_json_delta pieces that make the input.
    const s = client.messages.stream({ model, max_tokens: await room({ messages, tools }), seed: 4, tools, tool_choice: { type: 'tool', name: 'get_weather' }, messages });
    let pieces = 0, json = '';
    s.on('streamEvent', (e) => {
      if (e.type === 'content_block_delta' && e.delta.type === 'input_json_delta') {
        pieces++;
        json += e.delta.partial_json;
      }
    });
    const final = await s.finalMessage();
    assert.equal(final.stop_reason, 'tool_use');
    const call = final.content.find((b) => b.type === 'tool_use');
    checkInput(call.input);
    assert.ok(pieces > 1, 'the input arrives in pieces');
    assert.deepEqual(JSON.parse(json), call.input);
  });

  test('thinking: a thinking block (signature ""), streamed as thinking_delta; thinking history accepted', T, async () => {
    const params = { model, max_tokens: 12, temperature: 0, thinking: { type: 'enabled', budget_tokens: 1024 }, messages: [user('Hello')] };
    const m = await thinkClient.messages.create(params);
    assert.equal(m.content[0].type, 'thinking', JSON.stringify(m.content));
    assert.equal(m.content[0].signature, '');
    assert.ok(m.content[0].thinking.length > 0);
    const s = thinkClient.messages.stream(params);
    let thinking = '';
    s.on('thinking', (delta) => {
      thinking += delta;
    });
    const final = await s.finalMessage();
    assert.equal(thinking, m.content[0].thinking);
    assert.deepEqual(final.content, m.content);
    const next = await thinkClient.messages.create({
      ...params, thinking: { type: 'disabled' },
      messages: [user('Hello'), { role: 'assistant', content: [...m.content, { type: 'redacted_thinking', data: 'x' }, { type: 'text', text: 'Hi.' }] }, user('Again')],
    });
    assert.equal(next.type, 'message');
  });

  test('count_tokens: tools and system count; the rendered prompt of create', T, async () => {
    const messages = [user('Weather?')];
    const plain = await client.messages.countTokens({ model, messages });
    const withTools = await client.messages.countTokens({ model, messages, tools });
    assert.ok(plain.input_tokens > 0);
    assert.ok(withTools.input_tokens > plain.input_tokens, `${withTools.input_tokens} > ${plain.input_tokens}`);
    const m = await client.messages.create({ model, max_tokens: 1, messages, tools });
    assert.equal(m.usage.input_tokens, withTools.input_tokens);
    await assert.rejects(client.messages.countTokens({ model: 'claude-nope', messages }), (e) => (checkError(e, 404, 'not_found_error'), true));
  });

  test('errors in Anthropic shape: missing max_tokens, bad role, unknown model, images, bad tool_choice', T, async () => {
    const bad = async (params, status, type, match) => {
      await assert.rejects(client.messages.create({ model, max_tokens: 5, messages: [user('hi')], ...params }), (e) => {
        checkError(e, status, type);
        if (match) assert.match(e.error.error.message, match);
        return true;
      });
    };
    await bad({ max_tokens: undefined }, 400, 'invalid_request_error', /max_tokens/);
    await bad({ max_tokens: 0 }, 400, 'invalid_request_error', /max_tokens/);
    await bad({ messages: [{ role: 'system', content: 'x' }] }, 400, 'invalid_request_error', /role/);
    await bad({ messages: [] }, 400, 'invalid_request_error', /messages/);
    await bad({ model: 'claude-sonnet-4-5' }, 404, 'not_found_error', /claude-sonnet-4-5/);
    const image = { type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'iVBORw0KGgo=' } };
    await bad({ messages: [user([{ type: 'text', text: 'What is this?' }, image])] }, 400, 'invalid_request_error', /content\[1\]: image/);
    await bad({ messages: [user([{ type: 'image', source: { type: 'url', url: 'https://example.com/a.png' } }])] }, 400, 'invalid_request_error', /image/);
    await bad({ tools, tool_choice: { type: 'tool', name: 'nope' } }, 400, 'invalid_request_error', /nope/);
    await bad({ tools, tool_choice: { type: 'sometimes' } }, 400, 'invalid_request_error', /tool_choice/);
    await bad({ tools: [{ type: 'web_search_20250305', name: 'web_search' }] }, 400, 'invalid_request_error', /web_search_20250305/);
    await bad({ stop_sequences: 'x' }, 400, 'invalid_request_error', /stop_sequences/);
    await bad({ thinking: { type: 'enabled' } }, 400, 'invalid_request_error', /budget_tokens/);
    // Errors of the HTTP layer on these routes: invalid JSON, wrong method, unknown path, content type.
    let r = await fetch(`${srv.base}/v1/messages`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{' });
    assert.equal(r.status, 400);
    assert.equal((await r.json()).error.type, 'invalid_request_error');
    r = await fetch(`${srv.base}/v1/messages`);
    assert.equal(r.status, 405);
    assert.deepEqual(Object.keys(await r.json()).sort(), ['error', 'type']);
    r = await post(srv, '/v1/messages/nope', {});
    assert.equal(r.status, 404);
    assert.equal((await r.json()).error.type, 'not_found_error');
    r = await fetch(`${srv.base}/v1/messages`, { method: 'POST', headers: { 'content-type': 'text/plain' }, body: 'x' });
    assert.equal(r.status, 415);
    assert.equal((await r.json()).type, 'error');
  });

  test('x-api-key: the right key works, a wrong one is AuthenticationError; Bearer works too', T, async () => {
    const ok = new Anthropic({ apiKey: KEY, baseURL: keyed.base, maxRetries: 0, timeout: 20000 });
    const m = await ok.messages.create({ model, max_tokens: 3, messages: [user('hi')] });
    assert.equal(m.type, 'message');
    assert.ok((await ok.messages.countTokens({ model, messages: [user('hi')] })).input_tokens > 0);
    const wrong = new Anthropic({ apiKey: 'wrong', baseURL: keyed.base, maxRetries: 0, timeout: 20000 });
    await assert.rejects(wrong.messages.create({ model, max_tokens: 3, messages: [user('hi')] }), (e) => {
      assert.ok(e instanceof Anthropic.AuthenticationError, String(e));
      checkError(e, 401, 'authentication_error');
      return true;
    });
    const bearer = new Anthropic({ authToken: KEY, apiKey: null, baseURL: keyed.base, maxRetries: 0, timeout: 20000 });
    assert.equal((await bearer.messages.create({ model, max_tokens: 3, messages: [user('hi')] })).type, 'message');
    const none = await post(keyed, '/v1/messages', { model, max_tokens: 3, messages: [user('hi')] });
    assert.equal(none.status, 401);
    assert.match((await none.json()).error.message, /x-api-key/);
    // x-api-key is for the Anthropic routes only; others keep their OpenAI errors.
    const chat = await post(keyed, '/v1/chat/completions', { model, max_tokens: 3, messages: [user('hi')] }, { 'x-api-key': KEY });
    assert.equal(chat.status, 401);
    assert.equal(typeof (await chat.json()).error.code, 'string');
  });

  test('SSE with fetch: event names, ping, increasing indexes, message_delta usage', T, async () => {
    const r = await post(srv, '/v1/messages', {
      model, max_tokens: 200, seed: 5, stream: true, tools, tool_choice: { type: 'any' }, messages: [user('Weather?')],
    });
    assert.equal(r.status, 200);
    assert.match(r.headers.get('content-type'), /^text\/event-stream/);
    const events = await readEvents(r);
    for (const e of events) assert.equal(e.data.type, e.event);
    const names = events.map((e) => e.event);
    assert.deepEqual(names.slice(0, 2), ['message_start', 'ping']);
    assert.deepEqual(names.slice(-2), ['message_delta', 'message_stop']);
    const start = events[0].data.message;
    assert.deepEqual(start.content, []);
    assert.equal(start.stop_reason, null);
    assert.ok(start.usage.input_tokens > 0);
    let open = -1, next = 0;
    for (const { event, data } of events.slice(2, -2)) {
      if (event === 'content_block_start') {
        assert.equal(open, -1, 'one block open at a time');
        assert.equal(data.index, next++);
        open = data.index;
      } else if (event === 'content_block_delta' || event === 'content_block_stop') {
        assert.equal(data.index, open);
        if (event === 'content_block_stop') open = -1;
      } else {
        assert.fail(`unexpected event ${event}`);
      }
    }
    assert.equal(open, -1);
    assert.ok(next >= 1);
    const first = events[2].data.content_block;
    assert.equal(first.type, 'tool_use');
    assert.deepEqual(first.input, {});
    const delta = events.at(-2).data;
    assert.ok(['tool_use', 'max_tokens'].includes(delta.delta.stop_reason), delta.delta.stop_reason);
    assert.ok(delta.usage.output_tokens > 0);
  });

  test('a request aborted mid-stream ends with an error event (overloaded_error)', T, async () => {
    const admin = (what, body = {}) => post(keyed, `/v1/admin/${what}`, body, { authorization: `Bearer ${ADMIN}` });
    assert.equal((await admin('pause', { mode: 'keep' })).status, 200);
    try {
      const pending = post(keyed, '/v1/messages', { model, max_tokens: 20, stream: true, messages: [user('hi')] }, { 'x-api-key': KEY });
      const r = await pending;
      assert.equal(r.status, 200);
      // The request is held by the pause; abort cancels it.
      let aborted = 0;
      for (let i = 0; i < 50 && !aborted; i++) {
        aborted = (await (await admin('abort')).json()).aborted ?? 0;
        if (!aborted) await new Promise((res) => setTimeout(res, 20));
      }
      const events = await readEvents(r);
      assert.equal(events[0].event, 'message_start');
      const last = events.at(-1);
      assert.equal(last.event, 'error', JSON.stringify(events.map((e) => e.event)));
      assert.equal(last.data.type, 'error');
      assert.equal(last.data.error.type, 'overloaded_error');
      assert.match(last.data.error.message, /abort/);
    } finally {
      await admin('resume');
    }
  });
});
