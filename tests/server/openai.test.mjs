// `pith serve` through the official OpenAI Node SDK: completions and chat, streaming and not, usage,
// stop strings, seeds, logprobs, concurrency, and cancellation of an aborted stream.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { call, idleMetrics, LONG_TOKENS, loadOpenAI, metric, sleep, startServer, stopServer } from './helpers.mjs';

const T = { timeout: 30000 };
let srv, client, model;

before(async () => {
  const OpenAI = await loadOpenAI();
  srv = await startServer(['--api-key', 'sk-test']);
  client = new OpenAI({ apiKey: 'sk-test', baseURL: `${srv.base}/v1`, maxRetries: 0, timeout: 20000 });
  model = (await client.models.list()).data[0].id;
});

after(async () => {
  if (!srv) return;
  const code = await stopServer(srv);
  // A sanitizer build reports leaks through a non-zero exit status.
  assert.equal(code, 0, `server exit status after SIGTERM:\n${srv.log().slice(-3000)}`);
});

// Usage without prompt_tokens_details: cached_tokens depends on what earlier requests left in the
// prefix cache.
const counts = (u) => ({ prompt_tokens: u.prompt_tokens, completion_tokens: u.completion_tokens, total_tokens: u.total_tokens });

async function tokenCount(text) {
  const r = await call(srv, 'POST', '/tokenize', { key: 'sk-test', body: { prompt: text } });
  assert.equal(r.status, 200);
  assert.equal(r.body.count, r.body.tokens.length);
  return r.body.count;
}

async function streamCompletion(params) {
  const stream = await client.completions.create({ ...params, stream: true, stream_options: { include_usage: true } });
  const texts = [], finishes = [];
  let usage = null, usageChunks = 0, afterUsage = 0;
  for await (const chunk of stream) {
    if (usage) afterUsage++;
    if (chunk.usage) {
      usage = chunk.usage;
      usageChunks++;
      assert.deepEqual(chunk.choices, []);
      continue;
    }
    assert.equal(chunk.object, 'text_completion');
    for (const c of chunk.choices) {
      texts[c.index] = (texts[c.index] ?? '') + c.text;
      if (c.finish_reason) finishes[c.index] = c.finish_reason;
    }
  }
  assert.equal(usageChunks, 1, 'exactly one usage chunk');
  assert.equal(afterUsage, 0, 'the usage chunk comes last');
  return { texts, finishes, usage };
}

async function streamChat(params) {
  const stream = await client.chat.completions.create({ ...params, stream: true, stream_options: { include_usage: true } });
  let text = '', finish = null, usage = null, first = true;
  for await (const chunk of stream) {
    if (chunk.usage) {
      usage = chunk.usage;
      continue;
    }
    assert.equal(chunk.object, 'chat.completion.chunk');
    const c = chunk.choices[0];
    if (first) assert.equal(c.delta.role, 'assistant', 'the first chunk carries the role');
    first = false;
    text += c.delta.content ?? '';
    if (c.finish_reason) finish = c.finish_reason;
  }
  return { text, finish, usage };
}

describe('completions', () => {
  test('non-streaming greedy: text, finish_reason and exact usage', T, async () => {
    const prompt = 'Once upon a time';
    const r = await client.completions.create({ model, prompt, max_tokens: 24, temperature: 0, ignore_eos: true });
    assert.equal(r.object, 'text_completion');
    assert.equal(r.model, model);
    assert.equal(r.choices.length, 1);
    assert.ok(r.choices[0].text.length > 0);
    assert.equal(r.choices[0].finish_reason, 'length');
    assert.equal(r.usage.prompt_tokens, await tokenCount(prompt));
    assert.equal(r.usage.completion_tokens, 24);
    assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + 24);
  });

  test('streaming text and usage equal non-streaming for greedy', T, async () => {
    for (const prompt of ['Once upon a time', 'The little dog', 'Lily and Tom went']) {
      const params = { model, prompt, max_tokens: 60, temperature: 0 };
      const full = await client.completions.create(params);
      const s = await streamCompletion(params);
      assert.equal(s.texts[0], full.choices[0].text);
      assert.equal(s.finishes[0], full.choices[0].finish_reason);
      assert.deepEqual(counts(s.usage), counts(full.usage));
      assert.equal(s.usage.prompt_tokens, await tokenCount(prompt));
    }
  });

  test('usage counts every sampled token, stopping at EOS or not', T, async () => {
    // Long enough that this tiny story model ends its story (EOS) before max_tokens.
    const max = Math.min(400, LONG_TOKENS);
    const r = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: max, temperature: 0, logprobs: 0 });
    const lp = r.choices[0].logprobs;
    assert.equal(lp.tokens.length, r.usage.completion_tokens, 'one logprob entry per sampled token');
    if (r.choices[0].finish_reason === 'stop') assert.ok(r.usage.completion_tokens < max);
    else assert.equal(r.usage.completion_tokens, max);
  });

  test('stop strings end the text before the match, streaming or not', T, async () => {
    const params = { model, prompt: 'Once upon a time', max_tokens: 60, temperature: 0 };
    const full = (await client.completions.create(params)).choices[0].text;
    // A word from the middle of the greedy text.
    const words = full.split(' ').filter((w) => w.length >= 3);
    const word = words[Math.floor(words.length / 2)];
    const at = full.indexOf(word);
    assert.ok(at > 0, `'${word}' in '${full}'`);
    const cut = await client.completions.create({ ...params, stop: [word, 'zzzzqq'] });
    assert.equal(cut.choices[0].text, full.slice(0, at));
    assert.equal(cut.choices[0].finish_reason, 'stop');
    const s = await streamCompletion({ ...params, stop: word });
    assert.equal(s.texts[0], full.slice(0, at));
    assert.equal(s.finishes[0], 'stop');
    assert.deepEqual(counts(s.usage), counts(cut.usage));
  });

  test('the same seed gives the same text; other seeds differ', T, async () => {
    const params = { model, prompt: 'One day', max_tokens: 48, temperature: 1, ignore_eos: true };
    const a = await client.completions.create({ ...params, seed: 1234 });
    const b = await client.completions.create({ ...params, seed: 1234 });
    assert.equal(a.choices[0].text, b.choices[0].text);
    const s = await streamCompletion({ ...params, seed: 1234 });
    assert.equal(s.texts[0], a.choices[0].text);
    const others = new Set();
    for (const seed of [1, 2, 3]) others.add((await client.completions.create({ ...params, seed })).choices[0].text);
    assert.ok(others.size > 1 || !others.has(a.choices[0].text), 'different seeds should not all agree');
  });

  test('n choices, several prompts and token-id prompts', T, async () => {
    const r = await client.completions.create({ model, prompt: ['Once upon a time', 'The cat'], n: 2, max_tokens: 8, temperature: 1, seed: 7, ignore_eos: true });
    assert.equal(r.choices.length, 4);
    assert.deepEqual(r.choices.map((c) => c.index), [0, 1, 2, 3]);
    const single = [await tokenCount('Once upon a time'), await tokenCount('The cat')];
    assert.equal(r.usage.prompt_tokens, single[0] + single[1], 'each prompt counted once');
    assert.equal(r.usage.completion_tokens, 4 * 8);
    assert.notEqual(r.choices[0].text, r.choices[1].text, 'choices of one prompt draw differently');
    const ids = (await call(srv, 'POST', '/tokenize', { key: 'sk-test', body: { prompt: 'Once upon a time' } })).body.tokens;
    const byIds = await client.completions.create({ model, prompt: ids, max_tokens: 12, temperature: 0 });
    const byText = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 12, temperature: 0 });
    assert.equal(byIds.choices[0].text, byText.choices[0].text);
    const back = await call(srv, 'POST', '/detokenize', { key: 'sk-test', body: { tokens: ids } });
    assert.equal(back.body.prompt, 'Once upon a time');
  });

  test('logprobs: one entry per token, top alternatives sorted, the sampled one first when greedy', T, async () => {
    const r = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 6, temperature: 0, logprobs: 3, ignore_eos: true });
    const lp = r.choices[0].logprobs;
    assert.equal(lp.tokens.length, 6);
    assert.equal(lp.token_logprobs.length, 6);
    assert.equal(lp.top_logprobs.length, 6);
    assert.equal(lp.tokens.join(''), r.choices[0].text);
    for (let i = 0; i < 6; i++) {
      const top = Object.values(lp.top_logprobs[i]);
      assert.ok(top.length >= 1 && top.length <= 3);
      assert.ok(lp.token_logprobs[i] <= 0);
      assert.equal(Math.max(...top), lp.token_logprobs[i], 'greedy picks the most likely token');
    }
    assert.deepEqual(lp.text_offset, lp.tokens.map((_, i) => lp.tokens.slice(0, i).join('').length));
  });
});

describe('chat', () => {
  const messages = [
    { role: 'system', content: 'You tell short stories.' },
    { role: 'user', content: 'Tell me about a cat.' },
  ];

  test('non-streaming and streaming give the same text and usage', T, async () => {
    const params = { model, messages, max_tokens: 40, temperature: 0 };
    const full = await client.chat.completions.create(params);
    assert.equal(full.object, 'chat.completion');
    assert.equal(full.choices[0].message.role, 'assistant');
    assert.equal(typeof full.choices[0].message.content, 'string');
    const s = await streamChat(params);
    assert.equal(s.text, full.choices[0].message.content);
    assert.equal(s.finish, full.choices[0].finish_reason);
    assert.deepEqual(counts(s.usage), counts(full.usage));
    const tok = await call(srv, 'POST', '/tokenize', { key: 'sk-test', body: { messages } });
    assert.equal(full.usage.prompt_tokens, tok.body.count);
  });

  test('max_completion_tokens, content parts and logprobs', T, async () => {
    const r = await client.chat.completions.create({
      model,
      messages: [{ role: 'user', content: [{ type: 'text', text: 'Hello' }] }],
      max_completion_tokens: 5,
      temperature: 0,
      logprobs: true,
      top_logprobs: 2,
      ignore_eos: true,
    });
    assert.equal(r.usage.completion_tokens, 5);
    const content = r.choices[0].logprobs.content;
    assert.equal(content.length, 5);
    for (const e of content) {
      assert.equal(e.top_logprobs.length, 2);
      assert.equal(e.top_logprobs[0].logprob, e.logprob);
      assert.deepEqual(e.bytes, [...Buffer.from(e.token)]);
    }
  });
});

describe('load', () => {
  test('16 concurrent streams give the same text as one at a time', T, async () => {
    const prompts = Array.from({ length: 16 }, (_, i) => `Story ${i}: once there was a`);
    const one = [];
    for (const prompt of prompts)
      one.push((await client.completions.create({ model, prompt, max_tokens: 40, temperature: 0 })).choices[0].text);
    const all = await Promise.all(prompts.map((prompt) => streamCompletion({ model, prompt, max_tokens: 40, temperature: 0 })));
    assert.deepEqual(all.map((s) => s.texts[0]), one);
  });

  test('an aborted stream is cancelled: 0 running requests and 0 blocks in use', T, async () => {
    const before = await (await fetch(`${srv.base}/metrics`, { headers: { authorization: 'Bearer sk-test' } })).text();
    const ac = new AbortController();
    const stream = await client.completions.create(
      { model, prompt: 'Once upon a time', max_tokens: LONG_TOKENS, temperature: 0, ignore_eos: true, n: 4, stream: true },
      { signal: ac.signal },
    );
    let chunks = 0;
    try {
      for await (const _ of stream) {
        if (++chunks === 3) {
          ac.abort();
          break;
        }
      }
    } catch (e) {
      assert.ok(e.name === 'AbortError' || /abort/i.test(e.constructor.name), `unexpected error ${e}`);
    }
    assert.equal(chunks, 3);
    const label = 'finish_reason="cancelled"';
    const cancelled = (t) => metric(t, 'pith_request_success_total', label);
    const text = await idleMetrics(srv, 'sk-test', 3000, (t) => cancelled(t) - cancelled(before) === 4);
    assert.equal(cancelled(text) - cancelled(before), 4, 'all 4 choices were cancelled, not run to the end');
    // The server keeps serving.
    const r = await client.completions.create({ model, prompt: 'Hi', max_tokens: 4, temperature: 0 });
    assert.equal(r.choices.length, 1);
  });

  test('an aborted non-streaming request is cancelled too', T, async () => {
    const label = 'finish_reason="cancelled"';
    const getMetrics = async () => (await call(srv, 'GET', '/metrics', { key: 'sk-test' })).text;
    const before = metric(await getMetrics(), 'pith_request_success_total', label);
    const ac = new AbortController();
    const pending = client.completions.create(
      { model, prompt: 'Once upon a time', max_tokens: LONG_TOKENS, temperature: 0, ignore_eos: true, n: 8 },
      { signal: ac.signal },
    );
    pending.catch(() => {});
    // Abort once the engine runs it.
    const until = Date.now() + 5000;
    while (!(metric(await getMetrics(), 'pith_requests_running') > 0)) {
      assert.ok(Date.now() < until, 'the request never started');
      await sleep(2);
    }
    ac.abort();
    await assert.rejects(pending);
    const count = (t) => metric(t, 'pith_request_success_total', label) - before;
    const text = await idleMetrics(srv, 'sk-test', 3000, (t) => count(t) === 8);
    assert.equal(count(text), 8, 'all 8 choices cancelled');
  });
});
