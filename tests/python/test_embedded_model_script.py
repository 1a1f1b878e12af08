#!/usr/bin/env python3
"""scripts/embedded_model.sh: rewriting the model directory while a server uses it (make run beside make
test) leaves unchanged files alone and replaces changed ones by rename, so a file the server has open
keeps its content; the directory is never removed."""
import os
import shutil
import subprocess
import tempfile
import unittest

SOURCE = os.environ.get("DGEMMA_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "../.."))
SCRIPT = os.path.join(SOURCE, "scripts", "embedded_model.sh")


class EmbeddedModelScriptTest(unittest.TestCase):
    def setUp(self):
        self.build = tempfile.mkdtemp(prefix="dgemma-embedded-")
        # The dummy variant needs the build's Gemma 4 tokenizer; a stand-in is enough here.
        tok = os.path.join(self.build, "gemma4-tokenizer")
        os.makedirs(tok)
        for name in ("tokenizer.json", "tokenizer_config.json"):
            with open(os.path.join(tok, name), "w") as f:
                f.write("{}\n")
        self.out = os.path.join(self.build, "embedded-model")

    def tearDown(self):
        shutil.rmtree(self.build, ignore_errors=True)

    def run_script(self):
        subprocess.run(["bash", SCRIPT, self.build], check=True, stdout=subprocess.DEVNULL)

    def inodes(self):
        return {name: os.stat(os.path.join(self.out, name)).st_ino for name in sorted(os.listdir(self.out))}

    def test_rerun_keeps_files_a_server_holds(self):
        self.run_script()
        first = self.inodes()
        self.assertIn("config.json", first)
        directory = os.stat(self.out).st_ino
        config = os.path.join(self.out, "config.json")
        with open(config, "rb") as held:  # a running server's open file
            original = held.read()
            held.seek(0)
            self.run_script()
            self.assertEqual(self.inodes(), first, "unchanged files must not be recreated")
            self.assertEqual(os.stat(self.out).st_ino, directory)
            # A file that differs is replaced by rename: the holder still reads what it opened.
            with open(config, "ab") as f:
                f.write(b" ")
            self.run_script()
            self.assertNotEqual(os.stat(config).st_ino, first["config.json"])
            with open(config, "rb") as f:
                self.assertEqual(f.read(), original)
            self.assertEqual(held.read(), original + b" ")  # the old inode, still readable
        self.assertEqual(os.stat(self.out).st_ino, directory)

    def test_stray_files_are_removed_and_no_temporary_is_left(self):
        self.run_script()
        with open(os.path.join(self.out, "stale.bin"), "w") as f:
            f.write("x")
        self.run_script()
        self.assertNotIn("stale.bin", os.listdir(self.out))
        self.assertEqual([n for n in os.listdir(self.build) if n.startswith(".embedded-model")], [])


if __name__ == "__main__":
    unittest.main()
