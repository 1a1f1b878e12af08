#!/usr/bin/env python3
"""Expected token ids for the tokenizer corpus, from Hugging Face `tokenizers` (the reference).

Usage:
  python3 tools/golden/tokenizer_expectations.py --tokenizer PATH/tokenizer.json \
      --corpus tests/fixtures/tokenizer/corpus.json --out tests/fixtures/tokenizer/expected.json

PATH is the Gemma 4 tokenizer made by scripts/make_gemma4_tokenizer.py. Needs only `tokenizers`
(0.2x). For each corpus string it records:
  ids           encode(s, add_special_tokens=False)             -> Tokenizer::encode(s, true)
  ids_plain     same with encode_special_tokens=True             -> Tokenizer::encode(s, false)
                (special tokens written in the text stay text)
  decoded       decode(ids, skip_special_tokens=False)
  decoded_skip_special, decoded_plain   decode(ids, True), decode(ids_plain, False)
plus "decode_cases": hand-picked id sequences (byte-fallback runs that are or are not valid UTF-8,
runs cut by special tokens) with their HF decodes. tools/golden/tokenizer_expectations_node.mjs
writes the same file with the npm build of the same library.
"""
import argparse
import hashlib
import json
import sys

from tokenizers import Tokenizer, __version__ as tokenizers_version


def decode_case_specs(tok):
    """Id sequences for decode-only checks, built from piece names so they suit any Gemma vocab."""

    def ids(*pieces):
        out = []
        for p in pieces:
            i = tok.token_to_id(p)
            if i is None:
                sys.exit("tokenizer has no piece %r" % p)
            out.append(i)
        return out

    b = lambda x: "<0x%02X>" % x  # noqa: E731
    return [
        ids(b(0xE4), b(0xBD), b(0xA0)),                      # valid 3-byte run: 你
        ids(b(0xE4), b(0xBD)),                               # truncated run at the end
        ids(b(0xE4), b(0xBD), "a"),                          # truncated run, then text
        ids(b(0x80)),                                        # lone continuation byte
        ids(b(0xFF), b(0xFE)),                               # never-valid bytes
        ids(b(0xE4), b(0xBD), b(0xA0), b(0xFF)),             # valid char + bad byte in one run
        ids("a", b(0xF0), b(0x9F), b(0x98), b(0x80), "b"),   # 😀 between text
        ids(b(0xE4), "<|turn>", b(0xBD), b(0xA0)),           # run cut by a special token
        ids(b(0xE4), "<bos>", b(0xBD), b(0xA0), "<eos>"),
        ids(b(0xED), b(0xA0), b(0x80)),                      # UTF-8 encoded surrogate: invalid
        ids(b(0xC0), b(0xAF)),                               # overlong '/'
        ids(b(0x41), b(0x0A), "\u2581x"),                    # ASCII bytes
        ids("\u2581\u2581", "\n", "<|channel>", "thought", "<channel|>"),
    ]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    with open(args.tokenizer, "rb") as f:
        tok_sha = hashlib.sha256(f.read()).hexdigest()
    with open(args.corpus, encoding="utf-8") as f:
        strings = json.load(f)["strings"]

    tok = Tokenizer.from_file(args.tokenizer)
    plain = Tokenizer.from_file(args.tokenizer)
    plain.encode_special_tokens = True

    cases = []
    for s in strings:
        ids = tok.encode(s, add_special_tokens=False).ids
        ids_plain = plain.encode(s, add_special_tokens=False).ids
        cases.append({
            "text": s,
            "ids": ids,
            "ids_plain": ids_plain,
            "decoded": tok.decode(ids, skip_special_tokens=False),
            "decoded_skip_special": tok.decode(ids, skip_special_tokens=True),
            "decoded_plain": tok.decode(ids_plain, skip_special_tokens=False),
        })
    decode_cases = []
    for ids in decode_case_specs(tok):
        decode_cases.append({
            "ids": ids,
            "decoded": tok.decode(ids, skip_special_tokens=False),
            "decoded_skip_special": tok.decode(ids, skip_special_tokens=True),
        })

    out = {
        "generator": "tools/golden/tokenizer_expectations.py (tokenizers %s, python)" % tokenizers_version,
        "tokenizer_sha256": tok_sha,
        "vocab_size": tok.get_vocab_size(with_added_tokens=True),
        "cases": cases,
        "decode_cases": decode_cases,
    }
    with open(args.out, "w", encoding="utf-8", newline="\n") as f:
        f.write("{\n")
        for key in ("generator", "tokenizer_sha256", "vocab_size"):
            f.write(" %s: %s,\n" % (json.dumps(key), json.dumps(out[key], ensure_ascii=False)))
        for key in ("cases", "decode_cases"):
            f.write(' "%s": [\n' % key)
            rows = [json.dumps(c, ensure_ascii=False, separators=(",", ":")) for c in out[key]]
            f.write(",\n".join(rows))
            f.write("\n ]%s\n" % ("," if key == "cases" else ""))
        f.write("}\n")
    print("wrote %d cases + %d decode cases to %s" % (len(cases), len(decode_cases), args.out))


if __name__ == "__main__":
    main()
