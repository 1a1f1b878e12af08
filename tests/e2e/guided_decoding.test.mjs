// Guided decoding on the canvas (docs/API.md "Guided decoding on the canvas"), as a property: random
// JSON Schemas of the supported subset with random seeds, on the shipped model (models/tiny-code, its
// own 8k tokenizer) and on the tiny fixture (the real 262k Gemma vocabulary, random weights). Every
// reply must parse and validate against its schema with an independent validator (ajv), with no retry
// (there are none: a constrained reply is valid by construction). Also: regex and choice forms, forced
// tool calls, the 400s, and the official client's chat.completions.parse() with a zod schema.
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import Ajv from 'ajv';
import addFormats from 'ajv-formats';
import OpenAI from 'openai';
import { zodResponseFormat } from 'openai/helpers/zod';
import { z } from 'zod';
import { makeModelDir, startServer, tinyConfig, GENERATION_CONFIG, postJson } from './helpers.mjs';

const CHAT = '/v1/chat/completions';
const COMPLETIONS = '/v1/completions';
const TINY_CODE = path.join(process.env.DGEMMA_SOURCE_DIR, 'models', 'tiny-code');

// A small deterministic generator (mulberry32).
function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

// Random schemas of the subset: types and type lists, enum, const, anyOf / oneOf, objects with
// required and optional keys, additionalProperties false, arrays with items and bounds, $ref / $defs,
// string lengths, patterns and formats. Kept small: the shortest value must fit in max_tokens.
function schemaGen(rand) {
  const pick = (xs) => xs[Math.floor(rand() * xs.length)];
  const int = (lo, hi) => lo + Math.floor(rand() * (hi - lo + 1));
  const defs = {};
  function leaf() {
    switch (int(0, 10)) {
      case 0: return { type: 'string' };
      case 1: return { type: 'string', minLength: int(0, 2), maxLength: int(3, 6) };
      case 2: return { type: 'string', pattern: pick(['^[a-z]{1,4}$', '^[0-9]+$', '^(yes|no)$']) };
      case 3: return { type: 'string', format: pick(['date', 'uuid', 'email', 'date-time']) };
      case 4: return { type: 'integer' };
      case 5: return { type: 'number' };
      case 6: return { type: 'boolean' };
      case 7: return { type: ['string', 'null'] };
      case 8: return { enum: pick([['red', 'green'], [1, 2, 3], ['a', null, true]]) };
      case 9: return { const: pick(['fixed', 7, false]) };
      default: return { type: 'null' };
    }
  }
  function value(depth) {
    if (depth >= 2) return leaf();
    switch (int(0, 6)) {
      case 0: return object(depth + 1);
      case 1: {
        const s = { type: 'array', items: value(depth + 1) };
        if (rand() < 0.5) s.maxItems = int(1, 3);
        if (rand() < 0.3) s.minItems = 1;
        return s;
      }
      case 2: return { anyOf: [value(depth + 1), { type: 'null' }] };  // Pydantic Optional
      case 3: return { oneOf: [{ type: 'integer' }, { type: 'boolean' }] };
      case 4: {
        const name = `D${Object.keys(defs).length}`;
        defs[name] = {};  // the name is taken before the definition is made (no recursion)
        defs[name] = object(depth + 1);
        return { $ref: `#/$defs/${name}` };
      }
      default: return leaf();
    }
  }
  function object(depth) {
    const n = int(1, 3);
    const properties = {};
    const required = [];
    for (let i = 0; i < n; i++) {
      const key = pick(['id', 'name', 'tags', 'ok', 'when', 'count', 'note']) + i;
      properties[key] = value(depth);
      if (rand() < 0.6) required.push(key);
    }
    const s = { type: 'object', properties, required };
    if (rand() < 0.7) s.additionalProperties = false;
    return s;
  }
  const root = object(0);
  if (Object.keys(defs).length) root.$defs = defs;
  return root;
}

function validator() {
  const ajv = new Ajv({ strict: false, allErrors: false });
  addFormats(ajv);
  return ajv;
}

// Runs `count` random schemas with `concurrency` requests in flight; returns the failures.
async function property(server, { count, seed, maxTokens, concurrency, messages, steps }) {
  const ajv = validator();
  const rand = rng(seed);
  const jobs = [];
  for (let i = 0; i < count; i++) jobs.push({ i, schema: schemaGen(rand), seed: Math.floor(rand() * 1e9) });
  const failures = [];
  let next = 0;
  let ok = 0;
  async function worker() {
    while (next < jobs.length) {
      const job = jobs[next++];
      const ask = (max_tokens) => postJson(server.url(CHAT), {
        messages, max_tokens, seed: job.seed, max_denoising_steps: steps,
        response_format: { type: 'json_schema', json_schema: { name: `s${job.i}`, schema: job.schema } },
      });
      let r = await ask(maxTokens);
      // One canvas is the cheapest run; a schema whose shortest value does not fit is a 400 naming
      // max_tokens before anything is generated, and gets a second canvas.
      if (r.status === 400 && r.json?.error?.param === 'max_tokens') r = await ask(2 * maxTokens);
      if (r.status !== 200) {
        failures.push({ schema: job.schema, why: `status ${r.status}: ${r.text}` });
        continue;
      }
      const content = r.json.choices[0].message.content;
      let value;
      try {
        value = JSON.parse(content);
      } catch (e) {
        failures.push({ schema: job.schema, content, why: `not JSON: ${e.message}` });
        continue;
      }
      if (!ajv.validate(job.schema, value)) {
        failures.push({ schema: job.schema, content, why: ajv.errorsText() });
        continue;
      }
      if (r.json.choices[0].finish_reason !== 'stop') {
        failures.push({ schema: job.schema, content, why: `finish_reason ${r.json.choices[0].finish_reason}` });
        continue;
      }
      ok += 1;
    }
  }
  await Promise.all(Array.from({ length: concurrency }, worker));
  return { ok, failures };
}

describe('guided decoding on the shipped model (models/tiny-code, CPU)', () => {
  let server;
  before(async () => {
    server = await startServer({
      modelDir: TINY_CODE, loadFormat: 'safetensors',
      args: ['--device', 'cpu', '--served-model-name', 'tiny-code', '--max-num-seqs', '16',
        '--enable-auto-tool-choice', '--tool-call-parser', 'gemma4'],
    });
  });
  after(async () => server && (await server.stop()));

  test('1,000 random schemas with random seeds: every reply parses and validates (ajv)', async () => {
    const { ok, failures } = await property(server, {
      count: 1000, seed: 33, maxTokens: 64, concurrency: 16, steps: 1,
      messages: [{ role: 'user', content: 'Give me the record as JSON.' }],
    });
    const shown = failures.slice(0, 3).map((f) => `${f.why}\n  content: ${f.content}\n  schema: ${JSON.stringify(f.schema)}`);
    assert.equal(failures.length, 0, `${failures.length} invalid replies:\n${shown.join('\n')}`);
    assert.equal(ok, 1000);
  });

  test('regex and choice forms on both endpoints; values longer than a canvas', async () => {
    const r = await postJson(server.url(COMPLETIONS), {
      prompt: 'def f(', max_tokens: 40, seed: 3, structured_outputs: { regex: '[a-z]{3,8}-[0-9]{2}' },
    });
    assert.equal(r.status, 200, r.text);
    assert.match(r.json.choices[0].text, /^[a-z]{3,8}-[0-9]{2}$/);
    const c = await postJson(server.url(CHAT), {
      messages: [{ role: 'user', content: 'yes or no?' }], max_tokens: 8, seed: 4, guided_choice: ['yes', 'no', 'maybe'],
    });
    assert.equal(c.status, 200, c.text);
    assert.ok(['yes', 'no', 'maybe'].includes(c.json.choices[0].message.content), c.json.choices[0].message.content);
    // A value that must span canvases (canvas 64): the automaton state goes on in the next canvas.
    const long = await postJson(server.url(COMPLETIONS), {
      prompt: 'x', max_tokens: 200, seed: 5, guided_regex: '(ab){40}',
    });
    assert.equal(long.status, 200, long.text);
    assert.equal(long.json.choices[0].text, 'ab'.repeat(40));
  });

  test('forced tool calls: the declared names and argument schemas', async () => {
    const tools = [
      { type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 12 }, days: { type: 'integer' } }, required: ['city', 'days'], additionalProperties: false } } },
      { type: 'function', function: { name: 'get_time' } },
    ];
    const ajv = validator();
    for (const [seed, tool_choice] of [[1, 'required'], [2, 'required'], [3, { type: 'function', function: { name: 'get_weather' } }]]) {
      const r = await postJson(server.url(CHAT), {
        messages: [{ role: 'user', content: 'Weather in Paris?' }], tools, tool_choice, seed, max_tokens: 96,
      });
      assert.equal(r.status, 200, r.text);
      const calls = r.json.choices[0].message.tool_calls;
      assert.equal(calls.length, 1, r.text);
      const tool = tools.find((t) => t.function.name === calls[0].function.name);
      assert.ok(tool, calls[0].function.name);
      if (typeof tool_choice === 'object') assert.equal(calls[0].function.name, 'get_weather');
      const args = JSON.parse(calls[0].function.arguments);
      const schema = tool.function.parameters ?? { type: 'object', additionalProperties: false };
      assert.ok(ajv.validate(schema, args), `${calls[0].function.arguments}: ${ajv.errorsText()}`);
      assert.equal(r.json.choices[0].finish_reason, 'tool_calls');
    }
  });

  test('400s before generating: a keyword outside the subset, a grammar, no room for the shortest value', async () => {
    const user = [{ role: 'user', content: 'x' }];
    let r = await postJson(server.url(CHAT), {
      messages: user, response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object', patternProperties: {} } } },
    });
    assert.equal(r.status, 400, r.text);
    assert.match(r.json.error.message, /patternProperties/);
    r = await postJson(server.url(CHAT), { messages: user, structured_outputs: { grammar: 'root ::= "a"' } });
    assert.equal(r.status, 400, r.text);
    assert.equal(r.json.error.param, 'structured_outputs.grammar');
    r = await postJson(server.url(CHAT), { messages: user, max_tokens: 4, guided_regex: 'a{10}' });
    assert.equal(r.status, 400, r.text);
    assert.equal(r.json.error.param, 'max_tokens');
  });

  test("the official client's chat.completions.parse() with a zod schema returns a parsed object", async () => {
    const client = new OpenAI({ baseURL: server.url('/v1'), apiKey: 'none' });
    const Event = z.object({
      name: z.string().max(20),
      date: z.string(),
      participants: z.array(z.string().max(10)).max(3),
      note: z.string().nullable(),
    });
    const completion = await client.chat.completions.parse({
      model: 'tiny-code', messages: [{ role: 'user', content: 'Alice and Bob go to a fair on Friday.' }],
      response_format: zodResponseFormat(Event, 'event'), max_tokens: 128, seed: 9,
    });
    const parsed = completion.choices[0].message.parsed;
    assert.ok(parsed, JSON.stringify(completion.choices[0].message));
    assert.equal(typeof parsed.name, 'string');
    assert.ok(Array.isArray(parsed.participants));
    assert.ok(Event.safeParse(parsed).success);
  });
});

describe('guided decoding on the tiny fixture (real 262k vocabulary, dummy weights, CPU)', () => {
  let server;
  before(async () => {
    const modelDir = makeModelDir({
      config: tinyConfig({ canvasLength: 16 }),
      generationConfig: { ...GENERATION_CONFIG, max_denoising_steps: 2 },
    });
    server = await startServer({ modelDir, loadFormat: 'dummy', args: ['--device', 'cpu', '--max-num-seqs', '4'] });
  });
  after(async () => server && (await server.stop()));

  test('random schemas with random seeds: every reply parses and validates (ajv), across canvases', async () => {
    const { ok, failures } = await property(server, {
      count: 12, seed: 7, maxTokens: 48, concurrency: 4, steps: 1, messages: [{ role: 'user', content: 'JSON please.' }],
    });
    const shown = failures.slice(0, 3).map((f) => `${f.why}\n  content: ${f.content}\n  schema: ${JSON.stringify(f.schema)}`);
    assert.equal(failures.length, 0, `${failures.length} invalid replies:\n${shown.join('\n')}`);
    assert.equal(ok, 12);
  });
});
