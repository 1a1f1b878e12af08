// Shared e2e helpers: a throw-away model directory, the real `dgemma serve` binary on a free port, and
// small HTTP/SSE/Prometheus readers. Tests pick the engine with loadFormat: 'scripted' (the real engine over
// a scripted model runner: a JSON script of replies; the test server `dgemma_test_server`, which is
// `dgemma serve` plus --load-format scripted:FILE) or 'dummy' (the model on random weights, the product binary).
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import OpenAI from 'openai';

export const BIN = process.env.DGEMMA_BIN;
if (!BIN) throw new Error('set DGEMMA_BIN to the dgemma binary');
export const TEST_SERVER = process.env.DGEMMA_TEST_SERVER || path.join(path.dirname(BIN), 'dgemma_test_server');

// The binary a command line runs on: the test server when it names a scripted load format, else dgemma.
export function binFor(args) {
  return args.some((a) => typeof a === 'string' && (a.startsWith('scripted:') || a.startsWith('tp-fault:'))) ? TEST_SERVER : BIN;
}

// The Gemma 4 tokenizer the build produces (${build}/gemma4-tokenizer/tokenizer.json).
export function tokenizerPath() {
  const candidates = [process.env.DGEMMA_TOKENIZER, path.join(path.dirname(BIN), 'gemma4-tokenizer', 'tokenizer.json')];
  for (const c of candidates) if (c && fs.existsSync(c)) return c;
  throw new Error(`no Gemma 4 tokenizer.json (looked in ${candidates.filter(Boolean).join(', ')}); build it or set DGEMMA_TOKENIZER`);
}

// A tiny DiffusionGemma config with the real vocabulary (262144) and control-token ids.
export function tinyConfig({ maxPositions = 4096, canvasLength = 16 } = {}) {
  return {
    architectures: ['DiffusionGemmaForBlockDiffusion'],
    model_type: 'diffusion_gemma',
    canvas_length: canvasLength,
    tie_word_embeddings: true,
    boi_token_id: 255999,
    eoi_token_id: 258882,
    image_token_id: 258880,
    eos_token_id: [1, 106],
    dtype: 'bfloat16',
    text_config: {
      model_type: 'diffusion_gemma_text',
      vocab_size: 262144,
      hidden_size: 64,
      intermediate_size: 128,
      num_hidden_layers: 2,
      num_attention_heads: 2,
      num_key_value_heads: 1,
      head_dim: 32,
      global_head_dim: 64,
      num_global_key_value_heads: 1,
      hidden_activation: 'gelu_pytorch_tanh',
      max_position_embeddings: maxPositions,
      rms_norm_eps: 1e-6,
      pad_token_id: 0,
      eos_token_id: 1,
      bos_token_id: 2,
      tie_word_embeddings: true,
      rope_parameters: {
        sliding_attention: { rope_type: 'default', rope_theta: 10000.0 },
        full_attention: { rope_type: 'proportional', partial_rotary_factor: 0.25, rope_theta: 1000000.0 },
      },
      attention_bias: false,
      attention_dropout: 0.0,
      sliding_window: 64,
      layer_types: ['sliding_attention', 'full_attention'],
      final_logit_softcapping: 30.0,
      use_bidirectional_attention: 'vision',
      num_experts: 4,
      top_k_experts: 2,
      moe_intermediate_size: 32,
    },
  };
}

export const GENERATION_CONFIG = {
  max_new_tokens: 256,
  max_denoising_steps: 48,
  sampler_config: { entropy_bound: 0.1, _cls_name: 'EntropyBoundSamplerConfig' },
  t_min: 0.4,
  t_max: 0.8,
  stability_threshold: 1,
  confidence_threshold: 0.005,
  eos_token_id: [1, 106, 50],
  pad_token_id: 0,
  bos_token_id: 2,
};

const tempDirs = [];
process.on('exit', () => {
  for (const d of tempDirs) fs.rmSync(d, { recursive: true, force: true });
});

// The DiffusionGemma chat template (July format) the embedded model ships with.
export const CHAT_TEMPLATE = path.join(path.dirname(new URL(import.meta.url).pathname), '..', '..', 'models',
  'tiny-code', 'chat_template.jinja');

// Creates a model directory; `script` (an object) is written to script.json for the scripted runner.
// chatTemplate: a copy of CHAT_TEMPLATE as its chat_template.jinja (false: the model has none).
export function makeModelDir({ script, config = tinyConfig(), generationConfig = GENERATION_CONFIG, chatTemplate = true } = {}) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'dgemma-e2e-'));
  tempDirs.push(dir);
  fs.writeFileSync(path.join(dir, 'config.json'), JSON.stringify(config));
  fs.writeFileSync(path.join(dir, 'generation_config.json'), JSON.stringify(generationConfig));
  fs.symlinkSync(tokenizerPath(), path.join(dir, 'tokenizer.json'));
  if (chatTemplate) fs.copyFileSync(CHAT_TEMPLATE, path.join(dir, 'chat_template.jinja'));
  if (script) fs.writeFileSync(path.join(dir, 'script.json'), JSON.stringify(script));
  return dir;
}

export async function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Starts `dgemma serve` (scripted: the test server's); resolves once /health answers 200. loadFormat:
// 'scripted' | 'dummy' | any.
export async function startServer({ modelDir, loadFormat = 'scripted', args = [], env = {}, timeoutMs = 120000 } = {}) {
  const port = await freePort();
  const lf = loadFormat === 'scripted' ? `scripted:${path.join(modelDir, 'script.json')}` : loadFormat;
  const argv = ['serve', modelDir, '--port', String(port), '--load-format', lf, ...args];
  const proc = spawn(binFor(argv), argv, { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let log = '';
  proc.stdout.on('data', (d) => (log += d));
  proc.stderr.on('data', (d) => (log += d));
  const exited = new Promise((resolve) => proc.on('exit', (code, signal) => resolve({ code, signal })));
  const base = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + timeoutMs;
  let ready = false;
  while (Date.now() < deadline) {
    if (proc.exitCode !== null) break;
    try {
      const r = await fetch(`${base}/health`);
      if (r.status === 200) {
        ready = true;
        break;
      }
    } catch {}
    await sleep(100);
  }
  if (!ready) {
    proc.kill('SIGKILL');
    throw new Error(`dgemma serve did not become healthy:\n${log}`);
  }
  const server = {
    port,
    base,
    proc,
    url: (p) => `${base}${p}`,
    log: () => log,
    async stop() {
      if (proc.exitCode !== null) return proc.exitCode;
      proc.kill('SIGTERM');
      const t = setTimeout(() => proc.kill('SIGKILL'), 10000);
      const r = await exited;
      clearTimeout(t);
      return r;
    },
    client(opts = {}) {
      return new OpenAI({ baseURL: `${base}/v1`, apiKey: 'not-needed', maxRetries: 0, timeout: 60000, ...opts });
    },
  };
  return server;
}

// Two servers on one tiny model with dummy weights (CPU, canvas 16, 4 denoising steps, two sequences):
// the one-engine reference, and the same with `extraArgs` (e.g. ['-tp', '2']). The caller stops both.
export async function startReferencePair(extraArgs) {
  const modelDir = makeModelDir({
    config: tinyConfig({ canvasLength: 16 }),
    generationConfig: { ...GENERATION_CONFIG, max_denoising_steps: 4 },
  });
  const args = ['--device', 'cpu', '--served-model-name', 'tiny', '--max-num-seqs', '2', '--max-model-len', '512'];
  const one = await startServer({ modelDir, loadFormat: 'dummy', args });
  try {
    return { one, two: await startServer({ modelDir, loadFormat: 'dummy', args: [...args, ...extraArgs] }) };
  } catch (e) {
    await one.stop();
    throw e;
  }
}

export async function postJson(url, body, headers = {}) {
  const r = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await r.text();
  let json = null;
  try {
    json = JSON.parse(text);
  } catch {}
  return { status: r.status, headers: r.headers, text, json };
}

// Reads a whole SSE response: data payloads (parsed JSON or '[DONE]') and comment lines.
export async function readSse(response) {
  const text = await response.text();
  const events = [];
  const comments = [];
  for (const block of text.split('\n\n')) {
    if (!block) continue;
    for (const line of block.split('\n')) {
      if (line.startsWith(':')) comments.push(line.slice(1).trim());
      else if (line.startsWith('data: ')) {
        const payload = line.slice(6);
        events.push(payload === '[DONE]' ? '[DONE]' : JSON.parse(payload));
      }
    }
  }
  return { text, events, comments };
}

export async function streamRaw(url, body, headers = {}) {
  const r = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });
  return { status: r.status, headers: r.headers, ...(await readSse(r)) };
}

// Parses Prometheus text into { 'name{labels}': value } plus the TYPE of each family.
export function parseMetrics(text) {
  const samples = new Map();
  const types = new Map();
  for (const line of text.split('\n')) {
    if (!line) continue;
    if (line.startsWith('# TYPE ')) {
      const [, , name, type] = line.split(' ');
      types.set(name, type);
      continue;
    }
    if (line.startsWith('#')) continue;
    const m = line.match(/^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$/);
    if (!m) throw new Error(`bad metrics line: ${line}`);
    samples.set(m[1] + (m[2] || ''), Number(m[3]));
  }
  return { samples, types };
}

export async function metrics(server) {
  const r = await fetch(server.url('/metrics'));
  return parseMetrics(await r.text());
}

// The value of one sample by metric name (labels other than model_name/engine given as an object).
export function sample(m, name, labels = {}) {
  for (const [k, v] of m.samples) {
    if (!k.startsWith(name + '{') && k !== name) continue;
    if (k.slice(name.length, name.length + 1) !== '{' && k !== name) continue;
    if (Object.entries(labels).every(([lk, lv]) => k.includes(`${lk}="${lv}"`))) return v;
  }
  return undefined;
}

export async function waitFor(pred, { timeoutMs = 10000, intervalMs = 50 } = {}) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await pred();
    if (v) return v;
    if (Date.now() > deadline) throw new Error('timed out waiting for condition');
    await sleep(intervalMs);
  }
}

// Runs the binary to completion (CLI tests).
export async function runCli(args, { timeoutMs = 30000 } = {}) {
  return new Promise((resolve) => {
    const p = spawn(binFor(args), args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    p.stdout.on('data', (d) => (out += d));
    p.stderr.on('data', (d) => (err += d));
    const t = setTimeout(() => p.kill('SIGKILL'), timeoutMs);
    p.on('exit', (code) => {
      clearTimeout(t);
      resolve({ code, stdout: out, stderr: err });
    });
  });
}
