// What clients send and how they behave: late failures keep their status, half-closed and pipelining
// clients, malformed framing, slow-header floods, CORS, --root-path, model retrieval, the thought
// block with thinking off, tool-call ids, memory for a huge prompt.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import net from 'node:net';
import { after, before, describe, test } from 'node:test';
import { spawn } from 'node:child_process';
import { TEST_SERVER, freePort, makeModelDir, metrics, postJson, sample, sleep, startServer, streamRaw, waitFor } from './helpers.mjs';

const Q = '<|"|>';
const script = {
  canvas_length: 16,
  canvas_delay_ms: 20,
  replies: [
    { when: 'fail late', canvases: [{ text: ' a', delay_ms: 300 }, { error: 'boom after a while', delay_ms: 600 }] },
    // 8 tokens: one canvas of 16, taking a second.
    { when: 'slow', canvases: Array.from({ length: 4 }, (_, i) => ({ text: ` s${i}`, delay_ms: 1000 })) },
    { when: 'lookup', canvases: ['<|channel>thought\nNeed a lookup.', '<channel|>Answer.<turn|>'] },
    { when: 'weather', canvases: [`<|tool_call>call:get_weather{location:${Q}Paris${Q}}<tool_call|><|tool_response>`] },
  ],
  default: { canvases: [' ok'] },
};
const tools = [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { location: { type: 'string' } } } } }];
const user = (content) => [{ role: 'user', content }];
const CHAT = '/v1/chat/completions';
const serverArgs = ['--sse-ping-interval', '0.1', '--max-num-seqs', '1', '--max-queue', '2', '--reasoning-parser', 'gemma4',
  '--enable-auto-tool-choice', '--tool-call-parser', 'gemma4', '--served-model-name', 'acme/tiny', '--max-request-bytes', '67108864'];

let server;
before(async () => {
  server = await startServer({ modelDir: makeModelDir({ script }), args: serverArgs });
});
after(async () => server?.stop());

// Raw exchange: writes `data` (then half-closes when `halfClose`), collects until the server closes
// or `until(text)` holds.
function raw(port, data, { halfClose = false, until = null, timeoutMs = 20000 } = {}) {
  return new Promise((resolve) => {
    const sock = net.connect(port, '127.0.0.1');
    let got = '';
    let closed = false;
    const done = () => {
      clearTimeout(t);
      sock.destroy();
      resolve({ text: got, closed });
    };
    const t = setTimeout(done, timeoutMs);
    sock.on('data', (d) => {
      got += d;
      if (until && until(got)) done();
    });
    sock.on('end', () => {
      closed = true;
      done();
    });
    sock.on('error', done);
    sock.on('connect', () => (halfClose ? sock.end(data) : sock.write(data)));
  });
}
const request = (method, path, body = '', extra = '') =>
  `${method} ${path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n${extra}\r\n${body}`;
// Splits a byte stream of HTTP/1.1 responses (Content-Length bodies) into {status, headers, body}.
function responses(text) {
  const out = [];
  while (text.length) {
    const end = text.indexOf('\r\n\r\n');
    if (end < 0) break;
    const head = text.slice(0, end).split('\r\n');
    const headers = Object.fromEntries(head.slice(1).map((l) => [l.slice(0, l.indexOf(':')).toLowerCase(), l.slice(l.indexOf(':') + 1).trim()]));
    const len = Number(headers['content-length'] ?? 0);
    if (text.length < end + 4 + len) break;  // the body has not all arrived yet
    out.push({ status: Number(head[0].split(' ')[1]), headers, body: text.slice(end + 4, end + 4 + len) });
    text = text.slice(end + 4 + len);
  }
  return out;
}

describe('status codes and connection handling', () => {
  test('a non-streamed request that fails after several ping intervals gets its real status (500)', async () => {
    const r = await postJson(server.url(CHAT), { messages: user('fail late') });
    assert.equal(r.status, 500);
    assert.equal(r.headers.get('content-type'), 'application/json');
    assert.equal(r.json.error.type, 'server_error');
    assert.match(r.json.error.message, /boom after a while/);
  });

  test('a half-closed client (shutdown(SHUT_WR)) still gets its answer, quick or slow', async () => {
    for (const content of ['hello', 'slow']) {
      const body = JSON.stringify({ messages: user(content) });
      const r = await raw(server.port, request('POST', CHAT, body), { halfClose: true });
      const [res] = responses(r.text);
      assert.equal(res?.status, 200, r.text);
      assert.equal(JSON.parse(res.body).choices[0].finish_reason, 'stop');
      assert.ok(r.closed, 'the server closes after answering');
    }
  });

  test('a client that really goes away while waiting is noticed: its request is cancelled', async () => {
    const before = sample(await metrics(server), 'dgemma:requests_cancelled_total');
    const sock = net.connect(server.port, '127.0.0.1');
    await new Promise((r) => sock.on('connect', r));
    sock.write(request('POST', CHAT, JSON.stringify({ messages: user('slow') })));
    await waitFor(async () => sample(await metrics(server), 'dgemma:num_requests_running') === 1);
    sock.destroy();
    await waitFor(async () => {
      const m = await metrics(server);
      return sample(m, 'dgemma:num_requests_running') === 0 && sample(m, 'dgemma:requests_cancelled_total') === before + 1;
    });
  });

  test('pipelined requests are answered in order on one connection', async () => {
    const a = JSON.stringify({ prompt: 'one' });
    const b = JSON.stringify({ prompt: 'one two three' });
    const data = request('POST', '/tokenize', a) + request('GET', '/version') + request('POST', '/tokenize', b);
    const r = await raw(server.port, data, { until: (t) => responses(t).length === 3 });
    const rs = responses(r.text);
    assert.equal(rs.length, 3, r.text);
    assert.deepEqual(rs.map((x) => x.status), [200, 200, 200]);
    assert.equal(JSON.parse(rs[0].body).count, 1);
    assert.ok(JSON.parse(rs[1].body).version);
    assert.equal(JSON.parse(rs[2].body).count, 3);
  });

  test('malformed Content-Length is an immediate 400; a declared body over the limit an immediate 413', async () => {
    for (const [cl, status] of [['-5', 400], ['1e3', 400], ['12, 13', 400], ['99999999999', 413]]) {
      const r = await raw(server.port, `POST ${CHAT} HTTP/1.1\r\nHost: x\r\nContent-Length: ${cl}\r\n\r\n`, { timeoutMs: 5000 });
      const [res] = responses(r.text);
      assert.equal(res?.status, status, `${cl}: ${r.text}`);
      assert.ok(r.closed, `${cl}: closed`);
      assert.equal(JSON.parse(res.body).error.code, status);
    }
    const both = await raw(server.port, `POST ${CHAT} HTTP/1.1\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n`);
    assert.equal(responses(both.text)[0]?.status, 400);
  });

  test('/health and /metrics stay responsive under 500 connections trickling their headers', async () => {
    const socks = [];
    for (let i = 0; i < 500; i++) {
      const s = net.connect(server.port, '127.0.0.1');
      s.on('error', () => {});
      s.write(`POST ${CHAT} HTTP/1.1\r\nHost: x\r\n`);
      socks.push(s);
    }
    let i = 0;
    const trickle = setInterval(() => {
      for (const s of socks) s.write(`X-Slow-${i}: 1\r\n`);
      i++;
    }, 200);
    try {
      await sleep(500);
      for (let k = 0; k < 5; k++) {
        assert.equal((await fetch(server.url('/health'), { signal: AbortSignal.timeout(10000) })).status, 200);
        assert.equal((await fetch(server.url('/metrics'), { signal: AbortSignal.timeout(10000) })).status, 200);
        const r = await postJson(server.url(CHAT), { messages: user('hello') });
        assert.equal(r.status, 200);
      }
    } finally {
      clearInterval(trickle);
      for (const s of socks) s.destroy();
    }
  });
});

describe('out of file descriptors', () => {
  test('with the descriptor limit reached, the longest-waiting connections are closed and /health answers', async () => {
    // `ulimit -n 120` in a shell that then becomes the server: fewer descriptors than the flood below.
    const dir = makeModelDir({ script });
    const port = await freePort();
    const proc = spawn('sh', ['-c', 'ulimit -n 120 && exec "$0" "$@"', TEST_SERVER, 'serve', dir, '--port', String(port),
      '--load-format', `scripted:${dir}/script.json`], { stdio: ['ignore', 'ignore', 'pipe'] });
    let log = '';
    proc.stderr.on('data', (d) => (log += d));
    const socks = [];
    try {
      await waitFor(async () => (await fetch(`http://127.0.0.1:${port}/health`).catch(() => ({}))).status === 200, { timeoutMs: 60000 });
      for (let i = 0; i < 200; i++) {
        const c = net.connect(port, '127.0.0.1');
        c.on('error', () => {});
        c.write('GET /health HTTP/1.1\r\n');
        socks.push(c);
      }
      await waitFor(async () => log.includes('out of file descriptors'));
      // The server may still be closing the oldest connections when a probe arrives (its connection can be
      // one of them): each probe is retried until it gets its 200.
      for (let k = 0; k < 3; k++)
        await waitFor(async () => (await fetch(`http://127.0.0.1:${port}/health`).catch(() => ({}))).status === 200);
    } finally {
      for (const c of socks) c.destroy();
      proc.kill('SIGTERM');
    }
  });
});

describe('API compatibility', () => {
  test('GET /v1/models/{id} (models.retrieve, ids with a slash); unknown ids 404; /v1/messages is 501', async () => {
    const m = await server.client().models.retrieve('acme/tiny');
    assert.equal(m.id, 'acme/tiny');
    assert.equal(m.object, 'model');
    const missing = await fetch(server.url('/v1/models/nope'));
    assert.equal(missing.status, 404);
    assert.equal((await missing.json()).error.param, 'model');
    const msg = await postJson(server.url('/v1/messages'), { model: 'acme/tiny', messages: user('hi'), max_tokens: 5 });
    assert.equal(msg.status, 501);
    assert.equal(msg.json.error.type, 'not_supported_error');
  });

  test('thinking off: a closed thought block goes to reasoning_content, never raw into content (streamed and not)', async () => {
    const r = await postJson(server.url(CHAT), { messages: user('lookup') });
    assert.equal(r.status, 200);
    assert.equal(r.json.choices[0].message.content, 'Answer.');
    assert.equal(r.json.choices[0].message.reasoning_content, 'Need a lookup.');
    const s = await streamRaw(server.url(CHAT), { messages: user('lookup'), stream: true });
    const deltas = s.events.filter((e) => e !== '[DONE]').flatMap((e) => e.choices.map((c) => c.delta));
    assert.equal(deltas.map((d) => d.content ?? '').join(''), 'Answer.');
    assert.equal(deltas.map((d) => d.reasoning_content ?? '').join(''), 'Need a lookup.');
    assert.doesNotMatch(s.text, /channel\|>/);
  });

  test('tool-call ids differ between server processes', async () => {
    const ask = async (s) => (await postJson(s.url(CHAT), { messages: user('weather?'), tools })).json.choices[0].message.tool_calls[0].id;
    const other = await startServer({ modelDir: makeModelDir({ script }), args: serverArgs });
    try {
      const [a, b] = [await ask(server), await ask(other)];
      assert.match(a, /^call_[0-9A-Za-z]{24}$/);
      assert.match(b, /^call_[0-9A-Za-z]{24}$/);
      assert.notEqual(a, b);
    } finally {
      await other.stop();
    }
  });

  test('a 30 MB prompt is refused without tokenising it whole: the error names prompt, memory stays bounded', async () => {
    const status = () => fs.readFileSync(`/proc/${server.proc.pid}/status`, 'utf8');
    const hwm = () => Number(status().match(/VmHWM:\s+(\d+) kB/)[1]) * 1024;
    const before = hwm();
    const prompt = 'lorem ipsum dolor sit amet '.repeat(30 * 1024 * 1024 / 27);
    const r = await postJson(server.url('/v1/completions'), { prompt, max_tokens: 4 });
    assert.equal(r.status, 400);
    assert.equal(r.json.error.param, 'prompt');
    assert.equal(r.json.error.code, 'context_length_exceeded');
    assert.match(r.json.error.message, /has at least \d+ input tokens/);
    const grown = hwm() - before;
    // The body is held a few times (socket buffer, request, JSON, parsed prompt); the tokenizer's
    // working set is bounded by the context length, not by the prompt.
    assert.ok(grown < 8 * prompt.length, `peak memory grew by ${(grown / 2 ** 20).toFixed(0)} MiB`);
  });
});

describe('a server with CORS rules, --root-path, --response-role and a short request deadline', () => {
  let s;
  before(async () => {
    s = await startServer({
      modelDir: makeModelDir({ script }),
      args: ['--allowed-origins', '["https://ui.example"]', '--allow-credentials', '--allowed-headers', '["authorization","content-type"]',
        '--root-path', '/llm', '--response-role', 'bot', '--served-model-name', 'acme/tiny-root', '--request-read-timeout', '1', '--max-connections', '16'],
    });
  });
  after(async () => s?.stop());

  test('preflight OPTIONS is answered for allowed origins; others get 400; responses carry the CORS headers', async () => {
    const pre = await fetch(s.url('/v1/chat/completions'), {
      method: 'OPTIONS',
      headers: { origin: 'https://ui.example', 'access-control-request-method': 'POST', 'access-control-request-headers': 'content-type, authorization' },
    });
    assert.equal(pre.status, 200);
    assert.equal(pre.headers.get('access-control-allow-origin'), 'https://ui.example');
    assert.equal(pre.headers.get('access-control-allow-credentials'), 'true');
    assert.match(pre.headers.get('access-control-allow-methods'), /POST/);
    assert.equal(pre.headers.get('access-control-allow-headers'), 'authorization, content-type');
    const bad = await fetch(s.url('/v1/models'), {
      method: 'OPTIONS', headers: { origin: 'https://evil.example', 'access-control-request-method': 'GET' },
    });
    assert.equal(bad.status, 400);
    assert.equal(bad.headers.get('access-control-allow-origin'), null);
    const get = await fetch(s.url('/v1/models'), { headers: { origin: 'https://ui.example' } });
    assert.equal(get.headers.get('access-control-allow-origin'), 'https://ui.example');
    assert.equal(get.headers.get('vary'), 'Origin');
    const other = await fetch(s.url('/v1/models'), { headers: { origin: 'https://evil.example' } });
    assert.equal(other.headers.get('access-control-allow-origin'), null);
    // The default server allows any origin, as vLLM does.
    const any = await fetch(server.url('/v1/models'), { headers: { origin: 'https://a.example' } });
    assert.equal(any.headers.get('access-control-allow-origin'), '*');
  });

  test('--root-path serves every route under the prefix too; --response-role names the role', async () => {
    assert.equal((await fetch(s.url('/llm/v1/models'))).status, 200);
    assert.equal((await fetch(s.url('/v1/models'))).status, 200);
    assert.equal((await fetch(s.url('/other/v1/models'))).status, 404);
    const r = await postJson(s.url('/llm/v1/chat/completions'), { messages: user('hello') });
    assert.equal(r.status, 200);
    assert.equal(r.json.choices[0].message.role, 'bot');
    const card = await (await fetch(s.url('/llm/v1/models/acme/tiny-root'))).json();
    assert.equal(card.id, 'acme/tiny-root');
  });

  test('the API key guards the prefixed routes as well', async () => {
    const k = await startServer({ modelDir: makeModelDir({ script }), args: ['--root-path', '/llm', '--api-key', 'sekret'] });
    try {
      for (const p of ['/v1/models', '/llm/v1/models']) {
        assert.equal((await fetch(k.url(p))).status, 401, p);
        assert.equal((await fetch(k.url(p), { headers: { authorization: 'Bearer sekret' } })).status, 200, p);
      }
    } finally {
      await k.stop();
    }
  });

  test('at --max-connections the longest-waiting connection is closed to make room; /health still answers', async () => {
    const socks = [];
    let closedByServer = 0;
    for (let i = 0; i < 40; i++) {
      const c = net.connect(s.port, '127.0.0.1');
      c.on('error', () => {});
      c.on('data', () => {});
      // 'close', not 'end': a server closing a socket with unread bytes sends a reset (an 'error'
      // and no 'end'); the test destroys its sockets only after counting.
      c.on('close', () => closedByServer++);
      c.write('GET /health HTTP/1.1\r\nHost: x\r\n');  // never finished
      socks.push(c);
      await new Promise((r) => c.on('connect', r));
    }
    try {
      // Each check opens its own connection: the server may have evicted fetch's pooled keep-alive
      // socket (it is idle, so it can be the longest-waiting one), and reusing it would race that close.
      for (let k = 0; k < 3; k++) {
        const r = await raw(s.port, 'GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
        assert.match(r.text, /^HTTP\/1\.1 200 /);
      }
      await waitFor(async () => closedByServer >= 40 - 16);
    } finally {
      for (const c of socks) c.destroy();
    }
  });

  test('a request whose headers are not complete within --request-read-timeout gets 408 and is closed', async () => {
    const sock = net.connect(s.port, '127.0.0.1');
    sock.on('error', () => {});
    let got = '';
    sock.on('data', (d) => (got += d));
    const ended = new Promise((r) => sock.on('close', r));
    sock.write('GET /health HTTP/1.1\r\n');
    const drip = setInterval(() => sock.write('X-Drip: 1\r\n'), 200);
    await ended;
    clearInterval(drip);
    assert.match(got, /^HTTP\/1\.1 408 /);
  });
});
