// Chat templates as data: a model directory's chat_template.jinja and --chat-template (a file or the
// template text) run on the Jinja interpreter; the server logs which template it uses; a template
// outside the supported subset stops the server at start-up naming the line and the construct.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, describe, test } from 'node:test';
import { CHAT_TEMPLATE, makeModelDir, postJson, runCli, startServer } from './helpers.mjs';

const script = { canvas_length: 16, steps: 2, default: { canvases: ['ok<turn|>'] } };

// A ChatML-style template in Gemma's markers, with a kwarg of its own (`persona`).
const TEMPLATE = `{{ bos_token }}{%- if persona is defined %}<|turn>system
I am {{ persona }}.<turn|>
{% endif %}
{%- for m in messages %}<|turn>{{ 'model' if m.role == 'assistant' else m.role }}
{{ m.content | trim }}<turn|>
{% endfor %}
{%- if add_generation_prompt %}<|turn>model
{% endif %}`;

async function promptText(server, body) {
  const tok = await postJson(server.url('/tokenize'), body);
  assert.equal(tok.status, 200, tok.text);
  const detok = await postJson(server.url('/detokenize'), { tokens: tok.json.tokens });
  assert.equal(detok.status, 200, detok.text);
  return detok.json.prompt;
}

describe('chat templates', () => {
  const servers = [];
  after(async () => {
    for (const s of servers) await s.stop();
  });

  test("the model's chat_template.jinja is rendered by the interpreter", async () => {
    const modelDir = makeModelDir({ script });
    fs.writeFileSync(path.join(modelDir, 'chat_template.jinja'), TEMPLATE);
    const server = await startServer({ modelDir });
    servers.push(server);
    assert.match(server.log(), /chat template: model's chat_template\.jinja \(jinja, sha256 [0-9a-f]{12}\)/);
    const text = await promptText(server, { messages: [{ role: 'user', content: '  hi  ' }] });
    assert.equal(text, '<bos><|turn>user\nhi<turn|>\n<|turn>model\n');
    const withKwarg = await promptText(server, {
      messages: [{ role: 'user', content: 'hi' }],
      chat_template_kwargs: { persona: 'Ada' },
    });
    assert.equal(withKwarg, '<bos><|turn>system\nI am Ada.<turn|>\n<|turn>user\nhi<turn|>\n<|turn>model\n');
    // A key the template does not read is ignored (as vLLM does): the prompt is the one without it.
    const ignored = await promptText(server, {
      messages: [{ role: 'user', content: '  hi  ' }],
      chat_template_kwargs: { enable_thinking: true },
    });
    assert.equal(ignored, text);
    const chat = await server.client().chat.completions.create({ model: modelDir, messages: [{ role: 'user', content: 'x' }] });
    assert.equal(chat.choices[0].message.content, 'ok');
  });

  test('--chat-template takes the template text itself (vLLM) and a file', async () => {
    const inline = await startServer({
      modelDir: makeModelDir({ script }),
      args: ['--chat-template', '{% for m in messages %}[{{ m.role }}:{{ m.content }}]{% endfor %}'],
    });
    servers.push(inline);
    assert.match(inline.log(), /chat template: --chat-template text \(jinja, sha256 [0-9a-f]{12}\)/);
    assert.equal(await promptText(inline, { messages: [{ role: 'user', content: 'q' }] }), '[user:q]');

    const dir = makeModelDir({ script });
    const file = path.join(dir, 'custom.jinja');
    fs.writeFileSync(file, TEMPLATE);
    const fromFile = await startServer({ modelDir: dir, args: ['--chat-template', file] });
    servers.push(fromFile);
    assert.ok(fromFile.log().includes(`chat template: ${file} (jinja, sha256 `), fromFile.log());
  });

  test('a model without chat_template.jinja refuses chat requests with a 400 naming --chat-template (vLLM)', async () => {
    const server = await startServer({ modelDir: makeModelDir({ script, chatTemplate: false }) });
    servers.push(server);
    assert.match(server.log(), /no chat_template\.jinja: chat requests will be refused/);
    for (const route of ['/v1/chat/completions', '/tokenize']) {
      const r = await postJson(server.url(route), { messages: [{ role: 'user', content: 'hi' }] });
      assert.equal(r.status, 400, r.text);
      assert.match(r.json.error.message, /--chat-template/);
    }
    // Plain completions need no template.
    const done = await postJson(server.url('/v1/completions'), { prompt: 'hi', max_tokens: 4 });
    assert.equal(done.status, 200, done.text);
    // The server keeps serving, and a template given on the command line is used.
    const dir = makeModelDir({ script, chatTemplate: false });
    const withFlag = await startServer({ modelDir: dir, args: ['--chat-template', CHAT_TEMPLATE] });
    servers.push(withFlag);
    assert.equal(await promptText(withFlag, { messages: [{ role: 'user', content: 'hi' }] }),
      '<bos><|turn>user\nhi<turn|>\n<|turn>model\n');
    const kw = await runCli(['serve', dir, '--port', '0', '--load-format', `scripted:${path.join(dir, 'script.json')}`,
      '--default-chat-template-kwargs', '{"enable_thinking": true}']);
    assert.notEqual(kw.code, 0);
    assert.match(kw.stderr, /no chat_template\.jinja \(give one with --chat-template\)/);
  });

  test('an unsupported construct is a start-up error naming the line and the construct', async () => {
    const modelDir = makeModelDir({ script });
    fs.writeFileSync(path.join(modelDir, 'chat_template.jinja'), "{{ bos_token }}\n{% include 'tools.jinja' %}\n");
    const r = await runCli(['serve', modelDir, '--port', '0', '--load-format', `scripted:${path.join(modelDir, 'script.json')}`]);
    assert.notEqual(r.code, 0);
    assert.match(r.stderr, /chat template line 2: unsupported construct '\{% include %\}'/);
    const typo = await runCli(['serve', modelDir, '--port', '0', '--chat-template', '/nonexistent/template.jinja']);
    assert.notEqual(typo.code, 0);
    assert.match(typo.stderr, /looks like a file path/);
  });
});
