// A tensor-parallel rank that dies stops the server (docs/DEPLOY.md "When a rank dies"): the test server's
// `--load-format tp-fault:SPEC` runs the real engine on the CPU simulation of -tp 2 (dummy weights) with
// rank 1 made to die at a chosen collective call, mid-request. The requests in flight end with an error
// naming the rank and the cause (a streamed one: an error event after its first chunks; a plain one: a
// 500), /health answers 503 or the port is closed, and the process exits with status 1 within a bounded
// time, never hanging. Two deaths: a rank that throws, and a rank that stops responding (the others time
// out in the collective, and the stuck rank is left behind).
import { test, describe } from 'node:test';
import assert from 'node:assert/strict';
import { makeModelDir, startServer, tinyConfig, GENERATION_CONFIG, postJson, streamRaw } from './helpers.mjs';

const modelDir = () =>
  makeModelDir({ config: tinyConfig({ canvasLength: 16 }), generationConfig: { ...GENERATION_CONFIG, max_denoising_steps: 4 } });

// Rank 1 dies at this collective call: the tiny model makes about 20 a step, so 150 is past the prefill
// and the first canvas of the requests below (their first text is streamed), well before their last.
const AFTER = 150;

async function startFaulty(spec) {
  return startServer({
    modelDir: modelDir(),
    loadFormat: `tp-fault:${spec}`,
    args: ['--device', 'cpu', '--served-model-name', 'tiny', '--max-num-seqs', '2', '--max-model-len', '1024',
           '--disable-log-stats'],
  });
}

const body = (stream) => ({
  model: 'tiny', messages: [{ role: 'user', content: 'Say something long.' }], max_tokens: 400, ignore_eos: true,
  seed: 5, stream,
});

// Resolves with the process's exit code, or rejects after `ms`.
function exitWithin(server, ms) {
  return new Promise((resolve, reject) => {
    if (server.proc.exitCode !== null) return resolve(server.proc.exitCode);
    const t = setTimeout(() => reject(new Error(`the server did not exit within ${ms} ms:\n${server.log()}`)), ms);
    server.proc.on('exit', (code) => {
      clearTimeout(t);
      resolve(code);
    });
  });
}

async function healthAfterFailure(server) {
  try {
    const r = await fetch(server.url('/health'));
    return r.status;
  } catch {
    return 'closed';  // the process has already exited
  }
}

describe('a tensor-parallel rank that dies stops the server (CPU, -tp 2, fault injected)', () => {
  test('a rank that throws: the requests in flight get the error, health is 503, exit status 1', async () => {
    const server = await startFaulty(`ranks=2,rank=1,after=${AFTER},mode=throw`);
    try {
      const t0 = Date.now();
      const [streamed, plain] = await Promise.all([
        streamRaw(server.url('/v1/chat/completions'), body(true)),
        postJson(server.url('/v1/chat/completions'), body(false)),
      ]);
      const want = /tensor-parallel rank 1 failed: injected fault: rank 1 died/;
      // The stream started (its status is 200 and its first chunks came), then ended with an error event.
      assert.equal(streamed.status, 200);
      const chunks = streamed.events.filter((e) => e !== '[DONE]' && !e.error);
      assert.ok(chunks.some((e) => e.choices?.[0]?.delta?.content), 'the stream delivered text before the failure');
      const err = streamed.events.find((e) => e.error);
      assert.ok(err, `an error event ends the stream: ${streamed.text.slice(-500)}`);
      assert.match(err.error.message, want);
      assert.ok(!streamed.events.includes('[DONE]'));
      assert.equal(plain.status, 500, plain.text);
      assert.match(plain.json.error.message, want);
      const health = await healthAfterFailure(server);
      assert.ok(health === 503 || health === 'closed', `health after the failure: ${health}`);
      assert.equal(await exitWithin(server, 15000), 1);
      assert.ok(Date.now() - t0 < 60000);
      assert.match(server.log(), /the engine stopped: tensor-parallel rank 1 failed: injected fault/);
    } finally {
      await server.stop();
    }
  });

  test('a rank that stops responding: the others time out, the server still stops with status 1', async () => {
    const server = await startFaulty('ranks=2,rank=1,after=60,mode=hang,timeout=1,return=1');
    try {
      const t0 = Date.now();
      const plain = await postJson(server.url('/v1/chat/completions'), body(false));
      assert.equal(plain.status, 500, plain.text);
      assert.match(plain.json.error.message,
                   /tensor-parallel rank 0 failed: .*rank\(s\) 1 did not reach the collective within 1 s/);
      assert.match(plain.json.error.message, /rank\(s\) 1 did not return within 1 s and were left running/);
      // A new request after the failure is refused (503) if the port still answers.
      try {
        const again = await postJson(server.url('/v1/chat/completions'), body(false));
        assert.equal(again.status, 503, again.text);
      } catch {}
      assert.equal(await exitWithin(server, 15000), 1);
      assert.ok(Date.now() - t0 < 60000, 'bounded: a timeout of 1 s and a wait of 1 s');
    } finally {
      await server.stop();
    }
  });
});
