// The shipped tiny model (models/tiny-code: trained weights, its own 8k tokenizer) behind the real
// server on the CPU backend — behaviour only a trained model shows: code-like answers to coding
// requests, canvases that stop early through the entropy-bound rule, tool calls the gemma4 parser
// turns into tool_calls, and seeds that reproduce exactly. The checks are properties of the answers
// (keywords, brackets, ASCII), never exact text.
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { startServer, metrics, sample } from './helpers.mjs';

const MODEL_DIR = path.join(process.env.DGEMMA_SOURCE_DIR, 'models', 'tiny-code');
const NAME = 'tiny-code';

const KEYWORDS = /\b(def|return|for|while|if|import|class|in|lambda|yield)\b/;
// A definition: what an answer to "write a function" must contain (random tokens from a code-heavy
// vocabulary contain keywords, but rarely `def name(`).
const DEFINITION = /\b(def\s+[A-Za-z_]\w*\s*\(|class\s+[A-Za-z_]\w*\s*[(:])/;

// Brackets outside string literals and comments must nest (a rough Python scan).
function bracketsBalanced(code) {
  const pairs = { ')': '(', ']': '[', '}': '{' };
  const stack = [];
  let quote = null;
  for (let i = 0; i < code.length; i++) {
    const ch = code[i];
    if (quote) {
      if (ch === '\\') i++;
      else if (ch === quote) quote = null;
      continue;
    }
    if (ch === '"' || ch === "'") quote = ch;
    else if (ch === '#') while (i < code.length && code[i] !== '\n') i++;
    else if ('([{'.includes(ch)) stack.push(ch);
    else if (pairs[ch] && stack.pop() !== pairs[ch]) return false;
  }
  return stack.length === 0;
}

function asciiShare(text) {
  if (!text.length) return 0;
  let n = 0;
  for (const ch of text) if (ch.codePointAt(0) < 128) n++;
  return n / [...text].length;
}

// The code of a ```python block if there is one, else the whole answer.
function codeOf(answer) {
  const m = answer.match(/```(?:python)?\n([\s\S]*?)(```|$)/);
  return m ? m[1] : answer;
}

// The declarations of tools/tiny_model/tasks.py, as the model saw them in training.
const WEATHER_TOOL = {
  "type": "function",
  "function": {
    "name": "get_weather",
    "description": "Get the current weather for a city.",
    "parameters": {
      "type": "object",
      "properties": {
        "city": {
          "type": "string",
          "description": "City name"
        },
        "unit": {
          "type": "string",
          "enum": [
            "celsius",
            "fahrenheit"
          ],
          "description": "Temperature unit"
        }
      },
      "required": [
        "city"
      ]
    }
  }
};
const TIME_TOOL = {
  "type": "function",
  "function": {
    "name": "get_time",
    "description": "Get the current time in a time zone.",
    "parameters": {
      "type": "object",
      "properties": {
        "timezone": {
          "type": "string",
          "description": "IANA time zone, e.g. Europe/Paris"
        }
      },
      "required": [
        "timezone"
      ]
    }
  }
};

describe('tiny-code model (trained weights, CPU)', () => {
  let server, client;
  before(async () => {
    server = await startServer({
      modelDir: MODEL_DIR,
      loadFormat: 'safetensors',
      args: ['--device', 'cpu', '--served-model-name', NAME, '--max-num-seqs', '4',
        '--enable-auto-tool-choice', '--tool-call-parser', 'gemma4', '--reasoning-parser', 'gemma4'],
    });
    client = server.client();
  });
  after(async () => server && (await server.stop()));

  const chat = (content, extra = {}) =>
    client.chat.completions.create({ model: NAME, messages: [{ role: 'user', content }], max_tokens: 128, ...extra });

  test('a request for a small Python function is answered with code', async () => {
    const prompts = [
      'Write a Python function that reverses a string.',
      'Write a Python function that returns the largest of three numbers.',
      'Write a Python function that counts the words in a sentence.',
    ];
    let balanced = 0, stopped = 0, total = 0;
    for (const p of prompts) {
      for (const seed of [1, 2]) {
        const r = await chat(p, { seed, max_tokens: 192 });
        const answer = r.choices[0].message.content ?? '';
        const code = codeOf(answer);
        total++;
        assert.match(code, KEYWORDS, `no Python keyword in the answer to "${p}" (seed ${seed}): ${JSON.stringify(answer)}`);
        assert.match(code, DEFINITION, `no def/class in the answer to "${p}" (seed ${seed}): ${JSON.stringify(answer)}`);
        assert.ok(asciiShare(answer) >= 0.95, `answer is not mostly ASCII: ${JSON.stringify(answer)}`);
        assert.ok(code.trim().length >= 15, `answer too short to be code: ${JSON.stringify(answer)}`);
        if (bracketsBalanced(code)) balanced++;
        if (r.choices[0].finish_reason === 'stop') stopped++;
      }
    }
    assert.ok(balanced >= total - 1, `brackets balanced in only ${balanced} of ${total} answers`);
    assert.ok(stopped >= total - 1, `only ${stopped} of ${total} answers ended themselves within 192 tokens`);
  });

  test('canvases stop early through the entropy-bound rule', async () => {
    const cap = JSON.parse(fs.readFileSync(path.join(MODEL_DIR, 'generation_config.json'), 'utf8')).max_denoising_steps;
    const before = await metrics(server);
    const sum0 = sample(before, 'dgemma:denoising_steps_per_canvas_sum') ?? 0;
    const count0 = sample(before, 'dgemma:denoising_steps_per_canvas_count') ?? 0;
    // The answers must also end themselves (EOS): a canvas that "converges" on noise is no early stop.
    let ended = 0;
    for (const seed of [11, 12, 13, 14]) {
      const r = await chat('Write a Python function that checks whether a number is even.', { seed });
      if (r.choices[0].finish_reason === 'stop') ended++;
    }
    assert.ok(ended >= 3, `only ${ended} of 4 answers ended with EOS`);
    const after = await metrics(server);
    const canvases = sample(after, 'dgemma:denoising_steps_per_canvas_count') - count0;
    const steps = sample(after, 'dgemma:denoising_steps_per_canvas_sum') - sum0;
    assert.ok(canvases >= 4, `expected at least one canvas per request, got ${canvases}`);
    const mean = steps / canvases;
    assert.ok(mean <= cap / 2, `mean ${mean.toFixed(2)} denoising steps per canvas: not well under the cap of ${cap}`);
    assert.ok(mean >= 2, 'a canvas always takes at least two steps (the stability check needs a previous step)');
  });

  test('a tools request yields a parsed tool call in a clear majority of seeded runs', async () => {
    const seeds = [1, 2, 3, 4, 5, 6, 7, 8];
    let calls = 0;
    const seen = [];
    for (const seed of seeds) {
      const r = await client.chat.completions.create({
        model: NAME,
        messages: [{ role: 'user', content: "What's the weather in Paris?" }],
        tools: [TIME_TOOL, WEATHER_TOOL],
        max_tokens: 64,
        seed,
      });
      const m = r.choices[0].message;
      const tc = m.tool_calls ?? [];
      seen.push(tc.length ? `${tc[0].function.name}(${tc[0].function.arguments})` : JSON.stringify(m.content));
      if (tc.length && tc[0].function.name === 'get_weather') {
        assert.equal(r.choices[0].finish_reason, 'tool_calls');
        const args = JSON.parse(tc[0].function.arguments);
        assert.equal(typeof args, 'object');
        if (typeof args.city === 'string' && args.city.length > 0) calls++;
      }
    }
    assert.ok(calls >= 6, `a get_weather call with a city in ${calls} of ${seeds.length} runs: ${seen.join(' | ')}`);
  });

  test('a seed reproduces exactly, also with other requests in flight', async () => {
    const p = 'Write a Python function that computes the factorial of n.';
    const a = await chat(p, { seed: 42 });
    const [b] = await Promise.all([chat(p, { seed: 42 }), chat('Write a Python function that sorts a list.', { seed: 7 })]);
    assert.equal(b.choices[0].message.content, a.choices[0].message.content);
    assert.equal(b.usage.completion_tokens, a.usage.completion_tokens);
  });

  test('with thinking on, the reasoning parser separates a thought from the answer in some runs', async () => {
    let separated = 0;
    for (const seed of [1, 2, 3, 4]) {
      const r = await chat('Write a Python function that reverses a string.', {
        seed,
        max_tokens: 192,
        chat_template_kwargs: { enable_thinking: true },
      });
      const m = r.choices[0].message;
      const reasoning = m.reasoning_content ?? m.reasoning ?? '';
      if (reasoning.trim().length > 0 && DEFINITION.test(codeOf(m.content ?? ''))) separated++;
    }
    assert.ok(separated >= 2, `thought and code separated in ${separated} of 4 runs`);
  });
});
