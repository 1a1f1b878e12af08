// Infilling on /v1/completions (docs/API.md "Infilling") through the real engine (CPU, dummy weights,
// the real Gemma 4 vocabulary, canvas 16): the OpenAI `suffix` form (the suffix pinned right after the
// gap's room in every denoising step, the response holding the inserted text only), the
// `infill_template` form (fixed pieces pinned, each hole's text returned), and bad input.
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { makeModelDir, startServer, tinyConfig, GENERATION_CONFIG, postJson, streamRaw } from './helpers.mjs';

const C = 16;

describe('infilling (real engine, dummy weights, CPU)', () => {
  let server;
  before(async () => {
    const modelDir = makeModelDir({
      config: tinyConfig({ canvasLength: C }),
      generationConfig: { ...GENERATION_CONFIG, max_denoising_steps: 2 },
    });
    server = await startServer({ modelDir, loadFormat: 'dummy', args: ['--device', 'cpu', '--served-model-name', 'tiny', '--max-num-seqs', '2', '--max-model-len', '1024'] });
  });
  after(async () => server && (await server.stop()));

  const complete = (body) => postJson(server.url('/v1/completions'), { model: 'tiny', prompt: 'Once upon a time', ...body });
  const tokenize = async (text) => (await postJson(server.url('/tokenize'), { prompt: text })).json.tokens;
  const piece = async (id) => (await postJson(server.url('/detokenize'), { tokens: [id] })).json.prompt;

  test('suffix: pinned after the gap at every step; the response is the inserted text', async () => {
    const suffix = ' and they lived happily ever after.';
    const ids = await tokenize(suffix);
    const S = ids.length;
    assert.ok(S >= 2 && S < C - 4, `suffix of ${S} tokens`);
    const maxTokens = 10;
    const G = Math.min(maxTokens, C - S);
    const pieces = await Promise.all(ids.map(piece));
    const filler = new Set(await Promise.all([0, 1, 106, 50].map(piece)));
    const body = { suffix, max_tokens: maxTokens, seed: 7, skip_special_tokens: false };

    const s = await streamRaw(server.url('/v1/completions'), { model: 'tiny', prompt: 'Once upon a time', ...body, stream: true, stream_options: { include_previews: true } });
    assert.equal(s.status, 200);
    const previews = s.comments.filter((c) => c.startsWith('dgemma.preview ')).map((c) => JSON.parse(c.slice(15)));
    assert.ok(previews.length >= 1);
    for (const p of previews) {
      assert.deepEqual(p.tokens.slice(G, G + S), pieces, `step ${p.step}: the suffix sits at [${G}, ${G + S})`);
      assert.deepEqual(p.accepted.slice(G, G + S), Array(S).fill(1), 'pinned positions count as accepted');
    }
    let streamed = '', finish = null;
    for (const e of s.events) {
      if (e === '[DONE]') continue;
      for (const c of e.choices) {
        streamed += c.text;
        if (c.finish_reason) finish = c.finish_reason;
      }
    }
    assert.equal(finish, 'stop');

    const r = await complete(body);
    assert.equal(r.status, 200);
    const choice = r.json.choices[0];
    assert.equal(choice.text, streamed, 'the same seed gives the same gap, streamed or not');
    assert.equal(choice.finish_reason, 'stop', 'the gap reached its suffix');
    assert.ok(!choice.text.includes(suffix), 'the suffix is not part of the response');
    // The gap's tokens are the last step's free positions before the suffix, filler dropped.
    const last = previews[previews.length - 1].tokens.slice(0, G).filter((t) => !filler.has(t));
    assert.equal(r.json.usage.completion_tokens, last.length);
    assert.ok(r.json.usage.completion_tokens <= G);
  });

  test('suffix with n = 2 and logprobs: each choice its own gap', async () => {
    const r = await complete({ suffix: ' The end.', max_tokens: 6, seed: 11, n: 2, logprobs: 0 });
    assert.equal(r.status, 200);
    assert.equal(r.json.choices.length, 2);
    for (const c of r.json.choices) {
      assert.equal(c.finish_reason, 'stop');
      assert.equal(c.logprobs.tokens.length, c.logprobs.token_logprobs.length);
      assert.ok(c.logprobs.tokens.length <= 6);
      assert.equal(c.logprobs.tokens.join(''), c.text);
    }
  });

  test('infill_template: fixed pieces pinned, holes filled and returned one by one', async () => {
    const template = ['Dear', { max_tokens: 3 }, ', thanks for', { max_tokens: 5 }, '. Regards'];
    const body = { infill_template: template, seed: 3, skip_special_tokens: false };
    const r = await complete(body);
    assert.equal(r.status, 200);
    const c = r.json.choices[0];
    assert.equal(c.holes.length, 2);
    assert.equal(c.text, 'Dear' + c.holes[0] + ', thanks for' + c.holes[1] + '. Regards');
    assert.equal(c.finish_reason, 'stop', 'a template ending in fixed text is complete when filled');
    for (const [i, room] of [[0, 3], [1, 5]]) {
      const n = c.holes[i] === '' ? 0 : (await tokenize(c.holes[i])).length;
      assert.ok(n <= room + 2, `hole ${i}: ${n} tokens for a room of ${room} (retokenised)`);
    }
  });

  test('infill_template ending in a hole ends as any answer does', async () => {
    const r = await complete({ infill_template: ['Title:', { max_tokens: 20 }], seed: 5, ignore_eos: true });
    assert.equal(r.status, 200);
    const c = r.json.choices[0];
    assert.equal(c.holes.length, 1);
    assert.ok(c.text.startsWith('Title:'));
    assert.equal(c.finish_reason, 'length', 'ignore_eos: the hole runs to its room');
    assert.equal(r.json.usage.completion_tokens, (await tokenize('Title:')).length + 20);
  });

  test('bad input: each a 400 naming the field, and the server keeps serving', async () => {
    const cases = [
      [{ suffix: ' word'.repeat(40) }, 'suffix'],
      [{ suffix: 'x', infill_template: ['a', { max_tokens: 2 }] }, 'infill_template'],
      [{ infill_template: ['a', { max_tokens: 2 }, { max_tokens: 3 }, 'b'] }, 'infill_template'],
      [{ infill_template: ['a', { max_tokens: 5000 }] }, 'infill_template'],
      [{ max_tokens: 4, infill_template: ['a', { max_tokens: 8 }] }, 'max_tokens'],
      [{ infill_template: ['a', { room: 3 }] }, 'infill_template'],
      [{ infill_template: ['only fixed text'] }, 'infill_template'],
    ];
    for (const [body, param] of cases) {
      const r = await complete(body);
      assert.equal(r.status, 400, JSON.stringify(body));
      assert.equal(r.json.error.param, param, JSON.stringify(body));
    }
    const ok = await complete({ max_tokens: 4, seed: 1 });
    assert.equal(ok.status, 200);
  });
});
