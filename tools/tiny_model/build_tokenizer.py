#!/usr/bin/python3
"""Trains the tiny model's byte-fallback BPE tokenizer from the Python standard library sources.

    python3 tools/tiny_model/build_tokenizer.py OUT_DIR [--stdlib DIR]

Writes OUT_DIR/tokenizer.json and OUT_DIR/tokenizer_config.json (the layout is in bpe.py: Gemma 4
control tokens at their Gemma 4 ids, 256 byte pieces, then the learned pieces; 8192 ids in all).
Pure Python, no downloads; the output is byte-for-byte deterministic for a given corpus (sorted file
list, ties between equally frequent pairs broken by the pair's text). Takes about a minute.
"""
import argparse
import collections
import heapq
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bpe  # noqa: E402

MIN_CHAR_COUNT = 30  # rarer characters are left to the byte fallback


def count_chunks(files):
    counts = collections.Counter()
    for path in files:
        counts.update(bpe.chunks(bpe.normalize(bpe.read_source(path))))
    return counts


def train(counts, n_learned):
    chars = collections.Counter()
    for w, n in counts.items():
        for ch in w:
            chars[ch] += n
    alphabet = sorted((c for c, n in chars.items() if n >= MIN_CHAR_COUNT), key=lambda c: (-chars[c], c))
    if bpe.META not in alphabet or "\n" not in alphabet:
        raise SystemExit("corpus too small: no space or newline")
    in_alpha = set(alphabet)

    # Words as symbol lists; a character outside the alphabet splits the word (it becomes bytes,
    # which never merge).
    words, freqs = [], []
    for w in sorted(counts):
        part = []
        for ch in w:
            if ch in in_alpha:
                part.append(ch)
            else:
                if len(part) > 1:
                    words.append(part)
                    freqs.append(counts[w])
                part = []
        if len(part) > 1:
            words.append(part)
            freqs.append(counts[w])

    pair_count = collections.defaultdict(int)
    where = collections.defaultdict(set)
    for wi, syms in enumerate(words):
        f = freqs[wi]
        for a, b in zip(syms, syms[1:]):
            pair_count[(a, b)] += f
            where[(a, b)].add(wi)
    heap = [(-n, p) for p, n in pair_count.items()]
    heapq.heapify(heap)

    merges = []
    n_merges = n_learned - len(alphabet)
    while len(merges) < n_merges and heap:
        negn, pair = heapq.heappop(heap)
        cur = pair_count.get(pair, 0)
        if cur <= 0:
            continue
        if -negn != cur:
            heapq.heappush(heap, (-cur, pair))
            continue
        a, b = pair
        merged = a + b
        merges.append(pair)
        touched = collections.defaultdict(int)
        for wi in sorted(where.pop(pair)):
            syms = words[wi]
            f = freqs[wi]
            for x, y in zip(syms, syms[1:]):
                touched[(x, y)] -= f
            i, out = 0, []
            while i < len(syms):
                if i + 1 < len(syms) and syms[i] == a and syms[i + 1] == b:
                    out.append(merged)
                    i += 2
                else:
                    out.append(syms[i])
                    i += 1
            words[wi] = out
            for x, y in zip(out, out[1:]):
                touched[(x, y)] += f
                where[(x, y)].add(wi)
        pair_count.pop(pair, None)
        for p, d in touched.items():
            if p == pair or d == 0:
                continue
            n = pair_count.get(p, 0) + d
            if n > 0:
                pair_count[p] = n
                heapq.heappush(heap, (-n, p))
            else:
                pair_count.pop(p, None)
    return alphabet, merges


def build(files):
    counts = count_chunks(files)
    n_learned = bpe.VOCAB_SIZE - bpe.FIRST_LEARNED
    alphabet, merges = train(counts, n_learned)
    fixed = bpe.fixed_pieces()
    vocab = {p: i for i, (p, _) in sorted(fixed.items())}
    fixed_set = set(vocab)
    next_id = bpe.FIRST_LEARNED
    for ch in alphabet:
        if ch in vocab:
            raise SystemExit("alphabet character %r collides with a fixed piece" % ch)
        vocab[ch] = next_id
        next_id += 1
    for a, b in merges:
        if a + b in fixed_set:
            raise SystemExit("merge %r would produce the fixed piece %r" % ((a, b), a + b))
        if a + b not in vocab:  # the same piece can arise from two different pairs
            vocab[a + b] = next_id
            next_id += 1
    if next_id > bpe.VOCAB_SIZE:
        raise SystemExit("vocabulary overflow")
    # Pad to exactly VOCAB_SIZE with unused pieces, so the model's vocab_size is a round number.
    k = 0
    while next_id < bpe.VOCAB_SIZE:
        vocab["<unused_tail%d>" % k] = next_id
        next_id += 1
        k += 1
    added = []
    for i, (p, special) in sorted(fixed.items()):
        if i >= bpe.BYTE_BASE and i < bpe.MULTIMODAL_BASE:
            continue  # byte pieces are ordinary vocab entries
        added.append({"id": i, "content": p, "single_word": False, "lstrip": False, "rstrip": False,
                      "normalized": False, "special": special})
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": bpe.META},
        "pre_tokenizer": {"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithPrevious",
                          "invert": False},
        "post_processor": None,
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": bpe.META}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"}]},
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                  "vocab": vocab, "merges": [[a, b] for a, b in merges]},
    }


TOKENIZER_CONFIG = {
    "add_bos_token": False, "add_eos_token": False, "bos_token": "<bos>", "eos_token": "<eos>",
    "pad_token": "<pad>", "unk_token": "<unk>", "mask_token": "<mask>", "clean_up_tokenization_spaces": False,
    "spaces_between_special_tokens": False, "model_max_length": 8192, "padding_side": "left",
    "tokenizer_class": "PreTrainedTokenizerFast",
}


def write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8", newline="\n") as f:
        json.dump(obj, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir")
    ap.add_argument("--stdlib", default=bpe.STDLIB)
    args = ap.parse_args()
    files = bpe.stdlib_files(args.stdlib)
    if not files:
        raise SystemExit("no .py files under " + args.stdlib)
    tok = build(files)
    os.makedirs(args.out_dir, exist_ok=True)
    write_json(os.path.join(args.out_dir, "tokenizer.json"), tok)
    write_json(os.path.join(args.out_dir, "tokenizer_config.json"), TOKENIZER_CONFIG)
    print("%d files, %d merges -> %s" % (len(files), len(tok["model"]["merges"]), args.out_dir))


if __name__ == "__main__":
    main()
