// `dgemma serve -tp 2` (the CPU simulation: one thread per rank) answers exactly what the one-rank
// server answers: same seed, same text, token for token, including a batched pair of requests, the
// sample filters (top_k, top_p, min_p) and the top log-probabilities.
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startReferencePair } from './helpers.mjs';

describe('tensor parallelism (dummy weights, CPU)', () => {
  let one, two;
  before(async () => {
    ({ one, two } = await startReferencePair(['-tp', '2']));
  });
  after(async () => {
    if (one) await one.stop();
    if (two) await two.stop();
  });

  const ask = (server, seed, max_tokens, extra = {}) =>
    server.client().chat.completions.create({
      model: 'tiny', messages: [{ role: 'user', content: 'Say something.' }], max_tokens, ignore_eos: true, seed, ...extra,
    });

  test('the same seed gives the same completion on 1 and 2 ranks', async () => {
    const [a, b] = await Promise.all([ask(one, 7, 16), ask(two, 7, 16)]);
    assert.equal(b.choices[0].message.content, a.choices[0].message.content);
    assert.equal(b.usage.completion_tokens, 16);
  });

  test('batched requests agree too', async () => {
    const want = await Promise.all([ask(one, 1, 12), ask(one, 2, 9)]);
    const got = await Promise.all([ask(two, 1, 12), ask(two, 2, 9)]);
    for (let i = 0; i < 2; ++i) assert.equal(got[i].choices[0].message.content, want[i].choices[0].message.content);
  });

  test('sample filters and top log-probabilities agree too', async () => {
    for (const extra of [{ top_k: 5 }, { top_p: 0.6, min_p: 0.01 }, { top_k: 40, top_p: 0.9, min_p: 0.001 }]) {
      const opts = { ...extra, temperature: 1.0, logprobs: true, top_logprobs: 4 };
      const [a, b] = await Promise.all([ask(one, 3, 10, opts), ask(two, 3, 10, opts)]);
      assert.equal(b.choices[0].message.content, a.choices[0].message.content, JSON.stringify(extra));
      assert.deepEqual(b.choices[0].logprobs, a.choices[0].logprobs, JSON.stringify(extra));
      assert.equal(b.choices[0].logprobs.content[0].top_logprobs.length, 4);
    }
  });
});
