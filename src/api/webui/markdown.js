// A small Markdown renderer for the answers on the web page: headings, paragraphs, emphasis, strike,
// inline code, fenced code blocks, block quotes, lists (nested by indentation), tables, rules and links.
// It builds DOM nodes and sets text only through text nodes, never through HTML parsing, so whatever
// the model writes (tags, scripts, event attributes) shows as text. Links keep http(s) and mailto URLs
// only. parse() gives the tree (plain objects), render() the DOM fragment.
'use strict';

const DgemmaMarkdown = (() => {
  const FENCE = /^ {0,3}(`{3,}|~{3,})\s*([^`\s]*)[^`]*$/;
  const HEADING = /^ {0,3}(#{1,6})(?:\s+(.*?))?\s*#*\s*$/;
  const RULE = /^ {0,3}([-*_])(?:\s*\1){2,}\s*$/;
  const QUOTE = /^ {0,3}> ?(.*)$/;
  const BULLET = /^( {0,3})([-*+])\s+(.*)$/;
  const ORDERED = /^( {0,3})(\d{1,9})[.)]\s+(.*)$/;
  const TABLE_SEP = /^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$/;

  const isBlank = (l) => /^\s*$/.test(l);
  const splitRow = (l) => {
    let s = l.trim();
    if (s.startsWith('|')) s = s.slice(1);
    if (s.endsWith('|') && !s.endsWith('\\|')) s = s.slice(0, -1);
    const cells = [];
    let cur = '';
    for (let i = 0; i < s.length; i++) {
      if (s[i] === '\\' && s[i + 1] === '|') {
        cur += '|';
        i++;
      } else if (s[i] === '|') {
        cells.push(cur.trim());
        cur = '';
      } else {
        cur += s[i];
      }
    }
    cells.push(cur.trim());
    return cells;
  };

  // Starts a block other than a paragraph (so a paragraph stops before it).
  const startsBlock = (l) => FENCE.test(l) || HEADING.test(l) || RULE.test(l) || QUOTE.test(l) || BULLET.test(l) || ORDERED.test(l);

  function parseBlocks(lines) {
    const out = [];
    let i = 0;
    while (i < lines.length) {
      const line = lines[i];
      if (isBlank(line)) {
        i++;
        continue;
      }
      let m;
      if ((m = line.match(FENCE))) {
        const fence = m[1];
        const body = [];
        i++;
        while (i < lines.length && !(lines[i].trim().startsWith(fence[0].repeat(fence.length)) && lines[i].trim().replace(/[`~]/g, '') === '')) {
          body.push(lines[i]);
          i++;
        }
        i++;  // the closing fence (an unclosed one runs to the end: a stream still writing it)
        out.push({ t: 'code', lang: m[2] || '', v: body.join('\n') });
        continue;
      }
      if ((m = line.match(HEADING))) {
        out.push({ t: 'h', level: m[1].length, c: parseInline(m[2] || '') });
        i++;
        continue;
      }
      if (RULE.test(line)) {
        out.push({ t: 'hr' });
        i++;
        continue;
      }
      if (QUOTE.test(line)) {
        const body = [];
        while (i < lines.length && QUOTE.test(lines[i])) body.push(lines[i++].match(QUOTE)[1]);
        out.push({ t: 'quote', c: parseBlocks(body) });
        continue;
      }
      if (BULLET.test(line) || ORDERED.test(line)) {
        const ordered = ORDERED.test(line);
        const re = ordered ? ORDERED : BULLET;
        const list = { t: ordered ? 'ol' : 'ul', start: ordered ? Number(line.match(ORDERED)[2]) : 1, c: [] };
        while (i < lines.length) {
          const im = lines[i].match(re);
          if (!im) break;
          const indent = im[1].length + (ordered ? im[2].length + 2 : 2);
          const item = [im[3]];
          i++;
          // The item's further lines: indented ones (nested blocks), blank lines followed by indented
          // ones, and lazy continuations of its paragraph.
          while (i < lines.length) {
            const l = lines[i];
            if (isBlank(l)) {
              if (i + 1 < lines.length && /^\s{2,}\S/.test(lines[i + 1])) {
                item.push('');
                i++;
                continue;
              }
              break;
            }
            if (/^\s{2,}\S/.test(l)) {
              item.push(l.slice(Math.min(indent, l.length - l.trimStart().length)));
              i++;
              continue;
            }
            if (startsBlock(l)) break;
            item.push(l);
            i++;
          }
          list.c.push({ t: 'li', c: parseBlocks(item) });
          while (i < lines.length && isBlank(lines[i]) && i + 1 < lines.length && re.test(lines[i + 1])) i++;
        }
        out.push(list);
        continue;
      }
      if (line.includes('|') && i + 1 < lines.length && TABLE_SEP.test(lines[i + 1]) && lines[i + 1].includes('-')) {
        const head = splitRow(line);
        const align = splitRow(lines[i + 1]).map((c) => (c.startsWith(':') && c.endsWith(':') ? 'center' : c.endsWith(':') ? 'right' : ''));
        const rows = [];
        i += 2;
        while (i < lines.length && !isBlank(lines[i]) && lines[i].includes('|')) rows.push(splitRow(lines[i++]));
        out.push({
          t: 'table',
          align,
          head: head.map((c) => parseInline(c)),
          rows: rows.map((r) => head.map((_, k) => parseInline(r[k] || ''))),
        });
        continue;
      }
      const para = [];
      while (i < lines.length && !isBlank(lines[i]) && (para.length === 0 || !startsBlock(lines[i]))) para.push(lines[i++].trim());
      const c = [];
      para.forEach((p, k) => {
        if (k) c.push({ t: 'br' });
        c.push(...parseInline(p));
      });
      out.push({ t: 'p', c });
    }
    return out;
  }

  const SAFE_URL = /^(https?:\/\/|mailto:)/i;

  function parseInline(s) {
    const out = [];
    let text = '';
    const flush = () => {
      if (text) out.push({ t: 'text', v: text });
      text = '';
    };
    let i = 0;
    while (i < s.length) {
      const ch = s[i];
      if (ch === '\\' && i + 1 < s.length && /[\\`*_{}\[\]()#+\-.!|~<>]/.test(s[i + 1])) {
        text += s[i + 1];
        i += 2;
        continue;
      }
      if (ch === '`') {
        let n = 1;
        while (s[i + n] === '`') n++;
        const ticks = '`'.repeat(n);
        const end = s.indexOf(ticks, i + n);
        if (end > 0) {
          flush();
          out.push({ t: 'codespan', v: s.slice(i + n, end).replace(/^ (.*) $/, '$1') });
          i = end + n;
          continue;
        }
      }
      if (ch === '[') {
        // [text](url "title"); the URL may hold balanced parentheses.
        const m = s.slice(i).match(/^\[([^\]]*)\]\(\s*<?((?:[^\s()<>]|\([^\s()<>]*\))*)>?(?:\s+"[^"]*")?\s*\)/);
        if (m) {
          flush();
          const href = m[2];
          out.push(SAFE_URL.test(href) ? { t: 'a', href, c: parseInline(m[1]) } : { t: 'text', v: m[1] });
          i += m[0].length;
          continue;
        }
      }
      if (ch === 'h' && /^https?:\/\//.test(s.slice(i)) && (i === 0 || /[\s(]/.test(s[i - 1]))) {
        const m = s.slice(i).match(/^https?:\/\/[^\s<>()]+[^\s<>().,;:!?'"]/);
        if (m) {
          flush();
          out.push({ t: 'a', href: m[0], c: [{ t: 'text', v: m[0] }] });
          i += m[0].length;
          continue;
        }
      }
      const marks = [['**', 'strong'], ['__', 'strong'], ['~~', 'del'], ['*', 'em'], ['_', 'em']];
      let matched = false;
      for (const [mark, type] of marks) {
        if (!s.startsWith(mark, i)) continue;
        const after = s[i + mark.length];
        if (!after || /\s/.test(after)) continue;
        if (mark[0] === '_' && i > 0 && /\w/.test(s[i - 1])) continue;  // snake_case stays text
        // The closing mark: after some text, not after a space, and (for a single mark) not part of a double.
        let end = i + mark.length;
        for (;;) {
          end = s.indexOf(mark, end);
          if (end < 0) break;
          const single = mark.length === 1 && (s[end + 1] === mark || s[end - 1] === mark);
          if (end > i + mark.length && !/\s/.test(s[end - 1]) && !single) break;
          end += 1;
        }
        if (end < 0) continue;
        if (mark[0] === '_' && /\w/.test(s[end + mark.length] || '')) continue;
        flush();
        out.push({ t: type, c: parseInline(s.slice(i + mark.length, end)) });
        i = end + mark.length;
        matched = true;
        break;
      }
      if (matched) continue;
      text += ch;
      i++;
    }
    flush();
    return out;
  }

  function parse(markdown) {
    return parseBlocks(String(markdown).replace(/\r\n?/g, '\n').split('\n'));
  }

  const TAGS = { p: 'p', strong: 'strong', em: 'em', del: 'del', quote: 'blockquote', ul: 'ul', ol: 'ol', li: 'li' };

  function renderNode(n, doc) {
    const kids = (el) => {
      for (const k of n.c || []) el.appendChild(renderNode(k, doc));
      return el;
    };
    switch (n.t) {
      case 'text':
        return doc.createTextNode(n.v);
      case 'br':
        return doc.createElement('br');
      case 'hr':
        return doc.createElement('hr');
      case 'h':
        return kids(doc.createElement('h' + n.level));
      case 'codespan': {
        const e = doc.createElement('code');
        e.textContent = n.v;
        return e;
      }
      case 'code': {
        const pre = doc.createElement('pre');
        const code = doc.createElement('code');
        if (n.lang) {
          code.className = 'lang-' + n.lang.replace(/[^\w+-]/g, '');
          pre.dataset.lang = n.lang;
        }
        code.textContent = n.v;
        pre.appendChild(code);
        return pre;
      }
      case 'a': {
        const a = doc.createElement('a');
        a.href = n.href;
        a.target = '_blank';
        a.rel = 'noopener noreferrer';
        return kids(a);
      }
      case 'ol': {
        const e = kids(doc.createElement('ol'));
        if (n.start !== 1) e.start = n.start;
        return e;
      }
      case 'table': {
        const table = doc.createElement('table');
        const row = (cells, tag) => {
          const tr = doc.createElement('tr');
          cells.forEach((c, k) => {
            const td = doc.createElement(tag);
            if (n.align[k]) td.style.textAlign = n.align[k];
            for (const x of c) td.appendChild(renderNode(x, doc));
            tr.appendChild(td);
          });
          return tr;
        };
        const thead = doc.createElement('thead');
        thead.appendChild(row(n.head, 'th'));
        table.appendChild(thead);
        const tbody = doc.createElement('tbody');
        for (const r of n.rows) tbody.appendChild(row(r, 'td'));
        table.appendChild(tbody);
        return table;
      }
      default:
        return kids(doc.createElement(TAGS[n.t] || 'div'));
    }
  }

  function render(markdown, doc = document) {
    const frag = doc.createDocumentFragment();
    for (const n of parse(markdown)) frag.appendChild(renderNode(n, doc));
    return frag;
  }

  return { parse, render };
})();
