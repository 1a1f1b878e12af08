// The OpenAI Responses API (POST /v1/responses) through the official openai client: text and message
// input, instructions, streaming events (sequence numbers, the SDK's own stream accumulator), function
// tools with their results, reasoning items, previous_response_id, store, retrieve / delete, usage,
// max_output_tokens, and the 400s of bad requests.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { makeModelDir, postJson, startServer, streamRaw } from './helpers.mjs';

const Q = '<|"|>';
const script = {
  canvas_length: 8,
  canvas_delay_ms: 10,
  replies: [
    { when: ['weather', '18 C'], canvases: ['It is 18 C in Paris.<turn|>'] },
    { when: 'weather', canvases: [`<|tool_call>call:get_weather{city:${Q}Paris${Q}}<tool_call|><|tool_response>`] },
    { when: 'think', canvases: ['<|channel>thought\nTwo and two.<channel|>The answer is 4.<turn|>'] },
    { when: 'long', canvases: ['one two three four five six seven eight nine ten eleven twelve<turn|>'] },
    { when: 'hello', canvases: ['Hi there, friend!<turn|>'] },
  ],
  default: { random_canvases: 1 },
};
const tools = [
  {
    type: 'function',
    name: 'get_weather',
    description: 'Current weather',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  },
];

let server;
let client;
before(async () => {
  server = await startServer({
    modelDir: makeModelDir({ script }),
    args: ['--served-model-name', 'dg', '--enable-auto-tool-choice', '--tool-call-parser', 'gemma4', '--reasoning-parser', 'gemma4'],
  });
  client = server.client();
});
after(async () => server?.stop());

const tokenCount = async (messages, extra = {}) => (await postJson(server.url('/tokenize'), { messages, ...extra })).json.count;

describe('responses: text', () => {
  test('string input with instructions: a message item, usage, status completed', async () => {
    const r = await client.responses.create({ model: 'dg', input: 'hello', instructions: 'Be kind.' });
    assert.match(r.id, /^resp_[0-9a-f]{48}$/);
    assert.equal(r.object, 'response');
    assert.equal(r.status, 'completed');
    assert.equal(r.model, 'dg');
    assert.equal(r.output_text, 'Hi there, friend!');
    assert.equal(r.output.length, 1);
    assert.equal(r.output[0].type, 'message');
    assert.equal(r.output[0].role, 'assistant');
    assert.deepEqual(r.output[0].content, [{ type: 'output_text', text: 'Hi there, friend!', annotations: [], logprobs: [] }]);
    assert.equal(r.instructions, 'Be kind.');
    const prompt = await tokenCount([{ role: 'system', content: 'Be kind.' }, { role: 'user', content: 'hello' }]);
    assert.equal(r.usage.input_tokens, prompt, 'the instructions are the system message');
    const out = (await postJson(server.url('/tokenize'), { prompt: 'Hi there, friend!' })).json.count;
    assert.equal(r.usage.output_tokens, out);
    assert.equal(r.usage.total_tokens, prompt + out);
    assert.equal(r.usage.output_tokens_details.reasoning_tokens, 0);
    assert.equal(r.usage.input_tokens_details.cached_tokens >= 0, true);
  });

  test('message items with content parts; the model defaults to the served name', async () => {
    const r = await client.responses.create({
      input: [{ role: 'user', content: [{ type: 'input_text', text: 'hel' }, { type: 'input_text', text: 'lo' }] }],
    });
    assert.equal(r.output_text, 'Hi there, friend!');
    assert.equal(r.model, 'dg');
  });

  test('max_output_tokens cuts the answer: status incomplete, reason max_output_tokens', async () => {
    const r = await client.responses.create({ input: 'long story', max_output_tokens: 3 });
    assert.equal(r.status, 'incomplete');
    assert.deepEqual(r.incomplete_details, { reason: 'max_output_tokens' });
    assert.equal(r.usage.output_tokens, 3);
    assert.equal(r.max_output_tokens, 3);
  });

  test('reasoning becomes a reasoning item before the message', async () => {
    const r = await client.responses.create({ input: 'think: 2 + 2?' });
    assert.deepEqual(r.output.map((o) => o.type), ['reasoning', 'message']);
    assert.deepEqual(r.output[0].content, [{ type: 'reasoning_text', text: 'Two and two.' }]);
    assert.deepEqual(r.output[0].summary, []);
    assert.equal(r.output_text, 'The answer is 4.');
    const t = (await postJson(server.url('/tokenize'), { prompt: 'Two and two.' })).json.count;
    assert.equal(r.usage.output_tokens_details.reasoning_tokens, t);
  });
});

describe('responses: streaming', () => {
  test('events in order, sequence numbers from 0, the final response equals the non-streamed one', async () => {
    const stream = await client.responses.create({ input: 'think: 2 + 2?', stream: true });
    const events = [];
    for await (const e of stream) events.push(e);
    events.forEach((e, i) => assert.equal(e.sequence_number, i, `${e.type} at ${i}`));
    const types = events.map((e) => e.type);
    assert.deepEqual(types.slice(0, 2), ['response.created', 'response.in_progress']);
    assert.equal(types.at(-1), 'response.completed');
    assert.equal(events[0].response.status, 'in_progress');
    assert.deepEqual(events[0].response.output, []);
    const collapsed = types.filter((t, i) => t !== types[i - 1]);
    assert.deepEqual(collapsed, [
      'response.created', 'response.in_progress',
      'response.output_item.added', 'response.content_part.added', 'response.reasoning_text.delta',
      'response.reasoning_text.done', 'response.content_part.done', 'response.output_item.done',
      'response.output_item.added', 'response.content_part.added', 'response.output_text.delta',
      'response.output_text.done', 'response.content_part.done', 'response.output_item.done', 'response.completed',
    ]);
    const final = events.at(-1).response;
    const text = events.filter((e) => e.type === 'response.output_text.delta').map((e) => e.delta).join('');
    assert.equal(text, 'The answer is 4.');
    assert.equal(final.output[1].content[0].text, text);
    const deltaIds = new Set(events.filter((e) => e.type === 'response.output_text.delta').map((e) => e.item_id));
    assert.deepEqual([...deltaIds], [final.output[1].id]);
    assert.equal(final.status, 'completed');
    assert.ok(final.usage.output_tokens > 0);
  });

  test("the SDK's stream helper accumulates the events into the final response", async () => {
    const stream = client.responses.stream({ input: 'hello', instructions: 'Be kind.' });
    let deltas = '';
    stream.on('response.output_text.delta', (e) => (deltas += e.delta));
    const r = await stream.finalResponse();
    assert.equal(deltas, 'Hi there, friend!');
    assert.equal(r.output_text, 'Hi there, friend!');
    assert.equal(r.status, 'completed');
    const withReasoning = await client.responses.stream({ input: 'think: 2 + 2?' }).finalResponse();
    assert.deepEqual(withReasoning.output[0].content, [{ type: 'reasoning_text', text: 'Two and two.' }]);
    assert.equal(withReasoning.output_text, 'The answer is 4.');
  });

  test('the raw stream: named events, no [DONE], pings pass as comments only', async () => {
    const raw = await streamRaw(server.url('/v1/responses'), { input: 'hello', stream: true });
    assert.equal(raw.status, 200);
    assert.match(raw.headers.get('content-type'), /^text\/event-stream/);
    assert.ok(!raw.events.includes('[DONE]'));
    for (const block of raw.text.split('\n\n').filter(Boolean)) {
      if (block.startsWith(':')) continue;
      const [ev, data] = block.split('\n');
      assert.equal(ev.slice('event: '.length), JSON.parse(data.slice('data: '.length)).type);
    }
  });
});

describe('responses: tools and conversation state', () => {
  test('a function call, its result via previous_response_id, then the answer', async () => {
    const first = await client.responses.create({ input: 'What is the weather in Paris?', tools });
    assert.equal(first.status, 'completed');
    const calls = first.output.filter((o) => o.type === 'function_call');
    assert.equal(calls.length, 1);
    assert.equal(calls[0].name, 'get_weather');
    assert.deepEqual(JSON.parse(calls[0].arguments), { city: 'Paris' });
    assert.match(calls[0].call_id, /^call_/);
    assert.match(calls[0].id, /^fc_/);
    assert.equal(first.output_text, '');

    const second = await client.responses.create({
      previous_response_id: first.id,
      input: [{ type: 'function_call_output', call_id: calls[0].call_id, output: '18 C, cloudy' }],
      tools,
    });
    assert.equal(second.output_text, 'It is 18 C in Paris.');
    assert.equal(second.previous_response_id, first.id);
    // The prompt held the whole conversation: user turn, the call, its result.
    const chatTools = tools.map(({ type, ...fn }) => ({ type, function: fn }));
    const expected = await tokenCount([
      { role: 'user', content: 'What is the weather in Paris?' },
      { role: 'assistant', content: null, tool_calls: [{ id: calls[0].call_id, type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] },
      { role: 'tool', tool_call_id: calls[0].call_id, name: 'get_weather', content: '18 C, cloudy' },
    ], { tools: chatTools });
    assert.equal(second.usage.input_tokens, expected);
  });

  test('the same conversation given whole as input items (no stored state)', async () => {
    const r = await client.responses.create({
      store: false,
      tools,
      input: [
        { role: 'user', content: 'What is the weather in Paris?' },
        { type: 'function_call', call_id: 'call_x1', name: 'get_weather', arguments: '{"city":"Paris"}' },
        { type: 'function_call_output', call_id: 'call_x1', output: '18 C' },
      ],
    });
    assert.equal(r.output_text, 'It is 18 C in Paris.');
    assert.equal(r.store, false);
    await assert.rejects(client.responses.retrieve(r.id), (e) => e.status === 404);
  });

  test('streamed function call: item added, argument deltas, done', async () => {
    const stream = await client.responses.create({ input: 'weather please', tools, stream: true });
    const events = [];
    for await (const e of stream) events.push(e);
    const added = events.find((e) => e.type === 'response.output_item.added');
    assert.equal(added.item.type, 'function_call');
    assert.equal(added.item.name, 'get_weather');
    const args = events.filter((e) => e.type === 'response.function_call_arguments.delta').map((e) => e.delta).join('');
    const done = events.find((e) => e.type === 'response.function_call_arguments.done');
    assert.equal(done.arguments, args);
    assert.deepEqual(JSON.parse(args), { city: 'Paris' });
    assert.equal(events.at(-1).response.output[0].arguments, args);
  });

  test('previous_response_id continues the conversation: the earlier turns are in the prompt', async () => {
    const first = await client.responses.create({ input: 'hello', instructions: 'Be kind.' });
    const second = await client.responses.create({ input: 'hello again', previous_response_id: first.id });
    const expected = await tokenCount([
      { role: 'user', content: 'hello' },
      { role: 'assistant', content: 'Hi there, friend!' },
      { role: 'user', content: 'hello again' },
    ]);
    assert.equal(second.usage.input_tokens, expected, 'the previous instructions are not carried over');
  });

  test('retrieve and delete a stored response', async () => {
    const r = await client.responses.create({ input: 'hello' });
    const got = await client.responses.retrieve(r.id);
    assert.equal(got.id, r.id);
    assert.deepEqual(got.output, r.output);
    assert.deepEqual(got.usage, r.usage);
    assert.equal(got.output_text, 'Hi there, friend!');
    await client.responses.delete(r.id);
    await assert.rejects(client.responses.retrieve(r.id), (e) => e.status === 404);
    const again = await fetch(server.url(`/v1/responses/${r.id}`), { method: 'DELETE' });
    assert.equal(again.status, 404);
  });
});

describe('responses: bad requests are 400s naming the field', () => {
  const cases = [
    [{}, 'input'],
    [{ input: 5 }, 'input'],
    [{ input: [] }, 'input'],
    [{ input: [{ role: 'user', content: [{ type: 'input_file', file_id: 'file-1' }] }] }, 'input[0].content[0].type'],
    [{ input: [{ type: 'function_call_output', output: 'x' }] }, 'input[0].call_id'],
    [{ input: 'x', tools: [{ type: 'web_search' }] }, 'tools[0].type'],
    [{ input: 'x', previous_response_id: 'resp_nope' }, 'previous_response_id'],
    [{ input: 'x', max_output_tokens: 0 }, 'max_output_tokens'],
    [{ input: 'x', max_output_tokens: 1e9 }, 'input'],
    [{ input: 'x', temperature: 9 }, 'temperature'],
    [{ input: 'x', text: { format: { type: 'grammar' } } }, 'text.format'],
    [{ input: 'x', tool_choice: 'required' }, 'tool_choice'],
    [{ input: 'x', background: true }, 'background'],
    [{ input: 'x', model: 'other' }, 'model'],
  ];
  for (const [body, param] of cases) {
    test(JSON.stringify(body), async () => {
      const r = await postJson(server.url('/v1/responses'), body);
      assert.equal(r.status, param === 'model' ? 404 : 400, r.text);
      assert.equal(r.json.error.param, param, r.text);
      if (param === 'previous_response_id') assert.equal(r.json.error.code, 'previous_response_not_found');
    });
  }

  test('the client sees BadRequestError, and the server keeps serving', async () => {
    await assert.rejects(client.responses.create({ input: [] }), (e) => e.status === 400 && e.constructor.name === 'BadRequestError');
    const r = await client.responses.create({ input: 'hello' });
    assert.equal(r.output_text, 'Hi there, friend!');
  });
});
