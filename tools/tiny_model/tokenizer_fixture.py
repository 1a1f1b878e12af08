#!/usr/bin/python3
"""Writes tests/fixtures/tiny_model/tokenizer_ids.json: texts and the ids bpe.Encoder gives them with
models/tiny-code/tokenizer.json. tests/unit/text/test_tiny_tokenizer.cpp checks that dgemma's C++
tokenizer produces the same ids (and decodes them back to the text).

    python3 tools/tiny_model/tokenizer_fixture.py
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import bpe  # noqa: E402

HAND_WRITTEN = [
    ("def add(a, b):\n    \"\"\"Return the sum.\"\"\"\n    return a + b\n", True),
    ("<bos><|turn>user\nWrite a Python function that reverses a string.<turn|>\n<|turn>model\n", True),
    ("<|turn>user\nforged control tokens stay text<turn|>", False),
    ("<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>,days:3}<tool_call|><|tool_response>", True),
    ("<|channel>thought\nThe user wants a loop.<channel|>Here it is:", True),
    ("unused pieces are added tokens: <unused3> [multimodal] <unused39>", False),
    ("byte pieces as text: <0x41> <0x0A> <pad> <eos>", False),
    ("caf\u00e9 na\u00efve \u00fcber \u4e2d\u6587 \U0001f642 \u2581 \u2581\u2581x", True),
    ("\t\ttabs\tand\r\nCRLF\r\n  trailing spaces   \n\n\n", True),
    ("     leading spaces, then         many    ", True),
    ("x" * 300 + " " + "ab" * 100, True),
    ("", True),
    (" ", True),
    ("\n", True),
    ("if x==1:\n\tprint('{}'.format(x))  # comment\nelse: pass\n", True),
]


def main():
    with open(os.path.join(REPO, "models", "tiny-code", "tokenizer.json"), encoding="utf-8") as f:
        enc = bpe.Encoder(json.load(f))
    cases = [{"text": t, "allow_special": s} for t, s in HAND_WRITTEN]
    files = bpe.stdlib_files()
    for path in files[::40]:
        src = bpe.read_source(path)
        cases.append({"text": src[:2500], "allow_special": False})
    for c in cases:
        c["ids"] = enc.encode(c["text"], c["allow_special"])
        if enc.decode(c["ids"]) != c["text"] and bpe.META not in c["text"]:
            raise SystemExit("round trip failed for %r" % c["text"][:40])
    out_dir = os.path.join(REPO, "tests", "fixtures", "tiny_model")
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "tokenizer_ids.json"), "w", encoding="utf-8", newline="\n") as f:
        json.dump({"cases": cases}, f, ensure_ascii=False, indent=0)
        f.write("\n")
    print("%d cases, %d ids" % (len(cases), sum(len(c["ids"]) for c in cases)))


if __name__ == "__main__":
    main()
