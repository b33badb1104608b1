// End-to-end in push mode: the official OpenAI Node SDK against pdrouter --kv-mode push in front
// of a pdsim push pair on the transfer core (P writes the KV into the blocks D registers, UCX tcp
// on lo; real processes on 127.0.0.1), with the router's own transfer agent. Run by CTest
// (`e2e_openai_sdk_push`, registered only when the build has UCX) or by hand:
//   PDROUTER=build/router/pdrouter PDSIM=build/sim/pdsim node --test tests/e2e/openai_sdk_push.test.mjs
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import {
  OpenAI, APIError, MODEL, PDROUTER, PDSIM, startServer, stopServers, debug, sleep,
} from './harness.mjs';

const ENGINE_ID = 'e2e-push-prefill';
let client;
let routerPort;
let prefillPort;
let decodePort;

before(async () => {
  const sim = ['--host', '127.0.0.1', '--port', '0', '--model', MODEL, '--kv-mode', 'push',
    '--kv-transfer', 'pdx', '--kv-transports', 'tcp', '--kv-net-devices', 'lo'];
  prefillPort = await startServer('prefill', PDSIM,
    ['--role', 'prefill', ...sim, '--engine-id', ENGINE_ID]);
  decodePort = await startServer('decode', PDSIM, ['--role', 'decode', ...sim]);
  // pdsim's KV side channel is its HTTP port.
  routerPort = await startServer('pdrouter', PDROUTER, [
    '--host', '127.0.0.1', '--port', '0', '--kv-mode', 'push',
    '--prefill', `127.0.0.1:${prefillPort}`, '--decode', `127.0.0.1:${decodePort}`,
    '--prefill-engine-ids', ENGINE_ID, '--prefill-side-channel-ports', String(prefillPort),
    '--transfer-agent', '--transfer-agent-transports', 'tcp',
  ]);
  client = new OpenAI({
    apiKey: 'e2e-client-key', baseURL: `http://127.0.0.1:${routerPort}/v1`, maxRetries: 0,
    timeout: 15000,
  });
});

after(stopServers);

// The single-engine answer: the decode pdsim serving a text prompt itself (no KV needed).
async function single(path, body) {
  const res = await fetch(`http://127.0.0.1:${decodePort}${path}`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: MODEL, ...body }),
  });
  assert.equal(res.status, 200);
  return res.json();
}

test('completions, non-stream: the single-engine text, KV written by P', async () => {
  const before = (await debug(prefillPort, '/debug/state')).kv_push_writes;
  const want = await single('/v1/completions', { prompt: 'The quick brown fox', max_tokens: 9 });
  const r = await client.completions.create({ model: MODEL, prompt: 'The quick brown fox', max_tokens: 9 });
  assert.equal(r.object, 'text_completion');
  assert.equal(r.choices[0].text, want.choices[0].text);
  assert.ok(want.choices[0].text.length > 0);
  assert.equal(r.usage.completion_tokens, 9);
  // P counts its write when the write's completion runs, which may come just after D (told by
  // the Done note) has answered: wait for it, bounded.
  let writes = 0;
  for (let i = 0; i < 100; i += 1) {
    writes = (await debug(prefillPort, '/debug/state')).kv_push_writes;
    if (writes >= before + 1) break;
    await sleep(20);
  }
  assert.equal(writes, before + 1);
});

test('completions, stream: the single-engine text in several chunks', async () => {
  const want = await single('/v1/completions', { prompt: 'jumps over the lazy dog', max_tokens: 11 });
  const stream = await client.completions.create({
    model: MODEL, prompt: 'jumps over the lazy dog', max_tokens: 11, stream: true,
  });
  const texts = [];
  for await (const chunk of stream) texts.push(chunk.choices[0]?.text ?? '');
  assert.equal(texts.join(''), want.choices[0].text);
  assert.ok(texts.length >= 3, `expected several chunks, got ${texts.length}`);
});

test('chat, non-stream: a chat.completion with the single-engine text', async () => {
  const messages = [{ role: 'user', content: 'Hello push router' }];
  const want = await single('/v1/chat/completions', { messages, max_tokens: 7 });
  const r = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 7 });
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal(r.choices[0].message.content, want.choices[0].message.content);
  assert.equal(r.usage.completion_tokens, 7);
});

test('chat, stream with usage: one id, role first', async () => {
  const messages = [{ role: 'user', content: 'Stream the push to me' }];
  const want = await single('/v1/chat/completions', { messages, max_tokens: 8 });
  const stream = await client.chat.completions.create({
    model: MODEL, messages, max_tokens: 8, stream: true, stream_options: { include_usage: true },
  });
  let text = '';
  const ids = new Set();
  let first;
  let usage;
  for await (const chunk of stream) {
    first ??= chunk;
    ids.add(chunk.id);
    assert.equal(chunk.object, 'chat.completion.chunk');
    text += chunk.choices[0]?.delta?.content ?? '';
    if (chunk.usage) usage = chunk.usage;
  }
  assert.equal(first.choices[0].delta.role, 'assistant');
  assert.equal(text, want.choices[0].message.content);
  assert.equal(ids.size, 1);
  assert.equal(usage.completion_tokens, 8);
});

test("P's error reaches the SDK as an APIError with P's status and message", async () => {
  const body = JSON.stringify({ error: { message: 'e2e push prefill says no', type: 'BadRequestError', param: null, code: 400 } });
  await debug(prefillPort, '/debug/faults', { status: 400, body });
  await assert.rejects(
    client.completions.create({ model: MODEL, prompt: 'refuse me in push mode', max_tokens: 3 }),
    (err) => {
      assert.ok(err instanceof APIError, `not an APIError: ${err}`);
      assert.equal(err.status, 400);
      assert.match(err.message, /e2e push prefill says no/);
      return true;
    });
});

test('the router reports push mode; no violations, no blocks left on either side', async () => {
  const st = await (await fetch(`http://127.0.0.1:${routerPort}/status`)).json();
  assert.equal(st.mode, 'push');
  for (const port of [prefillPort, decodePort]) {
    const s = await debug(port, '/debug/state');
    assert.equal(s.protocol_violations, 0, JSON.stringify(s.violations));
  }
  // D's wait was cancelled by the refused prefill; its blocks and P's are given back.
  const deadline = Date.now() + 3000;
  let p;
  let d;
  do {
    p = await debug(prefillPort, '/debug/state');
    d = await debug(decodePort, '/debug/state');
    if (p.blocks_held === 0 && d.kv_blocks_taken === 0) break;
    await sleep(25);
  } while (Date.now() < deadline);
  assert.equal(p.blocks_held, 0, JSON.stringify(p));
  assert.equal(d.kv_blocks_taken, 0, JSON.stringify(d));
  assert.ok(p.kv_transfer_bytes > 0, 'P counted its KV writes');
});
