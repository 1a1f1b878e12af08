// The tiny model's own tokenizer (models/tiny-code/tokenizer.json) behind the real server with the
// scripted runner: the chat template, the gemma4 tool-call and reasoning parsers and /tokenize work
// unchanged, because the Gemma 4 control tokens keep their ids and pieces.
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startServer, postJson } from './helpers.mjs';

const TINY = path.join(process.env.DGEMMA_SOURCE_DIR, 'models', 'tiny-code');

describe('tiny-code tokenizer with the chat template and parsers', () => {
  let server, client, dir;
  before(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'dgemma-tiny-tok-'));
    for (const f of ['config.json', 'generation_config.json', 'tokenizer.json', 'tokenizer_config.json', 'chat_template.jinja'])
      fs.copyFileSync(path.join(TINY, f), path.join(dir, f));
    fs.writeFileSync(path.join(dir, 'script.json'), JSON.stringify({
      canvas_length: 64, steps: 3, canvas_delay_ms: 0, filler: [' x'],
      replies: [
        { when: 'weather', canvases: ['<|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:3}<tool_call|><|tool_response>'] },
        { when: 'think', canvases: ['<|channel>thought\nThe user wants code.<channel|>```python\ndef f(x):\n    return x\n```<turn|>'] },
      ],
    }));
    server = await startServer({
      modelDir: dir,
      args: ['--served-model-name', 'tiny', '--enable-auto-tool-choice', '--tool-call-parser', 'gemma4', '--reasoning-parser', 'gemma4'],
    });
    client = server.client();
  });
  after(async () => {
    if (server) await server.stop();
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

  test('the prompt carries the control tokens at their Gemma 4 ids', async () => {
    const r = await postJson(server.url('/tokenize'), { messages: [{ role: 'user', content: 'hi' }], return_token_strs: true });
    const body = r.json;
    assert.equal(r.status, 200);
    assert.deepEqual(body.tokens.slice(0, 2), [2, 105]); // <bos> <|turn>
    assert.ok(body.tokens.includes(106)); // <turn|>
    assert.equal(body.token_strs.join('').replaceAll('\u2581', ' '), '<bos><|turn>user\nhi<turn|>\n<|turn>model\n');
  });

  test('a tool call in the model output is parsed into tool_calls', async () => {
    const r = await client.chat.completions.create({
      model: 'tiny',
      messages: [{ role: 'user', content: 'weather in Paris?' }],
      tools: [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' }, days: { type: 'integer' } } } } }],
    });
    assert.equal(r.choices[0].finish_reason, 'tool_calls');
    const [call] = r.choices[0].message.tool_calls;
    assert.equal(call.function.name, 'get_weather');
    assert.deepEqual(JSON.parse(call.function.arguments), { city: 'Paris', days: 3 });
  });

  test('a thought channel is split off by the reasoning parser', async () => {
    const r = await client.chat.completions.create({
      model: 'tiny',
      messages: [{ role: 'user', content: 'think about it' }],
      chat_template_kwargs: { enable_thinking: true },
    });
    assert.equal(r.choices[0].message.reasoning_content, 'The user wants code.');
    assert.equal(r.choices[0].message.content, '```python\ndef f(x):\n    return x\n```');
    assert.equal(r.choices[0].finish_reason, 'stop');
  });
});
