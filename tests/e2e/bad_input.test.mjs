// The bad-input checklist: every malformed request gets an OpenAI error object with
// the right status (400 naming the parameter, 413, 404, ...), never a 500, a crash or a hang, and the
// server keeps serving afterwards.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import net from 'node:net';
import { after, before, describe, test } from 'node:test';
import { makeModelDir, metrics, postJson, sample, sleep, startServer, tokenizerPath, waitFor } from './helpers.mjs';

const script = { canvas_length: 8, canvas_delay_ms: 10, replies: [{ when: 'hello', canvases: ['Hi!<turn|>'] }], default: { random_canvases: 2 } };
let server;
let byteFallbackIds;
before(async () => {
  // Parsing the tokenizer blocks the event loop for seconds: do it before any keep-alive connection
  // exists (a pooled one would be closed by the server meanwhile).
  const vocab = JSON.parse(fs.readFileSync(tokenizerPath(), 'utf8')).model.vocab;
  byteFallbackIds = [vocab['<0xFF>'], vocab['<0xC3>']];
  server = await startServer({
    modelDir: makeModelDir({ script }),
    args: ['--max-model-len', '256', '--max-request-bytes', '2097152', '--max-num-seqs', '2', '--sse-ping-interval', '0.1'],
  });
});
after(async () => {
  const r = await server?.stop();
  assert.deepEqual(r, { code: 0, signal: null });
});

const user = (content) => [{ role: 'user', content }];
const chat = (extra) => ({ messages: user('hello'), ...extra });
const big = (n) => 'x'.repeat(n);

async function assertServing() {
  const h = await fetch(server.url('/health'));
  assert.equal(h.status, 200);
  const r = await postJson(server.url('/v1/chat/completions'), chat({}));
  assert.equal(r.status, 200);
  assert.equal(r.json.choices[0].message.content, 'Hi!');
}

function assertError(r, status, param, label) {
  assert.equal(r.status, status, `${label}: status (${(r.text ?? JSON.stringify(r.json)).slice(0, 300)})`);
  assert.ok(r.json?.error, `${label}: an error object`);
  const e = r.json.error;
  assert.equal(typeof e.message, 'string');
  assert.ok(e.message.length > 0);
  assert.equal(typeof e.type, 'string');
  assert.ok('param' in e && 'code' in e, `${label}: param and code present`);
  if (param !== undefined) {
    if (param instanceof RegExp) assert.match(String(e.param), param, `${label}: param`);
    else assert.equal(e.param, param, `${label}: param`);
  }
}

// [label, path, body (object or raw string), status, param]
const CHAT = '/v1/chat/completions';
const COMP = '/v1/completions';
const cases = [
  // Bodies that are not request objects.
  ['body null', CHAT, 'null', 400, null],
  ['body []', CHAT, '[]', 400, null],
  ['body string', CHAT, '"str"', 400, null],
  ['body {}', CHAT, '{}', 400, 'messages'],
  ['empty body', CHAT, '', 400, null],
  ['trailing garbage', CHAT, JSON.stringify(chat({})) + ' x', 400, null],
  ['invalid UTF-8', CHAT, Buffer.from('{"messages":[{"role":"user","content":"a\xff"}]}', 'latin1'), 400, null],
  ['lone surrogate escape', CHAT, '{"messages":[{"role":"user","content":"\\ud800"}]}', 400, null],
  ['nested 100k deep', CHAT, '['.repeat(100000) + ']'.repeat(100000), 400, null],
  ['1e309', CHAT, '{"messages":[{"role":"user","content":"x"}],"max_tokens":1e309}', 400, null],
  // max_tokens / max_completion_tokens
  ['max_tokens 0', CHAT, chat({ max_tokens: 0 }), 400, 'max_tokens'],
  ['max_tokens -1', CHAT, chat({ max_tokens: -1 }), 400, 'max_tokens'],
  ['max_tokens 2^31', CHAT, chat({ max_tokens: 2 ** 31 }), 400, 'messages'],
  ['max_tokens 2^63', CHAT, '{"messages":[{"role":"user","content":"x"}],"max_tokens":9223372036854775808}', 400, 'max_tokens'],
  ['max_tokens "10"', CHAT, chat({ max_tokens: '10' }), 400, 'max_tokens'],
  ['max_tokens true', CHAT, chat({ max_tokens: true }), 400, 'max_tokens'],
  ['max_tokens 1.5', CHAT, chat({ max_tokens: 1.5 }), 400, 'max_tokens'],
  ['conflicting max tokens', CHAT, chat({ max_tokens: 5, max_completion_tokens: 6 }), 400, 'max_completion_tokens'],
  ['prompt + max > context', CHAT, chat({ max_tokens: 250 }), 400, 'messages'],
  ['prompt alone >= context', CHAT, { messages: user('word '.repeat(400)) }, 400, 'messages'],
  // n, sampling
  ['n 0', CHAT, chat({ n: 0 }), 400, 'n'],
  ['n -1', CHAT, chat({ n: -1 }), 400, 'n'],
  ['n 10000', CHAT, chat({ n: 10000 }), 400, 'n'],
  ['temperature -1', CHAT, chat({ temperature: -1 }), 400, 'temperature'],
  ['temperature 3', CHAT, chat({ temperature: 3 }), 400, 'temperature'],
  ['temperature "hot"', CHAT, chat({ temperature: 'hot' }), 400, 'temperature'],
  ['top_p 0', CHAT, chat({ top_p: 0 }), 400, 'top_p'],
  ['top_p 1.5', CHAT, chat({ top_p: 1.5 }), 400, 'top_p'],
  ['top_k -5', CHAT, chat({ top_k: -5 }), 400, 'top_k'],
  ['min_p 2', CHAT, chat({ min_p: 2 }), 400, 'min_p'],
  ['presence_penalty 3', CHAT, chat({ presence_penalty: 3 }), 400, 'presence_penalty'],
  ['frequency_penalty 3', CHAT, chat({ frequency_penalty: 3 }), 400, 'frequency_penalty'],
  ['repetition_penalty 0', CHAT, chat({ repetition_penalty: 0 }), 400, 'repetition_penalty'],
  ['logit_bias non-empty', CHAT, chat({ logit_bias: { 50: 100 } }), 400, 'logit_bias'],
  ['logit_bias 1M entries', CHAT, chat({ logit_bias: Object.fromEntries(Array.from({ length: 100000 }, (_, i) => [i, 1])) }), 400, 'logit_bias'],
  ['seed 2^64', CHAT, '{"messages":[{"role":"user","content":"x"}],"seed":18446744073709551616}', 400, 'seed'],
  ['seed 2^63', CHAT, '{"messages":[{"role":"user","content":"x"}],"seed":9223372036854775808}', 400, 'seed'],
  ['seed 1.5', CHAT, chat({ seed: 1.5 }), 400, 'seed'],
  ['seed "5"', CHAT, chat({ seed: '5' }), 400, 'seed'],
  ['min_tokens 5', CHAT, chat({ min_tokens: 5 }), 400, 'min_tokens'],
  ['best_of 3', CHAT, chat({ best_of: 3 }), 400, 'best_of'],
  // logprobs
  ['top_logprobs 1000', CHAT, chat({ logprobs: true, top_logprobs: 1000 }), 400, 'top_logprobs'],
  ['top_logprobs -5', CHAT, chat({ logprobs: true, top_logprobs: -5 }), 400, 'top_logprobs'],
  ['top_logprobs "5"', CHAT, chat({ logprobs: true, top_logprobs: '5' }), 400, 'top_logprobs'],
  ['top_logprobs 21', CHAT, chat({ logprobs: true, top_logprobs: 21 }), 400, 'top_logprobs'],
  ['top_logprobs without logprobs', CHAT, chat({ top_logprobs: 0 }), 400, 'top_logprobs'],
  ['logprobs "yes"', CHAT, chat({ logprobs: 'yes' }), 400, 'logprobs'],
  ['prompt_logprobs', CHAT, chat({ prompt_logprobs: 1 }), 400, 'prompt_logprobs'],
  // stop
  ['stop ""', CHAT, chat({ stop: '' }), 400, 'stop'],
  ['stop 100 entries', CHAT, chat({ stop: Array.from({ length: 100 }, (_, i) => `s${i}`) }), 400, 'stop'],
  ['stop 1M entries', CHAT, chat({ stop: Array.from({ length: 200000 }, () => 'a') }), 400, 'stop'],
  ['stop 1 MB string', CHAT, chat({ stop: big(1 << 20) }), 400, 'stop'],
  ['stop number', CHAT, chat({ stop: 5 }), 400, 'stop'],
  ['stop_token_ids out of range', CHAT, chat({ stop_token_ids: [262144] }), 400, 'stop_token_ids'],
  // stream
  ['stream_options without stream', CHAT, chat({ stream_options: { include_usage: true } }), 400, 'stream_options'],
  ['stream "yes"', CHAT, chat({ stream: 'yes' }), 400, 'stream'],
  ['stream_options unknown key', CHAT, chat({ stream: true, stream_options: { bogus: true } }), 400, 'stream_options.bogus'],
  // messages
  ['messages empty', CHAT, { messages: [] }, 400, 'messages'],
  ['messages null', CHAT, { messages: null }, 400, 'messages'],
  ['messages string', CHAT, { messages: 'hi' }, 400, 'messages'],
  ['messages [123]', CHAT, { messages: [123] }, 400, 'messages[0]'],
  ['messages [{}]', CHAT, { messages: [{}] }, 400, 'messages[0].role'],
  ['role numeric', CHAT, { messages: [{ role: 5, content: 'x' }] }, 400, 'messages[0].role'],
  ['unknown role', CHAT, { messages: [{ role: 'wizard', content: 'x' }] }, 400, 'messages[0].role'],
  ['null user content', CHAT, { messages: [{ role: 'user', content: null }] }, 400, 'messages[0].content'],
  ['numeric content', CHAT, { messages: [{ role: 'user', content: 5 }] }, 400, 'messages[0].content'],
  ['unknown part type', CHAT, { messages: [{ role: 'user', content: [{ type: 'hologram' }] }] }, 400, 'messages[0].content[0].type'],
  ['image part (a model without images)', CHAT, { messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'http://x/y.png' } }] }] }, 400, 'messages[0].content[0].image_url.url'],
  ['text part without text', CHAT, { messages: [{ role: 'user', content: [{ type: 'text' }] }] }, 400, 'messages[0].content[0].text'],
  ['1M messages', CHAT, `{"messages":[${Array(200000).fill('1').join(',')}]}`, 400, 'messages'],
  ['function role', CHAT, { messages: [{ role: 'function', content: 'x', name: 'f' }] }, 400, 'messages[0].role'],
  ['tool_calls on a user message', CHAT, { messages: [{ role: 'user', content: 'x', tool_calls: [] }] }, 400, 'messages[0].tool_calls'],
  // tools / formats / templates
  ['tools empty', CHAT, chat({ tools: [] }), 400, 'tools'],
  ['tools not an array', CHAT, chat({ tools: {} }), 400, 'tools'],
  ['tool without name', CHAT, chat({ tools: [{ type: 'function', function: {} }] }), 400, 'tools[0].function.name'],
  ['1M tools', CHAT, `{"messages":[{"role":"user","content":"x"}],"tools":[${Array(200000).fill('1').join(',')}]}`, 400, 'tools'],
  ['tools without --enable-auto-tool-choice', CHAT, chat({ tools: [{ type: 'function', function: { name: 'f' } }] }), 400, 'tool_choice'],
  ['tool_choice names a missing tool', CHAT, chat({ tools: [{ type: 'function', function: { name: 'f' } }], tool_choice: { type: 'function', function: { name: 'g' } } }), 400, 'tool_choice'],
  ['response_format grammar', CHAT, chat({ response_format: { type: 'grammar' } }), 400, 'response_format'],
  ['response_format json_schema without a schema', CHAT, chat({ response_format: { type: 'json_schema', json_schema: { name: 'x' } } }), 400, 'response_format.json_schema.schema'],
  ['response_format json_schema with an empty anyOf', CHAT, chat({ response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { anyOf: [] } } } }), 400, 'response_format.json_schema.schema'],
  ['response_format json_schema with patternProperties', CHAT, chat({ response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object', patternProperties: {} } } } }), 400, 'response_format.json_schema.schema'],
  ['response_format unknown type', CHAT, chat({ response_format: { type: 'yaml' } }), 400, 'response_format.type'],
  ['response_format schema not an object', CHAT, chat({ response_format: { type: 'json_schema', json_schema: 'x' } }), 400, 'response_format.json_schema'],
  ['response_format string', CHAT, chat({ response_format: 'json' }), 400, 'response_format'],
  ['guided_json beyond the subset', CHAT, chat({ guided_json: { type: 'object', not: {} } }), 400, 'guided_json'],
  ['guided_grammar', COMP, { prompt: 'x', guided_grammar: 'root ::= "a"' }, 400, 'guided_grammar'],
  ['two guided forms', CHAT, chat({ guided_regex: 'a', guided_choice: ['a'] }), 400, 'guided_choice'],
  ['chat_template in the body', CHAT, chat({ chat_template: '{{ 7 * 7 }}' }), 400, 'chat_template'],
  ['chat_template_kwargs nested', CHAT, chat({ chat_template_kwargs: { enable_thinking: { a: 1 } } }), 400, /^chat_template_kwargs/],
  ['chat_template_kwargs 1 MB value', CHAT, chat({ chat_template_kwargs: { enable_thinking: big(1 << 20) } }), 400, /^chat_template_kwargs/],
  ['functions (legacy)', CHAT, chat({ functions: [{ name: 'f' }] }), 400, 'functions'],
  ['continue_final_message after a user message', CHAT, chat({ continue_final_message: true }), 400, 'continue_final_message'],
  ['vllm_xargs unknown key', CHAT, chat({ vllm_xargs: { foo: 1 } }), 400, 'vllm_xargs.foo'],
  ['max_denoising_steps 0', CHAT, chat({ max_denoising_steps: 0 }), 400, 'max_denoising_steps'],
  ['entropy_bound 0', CHAT, chat({ entropy_bound: 0 }), 400, 'entropy_bound'],
  ['t_max <= t_min', CHAT, chat({ t_min: 0.5, t_max: 0.5 }), 400, 't_max'],
  ['unknown model', CHAT, chat({ model: 'gpt-4o' }), 404, 'model'],
  // completions prompts
  ['prompt missing', COMP, {}, 400, 'prompt'],
  ['prompt number', COMP, { prompt: 5 }, 400, 'prompt'],
  ['prompt id -1', COMP, { prompt: [-1] }, 400, 'prompt'],
  ['prompt id n_vocab', COMP, { prompt: [262144] }, 400, 'prompt'],
  ['prompt id 2^40', COMP, { prompt: [2 ** 40] }, 400, 'prompt'],
  ['prompt empty list', COMP, { prompt: [] }, 400, 'prompt'],
  ['prompt empty string', COMP, { prompt: '' }, 400, 'prompt'],
  ['prompt [[]]', COMP, { prompt: [[]] }, 400, 'prompt'],
  ['prompt mixed list', COMP, { prompt: ['a', 5] }, 400, 'prompt'],
  ['prompt too long', COMP, { prompt: 'word '.repeat(300) }, 400, 'prompt'],
  ['suffix longer than the canvas', COMP, { prompt: 'x', suffix: 'word '.repeat(20) }, 400, 'suffix'],
  ['suffix not a string', COMP, { prompt: 'x', suffix: 3 }, 400, 'suffix'],
  ['infill two holes in a row', COMP, { prompt: 'x', infill_template: ['a', { max_tokens: 2 }, { max_tokens: 2 }] }, 400, 'infill_template'],
  ['infill beyond the context', COMP, { prompt: 'x', infill_template: ['a', { max_tokens: 1000 }] }, 400, 'infill_template'],
  ['infill beyond max_tokens', COMP, { prompt: 'x', max_tokens: 2, infill_template: ['a', { max_tokens: 5 }] }, 400, 'max_tokens'],
  ['completions logprobs 9', COMP, { prompt: 'x', logprobs: 9 }, 400, 'logprobs'],
  ['echo with logprobs', COMP, { prompt: 'x', echo: true, logprobs: 0 }, 400, 'echo'],
  ['tools on completions', COMP, { prompt: 'x', tools: [] }, 400, 'tools'],
  ['too many choices', COMP, { prompt: Array(10).fill('x'), n: 16 }, 400, 'n'],
  // tokenizer endpoints
  ['detokenize -1', '/detokenize', { tokens: [-1] }, 400, 'tokens'],
  ['detokenize n_vocab', '/detokenize', { tokens: [262144] }, 400, 'tokens'],
  ['detokenize strings', '/detokenize', { tokens: ['a'] }, 400, 'tokens'],
  ['tokenize without prompt', '/tokenize', {}, 400, 'prompt'],
  ['tokenize bad messages', '/tokenize', { messages: [{}] }, 400, 'messages[0].role'],
];

describe('bad requests are 4xx with OpenAI error objects', () => {
  for (const [label, path, body, status, param] of cases) {
    test(label, async () => {
      const r = await fetch(server.url(path), {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: typeof body === 'string' || Buffer.isBuffer(body) ? body : JSON.stringify(body),
      });
      const text = await r.text();
      let json = null;
      try {
        json = JSON.parse(text);
      } catch {}
      assertError({ status: r.status, text, json }, status, param, label);
    });
  }
  test('the server keeps serving after all of them', assertServing);
});

describe('accepted oddities', () => {
  test('strings that look like control tokens, NUL bytes, BOM, duplicate keys, no content type', async () => {
    for (const content of ['<|turn>model\n<eos><mask>', 'a\u0000b', '🙂'.repeat(50), 'x\u0301\u0302']) {
      const r = await postJson(server.url(CHAT), { messages: user(content), max_tokens: 4 });
      assert.equal(r.status, 200, content);
    }
    const bom = await fetch(server.url(COMP), { method: 'POST', body: '\ufeff{"prompt":"hello","max_tokens":2}' });
    assert.equal(bom.status, 200);
    const dup = await postJson(server.url(COMP), '{"prompt":"a","max_tokens":1,"max_tokens":2}');
    assert.equal(dup.status, 200);
    assert.equal(dup.json.usage.completion_tokens, 2, 'the last duplicate wins');
    const form = await fetch(server.url(COMP), {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: JSON.stringify({ prompt: 'hello', max_tokens: 2, padding: 'y'.repeat(20000) }),
    });
    assert.equal(form.status, 200, 'curl -d style bodies over 8 KiB still parse as JSON');
  });

  test('valid special ids in a token prompt (mask, control tokens) are accepted', async () => {
    const r = await postJson(server.url(COMP), { prompt: [2, 4, 105, 106, 50, 1], max_tokens: 3 });
    assert.equal(r.status, 200);
  });

  test('two assistant turns in a row / a final assistant turn: answered or rejected cleanly', async () => {
    for (const messages of [
      [...user('hi'), { role: 'assistant', content: 'a' }, { role: 'assistant', content: 'b' }],
      [...user('hi'), { role: 'assistant', content: 'partial' }],
    ]) {
      const r = await postJson(server.url(CHAT), { messages, max_tokens: 4 });
      assert.ok(r.status === 200 || r.status === 400, `${r.status}`);
      if (r.status === 400) assertError(r, 400, undefined, 'assistant turns');
    }
  });

  test('detokenize: byte-fallback ids forming invalid UTF-8 give U+FFFD, not an error', async () => {
    const r = await postJson(server.url('/detokenize'), { tokens: byteFallbackIds });
    assert.equal(r.status, 200);
    assert.equal(r.json.prompt, '\ufffd\ufffd');
  });

  test('unknown fields are ignored (vLLM compatibility)', async () => {
    const r = await postJson(server.url(CHAT), chat({ frobnicate: 1, user: 'u1', metadata: { a: 'b' } }));
    assert.equal(r.status, 200);
    await waitFor(async () => server.log().includes("unknown request field 'frobnicate'"));
  });
});

// ---- HTTP layer, on raw sockets ----

// Sends raw bytes; resolves with what came back once `until(text)` holds, the server closes, or the
// timeout passes. (Half-closed clients are covered in http_clients.test.mjs.)
function rawExchange(data, { timeoutMs = 5000, until = (t) => /\r\n\r\n/.test(t) } = {}) {
  return new Promise((resolve) => {
    const sock = net.connect(server.port, '127.0.0.1');
    let got = '';
    const done = (why) => {
      clearTimeout(t);
      sock.destroy();
      resolve({ text: got, why });
    };
    const t = setTimeout(() => done('timeout'), timeoutMs);
    sock.on('data', (d) => {
      got += d.toString('latin1');
      if (until(got)) done('complete');
    });
    sock.on('close', () => done('closed'));
    sock.on('error', () => done('error'));
    sock.on('connect', () => sock.write(data));
  });
}

const statusOf = (text) => Number((text.match(/^HTTP\/1\.[01] (\d{3})/) || [])[1] || 0);

describe('HTTP layer', () => {
  test('a body over --max-request-bytes is a 413', async () => {
    const r = await postJson(server.url(CHAT), { messages: user(big(3 << 20)) });
    assertError(r, 413, null, '413');
  });

  test('unknown path 404, wrong method 405, unsupported endpoint 501', async () => {
    const a = await fetch(server.url('/v2/nothing'));
    assertError({ status: a.status, json: await a.json() }, 404, null, '404');
    const b = await fetch(server.url(CHAT));
    assertError({ status: b.status, json: await b.json() }, 405, null, '405');
    const c = await postJson(server.url('/v1/embeddings'), { input: 'x' });
    assertError(c, 501, null, '501');
  });

  test('a URL longer than 8 KB', async () => {
    const r = await rawExchange(`GET /health?${big(10000)} HTTP/1.1\r\nHost: x\r\n\r\n`, { timeoutMs: 8000 });
    assert.equal(statusOf(r.text), 414, r.text.slice(0, 100));
  });

  test('malformed framing: bad chunk sizes, Content-Length mismatch, endless header line, 10k headers', async () => {
    // Whatever the library does with each (answer 4xx, or wait for more bytes until its read timeout),
    // the server must stay up and keep answering everyone else meanwhile.
    const post = 'POST /v1/completions HTTP/1.1\r\nHost: x\r\n';
    const attempts = [
      `${post}Transfer-Encoding: chunked\r\n\r\nFFFFFFFFFFFFFFFFFFFF\r\nabc\r\n0\r\n\r\n`,
      `${post}Transfer-Encoding: chunked\r\n\r\n-5\r\nabc\r\n0\r\n\r\n`,
      `${post}Content-Length: 100\r\n\r\n{"prompt":`,
      `${post}Content-Length: -1\r\n\r\n{}`,
      `${post}X-Long: ${big(1 << 20)}`,
      `GET /health HTTP/1.1\r\n${Array.from({ length: 10000 }, (_, i) => `X-H${i}: v`).join('\r\n')}\r\n\r\n`,
      'NOT-HTTP\r\n\r\n',
    ];
    const pending = attempts.map((a) => rawExchange(a, { timeoutMs: 1500 }));
    await sleep(200);
    await assertServing();
    for (const r of await Promise.all(pending)) {
      const st = statusOf(r.text);
      assert.ok(st === 0 || (st >= 400 && st < 500) || st === 200, `framing error answered ${st}: ${r.text.slice(0, 120)}`);
    }
    const chunked = await rawExchange(attempts[0], { timeoutMs: 8000 });
    assert.equal(statusOf(chunked.text), 400, 'an impossible chunk size is a 400');
    await assertServing();
  });

  test('HTTP/1.0 requests are answered', async () => {
    const r = await rawExchange('GET /health HTTP/1.0\r\n\r\n');
    assert.equal(statusOf(r.text), 200);
  });

  test('keep-alive connection reused after a streamed response', async () => {
    const body = JSON.stringify({ messages: user('hello'), stream: true });
    const req1 = `POST ${CHAT} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;
    const result = await new Promise((resolve) => {
      const sock = net.connect(server.port, '127.0.0.1');
      let got = '';
      let sentSecond = false;
      const t = setTimeout(() => {
        sock.destroy();
        resolve(got);
      }, 5000);
      sock.on('data', (d) => {
        got += d.toString();
        if (!sentSecond && got.includes('data: [DONE]') && got.includes('\r\n0\r\n\r\n')) {
          sentSecond = true;
          sock.write('GET /health HTTP/1.1\r\nHost: x\r\n\r\n');
        }
        if (sentSecond && /\r\n\r\nHTTP\/1\.1 200[\s\S]*\r\n\r\n$/.test(got)) {
          clearTimeout(t);
          sock.destroy();
          resolve(got);
        }
      });
      sock.on('connect', () => sock.write(req1));
    });
    const statuses = [...result.matchAll(/HTTP\/1\.1 (\d{3})/g)].map((m) => Number(m[1]));
    assert.deepEqual(statuses, [200, 200], result.slice(0, 300));
  });

  test('a slowloris client does not stall other clients', async () => {
    const sock = net.connect(server.port, '127.0.0.1');
    await new Promise((r) => sock.on('connect', r));
    const head = 'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\n\r\n';
    let i = 0;
    const drip = setInterval(() => {
      if (i < head.length) sock.write(head[i++]);
    }, 100);
    await sleep(300);
    const t0 = Date.now();
    await assertServing();
    assert.ok(Date.now() - t0 < 2000);
    clearInterval(drip);
    sock.destroy();
  });

  test('many clients that never read their streams, then vanish: everything is freed', async () => {
    const socks = [];
    const body = JSON.stringify({ messages: user('tell me a long story'), stream: true, max_tokens: 200, ignore_eos: true });
    for (let i = 0; i < 20; i++) {
      const s = net.connect(server.port, '127.0.0.1');
      s.on('error', () => {});
      s.pause();
      await new Promise((r) => s.on('connect', r));
      s.write(`POST ${CHAT} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
      socks.push(s);
    }
    await waitFor(async () => {
      const m = await metrics(server);
      return sample(m, 'dgemma:num_requests_running') === 2 && sample(m, 'dgemma:num_requests_waiting') > 0;
    });
    const h = await fetch(server.url('/health'));
    assert.equal(h.status, 200, 'health answers while 20 streams are pinned');
    for (const s of socks) s.destroy();
    await waitFor(async () => {
      const m = await metrics(server);
      return sample(m, 'dgemma:num_requests_running') === 0 && sample(m, 'dgemma:num_requests_waiting') === 0;
    }, { timeoutMs: 15000 });
    await assertServing();
  });
});
