// The pinned chat forms through the server: assistant prefill (continue_final_message), forced tool
// calls (tool_choice required / named), response_format json_object and json_schema, with the retry
// and model_error (422) paths and the 400s. The scripted runner sits behind the real engine, so pins go
// through the engine's mechanism: pinned positions hold the pinned tokens, and an EOS in a free
// position before the last pin is dropped (a script writes a JSON value, then EOS to the end of its gap).
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { makeModelDir, postJson, startServer, streamRaw } from './helpers.mjs';

const Q = '<|"|>';
const script = {
  canvas_length: 32,
  canvas_delay_ms: 5,
  replies: [
    { when: 'tell a story', canvases: ['Once upon a time', ' there was a dragon.<turn|>'] },
    { when: 'weather in Paris', canvases: [`<|tool_call>call:get_weather{location:${Q}Paris${Q}}<tool_call|>`] },
    { when: 'what time', canvases: [`<|tool_call>call:get_time{zone:${Q}UTC${Q}}<tool_call|>`] },
    { when: 'refuse tools', canvases: ['Sorry, I would rather not look that up for you today, try again later.<turn|>'] },
    { when: 'no json', canvases: ['Here is what you asked for, in prose rather than JSON.<turn|>'] },
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

describe('forced tool calls', () => {
  test('a named function: the opening and the name are pinned, the call is parsed', async () => {
    const body = { messages: user('weather in Paris?'), tools, tool_choice: { type: 'function', function: { name: 'get_weather' } } };
    const r = await postJson(server.url(CHAT), body);
    assert.equal(r.status, 200, r.text);
    const m = r.json.choices[0].message;
    assert.equal(m.content, null);
    assert.equal(m.tool_calls.length, 1);
    assert.equal(m.tool_calls[0].function.name, 'get_weather');
    assert.deepEqual(JSON.parse(m.tool_calls[0].function.arguments), { location: 'Paris' });
    assert.equal(r.json.choices[0].finish_reason, 'tool_calls');
    assert.equal(r.json.usage.dgemma.retries, 0);
    const s = await streamChat(server, body);
    assert.equal(s.status, 200);
    assert.deepEqual(s.calls.map((c) => [c.name, JSON.parse(c.arguments)]), [['get_weather', { location: 'Paris' }]]);
    assert.equal(s.content, '');
    assert.equal(s.finish, 'tool_calls');
    assert.ok(s.done);
  });

  test('required: any of the tools', async () => {
    const r = await postJson(server.url(CHAT), { messages: user('what time is it'), tools, tool_choice: 'required' });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.choices[0].message.tool_calls[0].function.name, 'get_time');
  });

  test('a reply that never holds a valid call is retried, then a 422 model_error (not retried by clients)', async () => {
    const body = { messages: user('refuse tools'), tools, tool_choice: { type: 'function', function: { name: 'get_weather' } } };
    const r = await postJson(server.url(CHAT), body);
    assert.equal(r.status, 422, r.text);
    assert.equal(r.json.error.type, 'model_error');
    assert.equal(r.json.error.code, 'invalid_model_output');
    assert.match(r.json.error.message, /invalid content after 3 attempts/);
    const s = await streamChat(server, body);
    assert.equal(s.status, 200);
    assert.equal(s.errors.length, 1);
    assert.equal(s.errors[0].type, 'model_error');
    assert.equal(s.done, false);  // an error ends the stream without [DONE]
    assert.equal(s.content, '');  // nothing of a rejected attempt was streamed
  });

  test('required without tools is a 400', async () => {
    const r = await postJson(server.url(CHAT), { messages: user('x'), tool_choice: 'required' });
    assert.equal(r.status, 400);
    assert.equal(r.json.error.param, 'tool_choice');
  });
});

describe('response_format', () => {
  test('json_object: prose is retried, then a 422 model_error', async () => {
    const r = await postJson(server.url(CHAT), { messages: user('no json'), response_format: { type: 'json_object' } });
    assert.equal(r.status, 422, r.text);
    assert.equal(r.json.error.type, 'model_error');
    assert.match(r.json.error.message, /not valid JSON/);
  });

  test('json_schema beyond the supported subset, or without room, is a 400', async () => {
    const fmt = (schema) => ({ type: 'json_schema', json_schema: { name: 'x', schema } });
    const cases = [
      [fmt({ type: 'string', pattern: '^a' }), 'response_format.json_schema.schema', /'pattern'/],
      [fmt({ anyOf: [{ type: 'string' }] }), 'response_format.json_schema.schema', /'anyOf'/],
      [fmt({ type: 'object', properties: { a: { $ref: '#/x' } } }), 'response_format.json_schema.schema.properties.a', /'\$ref'/],
      [{ type: 'json_schema', json_schema: { name: 'x' } }, 'response_format.json_schema.schema', /required/],
    ];
    for (const [response_format, param, message] of cases) {
      const r = await postJson(server.url(CHAT), { messages: user('x'), response_format });
      assert.equal(r.status, 400, r.text);
      assert.equal(r.json.error.param, param);
      assert.match(r.json.error.message, message);
    }
    const small = await postJson(server.url(CHAT), {
      messages: user('x'),
      max_tokens: 8,
      response_format: fmt({ type: 'object', properties: { a: { type: 'string' } }, required: ['a'] }),
    });
    assert.equal(small.status, 400, small.text);
    assert.equal(small.json.error.param, 'max_tokens');
    assert.match(small.json.error.message, /pinned layout/);
  });
});

describe('response_format with pinned structure (replies written token by token)', () => {
  // {"city": "[64]", "population": [12]} -- docs/API.md gives the rooms.
  const schema = {
    type: 'object',
    properties: { city: { type: 'string' }, population: { type: 'integer' } },
    required: ['city', 'population'],
    additionalProperties: false,
  };
  let schemaServer;
  before(async () => {
    const tok = async (prompt) => (await postJson(server.url('/tokenize'), { prompt })).json.tokens;
    const [eos] = await tok('<eos>');
    // What a model writes into the canvas: each value in its gap, the rest of the gap EOS (dropped).
    const fill = async (text, room) => {
      const t = await tok(text);
      return [...t, ...Array(room - t.length).fill(eos)];
    };
    const canvas = (parts) => parts.flat();
    const good = canvas([await tok('{"city": "'), await fill('Paris', 64), await tok('", "population": '),
                         await fill('2100000', 12), await tok('}'), [eos]]);
    const bad = canvas([await tok('{"city": "'), await fill('Lyon', 64), await tok('", "population": '),
                        await fill('"many"', 12), await tok('}'), [eos]]);
    const s = {
      canvas_length: 64,
      canvas_delay_ms: 5,
      replies: [
        { when: 'good city', canvases: [{ tokens: good }] },
        { when: 'bad city', canvases: [{ tokens: bad }] },
        // '{"' is one token: a model that sees '{' pinned writes the quote as a token of its own.
        { when: 'json please', canvases: [{ tokens: [...(await tok('{')), ...(await tok('"answer": 42, "unit": "none"}')), eos] }] },
      ],
    };
    schemaServer = await startServer({ modelDir: makeModelDir({ script: s }) });
  });
  after(async () => schemaServer?.stop());

  test('json_object: the opening brace is pinned and the reply is JSON', async () => {
    const r = await postJson(schemaServer.url(CHAT), { messages: user('json please'), response_format: { type: 'json_object' } });
    assert.equal(r.status, 200, r.text);
    assert.deepEqual(JSON.parse(r.json.choices[0].message.content), { answer: 42, unit: 'none' });
    const s = await streamChat(schemaServer, { messages: user('json please'), response_format: { type: 'json_object' } });
    assert.deepEqual(JSON.parse(s.content), { answer: 42, unit: 'none' });
  });


  const body = (q) => ({ messages: user(q), response_format: { type: 'json_schema', json_schema: { name: 'city', strict: true, schema } } });

  test('fixed keys are pinned, the gaps close up, the reply matches the schema', async () => {
    const r = await postJson(schemaServer.url(CHAT), body('good city'));
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.choices[0].message.content, '{"city": "Paris", "population": 2100000}');
    assert.equal(r.json.choices[0].finish_reason, 'stop');
    const s = await streamChat(schemaServer, body('good city'));
    assert.equal(s.content, '{"city": "Paris", "population": 2100000}');
  });

  test('a reply that breaks the schema is retried, then a 422 model_error naming the violation', async () => {
    const r = await postJson(schemaServer.url(CHAT), body('bad city'));
    assert.equal(r.status, 422, r.text);
    assert.equal(r.json.error.type, 'model_error');
    assert.match(r.json.error.message, /\$\.population: expected an integer/);
  });
});
