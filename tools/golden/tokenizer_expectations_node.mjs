// Same output as tokenizer_expectations.py, made with the npm build of HF `tokenizers` (same Rust
// core), for machines without the Python package:
//   npm install --prefix /tmp/hftok tokenizers@0.23.2
//   NODE_PATH=/tmp/hftok/node_modules node tools/golden/tokenizer_expectations_node.mjs \
//     --tokenizer PATH/tokenizer.json --corpus tests/fixtures/tokenizer/corpus.json --out OUT.json
// The node binding has no `encode_special_tokens` switch, so ids_plain come from a copy of the
// tokenizer whose special added tokens are removed from added_tokens (they stay in the vocab). That
// equals encode_special_tokens=True as long as no non-special added token can match inside or
// across a special token's text; the script checks that and refuses otherwise.
import { createRequire } from 'node:module';
import { createHash } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';

const require = createRequire(path.join(process.cwd(), 'noop.js'));
const { Tokenizer } = require('tokenizers');
const tokenizersVersion = require('tokenizers/package.json').version;

const args = {};
for (let i = 2; i < process.argv.length; i += 2) args[process.argv[i].replace(/^--/, '')] = process.argv[i + 1];
for (const k of ['tokenizer', 'corpus', 'out']) if (!args[k]) throw new Error(`missing --${k}`);

const raw = readFileSync(args.tokenizer);
const tokSha = createHash('sha256').update(raw).digest('hex');
const json = JSON.parse(raw.toString('utf8'));
const strings = JSON.parse(readFileSync(args.corpus, 'utf8')).strings;

// Guard for the ids_plain emulation: no non-special added token may start inside a special token's
// text (after its first character) or be a prefix of one.
const added = json.added_tokens;
const specials = added.filter((t) => t.special).map((t) => t.content);
const others = added.filter((t) => !t.special).map((t) => t.content);
for (const s of specials) {
  for (const o of others) {
    for (let k = 1; k < s.length; ++k) {
      const tail = s.slice(k);
      if (tail.startsWith(o) || o.startsWith(tail)) throw new Error(`emulation unsafe: ${o} overlaps ${s}`);
    }
    if (s.startsWith(o)) throw new Error(`emulation unsafe: ${o} is a prefix of ${s}`);
  }
}
const tok = Tokenizer.fromString(raw.toString('utf8'));
const plainJson = { ...json, added_tokens: added.filter((t) => !t.special) };
const plain = Tokenizer.fromString(JSON.stringify(plainJson));

const enc = async (t, s) => (await t.encode(s, null, { addSpecialTokens: false })).getIds();

function idsOf(...pieces) {
  return pieces.map((p) => {
    const id = tok.tokenToId(p);
    if (id === null || id === undefined) throw new Error(`no piece ${p}`);
    return id;
  });
}
const b = (x) => `<0x${x.toString(16).toUpperCase().padStart(2, '0')}>`;
const decodeSpecs = [
  idsOf(b(0xe4), b(0xbd), b(0xa0)),
  idsOf(b(0xe4), b(0xbd)),
  idsOf(b(0xe4), b(0xbd), 'a'),
  idsOf(b(0x80)),
  idsOf(b(0xff), b(0xfe)),
  idsOf(b(0xe4), b(0xbd), b(0xa0), b(0xff)),
  idsOf('a', b(0xf0), b(0x9f), b(0x98), b(0x80), 'b'),
  idsOf(b(0xe4), '<|turn>', b(0xbd), b(0xa0)),
  idsOf(b(0xe4), '<bos>', b(0xbd), b(0xa0), '<eos>'),
  idsOf(b(0xed), b(0xa0), b(0x80)),
  idsOf(b(0xc0), b(0xaf)),
  idsOf(b(0x41), b(0x0a), '\u2581x'),
  idsOf('\u2581\u2581', '\n', '<|channel>', 'thought', '<channel|>'),
];

const cases = [];
for (const s of strings) {
  const ids = await enc(tok, s);
  const idsPlain = await enc(plain, s);
  cases.push({
    text: s,
    ids,
    ids_plain: idsPlain,
    decoded: await tok.decode(ids, false),
    decoded_skip_special: await tok.decode(ids, true),
    decoded_plain: await tok.decode(idsPlain, false),
  });
}
const decodeCases = [];
for (const ids of decodeSpecs) {
  decodeCases.push({ ids, decoded: await tok.decode(ids, false), decoded_skip_special: await tok.decode(ids, true) });
}

const head = {
  generator: `tools/golden/tokenizer_expectations_node.mjs (tokenizers ${tokenizersVersion}, node)`,
  tokenizer_sha256: tokSha,
  vocab_size: tok.getVocabSize(true),
};
let text = '{\n';
for (const [k, v] of Object.entries(head)) text += ` ${JSON.stringify(k)}: ${JSON.stringify(v)},\n`;
text += ' "cases": [\n' + cases.map((c) => JSON.stringify(c)).join(',\n') + '\n ],\n';
text += ' "decode_cases": [\n' + decodeCases.map((c) => JSON.stringify(c)).join(',\n') + '\n ]\n}\n';
writeFileSync(args.out, text);
console.log(`wrote ${cases.length} cases + ${decodeCases.length} decode cases to ${args.out}`);
