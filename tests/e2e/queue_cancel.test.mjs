// Continuous batching limits: more requests than --max-num-seqs wait in a FIFO queue, a full queue is a
// 503 with Retry-After, and a client that goes away (streaming or not, running or queued) frees its slot.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { makeModelDir, metrics, postJson, sample, sleep, startServer, waitFor } from './helpers.mjs';

const script = {
  canvas_length: 8,
  canvas_delay_ms: 100,
  replies: [
    // About 80 tokens: ten canvases of 8, 300 ms each.
    { when: 'slow', canvases: Array.from({ length: 40 }, (_, i) => ({ text: ` part${i}`, delay_ms: 300 })) },
    { when: 'quick', canvases: [' one', ' two'] },
  ],
  default: { random_canvases: 2 },
};

let server;
before(async () => {
  server = await startServer({
    modelDir: makeModelDir({ script }),
    args: ['--max-num-seqs', '2', '--max-queue', '3', '--sse-ping-interval', '0.1'],
  });
});
after(async () => server?.stop());

const user = (content) => [{ role: 'user', content }];
const gauges = async () => {
  const m = await metrics(server);
  return {
    running: sample(m, 'dgemma:num_requests_running'),
    waiting: sample(m, 'dgemma:num_requests_waiting'),
    cancelled: sample(m, 'dgemma:requests_cancelled_total'),
    aborted: sample(m, 'dgemma:request_success_total', { finished_reason: 'abort' }),
  };
};
const idle = () => waitFor(async () => {
  const g = await gauges();
  return g.running === 0 && g.waiting === 0 ? g : null;
});

// Starts a streaming request and resolves once its response headers arrived.
async function openStream(content, controller = new AbortController()) {
  const res = await fetch(server.url('/v1/chat/completions'), {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ messages: user(content), stream: true }),
    signal: controller.signal,
  });
  return { res, controller };
}

async function readFirstContent(res) {
  const reader = res.body.getReader();
  const dec = new TextDecoder();
  let text = '';
  while (!text.includes('"content":" part')) {
    const { value, done } = await reader.read();
    if (done) throw new Error('stream ended early');
    text += dec.decode(value);
  }
  return reader;
}

describe('queueing', () => {
  test('requests beyond --max-num-seqs wait and all finish, first come first served', async () => {
    await idle();
    const finished = [];
    let maxRunning = 0;
    let sawWaiting = false;
    let polling = true;
    const poller = (async () => {
      while (polling) {
        const g = await gauges();
        maxRunning = Math.max(maxRunning, g.running);
        if (g.waiting > 0) sawWaiting = true;
        await sleep(20);
      }
    })();
    const reqs = [];
    for (let i = 0; i < 5; i++) {
      reqs.push(postJson(server.url('/v1/chat/completions'), { messages: user(`quick ${i}`) }).then((r) => {
        finished.push(i);
        return r;
      }));
      await sleep(40);
    }
    const results = await Promise.all(reqs);
    polling = false;
    await poller;
    for (const r of results) {
      assert.equal(r.status, 200);
      assert.equal(r.json.choices[0].message.content, ' one two');
    }
    assert.ok(maxRunning <= 2, `running never exceeds --max-num-seqs (saw ${maxRunning})`);
    assert.ok(sawWaiting, 'some requests waited');
    assert.deepEqual(finished, [0, 1, 2, 3, 4]);
  });

  test('a full queue answers 503 with Retry-After; cancelling frees everything', async () => {
    await idle();
    const before = await gauges();
    const streams = [];
    for (let i = 0; i < 5; i++) streams.push(await openStream('slow'));
    await waitFor(async () => {
      const g = await gauges();
      return g.running === 2 && g.waiting === 3;
    });
    const over = await postJson(server.url('/v1/chat/completions'), { messages: user('quick') });
    assert.equal(over.status, 503);
    assert.equal(over.json.error.type, 'unavailable_error');
    assert.ok(Number(over.headers.get('retry-after')) >= 1);
    for (const s of streams) s.controller.abort();
    const g = await idle();
    assert.equal(g.cancelled - before.cancelled, 5);
    assert.equal(g.aborted - before.aborted, 5);
    const ok = await postJson(server.url('/v1/chat/completions'), { messages: user('quick') });
    assert.equal(ok.status, 200, 'the server keeps serving');
  });
});

describe('client disconnects', () => {
  test('a stream closed mid-reply frees its slot within a ping interval or two', async () => {
    await idle();
    const before = await gauges();
    const { res, controller } = await openStream('slow');
    const reader = await readFirstContent(res);
    assert.equal((await gauges()).running, 1);
    const t0 = Date.now();
    controller.abort();
    await reader.cancel().catch(() => {});
    const g = await idle();
    assert.ok(Date.now() - t0 < 2000, 'freed well before the reply would have ended');
    assert.equal(g.cancelled - before.cancelled, 1);
  });

  test('a queued request whose client leaves is dropped from the queue', async () => {
    await idle();
    const before = await gauges();
    const a = await openStream('slow');
    const b = await openStream('slow');
    const c = await openStream('slow');
    await waitFor(async () => (await gauges()).waiting === 1);
    c.controller.abort();
    await waitFor(async () => {
      const g = await gauges();
      return g.waiting === 0 && g.running === 2;
    });
    a.controller.abort();
    b.controller.abort();
    const g = await idle();
    assert.equal(g.cancelled - before.cancelled, 3);
  });

  test('a non-streaming client that hangs up is noticed too', async () => {
    await idle();
    const before = await gauges();
    const controller = new AbortController();
    const p = fetch(server.url('/v1/chat/completions'), {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ messages: user('slow') }),
      signal: controller.signal,
    }).catch((e) => e);
    await waitFor(async () => (await gauges()).running === 1);
    await sleep(300);
    controller.abort();
    await p;
    const g = await idle();
    assert.equal(g.cancelled - before.cancelled, 1);
  });

  test('a long non-streaming request returns plain JSON with its headers unchanged (no keep-alive bytes)', async () => {
    // The answer takes several --sse-ping-interval periods; nothing is written before it is ready.
    const r = await postJson(server.url('/v1/chat/completions'), { messages: user('slow'), max_tokens: 6 });
    assert.equal(r.status, 200);
    assert.equal(r.headers.get('content-type'), 'application/json');
    assert.ok(r.headers.get('content-length'), 'a plain (not chunked) body');
    assert.ok(r.text.startsWith('{'), 'the body starts with the JSON object');
    assert.equal(r.json.choices[0].finish_reason, 'length');
    assert.equal(r.json.usage.completion_tokens, 6);
  });
});

describe('a KV pool smaller than the running requests', () => {
  // 8 pages of 8 tokens: a 'long' request (11 prompt tokens, 5 canvases) needs up to 6 as it grows,
  // two need 12, so the scheduler preempts the newer one and recomputes it when pages come back.
  const WORDS = Array.from({ length: 16 }, (_, i) => ` w${i}`);  // 38 tokens
  let small;
  before(async () => {
    small = await startServer({
      modelDir: makeModelDir({ script: { canvas_length: 8, canvas_delay_ms: 100, replies: [{ when: 'long', canvases: WORDS }] } }),
      args: ['--max-num-seqs', '2', '--kv-cache-memory', '72k', '--max-model-len', '256', '--max-num-batched-tokens', '64'],
    });
  });
  after(async () => small?.stop());

  test('preemption: both replies arrive whole, one of them recomputed', async () => {
    assert.match(small.log(), /8 full-attention pages/);
    const before = sample(await metrics(small), 'dgemma:num_preemptions_total');
    const ask = (c) => postJson(small.url('/v1/chat/completions'), { messages: user(c), max_tokens: 40 });
    const [a, b] = await Promise.all([ask('long A'), ask('long B')]);
    for (const r of [a, b]) {
      assert.equal(r.status, 200);
      assert.equal(r.json.choices[0].message.content, WORDS.join(''));
      assert.equal(r.json.choices[0].finish_reason, 'stop');
    }
    assert.ok(sample(await metrics(small), 'dgemma:num_preemptions_total') > before, 'a request was preempted');
    // A request that could never fit is refused up front.
    const never = await postJson(small.url('/v1/chat/completions'), { messages: user('long'), max_tokens: 200 });
    assert.equal(never.status, 400);
    assert.match(never.json.error.message, /KV-cache pages/);
  });
});
