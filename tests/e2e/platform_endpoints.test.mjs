// What platforms probe and what dashboards read: HEAD /health, SageMaker's /ping and /invocations,
// /openapi.json (checked against the OpenAPI schema, every operation routed), the vLLM metric names read
// by Prometheus' Python client, a prefill time that is really measured, and a queued stream whose client
// left freed within a second (with the default 10 s ping interval).
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { after, before, describe, test } from 'node:test';
import { Validator } from '@seriousme/openapi-schema-validator';
import { makeModelDir, metrics, postJson, readSse, sample, sleep, startServer, waitFor } from './helpers.mjs';

const KEY = 'sk-platform';
const auth = { authorization: `Bearer ${KEY}` };
const script = {
  canvas_length: 8,
  canvas_delay_ms: 10,
  prefill_delay_ms: 300,
  replies: [
    { when: 'slow', canvases: Array.from({ length: 12 }, (_, i) => ({ text: ` part${i}`, delay_ms: 250 })) },
    { when: 'hello', canvases: ['Hi there, friend!<turn|>'] },
  ],
  default: { random_canvases: 1 },
};

let server;
before(async () => {
  server = await startServer({
    modelDir: makeModelDir({ script }),
    args: ['--served-model-name', 'dg', '--api-key', KEY, '--max-num-seqs', '1'],
  });
});
after(async () => server?.stop());

describe('health probes', () => {
  test('HEAD /health: 200, no body', async () => {
    const r = await fetch(server.url('/health'), { method: 'HEAD' });
    assert.equal(r.status, 200);
    assert.equal(await r.text(), '');
  });

  test('GET and POST /ping (SageMaker) answer as /health, without a key', async () => {
    for (const method of ['GET', 'POST']) {
      const r = await fetch(server.url('/ping'), { method });
      assert.equal(r.status, 200, method);
    }
  });
});

describe('/invocations (SageMaker)', () => {
  test('a chat body is a chat completion, a prompt body a completion, streamed too', async () => {
    const chat = await postJson(server.url('/invocations'), { messages: [{ role: 'user', content: 'hello' }] }, auth);
    assert.equal(chat.status, 200, chat.text);
    assert.equal(chat.json.object, 'chat.completion');
    assert.equal(chat.json.choices[0].message.content, 'Hi there, friend!');
    const comp = await postJson(server.url('/invocations'), { prompt: 'hello' }, auth);
    assert.equal(comp.status, 200, comp.text);
    assert.equal(comp.json.object, 'text_completion');
    const r = await fetch(server.url('/invocations'), {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...auth },
      body: JSON.stringify({ messages: [{ role: 'user', content: 'hello' }], stream: true }),
    });
    const sse = await readSse(r);
    assert.equal(sse.events.at(-1), '[DONE]');
    assert.equal(sse.events.filter((e) => e !== '[DONE]').map((e) => e.choices[0]?.delta?.content ?? '').join(''), 'Hi there, friend!');
  });

  test('anything else is a 400; without the key a 401', async () => {
    const r = await postJson(server.url('/invocations'), { input: 'hello' }, auth);
    assert.equal(r.status, 400);
    assert.match(r.json.error.message, /messages.*prompt/);
    assert.equal((await postJson(server.url('/invocations'), { prompt: 'hello' })).status, 401);
    assert.equal((await postJson(server.url('/invocations'), '[1, 2', auth)).status, 400);
  });
});

describe('/openapi.json', () => {
  let doc;
  before(async () => {
    const r = await fetch(server.url('/openapi.json'));
    assert.equal(r.status, 200);
    doc = await r.json();
  });

  test('a valid OpenAPI 3.1 document', async () => {
    const v = new Validator();
    const res = await v.validate(doc);
    assert.equal(res.valid, true, JSON.stringify(res.errors, null, 1)?.slice(0, 2000));
    assert.equal(v.version, '3.1');
    for (const p of ['/v1/chat/completions', '/v1/completions', '/v1/responses', '/v1/responses/{response_id}', '/health', '/ping',
      '/invocations', '/openapi.json', '/metrics', '/v1/models/{model}', '/tokenize', '/favicon.ico'])
      assert.ok(doc.paths[p], p);
  });

  test('every operation it lists is routed (no 404 from the router, no 405)', async () => {
    for (const [path, ops] of Object.entries(doc.paths)) {
      for (const verb of Object.keys(ops)) {
        const url = server.url(path.replace(/\{[^}]+\}/g, 'x'));
        const init = { method: verb.toUpperCase(), headers: { ...auth, 'content-type': 'application/json' } };
        if (verb === 'post') init.body = '{}';
        const r = await fetch(url, init);
        const text = verb === 'head' ? '' : await r.text();
        assert.notEqual(r.status, 405, `${verb} ${path}`);
        assert.ok(!(r.status === 404 && text.includes('Not found: ')), `${verb} ${path}: ${text}`);
      }
    }
  });
});

// Prometheus' Python client parses the exposition as Prometheus does (counters lose their _total).
function prometheusFamilies(text) {
  const code = `
import json, sys
from prometheus_client.parser import text_string_to_metric_families
out = {}
for f in text_string_to_metric_families(sys.stdin.read()):
    out[f.name] = {"type": f.type, "samples": [[s.name, s.labels, s.value] for s in f.samples]}
print(json.dumps(out))`;
  for (const py of ['/usr/bin/python3', 'python3']) {
    const r = spawnSync(py, ['-c', code], { input: text, encoding: 'utf8' });
    if (r.status === 0) return JSON.parse(r.stdout);
    if (r.stderr && !r.stderr.includes('No module named')) throw new Error(`${py}: ${r.stderr}`);
  }
  throw new Error('no python3 with prometheus_client (scripts/setup.sh installs python3-prometheus-client)');
}

describe('metrics', () => {
  test("vLLM's names, read by Prometheus' parser, equal to dgemma's", async () => {
    await postJson(server.url('/v1/chat/completions'), { messages: [{ role: 'user', content: 'hello' }] }, auth);
    const text = await (await fetch(server.url('/metrics'))).text();
    const fam = prometheusFamilies(text);
    const expect = {
      'vllm:num_requests_running': 'gauge', 'vllm:num_requests_waiting': 'gauge', 'vllm:kv_cache_usage_perc': 'gauge',
      'vllm:gpu_cache_usage_perc': 'gauge', 'vllm:lora_requests_info': 'gauge',
      'vllm:prefix_cache_queries': 'counter', 'vllm:prefix_cache_hits': 'counter', 'vllm:num_preemptions': 'counter',
      'vllm:prompt_tokens': 'counter', 'vllm:generation_tokens': 'counter', 'vllm:request_success': 'counter',
      'vllm:time_to_first_token_seconds': 'histogram', 'vllm:inter_token_latency_seconds': 'histogram',
      'vllm:request_time_per_output_token_seconds': 'histogram', 'vllm:e2e_request_latency_seconds': 'histogram',
      'vllm:request_queue_time_seconds': 'histogram', 'vllm:request_inference_time_seconds': 'histogram',
      'vllm:request_prefill_time_seconds': 'histogram', 'vllm:request_decode_time_seconds': 'histogram',
      'vllm:request_prompt_tokens': 'histogram', 'vllm:request_generation_tokens': 'histogram',
      'vllm:request_params_n': 'histogram', 'vllm:request_params_max_tokens': 'histogram',
    };
    for (const [name, type] of Object.entries(expect)) {
      assert.equal(fam[name]?.type, type, name);
      for (const [, labels] of fam[name].samples) assert.equal(labels.model_name, 'dg', name);
      if (name === 'vllm:lora_requests_info') continue;
      const twin = fam[name.replace('vllm:', 'dgemma:')] ?? fam['dgemma:kv_cache_usage_perc'];
      assert.deepEqual(fam[name].samples.map((s) => s[2]), twin.samples.map((s) => s[2]), `${name} equals dgemma's`);
    }
    const success = fam['vllm:request_success'].samples.find(([n, l]) => n === 'vllm:request_success_total' && l.finished_reason === 'stop');
    assert.ok(success[2] >= 1);
  });

  test('request_prefill_time_seconds measures the prefill (300 ms scripted), not 0', async () => {
    const before = await metrics(server);
    const r = await postJson(server.url('/v1/chat/completions'), { messages: [{ role: 'user', content: 'hello' }] }, auth);
    assert.equal(r.status, 200);
    const after = await metrics(server);
    const d = (n) => sample(after, n) - sample(before, n);
    assert.equal(d('vllm:request_prefill_time_seconds_count'), 1);
    const prefill = d('vllm:request_prefill_time_seconds_sum');
    assert.ok(prefill >= 0.29, `prefill ${prefill} s`);
    assert.ok(prefill < d('vllm:e2e_request_latency_seconds_sum'), 'part of the request');
    assert.ok(Math.abs(d('vllm:request_inference_time_seconds_sum') - prefill - d('vllm:request_decode_time_seconds_sum')) < 1e-6);
  });
});

describe('a queued stream whose client left', () => {
  test('is dropped from the queue within a second (pings every 10 s)', async () => {
    const slow = postJson(server.url('/v1/chat/completions'), { messages: [{ role: 'user', content: 'slow' }] }, auth);
    await waitFor(async () => sample(await metrics(server), 'vllm:num_requests_running') === 1);
    const before = await metrics(server);
    const controller = new AbortController();
    const res = await fetch(server.url('/v1/chat/completions'), {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...auth },
      body: JSON.stringify({ messages: [{ role: 'user', content: 'hello' }], stream: true }),
      signal: controller.signal,
    });
    assert.equal(res.status, 200);
    await waitFor(async () => sample(await metrics(server), 'vllm:num_requests_waiting') === 1);
    const left = Date.now();
    controller.abort();
    await waitFor(async () => sample(await metrics(server), 'vllm:num_requests_waiting') === 0, { timeoutMs: 5000, intervalMs: 20 });
    const ms = Date.now() - left;
    assert.ok(ms < 1000, `freed after ${ms} ms`);
    const after = await metrics(server);
    assert.equal(sample(after, 'dgemma:requests_cancelled_total') - sample(before, 'dgemma:requests_cancelled_total'), 1);
    assert.equal(sample(after, 'vllm:num_requests_running'), 1, 'the running request goes on');
    assert.equal((await slow).status, 200);
    await sleep(50);
  });
});
