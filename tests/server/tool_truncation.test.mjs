// A forced tool call (tool_choice required / named) cut off by max_tokens: never raw "<tool_call>" text as
// content. Cut inside the call's name: no call, empty content, finish_reason "length" and a pith_warning
// holding what was dropped; cut after the name: the call with its partial arguments and finish_reason
// "length". Streamed and whole responses agree.
import assert from 'node:assert/strict';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';

import { loadOpenAI, startServer, stopServer } from './helpers.mjs';

const T = { timeout: 60000 };
const here = path.dirname(fileURLToPath(import.meta.url));
let srv, client, model;

const tools = [
  { type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { enum: ['Paris', 'Rome'] } }, required: ['city'] } } },
];
const messages = [{ role: 'user', content: 'Weather in Paris?' }];

before(async () => {
  const OpenAI = await loadOpenAI();
  srv = await startServer(['--chat-template', path.join(here, 'templates', 'tools-short.jinja')]);
  client = new OpenAI({ apiKey: 'x', baseURL: `${srv.base}/v1`, maxRetries: 0, timeout: 20000 });
  model = (await client.models.list()).data[0].id;
});

after(async () => {
  if (srv) assert.equal(await stopServer(srv), 0, srv.log().slice(-3000));
});

async function streamed(params) {
  const stream = await client.chat.completions.create({ ...params, stream: true });
  let content = '', finish = null, warning;
  const calls = [];
  for await (const chunk of stream) {
    const c = chunk.choices[0];
    if (!c) continue;
    content += c.delta.content ?? '';
    for (const d of c.delta.tool_calls ?? []) {
      if (!calls[d.index]) calls[d.index] = { name: d.function.name, arguments: d.function.arguments ?? '' };
      else calls[d.index].arguments += d.function.arguments ?? '';
    }
    if (c.finish_reason) finish = c.finish_reason;
    if (c.pith_warning) warning = c.pith_warning;
  }
  return { content, calls, finish, warning };
}

describe('forced tool calls cut off by max_tokens', () => {
  for (const choice of ['required', { type: 'function', function: { name: 'get_weather' } }]) {
    test(`tool_choice ${JSON.stringify(choice)}: no raw marker text, the cut is said`, T, async () => {
      let sawDropped = false, sawPartial = false;
      for (const max_tokens of [1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64, 80]) {
        const params = { model, messages, tools, tool_choice: choice, max_tokens, temperature: 0, seed: 1 };
        const r = await client.chat.completions.create(params);
        const c = r.choices[0];
        const calls = c.message.tool_calls ?? [];
        if (c.finish_reason !== 'length') continue; /* the call fitted */
        assert.ok(!(c.message.content ?? '').includes('<tool_call'), `raw marker text as content: ${c.message.content}`);
        assert.ok((c.message.content ?? '') === '', `content ${JSON.stringify(c.message.content)}`);
        if (calls.length) {
          assert.equal(calls[0].function.name, 'get_weather');
          sawPartial = true;
        } else {
          sawDropped = true;
          assert.match(c.pith_warning ?? '', /cut off before a tool call's name was complete/);
        }
        const s = await streamed(params);
        assert.equal(s.finish, 'length');
        assert.equal(s.content, '');
        assert.deepEqual(s.calls.map((k) => [k.name, k.arguments]), calls.map((k) => [k.function.name, k.function.arguments]));
        assert.equal(s.warning, c.pith_warning);
      }
      assert.ok(sawDropped, 'some max_tokens cut inside the name');
      assert.ok(sawPartial, 'some max_tokens cut after the name');
    });
  }
});
