#!/usr/bin/env python3
"""bench/denoise_step_bench.py's dgemma side against the real dgemma_bench on the CPU backend and a tiny
fixture model: several runs on one set of weights (--runs), one parsed result per run, in order; a
malformed run list is refused."""
import os
import subprocess
import sys
import unittest

ROOT = os.environ.get("DGEMMA_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("DGEMMA_BINARY_DIR", os.path.join(ROOT, "build"))
BENCH = os.path.join(BUILD, "dgemma_bench")
MODEL = os.path.join(ROOT, "tests", "fixtures", "tiny_a", "model")
sys.path.insert(0, os.path.join(ROOT, "bench"))
import denoise_step_bench  # noqa: E402


class DenoiseStepBenchTest(unittest.TestCase):
    def test_several_runs_share_one_load_and_parse_in_order(self):
        runs = [(1, 2, 8), (2, 3, 16)]
        results = denoise_step_bench.run_dgemma(BENCH, MODEL, runs, device="cpu")
        self.assertEqual(len(results), 2)
        for r in results:
            self.assertGreater(r["ms_per_step"], 0.0)
            self.assertGreater(r["total_ms"], r["ms_per_step"])
        out = subprocess.run([BENCH, MODEL, "--device", "cpu", "--runs", "1:2:8,2:3:16"], capture_output=True, text=True)
        self.assertEqual(out.returncode, 0, out.stderr)
        lines = out.stdout.strip().splitlines()
        self.assertEqual(len(lines), 2)
        self.assertTrue(lines[0].startswith("batch 1, prompt 8,"), lines[0])
        self.assertIn("2 steps x 1 canvas(es)", lines[0])
        self.assertTrue(lines[1].startswith("batch 2, prompt 16,"), lines[1])
        self.assertIn("(3 steps)", lines[1])
        self.assertEqual(out.stderr.count("dummy weights in"), 1)  # one set of weights for both runs

    def test_a_malformed_run_list_is_refused(self):
        for bad in ("", "1", "1:0", "0:4", "1:4:8:2", "1:4,", "a:b", "1:4x"):
            out = subprocess.run([BENCH, MODEL, "--device", "cpu", "--runs", bad], capture_output=True, text=True)
            self.assertEqual(out.returncode, 2, f"{bad!r}: {out.stdout}{out.stderr}")
            self.assertIn("--runs", out.stderr)

    def test_a_single_run_needs_positive_numbers(self):
        for flag in ("--batch", "--steps", "--prompt-len"):
            out = subprocess.run([BENCH, MODEL, "--device", "cpu", flag, "0"], capture_output=True, text=True)
            self.assertEqual(out.returncode, 2, f"{flag}: {out.stdout}{out.stderr}")
            self.assertIn("positive integers", out.stderr)


if __name__ == "__main__":
    unittest.main()
