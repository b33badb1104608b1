// End-to-end in the LMCache mode: the official OpenAI Node SDK against pdrouter --kv-mode lmcache
// in front of a pdsim LMCache pair (prefill TP 2 notifying the router's ZMQ PULL socket, decode
// with two KV receivers; real processes on 127.0.0.1). Run by CTest (`e2e_openai_sdk_lmcache`)
// or by hand:
//   PDROUTER=build/router/pdrouter PDSIM=build/sim/pdsim node --test tests/e2e/
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import {
  OpenAI, MODEL, PDROUTER, PDSIM, startServer, stopServers, freePort,
} from './harness.mjs';

let client;
let routerPort;
let decodePort;

before(async () => {
  const sim = ['--host', '127.0.0.1', '--port', '0', '--model', MODEL, '--kv-mode', 'lmcache',
    '--tp-size', '2'];
  const kvReady = `tcp://127.0.0.1:${await freePort()}`;
  const init = `${await freePort()},${await freePort()}`;
  const alloc = `${await freePort()},${await freePort()}`;
  const prefillPort = await startServer('prefill', PDSIM,
    ['--role', 'prefill', ...sim, '--kv-ready-connect', kvReady]);
  decodePort = await startServer('decode', PDSIM, ['--role', 'decode', ...sim,
    '--lmcache-init-ports', init, '--lmcache-alloc-ports', alloc]);
  routerPort = await startServer('pdrouter', PDROUTER, [
    '--host', '127.0.0.1', '--port', '0', '--kv-mode', 'lmcache', '--kv-ready-bind', kvReady,
    '--prefill', `127.0.0.1:${prefillPort}`, '--decode', `127.0.0.1:${decodePort}`,
    '--lmcache-init-ports', init, '--lmcache-alloc-ports', alloc,
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

test('completions, non-stream: the single-engine text and usage', async () => {
  const want = await single('/v1/completions', { prompt: 'The quick brown fox', max_tokens: 9 });
  const r = await client.completions.create({ model: MODEL, prompt: 'The quick brown fox', max_tokens: 9 });
  assert.equal(r.object, 'text_completion');
  assert.equal(r.choices[0].text, want.choices[0].text);
  assert.equal(r.usage.prompt_tokens, want.usage.prompt_tokens);
  assert.equal(r.usage.completion_tokens, 9);
});

test('completions, stream: P\'s token first, then the rest', async () => {
  const want = await single('/v1/completions', { prompt: 'jumps over the lazy dog', max_tokens: 11 });
  const stream = await client.completions.create({
    model: MODEL, prompt: 'jumps over the lazy dog', max_tokens: 11, stream: true,
  });
  const texts = [];
  for await (const chunk of stream) texts.push(chunk.choices[0]?.text ?? '');
  assert.equal(texts.join(''), want.choices[0].text);
  assert.ok(want.choices[0].text.startsWith(texts[0]) && texts[0].length > 0);
  assert.ok(texts.length >= 3, `expected several chunks, got ${texts.length}`);
});

test('chat, non-stream: a chat.completion with the single-engine text', async () => {
  const messages = [{ role: 'user', content: 'Hello router' }];
  const want = await single('/v1/chat/completions', { messages, max_tokens: 7 });
  const r = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 7 });
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal(r.choices[0].message.content, want.choices[0].message.content);
  assert.equal(r.usage.completion_tokens, 7);
});

test('chat, stream with usage: one id, role first', async () => {
  const messages = [{ role: 'user', content: 'Stream to me' }];
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

test('max_tokens 1 is answered from the prefill alone', async () => {
  const want = await single('/v1/completions', { prompt: 'one token please', max_tokens: 1 });
  const r = await client.completions.create({ model: MODEL, prompt: 'one token please', max_tokens: 1 });
  assert.equal(r.choices[0].text, want.choices[0].text);
});

test('the router reports the mode and no notification timed out', async () => {
  const st = await (await fetch(`http://127.0.0.1:${routerPort}/status`)).json();
  assert.equal(st.mode, 'lmcache');
  const metrics = await (await fetch(`http://127.0.0.1:${routerPort}/metrics`)).text();
  assert.match(metrics, /pdrouter_kv_ready_timeouts_total\{policy="error"\} 0/);
  assert.match(metrics, /pdrouter_kv_ready_wait_seconds_count [1-9]/);
});
