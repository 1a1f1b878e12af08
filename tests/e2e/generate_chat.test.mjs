// dgemma generate --chat with a pipe: two user lines on stdin get two answers with per-canvas
// statistics, and EOF ends the session. Also: loading a real safetensors checkpoint logs its progress
// (stderr is not a terminal here, so log lines rather than a bar).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { BIN, makeModelDir, tinyConfig, GENERATION_CONFIG, tokenizerPath } from './helpers.mjs';

function run(args, stdin, timeoutMs = 120000) {
  return new Promise((resolve) => {
    const p = spawn(BIN, args, { stdio: ['pipe', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    p.stdout.on('data', (d) => (stdout += d));
    p.stderr.on('data', (d) => (stderr += d));
    const t = setTimeout(() => p.kill('SIGKILL'), timeoutMs);
    p.on('exit', (code, signal) => {
      clearTimeout(t);
      resolve({ code, signal, stdout, stderr });
    });
    p.stdin.end(stdin);
  });
}

const CANVAS = 16;

test('two lines on a pipe: two answers, per-canvas statistics, exit on EOF', async () => {
  const modelDir = makeModelDir({
    config: tinyConfig({ canvasLength: CANVAS }),
    generationConfig: { ...GENERATION_CONFIG, max_denoising_steps: 2 },
  });
  const r = await run(['generate', modelDir, '--chat', '--load-format', 'dummy', '--device', 'cpu', '--max-tokens', '24'],
    'Hello there.\n\nTell me more.\n');
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stderr, /dgemma chat: .*canvas 16/);
  assert.ok(!r.stdout.includes('\x1b['), 'no ANSI escapes on a pipe');
  const totals = [...r.stdout.matchAll(/^\[(\d+) tokens, (\d+) canvas(?:es)?, (\d+) steps \(([\d.]+) per canvas\), [\d.]+ s, [\d.]+ tok\/s, finish (\w+)\]$/gm)];
  assert.equal(totals.length, 2, `two answers (the empty line is skipped):\n${r.stdout}`);
  const perCanvas = [...r.stdout.matchAll(/^ {2}canvas (\d+): (\d+) steps, (\d+) tokens, [\d.]+ tokens\/step, [\d.]+ ms\/step$/gm)];
  let k = 0;
  for (const t of totals) {
    const [, tokens, canvases, steps] = t.slice(0, 4).map(Number);
    assert.ok(tokens <= 24);
    assert.ok(['stop', 'length'].includes(t[5]));
    assert.ok(canvases >= 1 && canvases <= 2);
    const mine = perCanvas.slice(k, k + canvases);
    k += canvases;
    assert.deepEqual(mine.map((m) => Number(m[1])), [...Array(canvases).keys()], 'canvases numbered from 0');
    assert.equal(mine.reduce((a, m) => a + Number(m[2]), 0), steps, 'steps add up');
    for (const m of mine) assert.ok(Number(m[2]) >= 1 && Number(m[2]) <= 2, 'steps within max_denoising_steps');
    if (t[5] === 'length') assert.equal(tokens, 24);
  }
  assert.equal(k, perCanvas.length);
});

test('bad chat input is a clear error, not a crash', async () => {
  const r = await run(['generate', '/nonexistent-model-dir', '--chat'], '');
  assert.equal(r.code, 1);
  assert.match(r.stderr, /error/);
});

test('loading a real checkpoint logs progress lines', async () => {
  const src = path.join(process.env.DGEMMA_SOURCE_DIR, 'tests/fixtures/tiny_a/model');
  const dir = makeModelDir({ config: JSON.parse(fs.readFileSync(path.join(src, 'config.json'), 'utf8')) });
  fs.copyFileSync(path.join(src, 'generation_config.json'), path.join(dir, 'generation_config.json'));
  fs.symlinkSync(path.join(src, 'model.safetensors'), path.join(dir, 'model.safetensors'));
  assert.ok(fs.existsSync(tokenizerPath()));
  const r = await run(['generate', dir, '--chat', '--device', 'cpu'], '');
  assert.equal(r.code, 0, r.stderr);
  const start = r.stderr.match(/loading weights: 0 B \/ ([\d.]+ [KM]iB) \(0\.0%\), 0 B\/s, ETA \?/);
  assert.ok(start, r.stderr);
  const done = r.stderr.match(/loading weights: done, ([\d.]+ [KM]iB) in [\d.]+ s \(.+\/s\)/);
  assert.ok(done, r.stderr);
  assert.equal(done[1], start[1], 'all the bytes announced were loaded');
  assert.ok(!r.stderr.includes('\r'), 'no bar redraws when stderr is not a terminal');

  // On a terminal (a pty from util-linux `script`, in Debian's essential bsdutils): a bar redrawn in place.
  const cmd = [BIN, 'generate', dir, '--chat', '--device', 'cpu'].map((a) => `'${a}'`).join(' ');
  const t = await new Promise((resolve) => {
    const p = spawn('script', ['-qec', cmd, '/dev/null'], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    p.stdout.on('data', (d) => (out += d));
    p.stderr.on('data', (d) => (out += d));
    p.on('exit', (code) => resolve({ code, out }));
  });
  assert.equal(t.code, 0, t.out);
  assert.match(t.out, /\rloading weights \[\.{30}\]   0\.0%  0 B \/ [\d.]+ [KM]iB  0 B\/s  ETA \?\x1b\[K/);
  assert.match(t.out, /\rloading weights \[#{30}\] 100\.0%  ([\d.]+ [KM]iB) \/ \1  .+\/s  ETA 0\.0 s\x1b\[K\r?\n/);
});
