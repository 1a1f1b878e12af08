#!/usr/bin/env python3
"""The files `dgemma serve` needs next to a config for dummy weights (--load-format dummy): tokenizer.json and
chat_template.jinja (default: models/tiny-code's, which the repository carries, so this works on a machine
with nothing but the checkout), and with a vision tower a processor_config.json. The config's image token
ids (boi, image, eoi) become the tokenizer's `<|image>`, `<|image|>`, `<image|>`. The vocabularies are made
to agree: the model's covers the tokenizer's (every prompt is valid), and a tokenizer smaller than the
model (tiny-code's 8192 against the 26B's 262144) gets plain tokens `<idN>` for the ids it lacks, so every
id a model with random weights outputs decodes.

  python3 bench/serve_files.py DIR [--config FILE] [--tokenizer FILE] [--chat-template FILE]
                               [--max-soft-tokens N]

DIR/config.json is read (or first copied from --config) and rewritten; generation_config.json is copied
from beside --config when DIR has none. bench/denoise_step_bench.py --write-model calls add_serve_files.
"""
import argparse, json, os, shutil

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY_CODE = os.path.join(ROOT, "models", "tiny-code")
IMAGE_TOKENS = {"boi_token_id": "<|image>", "image_token_id": "<|image|>", "eoi_token_id": "<image|>"}


def image_processor(max_soft_tokens):
    """The released Gemma 4 image processor's settings (uint8 bicubic resize with antialiasing, rescale to
    [0, 1], no normalisation), with the given soft-token budget."""
    return {"image_processor": {
        "image_processor_type": "Gemma4ImageProcessor", "do_convert_rgb": True, "do_resize": True, "resample": 3,
        "do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": False, "image_mean": [0.0, 0.0, 0.0],
        "image_std": [1.0, 1.0, 1.0], "patch_size": 16, "pooling_kernel_size": 3,
        "max_soft_tokens": max_soft_tokens, "image_seq_length": max_soft_tokens},
        "processor_class": "Gemma4Processor"}


def add_serve_files(model_dir, tokenizer=None, chat_template=None, max_soft_tokens=280):
    tokenizer = tokenizer or os.path.join(TINY_CODE, "tokenizer.json")
    chat_template = chat_template or os.path.join(TINY_CODE, "chat_template.jinja")
    shutil.copyfile(chat_template, os.path.join(model_dir, "chat_template.jinja"))
    tok = json.load(open(tokenizer))
    ids = {t["content"]: t["id"] for t in tok.get("added_tokens", [])}
    vocab = tok["model"]["vocab"]
    size = max([max(vocab.values()) + 1] + [i + 1 for i in ids.values()])
    path = os.path.join(model_dir, "config.json")
    config = json.load(open(path))
    text = config.get("text_config", config)
    text["vocab_size"] = max(text.get("vocab_size", 0), size)
    if text["vocab_size"] > size:
        for i in range(size, text["vocab_size"]):
            name = f"<id{i}>"
            if name in vocab or name in ids:
                raise SystemExit(f"serve_files.py: {tokenizer} already has a token {name}")
            vocab[name] = i
        json.dump(tok, open(os.path.join(model_dir, "tokenizer.json"), "w"), ensure_ascii=False)
    else:
        shutil.copyfile(tokenizer, os.path.join(model_dir, "tokenizer.json"))
    if "vision_config" in config:
        for key, token in IMAGE_TOKENS.items():
            if token not in ids:
                raise SystemExit(f"serve_files.py: {tokenizer} has no {token} token")
            config[key] = ids[token]
        json.dump(image_processor(max_soft_tokens), open(os.path.join(model_dir, "processor_config.json"), "w"), indent=1)
    json.dump(config, open(path, "w"))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir")
    ap.add_argument("--config", help="a config.json to start from (default: DIR's)")
    ap.add_argument("--tokenizer")
    ap.add_argument("--chat-template")
    ap.add_argument("--max-soft-tokens", type=int, default=280)
    a = ap.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    if a.config:
        shutil.copyfile(a.config, os.path.join(a.dir, "config.json"))
        gen = os.path.join(os.path.dirname(a.config), "generation_config.json")
        if os.path.exists(gen) and not os.path.exists(os.path.join(a.dir, "generation_config.json")):
            shutil.copyfile(gen, os.path.join(a.dir, "generation_config.json"))
    add_serve_files(a.dir, a.tokenizer, a.chat_template, a.max_soft_tokens)


if __name__ == "__main__":
    main()
