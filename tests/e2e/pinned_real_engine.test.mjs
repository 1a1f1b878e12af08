// The pinned chat forms on the real model engine (CPU backend, deterministic random weights): pins
// go through the engine's pinned-span mechanism (docs/MODEL.md §6.6). A random model writes nothing
// useful into a gap, so what is asserted is what the pins guarantee: a fully pinned layout comes back
// exactly, across canvases; a forced call of a function without parameters is that call; a prefill is pinned
// and not returned; and a reply with free gaps is valid (guided decoding), never an error.
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { makeModelDir, startServer, tinyConfig, GENERATION_CONFIG, postJson } from './helpers.mjs';

const CHAT = '/v1/chat/completions';
const user = (content) => [{ role: 'user', content }];

describe('pinned chat forms on the real engine (dummy weights, CPU)', () => {
  let server;
  before(async () => {
    const modelDir = makeModelDir({
      config: tinyConfig({ canvasLength: 16 }),
      generationConfig: { ...GENERATION_CONFIG, max_denoising_steps: 3 },
    });
    server = await startServer({ modelDir, loadFormat: 'dummy', args: ['--device', 'cpu', '--max-num-seqs', '2', '--max-model-len', '1024'] });
  });
  after(async () => server && (await server.stop()));

  const count = async (prompt) => (await postJson(server.url('/tokenize'), { prompt })).json.count;

  test('a fully pinned json_schema layout comes back exactly, across canvases', async () => {
    const schema = {
      type: 'object',
      properties: { kind: { const: 'reply' }, note: { const: 'all of this text is fixed by the schema itself' }, n: { const: 3 } },
      required: ['kind', 'note', 'n'],
      additionalProperties: false,
    };
    const want = '{"kind": "reply", "note": "all of this text is fixed by the schema itself", "n": 3}';
    const layout = await count(want);
    assert.ok(layout > 16, 'the layout spans canvases');
    const r = await postJson(server.url(CHAT), {
      messages: user('Describe it.'), max_tokens: layout, seed: 1,
      response_format: { type: 'json_schema', json_schema: { name: 'fixed', schema } },
    });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.choices[0].message.content, want);
    assert.equal(r.json.choices[0].finish_reason, 'stop');
    assert.equal(r.json.usage.completion_tokens, layout);
  });

  test('a named call of a function without parameters is exactly that call; without room for it, a 400', async () => {
    const tools = [{ type: 'function', function: { name: 'get_time' } }];
    const call = (await postJson(server.url('/tokenize'), { prompt: '<|tool_call>call:get_time{}<tool_call|>' })).json.count;
    const body = { messages: user('What time is it?'), tools, tool_choice: { type: 'function', function: { name: 'get_time' } }, seed: 2 };
    const small = await postJson(server.url(CHAT), { ...body, max_tokens: call - 2 });
    assert.equal(small.status, 400, small.text);
    assert.equal(small.json.error.param, 'max_tokens');
    const r = await postJson(server.url(CHAT), { ...body, max_tokens: call + 4 });
    assert.equal(r.status, 200, r.text);
    const m = r.json.choices[0].message;
    assert.equal(m.content, null);
    assert.equal(m.tool_calls.length, 1);
    assert.equal(m.tool_calls[0].function.name, 'get_time');
    assert.equal(m.tool_calls[0].function.arguments, '{}');
  });

  test('a prefill is pinned, counted as prompt and not returned; seeded runs reproduce', async () => {
    const messages = [...user('Tell me a story.'), { role: 'assistant', content: 'Once upon a time' }];
    const body = { messages, continue_final_message: true, max_tokens: 6, ignore_eos: true, seed: 7 };
    const r = await postJson(server.url(CHAT), body);
    assert.equal(r.status, 200, r.text);
    const t = await postJson(server.url('/tokenize'), { messages, continue_final_message: true });
    assert.equal(r.json.usage.prompt_tokens, t.json.count);
    assert.equal(r.json.usage.completion_tokens, 6);
    const again = await postJson(server.url(CHAT), body);
    assert.equal(again.json.choices[0].message.content, r.json.choices[0].message.content);
    const echo = await postJson(server.url(CHAT), { ...body, echo: true });
    assert.equal(echo.json.choices[0].message.content, 'Once upon a time' + r.json.choices[0].message.content);
  });

  test('with free gaps the reply is valid (guided decoding), never an error', async () => {
    const schema = { type: 'object', properties: { ok: { type: 'boolean' } }, required: ['ok'], additionalProperties: false };
    for (const seed of [11, 12]) {
      const r = await postJson(server.url(CHAT), {
        messages: user('Is it ok?'), seed, max_tokens: 16,
        response_format: { type: 'json_schema', json_schema: { name: 'ok', schema } },
      });
      assert.equal(r.status, 200, r.text);
      const v = JSON.parse(r.json.choices[0].message.content);
      assert.deepEqual(Object.keys(v), ['ok']);
      assert.equal(typeof v.ok, 'boolean');
    }
  });
});
