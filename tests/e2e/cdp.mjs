// A minimal Chrome DevTools Protocol client over --remote-debugging-pipe (fd 3: commands in, fd 4:
// events and replies out, each message NUL-terminated), so the browser tests need nothing beyond node
// and Debian's chromium.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

export const CHROMIUM = process.env.DGEMMA_CHROMIUM || '/usr/bin/chromium';

export async function launchChromium({ width = 1280, height = 860 } = {}) {
  if (!fs.existsSync(CHROMIUM)) throw new Error(`${CHROMIUM} not found: scripts/setup.sh installs Debian's chromium`);
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), 'dgemma-chromium-'));
  const args = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync', '--disable-extensions',
    '--disable-dev-shm-usage', '--hide-scrollbars', '--mute-audio', `--window-size=${width},${height}`,
    `--user-data-dir=${profile}`, '--remote-debugging-pipe', 'about:blank'];
  const proc = spawn(CHROMIUM, args, { stdio: ['ignore', 'ignore', 'pipe', 'pipe', 'pipe'] });
  let stderr = '';
  proc.stderr.on('data', (d) => (stderr += d));
  const toBrowser = proc.stdio[3];
  const fromBrowser = proc.stdio[4];
  let nextId = 1;
  const pending = new Map();
  const listeners = [];
  let buf = Buffer.alloc(0);
  fromBrowser.on('data', (d) => {
    buf = Buffer.concat([buf, d]);
    let z;
    while ((z = buf.indexOf(0)) >= 0) {
      const msg = JSON.parse(buf.subarray(0, z).toString('utf8'));
      buf = buf.subarray(z + 1);
      if (msg.id && pending.has(msg.id)) {
        const { resolve, reject, method } = pending.get(msg.id);
        pending.delete(msg.id);
        if (msg.error) reject(new Error(`${method}: ${msg.error.message}`));
        else resolve(msg.result);
      } else if (msg.method) {
        for (const l of listeners) l(msg);
      }
    }
  });
  const exited = new Promise((r) => proc.on('exit', r));
  proc.on('exit', () => {
    for (const { reject, method } of pending.values()) reject(new Error(`chromium exited during ${method}:\n${stderr}`));
    pending.clear();
  });
  const send = (method, params = {}, sessionId) =>
    new Promise((resolve, reject) => {
      const id = nextId++;
      pending.set(id, { resolve, reject, method });
      toBrowser.write(JSON.stringify({ id, method, params, ...(sessionId ? { sessionId } : {}) }) + '\0');
    });

  // One page, attached with a flat session.
  const { targetInfos } = await send('Target.getTargets');
  let page = targetInfos.find((t) => t.type === 'page');
  if (!page) page = { targetId: (await send('Target.createTarget', { url: 'about:blank' })).targetId };
  const { sessionId } = await send('Target.attachToTarget', { targetId: page.targetId, flatten: true });
  const cmd = (method, params) => send(method, params, sessionId);
  const consoleLines = [];
  listeners.push((m) => {
    if (m.sessionId !== sessionId) return;
    if (m.method === 'Runtime.consoleAPICalled') consoleLines.push(m.params.args.map((a) => a.value ?? a.description).join(' '));
    if (m.method === 'Runtime.exceptionThrown') consoleLines.push('exception: ' + JSON.stringify(m.params.exceptionDetails));
  });
  await cmd('Page.enable');
  await cmd('Runtime.enable');

  return {
    cmd,
    consoleLines,
    stderr: () => stderr,
    async goto(url) {
      await cmd('Page.navigate', { url });
      await this.waitFor('document.readyState === "complete"');
    },
    // Evaluates an expression in the page (awaiting promises) and returns its value.
    async eval(expression) {
      const r = await cmd('Runtime.evaluate', { expression, awaitPromise: true, returnByValue: true });
      if (r.exceptionDetails) throw new Error(`page exception: ${JSON.stringify(r.exceptionDetails)}`);
      return r.result.value;
    },
    async waitFor(expression, { timeoutMs = 60000, intervalMs = 100 } = {}) {
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        const v = await this.eval(expression);
        if (v) return v;
        if (Date.now() > deadline) throw new Error(`timed out waiting for ${expression}; console:\n${consoleLines.join('\n')}`);
        await new Promise((r) => setTimeout(r, intervalMs));
      }
    },
    async screenshot(file) {
      const { data } = await cmd('Page.captureScreenshot', { format: 'png' });
      fs.mkdirSync(path.dirname(file), { recursive: true });
      fs.writeFileSync(file, Buffer.from(data, 'base64'));
      return file;
    },
    async close() {
      try {
        await send('Browser.close');
      } catch {}
      const t = setTimeout(() => proc.kill('SIGKILL'), 5000);
      await exited;
      clearTimeout(t);
      fs.rmSync(profile, { recursive: true, force: true });
    },
  };
}
