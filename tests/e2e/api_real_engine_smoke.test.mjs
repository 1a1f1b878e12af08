// API behaviour on the real model engine (--load-format dummy, CPU) that real_engine.test.mjs does not
// cover: logprobs counted token by token, and a disconnect mid-stream freeing the engine slot.
// Denoising is capped at 2 steps per canvas to keep it quick.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { makeModelDir, metrics, sample, startServer, waitFor } from './helpers.mjs';

let server;
let client;
before(async () => {
  server = await startServer({
    modelDir: makeModelDir(),
    loadFormat: 'dummy',
    args: ['--max-model-len', '1024', '--max-num-seqs', '2', '--diffusion-config', '{"max_denoising_steps": 2}',
      '--sse-ping-interval', '0.2'],
  });
  client = server.client();
});
after(async () => server?.stop());

test('usage equals the logprob entries, and their tokens spell the content', async () => {
  const r = await client.chat.completions.create({
    messages: [{ role: 'user', content: 'hello' }], max_tokens: 8, ignore_eos: true, logprobs: true, seed: 1,
  });
  assert.equal(r.usage.completion_tokens, 8);
  assert.equal(r.choices[0].logprobs.content.length, 8);
  assert.equal(r.choices[0].logprobs.content.map((e) => e.token).join(''), r.choices[0].message.content);
  for (const e of r.choices[0].logprobs.content) assert.ok(Number.isFinite(e.logprob) && e.logprob <= 0);
});

test('a client that disconnects mid-stream frees its slot', async () => {
  const before = await metrics(server);
  const controller = new AbortController();
  const res = await fetch(server.url('/v1/completions'), {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ prompt: 'long', max_tokens: 400, ignore_eos: true, stream: true }),
    signal: controller.signal,
  });
  const reader = res.body.getReader();
  let text = '';
  while (!text.includes('"text"')) text += new TextDecoder().decode((await reader.read()).value);
  controller.abort();
  await waitFor(async () => sample(await metrics(server), 'dgemma:num_requests_running') === 0, { timeoutMs: 20000 });
  const after = await metrics(server);
  assert.equal(sample(after, 'dgemma:request_success_total', { finished_reason: 'abort' }) -
    sample(before, 'dgemma:request_success_total', { finished_reason: 'abort' }), 1);
});
