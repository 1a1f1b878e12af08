// The server as an operator runs it: an exclusive port, API keys from vLLM's variable, model ids from
// the local Hugging Face cache, a graceful drain on SIGTERM, vLLM's flags, exit codes and logs.
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import https from 'node:https';
import os from 'node:os';
import path from 'node:path';
import { describe, test } from 'node:test';
import {
  binFor, freePort, makeModelDir, metrics, postJson, runCli, sample, sleep, startServer, tokenizerPath, waitFor,
} from './helpers.mjs';

const script = {
  canvas_length: 8,
  canvas_delay_ms: 20,
  replies: [
    // 12 tokens: two canvases of 8, 750 ms each.
    { when: 'slow', canvases: Array.from({ length: 6 }, (_, i) => ({ text: ` s${i}`, delay_ms: 750 })) },
    { when: 'endless', canvases: Array.from({ length: 200 }, (_, i) => ({ text: ` e${i}`, delay_ms: 250 })) },
  ],
  default: { canvases: [' fine'] },
};
const user = (content) => [{ role: 'user', content }];
const exitOf = (proc) =>
  proc.exitCode !== null || proc.signalCode !== null
    ? Promise.resolve({ code: proc.exitCode, signal: proc.signalCode })
    : new Promise((resolve) => proc.on('exit', (code, signal) => resolve({ code, signal })));

// Spawns `dgemma serve` without waiting for it (start-up failures, loading).
function spawnServe(args, env = {}) {
  const proc = spawn(binFor(args), ['serve', ...args], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let log = '';
  proc.stdout.on('data', (d) => (log += d));
  proc.stderr.on('data', (d) => (log += d));
  return { proc, log: () => log };
}

describe('port and keys', () => {
  test('a taken port is a clear start-up error; the first server keeps the port', async () => {
    const dir = makeModelDir({ script });
    const first = await startServer({ modelDir: dir });
    try {
      const r = await runCli(['serve', dir, '--port', String(first.port), '--load-format', `scripted:${dir}/script.json`]);
      assert.equal(r.code, 1);
      assert.match(r.stderr, /cannot listen on 127\.0\.0\.1:\d+: the address is already in use/);
      for (let i = 0; i < 4; i++) assert.equal((await fetch(first.url('/health'))).status, 200);
    } finally {
      await first.stop();
    }
  });

  test('VLLM_API_KEY protects /v1 like --api-key; a non-loopback bind without a key is warned about', async () => {
    const s = await startServer({ modelDir: makeModelDir({ script }), env: { VLLM_API_KEY: 'k-vllm', DGEMMA_API_KEY: '' } });
    try {
      assert.equal((await fetch(s.url('/v1/models'))).status, 401);
      assert.equal((await fetch(s.url('/v1/models'), { headers: { authorization: 'Bearer k-vllm' } })).status, 200);
      assert.match(s.log(), /API key from \$VLLM_API_KEY/);
      assert.doesNotMatch(s.log(), /without an API key/);
    } finally {
      await s.stop();
    }
    const open = await startServer({ modelDir: makeModelDir({ script }), args: ['--host', '0.0.0.0'], env: { VLLM_API_KEY: '', DGEMMA_API_KEY: '' } });
    try {
      assert.match(open.log(), /W \S+ serve +listening on 0\.0\.0\.0 without an API key/);
    } finally {
      await open.stop();
    }
  });
});

// A Hugging Face cache as `hf download` leaves it: refs/main -> snapshots/<commit>/ with links into blobs/.
function makeCache(repo, { commit = 'a'.repeat(40), ref = 'main' } = {}) {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'dgemma-hub-'));
  const src = makeModelDir({ script });
  const folder = path.join(root, `models--${repo.replace('/', '--')}`);
  fs.mkdirSync(path.join(folder, 'refs'), { recursive: true });
  fs.mkdirSync(path.join(folder, 'blobs'));
  const snap = path.join(folder, 'snapshots', commit);
  fs.mkdirSync(snap, { recursive: true });
  fs.writeFileSync(path.join(folder, 'refs', ref), commit);
  for (const name of ['config.json', 'generation_config.json', 'tokenizer.json', 'chat_template.jinja', 'script.json']) {
    const blob = path.join(folder, 'blobs', `blob-${name}`);
    fs.copyFileSync(name === 'tokenizer.json' ? tokenizerPath() : path.join(src, name), blob);
    fs.symlinkSync(path.join('..', '..', 'blobs', `blob-${name}`), path.join(snap, name));
  }
  return { root, snap, folder };
}

describe('model forms (vLLM): MODEL, --model, repo ids in the local cache', () => {
  test('serve ORG/NAME from $HF_HUB_CACHE; --model with $HF_HOME/hub; the served name is the id', async () => {
    const { root, snap } = makeCache('acme/tiny-dg');
    const s = await startServer({ modelDir: 'acme/tiny-dg', loadFormat: `scripted:${snap}/script.json`, env: { HF_HUB_CACHE: root } });
    try {
      const m = await (await fetch(s.url('/v1/models'))).json();
      assert.equal(m.data[0].id, 'acme/tiny-dg');
      assert.match(s.log(), /acme\/tiny-dg: Hugging Face cache snapshot a{40}/);
    } finally {
      await s.stop();
    }
    const home = fs.mkdtempSync(path.join(os.tmpdir(), 'dgemma-hfhome-'));
    fs.symlinkSync(root, path.join(home, 'hub'));
    const port = await freePort();
    const t = spawnServe(['--model', 'acme/tiny-dg', '--port', String(port), '--load-format', `scripted:${snap}/script.json`],
      { HF_HOME: home, HF_HUB_CACHE: '' });
    await waitFor(async () => (await fetch(`http://127.0.0.1:${port}/health`).catch(() => ({}))).status === 200, { timeoutMs: 60000 });
    t.proc.kill('SIGTERM');
    assert.equal((await exitOf(t.proc)).code, 0);
  });

  test('--tokenizer names where tokenizer.json comes from', async () => {
    const dir = makeModelDir({ script });
    fs.rmSync(path.join(dir, 'tokenizer.json'));
    const r = await runCli(['serve', dir, '--load-format', `scripted:${dir}/script.json`]);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /has no tokenizer\.json \(--tokenizer names another place\)/);
    const s = await startServer({ modelDir: dir, args: ['--tokenizer', makeModelDir({ script })] });
    try {
      assert.equal((await postJson(s.url('/tokenize'), { prompt: 'one two three' })).json.count, 3);
    } finally {
      await s.stop();
    }
  });

  test('an id absent from the cache says exactly what to download; --revision and --download-dir are honoured', async () => {
    const { root } = makeCache('acme/tiny-dg');
    const env = { HF_HUB_CACHE: root };
    let r = await runCliEnv(['serve', 'acme/absent'], env);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /never downloads: download it first with `hf download acme\/absent` \(older huggingface_hub: `huggingface-cli download acme\/absent`\)/);
    r = await runCliEnv(['serve', 'acme/tiny-dg', '--revision', 'v2'], env);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /revision v2\) is not a directory and not in the local Hugging Face cache/);
    assert.match(r.stderr, /hf download acme\/tiny-dg --revision v2/);
    r = await runCliEnv(['serve', 'acme/absent', '--download-dir', '/srv/models'], env);
    assert.match(r.stderr, /looked in \/srv\/models\/models--acme--absent, /);
    assert.match(r.stderr, /hf download acme\/absent --cache-dir \/srv\/models/);
  });

  test('malformed ids never reach the file system; a snapshot linking outside the cache is refused', async () => {
    for (const bad of ['../etc', 'acme/../x', 'a/b/c', 'acme--x/name', 'x-/y', '.x/y', 'acme/na me', 'acme/', '/abs/path']) {
      const r = await runCliEnv(['serve', bad], { HF_HUB_CACHE: os.tmpdir() });
      assert.equal(r.code, 1, bad);
      assert.match(r.stderr, /is neither a directory nor a Hugging Face repo id \(org\/name\)/, bad);
    }
    const { root, snap } = makeCache('acme/evil');
    const outside = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'dgemma-outside-')), 'config.json');
    fs.copyFileSync(path.join(snap, 'config.json'), outside);
    fs.rmSync(path.join(snap, 'config.json'));
    fs.symlinkSync(outside, path.join(snap, 'config.json'));
    const r = await runCliEnv(['serve', 'acme/evil'], { HF_HUB_CACHE: root });
    assert.equal(r.code, 1);
    assert.match(r.stderr, /links outside its cache folder/);
  });
});

function runCliEnv(args, env) {
  return new Promise((resolve) => {
    const p = spawn(binFor(args), args, { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    p.stdout.on('data', (d) => (out += d));
    p.stderr.on('data', (d) => (err += d));
    p.on('exit', (code) => resolve({ code, stdout: out, stderr: err }));
  });
}

describe('graceful drain', () => {
  test('SIGTERM: no new connections, the running request finishes, exit 0', async () => {
    const s = await startServer({ modelDir: makeModelDir({ script }) });
    const running = postJson(s.url('/v1/chat/completions'), { messages: user('slow') });
    await waitFor(async () => sample(await metrics(s), 'dgemma:num_requests_running') === 1);
    s.proc.kill('SIGTERM');
    await waitFor(async () => fetch(s.url('/health')).then(() => false, () => true));  // refused
    const r = await running;
    assert.equal(r.status, 200);
    assert.equal(r.json.choices[0].message.content, ' s0 s1 s2 s3 s4 s5');
    assert.deepEqual(await exitOf(s.proc), { code: 0, signal: null });
    assert.match(s.log(), /received SIGTERM: draining/);
  });

  test('past --shutdown-timeout the cut requests get 503 unavailable (streamed: an error event); exit 0', async () => {
    const s = await startServer({ modelDir: makeModelDir({ script }), args: ['--shutdown-timeout', '0.5'] });
    const plain = postJson(s.url('/v1/chat/completions'), { messages: user('endless') });
    const streamed = fetch(s.url('/v1/chat/completions'), {
      method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ messages: user('endless'), stream: true }),
    }).then((r) => r.text());
    await waitFor(async () => sample(await metrics(s), 'dgemma:num_requests_running') === 2);
    s.proc.kill('SIGINT');
    const r = await plain;
    assert.equal(r.status, 503);
    assert.equal(r.json.error.type, 'unavailable_error');
    assert.equal(r.headers.get('retry-after'), '1');
    const text = await streamed;
    assert.match(text, /data: \{"error":\{[^\n]*"code":503/);
    assert.doesNotMatch(text, /\[DONE\]/);
    assert.deepEqual(await exitOf(s.proc), { code: 0, signal: null });
    assert.match(s.log(), /shutdown timeout \(0\.5 s\): cutting 2 request\(s\) with 503/);
  });

  test('a second signal exits at once (status 128 + signal)', async () => {
    const s = await startServer({ modelDir: makeModelDir({ script }), args: ['--shutdown-timeout', '600'] });
    const running = postJson(s.url('/v1/chat/completions'), { messages: user('endless') }).catch(() => null);
    await waitFor(async () => sample(await metrics(s), 'dgemma:num_requests_running') === 1);
    s.proc.kill('SIGTERM');
    await waitFor(async () => s.log().includes('draining'));
    s.proc.kill('SIGTERM');
    assert.deepEqual(await exitOf(s.proc), { code: 143, signal: null });
    assert.match(s.log(), /second SIGTERM: exiting now/);
    await running;
  });

  test('a signal while the model loads exits promptly', async () => {
    // The script file is a FIFO nobody writes: loading blocks until the signal.
    const dir = makeModelDir({ script });
    const fifo = path.join(dir, 'never.fifo');
    execFileSync('mkfifo', [fifo]);
    const port = await freePort();
    const t = spawnServe([dir, '--port', String(port), '--load-format', `scripted:${fifo}`]);
    await waitFor(async () => t.log().includes('listening on'), { timeoutMs: 60000 });
    assert.equal((await fetch(`http://127.0.0.1:${port}/health`)).status, 503);
    t.proc.kill('SIGINT');
    assert.deepEqual(await exitOf(t.proc), { code: 130, signal: null });
    assert.match(t.log(), /received SIGINT while loading the model: exiting/);
  });
});

describe('vLLM flags and exit codes', () => {
  const dir = makeModelDir({ script });
  const lf = ['--load-format', `scripted:${dir}/script.json`];

  test('argument errors exit 1 (CLI11 parse errors included); --help and --version exit 0', async () => {
    for (const args of [['serve', dir, '--port', 'abc'], ['serve', dir, '--no-such-flag'], ['generate'], ['frobnicate'],
      ['serve', dir, '--max-num-seqs', '1.5']]) {
      const r = await runCli(args);
      assert.equal(r.code, 1, args.join(' '));
    }
    assert.equal((await runCli(['--version'])).code, 0);
    const help = await runCli(['serve', '--help']);
    assert.equal(help.code, 0);
    assert.match(help.stdout.replace(/\s+/g, ' '), /at most, and by default, the model's max_position_embeddings/);
  });

  test('limits are checked before the port is bound', async () => {
    const dirCfg = makeModelDir({ script });
    // The port is taken, so only a check made before binding can produce these messages.
    const holder = await startServer({ modelDir: dirCfg });
    try {
      for (const [args, pattern] of [
        [['--max-model-len', '8192'], /--max-model-len 8192 exceeds the model's max_position_embeddings \(4096\)/],
        [['--max-num-seqs', '2000'], /--max-num-seqs must be in \[1, 1024\] \(got 2000\)/],
      ]) {
        const r = await runCli(['serve', dirCfg, '--port', String(holder.port), ...lf, ...args]);
        assert.equal(r.code, 1);
        assert.match(r.stderr, pattern);
      }
    } finally {
      await holder.stop();
    }
  });

  test('behaviour flags vLLM has but dgemma cannot honour are refused with a reason', async () => {
    for (const [args, pattern] of [
      [['--quantization', 'awq'], /--quantization 'awq' is not supported/],
      [['--quantization', 'fp8'], /--quantization fp8 does not match the checkpoint, which is not quantised/],
      [['--kv-cache-dtype', 'fp8'], /--kv-cache-dtype fp8: the KV cache is bfloat16/],
      [['--ssl-keyfile', 'k.pem'], /TLS needs both --ssl-keyfile and --ssl-certfile/],
      [['--ssl-keyfile', '/nonexistent/k.pem', '--ssl-certfile', '/nonexistent/c.pem'], /--ssl-certfile \/nonexistent\/c\.pem: /],
      [['-dp', '9'], /--data-parallel-size must be 1 to 8 \(got 9\)/],
      [['--pipeline-parallel-size', '2'], /--pipeline-parallel-size 2/],
      [['--root-path', 'llm'], /--root-path 'llm' must be a path starting with '\/'/],
      [['--allowed-origins', 'http://x'], /--allowed-origins: expected a JSON list of strings/],
    ]) {
      const r = await runCli(['serve', dir, ...lf, ...args]);
      assert.equal(r.code, 1, args.join(' '));
      assert.match(r.stderr, pattern);
    }
  });

  test('pure tuning knobs are accepted and logged as having no effect', async () => {
    const knobs = [
      ['--swap-space', '4'], ['--block-size', '16'], ['--max-cudagraph-capture-size', '512'], ['--async-scheduling'],
      ['--compilation-config', '{"level":3}'], ['--uvicorn-log-level', 'warning'], ['--disable-fastapi-docs'],
      ['--max-log-len', '100'], ['--enable-log-requests'], ['--max-logprobs', '20'],
    ];
    const s = await startServer({
      modelDir: dir,
      args: [...knobs.flat(), '--data-parallel-size', '1', '-pp', '1', '--kv-cache-dtype', 'auto', '--quantization', 'none'],
    });
    try {
      for (const [flag] of knobs) assert.match(s.log(), new RegExp(`${flag}.*a tuning knob with no effect in dgemma`), flag);
    } finally {
      await s.stop();
    }
  });
});

describe('TLS', () => {
  test('--ssl-keyfile/--ssl-certfile serve HTTPS: requests, a stream, keep-alive reuse; plain HTTP gets nothing', async () => {
    const dir = makeModelDir({ script });
    const key = path.join(dir, 'key.pem');
    const cert = path.join(dir, 'cert.pem');
    execFileSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', key, '-out', cert, '-days', '2',
      '-subj', '/CN=localhost', '-addext', 'subjectAltName=IP:127.0.0.1'], { stdio: 'ignore' });
    const port = await freePort();
    const t = spawnServe([dir, '--port', String(port), '--load-format', `scripted:${dir}/script.json`,
      '--ssl-keyfile', key, '--ssl-certfile', cert]);
    const agent = new https.Agent({ ca: fs.readFileSync(cert), keepAlive: true, maxSockets: 1 });
    const get = (p, body) => new Promise((resolve, reject) => {
      const req = https.request({ host: '127.0.0.1', port, path: p, agent, method: body ? 'POST' : 'GET',
        headers: body ? { 'content-type': 'application/json' } : {} }, (res) => {
        let text = '';
        res.on('data', (d) => (text += d));
        res.on('end', () => resolve({ status: res.statusCode, text, reused: req.reusedSocket }));
      });
      req.on('error', reject);
      req.end(body ? JSON.stringify(body) : undefined);
    });
    try {
      await waitFor(async () => (await get('/health').catch(() => ({}))).status === 200, { timeoutMs: 60000 });
      assert.match(t.log(), /listening on https:\/\/127\.0\.0\.1:/);
      const r = await get('/v1/chat/completions', { messages: user('hello') });
      assert.equal(r.status, 200);
      assert.equal(JSON.parse(r.text).choices[0].message.content, ' fine');
      const s = await get('/v1/chat/completions', { messages: user('slow'), stream: true });
      assert.match(s.text, /data: \[DONE\]/);
      assert.equal((await get('/version')).reused, true);
      const plain = await fetch(`http://127.0.0.1:${port}/health`).then((x) => x.status, () => 'refused');
      assert.equal(plain, 'refused');
    } finally {
      agent.destroy();
      t.proc.kill('SIGTERM');
      assert.equal((await exitOf(t.proc)).code, 0);
    }
  });
});

describe('logs', () => {
  test('ISO-8601 timestamps, one access line per request, the periodic stats line, the sampler defaults', async () => {
    const s = await startServer({ modelDir: makeModelDir({ script }), env: { VLLM_LOG_STATS_INTERVAL: '0.2' } });
    try {
      const r = await postJson(s.url('/v1/chat/completions'), { messages: user('hello') });
      assert.equal(r.status, 200);
      await waitFor(async () => /Avg generation throughput: [1-9]/.test(s.log()));
      const log = s.log();
      for (const line of log.trim().split('\n')) assert.match(line, /^[DIWE] \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z /, line);
      assert.match(log, new RegExp(`access +127\\.0\\.0\\.1 POST /v1/chat/completions 200 [\\d.]+ms ${r.json.id} ` +
        `prompt_tokens=${r.json.usage.prompt_tokens} completion_tokens=${r.json.usage.completion_tokens} canvases=\\d+ steps=\\d+`));
      assert.match(log, /access +127\.0\.0\.1 GET \/health 200 /);
      assert.equal((await fetch(s.url('/no/such/path'))).status, 404);
      await waitFor(async () => /access +127\.0\.0\.1 GET \/no\/such\/path 404/.test(s.log()));
      assert.match(log, /stats +Avg prompt throughput: [\d.]+ tokens\/s, Avg generation throughput: [\d.]+ tokens\/s, Running: \d+ reqs, Waiting: \d+ reqs, KV cache usage: [\d.]+%, engine steps: [\d.]+\/s/);
      assert.match(log, /sampler defaults \(--generation-config auto\): max_denoising_steps 48, entropy_bound 0\.1, t_min 0\.4, t_max 0\.8/);
    } finally {
      await s.stop();
    }
  });

  test('--disable-log-requests drops the access lines; at debug level each 4xx says why', async () => {
    const s = await startServer({ modelDir: makeModelDir({ script }), args: ['--disable-log-requests', '--log-level', 'debug', '--generation-config', 'vllm'] });
    try {
      const r = await postJson(s.url('/v1/chat/completions'), { messages: user('hi'), n: 0 });
      assert.equal(r.status, 400);
      await waitFor(async () => s.log().includes('-> 400'));
      assert.match(s.log(), /api +POST \/v1\/chat\/completions -> 400: \{"error":\{[^\n]*"param":"n"/);
      assert.doesNotMatch(s.log(), / access /);
      assert.match(s.log(), /sampler defaults \(--generation-config vllm\): max_denoising_steps \d+/);
    } finally {
      await s.stop();
    }
  });
});
