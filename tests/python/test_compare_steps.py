#!/usr/bin/env python3
"""bench/compare_steps.py: two builds' steps interleaved round by round (ABBA), or several against one
baseline, one table with every round's figure and the ratio of the means; against stand-in benches that
log their order, and the real dgemma_bench on the CPU backend and a tiny fixture."""
import os
import stat
import subprocess
import sys
import tempfile
import unittest

ROOT = os.environ.get("DGEMMA_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("DGEMMA_BINARY_DIR", os.path.join(ROOT, "build"))
BENCH = os.path.join(BUILD, "dgemma_bench")
MODEL = os.path.join(ROOT, "tests", "fixtures", "tiny_a", "model")
SCRIPT = os.path.join(ROOT, "bench", "compare_steps.py")
sys.path.insert(0, os.path.join(ROOT, "bench"))
import compare_steps  # noqa: E402

# A dgemma_bench stand-in: logs "NAME QUANT" to LOG (NAME:TAG given --tag TAG), prints one result line per
# --runs entry with MS ms per step (baseline 2.00, this 1.50).
FAKE = """#!/usr/bin/env python3
import sys
a = sys.argv
runs = a[a.index("--runs") + 1].split(",")
q = a[a.index("--quantization") + 1] if "--quantization" in a else "bf16"
tag = ":" + a[a.index("--tag") + 1] if "--tag" in a else ""
with open({log!r}, "a") as f:
    f.write({name!r} + tag + " " + q + "\\n")
for r in runs:
    b, s, p = r.split(":")
    print(f"batch {{b}}, prompt {{p}}, canvas 16, {{s}} steps x 1 canvas(es): prefill 1.0 ms (8000 tokens/s), "
          f"{ms} ms per denoising step ({{s}} steps), 10.0 ms total, 100 tokens/s, 5 launches per step")
"""


def executable(path, text):
    """Writes an executable script at path; returns path."""
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, os.stat(path).st_mode | stat.S_IEXEC)
    return path


def stand_in(path, log, name, ms):
    """A FAKE dgemma_bench at path that logs as `name` and reports `ms` ms per step."""
    return executable(path, FAKE.format(log=log, name=name, ms=ms))


class CompareStepsTest(unittest.TestCase):
    def test_rounds_interleave_abba_and_the_table_holds_every_round(self):
        with tempfile.TemporaryDirectory() as d:
            log = os.path.join(d, "order.txt")
            paths = {}
            for name, ms in (("base", "2.00"), ("this", "1.50")):
                paths[name] = stand_in(os.path.join(d, name), log, name, ms)
            out = subprocess.run([sys.executable, SCRIPT, "--baseline", paths["base"], "--bench", paths["this"],
                                  "--model", d, "--formats", "fp8-dynamic,bf16", "--runs", "1:8:512,4:8:512",
                                  "--rounds", "2", "--names", "d9c5b2b,now"],
                                 capture_output=True, text=True, check=True).stdout.splitlines()
            with open(log) as f:
                order = f.read().split("\n")[:-1]
        self.assertEqual(order, ["base fp8-dynamic", "this fp8-dynamic", "base bf16", "this bf16",
                                 "this fp8-dynamic", "base fp8-dynamic", "this bf16", "base bf16"])
        self.assertEqual(out, ["| format | batch | prompt | d9c5b2b, ms per step | now | now / d9c5b2b |",
                               "|---|---|---|---|---|---|",
                               "| fp8-dynamic | 1 | 512 | 2.00 / 2.00 | 1.50 / 1.50 | 0.750 |",
                               "| fp8-dynamic | 4 | 512 | 2.00 / 2.00 | 1.50 / 1.50 | 0.750 |",
                               "| bf16 | 1 | 512 | 2.00 / 2.00 | 1.50 / 1.50 | 0.750 |",
                               "| bf16 | 4 | 512 | 2.00 / 2.00 | 1.50 / 1.50 | 0.750 |"])

    def test_several_builds_against_one_baseline(self):
        with tempfile.TemporaryDirectory() as d:
            log = os.path.join(d, "order.txt")
            paths = {}
            for name, ms in (("base", "2.00"), ("a", "1.50"), ("b", "3.00")):
                os.mkdir(os.path.join(d, name))
                paths[name] = stand_in(os.path.join(d, name, "dgemma_bench"), log, name, ms)
            # One named, one named after its folder.
            out = subprocess.run([sys.executable, SCRIPT, "--baseline", paths["base"], "--bench", "fast=" + paths["a"],
                                  "--bench", paths["b"], "--model", d, "--formats", "bf16", "--runs", "1:8:512",
                                  "--rounds", "2"],
                                 capture_output=True, text=True, check=True).stdout.splitlines()
            with open(log) as f:
                order = f.read().split("\n")[:-1]
            # Two names for one baseline and two builds are refused.
            bad = subprocess.run([sys.executable, SCRIPT, "--baseline", paths["base"], "--bench", paths["a"],
                                  "--bench", paths["b"], "--model", d, "--names", "x,y"], capture_output=True, text=True)
        self.assertEqual(order, ["base bf16", "a bf16", "b bf16", "b bf16", "a bf16", "base bf16"])
        self.assertEqual(out, ["| format | batch | prompt | baseline, ms per step | fast | fast / baseline | b | b / baseline |",
                               "|---|---|---|---|---|---|---|---|",
                               "| bf16 | 1 | 512 | 2.00 / 2.00 | 1.50 / 1.50 | 0.750 | 3.00 / 3.00 | 1.500 |"])
        self.assertEqual(bad.returncode, 2, bad.stderr)

    def test_one_build_with_its_own_arguments(self):
        with tempfile.TemporaryDirectory() as d:
            log = os.path.join(d, "order.txt")
            path = stand_in(os.path.join(d, "bench"), log, "all", "2.00")
            out = subprocess.run([sys.executable, SCRIPT, "--baseline", path, "--bench", f"waves={path} --tag 'fill waves'",
                                  "--model", d, "--formats", "bf16", "--runs", "1:8:512", "--rounds", "2"],
                                 capture_output=True, text=True, check=True).stdout.splitlines()
            with open(log) as f:
                order = f.read().split("\n")[:-1]
        self.assertEqual(order, ["all bf16", "all:fill waves bf16", "all:fill waves bf16", "all bf16"])
        self.assertEqual(out[0], "| format | batch | prompt | baseline, ms per step | this build | this build / baseline |")
        self.assertEqual(out[2], "| bf16 | 1 | 512 | 2.00 / 2.00 | 2.00 / 2.00 | 1.000 |")
        self.assertEqual(compare_steps.parse_bench("x=/a/b --k 'v w'"), ("x", "/a/b", ["--k", "v w"]))
        self.assertEqual(compare_steps.parse_bench("/a/main/dgemma_bench"), ("main", "/a/main/dgemma_bench", []))

    def test_a_failing_build_is_marked_and_the_others_stand(self):
        with tempfile.TemporaryDirectory() as d:
            log = os.path.join(d, "order.txt")
            paths = {name: stand_in(os.path.join(d, name), log, name, ms) for name, ms in (("base", "2.00"), ("good", "1.50"))}
            paths["bad"] = executable(os.path.join(d, "bad"), "#!/bin/sh\necho 'an illegal memory access' >&2\nexit 1\n")
            out = subprocess.run([sys.executable, SCRIPT, "--baseline", paths["base"], "--bench", "good=" + paths["good"],
                                  "--bench", "bad=" + paths["bad"], "--model", d, "--formats", "bf16",
                                  "--runs", "1:8:512", "--rounds", "2"], capture_output=True, text=True, check=True)
        self.assertEqual(out.stdout.splitlines()[2],
                         "| bf16 | 1 | 512 | 2.00 / 2.00 | 1.50 / 1.50 | 0.750 | failed / failed | - |")
        self.assertIn("bad bf16 round 1 failed", out.stderr)
        self.assertIn("an illegal memory access", out.stderr)

    def test_a_malformed_bench_value_is_a_usage_error(self):
        for bad in ("", "x=/a/b --k 'unclosed"):
            out = subprocess.run([sys.executable, SCRIPT, "--baseline", sys.executable, "--bench", bad, "--model", "."],
                                 capture_output=True, text=True)
            self.assertEqual(out.returncode, 2, out.stderr)
            self.assertIn("--bench", out.stderr)
            self.assertNotIn("Traceback", out.stderr)

    def test_a_malformed_run_list_is_refused(self):
        for bad in ("", "1:8", "1:8:512:2", "0:8:512", "a:b:c", "1:8:512,"):
            with self.assertRaises(SystemExit):
                compare_steps.parse_runs(bad)
        self.assertEqual(compare_steps.parse_runs("1:8:512,16:5:512"), [(1, 8, 512), (16, 5, 512)])

    def test_a_missing_binary_or_model_is_a_usage_error(self):
        with tempfile.TemporaryDirectory() as d:
            for args in (["--baseline", os.path.join(d, "none"), "--bench", sys.executable, "--model", d],
                         ["--baseline", sys.executable, "--bench", sys.executable, "--model", os.path.join(d, "none")]):
                out = subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True)
                self.assertEqual(out.returncode, 2, out.stderr)
                self.assertIn("none", out.stderr)

    def test_the_real_bench_against_itself(self):
        figures = compare_steps.measure(BENCH, BENCH, MODEL, ["bf16"], [(1, 2, 8), (2, 2, 16)], rounds=2, device="cpu")
        self.assertEqual(list(figures), [("bf16", (1, 2, 8)), ("bf16", (2, 2, 16))])
        for f in figures.values():
            self.assertEqual(len(f["baseline"]), 2)
            self.assertEqual(len(f["this"]), 2)
            self.assertTrue(all(v > 0 for v in f["baseline"] + f["this"]))
        rows = compare_steps.table(figures).splitlines()
        self.assertEqual(len(rows), 4)
        self.assertTrue(rows[2].startswith("| bf16 | 1 | 8 | "), rows[2])


if __name__ == "__main__":
    unittest.main()
