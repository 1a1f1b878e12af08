// API keys (401s, Bearer and X-Api-Key, public paths), /health during loading, /metrics in Prometheus
// text with vLLM's names under dgemma:, and the CLI's flag handling.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { makeModelDir, metrics, parseMetrics, postJson, runCli, sample, startServer } from './helpers.mjs';

// Canvases of 4 tokens: the 'hello' reply (6 tokens with its <turn|>) takes two.
const script = { canvas_length: 4, canvas_delay_ms: 10, steps: 6, replies: [{ when: 'hello', canvases: ['Hi there,', ' friend!<turn|>'] }] };
const KEY = 'sk-test-0123456789';
let server;
let modelDir;
before(async () => {
  modelDir = makeModelDir({ script });
  server = await startServer({
    modelDir,
    args: ['--api-key', KEY, '--api-key', 'second-key', '--served-model-name', 'dg', '--max-model-len', '1k'],
  });
});
after(async () => server?.stop());

const user = (content) => [{ role: 'user', content }];

describe('API keys', () => {
  test('missing or wrong key: 401 authentication_error on /v1/*', async () => {
    for (const headers of [{}, { authorization: 'Bearer nope' }, { authorization: `Bearer ${KEY}x` }, { authorization: KEY }, { 'x-api-key': 'nope' }]) {
      for (const path of ['/v1/chat/completions', '/v1/completions']) {
        const r = await postJson(server.url(path), { messages: user('hello'), prompt: 'x' }, headers);
        assert.equal(r.status, 401, JSON.stringify(headers));
        assert.equal(r.json.error.type, 'authentication_error');
        assert.equal(r.json.error.code, 401);
      }
      const m = await fetch(server.url('/v1/models'), { headers });
      assert.equal(m.status, 401);
    }
  });

  test('the openai client with the right key works; with a wrong one it gets AuthenticationError', async () => {
    const ok = await server.client({ apiKey: KEY }).chat.completions.create({ messages: user('hello') });
    assert.equal(ok.choices[0].message.content, 'Hi there, friend!');
    const ok2 = await server.client({ apiKey: 'second-key' }).completions.create({ prompt: 'hello' });
    assert.equal(ok2.choices[0].text, 'Hi there, friend!');
    await assert.rejects(server.client({ apiKey: 'wrong' }).chat.completions.create({ messages: user('hello') }), (e) => {
      assert.equal(e.status, 401);
      assert.equal(e.constructor.name, 'AuthenticationError');
      return true;
    });
  });

  test('X-Api-Key is accepted; /health, /metrics, /version, /tokenize stay public', async () => {
    const r = await postJson(server.url('/v1/completions'), { prompt: 'hello' }, { 'x-api-key': KEY });
    assert.equal(r.status, 200);
    for (const path of ['/health', '/metrics', '/version']) assert.equal((await fetch(server.url(path))).status, 200, path);
    assert.equal((await postJson(server.url('/tokenize'), { prompt: 'hi' })).status, 200);
  });

  test('the key never appears in the log', () => {
    assert.ok(!server.log().includes(KEY));
  });
});

describe('metrics', () => {
  test('Prometheus text with vLLM names, types, labels and buckets', async () => {
    const before = await metrics(server);
    const client = server.client({ apiKey: KEY });
    await client.chat.completions.create({ messages: user('hello') });
    const stream = await client.chat.completions.create({ messages: user('hello'), stream: true, max_tokens: 2 });
    for await (const _ of stream);
    const res = await fetch(server.url('/metrics'));
    assert.match(res.headers.get('content-type'), /^text\/plain; version=0\.0\.4/);
    const m = parseMetrics(await res.text());
    const types = Object.fromEntries(m.types);
    for (const [name, type] of Object.entries({
      'dgemma:num_requests_running': 'gauge',
      'dgemma:num_requests_waiting': 'gauge',
      'dgemma:kv_cache_usage_perc': 'gauge',
      'dgemma:prompt_tokens_total': 'counter',
      'dgemma:generation_tokens_total': 'counter',
      'dgemma:request_success_total': 'counter',
      'dgemma:time_to_first_token_seconds': 'histogram',
      'dgemma:inter_token_latency_seconds': 'histogram',
      'dgemma:request_time_per_output_token_seconds': 'histogram',
      'dgemma:e2e_request_latency_seconds': 'histogram',
      'dgemma:request_queue_time_seconds': 'histogram',
      'dgemma:request_inference_time_seconds': 'histogram',
      'dgemma:request_prefill_time_seconds': 'histogram',
      'dgemma:request_decode_time_seconds': 'histogram',
      'dgemma:request_prompt_tokens': 'histogram',
      'dgemma:request_generation_tokens': 'histogram',
      'dgemma:request_params_n': 'histogram',
      'dgemma:request_params_max_tokens': 'histogram',
      'dgemma:denoising_steps_per_canvas': 'histogram',
      'dgemma:tokens_per_denoising_step': 'histogram',
      'dgemma:canvases_committed_total': 'counter',
      'dgemma:requests_cancelled_total': 'counter',
    }))
      assert.equal(types[name], type, name);
    for (const k of m.samples.keys()) assert.match(k, /model_name="dg",engine="0"/, k);
    // vLLM's TTFT buckets, cumulative, ending in +Inf == _count.
    const ttft = [...m.samples].filter(([k]) => k.startsWith('dgemma:time_to_first_token_seconds_bucket'));
    const les = ttft.map(([k]) => k.match(/le="([^"]+)"/)[1]);
    assert.deepEqual(les, ['0.001', '0.005', '0.01', '0.02', '0.04', '0.06', '0.08', '0.1', '0.25', '0.5', '0.75', '1.0', '2.5', '5.0', '7.5', '10.0', '20.0', '40.0', '80.0', '160.0', '640.0', '2560.0', '+Inf']);
    for (let i = 1; i < ttft.length; i++) assert.ok(ttft[i][1] >= ttft[i - 1][1]);
    assert.equal(ttft.at(-1)[1], sample(m, 'dgemma:time_to_first_token_seconds_count'));
    // 1-2-5 token buckets up to max_model_len (1k = 1000).
    const plen = [...m.samples.keys()].filter((k) => k.startsWith('dgemma:request_prompt_tokens_bucket')).map((k) => k.match(/le="([^"]+)"/)[1]);
    assert.deepEqual(plen, ['1.0', '2.0', '5.0', '10.0', '20.0', '50.0', '100.0', '200.0', '500.0', '1000.0', '+Inf']);
    // Counters moved by exactly what the two requests did.
    const d = (name, labels) => sample(m, name, labels) - sample(before, name, labels);
    assert.equal(d('dgemma:request_success_total', { finished_reason: 'stop' }), 1);
    assert.equal(d('dgemma:request_success_total', { finished_reason: 'length' }), 1);
    const tokens = async (t) => (await postJson(server.url('/tokenize'), { prompt: t })).json.count;
    assert.equal(d('dgemma:generation_tokens_total'), (await tokens('Hi there,')) + (await tokens(' friend!')) + 2);
    assert.equal(d('dgemma:canvases_committed_total'), 3);
    assert.equal(d('dgemma:denoising_steps_per_canvas_sum'), 3 * 6);
    assert.equal(d('dgemma:e2e_request_latency_seconds_count'), 2);
    assert.equal(d('dgemma:request_params_max_tokens_count'), 1);
  });
});

describe('command line', () => {
  test('--help documents every flag', async () => {
    const r = await runCli(['serve', '--help']);
    assert.equal(r.code, 0);
    for (const flag of ['--host', '--port', '--served-model-name', '--max-model-len', '--max-num-seqs', '--max-num-batched-tokens',
      '--gpu-memory-utilization', '--diffusion-config', '--hf-overrides', '--generation-config', '--override-generation-config',
      '--enable-auto-tool-choice', '--tool-call-parser', '--reasoning-parser', '--default-chat-template-kwargs', '--chat-template',
      '--api-key', '--dtype', '--load-format', '--seed', '--enable-chunked-prefill', '--enable-prefix-caching', '--max-queue',
      '--attention-backend', '--trust-remote-code', '--tensor-parallel-size'])
      assert.ok(r.stdout.includes(flag), flag);
  });

  const bad = [
    [['--no-such-flag'], /no-such-flag/],
    [['--port', 'eighty'], /port/i],
    [['--port', '70000'], /port/],
    [['--max-num-seqs', '0'], /max-num-seqs/],
    [['--max-num-seqs', '1025'], /max-num-seqs/],  // engine/limits.h kMaxNumSeqs: the engine's bound too
    [['--diffusion-config', '{"max_denoising_steps": 1025}'], /max_denoising_steps/],
    [['--gpu-memory-utilization', '1.5'], /gpu-memory-utilization/],
    [['--max-model-len', 'lots'], /max-model-len/],
    [['--diffusion-config', '{"canvas_length": 0}'], /canvas_length/],
    [['--diffusion-config', '{"block_size": 32}'], /block_size/],
    [['--diffusion-config', 'not json'], /diffusion-config/],
    [['--hf-overrides', '{"diffusion_sampler": "ddim"}'], /diffusion_sampler/],
    [['--hf-overrides', '{"diffusion_entropy_bound": -1}'], /diffusion_entropy_bound/],
    [['--tool-call-parser', 'hermes'], /tool-call-parser/],
    [['--reasoning-parser', 'deepseek_r1'], /reasoning-parser/],
    [['--enable-auto-tool-choice'], /tool-call-parser/],
    [['--default-chat-template-kwargs', '{"evil": 1}'], /evil/],
    [['--dtype', 'float16'], /dtype/],
    [['--load-format', 'gguf'], /load-format/],
    [['-tp', '3'], /tensor-parallel-size/],
    [['--chat-template', '/nonexistent/t.jinja'], /chat-template/],
    [['--load-format', 'scripted:/nonexistent.json'], /nonexistent/],
  ];
  for (const [args, pattern] of bad) {
    test(`rejects ${args.join(' ')}`, async () => {
      const r = await runCli(['serve', modelDir, '--port', '0', ...args]);
      assert.notEqual(r.code, 0);
      assert.match(r.stderr + r.stdout, pattern);
      assert.ok(!/internal error|Segmentation|terminate called/.test(r.stderr), r.stderr);
    });
  }

  test('a missing model directory is a clear error', async () => {
    const r = await runCli(['serve', '/nonexistent/model']);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /MODEL '\/nonexistent\/model' is neither a directory nor a Hugging Face repo id/);
  });

  test('vLLM-only knobs are accepted and logged', async () => {
    const s = await startServer({
      modelDir,
      args: ['-tp', '1', '--attention-backend', 'TRITON_ATTN', '--trust-remote-code', '--enable-chunked-prefill',
        '--enable-prefix-caching', '--gpu-memory-utilization', '0.85', '--hf-overrides',
        '{"diffusion_sampler":"entropy_bound","diffusion_entropy_bound":0.1}', '--diffusion-config', '{"canvas_length":256}',
        '--default-chat-template-kwargs', '{"enable_thinking": true}', '--dtype', 'bfloat16', '--seed', '0'],
    });
    assert.match(s.log(), /--attention-backend TRITON_ATTN: accepted/);
    assert.match(s.log(), /--trust-remote-code: accepted/);
    assert.deepEqual(await s.stop(), { code: 0, signal: null });
  });

  test('/health is 503 (unavailable_error) while the model loads, then 200', async () => {
    const { spawn } = await import('node:child_process');
    const { freePort, sleep, TEST_SERVER } = await import('./helpers.mjs');
    const port = await freePort();
    const p = spawn(TEST_SERVER, ['serve', modelDir, '--port', String(port), '--load-format', `scripted:${modelDir}/script.json`], { stdio: 'ignore' });
    const seen = [];
    try {
      for (let i = 0; i < 3000; i++) {
        try {
          const r = await fetch(`http://127.0.0.1:${port}/health`);
          const body = await r.text();
          if (r.status === 503) {
            assert.equal(JSON.parse(body).error.type, 'unavailable_error');
            const m = await fetch(`http://127.0.0.1:${port}/v1/models`);
            if (m.status !== 200) assert.equal(m.status, 503);
          }
          if (!seen.includes(r.status)) seen.push(r.status);
          if (r.status === 200) break;
        } catch {}
        await sleep(5);
      }
    } finally {
      p.kill('SIGTERM');
    }
    assert.deepEqual(seen, [503, 200]);
  });

  test('an unusable script is a load failure: reported, exit 1', async () => {
    const r = await runCli(['serve', modelDir, '--port', '0', '--load-format', 'scripted:/dev/null'], { timeoutMs: 20000 });
    assert.equal(r.code, 1);
    assert.match(r.stderr, /error/);
  });
});
