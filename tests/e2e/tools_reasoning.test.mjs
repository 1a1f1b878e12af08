// Tool calls and reasoning through the gemma4 parsers, streamed and not. A random model never writes a
// tool call, so the scripted runner emits the canvases a real DiffusionGemma reply would commit.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { makeModelDir, postJson, startServer, streamRaw } from './helpers.mjs';

const Q = '<|"|>';
const script = {
  canvas_length: 8,  // every reply spans canvases: the parsers see markers and arguments cut anywhere
  canvas_delay_ms: 20,
  replies: [
    {
      when: 'both cities',
      canvases: [
        `<|channel>thought\nTwo lookups.<channel|><|tool_call>call:get_weather{location:${Q}Paris${Q}}<tool_call|>`,
        `<|tool_call>call:get_weather{location:${Q}Tokyo${Q},unit:${Q}celsius${Q}}<tool_call|><|tool_response>`,
      ],
    },
    {
      when: 'cloudy',
      // The July template leaves the prompt inside an open thought after a tool result (thinking on).
      canvases: ['The tool answered.<channel|>It is 18 C and cloudy in Paris.<turn|>'],
    },
    {
      when: 'weather',
      canvases: [
        '<|channel>thought\nThe user wants the weather',
        ` in Paris.<channel|><|tool_call>call:get_weather{location:${Q}Paris${Q},unit:`,
        `${Q}celsius${Q},days:3}<tool_call|><|tool_response>`,
      ],
    },
    { when: 'think hard', canvases: ['<|channel>thought\nLet me think', ' about it.<channel|>The answer is 42.<turn|>'] },
    { when: 'quick', canvases: ['<|channel>thought\n<channel|>Just the answer.<turn|>'] },
    { when: 'paren', canvases: ["<|tool_call>call:get_weather(location='Oslo', days=2)<tool_call|><|tool_response>"] },
  ],
};

const tools = [
  {
    type: 'function',
    function: {
      name: 'get_weather',
      description: 'Get current weather',
      parameters: {
        type: 'object',
        properties: { location: { type: 'string' }, unit: { type: 'string', enum: ['celsius', 'fahrenheit'] }, days: { type: 'integer' } },
        required: ['location'],
      },
    },
  },
];
const MARKERS = ['<|tool_call>', '<tool_call|>', '<|channel>', '<channel|>', '<|tool_response>', '<|"|>'];

let server;
let client;
before(async () => {
  server = await startServer({
    modelDir: makeModelDir({ script }),
    args: ['--enable-auto-tool-choice', '--tool-call-parser', 'gemma4', '--reasoning-parser', 'gemma4'],
  });
  client = server.client();
});
after(async () => server?.stop());

const user = (content) => [{ role: 'user', content }];
const thinking = { chat_template_kwargs: { enable_thinking: true } };

async function collectStream(params) {
  const stream = await client.chat.completions.create({ ...params, stream: true });
  const out = { content: '', reasoning: '', reasoningAlt: '', calls: [], finish: null, chunks: [] };
  for await (const c of stream) {
    out.chunks.push(c);
    const ch = c.choices[0];
    if (!ch) continue;
    const d = ch.delta ?? {};
    if (d.content) out.content += d.content;
    if (d.reasoning_content) out.reasoning += d.reasoning_content;
    if (d.reasoning) out.reasoningAlt += d.reasoning;
    for (const tc of d.tool_calls ?? []) {
      if (!out.calls[tc.index]) {
        assert.match(tc.id, /^call_/, 'the first delta of a call carries its id');
        assert.equal(tc.type, 'function');
        out.calls[tc.index] = { id: tc.id, name: tc.function.name, arguments: '' };
      }
      out.calls[tc.index].arguments += tc.function.arguments ?? '';
    }
    if (ch.finish_reason) out.finish = ch.finish_reason;
  }
  return out;
}

describe('tool calls', () => {
  test('non-streaming: parsed call, reasoning in both fields, finish_reason tool_calls', async () => {
    const r = await client.chat.completions.create({ messages: user('weather in Paris?'), tools, ...thinking });
    const m = r.choices[0].message;
    assert.equal(r.choices[0].finish_reason, 'tool_calls');
    assert.equal(m.content, null);
    assert.equal(m.reasoning_content, 'The user wants the weather in Paris.');
    assert.equal(m.reasoning, m.reasoning_content);
    assert.equal(m.tool_calls.length, 1);
    assert.match(m.tool_calls[0].id, /^call_[A-Za-z0-9]{24}$/);
    assert.equal(m.tool_calls[0].type, 'function');
    assert.equal(m.tool_calls[0].function.name, 'get_weather');
    assert.deepEqual(JSON.parse(m.tool_calls[0].function.arguments), { location: 'Paris', unit: 'celsius', days: 3 });
  });

  test('streaming: same call and reasoning, never a raw marker in content', async () => {
    const s = await collectStream({ messages: user('weather in Paris?'), tools, ...thinking });
    assert.equal(s.finish, 'tool_calls');
    assert.equal(s.reasoning, 'The user wants the weather in Paris.');
    assert.equal(s.reasoningAlt, s.reasoning);
    assert.equal(s.content, '');
    for (const mk of MARKERS) for (const c of s.chunks) assert.ok(!JSON.stringify(c.choices[0]?.delta?.content ?? '').includes(mk));
    assert.equal(s.calls.length, 1);
    assert.equal(s.calls[0].name, 'get_weather');
    assert.deepEqual(JSON.parse(s.calls[0].arguments), { location: 'Paris', unit: 'celsius', days: 3 });
  });

  test('two calls in one reply; parallel_tool_calls=false keeps the first', async () => {
    const r = await client.chat.completions.create({ messages: user('weather in both cities'), tools, ...thinking });
    const calls = r.choices[0].message.tool_calls;
    assert.deepEqual(calls.map((c) => JSON.parse(c.function.arguments)), [
      { location: 'Paris' },
      { location: 'Tokyo', unit: 'celsius' },
    ]);
    assert.notEqual(calls[0].id, calls[1].id);
    const s = await collectStream({ messages: user('weather in both cities'), tools, ...thinking });
    assert.deepEqual(s.calls.map((c) => JSON.parse(c.arguments)), calls.map((c) => JSON.parse(c.function.arguments)));
    const one = await client.chat.completions.create({
      messages: user('weather in both cities'),
      tools,
      parallel_tool_calls: false,
      ...thinking,
    });
    assert.equal(one.choices[0].message.tool_calls.length, 1);
  });

  test('the malformed paren form DiffusionGemma emits is recovered', async () => {
    const r = await client.chat.completions.create({ messages: user('paren call please'), tools });
    const calls = r.choices[0].message.tool_calls;
    assert.equal(calls.length, 1);
    assert.deepEqual(JSON.parse(calls[0].function.arguments), { location: 'Oslo', days: 2 });
  });

  test('a full round trip: tool call in history (arguments as a JSON string) + tool result', async () => {
    const first = await client.chat.completions.create({ messages: user('weather in Paris?'), tools, ...thinking });
    const call = first.choices[0].message.tool_calls[0];
    const messages = [
      ...user('weather in Paris?'),
      { role: 'assistant', content: null, tool_calls: [call] },
      { role: 'tool', tool_call_id: call.id, content: '{"temp": 18, "sky": "cloudy"}' },
    ];
    const r = await client.chat.completions.create({ messages, tools, ...thinking });
    assert.equal(r.choices[0].message.content, 'It is 18 C and cloudy in Paris.');
    assert.equal(r.choices[0].message.reasoning_content, 'The tool answered.');
    assert.equal(r.choices[0].finish_reason, 'stop');
    const bad = await postJson(server.url('/v1/chat/completions'), {
      messages: [...user('x'), { role: 'assistant', tool_calls: [{ type: 'function', function: { name: 'f', arguments: '{not json' } }] }],
    });
    assert.equal(bad.status, 400);
    assert.equal(bad.json.error.param, 'messages[1].tool_calls[0].function.arguments');
  });

  test('tool_choice none: tools are shown to the model but nothing is parsed', async () => {
    const r = await client.chat.completions.create({ messages: user('weather in Paris?'), tools, tool_choice: 'none', ...thinking });
    assert.equal(r.choices[0].finish_reason, 'stop');
    assert.equal(r.choices[0].message.tool_calls, undefined);
    assert.ok(r.choices[0].message.content.includes('call:get_weather'));
  });

  // Forced calls (required / named) work: tests/e2e/pinned_forms.test.mjs.
  test('tool_choice naming a missing tool, or without tools, is a 400 naming tool_choice', async () => {
    for (const body of [
      { messages: user('x'), tool_choice: 'required' },
      { messages: user('x'), tools, tool_choice: { type: 'function', function: { name: 'nope' } } },
      { messages: user('x'), tool_choice: 'auto' },
      { messages: user('x'), tools, tool_choice: 'sometimes' },
    ]) {
      const r = await postJson(server.url('/v1/chat/completions'), body);
      assert.equal(r.status, 400, JSON.stringify(body));
      assert.equal(r.json.error.param, 'tool_choice');
      assert.equal(r.json.error.type, 'invalid_request_error');
    }
  });
});

describe('reasoning', () => {
  test('thought split from the answer across canvases, streamed and not', async () => {
    const r = await client.chat.completions.create({ messages: user('think hard'), ...thinking });
    assert.equal(r.choices[0].message.reasoning_content, 'Let me think about it.');
    assert.equal(r.choices[0].message.content, 'The answer is 42.');
    const s = await collectStream({ messages: user('think hard'), ...thinking });
    assert.equal(s.reasoning, 'Let me think about it.');
    assert.equal(s.content, 'The answer is 42.');
    assert.equal(s.finish, 'stop');
  });

  test('thinking off: the empty thought block DiffusionGemma still writes is dropped', async () => {
    const r = await client.chat.completions.create({ messages: user('quick') });
    assert.equal(r.choices[0].message.content, 'Just the answer.');
    assert.equal(r.choices[0].message.reasoning_content, null);
    const s = await collectStream({ messages: user('quick') });
    assert.equal(s.content, 'Just the answer.');
    assert.equal(s.reasoning, '');
  });

  test('enable_thinking reaches the template (<|think|> in the prompt); reasoning_effort maps to it', async () => {
    const tok = async (extra) => (await postJson(server.url('/tokenize'), { messages: user('hi'), ...extra })).json.tokens;
    const THINK = 98;
    assert.ok((await tok(thinking)).includes(THINK));
    assert.ok(!(await tok({})).includes(THINK));
    assert.ok((await tok({ reasoning_effort: 'high' })).includes(THINK));
    assert.ok(!(await tok({ reasoning_effort: 'none' })).includes(THINK));
  });

  test('chat_template_kwargs: scalar values of bounded size; keys the template does not read are ignored', async () => {
    const ok = await postJson(server.url('/v1/chat/completions'), { messages: user('hi'), chat_template_kwargs: { evil: true } });
    assert.equal(ok.status, 200);
    for (const kw of [{ enable_thinking: { nested: 1 } }, { enable_thinking: 'x'.repeat(5000) }]) {
      const r = await postJson(server.url('/v1/chat/completions'), { messages: user('hi'), chat_template_kwargs: kw });
      assert.equal(r.status, 400);
      assert.match(r.json.error.param, /^chat_template_kwargs/);
    }
  });
});

test('raw stream of a tool call ends with finish_reason tool_calls and [DONE]', async () => {
  const r = await streamRaw(server.url('/v1/chat/completions'), { messages: user('weather in Paris?'), tools, stream: true, ...thinking });
  const data = r.events.filter((e) => e !== '[DONE]');
  assert.equal(data.at(-1).choices[0].finish_reason, 'tool_calls');
  assert.equal(r.events.at(-1), '[DONE]');
  for (const mk of MARKERS) assert.ok(!data.some((e) => (e.choices[0]?.delta?.content ?? '').includes(mk)), mk);
});
