// End-to-end: the official OpenAI Node SDK against pdrouter in front of a pdsim prefill and a
// pdsim decode (real processes on 127.0.0.1, port 0). Run by CTest (`e2e_openai_sdk`) or by hand:
//   PDROUTER=build/router/pdrouter PDSIM=build/sim/pdsim node --test tests/e2e/
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import {
  OpenAI, APIError, MODEL, PDROUTER, PDSIM, startServer, stopServers, debug, sleep,
} from './harness.mjs';

let client;
let prefillPort;
let decodePort;

before(async () => {
  const sim = ['--host', '127.0.0.1', '--port', '0', '--model', MODEL];
  prefillPort = await startServer('prefill', PDSIM, ['--role', 'prefill', ...sim]);
  decodePort = await startServer('decode', PDSIM, ['--role', 'decode', ...sim]);
  const routerPort = await startServer('pdrouter', PDROUTER, [
    '--host', '127.0.0.1', '--port', '0',
    '--prefill', `127.0.0.1:${prefillPort}`, '--decode', `127.0.0.1:${decodePort}`,
  ]);
  client = new OpenAI({
    apiKey: 'e2e-client-key', baseURL: `http://127.0.0.1:${routerPort}/v1`, maxRetries: 0,
    timeout: 15000,
  });
});

after(stopServers);

// pdsim's text for (prompt, max_tokens), as the decode instance serves it locally (no KV handle).
async function expectedCompletion(prompt, maxTokens) {
  const res = await fetch(`http://127.0.0.1:${decodePort}/v1/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: MODEL, prompt, max_tokens: maxTokens }),
  });
  assert.equal(res.status, 200);
  return (await res.json()).choices[0].text;
}

async function expectedChat(content, maxTokens) {
  const res = await fetch(`http://127.0.0.1:${decodePort}/v1/chat/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content }], max_tokens: maxTokens }),
  });
  assert.equal(res.status, 200);
  return (await res.json()).choices[0].message.content;
}

test('completions, non-stream', async () => {
  const want = await expectedCompletion('The quick brown fox', 9);
  const r = await client.completions.create({ model: MODEL, prompt: 'The quick brown fox', max_tokens: 9 });
  assert.equal(r.object, 'text_completion');
  assert.equal(r.choices[0].text, want);
  assert.ok(want.length > 0);
});

test('completions, stream', async () => {
  const want = await expectedCompletion('jumps over the lazy dog', 11);
  const stream = await client.completions.create({
    model: MODEL, prompt: 'jumps over the lazy dog', max_tokens: 11, stream: true,
  });
  let text = '';
  let chunks = 0;
  for await (const chunk of stream) {
    text += chunk.choices[0]?.text ?? '';
    chunks += 1;
  }
  assert.equal(text, want);
  assert.ok(chunks >= 2, `expected several chunks, got ${chunks}`);
});

test('chat, non-stream', async () => {
  const want = await expectedChat('Hello router', 7);
  const r = await client.chat.completions.create({
    model: MODEL, messages: [{ role: 'user', content: 'Hello router' }], max_tokens: 7,
  });
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.choices[0].message.content, want);
  assert.equal(r.choices[0].message.role, 'assistant');
});

test('chat, stream (with request id header back)', async () => {
  const want = await expectedChat('Stream to me', 8);
  const { data: stream, response } = await client.chat.completions
    .create({
      model: MODEL, messages: [{ role: 'user', content: 'Stream to me' }], max_tokens: 8,
      stream: true,
    }, { headers: { 'X-Request-Id': 'e2e-chat-stream-1' } })
    .withResponse();
  assert.equal(response.headers.get('x-request-id'), 'e2e-chat-stream-1');
  assert.match(response.headers.get('content-type') ?? '', /text\/event-stream/);
  let text = '';
  for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? '';
  assert.equal(text, want);
});

test('the client key reaches both legs', async () => {
  await client.completions.create({ model: MODEL, prompt: 'auth check', max_tokens: 2 },
    { headers: { 'X-Request-Id': 'e2e-auth-1' } });
  for (const port of [prefillPort, decodePort]) {
    const { requests } = await debug(port, '/debug/requests');
    const mine = requests.filter((r) => r.headers['x-request-id'] === 'e2e-auth-1');
    assert.equal(mine.length, 1, `:${port} got ${mine.length} requests with the id`);
    assert.equal(mine[0].headers.authorization, 'Bearer e2e-client-key');
  }
});

test('an upstream 4xx surfaces as APIError with that status', async () => {
  const body = JSON.stringify({ error: { message: 'e2e says no', type: 'BadRequestError', param: null, code: 400 } });
  await debug(prefillPort, '/debug/faults', { status: 400, body });
  await assert.rejects(
    client.completions.create({ model: MODEL, prompt: 'refuse me', max_tokens: 3 }),
    (err) => {
      assert.ok(err instanceof APIError, `not an APIError: ${err}`);
      assert.equal(err.status, 400);
      assert.match(err.message, /e2e says no/);
      return true;
    });
});

test('a router-made error surfaces as APIError (missing messages → 400)', async () => {
  await assert.rejects(
    client.chat.completions.create({ model: MODEL, max_tokens: 3 }),
    (err) => err instanceof APIError && err.status === 400);
});

test('no protocol violations and no stranded KV', async () => {
  for (const port of [prefillPort, decodePort]) {
    const st = await debug(port, '/debug/state');
    assert.equal(st.protocol_violations, 0, JSON.stringify(st.violations));
  }
  const deadline = Date.now() + 3000;
  let held;
  do {
    held = (await debug(prefillPort, '/debug/state')).blocks_held;
    if (held === 0) break;
    await sleep(25);
  } while (Date.now() < deadline);
  assert.equal(held, 0);
});
