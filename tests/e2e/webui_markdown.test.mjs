// The web page's Markdown renderer (src/api/webui/markdown.js) on its own: the tree it parses, and that
// nothing in it can become HTML (rendered into a stub document that records what is created).
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import vm from 'node:vm';
import { test } from 'node:test';

const SRC = process.env.DGEMMA_SOURCE_DIR;
const context = {};
vm.createContext(context);
vm.runInContext(fs.readFileSync(path.join(SRC, 'src/api/webui/markdown.js'), 'utf8') + '\nthis.M = DgemmaMarkdown;', context);
const { parse, render } = context.M;
const plain = (x) => JSON.parse(JSON.stringify(x));
const text = (v) => ({ t: 'text', v });

test('blocks: headings, paragraphs with line breaks, rules, quotes, fenced code (closed or still open)', () => {
  assert.deepEqual(plain(parse('# One\n\nfirst line\nsecond line\n\n---\n> quoted\n\n```py\nx = 1\n```\n```\nopen')), [
    { t: 'h', level: 1, c: [text('One')] },
    { t: 'p', c: [text('first line'), { t: 'br' }, text('second line')] },
    { t: 'hr' },
    { t: 'quote', c: [{ t: 'p', c: [text('quoted')] }] },
    { t: 'code', lang: 'py', v: 'x = 1' },
    { t: 'code', lang: '', v: 'open' },
  ]);
});

test('lists: bullets, numbers with their start, nesting by indentation', () => {
  assert.deepEqual(plain(parse('- a\n- b\n  - b1\n\n3. x\n4. y')), [
    { t: 'ul', start: 1, c: [
      { t: 'li', c: [{ t: 'p', c: [text('a')] }] },
      { t: 'li', c: [{ t: 'p', c: [text('b')] }, { t: 'ul', start: 1, c: [{ t: 'li', c: [{ t: 'p', c: [text('b1')] }] }] }] },
    ] },
    { t: 'ol', start: 3, c: [{ t: 'li', c: [{ t: 'p', c: [text('x')] }] }, { t: 'li', c: [{ t: 'p', c: [text('y')] }] }] },
  ]);
});

test('inline: emphasis, strike, code spans, escapes, snake_case, safe links only', () => {
  assert.deepEqual(plain(parse('**b** *i* ~~s~~ `c*d` \\*x\\* snake_case_name')[0].c), [
    { t: 'strong', c: [text('b')] }, text(' '), { t: 'em', c: [text('i')] }, text(' '), { t: 'del', c: [text('s')] }, text(' '),
    { t: 'codespan', v: 'c*d' }, text(' *x* snake_case_name'),
  ]);
  assert.deepEqual(plain(parse('[a](https://x.org/p) [b](javascript:alert(1)) see https://y.org.')[0].c), [
    { t: 'a', href: 'https://x.org/p', c: [text('a')] }, text(' '), text('b'), text(' see '),
    { t: 'a', href: 'https://y.org', c: [text('https://y.org')] }, text('.'),
  ]);
});

test('tables with alignment', () => {
  assert.deepEqual(plain(parse('| a | b |\n|:--|--:|\n| 1 | 2 |')), [
    { t: 'table', align: ['', 'right'], head: [[text('a')], [text('b')]], rows: [[[text('1')], [text('2')]]] },
  ]);
});

// A stub document: records every element created; text only ever goes in through text nodes.
function stubDocument() {
  const created = [];
  const node = (tag) => {
    const n = { tag, children: [], dataset: {}, style: {}, appendChild(c) { this.children.push(c); return c; } };
    Object.defineProperty(n, 'innerHTML', { set() { throw new Error('innerHTML used'); } });
    return n;
  };
  return {
    created,
    createElement(tag) {
      created.push(tag);
      return node(tag);
    },
    createTextNode(v) {
      return { tag: '#text', v };
    },
    createDocumentFragment() {
      return node('#fragment');
    },
  };
}

test('HTML in the text stays text: no element but the Markdown ones, whatever the input', () => {
  const doc = stubDocument();
  const evil = '<script>alert(1)</script><img src=x onerror=alert(2)> <a href="javascript:x">y</a> [z](data:text/html,<b>)\n' +
    '# <b>head</b>\n- <iframe src=//x>\n\n```html\n<script>boom()</script>\n```\n| <svg onload=x> | b |\n|---|---|\n| <b>c</b> | d |';
  render(evil, doc);
  const allowed = new Set(['p', 'br', 'h1', 'ul', 'li', 'pre', 'code', 'table', 'thead', 'tbody', 'tr', 'th', 'td']);
  for (const tag of doc.created) assert.ok(allowed.has(tag), `created <${tag}>`);
  assert.ok(!doc.created.includes('a'), 'no link from javascript: or data: URLs');
});
