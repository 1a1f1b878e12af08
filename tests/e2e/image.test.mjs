// Images through the real server (dummy weights, CPU, a tiny model with a small vision tower): an
// image_url part with a data: URL gets an answer through the official openai client, the prompt counts
// the image's tokens, hostile images are 400s that leave the server serving, the Responses API's
// input_image parts work as chat's image_url parts, and a text-only deployment
// (--limit-mm-per-prompt '{"image": 0}') refuses images. The web page (headless Chromium) sends pasted and
// dropped images as data: URLs.
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import zlib from 'node:zlib';
import { BIN, makeModelDir, startServer, tinyConfig, GENERATION_CONFIG, postJson } from './helpers.mjs';
import { launchChromium } from './cdp.mjs';

// A small Gemma 4 vision config (4 heads of 8, 2 layers) whose tower projects into the tiny text model.
const VISION = {
  model_type: 'gemma4_vision', hidden_size: 32, intermediate_size: 48, num_hidden_layers: 2, num_attention_heads: 4,
  num_key_value_heads: 4, head_dim: 8, patch_size: 16, pooling_kernel_size: 3, position_embedding_size: 1024,
  standardize: true, rms_norm_eps: 1e-6,
};

function crc32(buf) {
  let c = ~0;
  for (const b of buf) {
    c ^= b;
    for (let k = 0; k < 8; k++) c = (c >>> 1) ^ (0xedb88320 & -(c & 1));
  }
  return ~c >>> 0;
}

// An RGB PNG of w x h pixels with a colour pattern.
function png(w, h) {
  const chunk = (type, data) => {
    const len = Buffer.alloc(4);
    len.writeUInt32BE(data.length);
    const td = Buffer.concat([Buffer.from(type), data]);
    const crc = Buffer.alloc(4);
    crc.writeUInt32BE(crc32(td));
    return Buffer.concat([len, td, crc]);
  };
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(w, 0);
  ihdr.writeUInt32BE(h, 4);
  ihdr[8] = 8;
  ihdr[9] = 2;
  const raw = Buffer.alloc(h * (1 + 3 * w));
  for (let y = 0; y < h; y++)
    for (let x = 0; x < w; x++) {
      const o = y * (1 + 3 * w) + 1 + 3 * x;
      raw[o] = (x * 7) & 255;
      raw[o + 1] = (y * 13) & 255;
      raw[o + 2] = (x * y) & 255;
    }
  const sig = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
  return Buffer.concat([sig, chunk('IHDR', ihdr), chunk('IDAT', zlib.deflateSync(raw)), chunk('IEND', Buffer.alloc(0))]);
}

const dataUrl = (bytes, type = 'image/png') => `data:${type};base64,${Buffer.from(bytes).toString('base64')}`;
const imagePart = (url) => ({ type: 'image_url', image_url: { url } });

function visionModelDir() {
  const dir = makeModelDir({ config: { ...tinyConfig({ canvasLength: 16 }), vision_config: VISION },
                             generationConfig: { ...GENERATION_CONFIG, max_denoising_steps: 3 } });
  // 70 soft tokens per image at most: a square image becomes 8 x 8 pooled cells, 64 soft tokens.
  fs.writeFileSync(path.join(dir, 'processor_config.json'), JSON.stringify({ image_processor: {
    image_processor_type: 'Gemma4ImageProcessor', max_soft_tokens: 70, patch_size: 16, pooling_kernel_size: 3 } }));
  return dir;
}

describe('images (dummy weights, CPU, tiny vision tower)', () => {
  let server, client;
  before(async () => {
    server = await startServer({ modelDir: visionModelDir(), loadFormat: 'dummy',
      args: ['--device', 'cpu', '--served-model-name', 'tiny-vision', '--max-num-seqs', '2', '--max-model-len', '1024'] });
    client = server.client();
  });
  after(async () => server && (await server.stop()));

  const ask = (content, extra = {}) => client.chat.completions.create(
    { model: 'tiny-vision', messages: [{ role: 'user', content }], max_tokens: 8, seed: 1, ...extra });

  test('an image in a data: URL gets an answer; the prompt counts boi, 64 soft tokens and eoi', async () => {
    const withImage = await ask([imagePart(dataUrl(png(40, 40))), { type: 'text', text: 'What is this?' }]);
    assert.equal(typeof withImage.choices[0].message.content, 'string');
    assert.ok(['stop', 'length'].includes(withImage.choices[0].finish_reason));
    const textOnly = await ask([{ type: 'text', text: 'What is this?' }]);
    assert.equal(withImage.usage.prompt_tokens - textOnly.usage.prompt_tokens, 66);
    // mm_processor_kwargs: a budget of 140 soft tokens makes the square image 11 x 11 cells.
    const bigger = await ask([imagePart(dataUrl(png(40, 40))), { type: 'text', text: 'What is this?' }],
                             { mm_processor_kwargs: { max_soft_tokens: 140 } });
    assert.equal(bigger.usage.prompt_tokens - textOnly.usage.prompt_tokens, 123);
  });

  test('two images, streamed; the same request twice gives the same answer', async () => {
    const content = [imagePart(dataUrl(png(30, 60))), { type: 'text', text: 'and' }, imagePart(dataUrl(png(50, 20)))];
    const a = await ask(content, { temperature: 0 });
    const b = await ask(content, { temperature: 0 });
    assert.equal(a.choices[0].message.content, b.choices[0].message.content);
    const stream = await ask(content, { stream: true, stream_options: { include_usage: true } });
    let usage = null;
    for await (const chunk of stream) if (chunk.usage) usage = chunk.usage;
    assert.equal(usage.prompt_tokens, a.usage.prompt_tokens);
  });

  test('hostile images are 400s naming the problem, and the server goes on', async () => {
    const good = png(40, 40);
    const cases = [
      ['data:image/png;base64,%%%notbase64', /base64/],
      ['https://example.com/cat.png', /network/],
      [dataUrl(good.subarray(0, good.length >> 1)), /image_url/],
      [dataUrl(Buffer.from('this is no image at all')), /image_url/],
      [dataUrl(png(1, 100000)), /image_url/],
      ['file:///etc/passwd', /allowed-local-media-path/],
    ];
    for (const [url, re] of cases) {
      await assert.rejects(ask([imagePart(url), { type: 'text', text: 'x' }]), (e) => {
        assert.equal(e.status, 400, `${url.slice(0, 40)}: ${e.message}`);
        assert.match(e.message, re);
        return true;
      });
    }
    const r = await postJson(server.url('/v1/chat/completions'), { model: 'tiny-vision', max_tokens: 4,
      messages: [{ role: 'user', content: [{ type: 'input_audio', input_audio: {} }] }] });
    assert.equal(r.status, 400);
    const ok = await ask([imagePart(dataUrl(good)), { type: 'text', text: 'still there?' }]);
    assert.equal(typeof ok.choices[0].message.content, 'string');
  });

  test('the Responses API takes input_image parts as chat takes image_url parts', async () => {
    const respond = (content) => client.responses.create(
      { model: 'tiny-vision', input: [{ role: 'user', content }], max_output_tokens: 8, temperature: 0, seed: 1 });
    const text = { type: 'input_text', text: 'What is this?' };
    const image = { type: 'input_image', image_url: dataUrl(png(40, 40)), detail: 'auto' };
    const [withImage, textOnly] = [await respond([image, text]), await respond([text])];
    assert.equal(typeof withImage.output_text, 'string');
    assert.equal(withImage.usage.input_tokens - textOnly.usage.input_tokens, 66);  // boi, 64 soft tokens, eoi
    // The same prompt as chat's: the same answer for the same seed.
    const chat = await ask([imagePart(image.image_url), { type: 'text', text: 'What is this?' }],
                           { temperature: 0 });
    assert.equal(withImage.usage.input_tokens, chat.usage.prompt_tokens);
    assert.equal(withImage.output_text, chat.choices[0].message.content);
    await assert.rejects(respond([{ type: 'input_image', image_url: 'data:image/png;base64,%%%' }, text]), (e) => {
      assert.equal(e.status, 400);
      assert.match(e.message, /base64/);
      return true;
    });
  });
});

describe('the web page sends pasted and dropped images', () => {
  let server, browser;
  before(async () => {
    server = await startServer({ modelDir: visionModelDir(), loadFormat: 'dummy',
      args: ['--device', 'cpu', '--served-model-name', 'tiny-vision', '--max-model-len', '1024'] });
    browser = await launchChromium();
  });
  after(async () => {
    if (browser) await browser.close();
    if (server) await server.stop();
  });

  test('a pasted and a dropped image go with the message as image_url parts', async () => {
    await browser.goto(server.url('/'));
    await browser.waitFor(`document.body.dataset.ready === '1'`);
    const b64 = png(40, 40).toString('base64');
    const file = `(() => { const b = Uint8Array.from(atob(${JSON.stringify(b64)}), (c) => c.charCodeAt(0));
      const dt = new DataTransfer(); dt.items.add(new File([b], 'a.png', { type: 'image/png' })); return dt; })()`;
    await browser.eval(`document.getElementById('input').dispatchEvent(new ClipboardEvent('paste',
      { clipboardData: ${file}, bubbles: true, cancelable: true })), true`);
    await browser.eval(`document.dispatchEvent(new DragEvent('drop', { dataTransfer: ${file}, bubbles: true,
      cancelable: true })), true`);
    await browser.waitFor(`document.body.dataset.pendingImages === '2'`);
    await browser.eval(`document.getElementById('max-tokens').value = '8', true`);
    await browser.eval(`document.getElementById('input').value = 'What are these?',
      document.getElementById('composer').requestSubmit(), true`);
    await browser.waitFor(`document.body.dataset.answers === '1'`, { timeoutMs: 120000 });
    const page = await browser.eval(`(() => ({
      errors: [...document.querySelectorAll('.msg .error')].map((e) => e.textContent),
      thumbs: document.querySelectorAll('.msg.user img.thumb').length,
      pending: document.body.dataset.pendingImages,
      parts: state.lastRequest.messages[0].content.map((p) => p.type === 'text' ? 'text' : p.image_url.url.slice(0, 22)),
    }))()`);
    assert.deepEqual(page.errors, []);
    assert.equal(page.thumbs, 2);
    assert.equal(page.pending, '0');
    assert.deepEqual(page.parts, ['data:image/png;base64,', 'data:image/png;base64,', 'text']);
    const shot = await browser.screenshot(path.join(path.dirname(BIN), 'test-artifacts', 'webui_images.png'));
    assert.ok(fs.statSync(shot).size > 10000);
  });
});

describe('a text-only deployment of a vision model', () => {
  let server;
  before(async () => {
    server = await startServer({ modelDir: visionModelDir(), loadFormat: 'dummy',
      args: ['--device', 'cpu', '--served-model-name', 'tiny-text', '--max-model-len', '1024',
             '--limit-mm-per-prompt', '{"image": 0}'] });
  });
  after(async () => server && (await server.stop()));

  test('refuses images with a 400 and serves text', async () => {
    const client = server.client();
    await assert.rejects(client.chat.completions.create({ model: 'tiny-text', max_tokens: 4,
      messages: [{ role: 'user', content: [imagePart(dataUrl(png(8, 8)))] }] }), (e) => {
      assert.equal(e.status, 400);
      assert.match(e.message, /without image input/);
      return true;
    });
    const r = await client.chat.completions.create({ model: 'tiny-text', max_tokens: 4,
      messages: [{ role: 'user', content: 'hello' }] });
    assert.equal(typeof r.choices[0].message.content, 'string');
    assert.match(server.log(), /vision tower is not loaded/);
  });
});
