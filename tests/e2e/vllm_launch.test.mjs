// vLLM launch lines start: `--model M -tp 1`, the flags real launch scripts carry, vLLM's YAML
// `--config` file (the command line wins over it), repo ids for generate / inspect, request-side
// compatibility (chat_template_kwargs the template does not read), HEAD on GET routes and --seed -1.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, test } from 'node:test';
import { BIN, TEST_SERVER, binFor, freePort, makeModelDir, postJson, runCli, startServer, streamRaw, waitFor } from './helpers.mjs';

const script = { canvas_length: 8, canvas_delay_ms: 5, default: { canvases: [' fine'] } };
const user = (content) => [{ role: 'user', content }];
const exitOf = (proc) =>
  proc.exitCode !== null || proc.signalCode !== null
    ? Promise.resolve({ code: proc.exitCode, signal: proc.signalCode })
    : new Promise((resolve) => proc.on('exit', (code, signal) => resolve({ code, signal })));

// `dgemma serve ARGS...` exactly as given (no positional MODEL added); resolves once /health is 200.
// `bin`: the binary (default: the test server when ARGS name a scripted load format, else dgemma).
async function serveExactly(args, port, bin = binFor(args)) {
  const proc = spawn(bin, ['serve', ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  let log = '';
  proc.stdout.on('data', (d) => (log += d));
  proc.stderr.on('data', (d) => (log += d));
  try {
    await waitFor(async () => {
      if (proc.exitCode !== null) throw new Error(`dgemma serve exited ${proc.exitCode}:\n${log}`);
      return (await fetch(`http://127.0.0.1:${port}/health`).catch(() => ({}))).status === 200;
    }, { timeoutMs: 60000 });
  } catch (e) {
    proc.kill('SIGKILL');
    throw e;
  }
  return {
    log: () => log,
    url: (p) => `http://127.0.0.1:${port}${p}`,
    async stop() {
      proc.kill('SIGTERM');
      return exitOf(proc);
    },
  };
}

describe('vLLM launch lines', () => {
  const dir = makeModelDir({ script });
  const lf = ['--load-format', `scripted:${dir}/script.json`];

  test('--model M -tp 1 (and -tp=1, -pp 1, -dp 1) parse', async () => {
    for (const tp of [['-tp', '1'], ['-tp=1'], ['--tensor-parallel-size', '1', '-pp', '1', '-dp', '1']]) {
      const port = await freePort();
      const s = await serveExactly(['--model', dir, ...tp, '--port', String(port), ...lf], port);
      assert.equal((await s.stop()).code, 0, tp.join(' '));
    }
    const bad = await runCli(['serve', '--model', dir, '-tp', '3', ...lf]);
    assert.equal(bad.code, 1);
    assert.match(bad.stderr, /--tensor-parallel-size must be 1, 2, 4 or 8 \(got 3\)/);
  });

  test('every flag of real launch scripts starts the server, with its meaning or logged as a no-op', async () => {
    const noEffect = [
      ['--distributed-executor-backend', 'mp'], ['--max-seq-len-to-capture', '8192'], ['--disable-custom-all-reduce'],
      ['--tokenizer-pool-size', '0'], ['--disable-frontend-multiprocessing'], ['--enable-sleep-mode'],
      ['--guided-decoding-backend', 'xgrammar'], ['--structured-outputs-config', '{"backend":"xgrammar"}'],
      ['--enable-reasoning'], ['--enable-prompt-tokens-details'],
    ];
    const meaningful = [
      ['--tokenizer-mode', 'auto'], ['--chat-template-content-format', 'string'], ['--enable-force-include-usage'],
      ['--return-tokens-as-token-ids'], ['--task', 'generate'],
    ];
    const s = await startServer({ modelDir: dir, args: [...noEffect.flat(), ...meaningful.flat()] });
    try {
      for (const [flag] of noEffect) assert.match(s.log(), new RegExp(`${flag}.*no effect in dgemma`), flag);
      // --enable-force-include-usage: a stream without stream_options ends with usage.
      const sse = await streamRaw(s.url('/v1/chat/completions'), { messages: user('hi'), stream: true });
      const data = sse.events.filter((e) => e !== '[DONE]');
      assert.deepEqual(data.at(-1).choices, []);
      assert.ok(data.at(-1).usage.completion_tokens > 0);
      // --return-tokens-as-token-ids: logprobs name tokens by id.
      const r = await postJson(s.url('/v1/chat/completions'), { messages: user('hi'), logprobs: true, top_logprobs: 2 });
      for (const lp of r.json.choices[0].logprobs.content) {
        assert.match(lp.token, /^token_id:\d+$/);
        for (const alt of lp.top_logprobs) assert.match(alt.token, /^token_id:\d+$/);
      }
      // --chat-template-content-format string: text parts are joined with a newline before rendering.
      const parts = await postJson(s.url('/tokenize'), {
        messages: [{ role: 'user', content: [{ type: 'text', text: 'a' }, { type: 'text', text: 'b' }] }],
        return_token_strs: true,
      });
      const joined = await postJson(s.url('/tokenize'), { messages: user('a\nb') });
      assert.deepEqual(parts.json.tokens, joined.json.tokens);
    } finally {
      assert.equal((await s.stop()).code, 0);
    }
    for (const [args, pattern] of [
      [['--tokenizer-mode', 'mistral'], /--tokenizer-mode mistral/],
      [['--task', 'embed'], /--task embed: this server only generates/],
      [['--chat-template-content-format', 'xml'], /--chat-template-content-format: 'xml' is not one of/],
    ]) {
      const r = await runCli(['serve', dir, ...lf, ...args]);
      assert.equal(r.code, 1, args.join(' '));
      assert.match(r.stderr, pattern);
    }
  });

  test('--config FILE.yaml is applied; the command line wins over it', async () => {
    const yaml = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'dgemma-cfg-')), 'config.yaml');
    const port = await freePort();
    fs.writeFileSync(yaml, [
      '# a vLLM config file',
      `model: ${dir}`,
      'served-model-name:',
      '  - tiny-a',
      '  - tiny-b',
      'max_num_seqs: 2',
      'port: 1   # the command line names another',
      'enable-prefix-caching: false',
      'enable-auto-tool-choice: true',
      'tool-call-parser: "gemma4"',
      'hf-overrides: {"diffusion_sampler": "entropy_bound"}',
      'default-chat-template-kwargs:',
      '  enable_thinking: false',
      'disable-log-stats: true',
      `load-format: scripted:${dir}/script.json`,
      'block-size: 16',
      '',
    ].join('\n'));
    // The file names the scripted load format, so the test server runs it.
    const s = await serveExactly(['--config', yaml, '--port', String(port), '--served-model-name', 'from-cli'], port,
      TEST_SERVER);
    try {
      const models = await (await fetch(s.url('/v1/models'))).json();
      assert.deepEqual(models.data.map((m) => m.id), ['from-cli']);
      const r = await postJson(s.url('/v1/chat/completions'), { messages: user('hi'), tools: [{ type: 'function', function: { name: 'f' } }] });
      assert.equal(r.status, 200, 'tool_choice auto needs the file\'s --enable-auto-tool-choice and parser');
      assert.match(s.log(), /--block-size 16: accepted for vLLM compatibility/);
      assert.match(s.log(), /max_num_seqs 2/);
    } finally {
      assert.equal((await s.stop()).code, 0);
    }
    for (const [text, pattern] of [
      ['no-such-flag: 1\n', /--config .*config\.yaml: 'no-such-flag': not a flag of this command/],
      ['port: [1\n', /--config .*config\.yaml line 1: an unterminated \[ or \{/],
      ['port: 1\nport: 2\n', /line 2: the key 'port' appears twice/],
      ['max-num-seqs: many\n', /--config .*'max-num-seqs':/],
      ['anchor: &a 1\n', /anchors, aliases and tags are not supported/],
    ]) {
      fs.writeFileSync(yaml, text);
      const r = await runCli(['serve', dir, ...lf, '--config', yaml]);
      assert.equal(r.code, 1, text);
      assert.match(r.stderr, pattern, text);
    }
  });

  test('chat_template_kwargs the template does not read are ignored (a debug line), not a 400', async () => {
    const s = await startServer({ modelDir: dir, args: ['--log-level', 'debug'] });
    try {
      const r = await postJson(s.url('/v1/chat/completions'), { messages: user('hi'), chat_template_kwargs: { add_vision_id: true } });
      assert.equal(r.status, 200);
      assert.match(s.log(), /chat_template_kwargs: ignoring 'chat_template_kwargs\.add_vision_id'/);
      const bad = await postJson(s.url('/v1/chat/completions'), { messages: user('hi'), chat_template_kwargs: { enable_thinking: { a: 1 } } });
      assert.equal(bad.status, 400);
    } finally {
      await s.stop();
    }
  });
});

describe('smaller things', () => {
  const dir = makeModelDir({ script });

  test('HEAD answers on every GET route, with the GET status and no body', async () => {
    const s = await startServer({ modelDir: dir });
    try {
      for (const p of ['/health', '/v1/models', '/version', '/metrics', '/', '/v1/models/no-such-model', '/no/such/path']) {
        const get = await fetch(s.url(p));
        const head = await fetch(s.url(p), { method: 'HEAD' });
        assert.equal(head.status, get.status, p);
        assert.equal(await head.text(), '', p);
        assert.equal(head.headers.get('content-type'), get.headers.get('content-type'), p);
      }
      const post = await fetch(s.url('/v1/chat/completions'), { method: 'HEAD' });
      assert.equal(post.status, 405);
    } finally {
      await s.stop();
    }
  });

  test('--seed -1 draws a random base seed; other negative seeds are refused', async () => {
    const s = await startServer({ modelDir: dir, args: ['--seed', '-1'] });
    try {
      assert.match(s.log(), /--seed -1: requests without a seed get base seed \d+/);
    } finally {
      await s.stop();
    }
    const r = await runCli(['serve', dir, '--load-format', `scripted:${dir}/script.json`, '--seed', '-5']);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /--seed -5: give a non-negative integer, or -1 for a random base seed/);
  });

  test('--max-model-len: --help says the default docs/API.md gives', async () => {
    const help = (await runCli(['serve', '--help'])).stdout.replace(/\s+/g, ' ');
    assert.match(help, /at most, and by default, the model's max_position_embeddings/);
    const api = fs.readFileSync(path.join(process.env.DGEMMA_SOURCE_DIR, 'docs', 'API.md'), 'utf8');
    assert.match(api, /\| `--max-model-len N` \| `max_position_embeddings` of `config\.json` \|/);
  });

  test('generate and inspect take a repo id from the local Hugging Face cache', async () => {
    const root = fs.mkdtempSync(path.join(os.tmpdir(), 'dgemma-hub-'));
    const commit = 'b'.repeat(40);
    const folder = path.join(root, 'models--acme--tiny-a');
    fs.mkdirSync(path.join(folder, 'refs'), { recursive: true });
    fs.writeFileSync(path.join(folder, 'refs', 'main'), commit);
    const snap = path.join(folder, 'snapshots', commit);
    fs.mkdirSync(snap, { recursive: true });
    const fixture = path.join(process.env.DGEMMA_SOURCE_DIR, 'tests', 'fixtures', 'tiny_a', 'model');
    for (const name of ['config.json', 'generation_config.json', 'model.safetensors']) fs.copyFileSync(path.join(fixture, name), path.join(snap, name));
    const env = { ...process.env, HF_HUB_CACHE: root };
    const run = (args) =>
      new Promise((resolve) => {
        const p = spawn(BIN, args, { env, stdio: ['ignore', 'pipe', 'pipe'] });
        let out = '';
        let err = '';
        p.stdout.on('data', (d) => (out += d));
        p.stderr.on('data', (d) => (err += d));
        p.on('exit', (code) => resolve({ code, stdout: out, stderr: err }));
      });
    const inspect = await run(['inspect', 'acme/tiny-a', '--json']);
    assert.equal(inspect.code, 0, inspect.stderr);
    assert.equal(JSON.parse(inspect.stdout).model_dir, snap);
    const gen = await run(['generate', 'acme/tiny-a', '--device', 'cpu', '--prompt-ids', '2,105', '--max-tokens', '4']);
    assert.equal(gen.code, 0, gen.stderr);
    assert.match(gen.stderr, /acme\/tiny-a: Hugging Face cache snapshot b{40}/);
    const missing = await run(['inspect', 'acme/absent']);
    assert.equal(missing.code, 1);
    assert.match(missing.stderr, /not in the local Hugging Face cache/);
  });
});
