// The AI SDK UI message stream of `noetic serve`, read by the `ai` package itself (v6, as pinned):
// its chunk schema, its `readUIMessageStream`, and its `AbstractChat` (what `useChat` runs) with
// `DefaultChatTransport`, tool approvals answered through `addToolApprovalResponse`, and resume.
//
// The server runs researcher.json on the offline demo model: it calls the `echo` tool once, then
// answers in text built from the tool's output.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { fileURLToPath } from 'node:url';
import {
  AbstractChat,
  DefaultChatTransport,
  lastAssistantMessageIsCompleteWithApprovalResponses,
  readUIMessageStream,
  uiMessageChunkSchema,
} from 'ai';
import { startServe } from '../lib/serve.mjs';

const FLOW = fileURLToPath(new URL('../../examples/workflows/researcher.json', import.meta.url));
// Only a guard against hangs: every wait is for something the test caused.
const WAIT_MS = 20_000;

function bounded(what, promise) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out waiting for ${what}`)), WAIT_MS);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

async function withServer(args, body) {
  const server = await startServe(['serve', FLOW, ...args]);
  try {
    await body(server);
  } finally {
    await server.stop();
  }
}

// A chat as `useChat` keeps it, without React: the state is plain arrays.
class TestChat extends AbstractChat {
  constructor(init) {
    const state = {
      status: 'ready',
      error: undefined,
      messages: [],
      pushMessage(message) {
        this.messages = [...this.messages, structuredClone(message)];
      },
      popMessage() {
        this.messages = this.messages.slice(0, -1);
      },
      replaceMessage(index, message) {
        this.messages = this.messages.map((old, i) => (i === index ? structuredClone(message) : old));
      },
      snapshot: (thing) => structuredClone(thing),
    };
    super({ ...init, state });
  }
}

// A chat whose responses are awaited one by one (`finished()` resolves at each response's end).
function chatOn(server, id) {
  const finishes = [];
  const waiters = [];
  const data = [];
  const chat = new TestChat({
    id,
    transport: new DefaultChatTransport({ api: `${server.url}v1/ai-sdk/chat` }),
    sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
    onFinish: (finish) => {
      const waiter = waiters.shift();
      if (waiter) waiter(finish);
      else finishes.push(finish);
    },
    onData: (part) => data.push(part),
  });
  chat.finished = () =>
    bounded('a response to finish', finishes.length > 0 ? Promise.resolve(finishes.shift()) : new Promise((resolve) => waiters.push(resolve)));
  chat.data = data;
  return chat;
}

function toolParts(message) {
  return message.parts.filter((part) => part.type === 'tool-echo');
}

function text(message) {
  return message.parts.filter((part) => part.type === 'text').map((part) => part.text).join('');
}

test('a tool-and-text turn is valid v6 chunks that assemble into one UIMessage', async () => {
  await withServer([], async (server) => {
    // What DefaultChatTransport posts: the whole history; the server takes the last message.
    const response = await bounded('the response', fetch(`${server.url}v1/ai-sdk/chat`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        id: 'wire',
        messages: [{ id: 'u1', role: 'user', parts: [{ type: 'text', text: 'tell me about otters' }] }],
        trigger: 'submit-message',
        messageId: undefined,
      }),
    }));
    assert.equal(response.status, 200);
    assert.equal(response.headers.get('x-vercel-ai-ui-message-stream'), 'v1');
    assert.equal(response.headers.get('content-type'), 'text/event-stream');
    const raw = await bounded('the body', response.text());
    const frames = raw.split('\n\n').filter((frame) => frame !== '' && !frame.startsWith(':'));
    assert.equal(frames.at(-1), 'data: [DONE]');
    const chunks = [];
    for (const frame of frames.slice(0, -1)) {
      assert.match(frame, /^data: \{.*\}$/s, 'one data line per chunk, no id: or event: lines');
      const chunk = JSON.parse(frame.slice('data: '.length));
      const checked = await uiMessageChunkSchema().validate(chunk);
      assert.ok(checked.success, `a v6 chunk: ${JSON.stringify(chunk)}: ${checked.error}`);
      chunks.push(chunk);
    }
    assert.equal(chunks[0].type, 'start');
    assert.deepEqual(chunks.at(-1), { type: 'finish', finishReason: 'stop' });
    for (const chunk of chunks.filter((c) => c.type.startsWith('data-'))) {
      assert.ok(chunk.type.startsWith('data-noetic-') && chunk.transient === true, JSON.stringify(chunk));
    }

    const stream = new ReadableStream({
      start(controller) {
        for (const chunk of chunks) controller.enqueue(chunk);
        controller.close();
      },
    });
    let message;
    for await (const snapshot of readUIMessageStream({ stream, terminateOnError: true })) message = snapshot;
    assert.equal(message.id, chunks[0].messageId);
    assert.equal(message.role, 'assistant');
    assert.deepEqual(
      message.parts.map((part) => part.type),
      ['step-start', 'tool-echo', 'step-start', 'text'],
    );
    const [echo] = toolParts(message);
    assert.equal(echo.state, 'output-available');
    assert.deepEqual(echo.input, { text: 'tell me about otters' });
    assert.match(String(echo.output), /otters/);
    assert.equal(message.parts.at(-1).state, 'done');
    assert.match(text(message), /offline demo model/);
  });
});

test('an approval request ends the response; useChat\'s approval re-POST completes the same turn', async () => {
  await withServer(['--needs-approval', 'echo'], async (server) => {
    const chat = chatOn(server, 'approve');
    await bounded('the first response', chat.sendMessage({ text: 'look up otters' }));
    const first = await chat.finished();
    assert.equal(first.finishReason, 'tool-calls');
    assert.equal(chat.messages.length, 2);
    const asked = chat.messages[1];
    const [part] = toolParts(asked);
    assert.equal(part.state, 'approval-requested');
    assert.ok(part.approval.id, 'the approval id reached the part');
    assert.deepEqual(part.input, { text: 'look up otters' });

    // The user approves; `sendAutomaticallyWhen` re-POSTs the messages by itself.
    await chat.addToolApprovalResponse({ id: part.approval.id, approved: true });
    const second = await chat.finished();
    assert.equal(second.finishReason, 'stop');
    assert.equal(second.isError, false);
    assert.equal(chat.status, 'ready');
    assert.equal(chat.messages.length, 2, 'the answer continued the assistant message');
    const answered = chat.messages[1];
    assert.equal(answered.id, asked.id);
    const [done] = toolParts(answered);
    assert.equal(done.state, 'output-available');
    assert.match(String(done.output), /otters/);
    assert.match(text(answered), /offline demo model/);
    assert.ok(chat.data.some((part) => part.type === 'data-noetic-tool_call_started'), 'transient noetic events reached onData');

    // Nothing runs now: resuming finds no stream.
    const transport = new DefaultChatTransport({ api: `${server.url}v1/ai-sdk/chat` });
    assert.equal(await bounded('the resume', transport.reconnectToStream({ chatId: 'approve' })), null);
  });
});

test('a rejected call shows as denied and the turn still answers', async () => {
  await withServer(['--needs-approval', 'echo'], async (server) => {
    const chat = chatOn(server, 'reject');
    await bounded('the first response', chat.sendMessage({ text: 'look up otters' }));
    await chat.finished();
    const [part] = toolParts(chat.messages[1]);
    await chat.addToolApprovalResponse({ id: part.approval.id, approved: false, reason: 'not now' });
    const finish = await chat.finished();
    assert.equal(finish.finishReason, 'stop');
    const [denied] = toolParts(chat.messages[1]);
    assert.equal(denied.state, 'output-denied');
    assert.match(text(chat.messages[1]), /offline demo model/);
  });
});

test('resume while the turn waits replays it from its start', async () => {
  await withServer(['--needs-approval', 'echo'], async (server) => {
    const chat = chatOn(server, 'resume');
    await bounded('the first response', chat.sendMessage({ text: 'look up otters' }));
    await chat.finished();
    const asked = chat.messages[1];
    // Another tab (or a reload) resumes: the parked turn is replayed from `start`.
    const transport = new DefaultChatTransport({ api: `${server.url}v1/ai-sdk/chat` });
    const stream = await bounded('the resume', transport.reconnectToStream({ chatId: 'resume' }));
    assert.ok(stream, 'a turn runs (parked on the approval)');
    let message;
    for await (const snapshot of readUIMessageStream({ stream, terminateOnError: true })) message = snapshot;
    assert.equal(message.id, asked.id);
    assert.deepEqual(message.parts, asked.parts);
  });
});
