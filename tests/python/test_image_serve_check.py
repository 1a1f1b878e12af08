#!/usr/bin/env python3
"""scripts/image_serve_check.sh and bench/serve_files.py: the 26B-A4B model directory denoise_step_bench.py
writes holds what `dgemma serve` needs (tokenizer covering the 262144 ids, chat template, the released
processor settings, the image token ids of the tokenizer), and the script itself passes on the CPU with the
tiny vision model (SHAPE=tiny DEVICE=cpu): an image request, the same without it, a corrupt image."""
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import unittest

SOURCE = os.environ.get("DGEMMA_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "../.."))
BINARY_DIR = os.environ.get("DGEMMA_BINARY_DIR", os.path.join(SOURCE, "build"))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ImageServeCheckTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="dgemma-image-serve-")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def test_the_26b_model_directory_has_what_serve_needs(self):
        model = os.path.join(self.tmp, "model")
        subprocess.run([sys.executable, os.path.join(SOURCE, "bench", "denoise_step_bench.py"), "--write-model", model,
                        "--with-vision"], check=True)
        for name in ("config.json", "generation_config.json", "tokenizer.json", "chat_template.jinja",
                     "processor_config.json"):
            self.assertTrue(os.path.isfile(os.path.join(model, name)), name)
        config = json.load(open(os.path.join(model, "config.json")))
        tok = json.load(open(os.path.join(model, "tokenizer.json")))
        self.assertEqual(config["text_config"]["vocab_size"], 262144)  # the 26B shape is kept
        self.assertEqual(sorted(tok["model"]["vocab"].values()), list(range(262144)))  # every id decodes
        added = {t["content"]: t["id"] for t in tok["added_tokens"]}
        self.assertEqual(config["boi_token_id"], added["<|image>"])
        self.assertEqual(config["image_token_id"], added["<|image|>"])
        self.assertEqual(config["eoi_token_id"], added["<image|>"])
        processor = json.load(open(os.path.join(model, "processor_config.json")))["image_processor"]
        self.assertEqual(processor["max_soft_tokens"], 280)
        self.assertEqual((processor["patch_size"], processor["pooling_kernel_size"]), (16, 3))

    def test_the_script_passes_on_the_cpu_with_the_tiny_vision_model(self):
        dgemma = os.path.join(BINARY_DIR, "dgemma")
        if not os.access(dgemma, os.X_OK):
            print(f"skipped: no dgemma binary at {dgemma}")
            return
        out = os.path.join(self.tmp, "out")
        env = dict(os.environ, SHAPE="tiny", DEVICE="cpu", DGEMMA=dgemma, PORT=str(free_port()), MAX_TOKENS="8")
        r = subprocess.run(["bash", os.path.join(SOURCE, "scripts", "image_serve_check.sh"), out], env=env,
                           capture_output=True, text=True, timeout=600)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        report = open(os.path.join(out, "requests.txt")).read()
        self.assertIn("with one image: HTTP 200", report)
        self.assertIn("text only: HTTP 200", report)
        self.assertIn("image tokens counted: 66 (expected 66", report)
        self.assertIn("corrupt base64: HTTP 400", report)
        self.assertTrue(report.rstrip().endswith("PASS"), report)


if __name__ == "__main__":
    unittest.main()
