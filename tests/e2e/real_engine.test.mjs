// Smoke test of the API on the real model engine (--load-format dummy: the tiny config with random
// weights, on the CPU). Denoising is capped at 2 steps per canvas to keep it quick.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { makeModelDir, metrics, postJson, sample, startServer, waitFor } from './helpers.mjs';

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

const user = (content) => [{ role: 'user', content }];

test('chat: exact max_tokens, usage equals the logprob entries', async () => {
  const r = await client.chat.completions.create({ messages: user('hello'), max_tokens: 8, ignore_eos: true, logprobs: true, seed: 1 });
  assert.equal(r.usage.completion_tokens, 8);
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(r.choices[0].logprobs.content.length, 8);
  assert.equal(r.choices[0].logprobs.content.map((e) => e.token).join(''), r.choices[0].message.content);
});

test('streamed completion: one delta per canvas, usage chunk, [DONE]', async () => {
  const stream = await client.completions.create({ prompt: 'hello', max_tokens: 20, ignore_eos: true, stream: true, stream_options: { include_usage: true }, seed: 2 });
  let text = '';
  let deltas = 0;
  let usage;
  for await (const c of stream) {
    if (c.usage) usage = c.usage;
    if (c.choices[0]?.text) {
      text += c.choices[0].text;
      deltas++;
    }
  }
  assert.equal(usage.completion_tokens, 20);
  assert.ok(deltas >= 2, 'canvas_length 16: at least two canvases for 20 tokens');
  const again = await postJson(server.url('/v1/completions'), { prompt: 'hello', max_tokens: 20, ignore_eos: true, seed: 2 });
  assert.equal(again.json.choices[0].text, text, 'same seed, same text, streamed or not');
});

test('a seed reproduces whatever else is in the batch', async () => {
  const body = { prompt: 'batch invariance', max_tokens: 16, ignore_eos: true, seed: 42 };
  const alone = await postJson(server.url('/v1/completions'), body);
  const [together] = await Promise.all([
    postJson(server.url('/v1/completions'), body),
    postJson(server.url('/v1/completions'), { prompt: 'something else entirely', max_tokens: 16, seed: 7 }),
  ]);
  assert.equal(together.json.choices[0].text, alone.json.choices[0].text);
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
  const d = (n, l) => sample(after, n, l) - sample(before, n, l);
  assert.equal(d('dgemma:request_success_total', { finished_reason: 'abort' }), 1);
});
