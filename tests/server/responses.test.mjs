// POST /v1/responses through the official OpenAI Node SDK: responses.create with a string and with
// items (messages, function_call, function_call_output), instructions, usage, max_output_tokens
// (status incomplete); function tools with tool_choice required (arguments validate); text.format
// json_schema (the output validates); responses.stream's event sequence and final response; errors.
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';

import { loadOpenAI, startServer, stopServer } from './helpers.mjs';

const T = { timeout: 30000 };
const here = path.dirname(fileURLToPath(import.meta.url));
let srv, client, model, Ajv;

const weather = {
  type: 'object',
  properties: { city: { enum: ['Paris', 'Rome'] }, tomorrow: { type: 'boolean' } },
  required: ['city', 'tomorrow'],
  additionalProperties: false,
};
const tools = [{ type: 'function', name: 'get_weather', description: 'Weather in a city', parameters: weather, strict: true }];

function validate(schema, value) {
  if (!Ajv) return typeof value === 'object' && value !== null;
  const v = new (Ajv.default || Ajv)({ strict: false }).compile(schema);
  return v(value);
}

before(async () => {
  const OpenAI = await loadOpenAI();
  const dir = process.env.PITH_NPM_DIR || process.env.PITH_SOURCE_DIR || process.cwd();
  try {
    Ajv = createRequire(path.join(dir, 'package.json'))('ajv');
  } catch {
    Ajv = null;
  }
  srv = await startServer(['--chat-template', path.join(here, 'templates', 'tools-short.jinja')]);
  client = new OpenAI({ apiKey: 'x', baseURL: `${srv.base}/v1`, maxRetries: 0, timeout: 20000 });
  model = (await client.models.list()).data[0].id;
});

after(async () => {
  if (!srv) return;
  const code = await stopServer(srv);
  assert.equal(code, 0, `server exit status after SIGTERM:\n${srv.log().slice(-3000)}`);
});

describe('responses', () => {
  test('create with a string: one message item, output_text, usage; same text as chat', T, async () => {
    const r = await client.responses.create({ model, input: 'Tell me a story.', instructions: 'Be brief.', max_output_tokens: 8, temperature: 0 });
    assert.equal(r.object, 'response');
    assert.match(r.id, /^resp_/);
    assert.equal(r.status, 'incomplete');
    assert.deepEqual(r.incomplete_details, { reason: 'max_output_tokens' });
    assert.equal(r.instructions, 'Be brief.');
    assert.equal(r.output.length, 1);
    const m = r.output[0];
    assert.equal(m.type, 'message');
    assert.equal(m.role, 'assistant');
    assert.equal(m.content[0].type, 'output_text');
    assert.equal(r.output_text, m.content[0].text);
    assert.equal(r.usage.output_tokens, 8);
    assert.equal(r.usage.total_tokens, r.usage.input_tokens + 8);
    const chat = await client.chat.completions.create({
      model, messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Tell me a story.' }], max_tokens: 8, temperature: 0,
    });
    assert.equal(r.output_text, chat.choices[0].message.content);
    assert.equal(r.usage.input_tokens, chat.usage.prompt_tokens);
  });

  test('tools with tool_choice required: a function_call item whose arguments validate', T, async () => {
    for (const seed of [1, 2, 3]) {
      const r = await client.responses.create({ model, input: 'Weather?', tools, tool_choice: 'required', parallel_tool_calls: false, seed });
      assert.equal(r.status, 'completed');
      const calls = r.output.filter((o) => o.type === 'function_call');
      assert.equal(calls.length, 1, JSON.stringify(r.output));
      assert.equal(calls[0].name, 'get_weather');
      assert.match(calls[0].call_id, /^call_/);
      assert.ok(validate(weather, JSON.parse(calls[0].arguments)), calls[0].arguments);
    }
  });

  test('input items: a function_call and its function_call_output, then a named tool', T, async () => {
    const r = await client.responses.create({
      model,
      input: [
        { role: 'user', content: [{ type: 'input_text', text: 'Weather in Paris?' }] },
        { type: 'function_call', call_id: 'call_9', name: 'get_weather', arguments: '{"city": "Paris", "tomorrow": false}' },
        { type: 'function_call_output', call_id: 'call_9', output: '{"temperature": 21}' },
      ],
      tools,
      tool_choice: { type: 'function', name: 'get_weather' },
      seed: 4,
    });
    const call = r.output.find((o) => o.type === 'function_call');
    assert.ok(call && validate(weather, JSON.parse(call.arguments)));
  });

  test('text.format json_schema: the output text validates', T, async () => {
    const schema = { type: 'object', properties: { ok: { type: 'boolean' }, n: { enum: [1, 2, 3] } }, required: ['ok', 'n'], additionalProperties: false };
    const r = await client.responses.create({
      model, input: 'JSON please', text: { format: { type: 'json_schema', name: 'answer', schema, strict: true } }, seed: 5, max_output_tokens: 100,
    });
    assert.equal(r.status, 'completed');
    assert.ok(validate(schema, JSON.parse(r.output_text)), r.output_text);
    assert.equal(r.text.format.type, 'json_schema');
  });

  test('responses.stream: the documented event sequence and a final response equal to the events', T, async () => {
    const stream = client.responses.stream({ model, input: 'Weather?', tools, tool_choice: 'required', parallel_tool_calls: false, seed: 6 });
    const types = [];
    let seq = -1, args = '';
    for await (const e of stream) {
      types.push(e.type);
      assert.equal(e.sequence_number, seq + 1, 'sequence numbers grow by one');
      seq = e.sequence_number;
      if (e.type === 'response.function_call_arguments.delta') args += e.delta;
    }
    const final = await stream.finalResponse();
    assert.deepEqual(types.slice(0, 3), ['response.created', 'response.in_progress', 'response.output_item.added']);
    assert.equal(types.at(-1), 'response.completed');
    assert.ok(types.includes('response.function_call_arguments.delta'));
    assert.ok(types.indexOf('response.function_call_arguments.done') < types.indexOf('response.output_item.done'));
    const call = final.output.find((o) => o.type === 'function_call');
    assert.equal(call.arguments, args);
    assert.ok(validate(weather, JSON.parse(args)));
    assert.ok(final.usage.output_tokens > 0);

    const text = client.responses.stream({ model, input: 'Hello', max_output_tokens: 6, temperature: 0 });
    const ttypes = [];
    let deltas = '';
    for await (const e of text) {
      ttypes.push(e.type);
      if (e.type === 'response.output_text.delta') deltas += e.delta;
    }
    const tf = await text.finalResponse();
    assert.deepEqual(ttypes.slice(0, 4), ['response.created', 'response.in_progress', 'response.output_item.added', 'response.content_part.added']);
    for (const t of ['response.output_text.done', 'response.content_part.done', 'response.output_item.done']) assert.ok(ttypes.includes(t), t);
    assert.equal(ttypes.at(-1), 'response.incomplete');
    assert.equal(tf.output_text, deltas);
  });

  test('errors: no input, previous_response_id, built-in tools, bad items, bad schema', T, async () => {
    const bad = async (params, param) => {
      await assert.rejects(client.responses.create({ model, ...params }), (e) => {
        assert.equal(e.status, 400, String(e));
        assert.equal(e.error.type, 'invalid_request_error');
        if (param) assert.equal(e.param, param);
        return true;
      });
    };
    await bad({}, 'input');
    await bad({ input: 'x', previous_response_id: 'resp_1' }, 'previous_response_id');
    await bad({ input: 'x', tools: [{ type: 'web_search' }] }, 'tools');
    await bad({ input: [{ type: 'image', url: 'x' }] }, 'input');
    await bad({ input: [{ role: 'robot', content: 'x' }] }, 'input');
    await bad({ input: 'x', text: { format: { type: 'json_schema', name: 'a', schema: { type: 'object', properties: { a: { type: 'no-such-type' } } } } } }, 'text.format');
    await bad({ input: 'x', max_output_tokens: 100000 }, 'max_output_tokens');
  });
});
