"""The tiny model's tokenizer: vocabulary layout, corpus, and a reference encoder (pure Python).

Format: the Gemma 4 tokenizer.json shape (docs/ARCHITECTURE.md, src/text/tokenizer/tokenizer_load.cpp): BPE with
byte fallback, normalizer Replace " " -> "▁", no effective pre-tokenizer (the whole text between
control tokens is one BPE word), decoder Replace "▁" -> " ", ByteFallback, Fuse. Ids 0..106 are the
Gemma 4 control / unused tokens at their Gemma 4 ids (so eos 1, <turn|> 106, <|tool_response> 50 —
the ids the engine and configs use — mean the same here), then the 256 byte pieces, the multimodal
control tokens, the alphabet and the merges.

Training and encoding split the normalised text into chunks (CHUNK_RE): a run of "▁" glued to the
word or punctuation run that follows it, a bare "▁" run, or a "\\n" run. No learned piece crosses a
chunk boundary, and whether two adjacent characters form a boundary depends only on the two
characters, so BPE over the whole text (what tokenizer.json specifies and what HF and dgemma do)
gives exactly the per-chunk result this encoder computes.
"""
import os
import re

VOCAB_SIZE = 8192
META = "\u2581"

TOOL_TOKENS = {46: "<|tool>", 47: "<tool|>", 48: "<|tool_call>", 49: "<tool_call|>",
               50: "<|tool_response>", 51: "<tool_response|>", 52: '<|"|>'}
CONTROL = {0: "<pad>", 1: "<eos>", 2: "<bos>", 3: "<unk>", 4: "<mask>", 98: "<|think|>", 100: "<|channel>",
           101: "<channel|>", 105: "<|turn>", 106: "<turn|>", **TOOL_TOKENS}
BYTE_BASE = 107  # <0x00> .. <0xFF> at 107..362
MULTIMODAL = ["<|image>", "<|audio>", "<|image|>", "<|audio|>", "<image|>", "<audio|>", "<|video|>"]
MULTIMODAL_BASE = BYTE_BASE + 256  # 363..369
FIRST_LEARNED = MULTIMODAL_BASE + len(MULTIMODAL)  # 370: alphabet, then merges


def fixed_pieces():
    """id -> (piece, special) for the ids that do not come from training."""
    out = {}
    for i in range(BYTE_BASE):
        if i in CONTROL:
            out[i] = (CONTROL[i], True)
        elif i == 5:
            out[i] = ("[multimodal]", False)
        else:
            out[i] = ("<unused%d>" % (i - 6), False)
    for b in range(256):
        out[BYTE_BASE + b] = ("<0x%02X>" % b, False)
    for k, p in enumerate(MULTIMODAL):
        out[MULTIMODAL_BASE + k] = (p, True)
    return out


CHUNK_RE = re.compile("%s*\\w+|%s*[^\\w%s\\n]+|%s+|\\n+" % (META, META, META, META))


def normalize(text):
    return text.replace(" ", META)


def chunks(normalized):
    return CHUNK_RE.findall(normalized)


# ---- corpus --------------------------------------------------------------------------------------

STDLIB = "/usr/lib/python3.11"
SKIP_DIRS = {"test", "tests", "idlelib", "site-packages", "dist-packages", "encodings", "lib2to3",
             "__pycache__", "turtledemo", "config-3.11-x86_64-linux-gnu", "ensurepip"}
SKIP_FILES = {"stringprep.py"}


def stdlib_files(root=STDLIB):
    """The standard library's .py files, sorted by relative path (deterministic on any machine
    with the same Python build)."""
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
        for f in filenames:
            if f.endswith(".py") and f not in SKIP_FILES and not f.startswith("_sysconfigdata"):
                found.append(os.path.relpath(os.path.join(dirpath, f), root))
    return [os.path.join(root, p) for p in sorted(found)]


def read_source(path):
    with open(path, "rb") as f:
        data = f.read()
    return data.decode("utf-8", errors="replace").replace("\r\n", "\n")


# ---- encoder -------------------------------------------------------------------------------------

class Encoder:
    """Encodes like HF tokenizers / dgemma for this tokenizer.json (see the module docstring)."""

    def __init__(self, tokenizer_json):
        model = tokenizer_json["model"]
        self.vocab = model["vocab"]
        self.id_to_piece = {i: p for p, i in self.vocab.items()}
        self.ranks = {}
        for r, (a, b) in enumerate(model["merges"]):
            self.ranks.setdefault((a, b), r)
        self.added = {t["content"]: t["id"] for t in tokenizer_json["added_tokens"]}
        self.special_ids = {t["id"] for t in tokenizer_json["added_tokens"] if t["special"]}

        def alternation(names):
            return re.compile("|".join(re.escape(n) for n in sorted(names, key=lambda s: (-len(s), s))))

        self.all_added_re = alternation(self.added)
        # Non-special added tokens are recognised even when control tokens are not (HF behaviour).
        self.plain_added_re = alternation(n for n, i in self.added.items() if i not in self.special_ids)
        self.cache = {}

    def _bpe(self, chunk):
        hit = self.cache.get(chunk)
        if hit is not None:
            return hit
        syms = []
        for ch in chunk:
            if ch in self.vocab:
                syms.append(ch)
            else:
                syms.extend("<0x%02X>" % b for b in ch.encode("utf-8"))
        while len(syms) > 1:
            best, pos = None, -1
            for i in range(len(syms) - 1):
                r = self.ranks.get((syms[i], syms[i + 1]))
                if r is not None and (best is None or r < best):
                    best, pos = r, i
            if best is None:
                break
            syms[pos:pos + 2] = [syms[pos] + syms[pos + 1]]
        ids = [self.vocab[s] for s in syms]
        if len(self.cache) < 200000:
            self.cache[chunk] = ids
        return ids

    def _encode_segment(self, text):
        out = []
        for c in chunks(normalize(text)):
            out.extend(self._bpe(c))
        return out

    def encode(self, text, allow_special=True):
        """allow_special: control tokens written in the text are recognised (the server's /tokenize,
        dgemma's Tokenizer::encode(text, true)); otherwise only the non-special added tokens are."""
        pattern = self.all_added_re if allow_special else self.plain_added_re
        out, last = [], 0
        for m in pattern.finditer(text):
            out.extend(self._encode_segment(text[last:m.start()]))
            out.append(self.added[m.group(0)])
            last = m.end()
        out.extend(self._encode_segment(text[last:]))
        return out

    def decode(self, ids):
        data = bytearray()
        for i in ids:
            p = self.id_to_piece[i]
            if len(p) == 6 and p.startswith("<0x") and p.endswith(">"):
                data.append(int(p[3:5], 16))
            else:
                data.extend(p.replace(META, " ").encode("utf-8"))
        return data.decode("utf-8", errors="replace")
