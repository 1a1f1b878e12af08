// Alternatives (chat top_logprobs, completions logprobs N) and the sample filters (top_k, top_p, min_p)
// through the real server and the real model engine (CPU backend, deterministic random weights, the
// real Gemma 4 vocabulary): OpenAI's shapes, streamed and not, and their agreement with each other.
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { makeModelDir, startServer, tinyConfig, GENERATION_CONFIG } from './helpers.mjs';

describe('logprobs alternatives and sample filters (real engine)', () => {
  let server, client;
  before(async () => {
    const modelDir = makeModelDir({
      config: tinyConfig({ canvasLength: 16 }),
      generationConfig: { ...GENERATION_CONFIG, max_denoising_steps: 4 },
    });
    server = await startServer({ modelDir, loadFormat: 'dummy', args: ['--device', 'cpu', '--served-model-name', 'tiny-real', '--max-num-seqs', '2', '--max-model-len', '1024'] });
    client = server.client();
  });
  after(async () => server && (await server.stop()));

  const chat = (extra = {}) =>
    client.chat.completions.create({ model: 'tiny-real', messages: [{ role: 'user', content: 'Say something.' }], max_tokens: 16, ignore_eos: true, seed: 11, ...extra });

  const checkEntry = (e, n) => {
    assert.equal(typeof e.token, 'string');
    assert.ok(Array.isArray(e.bytes) && e.bytes.every((b) => Number.isInteger(b) && b >= 0 && b < 256));
    assert.ok(e.logprob <= 0);
    assert.equal(e.top_logprobs.length, n);
    assert.equal(e.top_logprobs[0].token, e.token, 'the committed token (the argmax) is the most likely');
    assert.equal(e.top_logprobs[0].logprob, e.logprob);
    assert.deepEqual(e.top_logprobs[0].bytes, e.bytes);
    for (let i = 1; i < n; i++) assert.ok(e.top_logprobs[i].logprob <= e.top_logprobs[i - 1].logprob, 'descending');
    for (const a of e.top_logprobs) assert.deepEqual(Object.keys(a).sort(), ['bytes', 'logprob', 'token']);
  };

  test('chat top_logprobs: N alternatives per token, the token first; 0 gives empty lists', async () => {
    const r = await chat({ logprobs: true, top_logprobs: 5 });
    const content = r.choices[0].logprobs.content;
    assert.equal(content.length, r.usage.completion_tokens);
    for (const e of content) checkEntry(e, 5);
    // The probabilities of distinct alternatives add up to at most 1.
    for (const e of content) assert.ok(e.top_logprobs.reduce((s, a) => s + Math.exp(a.logprob), 0) <= 1 + 1e-5);
    const zero = await chat({ logprobs: true, top_logprobs: 0 });
    for (const e of zero.choices[0].logprobs.content) assert.deepEqual(e.top_logprobs, []);
    // Asking for alternatives changes nothing else.
    assert.equal(zero.choices[0].message.content, r.choices[0].message.content);
    assert.deepEqual(zero.choices[0].logprobs.content.map((e) => e.logprob), content.map((e) => e.logprob));
    const twenty = await chat({ logprobs: true, top_logprobs: 20 });
    for (const e of twenty.choices[0].logprobs.content) checkEntry(e, 20);
    assert.deepEqual(twenty.choices[0].logprobs.content.map((e) => e.top_logprobs.slice(0, 5)), content.map((e) => e.top_logprobs));
  });

  test('chat top_logprobs streamed equal the non-streamed ones', async () => {
    const whole = await chat({ logprobs: true, top_logprobs: 3 });
    const stream = await chat({ logprobs: true, top_logprobs: 3, stream: true });
    const got = [];
    for await (const chunk of stream) for (const c of chunk.choices) if (c.logprobs) got.push(...c.logprobs.content);
    assert.deepEqual(got, whole.choices[0].logprobs.content);
  });

  test('completions logprobs N: each top_logprobs object holds the token and its alternatives', async () => {
    const r = await client.completions.create({ model: 'tiny-real', prompt: '<bos>Once upon a time', max_tokens: 16, ignore_eos: true, seed: 4, logprobs: 3 });
    const lp = r.choices[0].logprobs;
    assert.equal(lp.tokens.length, 16);
    assert.equal(lp.top_logprobs.length, 16);
    for (let i = 0; i < 16; i++) {
      const top = lp.top_logprobs[i];
      const values = Object.values(top);
      assert.ok(values.length >= 1 && values.length <= 3);
      assert.equal(top[lp.tokens[i]], lp.token_logprobs[i], 'the returned token is in its object');
      assert.equal(Math.max(...values), lp.token_logprobs[i], 'and is the most likely');
    }
    const zero = await client.completions.create({ model: 'tiny-real', prompt: '<bos>Once upon a time', max_tokens: 16, ignore_eos: true, seed: 4, logprobs: 0 });
    assert.equal(zero.choices[0].text, r.choices[0].text);
    zero.choices[0].logprobs.top_logprobs.forEach((t, i) => assert.deepEqual(t, { [lp.tokens[i]]: lp.token_logprobs[i] }));
  });

  test('top_k, top_p and min_p are applied: seeded runs reproduce, equal supports give equal outputs', async () => {
    const filters = { top_k: 40, top_p: 0.9, min_p: 0.02 };
    const [a, b] = await Promise.all([chat({ ...filters, seed: 21 }), chat({ ...filters, seed: 21 })]);
    assert.equal(a.choices[0].message.content, b.choices[0].message.content);
    assert.equal(a.usage.completion_tokens, 16);
    // top_k 1, min_p 1 and a tiny top_p all keep exactly the tokens tied at the maximum, so the three
    // draw the same samples and give the same output.
    const [k1, m1] = await Promise.all([chat({ top_k: 1, seed: 21 }), chat({ min_p: 1, seed: 21 })]);
    const p0 = await chat({ top_p: 1e-9, seed: 21 });
    assert.equal(m1.choices[0].message.content, k1.choices[0].message.content);
    assert.equal(p0.choices[0].message.content, k1.choices[0].message.content);
    // Off values are accepted as vLLM's: top_k 0 (or -1), top_p 1, min_p 0 give the unfiltered output.
    const [plain, off] = await Promise.all([chat({ seed: 21 }), chat({ seed: 21, top_k: 0, top_p: 1, min_p: 0 })]);
    assert.equal(off.choices[0].message.content, plain.choices[0].message.content);
  });
});
