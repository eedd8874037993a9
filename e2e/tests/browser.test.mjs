// The web page of `noetic serve` in headless Chromium (Debian's, or $CHROME_PATH), driven with
// playwright-core through the page's own data-testid attributes: threads, streamed answers, tool
// calls and approvals, a reload in the middle of a turn, steering and aborting.
//
// Slow, controllable turns come from a small OpenResponses model in this process (node:http): each
// request the server makes waits here until the test says what to stream, so "mid-turn" is a state
// the test holds, not a race it hopes to win. Run with `cargo xtask e2e`.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdir } from 'node:fs/promises';
import http from 'node:http';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { startServe } from '../lib/serve.mjs';

const FLOW = fileURLToPath(new URL('../../examples/workflows/researcher.json', import.meta.url));
const ARTIFACTS = fileURLToPath(new URL('../artifacts/', import.meta.url));
/// The bound of every wait on the page or on the model.
const WAIT_MS = 20_000;
const TEST_TIMEOUT_MS = 120_000;

let browser;

before(async () => {
  await mkdir(ARTIFACTS, { recursive: true });
  browser = await chromium.launch({
    executablePath: process.env.CHROME_PATH || '/usr/bin/chromium',
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--disable-background-networking',
      '--disable-component-update', '--disable-sync', '--disable-quic', '--no-first-run'],
    timeout: WAIT_MS,
  });
});

after(async () => {
  await browser?.close();
});

// ---- the model ---------------------------------------------------------------------------------

/// One request to the mock model: its body, and methods that stream the answer's SSE events (the
/// shapes the offline demo model sends) when the test calls them.
class ModelTurn {
  constructor(response, body, index) {
    this.response = response;
    this.body = body;
    this.index = index;
    this.sequence = 0;
    this.closed = new Promise((resolve) => response.on('close', resolve));
  }

  /// The texts of the user messages the request carries, in order.
  userTexts() {
    return (this.body.input || [])
      .filter((item) => item.role === 'user')
      .map((item) => (typeof item.content === 'string' ? item.content : item.content.map((part) => part.text || '').join('')));
  }

  send(event) {
    const data = { ...event, sequence_number: this.sequence++ };
    this.response.write(`event: ${event.type}\ndata: ${JSON.stringify(data)}\n\n`);
  }

  created() {
    this.send({ type: 'response.created', response: { id: `resp_mock_${this.index}`, model: 'mock', status: 'in_progress', output: [], usage: null } });
  }

  startText() {
    this.itemId = `msg_mock_${this.index}`;
    this.text = '';
    this.send({ type: 'response.output_item.added', output_index: 0, item: { type: 'message', id: this.itemId, role: 'assistant', status: 'in_progress', content: [] } });
    this.send({ type: 'response.content_part.added', output_index: 0, item_id: this.itemId, content_index: 0, part: { type: 'output_text', text: '', annotations: [] } });
  }

  delta(...pieces) {
    for (const delta of pieces) {
      this.text += delta;
      this.send({ type: 'response.output_text.delta', output_index: 0, item_id: this.itemId, content_index: 0, delta });
    }
  }

  finishText() {
    this.send({ type: 'response.output_text.done', output_index: 0, item_id: this.itemId, content_index: 0, text: this.text });
    this.complete({ type: 'message', id: this.itemId, role: 'assistant', status: 'completed', content: [{ type: 'output_text', text: this.text, annotations: [] }] });
  }

  callTool(name, args) {
    const id = `fc_mock_${this.index}`;
    const callId = `call_mock_${this.index}`;
    const argumentsText = JSON.stringify(args);
    this.send({ type: 'response.output_item.added', output_index: 0, item: { type: 'function_call', id, call_id: callId, name, arguments: '', status: 'in_progress' } });
    this.send({ type: 'response.function_call_arguments.delta', output_index: 0, item_id: id, delta: argumentsText });
    this.send({ type: 'response.function_call_arguments.done', output_index: 0, item_id: id, arguments: argumentsText });
    this.complete({ type: 'function_call', id, call_id: callId, name, arguments: argumentsText, status: 'completed' });
  }

  complete(item) {
    this.send({ type: 'response.output_item.done', output_index: 0, item });
    this.send({
      type: 'response.completed',
      response: {
        id: `resp_mock_${this.index}`, model: 'mock', status: 'completed', output: [item],
        usage: { input_tokens: 100, output_tokens: 10, total_tokens: 110, cost: 0.0015, input_tokens_details: { cached_tokens: 0 }, output_tokens_details: { reasoning_tokens: 0 } },
      },
    });
    this.response.end();
  }
}

/// An OpenResponses server on 127.0.0.1 whose requests the test takes one by one with `next()`.
async function startModel() {
  const arrived = [];
  const waiting = [];
  const open = new Set();
  let count = 0;
  const server = http.createServer((request, response) => {
    let body = '';
    request.setEncoding('utf8');
    request.on('data', (chunk) => { body += chunk; });
    request.on('end', () => {
      if (request.method !== 'POST' || !request.url.endsWith('/responses')) {
        response.writeHead(404, { 'content-type': 'application/json' });
        response.end(JSON.stringify({ error: { message: `no route ${request.method} ${request.url}` } }));
        return;
      }
      response.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
      response.flushHeaders();
      open.add(response);
      response.on('close', () => open.delete(response));
      const turn = new ModelTurn(response, JSON.parse(body), count++);
      const waiter = waiting.shift();
      if (waiter) waiter(turn); else arrived.push(turn);
    });
  });
  await new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', resolve);
  });
  return {
    baseUrl: `http://127.0.0.1:${server.address().port}/v1`,
    /// The next request the server makes (bounded).
    next() {
      if (arrived.length) return Promise.resolve(arrived.shift());
      return new Promise((resolve, reject) => {
        const timer = setTimeout(() => {
          waiting.splice(waiting.indexOf(take), 1);
          reject(new Error(`no model request within ${WAIT_MS} ms`));
        }, WAIT_MS);
        const take = (turn) => { clearTimeout(timer); resolve(turn); };
        waiting.push(take);
      });
    },
    async close() {
      for (const response of open) response.destroy();
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

// ---- the page ----------------------------------------------------------------------------------

/// Runs `body` on a fresh page (a new browser context: empty storage), with a screenshot and the
/// server's log when it fails; the page must raise no script error and break no CSP rule.
async function onPage(name, server, body) {
  const context = await browser.newContext();
  const page = await context.newPage();
  page.setDefaultTimeout(WAIT_MS);
  const problems = [];
  page.on('pageerror', (error) => problems.push(`script error: ${error.message}`));
  page.on('console', (message) => {
    if (message.type() === 'error' && /Content Security Policy|Refused to/i.test(message.text())) problems.push(`console: ${message.text()}`);
  });
  try {
    await body(page);
    assert.deepEqual(problems, [], 'the page raised errors');
  } catch (error) {
    await page.screenshot({ path: `${ARTIFACTS}${name}-failure.png`, fullPage: true }).catch(() => {});
    error.message += `\n--- page problems ---\n${problems.join('\n')}\n--- noetic serve stderr ---\n${server.stderr()}`;
    throw error;
  } finally {
    await context.close();
  }
}

/// Waits until `predicate(arg)` holds in the page; on timeout, says what was awaited and what the
/// page showed.
async function until(page, what, predicate, arg) {
  try {
    await page.waitForFunction(predicate, arg, { timeout: WAIT_MS });
  } catch (error) {
    const shown = await page.evaluate(() => document.querySelector('main')?.innerText).catch(() => '?');
    throw new Error(`waiting for ${what}: ${error.message.split('\n')[0]}\n--- the page shows ---\n${shown}`);
  }
}

/// The texts of the transcript's messages of `role` (run in the page).
function messageTexts(role) {
  return [...document.querySelectorAll(`[data-testid="message"][data-role="${role}"] [data-testid="message-text"]`)]
    .map((node) => node.textContent);
}

/// Waits until the transcript's `role` messages are exactly `expected` (each once, in order).
async function untilMessages(page, role, expected) {
  await until(page, `the ${role} messages ${JSON.stringify(expected)}`, ({ role, expected }) => {
    const texts = [...document.querySelectorAll(`[data-testid="message"][data-role="${role}"] [data-testid="message-text"]`)]
      .map((node) => node.textContent);
    return JSON.stringify(texts) === JSON.stringify(expected);
  }, { role, expected });
}

/// `promise`, or a failure naming `what` after the wait bound.
async function within(promise, what) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: not within ${WAIT_MS} ms`)), WAIT_MS);
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

async function untilText(page, testid, expected) {
  await until(page, `${testid} to read ${JSON.stringify(expected)}`, ({ testid, expected }) =>
    document.querySelector(`[data-testid="${testid}"]`)?.textContent === expected, { testid, expected });
}

async function untilMatch(page, testid, pattern) {
  await until(page, `${testid} to match ${pattern}`, ({ testid, source, flags }) =>
    new RegExp(source, flags).test(document.querySelector(`[data-testid="${testid}"]`)?.textContent ?? ''),
  { testid, source: pattern.source, flags: pattern.flags });
}

/// Waits until `selector` matches exactly `expected` elements.
async function untilCount(page, selector, expected) {
  await until(page, `${expected} × ${selector}`, ({ selector, expected }) =>
    document.querySelectorAll(selector).length === expected, { selector, expected });
}

/// Creates a thread with the page's button; returns its id (from the URL, which keeps it).
async function newThread(page) {
  const before = new URL(page.url()).searchParams.get('thread');
  await page.getByTestId('new-thread').click();
  await page.waitForURL((address) => ![null, before].includes(address.searchParams.get('thread')));
  const threadId = new URL(page.url()).searchParams.get('thread');
  await untilText(page, 'connection', 'live');
  assert.equal(await page.getByTestId('thread-select').inputValue(), threadId);
  return threadId;
}

async function send(page, text, delivery = 'next-turn') {
  await page.getByTestId('delivery').selectOption(delivery);
  await page.getByTestId('message-input').fill(text);
  await page.getByTestId('send').click();
  // The box empties once the server took the message.
  await until(page, `the message ${JSON.stringify(text)} to be sent`, () =>
    document.querySelector('[data-testid="message-input"]').value === '' && !document.querySelector('[data-testid="send"]').disabled);
}

// ---- the tests ---------------------------------------------------------------------------------

test('chat on a fresh page: an unknown thread said so, a new thread, an approval asked and given (kept over a reload), the tool output and the streamed answer, usage; the token from the URL fragment', { timeout: TEST_TIMEOUT_MS }, async () => {
  const token = randomBytes(24).toString('hex');
  const server = await startServe(['serve', FLOW, '--needs-approval', 'echo'], { env: { NOETIC_SERVE_TOKEN: token } });
  try {
    await onPage('chat', server, async (page) => {
      // A thread this server does not know (one of an earlier run, say) is said so, and forgotten.
      await page.goto(`${server.url}?thread=gone#token=${token}`);
      assert.equal(new URL(page.url()).hash, '', 'the page takes the token out of its address');
      await untilMatch(page, 'notice', /^There is no thread gone on this server/);
      assert.equal(await page.evaluate(() => localStorage.getItem('noetic.threads')), '[]');

      const threadId = await newThread(page);
      await untilText(page, 'notice', '');

      await send(page, 'hello browser');
      await page.getByTestId('approval').waitFor();
      assert.equal(await page.getByTestId('approval-tool').textContent(), 'echo');
      assert.match(await page.getByTestId('approval-arguments').textContent(), /"text": "hello browser"/);
      await untilText(page, 'status', 'awaiting_approval');
      await untilMessages(page, 'user', ['hello browser']);

      // A reload while the call waits: the thread, its message, its call and the one approval come back.
      await page.reload();
      assert.equal(new URL(page.url()).searchParams.get('thread'), threadId);
      await untilText(page, 'connection', 'live');
      await untilText(page, 'status', 'awaiting_approval');
      await untilMessages(page, 'user', ['hello browser']);
      await untilCount(page, '[data-testid="approval"]', 1);
      await untilCount(page, '[data-testid="tool-call"]', 1);

      await page.getByTestId('approve').click();
      const answer = '(offline demo model) Here is what the tools returned: hello browser';
      await untilMessages(page, 'assistant', [answer]);
      await untilText(page, 'status', 'idle');
      await untilText(page, 'tool-output', 'hello browser');
      await untilText(page, 'tool-state', 'done');
      await untilCount(page, '[data-testid="approval"]', 0);
      await untilMatch(page, 'usage-thread', /^in [1-9]\d* · out [1-9]\d* tokens/);
      await untilMatch(page, 'usage-turn', /^in [1-9]\d* · out [1-9]\d* tokens/);
      assert.equal(await page.getByTestId('notice').textContent(), '');
      const listed = await page.getByTestId('thread-select').locator('option').allTextContents();
      assert.ok(listed.includes(threadId), `the thread list ${JSON.stringify(listed)} has ${threadId}`);
      await page.screenshot({ path: `${ARTIFACTS}browser-chat.png`, fullPage: true });
    });
  } finally {
    await server.stop();
  }
});

test('a reload in the middle of a streamed answer resumes it without a gap or a duplicate', { timeout: TEST_TIMEOUT_MS }, async () => {
  const model = await startModel();
  const server = await startServe(['serve', FLOW, '--provider', 'responses', '--base-url', model.baseUrl, '--model', 'm']);
  try {
    await onPage('reload', server, async (page) => {
      await page.goto(server.url);
      await newThread(page);
      await send(page, 'tell me a story');

      const turn = await model.next();
      assert.deepEqual(turn.userTexts(), ['tell me a story']);
      const pieces = 'Once upon a time a small agent streamed its answer word by word to a page that kept reloading.'
        .split(/(?<= )/);
      const upTo = (n) => pieces.slice(0, n).join('');
      turn.created();
      turn.startText();
      turn.delta(...pieces.slice(0, 5));
      await untilMessages(page, 'assistant', [upTo(5)]);
      assert.equal(await page.getByTestId('message').last().getAttribute('data-streaming'), 'true');
      await untilText(page, 'status', 'running');

      // More of the answer streams while the page reloads: whether a piece lands before the new
      // page subscribes (replayed) or after (live), it shows once.
      const reloading = page.reload();
      turn.delta(...pieces.slice(5, 9));
      await reloading;
      await untilMessages(page, 'assistant', [upTo(9)]);
      await untilMessages(page, 'user', ['tell me a story']);

      turn.delta(...pieces.slice(9));
      await untilMessages(page, 'assistant', [upTo(pieces.length)]);
      assert.equal(await page.getByTestId('message').last().getAttribute('data-streaming'), 'true');

      turn.finishText();
      await untilText(page, 'status', 'idle');
      await untilMessages(page, 'assistant', [upTo(pieces.length)]);
      await untilMessages(page, 'user', ['tell me a story']);
      await untilText(page, 'usage-turn', 'in 100 · out 10 tokens · $0.001500');
      await untilMatch(page, 'usage-thread', /^in 100 · out 10 tokens/);

      // And from the history alone, after the turn.
      await page.reload();
      await untilText(page, 'connection', 'live');
      await untilMessages(page, 'assistant', [upTo(pieces.length)]);
      await untilMessages(page, 'user', ['tell me a story']);
      await page.screenshot({ path: `${ARTIFACTS}browser-reload.png`, fullPage: true });
    });
  } finally {
    await server.stop();
    await model.close();
  }
});

test('steering a running turn between rounds, then aborting a turn with a drain', { timeout: TEST_TIMEOUT_MS }, async () => {
  const model = await startModel();
  const server = await startServe(['serve', FLOW, '--provider', 'responses', '--base-url', model.baseUrl, '--model', 'm']);
  try {
    await onPage('steer-abort', server, async (page) => {
      await page.goto(server.url);
      await newThread(page);
      await send(page, 'first question');

      // The steer arrives while the first model round is still streaming.
      const first = await model.next();
      first.created();
      await untilText(page, 'status', 'running');
      await send(page, 'also mention cats', 'between-rounds');
      first.callTool('echo', { text: 'first question' });

      const second = await model.next();
      assert.deepEqual(second.userTexts(), ['first question', 'also mention cats'], 'the steer reaches the next round');
      second.created();
      second.startText();
      second.delta('Cats ', 'noted.');
      second.finishText();
      await untilText(page, 'status', 'idle');
      await untilMessages(page, 'user', ['first question', 'also mention cats']);
      await untilMessages(page, 'assistant', ['Cats noted.']);
      await untilText(page, 'tool-output', 'first question');

      // Abort with a drain: the model round in flight may finish (here: it asks for a tool), then
      // the turn ends as aborted instead of going on to run it.
      await send(page, 'second question');
      const third = await model.next();
      third.created();
      await untilText(page, 'status', 'running');
      await page.getByTestId('drain-ms').fill('15000');
      await page.getByTestId('abort').click();
      await untilText(page, 'status', 'draining');
      third.callTool('echo', { text: 'second question' });
      await untilText(page, 'status', 'idle');
      await untilMatch(page, 'notice', /^Turn aborted: /);
      await untilMessages(page, 'user', ['first question', 'also mention cats', 'second question']);
      await untilMessages(page, 'assistant', ['Cats noted.']);
      await untilCount(page, '[data-testid="tool-call"]', 2);

      // Abort without a drain: the model's stream is cut.
      await send(page, 'third question');
      const fourth = await model.next();
      fourth.created();
      await untilText(page, 'status', 'running');
      await page.getByTestId('drain-ms').fill('');
      await page.getByTestId('abort').click();
      await untilText(page, 'status', 'idle');
      await within(fourth.closed, 'the aborted round\'s stream to be closed');
      await page.screenshot({ path: `${ARTIFACTS}browser-steer-abort.png`, fullPage: true });
    });
  } finally {
    await server.stop();
    await model.close();
  }
});
