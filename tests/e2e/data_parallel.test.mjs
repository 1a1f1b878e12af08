// `dgemma serve -dp 2` (two engine replicas of the CPU backend behind one server) answers exactly what
// one engine answers: the same seeds give the same text, whichever replica took each request, for a
// batch of concurrent requests spread over both; /metrics reports the replicas' counters added up.
// (The routing rules themselves: tests/unit/engine/test_data_parallel.cpp.)
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { metrics, sample, startReferencePair, waitFor } from './helpers.mjs';

describe('data parallelism (dummy weights, CPU)', () => {
  let one, two;
  before(async () => {
    ({ one, two } = await startReferencePair(['-dp', '2']));
  });
  after(async () => {
    if (one) await one.stop();
    if (two) await two.stop();
  });

  const ask = (server, seed, max_tokens, content = 'Say something.') =>
    server.client().chat.completions.create({
      model: 'tiny', messages: [{ role: 'user', content }], max_tokens, ignore_eos: true, seed,
    });

  test('seeded requests give the same completions with one engine and with two replicas', async () => {
    const prompts = ['Say something.', 'Tell a story about a cat.', 'List three colours.', 'Say something.'];
    const want = await Promise.all(prompts.map((p, i) => ask(one, 10 + i, 8 + i, p)));
    const got = await Promise.all(prompts.map((p, i) => ask(two, 10 + i, 8 + i, p)));
    for (let i = 0; i < prompts.length; ++i) {
      assert.equal(got[i].choices[0].message.content, want[i].choices[0].message.content, `request ${i}`);
      assert.equal(got[i].usage.completion_tokens, 8 + i);
    }
  });

  test('metrics add the replicas up', async () => {
    await waitFor(async () => sample(await metrics(two), 'dgemma:num_requests_running') === 0, { timeoutMs: 20000 });
    const m = await metrics(two);
    assert.ok(sample(m, 'dgemma:engine_steps_total') > 0);
    assert.ok(sample(m, 'dgemma:prompt_tokens_total') > 0);
    assert.equal(sample(m, 'dgemma:num_requests_waiting'), 0);
  });
});
