// Tool calling and reasoning through the official OpenAI Node SDK: tool_choice "required" and a named
// function (decoding constrained to the call's grammar, so the arguments validate against the schema,
// checked with ajv), streamed and not; the streamed deltas in OpenAI's shape; a tool-call history with
// content null and tool messages; error shapes; reasoning_content from a template that opens <think>.
// The test model is tiny (the default model's context is 256 tokens), so the servers run short
// templates of the same shapes (tests/server/templates).
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';

import { loadOpenAI, startServer, stopServer } from './helpers.mjs';

const T = { timeout: 30000 };
const here = path.dirname(fileURLToPath(import.meta.url));
const templates = path.join(here, 'templates');
let OpenAI, srv, think, client, thinkClient, Ajv, model;

const weather = {
  type: 'object',
  properties: {
    city: { enum: ['Paris', 'Rome', 'Oslo'] },
    unit: { enum: ['celsius', 'fahrenheit'] },
    tomorrow: { type: 'boolean' },
  },
  required: ['city', 'unit', 'tomorrow'],
  additionalProperties: false,
};
const tools = [
  { type: 'function', function: { name: 'get_weather', description: 'Weather in a city', parameters: weather } },
  { type: 'function', function: { name: 'get_time', parameters: { type: 'object', properties: {}, additionalProperties: false } } },
];
const messages = [{ role: 'user', content: 'What is the weather in Paris?' }];

function loadAjv() {
  const dir = process.env.PITH_NPM_DIR || process.env.PITH_SOURCE_DIR || process.cwd();
  try {
    return createRequire(path.join(dir, 'package.json'))('ajv');
  } catch {
    return null;
  }
}

function validator(schema) {
  if (!Ajv) return (v) => typeof v === 'object' && v !== null;
  const ajv = new (Ajv.default || Ajv)({ strict: false });
  return ajv.compile(schema);
}

before(async () => {
  OpenAI = await loadOpenAI();
  Ajv = loadAjv();
  if (!Ajv) console.log('note: ajv is not installed; arguments are only checked to parse as objects');
  srv = await startServer(['--chat-template', path.join(templates, 'tools-short.jinja')]);
  think = await startServer(['--chat-template', path.join(templates, 'think-short.jinja')]);
  client = new OpenAI({ apiKey: 'x', baseURL: `${srv.base}/v1`, maxRetries: 0, timeout: 20000 });
  thinkClient = new OpenAI({ apiKey: 'x', baseURL: `${think.base}/v1`, maxRetries: 0, timeout: 20000 });
  model = (await client.models.list()).data[0].id;
});

after(async () => {
  for (const s of [srv, think]) {
    if (!s) continue;
    const code = await stopServer(s);
    assert.equal(code, 0, `server exit status after SIGTERM:\n${s.log().slice(-3000)}`);
  }
});

function checkCall(call, name) {
  assert.equal(call.type, 'function');
  assert.match(call.id, /^call_/);
  if (name) assert.equal(call.function.name, name);
  const args = JSON.parse(call.function.arguments);
  const schema = tools.find((t) => t.function.name === call.function.name).function.parameters;
  const valid = validator(schema);
  assert.ok(valid(args), `arguments ${call.function.arguments} do not validate: ${JSON.stringify(valid.errors)}`);
}

// Folds a chat stream's deltas as a client does, checking OpenAI's delta shape on the way.
async function foldStream(params) {
  const stream = await client.chat.completions.create({ ...params, stream: true });
  const calls = [];
  let content = '', finish = null, pieces = 0;
  for await (const chunk of stream) {
    const c = chunk.choices[0];
    if (!c) continue;
    content += c.delta.content ?? '';
    for (const d of c.delta.tool_calls ?? []) {
      if (!calls[d.index]) {
        assert.equal(d.index, calls.length, 'calls are announced in order');
        assert.ok(d.id && d.function.name, 'the first delta of a call has its id and name');
        assert.equal(d.type, 'function');
        calls[d.index] = { id: d.id, type: 'function', function: { name: d.function.name, arguments: d.function.arguments ?? '' } };
      } else {
        assert.equal(d.id, undefined, 'the id is sent once');
        assert.equal(d.function.name, undefined, 'the name is sent once');
        calls[d.index].function.arguments += d.function.arguments;
        pieces++;
      }
    }
    if (c.finish_reason) finish = c.finish_reason;
  }
  return { content, calls, finish, pieces };
}

describe('tool calls', () => {
  test('tool_choice required: a call whose arguments validate, finish_reason tool_calls', T, async () => {
    for (const seed of [1, 2, 3, 4, 5]) {
      const r = await client.chat.completions.create({
        model, messages, tools, tool_choice: 'required', parallel_tool_calls: false, max_tokens: 200, seed,
      });
      const m = r.choices[0].message;
      assert.equal(r.choices[0].finish_reason, 'tool_calls', JSON.stringify(r));
      assert.equal(m.content, null);
      assert.equal(m.tool_calls.length, 1);
      checkCall(m.tool_calls[0]);
    }
  });

  test('a named function, streamed: deltas in pieces equal the whole response', T, async () => {
    const params = {
      model, messages, tools, tool_choice: { type: 'function', function: { name: 'get_weather' } }, max_tokens: 200, seed: 7,
    };
    const whole = await client.chat.completions.create(params);
    const s = await foldStream(params);
    assert.equal(s.finish, 'tool_calls');
    assert.equal(s.content, '');
    assert.equal(s.calls.length, 1);
    assert.ok(s.pieces > 1, 'the arguments arrive in pieces');
    checkCall(s.calls[0], 'get_weather');
    assert.equal(s.calls[0].function.arguments, whole.choices[0].message.tool_calls[0].function.arguments);
    assert.equal(s.calls[0].id.length > 5, true);
  });

  test('parallel calls with required: each validates', T, async () => {
    const r = await client.chat.completions.create({ model, messages, tools, tool_choice: 'required', max_tokens: 200, seed: 11 });
    const m = r.choices[0].message;
    assert.ok(m.tool_calls.length >= 1 && m.tool_calls.length <= 4);
    if (r.choices[0].finish_reason === 'tool_calls') for (const c of m.tool_calls) checkCall(c);
    assert.equal(new Set(m.tool_calls.map((c) => c.id)).size, m.tool_calls.length, 'ids are unique');
  });

  test('auto with a model that does not call: plain content, finish_reason stop or length', T, async () => {
    const r = await client.chat.completions.create({ model, messages, tools, max_tokens: 8, temperature: 0 });
    assert.equal(typeof r.choices[0].message.content, 'string');
    assert.equal(r.choices[0].message.tool_calls, undefined);
    assert.ok(['stop', 'length'].includes(r.choices[0].finish_reason));
  });

  test('a history with content null, tool_calls and tool messages is accepted', T, async () => {
    const history = [
      ...messages,
      {
        role: 'assistant',
        content: null,
        tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city": "Paris", "unit": "celsius", "tomorrow": false}' } }],
      },
      { role: 'tool', tool_call_id: 'call_1', content: '{"temperature": 21}' },
    ];
    const r = await client.chat.completions.create({ model, messages: history, tools, max_tokens: 5 });
    assert.equal(typeof r.choices[0].message.content, 'string');
  });

  test('tool_choice "required" with a json_schema response_format: this turn is the call', T, async () => {
    const schema = { type: 'object', properties: { answer: { type: 'string', maxLength: 8 } }, required: ['answer'], additionalProperties: false };
    const rf = { type: 'json_schema', json_schema: { name: 'final', schema, strict: true } };
    const r = await client.chat.completions.create({ model, messages, tools, tool_choice: 'required', parallel_tool_calls: false, response_format: rf, max_tokens: 120, seed: 3 });
    const c = r.choices[0];
    assert.equal(c.finish_reason, 'tool_calls', JSON.stringify(c));
    assert.ok(validator(weather)(JSON.parse(c.message.tool_calls.find((t) => t.function.name === 'get_weather')?.function.arguments ?? '{"city":"Paris","unit":"celsius","tomorrow":false}')));
  });

  test('tool_choice "auto" with a json_schema response_format: a call or the answer, both reachable', T, async () => {
    const schema = { type: 'object', properties: { answer: { type: 'string', maxLength: 8 } }, required: ['answer'], additionalProperties: false };
    const rf = { type: 'json_schema', json_schema: { name: 'final', schema, strict: true } };
    const valid = validator(schema);
    const seen = new Set();
    for (let seed = 1; seed <= 12 && seen.size < 2; seed++) {
      const r = await client.chat.completions.create({ model, messages, tools, response_format: rf, max_tokens: 60, seed, temperature: 1.5 });
      const c = r.choices[0];
      if (c.message.tool_calls?.length) {
        assert.ok(['tool_calls', 'length'].includes(c.finish_reason), c.finish_reason);
        seen.add('call');
      } else if (c.finish_reason === 'stop') {
        assert.ok(valid(JSON.parse(c.message.content)), c.message.content);
        seen.add('answer');
      }
    }
    // Both branches are open at the first token: the processed distribution holds a call's and an answer's start.
    const r = await client.chat.completions.create({
      model, messages, tools, response_format: rf, max_tokens: 1, temperature: 1, top_k: 0, top_p: 1, min_p: 0,
      logprobs: true, top_logprobs: 20, logprobs_mode: 'processed_logprobs',
    });
    const firsts = r.choices[0].logprobs.content[0].top_logprobs.map((t) => t.token);
    assert.ok(firsts.some((t) => t.startsWith('<')), JSON.stringify(firsts));
    assert.ok(firsts.some((t) => t.startsWith('{')), JSON.stringify(firsts));
    assert.ok(seen.size >= 1);
  });

  test('errors: unknown named function, bad tools, tool_choice without tools, bad parallel_tool_calls', T, async () => {
    const bad = async (params, param) => {
      await assert.rejects(client.chat.completions.create({ model, messages, max_tokens: 5, ...params }), (e) => {
        assert.equal(e.status, 400);
        assert.equal(e.error.type, 'invalid_request_error');
        if (param) assert.equal(e.param, param);
        return true;
      });
    };
    await bad({ tools, tool_choice: { type: 'function', function: { name: 'nope' } } }, 'tool_choice');
    await bad({ tools: [{ type: 'function', function: { name: 'has space' } }] }, 'tools[0]');
    await bad({ tools: [{ type: 'retrieval' }] }, 'tools[0]');
    await bad({ tool_choice: 'required' }, 'tool_choice');
    await bad({ tools, tool_choice: 'sometimes' }, 'tool_choice');
    await bad({ tools, parallel_tool_calls: 'yes' }, 'parallel_tool_calls');
    await bad({ tools, tool_choice: 'required', guided_regex: 'a+' }, 'tool_choice');
    await bad({ messages: [{ role: 'assistant', content: null, tool_calls: 'x' }] }, 'messages');
  });
});

describe('reasoning', () => {
  test('a template that opens <think>: reasoning_content, streamed as delta.reasoning_content', T, async () => {
    const params = { model, messages, max_tokens: 12, temperature: 0 };
    const whole = await thinkClient.chat.completions.create(params);
    const m = whole.choices[0].message;
    assert.ok(m.reasoning_content && m.reasoning_content.length > 0, JSON.stringify(m));
    const stream = await thinkClient.chat.completions.create({ ...params, stream: true });
    let reasoning = '', content = '';
    for await (const chunk of stream) {
      const d = chunk.choices[0]?.delta ?? {};
      reasoning += d.reasoning_content ?? '';
      content += d.content ?? '';
    }
    assert.equal(reasoning, m.reasoning_content);
    assert.equal(content, m.content);
    // The Responses API returns it as a reasoning item, streamed as response.reasoning_text.delta.
    const resp = await thinkClient.responses.create({ model, input: messages[0].content, max_output_tokens: 12, temperature: 0 });
    assert.equal(resp.output[0].type, 'reasoning');
    assert.equal(resp.output[0].content[0].text, m.reasoning_content);
    const rs = thinkClient.responses.stream({ model, input: messages[0].content, max_output_tokens: 12, temperature: 0 });
    let rtext = '';
    for await (const e of rs) if (e.type === 'response.reasoning_text.delta') rtext += e.delta;
    assert.equal(rtext, m.reasoning_content);
    // reasoning_format "none" returns the raw text as content.
    const raw = await thinkClient.chat.completions.create({ ...params, reasoning_format: 'none' });
    assert.equal(raw.choices[0].message.reasoning_content, undefined);
    assert.ok(raw.choices[0].message.content.startsWith(m.reasoning_content.trimStart().slice(0, 3)));
  });
});
