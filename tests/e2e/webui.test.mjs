// The web page at `/`, driven in Debian's headless Chromium (DevTools protocol over a pipe): it loads
// from the binary, asks for the API key, chats with the real engine (dummy weights) while drawing the
// preview canvases, and (scripted runner) shows reasoning and tool calls as such, returns a tool's result
// to the model, renders the answer's Markdown without letting HTML through, sends only the settings the
// user set (the server's enable_thinking default stays) and keeps max tokens inside the context.
// Screenshots go to <build>/test-artifacts/.
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { BIN, makeModelDir, postJson, startServer, tinyConfig, GENERATION_CONFIG, metrics, sample } from './helpers.mjs';
import { launchChromium } from './cdp.mjs';

const SRC = process.env.DGEMMA_SOURCE_DIR;
const ARTIFACTS = path.join(path.dirname(BIN), 'test-artifacts');
const KEY = 'page-secret';
const CANVAS = 16;

const setValue = (id, value) =>
  `(() => { const e = document.getElementById(${JSON.stringify(id)}); e.value = ${JSON.stringify(value)}; return true; })()`;
const say = (text) =>
  `(() => { document.getElementById('input').value = ${JSON.stringify(text)}; document.getElementById('composer').requestSubmit(); return true; })()`;

describe('web page (real engine, dummy weights)', () => {
  let server, browser;
  before(async () => {
    const modelDir = makeModelDir({
      config: tinyConfig({ canvasLength: CANVAS }),
      generationConfig: { ...GENERATION_CONFIG, max_denoising_steps: 4 },
    });
    server = await startServer({
      modelDir,
      loadFormat: 'dummy',
      args: ['--device', 'cpu', '--served-model-name', 'tiny-web', '--max-num-seqs', '2', '--max-model-len', '1024', '--api-key', KEY],
    });
    browser = await launchChromium();
  });
  after(async () => {
    if (browser) await browser.close();
    if (server) await server.stop();
  });

  test('the page and its files are served from the binary, byte for byte, without a key', async () => {
    const r = await fetch(server.url('/'));
    assert.equal(r.status, 200);
    assert.match(r.headers.get('content-type'), /^text\/html/);
    assert.match(r.headers.get('content-security-policy'), /default-src 'self'/);
    assert.equal(await r.text(), fs.readFileSync(path.join(SRC, 'src/api/webui/index.html'), 'utf8'));
    for (const [file, type] of [['app.js', /^text\/javascript/], ['markdown.js', /^text\/javascript/], ['style.css', /^text\/css/],
      ['favicon.svg', /^image\/svg\+xml/]]) {
      const f = await fetch(server.url('/webui/' + file));
      assert.equal(f.status, 200);
      assert.match(f.headers.get('content-type'), type);
      assert.equal(await f.text(), fs.readFileSync(path.join(SRC, 'src/api/webui', file), 'utf8'));
    }
    assert.equal((await fetch(server.url('/webui/nope.js'))).status, 404);
    const icon = await fetch(server.url('/favicon.ico'));
    assert.equal(icon.status, 200, 'browsers ask for /favicon.ico');
    assert.match(icon.headers.get('content-type'), /^image\/svg\+xml/);
    assert.match(fs.readFileSync(path.join(SRC, 'src/api/webui/index.html'), 'utf8'), /<link rel="icon" href="\/webui\/favicon.svg"/);
  });

  test('key prompt, then two answers with live canvases and per-answer statistics', async () => {
    await browser.goto(server.url('/'));
    await browser.waitFor(`document.getElementById('status').textContent.includes('API key required')`);
    await browser.eval(setValue('api-key', KEY));
    await browser.eval(`document.getElementById('save-key').click(), true`);
    await browser.waitFor(`document.body.dataset.ready === '1'`);
    assert.equal(await browser.eval(`document.getElementById('model').value`), 'tiny-web');
    assert.equal(await browser.eval(`localStorage.getItem('dgemma.apiKey')`), KEY, 'the key is kept by the page');

    const before = await metrics(server);
    await browser.eval(setValue('max-tokens', '40'));
    await browser.eval(say('Tell me a story about a river.'));
    await browser.waitFor(`document.body.dataset.answers === '1'`, { timeoutMs: 120000 });
    await browser.eval(say('And another one.'));
    await browser.waitFor(`document.body.dataset.answers === '2'`, { timeoutMs: 120000 });

    const page = await browser.eval(`(() => ({
      errors: [...document.querySelectorAll('.msg .error')].map((e) => e.textContent),
      users: document.querySelectorAll('.msg.user').length,
      answers: document.querySelectorAll('.msg.assistant').length,
      stats: [...document.querySelectorAll('.msg.assistant .stats.final')].map((e) => e.textContent),
      previews: Number(document.body.dataset.previews),
      cells: document.querySelectorAll('#canvas-grid .tok').length,
      info: document.getElementById('canvas-info').textContent,
      history: document.querySelectorAll('#canvas-history .row:not(.answer-head)').length,
      heads: [...document.querySelectorAll('#canvas-history .answer-head')].map((e) => e.textContent),
    }))()`);
    assert.deepEqual(page.errors, []);
    assert.equal(page.users, 2);
    assert.equal(page.answers, 2);
    assert.equal(page.stats.length, 2);
    for (const s of page.stats) assert.match(s, /\d+ tokens · \d+ canvas(es)? · \d+ steps \([\d.]+ per canvas\) · [\d.]+ tok\/s/);
    assert.ok(page.previews > 0, 'preview steps were drawn');
    assert.equal(page.cells, CANVAS, 'one cell per canvas position');
    // The model engine reports each step's acceptance mask and entropies: drawn as such.
    assert.match(page.info, /canvas \d+ · step \d+ · \d+\/16 positions unchanged · \d+\/16 accepted · mean entropy [\d.]+/);
    assert.ok(page.history >= 2, 'each finished canvas is listed');
    assert.deepEqual(page.heads, ['answer 2', 'answer 1'], 'under its answer, newest first');

    const after = await metrics(server);
    const ok = (m) => sample(m, 'dgemma:request_success_total', { finished_reason: 'stop' }) + sample(m, 'dgemma:request_success_total', { finished_reason: 'length' });
    assert.equal(ok(after) - ok(before), 2, 'the page made exactly two successful requests');
    const tokens = sample(after, 'dgemma:generation_tokens_total') - sample(before, 'dgemma:generation_tokens_total');
    const shown = page.stats.map((s) => Number(s.match(/^(\d+) tokens/)[1])).reduce((a, b) => a + b, 0);
    assert.equal(shown, tokens, 'the token counts shown are the server\'s');

    const shot = await browser.screenshot(path.join(ARTIFACTS, 'webui.png'));
    assert.ok(fs.statSync(shot).size > 10000);
  });
});

describe('web page (scripted runner): reasoning, tool calls and their results, Markdown, settings', () => {
  let server, browser;
  const answer = [
    'Checked.<channel|>## Forecast\n\nIt is **18 C** and *calm* in `Paris`.\n\n- sunny\n- light wind\n\n',
    '```js\nconst t = "<b>18</b>";\n```\n\n',
    '<img src=x onerror="window.__xss=1"><script>window.__xss=2</script> [see](javascript:window.__xss=3) [docs](https://example.org/a)<turn|>',
  ];
  before(async () => {
    const script = {
      canvas_length: 16,  // the thought (16 tokens) fills canvas 0, the tool call is canvas 1
      steps: 6,
      canvas_delay_ms: 30,
      filler: [' alpha', ' beta', ' gamma'],
      replies: [
        { when: ['weather', '18 C'], canvases: answer },
        {
          when: 'weather',
          canvases: [
            '<|channel>thought\nThe user wants the weather; I should call the tool.<channel|>',
            '<|tool_call>call:get_weather{city:<|"|>Paris<|"|>}<tool_call|><|tool_response>',
          ],
        },
      ],
      default: { random_canvases: 2 },
    };
    const modelDir = makeModelDir({ script });
    server = await startServer({
      modelDir,
      args: ['--served-model-name', 'scripted', '--max-model-len', '2000', '--enable-auto-tool-choice', '--tool-call-parser', 'gemma4', '--reasoning-parser', 'gemma4'],
    });
    browser = await launchChromium();
  });
  after(async () => {
    if (browser) await browser.close();
    if (server) await server.stop();
  });

  test('reasoning goes to its own block, the tool call is shown, its result goes back, the answer is Markdown', async () => {
    await browser.goto(server.url('/'));
    await browser.waitFor(`document.body.dataset.ready === '1'`);
    const tools = [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }];
    await browser.eval(setValue('tools', JSON.stringify(tools)));
    await browser.eval(setValue('thinking', 'on'));  // a thought block counts only with thinking on
    await browser.eval(say('What is the weather in Paris?'));
    await browser.waitFor(`document.body.dataset.answers === '1'`);
    const page = await browser.eval(`(() => ({
      errors: [...document.querySelectorAll('.msg .error')].map((e) => e.textContent),
      reasoning: document.querySelector('.msg.assistant details.reasoning div')?.textContent,
      content: document.querySelector('.msg.assistant .content').textContent,
      toolName: document.querySelector('.msg.assistant .tool-call .name')?.textContent,
      toolArgs: document.querySelector('.msg.assistant .tool-call .args')?.textContent,
      stats: document.querySelector('.msg.assistant .stats.final').textContent,
      previews: Number(document.body.dataset.previews),
      resultFields: document.querySelectorAll('.msg.assistant .tool-results textarea').length,
    }))()`);
    assert.deepEqual(page.errors, []);
    assert.equal(page.reasoning, 'The user wants the weather; I should call the tool.');
    assert.equal(page.toolName, 'get_weather');
    assert.deepEqual(JSON.parse(page.toolArgs), { city: 'Paris' });
    assert.ok(!page.content.includes('<|tool_call>') && !page.content.includes('<|channel>'), 'no raw markers in the text');
    assert.match(page.stats, /finish: tool_calls/);
    assert.match(page.stats, /2 canvases · 12 steps \(6\.0 per canvas\)/);
    assert.ok(page.previews > 0);
    assert.equal(page.resultFields, 1, 'one result field per call');
    await browser.screenshot(path.join(ARTIFACTS, 'webui-tools.png'));

    // The user returns the result; the model answers from it.
    await browser.eval(`(() => { const f = document.querySelector('.tool-results'); f.querySelector('textarea').value = '18 C, calm'; f.requestSubmit(); return true; })()`);
    await browser.waitFor(`document.body.dataset.answers === '2'`);
    const sent = await browser.eval(`state.lastRequest.messages.map((m) => ({ role: m.role, content: m.content, tool_call_id: m.tool_call_id, name: m.name, calls: (m.tool_calls || []).length }))`);
    assert.deepEqual(sent.map((m) => m.role), ['user', 'assistant', 'tool']);
    assert.equal(sent[1].calls, 1);
    assert.equal(sent[1].content, null);
    assert.equal(sent[2].content, '18 C, calm');
    assert.equal(sent[2].name, 'get_weather');
    assert.match(sent[2].tool_call_id, /^call_/);
    const md = await browser.eval(`(() => {
      const c = [...document.querySelectorAll('.msg.assistant .content')].at(-1);
      return {
        errors: [...document.querySelectorAll('.msg .error')].map((e) => e.textContent),
        tool: document.querySelector('.msg.tool .content')?.textContent,
        h2: c.querySelector('h2')?.textContent,
        strong: c.querySelector('p strong')?.textContent,
        em: c.querySelector('p em')?.textContent,
        codespan: c.querySelector('p code')?.textContent,
        items: [...c.querySelectorAll('ul li')].map((e) => e.textContent),
        code: c.querySelector('pre code.lang-js')?.textContent,
        links: [...c.querySelectorAll('a')].map((a) => a.getAttribute('href')),
        text: c.textContent,
        injected: document.querySelectorAll('.chat img, .chat script, .chat b, .chat [onerror]').length,
        xss: window.__xss ?? null,
      };
    })()`);
    assert.deepEqual(md.errors, []);
    assert.equal(md.tool, 'get_weather → 18 C, calm');
    assert.equal(md.h2, 'Forecast');
    assert.equal(md.strong, '18 C');
    assert.equal(md.em, 'calm');
    assert.equal(md.codespan, 'Paris');
    assert.deepEqual(md.items, ['sunny', 'light wind']);
    assert.equal(md.code, 'const t = "<b>18</b>";');
    assert.deepEqual(md.links, ['https://example.org/a'], 'javascript: links are not links');
    assert.ok(md.text.includes('<img src=x onerror="window.__xss=1"><script>window.__xss=2</script>'), 'HTML shows as text');
    assert.equal(md.injected, 0, 'no element from the model output');
    assert.equal(md.xss, null);
    await browser.screenshot(path.join(ARTIFACTS, 'webui-markdown.png'));
  });

  test('only the settings the user set are sent; max tokens stays inside the context', async () => {
    await browser.goto(server.url('/'));
    await browser.waitFor(`document.body.dataset.ready === '1'`);
    await browser.eval(setValue('max-tokens', '5000'));
    await browser.eval(say('Say something.'));
    await browser.waitFor(`document.body.dataset.answers === '1'`);
    const first = await browser.eval(`state.lastRequest`);
    assert.equal(first.chat_template_kwargs, undefined, "the server's enable_thinking default is not overridden");
    for (const k of ['temperature', 'top_p', 'top_k', 'min_p', 'seed', 'max_denoising_steps', 'tools']) assert.equal(first[k], undefined, k);
    const count = (await postJson(server.url('/tokenize'), { messages: first.messages })).json.count;
    assert.equal(first.max_tokens, 2000 - count, 'clamped to what the context leaves');
    assert.match(await browser.eval(`document.querySelector('.msg.assistant .note')?.textContent || ''`), /max tokens \d+: what the context \(2000 tokens\) leaves/);
    assert.equal(await browser.eval(`document.getElementById('max-tokens').max`), '2000');

    await browser.eval(`document.getElementById('settings').open = true`);
    for (const [id, v] of [['system-prompt', 'You are terse.'], ['temperature', '0.7'], ['top-p', '0.9'], ['top-k', '20'], ['min-p', '0.05'],
      ['seed', '42'], ['max-steps', '12'], ['thinking', 'off'], ['max-tokens', '30']])
      await browser.eval(setValue(id, v));
    await browser.eval(say('Again.'));
    await browser.waitFor(`document.body.dataset.answers === '2'`);
    const second = await browser.eval(`state.lastRequest`);
    assert.deepEqual(second.messages[0], { role: 'system', content: 'You are terse.' });
    assert.deepEqual(second.chat_template_kwargs, { enable_thinking: false });
    assert.equal(second.temperature, 0.7);
    assert.equal(second.top_p, 0.9);
    assert.equal(second.top_k, 20);
    assert.equal(second.min_p, 0.05);
    assert.equal(second.seed, 42);
    assert.equal(second.max_denoising_steps, 12);
    assert.equal(second.max_tokens, 30);
    assert.deepEqual(await browser.eval(`[...document.querySelectorAll('.msg .error')].map((e) => e.textContent)`), []);
    await browser.screenshot(path.join(ARTIFACTS, 'webui-settings.png'));
  });
});
