// RL serving through the official OpenAI Node SDK (docs/rl.md): vLLM's extra fields pass through the
// SDK's body (token-id prompts, return_token_ids, logprobs_mode), every response and streamed chunk
// carries the weight version, and reloads in each mode while SDK streams run lose no request and give
// each stream one version after its last restart chunk. tests/test_server_rl.py checks the numbers
// (prompt_logprobs against the float64 reference, processed logprobs, drain outputs against a fresh
// server, RSS while asleep) on random models.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { call, findModel, loadOpenAI, startServer, stopServer } from './helpers.mjs';

const T = { timeout: 60000 };
const ADMIN = 'admin-test';
let srv, client, model;

before(async () => {
  const OpenAI = await loadOpenAI();
  srv = await startServer(['--admin-key', ADMIN, '--weight-version', 'v0']);
  client = new OpenAI({ apiKey: 'none', baseURL: `${srv.base}/v1`, maxRetries: 0, timeout: 30000 });
  model = (await client.models.list()).data[0].id;
});

after(async () => {
  if (!srv) return;
  const code = await stopServer(srv);
  assert.equal(code, 0, `server exit status after SIGTERM:\n${srv.log().slice(-3000)}`);
});

// The weights file the server runs, to reload it under other version labels.
const modelPath = () => findModel().args[findModel().args.indexOf('-m') + 1];

// A streamed greedy completion through the SDK: { text, ids, versions after the last restart, restarts }.
async function streamed(prompt, max_tokens) {
  const stream = await client.completions.create({ model, prompt, max_tokens, temperature: 0, ignore_eos: true,
                                                   return_token_ids: true, stream: true });
  let text = '', ids = [], versions = new Set(), restarts = 0;
  for await (const chunk of stream) {
    const c = chunk.choices[0];
    if (c?.restarted) {
      text = '';
      ids = [];
      versions = new Set();
      restarts++;
    }
    versions.add(chunk.weight_version);
    assert.equal(chunk.system_fingerprint, `pith-${chunk.weight_version}`);
    if (c) {
      text += c.text;
      ids.push(...(c.token_ids ?? []));
    }
  }
  return { text, ids, versions, restarts };
}

describe('token ids and versions through the SDK', () => {
  test('a token-id prompt and return_token_ids round-trip, streamed as not', T, async () => {
    const prompt = [1, 100, 200, 300];
    const r = await client.completions.create({ model, prompt, max_tokens: 8, temperature: 0, ignore_eos: true,
                                                return_token_ids: true });
    assert.deepEqual(r.prompt_token_ids, prompt);
    assert.equal(r.choices[0].token_ids.length, 8);
    assert.equal(r.weight_version, 'v0');
    assert.equal(r.system_fingerprint, 'pith-v0');
    const s = await streamed(prompt, 8);
    assert.deepEqual(s.ids, r.choices[0].token_ids);
    assert.equal(s.text, r.choices[0].text);
    assert.deepEqual([...s.versions], ['v0']);
    const d = await call(srv, 'POST', '/detokenize', { body: { tokens: r.choices[0].token_ids } });
    assert.equal(d.body.prompt, r.choices[0].text.trimStart(), 'the ids decode to the text (a leading space is dropped at the start of a decode)');
  });

  test('chat prompt_token_ids and processed logprobs', T, async () => {
    const r = await client.chat.completions.create({ model, messages: [], prompt_token_ids: [1, 100, 200], max_tokens: 6,
                                                     temperature: 0.8, top_k: 5, seed: 7, logprobs: true, top_logprobs: 5,
                                                     logprobs_mode: 'processed_logprobs', return_token_ids: true });
    assert.deepEqual(r.prompt_token_ids, [1, 100, 200]);
    for (const t of r.choices[0].logprobs.content) {
      assert.ok(t.top_logprobs.length <= 5);
      const total = t.top_logprobs.reduce((a, x) => a + Math.exp(x.logprob), 0);
      assert.ok(Math.abs(total - 1) < 1e-4, `top_k 5: the 5 alternatives are the whole processed distribution (${total})`);
    }
  });
});

describe('reloads while SDK streams run', () => {
  test('each mode: nothing lost, one version per stream after its restarts', T, async () => {
    const results = [];
    let stop = false;
    const worker = async (i) => {
      for (let k = 0; !stop; k++) {
        try {
          results.push(await streamed([1, 50 + i, 60 + k], 40));
        } catch (e) {
          results.push({ error: e });
        }
      }
    };
    const workers = [0, 1, 2].map(worker);
    const modes = [['drain', 'v1'], ['recompute', 'v2'], ['abort', 'v3']];
    for (const [mode, version] of modes) {
      await new Promise((r) => setTimeout(r, 150));
      const r = await call(srv, 'POST', '/v1/admin/reload', { key: ADMIN, body: { path: modelPath(), mode, version } });
      assert.equal(r.status, 200, r.text);
      assert.equal(r.body.weight_version, version);
    }
    await new Promise((r) => setTimeout(r, 150));
    stop = true;
    await Promise.all(workers);
    const errors = results.filter((x) => x.error);
    for (const e of errors) assert.match(String(e.error), /abort/i, `only the abort reload fails requests: ${e.error}`);
    assert.ok(errors.length <= 3, `at most the three streams running at the abort fail (${errors.length})`);
    for (const x of results.filter((x) => !x.error)) {
      assert.equal(x.versions.size, 1, `one version per stream: ${[...x.versions]}`);
      if (x.restarts) assert.deepEqual([...x.versions], ['v2'], 'restarted streams run on the recompute reload\'s weights');
    }
    const m = await call(srv, 'GET', '/metrics');
    assert.match(m.text, /^pith_weight_version_info\{model_name="[^"]*",version="v3"\} 1$/m);
  });
});
