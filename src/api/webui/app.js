// dgemma web page: chat over /v1/chat/completions (streamed) and the live canvas from the
// `: dgemma.preview` comment lines (docs/API.md). Answers are rendered as Markdown (markdown.js), tool
// calls can be answered with their results, and the request carries only the settings the user set
// (the rest are the server's defaults). Images pasted, dropped or picked go with the next message as
// image_url parts with data: URLs. No framework and nothing fetched but this server.
'use strict';

const $ = (id) => document.getElementById(id);
const KEY_STORE = 'dgemma.apiKey';
const state = { messages: [], abort: null, previews: 0, maxLen: {}, lastRequest: null };
document.body.dataset.previews = '0';
document.body.dataset.answers = '0';

function headers() {
  const h = { 'content-type': 'application/json' };
  const key = localStorage.getItem(KEY_STORE) || '';
  if (key) h.authorization = 'Bearer ' + key;
  return h;
}

function setStatus(text, ok) {
  $('status').textContent = text;
  $('status').className = 'status' + (ok ? ' ok' : '');
}

async function loadModels() {
  try {
    const r = await fetch('/v1/models', { headers: headers() });
    if (r.status === 401) {
      setStatus('API key required: enter it and press "save key"');
      return;
    }
    if (!r.ok) {
      setStatus('server answered ' + r.status + ' (still loading?)');
      setTimeout(loadModels, 2000);
      return;
    }
    const j = await r.json();
    const sel = $('model');
    sel.textContent = '';
    for (const m of j.data) {
      const o = document.createElement('option');
      o.value = m.id;
      o.textContent = m.id;
      sel.appendChild(o);
      if (m.max_model_len) state.maxLen[m.id] = m.max_model_len;
    }
    const len = state.maxLen[sel.value];
    if (len) $('max-tokens').max = String(len);
    setStatus('connected: ' + j.data.length + ' model(s)', true);
    document.body.dataset.ready = '1';
  } catch (e) {
    setStatus('cannot reach the server: ' + e.message);
    setTimeout(loadModels, 2000);
  }
}

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

function addMessage(role, text, images) {
  const m = el('div', 'msg ' + role);
  m.appendChild(el('div', 'role', role));
  for (const url of images || []) {
    const img = el('img', 'thumb');
    img.src = url;
    m.appendChild(img);
  }
  const content = el('div', 'content', text || '');
  m.appendChild(content);
  $('chat').appendChild(m);
  $('chat').scrollTop = $('chat').scrollHeight;
  return m;
}

// One assistant answer being streamed: reasoning, content, tool calls, the live canvas, statistics.
class Answer {
  constructor() {
    this.box = addMessage('assistant', '');
    this.content = this.box.querySelector('.content');
    this.live = el('span', 'live');
    this.reasoningBox = null;
    this.reasoning = '';
    this.text = '';
    this.tools = new Map();
    this.toolBox = el('div', 'tools');
    this.box.insertBefore(this.toolBox, this.content.nextSibling);
    this.stats = el('div', 'stats', 'waiting…');
    this.box.appendChild(this.stats);
    this.content.appendChild(this.live);
    this.start = performance.now();
    this.firstAt = 0;
    this.chunks = 0;
    this.canvasSteps = new Map();  // canvas index -> last preview step seen
    this.lastTokens = null;
    this.lastCanvas = -1;
  }

  // The answer so far as Markdown, the live canvas after it.
  renderText() {
    this.content.textContent = '';
    this.content.appendChild(DgemmaMarkdown.render(this.text));
    this.content.appendChild(this.live);
  }

  reasoningAppend(t) {
    if (!this.reasoningBox) {
      this.reasoningBox = el('details', 'reasoning');
      this.reasoningBox.open = true;
      this.reasoningBox.appendChild(el('summary', '', 'reasoning'));
      this.reasoningText = el('div', '');
      this.reasoningBox.appendChild(this.reasoningText);
      this.box.insertBefore(this.reasoningBox, this.content);
    }
    this.reasoning += t;
    this.reasoningText.textContent = this.reasoning;
  }

  toolAppend(tc) {
    let t = this.tools.get(tc.index);
    if (!t) {
      t = { id: tc.id || '', name: '', args: '', node: el('div', 'tool-call') };
      t.nameNode = el('span', 'name');
      t.argsNode = el('span', 'args');
      t.node.append('tool call ', t.nameNode, ' ', t.argsNode);
      this.toolBox.appendChild(t.node);
      this.tools.set(tc.index, t);
    }
    if (tc.id) t.id = tc.id;
    if (tc.function && tc.function.name) t.name = tc.function.name;
    if (tc.function && tc.function.arguments) t.args += tc.function.arguments;
    t.nameNode.textContent = t.name;
    t.argsNode.textContent = t.args;
  }

  onChunk(c) {
    if (c.error) {
      this.fail(c.error.message || JSON.stringify(c.error));
      return;
    }
    if (c.usage) this.usage = c.usage;
    for (const ch of c.choices || []) {
      const d = ch.delta || {};
      const hasOutput = (d.content && d.content.length) || (d.reasoning_content && d.reasoning_content.length) ||
        (d.tool_calls && d.tool_calls.length);
      if (hasOutput) {
        if (!this.firstAt) this.firstAt = performance.now();
        this.chunks++;
      }
      if (d.reasoning_content) this.reasoningAppend(d.reasoning_content);
      if (d.content) {
        this.text += d.content;
        this.renderText();
      }
      this.live.textContent = '';
      for (const tc of d.tool_calls || []) this.toolAppend(tc);
      if (ch.finish_reason) this.finish = ch.finish_reason;
    }
    this.showStats(false);
  }

  onPreview(p) {
    state.previews++;
    document.body.dataset.previews = String(state.previews);
    const prev = this.canvasSteps.get(p.canvas) || 0;
    this.canvasSteps.set(p.canvas, Math.max(prev, p.step));
    // The canvas settling in place: the argmax text of the canvas being denoised, after the committed text.
    this.live.textContent = p.text;
    drawCanvas(p, this.lastCanvas === p.canvas ? this.lastTokens : null);
    if (this.lastCanvas !== p.canvas && this.lastCanvas >= 0) archiveCanvas(this.lastCanvas, this.lastText, this.canvasSteps.get(this.lastCanvas));
    this.lastCanvas = p.canvas;
    this.lastTokens = p.tokens || null;
    this.lastText = p.text;
  }

  showStats(done) {
    const secs = (performance.now() - this.start) / 1000;
    const parts = [];
    const u = this.usage;
    if (u) {
      parts.push(u.completion_tokens + ' tokens');
      const x = u.dgemma;
      if (x) {
        parts.push(x.canvases + ' canvas' + (x.canvases === 1 ? '' : 'es'));
        parts.push(x.denoising_steps + ' steps (' + (x.canvases ? (x.denoising_steps / x.canvases).toFixed(1) : '0') + ' per canvas)');
      }
      parts.push((u.completion_tokens / Math.max(secs, 1e-3)).toFixed(1) + ' tok/s');
    } else {
      parts.push(this.chunks + ' canvas chunk' + (this.chunks === 1 ? '' : 's'));
    }
    if (this.firstAt) parts.push('first canvas ' + ((this.firstAt - this.start) / 1000).toFixed(2) + ' s');
    parts.push(secs.toFixed(2) + ' s');
    if (done && this.finish) parts.push('finish: ' + this.finish);
    this.stats.textContent = parts.join(' · ');
  }

  fail(msg) {
    this.failed = true;
    this.box.appendChild(el('div', 'error', 'error: ' + msg));
  }

  note(msg) {
    this.box.insertBefore(el('div', 'note', msg), this.stats);
  }

  // The calls' results, typed by the user, go back to the model as tool messages.
  showToolForm() {
    const form = el('form', 'tool-results');
    form.appendChild(el('div', 'hint', 'Return the results of the tool calls:'));
    const fields = [];
    for (const t of this.tools.values()) {
      const label = el('label', 'tool-result');
      label.append(el('span', 'name', t.name), ' returned ');
      const area = el('textarea');
      area.rows = 2;
      area.placeholder = 'JSON or text';
      area.dataset.call = t.id;
      label.appendChild(area);
      form.appendChild(label);
      fields.push([t, area]);
    }
    const button = el('button', '', 'send results');
    button.type = 'submit';
    form.appendChild(button);
    form.addEventListener('submit', (e) => {
      e.preventDefault();
      if (state.abort) return;
      for (const [t, area] of fields) {
        state.messages.push({ role: 'tool', tool_call_id: t.id, name: t.name, content: area.value });
        addMessage('tool', t.name + ' → ' + area.value);
      }
      form.remove();
      runTurn();
    });
    this.box.appendChild(form);
  }

  done() {
    if (this.lastCanvas >= 0) archiveCanvas(this.lastCanvas, this.lastText, this.canvasSteps.get(this.lastCanvas));
    this.live.textContent = '';
    this.showStats(true);
    this.stats.classList.add('final');
    const msg = { role: 'assistant', content: this.text };
    if (this.reasoning) msg.reasoning_content = this.reasoning;
    if (this.tools.size) {
      msg.tool_calls = [...this.tools.values()].map((t) => ({ id: t.id, type: 'function', function: { name: t.name, arguments: t.args } }));
    }
    if (msg.tool_calls && !this.text) msg.content = null;
    if (!this.failed) state.messages.push(msg);
    else if (state.messages.length && state.messages[state.messages.length - 1].role === 'user') state.messages.pop();
    if (!this.failed && this.tools.size) this.showToolForm();
    document.body.dataset.answers = String(Number(document.body.dataset.answers) + 1);
  }
}

// Draws one preview step: each position of the canvas, marked changed (vs the previous step of the same
// canvas) or stable, and — when the server reports them (the model engine) — accepted by this step or
// renoised, with its entropy (the cell's opacity falls with it; the tooltip shows it).
function drawCanvas(p, prevTokens) {
  const grid = $('canvas-grid');
  grid.textContent = '';
  const toks = p.tokens || [p.text];
  const acc = Array.isArray(p.accepted) && p.accepted.length === toks.length ? p.accepted : null;
  const ent = Array.isArray(p.entropy) && p.entropy.length === toks.length ? p.entropy : null;
  let stable = 0, accepted = 0, entropySum = 0;
  toks.forEach((t, i) => {
    const same = prevTokens && prevTokens[i] === t;
    if (same) stable++;
    let cls = 'tok ' + (same ? 'stable' : 'changed');
    if (acc) {
      cls += acc[i] ? ' accepted' : ' renoised';
      if (acc[i]) accepted++;
    }
    const s = el('span', cls, t.replace(/\n/g, '⏎') || '·');
    s.title = 'position ' + i + (ent ? ' · entropy ' + ent[i].toFixed(3) : '') + (acc ? (acc[i] ? ' · accepted' : ' · renoised') : '');
    if (ent) {
      entropySum += ent[i];
      s.style.opacity = String(Math.max(0.35, 1 - Math.min(ent[i], 6) / 9));
    }
    grid.appendChild(s);
  });
  let info = 'canvas ' + p.canvas + ' · step ' + p.step + ' · ' + stable + '/' + toks.length + ' positions unchanged';
  if (acc) info += ' · ' + accepted + '/' + toks.length + ' accepted';
  if (ent) info += ' · mean entropy ' + (entropySum / toks.length).toFixed(3);
  $('canvas-info').textContent = info;
}

function archiveCanvas(canvas, text, steps) {
  const row = el('div', 'row');
  row.append(el('b', '', 'canvas ' + canvas + ' (' + steps + ' previews): '), document.createTextNode(text || ''));
  const head = $('canvas-history').querySelector('.answer-head');
  $('canvas-history').insertBefore(row, head ? head.nextSibling : null);
}

// The request as the user set it up: only the fields they filled in are sent, so that everything else
// (thinking included) stays the server's default.
function buildRequest() {
  const system = $('system-prompt').value.trim();
  const body = {
    model: $('model').value || undefined,
    messages: [...(system ? [{ role: 'system', content: system }] : []), ...state.messages],
    stream: true,
    stream_options: { include_usage: true, include_previews: $('previews').checked },
  };
  const thinking = $('thinking').value;
  if (thinking) body.chat_template_kwargs = { enable_thinking: thinking === 'on' };
  for (const [id, key] of [['temperature', 'temperature'], ['top-p', 'top_p'], ['top-k', 'top_k'], ['min-p', 'min_p'],
    ['seed', 'seed'], ['max-steps', 'max_denoising_steps']]) {
    const v = $(id).value.trim();
    if (v !== '' && !Number.isNaN(Number(v))) body[key] = Number(v);
  }
  const tools = $('tools').value.trim();
  if (tools) body.tools = JSON.parse(tools);  // a SyntaxError is shown on the answer
  return body;
}

// max tokens, at most what the context leaves after this conversation's prompt (counted by /tokenize).
async function clampMaxTokens(body, a) {
  const field = $('max-tokens').value.trim();
  const want = Number(field);
  if (!field || !(want >= 1)) return;  // empty: the server's default, the rest of the context
  let left = state.maxLen[body.model] ? state.maxLen[body.model] - 1 : want;
  try {
    const r = await fetch('/tokenize', {
      method: 'POST', headers: headers(),
      body: JSON.stringify({ model: body.model, messages: body.messages, tools: body.tools, chat_template_kwargs: body.chat_template_kwargs }),
    });
    if (r.ok) {
      const j = await r.json();
      left = j.max_model_len - j.count;
    }
  } catch (e) {}
  body.max_tokens = left >= 1 ? Math.min(Math.floor(want), left) : Math.floor(want);
  if (body.max_tokens < want) a.note('max tokens ' + body.max_tokens + ': what the context (' + (state.maxLen[body.model] || '?') + ' tokens) leaves');
}

// Images for the next message, as data: URLs.
const pendingImages = [];

function showPendingImages() {
  const box = $('attachments');
  box.textContent = '';
  pendingImages.forEach((url, i) => {
    const img = el('img', 'thumb');
    img.src = url;
    img.title = 'click to remove';
    img.addEventListener('click', () => {
      pendingImages.splice(i, 1);
      showPendingImages();
    });
    box.appendChild(img);
  });
  document.body.dataset.pendingImages = String(pendingImages.length);
}

function addImageFile(file) {
  if (!file || !/^image\//.test(file.type)) return;
  const reader = new FileReader();
  reader.onload = () => {
    pendingImages.push(reader.result);
    showPendingImages();
  };
  reader.readAsDataURL(file);
}

async function send(text) {
  const images = pendingImages.splice(0);
  showPendingImages();
  const parts = images.map((url) => ({ type: 'image_url', image_url: { url } }));
  if (text) parts.push({ type: 'text', text });
  state.messages.push({ role: 'user', content: images.length ? parts : text });
  addMessage('user', text, images);
  await runTurn();
}

// One answer to the conversation as it stands.
async function runTurn() {
  const a = new Answer();
  state.answers = (state.answers || 0) + 1;
  const head = el('div', 'row answer-head', 'answer ' + state.answers);
  $('canvas-history').prepend(head);
  let body;
  try {
    body = buildRequest();
  } catch (e) {
    a.fail('the tools field is not JSON: ' + e.message);
    a.done();
    return;
  }
  state.abort = new AbortController();
  $('send').disabled = true;
  $('stop').disabled = false;
  try {
    await clampMaxTokens(body, a);
    state.lastRequest = body;
    const r = await fetch('/v1/chat/completions', { method: 'POST', headers: headers(), body: JSON.stringify(body), signal: state.abort.signal });
    if (!r.ok) {
      let msg = 'HTTP ' + r.status;
      try {
        msg += ': ' + (await r.json()).error.message;
      } catch (e) {}
      a.fail(msg);
    } else {
      await readStream(r, a);
    }
  } catch (e) {
    a.fail(e.name === 'AbortError' ? 'stopped' : e.message);
  }
  state.abort = null;
  a.done();
  $('send').disabled = false;
  $('stop').disabled = true;
}

async function readStream(r, a) {
  const reader = r.body.getReader();
  const dec = new TextDecoder();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    let nl;
    while ((nl = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, nl).replace(/\r$/, '');
      buf = buf.slice(nl + 1);
      if (line.startsWith(': dgemma.preview ')) a.onPreview(JSON.parse(line.slice(17)));
      else if (line.startsWith('data: ') && line !== 'data: [DONE]') a.onChunk(JSON.parse(line.slice(6)));
      $('chat').scrollTop = $('chat').scrollHeight;
    }
  }
}

$('api-key').value = localStorage.getItem(KEY_STORE) || '';
$('save-key').addEventListener('click', () => {
  localStorage.setItem(KEY_STORE, $('api-key').value.trim());
  loadModels();
});
$('composer').addEventListener('submit', (e) => {
  e.preventDefault();
  const text = $('input').value.trim();
  if ((!text && !pendingImages.length) || state.abort) return;
  $('input').value = '';
  send(text);
});
$('input').addEventListener('keydown', (e) => {
  if (e.key === 'Enter' && !e.shiftKey) {
    e.preventDefault();
    $('composer').requestSubmit();
  }
});
$('input').addEventListener('paste', (e) => {
  for (const f of e.clipboardData ? e.clipboardData.files : []) addImageFile(f);
});
document.addEventListener('dragover', (e) => e.preventDefault());
document.addEventListener('drop', (e) => {
  e.preventDefault();
  for (const f of e.dataTransfer ? e.dataTransfer.files : []) addImageFile(f);
});
$('attach').addEventListener('change', (e) => {
  for (const f of e.target.files) addImageFile(f);
  e.target.value = '';
});
$('stop').addEventListener('click', () => state.abort && state.abort.abort());
$('model').addEventListener('change', () => {
  const len = state.maxLen[$('model').value];
  if (len) $('max-tokens').max = String(len);
});
$('clear').addEventListener('click', () => {
  state.messages = [];
  $('chat').textContent = '';
  $('canvas-history').textContent = '';
  state.answers = 0;
});
loadModels();
