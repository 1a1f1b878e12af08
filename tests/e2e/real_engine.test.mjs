// The real model engine (CPU backend, deterministic random weights, the real 262,144-token Gemma 4
// vocabulary) behind the real server: exact max_tokens, streaming usage, seed reproducibility with
// other requests in flight, per-request diffusion parameters, denoising metrics.
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { makeModelDir, startServer, tinyConfig, GENERATION_CONFIG, metrics, sample, streamRaw } from './helpers.mjs';

describe('real engine (dummy weights, CPU)', () => {
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

  const ask = (extra = {}) =>
    client.chat.completions.create({ model: 'tiny-real', messages: [{ role: 'user', content: 'Say something.' }], ...extra });

  test('max_tokens is exact with ignore_eos, across several canvases', async () => {
    const r = await ask({ max_tokens: 21, ignore_eos: true, seed: 5 });
    assert.equal(r.choices[0].finish_reason, 'length');
    assert.equal(r.usage.completion_tokens, 21);
    assert.equal(typeof r.choices[0].message.content, 'string');
  });

  // Previews of the model engine carry, per canvas position, the step's entropy and decide's acceptance
  // mask. The entropy bound always accepts at least the lowest-entropy position (its prefix sum is 0).
  test('previews carry each position\'s entropy and acceptance', async () => {
    const r = await streamRaw(server.url('/v1/chat/completions'), {
      model: 'tiny-real', messages: [{ role: 'user', content: 'Say something.' }], max_tokens: 16, ignore_eos: true,
      seed: 3, stream: true, stream_options: { include_previews: true },
    });
    assert.equal(r.status, 200);
    const previews = r.comments.filter((c) => c.startsWith('dgemma.preview ')).map((c) => JSON.parse(c.slice(15)));
    assert.ok(previews.length >= 1, 'at least one preview');
    for (const p of previews) {
      assert.equal(p.tokens.length, 16);
      assert.equal(p.entropy.length, 16);
      assert.equal(p.accepted.length, 16);
      for (const h of p.entropy) assert.ok(Number.isFinite(h) && h >= 0, `entropy ${h}`);
      for (const a of p.accepted) assert.ok(a === 0 || a === 1);
      assert.ok(p.accepted.reduce((x, y) => x + y, 0) >= 1, 'the lowest-entropy position is always accepted');
    }
  });

  test('a seed reproduces exactly while other requests run', async () => {
    const first = await ask({ max_tokens: 16, ignore_eos: true, seed: 1234 });
    const [again] = await Promise.all([
      ask({ max_tokens: 16, ignore_eos: true, seed: 1234 }),
      ask({ max_tokens: 20, ignore_eos: true, seed: 99 }),
    ]);
    assert.equal(again.choices[0].message.content, first.choices[0].message.content);
    const other = await ask({ max_tokens: 16, ignore_eos: true, seed: 1235 });
    assert.notEqual(other.choices[0].message.content, first.choices[0].message.content);
  });

  test('streaming: role first, one delta per canvas, usage equals the non-streamed count', async () => {
    const stream = await ask({ max_tokens: 20, ignore_eos: true, seed: 3, stream: true, stream_options: { include_usage: true } });
    let role = null, text = '', usage = null, finish = null, contentChunks = 0;
    for await (const chunk of stream) {
      if (chunk.usage) usage = chunk.usage;
      for (const c of chunk.choices) {
        if (c.delta.role) role = c.delta.role;
        if (c.delta.content) {
          text += c.delta.content;
          contentChunks++;
        }
        if (c.finish_reason) finish = c.finish_reason;
      }
    }
    assert.equal(role, 'assistant');
    assert.equal(finish, 'length');
    assert.equal(usage.completion_tokens, 20);
    assert.ok(contentChunks >= 1 && contentChunks <= 2, `20 tokens in canvases of 16 arrive in at most 2 deltas (got ${contentChunks})`);
    const same = await ask({ max_tokens: 20, ignore_eos: true, seed: 3 });
    assert.equal(text, same.choices[0].message.content);
  });

  test('per-request diffusion parameters are honoured and validated', async () => {
    const before = sample(await metrics(server), 'dgemma:denoising_steps_per_canvas_count');
    const r = await ask({ max_tokens: 16, ignore_eos: true, seed: 9, max_denoising_steps: 2, entropy_bound: 0.5, t_min: 0.3, t_max: 0.9 });
    assert.equal(r.usage.completion_tokens, 16);
    const m = await metrics(server);
    assert.equal(sample(m, 'dgemma:denoising_steps_per_canvas_count') - before, 1);
    await assert.rejects(ask({ max_tokens: 16, t_min: 0.9, t_max: 0.3 }), (e) => e.status === 400);
    await assert.rejects(ask({ max_tokens: 16, max_denoising_steps: 0 }), (e) => e.status === 400);
  });
});
