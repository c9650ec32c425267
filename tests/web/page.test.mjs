// The chat page `pith serve` answers GET / with (assets/web/index.html), in headless Chromium against a
// real server running the default model: a streamed reply with its tokens/s, the conversation kept
// across turns, a 401 that asks for the key (kept in localStorage), an API error shown with the input
// given back, and the layout checked by element boxes. Screenshots go to $PITH_TEST_TMP/web/.
import assert from 'node:assert/strict';
import { mkdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { startServer, stopServer } from '../server/helpers.mjs';
import { boxes, launchBrowser } from './helpers.mjs';

const DEFAULT_MODEL = { args: [] }; // no -m: the default model installed next to the binary
const KEY = 'sk-web-test';
const shots = path.join(process.env.PITH_TEST_TMP || '.', 'web');
mkdirSync(shots, { recursive: true });

let browser, open, keyed;
before(async () => {
  [browser, open, keyed] = await Promise.all([
    launchBrowser(),
    startServer(['--quiet'], { model: DEFAULT_MODEL }),
    startServer(['--quiet', '--api-key', KEY], { model: DEFAULT_MODEL }),
  ]);
});
after(async () => {
  await browser?.close();
  for (const s of [open, keyed]) if (s) assert.equal(await stopServer(s), 0);
});

// A fresh page (its own localStorage) on `srv`, recording the chat request bodies it sends.
async function newPage(srv, viewport = { width: 1000, height: 700 }) {
  const context = await browser.newContext({ viewport });
  const page = await context.newPage();
  const sent = [];
  page.on('request', (req) => {
    if (req.url().endsWith('/v1/chat/completions')) sent.push(JSON.parse(req.postData()));
  });
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));
  await page.goto(srv.base + '/');
  return { page, sent, errors, close: () => context.close() };
}

// Types `text`, presses Enter, and waits for assistant reply number `n` (1-based) to finish streaming.
async function say(page, text, n) {
  await page.fill('#input', text);
  const t0 = Date.now();
  await page.press('#input', 'Enter');
  const reply = page.locator('.msg.assistant').nth(n - 1);
  await reply.locator('.meta').waitFor();
  await page.waitForFunction((i) => {
    const el = document.querySelectorAll('.msg.assistant')[i];
    return el && !el.classList.contains('streaming') && !document.getElementById('send').disabled;
  }, n - 1);
  const elapsed = (Date.now() - t0) / 1000;
  return { elapsed, text: await reply.locator('.text').textContent(), meta: await reply.locator('.meta').textContent() };
}

const RATE = /^(\d+) tokens? · (\d+\.\d) tok\/s · first token \d+ ms/;

describe('web page', () => {
  test('GET / is the page from assets/web, as text/html, without a key', async () => {
    for (const srv of [open, keyed]) {
      const r = await fetch(srv.base + '/');
      assert.equal(r.status, 200);
      assert.match(r.headers.get('content-type'), /^text\/html; charset=utf-8$/);
      const want = readFileSync(path.join(process.env.PITH_SOURCE_DIR, 'assets', 'web', 'index.html'), 'utf8');
      assert.equal(await r.text(), want);
    }
    assert.equal((await fetch(open.base + '/', { method: 'POST' })).status, 405);
    assert.equal((await fetch(open.base + '/index')).status, 404);
  });

  test('a streamed reply with tokens/s, the conversation kept, and the layout', async () => {
    const { page, sent, errors, close } = await newPage(open);
    const streamed = [];
    page.on('response', (res) => {
      if (res.url().endsWith('/v1/chat/completions')) streamed.push(res.headers()['content-type']);
    });
    const models = await (await fetch(open.base + '/v1/models')).json();
    await page.locator('#model', { hasText: models.data[0].id }).waitFor();
    const maxTokens = Math.min(512, Math.floor(models.data[0].max_model_len / 4));
    assert.equal(await page.inputValue('#max-tokens'), String(maxTokens));

    const first = await say(page, 'And God said', 1);
    assert.ok(first.text.length > 0, 'the reply is empty');
    const m = first.meta.match(RATE);
    assert.ok(m, `no tokens/s in "${first.meta}"`);
    assert.ok(Number(m[1]) >= 1 && Number(m[1]) <= maxTokens, first.meta);
    // tokens / rate is the page's own measure of the request's time: within what the test waited.
    assert.ok(Number(m[2]) > 0 && Number(m[1]) / Number(m[2]) <= first.elapsed + 0.05, `${first.meta}, ${first.elapsed} s`);
    assert.deepEqual(streamed, ['text/event-stream']);
    assert.deepEqual(sent[0].messages, [{ role: 'user', content: 'And God said' }]);
    assert.equal(sent[0].stream, true);
    assert.equal(sent[0].max_tokens, maxTokens);

    // The second turn carries the first exchange, the reply exactly as shown.
    const second = await say(page, 'And the earth', 2);
    assert.ok(second.text.length > 0 && RATE.test(second.meta), second.meta);
    assert.deepEqual(sent[1].messages, [
      { role: 'user', content: 'And God said' },
      { role: 'assistant', content: first.text },
      { role: 'user', content: 'And the earth' },
    ]);
    assert.equal(await page.locator('.msg.user').count(), 2);
    assert.equal(await page.locator('.msg.error').count(), 0);

    await page.screenshot({ path: path.join(shots, 'chat.png') });
    const b = await boxes(page, ['header', '#log', '#composer', '#input', '#send', '.msg.user', '.msg.assistant',
      '.msg.assistant .text', '.msg.assistant .meta', '#new-chat', '#key-button']);
    const W = 1000, H = 700;
    // Header across the top, composer across the bottom, the conversation between them.
    assert.ok(b.header.y === 0 && b.header.width === W && b.header.height < 80, JSON.stringify(b.header));
    assert.ok(Math.abs(b['#composer'].bottom - H) <= 1 && b['#composer'].width === W, JSON.stringify(b['#composer']));
    assert.ok(b['#log'].y >= b.header.bottom - 1 && b['#log'].bottom <= b['#composer'].y + 1, JSON.stringify(b['#log']));
    assert.ok(b['#log'].height > H / 2, 'the conversation gets most of the height');
    // Input and Send on one row, Send to the right; the input takes most of the width.
    const mid = (x) => x.y + x.height / 2;
    assert.ok(Math.abs(mid(b['#input']) - mid(b['#send'])) < 8, 'input and Send are not on one row');
    assert.ok(b['#send'].x >= b['#input'].right && b['#input'].width > W * 0.6);
    // Header buttons on the right, on one row.
    assert.ok(b['#new-chat'].x > W / 2 && b['#key-button'].x > b['#new-chat'].x);
    assert.ok(Math.abs(mid(b['#new-chat']) - mid(b['#key-button'])) < 4);
    // The user's turn on the right, the assistant's on the left, its stats under its text.
    assert.ok(b['.msg.user'].right > W - 40 && b['.msg.user'].x > W * 0.15, JSON.stringify(b['.msg.user']));
    assert.ok(b['.msg.assistant'].x < 40, JSON.stringify(b['.msg.assistant']));
    assert.ok(b['.msg.assistant .meta'].y >= b['.msg.assistant .text'].bottom - 1);
    assert.ok(b['.msg.user'].bottom <= b['.msg.assistant'].y + 1, 'turns are in order, not overlapping');
    assert.ok(await page.evaluate(() => document.documentElement.scrollWidth <= innerWidth), 'horizontal overflow');

    // New chat forgets the conversation.
    await page.click('#new-chat');
    assert.equal(await page.locator('.msg').count(), 0);
    await say(page, 'In the beginning', 1);
    assert.equal(sent[2].messages.length, 1);
    assert.deepEqual(errors, []);
    await close();
  });

  test('a narrow screen keeps everything inside the width', async () => {
    const { page, close } = await newPage(open, { width: 380, height: 640 });
    await say(page, 'And God said', 1);
    await page.screenshot({ path: path.join(shots, 'chat-narrow.png') });
    const b = await boxes(page, ['header', '#composer', '#input', '#send', '.msg.assistant', '#key-button']);
    for (const [sel, x] of Object.entries(b)) assert.ok(x.x >= 0 && x.right <= 380 + 0.5, `${sel} ${JSON.stringify(x)}`);
    assert.ok(Math.abs(b['#composer'].bottom - 640) <= 1);
    assert.ok(await page.evaluate(() => document.documentElement.scrollWidth <= innerWidth), 'horizontal overflow');
    await close();
  });

  test('a 401 asks for the API key, which is kept in localStorage', async () => {
    const { page, sent, errors, close } = await newPage(keyed);
    assert.equal(await page.textContent('#model'), ''); // /v1/models said 401
    await page.fill('#input', 'And God said');
    await page.press('#input', 'Enter');
    await page.locator('#key-form').waitFor();
    assert.match(await page.textContent('#key-prompt'), /needs an API key/);
    assert.equal(await page.locator('.msg.assistant').count(), 0);

    await page.fill('#key-input', 'sk-wrong');
    await page.press('#key-input', 'Enter');
    await page.locator('#key-prompt', { hasText: 'refused' }).waitFor();
    await page.screenshot({ path: path.join(shots, 'key.png') });
    const b = await boxes(page, ['#key-form', '#key-input', '#key-save', '#composer']);
    assert.ok(b['#key-form'].bottom <= b['#composer'].y + 1 && b['#key-form'].width === 1000, 'key form above the composer');
    assert.ok(b['#key-save'].x >= b['#key-input'].right);

    await page.fill('#key-input', KEY);
    await page.press('#key-input', 'Enter');
    const reply = page.locator('.msg.assistant').first();
    await reply.locator('.meta').waitFor();
    await page.waitForFunction(() => !document.getElementById('send').disabled);
    assert.ok(RATE.test(await reply.locator('.meta').textContent()));
    assert.ok(await page.locator('#key-form').isHidden());
    assert.equal(await page.locator('.msg.user').count(), 1, 'the turn is sent again, not repeated');
    assert.equal(sent.length, 3);
    assert.equal(await page.evaluate(() => localStorage.getItem('pith.apiKey')), KEY);
    await page.locator('#model', { hasText: /./ }).waitFor();

    // After a reload the stored key is used at once.
    await page.reload();
    await page.locator('#model', { hasText: /./ }).waitFor();
    await say(page, 'And the earth', 1);
    assert.ok(await page.locator('#key-form').isHidden());
    assert.deepEqual(errors, []);
    await close();
  });

  test('SSE comments, CRLF lines and an error event inside the stream', async () => {
    const { page, close } = await newPage(open);
    const chunk = (delta, finish = null) =>
      'data: ' + JSON.stringify({ object: 'chat.completion.chunk', choices: [{ index: 0, delta, finish_reason: finish }] });
    await page.route('**/v1/chat/completions', (route) => route.fulfill({
      status: 200,
      contentType: 'text/event-stream',
      body: [': keep-alive', chunk({ role: 'assistant', content: '' }), chunk({ content: 'In the' }),
        chunk({ content: ' beginning' }),
        'data: {"error": {"message": "the server is shutting down", "type": "service_unavailable"}}', ''].join('\r\n\r\n'),
    }));
    await page.fill('#input', 'And God said');
    await page.press('#input', 'Enter');
    await page.locator('.msg.error').waitFor();
    assert.equal(await page.locator('.msg.assistant .text').textContent(), 'In the beginning');
    assert.match(await page.locator('.msg.assistant .meta').textContent(), /^2 tokens · \d+\.\d tok\/s/);
    assert.equal(await page.locator('.msg.error').textContent(), 'the server is shutting down');
    assert.ok(!(await page.locator('#send').isDisabled()));
    await close();
  });

  test('an attached image goes as an image_url part; refused here (no --mmproj), it comes back', async () => {
    const { page, sent, errors, close } = await newPage(open);
    await page.locator('#model', { hasText: /./ }).waitFor();
    // a 1x1 PNG
    const png = Buffer.from('iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==', 'base64');
    await page.setInputFiles('#attach', { name: 'dot.png', mimeType: 'image/png', buffer: png });
    await page.locator('#attached img').waitFor();
    await page.fill('#input', 'What is this?');
    await page.press('#input', 'Enter');
    const err = page.locator('.msg.error');
    await err.waitFor();
    const body = sent.at(-1);
    assert.deepEqual(body.messages.at(-1), {
      role: 'user',
      content: [{ type: 'image_url', image_url: { url: 'data:image/png;base64,' + png.toString('base64') } },
                { type: 'text', text: 'What is this?' }],
    });
    assert.match(await err.textContent(), /images need a vision model.*\(400\)/s);
    assert.equal(await page.inputValue('#input'), 'What is this?', 'the text comes back');
    assert.equal(await page.locator('#attached img').count(), 1, 'the image comes back');
    await page.locator('#attached img').click(); // removes it
    assert.equal(await page.locator('#attached img').count(), 0);
    await say(page, 'And God said', 1);
    assert.deepEqual(sent.at(-1).messages, [{ role: 'user', content: 'And God said' }]);
    assert.deepEqual(errors, []);
    await close();
  });

  test('an API error is shown, the message given back, the conversation unchanged', async () => {
    const { page, sent, close } = await newPage(open);
    await page.locator('#model', { hasText: /./ }).waitFor();
    const long = 'And God said, Let there be light. '.repeat(60); // far beyond the 256-token context
    await page.fill('#input', long);
    await page.press('#input', 'Enter');
    const err = page.locator('.msg.error');
    await err.waitFor();
    assert.match(await err.textContent(), /context length.*\(400\)\. Start a new chat/s);
    assert.equal(await page.inputValue('#input'), long);
    assert.equal(await page.locator('.msg.assistant').count(), 0);
    assert.equal(await page.locator('.msg.user').count(), 0, 'the failed turn is taken back');
    await page.screenshot({ path: path.join(shots, 'error.png') });

    await say(page, 'And God said', 1);
    assert.deepEqual(sent.at(-1).messages, [{ role: 'user', content: 'And God said' }]);
    await close();
  });
});
