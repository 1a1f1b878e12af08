// dgemma bench against the real server (embedded-size model, dummy weights, CPU): the JSON report is
// consistent with itself and with the server's own counters, the table is printed, the SVG is XML.
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { makeModelDir, startServer, tinyConfig, GENERATION_CONFIG, metrics, sample, runCli } from './helpers.mjs';

const CANVAS = 16;
const MAX_STEPS = 2;  // few steps: the CPU engine with the full vocabulary is slow

function checkSummary(s, label) {
  for (const k of ['mean', 'median', 'p90', 'p99', 'min', 'max', 'std']) assert.ok(s[k] >= 0, `${label}.${k} >= 0`);
  assert.ok(s.min <= s.median && s.median <= s.p90 && s.p90 <= s.p99 && s.p99 <= s.max, `${label} percentiles ordered`);
  assert.ok(s.min <= s.mean && s.mean <= s.max, `${label} mean within range`);
}

// Parses the SVG with Python's XML parser (python3 is a build dependency) and counts elements.
function parseSvg(file) {
  const py = 'import sys, xml.etree.ElementTree as E\n' +
    'r = E.parse(sys.argv[1]).getroot()\n' +
    'ns = "{http://www.w3.org/2000/svg}"\n' +
    'print(r.tag, len(r.findall(ns + "polyline")), len(r.findall(ns + "circle")))';
  const p = spawnSync('python3', ['-c', py, file], { encoding: 'utf8' });
  assert.equal(p.status, 0, p.stderr);
  const [tag, polylines, circles] = p.stdout.trim().split(' ');
  return { tag, polylines: Number(polylines), circles: Number(circles) };
}

describe('dgemma bench', () => {
  let server;
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'dgemma-bench-'));
  before(async () => {
    const modelDir = makeModelDir({
      config: tinyConfig({ canvasLength: CANVAS }),
      generationConfig: { ...GENERATION_CONFIG, max_denoising_steps: MAX_STEPS },
    });
    server = await startServer({
      modelDir,
      loadFormat: 'dummy',
      args: ['--device', 'cpu', '--served-model-name', 'tiny-bench', '--max-num-seqs', '2', '--max-model-len', '1024'],
    });
  });
  after(async () => {
    if (server) await server.stop();
    fs.rmSync(tmp, { recursive: true, force: true });
  });

  test('a concurrency sweep: counts, latencies, percentiles and tokens agree with the server', async () => {
    const before = await metrics(server);
    const json = path.join(tmp, 'report.json');
    const svg = path.join(tmp, 'plot.svg');
    const r = await runCli(['bench', '--base-url', server.base, '--concurrency', '1,2', '--num-prompts', '3',
      '--input-len', '8', '--output-len', '18', '--range-ratio', '0.5', '--ignore-eos', '--seed', '3',
      '--output-json', json, '--plot', svg], { timeoutMs: 300000 });
    assert.equal(r.code, 0, r.stderr + r.stdout);
    for (const s of ['Time to First Token', 'End-to-end Latency', 'Diffusion', 'Denoising steps per canvas', 'cold (first request)'])
      assert.ok(r.stdout.includes(s), `table shows ${s}`);

    const rep = JSON.parse(fs.readFileSync(json, 'utf8'));
    assert.equal(rep.model, 'tiny-bench', 'the model comes from /v1/models');
    assert.equal(rep.runs.length, 2);
    assert.deepEqual(rep.runs.map((x) => x.concurrency), [1, 2]);
    let outTotal = rep.cold.output_tokens;
    let canvasesTotal = rep.cold.canvases;
    assert.ok(rep.cold.ok);
    const maxTokensByRun = [];
    for (const run of rep.runs) {
      assert.equal(run.request_rate, 'inf');
      assert.equal(run.num_prompts, 3);
      assert.equal(run.completed, 3);
      assert.equal(run.failed, 0);
      assert.equal(run.requests.length, 3);
      assert.ok(run.duration_s > 0);
      let inSum = 0;
      let outSum = 0;
      for (const q of run.requests) {
        assert.ok(q.ok, q.error);
        assert.ok(q.max_tokens >= 9 && q.max_tokens <= 27, 'output length within the range ratio');
        assert.equal(q.output_tokens, q.max_tokens, 'ignore_eos: every answer runs to max_tokens');
        assert.ok(q.input_tokens > 8, 'the chat template adds tokens to the 4..12 words');
        assert.ok(q.ttft_ms >= 0 && q.ttft_ms <= q.e2el_ms);
        assert.ok(q.start_s >= 0);
        for (const g of q.itl_ms) assert.ok(g >= 0);
        assert.equal(q.canvases, Math.ceil(q.output_tokens / CANVAS), 'canvases from the usage extension');
        // One chunk per committed canvas, unless a canvas decodes to no text yet (held-back UTF-8 bytes).
        assert.ok(q.output_chunks >= 1 && q.output_chunks <= q.canvases);
        assert.equal(q.itl_ms.length, q.output_chunks - 1);
        assert.ok(q.denoising_steps >= q.canvases && q.denoising_steps <= q.canvases * MAX_STEPS);
        inSum += q.input_tokens;
        outSum += q.output_tokens;
        canvasesTotal += q.canvases;
      }
      maxTokensByRun.push(run.requests.map((q) => q.max_tokens));
      assert.equal(run.total_input_tokens, inSum);
      assert.equal(run.total_output_tokens, outSum);
      outTotal += outSum;
      assert.ok(Math.abs(run.output_throughput - outSum / run.duration_s) < 1e-6 * outSum);
      assert.ok(Math.abs(run.request_throughput - 3 / run.duration_s) < 1e-9);
      for (const k of ['ttft_ms', 'tpot_ms', 'itl_ms', 'e2el_ms']) checkSummary(run[k], k);
      assert.equal(run.ttft_ms.count, 3);
      assert.equal(run.itl_ms.count, run.requests.reduce((a, q) => a + q.itl_ms.length, 0));
      const d = run.diffusion;
      assert.equal(d.canvas_length, CANVAS);
      assert.equal(d.full_canvas_tok_s.count + d.short_answer_tok_s.count, 3);
      assert.equal(d.full_canvas_tok_s.count, run.requests.filter((q) => q.output_tokens >= CANVAS).length);
      assert.equal(d.by_output_len.reduce((a, b) => a + b.requests, 0), 3);
      for (const b of d.by_output_len) assert.ok(b.min_tokens <= b.max_tokens);
      checkSummary(d.steps_per_canvas, 'steps_per_canvas');
      assert.ok(d.steps_per_canvas.max <= MAX_STEPS && d.steps_per_canvas.min >= 1);
      checkSummary(d.canvases_per_request, 'canvases_per_request');
    }
    assert.deepEqual(maxTokensByRun[0], maxTokensByRun[1], 'every sweep point replays the same seeded requests');
    assert.ok(rep.warm && rep.warm.e2el_ms > 0);

    const after = await metrics(server);
    const gen = (m) => sample(m, 'dgemma:generation_tokens_total');
    const cv = (m) => sample(m, 'dgemma:canvases_committed_total');
    assert.equal(gen(after) - gen(before), outTotal, 'the server generated exactly the tokens the report counts');
    assert.equal(cv(after) - cv(before), canvasesTotal, 'and committed exactly the canvases it counts');

    const x = parseSvg(svg);
    assert.equal(x.tag, '{http://www.w3.org/2000/svg}svg');
    assert.equal(x.polylines, 2 * 2 + 1, 'an E2E and a TTFT CDF per run, one throughput line');
    assert.equal(x.circles, 2 + 6, 'one throughput point per run, one effective-tok/s point per request');
  });

  test('the same seed gives the same requests; request-rate sweeps and /v1/completions work', async () => {
    const a = path.join(tmp, 'a.json');
    const b = path.join(tmp, 'b.json');
    const common = ['bench', '--base-url', server.base, '--model', 'tiny-bench', '--num-prompts', '2', '--input-len', '6',
      '--output-len', '6', '--range-ratio', '0.5', '--seed', '11', '--skip-cold', '--ignore-eos'];
    const r1 = await runCli([...common, '--request-rate', '20', '--output-json', a], { timeoutMs: 300000 });
    assert.equal(r1.code, 0, r1.stderr);
    const r2 = await runCli([...common, '--endpoint', '/v1/completions', '--output-json', b], { timeoutMs: 300000 });
    assert.equal(r2.code, 0, r2.stderr);
    const ja = JSON.parse(fs.readFileSync(a, 'utf8'));
    const jb = JSON.parse(fs.readFileSync(b, 'utf8'));
    assert.equal(ja.cold, null);
    assert.deepEqual(ja.runs.map((x) => x.request_rate), [20]);
    assert.equal(jb.endpoint, '/v1/completions');
    assert.deepEqual(ja.runs[0].requests.map((q) => q.max_tokens), jb.runs[0].requests.map((q) => q.max_tokens));
    for (const q of jb.runs[0].requests) {
      assert.ok(q.ok, q.error);
      assert.equal(q.output_tokens, q.max_tokens);
    }
  });

  test('bad flags and an unreachable server are clear errors', async () => {
    const bad = await runCli(['bench', '--base-url', server.base, '--concurrency', '1,x']);
    assert.equal(bad.code, 1);
    assert.match(bad.stderr, /--concurrency: 'x'/);
    const rate = await runCli(['bench', '--base-url', server.base, '--request-rate', '-1']);
    assert.equal(rate.code, 1);
    assert.match(rate.stderr, /--request-rate/);
    const url = await runCli(['bench', '--base-url', 'ftp://x']);
    assert.equal(url.code, 1);
    assert.match(url.stderr, /--base-url/);
    const down = await runCli(['bench', '--base-url', 'http://127.0.0.1:1', '--model', 'm', '--num-prompts', '1', '--skip-cold']);
    assert.equal(down.code, 1);
    assert.match(down.stderr + down.stdout, /no request succeeded/);
  });
});
