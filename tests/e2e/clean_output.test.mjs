// What a user reads: no special token in content or reasoning (the parsers work on token ids), no
// runaway canvases of pad, and tool calls a client can trust (undeclared functions, unparsed or
// incomplete arguments are rejected, never returned as tool_calls and never left as raw markup), with
// the server started as `make run` starts it (both parsers on). The scripted runner commits the canvases
// a real DiffusionGemma reply would, special tokens included.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { makeModelDir, postJson, startServer, streamRaw } from './helpers.mjs';

const Q = '<|"|>';
const PAD = '<pad>';
const C = 8;  // canvas length: every reply spans canvases
const pads = (n) => PAD.repeat(n);
const script = {
  canvas_length: C,
  canvas_delay_ms: 5,
  replies: [
    // A story whose canvases end in pad and special tokens, as the model leaves them at temperature 2.
    { when: 'tell me a story', canvases: [`Once upon a time${pads(5)}${Q} there was${pads(3)}<|turn> a fox.${pads(2)}`] },
    // Two canvases of text, then canvas after canvas of pad: the answer must end at the first one.
    { when: 'runaway', canvases: [`One two three four five six${pads(C * 6)}`] },
    // A thought cut by max_tokens.
    { when: 'long thought', canvases: ['<|channel>thought\nI am thinking about this for a long while and more'] },
    { when: 'weather in Paris', canvases: [`<|tool_call>call:get_weather{city:${Q}Paris${Q}}<tool_call|><|tool_response>`] },
    { when: 'forgets the city', canvases: ['Let me look.<|tool_call>call:get_weather{}<tool_call|><|tool_response>'] },
    { when: 'misspells', canvases: [`<|tool_call>call:calculateather{city:${Q}Paris${Q}}<tool_call|><|tool_response>`] },
    { when: 'broken arguments', canvases: ['<|tool_call>call:get_weather{city Paris}<tool_call|>Sorry.<|tool_response>'] },
    { when: 'cut arguments', canvases: [`<|tool_call>call:get_weather{city:${Q}Par`] },
    // The tiny model's tool-call mistakes: no '{' after the name.
    { when: 'no body', canvases: ['<|tool_call>call:calculateather:ity:Paris}<tool_call|><|tool_response>'] },
    {
      when: 'one good one bad',
      canvases: [`<|tool_call>call:nope{}<tool_call|><|tool_call>call:get_weather{city:${Q}Oslo${Q}}<tool_call|><|tool_response>`],
    },
    // Pieces are tokenised apart: "<" then "|tool_call>..." are ordinary tokens that spell the marker.
    { when: 'spells a marker', canvases: ['The tag <', '|tool_call> is written as text here.'] },
    // Forced: the pinned opening "<|tool_call>call:" takes the first positions, the model writes the rest.
    { when: 'forced and forgetful', canvases: ['<|tool_call>call:get_weather{}<tool_call|><|tool_response>'] },
  ],
  default: { canvases: ['fine'] },
};
const tools = [
  {
    type: 'function',
    function: {
      name: 'get_weather',
      parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
    },
  },
];
const SPECIAL = /<pad>|<eos>|<\|turn>|<turn\|>|<\|"\|>|<\|tool_call>|<tool_call\|>|<\|channel>|<channel\|>|<\|tool_response>/;
const user = (content) => [{ role: 'user', content }];

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

async function stream(body) {
  const r = await streamRaw(server.url('/v1/chat/completions'), { ...body, stream: true });
  assert.equal(r.status, 200);
  const out = { content: '', reasoning: '', calls: [], rejected: [], finish: null, usage: null };
  for (const e of r.events) {
    if (e === '[DONE]') continue;
    if (e.usage) out.usage = e.usage;
    const ch = e.choices?.[0];
    if (!ch) continue;
    out.content += ch.delta?.content ?? '';
    out.reasoning += ch.delta?.reasoning_content ?? '';
    for (const tc of ch.delta?.tool_calls ?? []) out.calls.push(tc);
    out.rejected.push(...(ch.delta?.dgemma?.rejected_tool_calls ?? []));
    if (ch.finish_reason) out.finish = ch.finish_reason;
  }
  return out;
}

describe('no special tokens in the text', () => {
  test('content is clean with both parsers on, streamed or not; pads count in completion_tokens', async () => {
    const r = await client.chat.completions.create({ messages: user('hello, tell me a story'), max_tokens: 300 });
    const m = r.choices[0].message;
    assert.equal(m.content, 'Once upon a time there was a fox.');
    assert.equal(m.reasoning_content, null);
    assert.equal(r.choices[0].finish_reason, 'stop');
    // The reply's every token up to its EOS: the text's, 10 pads, the <|"|> and the <|turn>.
    const ids = (await postJson(server.url('/tokenize'), { prompt: script.replies[0].canvases[0] })).json.tokens;
    assert.equal(r.usage.completion_tokens, ids.length);
    const s = await stream({ messages: user('hello, tell me a story'), max_tokens: 300, stream_options: { include_usage: true } });
    assert.equal(s.content, m.content);
    assert.equal(s.usage.completion_tokens, r.usage.completion_tokens);
  });

  test('skip_special_tokens: false spells them out', async () => {
    const r = await postJson(server.url('/v1/chat/completions'), {
      messages: user('hello, tell me a story'),
      skip_special_tokens: false,
    });
    assert.equal(r.status, 200);
    assert.equal(r.json.choices[0].message.content, script.replies[0].canvases[0]);
  });

  test('text that spells a marker is text: the parsers go by token id', async () => {
    const r = await client.chat.completions.create({ messages: user('spells a marker'), tools });
    assert.equal(r.choices[0].message.content, 'The tag <|tool_call> is written as text here.');
    assert.equal(r.choices[0].message.tool_calls, undefined);
  });

  test('completions without parsers are clean too', async () => {
    const r = await postJson(server.url('/v1/completions'), { prompt: '<|turn>user\nhello, tell me a story<turn|>\n' });
    assert.equal(r.status, 200);
    assert.doesNotMatch(r.json.choices[0].text, SPECIAL);
  });
});

describe('no runaway canvases', () => {
  test('a canvas of nothing but pad ends the answer with stop; it is not returned', async () => {
    const r = await client.chat.completions.create({ messages: user('runaway') });
    assert.equal(r.choices[0].finish_reason, 'stop');
    assert.equal(r.choices[0].message.content, 'One two three four five six');
    // The text and its pads fill the first canvases; the first all-pad canvas ends it (not six more).
    const text = (await postJson(server.url('/tokenize'), { prompt: 'One two three four five six' })).json.tokens.length;
    const canvasesWithText = Math.ceil(text / C);
    assert.equal(r.usage.dgemma.canvases, canvasesWithText + 1);
    assert.equal(r.usage.completion_tokens, canvasesWithText * C);
    const s = await stream({ messages: user('runaway'), stream_options: { include_usage: true } });
    assert.equal(s.finish, 'stop');
    assert.equal(s.content, 'One two three four five six');
  });

  test('ignore_eos runs on to max_tokens', async () => {
    const r = await postJson(server.url('/v1/chat/completions'), { messages: user('runaway'), ignore_eos: true, max_tokens: 5 * C });
    assert.equal(r.json.choices[0].finish_reason, 'length');
    assert.equal(r.json.usage.completion_tokens, 5 * C);
  });

  test('the start-up line claims no max_new_tokens default', () => {
    assert.match(server.log(), /sampler defaults \(--generation-config auto\):.*default max_tokens: the rest of the context/);
    assert.doesNotMatch(server.log(), /max_new_tokens 256/);
  });

  test('a reasoning-only answer cut by max_tokens has content null', async () => {
    const r = await client.chat.completions.create({
      messages: user('long thought'),
      max_tokens: 6,
      chat_template_kwargs: { enable_thinking: true },
    });
    assert.equal(r.choices[0].finish_reason, 'length');
    assert.equal(r.choices[0].message.content, null);
    assert.ok(r.choices[0].message.reasoning_content.startsWith('I am'));
  });
});

describe('tool calls clients can trust', () => {
  test('a declared call with its required argument is returned', async () => {
    const r = await client.chat.completions.create({ messages: user('What is the weather in Paris?'), tools });
    const m = r.choices[0].message;
    assert.equal(r.choices[0].finish_reason, 'tool_calls');
    assert.equal(m.content, null);
    assert.equal(m.tool_calls.length, 1);
    assert.equal(m.tool_calls[0].function.name, 'get_weather');
    assert.deepEqual(JSON.parse(m.tool_calls[0].function.arguments), { city: 'Paris' });
    assert.equal(m.dgemma, undefined);
  });

  for (const [ask, name, reason, text] of [
    ['forgets the city', 'get_weather', /the required argument 'city' is missing/, 'Let me look.call:get_weather{}'],
    ['misspells', 'calculateather', /'calculateather' is not a function declared in 'tools'/, 'call:calculateather{city:Paris}'],
    ['broken arguments', 'get_weather', /not valid argument syntax/, 'call:get_weather{city Paris}Sorry.'],
    ['cut arguments', 'get_weather', /the output ended inside the arguments/, 'call:get_weather{city:Par'],
    ['no body', 'calculateather', /not a tool call/, 'call:calculateather:ity:Paris}'],
  ]) {
    test(`rejected (${ask}): no tool_calls, no raw markup, the reason in dgemma.rejected_tool_calls`, async () => {
      const body = { messages: user(ask), tools };
      const r = await postJson(server.url('/v1/chat/completions'), body);
      assert.equal(r.status, 200);
      const ch = r.json.choices[0];
      assert.equal(ch.message.tool_calls, undefined);
      assert.notEqual(ch.finish_reason, 'tool_calls');
      assert.equal(ch.message.content, text);
      assert.doesNotMatch(ch.message.content, SPECIAL);
      assert.equal(ch.message.dgemma.rejected_tool_calls.length, 1);
      assert.equal(ch.message.dgemma.rejected_tool_calls[0].name, name);
      assert.match(ch.message.dgemma.rejected_tool_calls[0].reason, reason);
      const s = await stream(body);
      assert.equal(s.calls.length, 0);
      assert.equal(s.content, text);
      assert.deepEqual(s.rejected, ch.message.dgemma.rejected_tool_calls);
    });
  }

  test('a good call beside a rejected one: the good one is returned, whole in one delta', async () => {
    const r = await client.chat.completions.create({ messages: user('one good one bad'), tools });
    const m = r.choices[0].message;
    assert.equal(r.choices[0].finish_reason, 'tool_calls');
    assert.equal(m.tool_calls.length, 1);
    assert.deepEqual(JSON.parse(m.tool_calls[0].function.arguments), { city: 'Oslo' });
    assert.equal(m.content, 'call:nope{}');
    const s = await stream({ messages: user('one good one bad'), tools });
    assert.equal(s.calls.length, 1);
    assert.equal(s.calls[0].index, 0);
    assert.match(s.calls[0].id, /^call_/);
    assert.deepEqual(JSON.parse(s.calls[0].function.arguments), { city: 'Oslo' });
  });

  test('a forced call the model leaves incomplete comes back completed to its schema (guided, no 422)', async () => {
    const r = await client.chat.completions.create({ messages: user('forced and forgetful'), tools, tool_choice: 'required', max_tokens: 64 });
    const calls = r.choices[0].message.tool_calls;
    assert.equal(calls.length, 1);
    const args = JSON.parse(calls[0].function.arguments);
    if (calls[0].function.name === 'get_weather') assert.equal(typeof args.city, 'string');
    assert.equal(r.choices[0].finish_reason, 'tool_calls');
  });
});
