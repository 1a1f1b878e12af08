// The pinned and guided chat forms through the server: assistant prefill (continue_final_message),
// forced tool calls (tool_choice required / named), response_format json_object and json_schema, and
// the 400s. The scripted runner sits behind the real engine, so pins and the guided commit rule go
// through the engine's mechanism (docs/API.md "Guided decoding on the canvas"): pinned positions hold
// the pinned tokens, a reply's valid prefix is kept and the value closed with its shortest completion,
// so a reply that breaks its form still comes back valid (no retry, no 422).
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { makeModelDir, postJson, startServer, streamRaw } from './helpers.mjs';

const script = {
  canvas_length: 32,
  canvas_delay_ms: 5,
  replies: [
    { when: 'tell a story', canvases: ['Once upon a time', ' there was a dragon.<turn|>'] },
  ],
};

const tools = [
  { type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { location: { type: 'string' } } } } },
  { type: 'function', function: { name: 'get_time', parameters: { type: 'object', properties: { zone: { type: 'string' } } } } },
];
const user = (content) => [{ role: 'user', content }];
const CHAT = '/v1/chat/completions';

async function streamChat(server, body) {
  const r = await streamRaw(server.url(CHAT), { ...body, stream: true, stream_options: { include_usage: true } });
  const out = { status: r.status, content: '', calls: [], finish: null, usage: null, errors: [], done: false };
  for (const e of r.events) {
    if (e === '[DONE]') {
      out.done = true;
      continue;
    }
    if (e.error) out.errors.push(e.error);
    if (e.usage) out.usage = e.usage;
    const ch = e.choices?.[0];
    if (!ch) continue;
    if (ch.delta?.content) out.content += ch.delta.content;
    for (const tc of ch.delta?.tool_calls ?? []) {
      if (!out.calls[tc.index]) out.calls[tc.index] = { name: tc.function.name, arguments: '' };
      out.calls[tc.index].arguments += tc.function.arguments ?? '';
    }
    if (ch.finish_reason) out.finish = ch.finish_reason;
  }
  return out;
}

let server;
before(async () => {
  // No --enable-auto-tool-choice / --tool-call-parser: forced calls do not need them (as in vLLM).
  server = await startServer({ modelDir: makeModelDir({ script }) });
});
after(async () => server?.stop());

describe('assistant prefill (continue_final_message)', () => {
  const messages = [...user('tell a story'), { role: 'assistant', content: 'Once upon a time' }];

  test('the prefill is pinned and only the continuation is returned, streamed or not', async () => {
    const r = await postJson(server.url(CHAT), { messages, continue_final_message: true });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.choices[0].message.content, ' there was a dragon.');
    assert.equal(r.json.choices[0].finish_reason, 'stop');
    // prompt_tokens counts the prefill: it is what /tokenize gives for the same request.
    const t = await postJson(server.url('/tokenize'), { messages, continue_final_message: true });
    assert.equal(t.status, 200, t.text);
    assert.equal(r.json.usage.prompt_tokens, t.json.count);
    assert.ok(t.json.count > 0);
    const d = await postJson(server.url('/detokenize'), { tokens: t.json.tokens });
    assert.ok(d.json.prompt.endsWith('<|turn>model\nOnce upon a time'), d.json.prompt);
    const completion = await postJson(server.url('/tokenize'), { prompt: ' there was a dragon.' });
    assert.equal(r.json.usage.completion_tokens, completion.json.count);

    const s = await streamChat(server, { messages, continue_final_message: true });
    assert.equal(s.content, ' there was a dragon.');
    assert.equal(s.usage.prompt_tokens, t.json.count);
  });

  test('echo prepends the continued message (vLLM)', async () => {
    const r = await postJson(server.url(CHAT), { messages, continue_final_message: true, echo: true });
    assert.equal(r.json.choices[0].message.content, 'Once upon a time there was a dragon.');
    const s = await streamChat(server, { messages, continue_final_message: true, echo: true });
    assert.equal(s.content, 'Once upon a time there was a dragon.');
  });

  test('bad combinations are 400s', async () => {
    const cases = [
      [{ messages, continue_final_message: true, add_generation_prompt: true }, 'continue_final_message', /Cannot set both/],
      [{ messages: user('tell a story'), continue_final_message: true }, 'continue_final_message', /not from the assistant/],
      [{ messages: [...user('x'), { role: 'assistant', content: ' ' }], continue_final_message: true }, 'messages[1].content', /empty/],
      [{ messages, continue_final_message: true, response_format: { type: 'json_object' } }, 'continue_final_message', /combined/],
    ];
    for (const [body, param, message] of cases) {
      const r = await postJson(server.url(CHAT), body);
      assert.equal(r.status, 400, r.text);
      assert.equal(r.json.error.param, param);
      assert.match(r.json.error.message, message);
    }
  });
});

describe('forced tool calls and JSON (replies written token by token, aligned with the pins)', () => {
  // {"city": "...", "population": N}
  const schema = {
    type: 'object',
    properties: { city: { type: 'string' }, population: { type: 'integer' } },
    required: ['city', 'population'],
    additionalProperties: false,
  };
  let guided;
  before(async () => {
    const tok = async (prompt) => (await postJson(server.url('/tokenize'), { prompt })).json.tokens;
    const [eos] = await tok('<eos>');
    // A script's tokens split where the pins split the text (the call opening, the value's fixed
    // opening), so that the reply lines up with the pinned positions.
    const call = async (...parts) => {
      const out = [];
      for (const p of parts) out.push(...(await tok(p)));
      return { tokens: [...out, eos] };
    };
    const s = {
      canvas_length: 32,
      canvas_delay_ms: 5,
      replies: [
        { when: 'weather in Paris', canvases: [await call('<|tool_call>', 'call:', 'get_weather{', '"location": "Paris"}', '<tool_call|>')] },
        { when: 'what time', canvases: [await call('<|tool_call>', 'call:', 'get_', 'time{"zone": "UTC"}', '<tool_call|>')] },
        { when: 'refuse tools', canvases: ['Sorry, I would rather not look that up for you today, try again later.<turn|>'] },
        { when: 'no json', canvases: ['Here is what you asked for, in prose rather than JSON.<turn|>'] },
        { when: 'good city', canvases: [await call('{"city": "', 'Paris', '", "population": ', '2100000', '}')] },
        { when: 'bad city', canvases: [await call('{"city": "', 'Lyon', '", "population": ', '"many"}')] },
        { when: 'json please', canvases: [await call('{', '"answer": 42, "unit": "none"}')] },
      ],
    };
    guided = await startServer({ modelDir: makeModelDir({ script: s }) });
  });
  after(async () => guided?.stop());

  test('a named function: the call is parsed, streamed or not', async () => {
    const body = { messages: user('weather in Paris?'), tools, tool_choice: { type: 'function', function: { name: 'get_weather' } } };
    const r = await postJson(guided.url(CHAT), body);
    assert.equal(r.status, 200, r.text);
    const m = r.json.choices[0].message;
    assert.equal(m.content, null);
    assert.equal(m.tool_calls.length, 1);
    assert.equal(m.tool_calls[0].function.name, 'get_weather');
    assert.deepEqual(JSON.parse(m.tool_calls[0].function.arguments), { location: 'Paris' });
    assert.equal(r.json.choices[0].finish_reason, 'tool_calls');
    assert.equal(r.json.usage.dgemma.retries, undefined);
    const s = await streamChat(guided, body);
    assert.equal(s.status, 200);
    assert.deepEqual(s.calls.map((c) => [c.name, JSON.parse(c.arguments)]), [['get_weather', { location: 'Paris' }]]);
    assert.equal(s.content, '');
    assert.equal(s.finish, 'tool_calls');
    assert.ok(s.done);
  });

  test('required: any of the tools', async () => {
    const r = await postJson(guided.url(CHAT), { messages: user('what time is it'), tools, tool_choice: 'required' });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.choices[0].message.tool_calls[0].function.name, 'get_time');
    assert.deepEqual(JSON.parse(r.json.choices[0].message.tool_calls[0].function.arguments), { zone: 'UTC' });
  });

  test('a reply that holds no call still comes back as a valid call (guided), not an error', async () => {
    const body = { messages: user('refuse tools'), tools, tool_choice: { type: 'function', function: { name: 'get_weather' } }, max_tokens: 64 };
    const r = await postJson(guided.url(CHAT), body);
    assert.equal(r.status, 200, r.text);
    const calls = r.json.choices[0].message.tool_calls;
    assert.equal(calls.length, 1);
    assert.equal(calls[0].function.name, 'get_weather');
    const args = JSON.parse(calls[0].function.arguments);
    assert.equal(typeof args, 'object');
    if ('location' in args) assert.equal(typeof args.location, 'string');
  });

  test('required without tools is a 400', async () => {
    const r = await postJson(guided.url(CHAT), { messages: user('x'), tool_choice: 'required' });
    assert.equal(r.status, 400);
    assert.equal(r.json.error.param, 'tool_choice');
  });

  test('json_object: prose becomes a JSON object (its valid prefix, closed)', async () => {
    const r = await postJson(guided.url(CHAT), { messages: user('no json'), response_format: { type: 'json_object' }, max_tokens: 64 });
    assert.equal(r.status, 200, r.text);
    const v = JSON.parse(r.json.choices[0].message.content);
    assert.equal(typeof v, 'object');
    assert.ok(!Array.isArray(v) && v !== null);
  });

  test('json_schema beyond the supported subset, or without room, is a 400', async () => {
    const fmt = (schema) => ({ type: 'json_schema', json_schema: { name: 'x', schema } });
    const cases = [
      [fmt({ type: 'object', patternProperties: {} }), 'response_format.json_schema.schema', /patternProperties/],
      [fmt({ type: 'object', properties: { a: { $ref: '#/x' } } }), 'response_format.json_schema.schema', /\$ref|#\/x/],
      [{ type: 'json_schema', json_schema: { name: 'x' } }, 'response_format.json_schema.schema', /required/],
    ];
    for (const [response_format, param, message] of cases) {
      const r = await postJson(guided.url(CHAT), { messages: user('x'), response_format });
      assert.equal(r.status, 400, r.text);
      assert.equal(r.json.error.param, param);
      assert.match(r.json.error.message, message);
    }
    const small = await postJson(guided.url(CHAT), {
      messages: user('x'),
      max_tokens: 4,  // the pinned opening {"a": " alone takes more
      response_format: fmt({ type: 'object', properties: { a: { type: 'string' } }, required: ['a'] }),
    });
    assert.equal(small.status, 400, small.text);
    assert.equal(small.json.error.param, 'max_tokens');
    assert.match(small.json.error.message, /shortest reply/);
  });

  test('json_object: the opening brace is pinned and the reply is JSON', async () => {
    const r = await postJson(guided.url(CHAT), { messages: user('json please'), response_format: { type: 'json_object' } });
    assert.equal(r.status, 200, r.text);
    assert.deepEqual(JSON.parse(r.json.choices[0].message.content), { answer: 42, unit: 'none' });
    const s = await streamChat(guided, { messages: user('json please'), response_format: { type: 'json_object' } });
    assert.deepEqual(JSON.parse(s.content), { answer: 42, unit: 'none' });
  });

  const body = (q) => ({ messages: user(q), response_format: { type: 'json_schema', json_schema: { name: 'city', strict: true, schema } } });

  test('the fixed opening is pinned, the value is written across canvases, the reply matches the schema', async () => {
    const r = await postJson(guided.url(CHAT), body('good city'));
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.choices[0].message.content, '{"city": "Paris", "population": 2100000}');
    assert.equal(r.json.choices[0].finish_reason, 'stop');
    const s = await streamChat(guided, body('good city'));
    assert.equal(s.content, '{"city": "Paris", "population": 2100000}');
  });

  test('a reply that breaks the schema keeps its valid prefix and is closed with the shortest completion', async () => {
    const r = await postJson(guided.url(CHAT), { ...body('bad city'), max_tokens: 64 });
    assert.equal(r.status, 200, r.text);
    const v = JSON.parse(r.json.choices[0].message.content);
    assert.deepEqual(Object.keys(v), ['city', 'population']);
    assert.equal(v.city, 'Lyon');
    assert.ok(Number.isInteger(v.population), r.json.choices[0].message.content);
  });
});
