#!/usr/bin/env python3
"""bench/sass_stalls.py: reading Nsight Compute's SASS export and summing its stall samples by region."""
import contextlib
import io
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.environ.get("DGEMMA_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "../..")), "bench"))
import sass_stalls  # noqa: E402

# The export's shape: a kernel-name line, then the header, then a row per SASS instruction (the
# not-issued columns are left out of the reasons).
HEAD = ('"Address","Source","Warp Stall Sampling (All Samples)","Warp Stall Sampling (Not-issued Samples)",'
        '"# Samples","Instructions Executed","stall_lg","stall_long_sb","stall_wait","stall_lg (Not Issued)"')


def row(src, samples, executed, lg, long_sb, wait):
    return f'"0x0","{src}","{samples}","0","{samples}","{executed}","{lg}","{long_sb}","{wait}","{lg}"'


TEXT = "\n".join(['"Kernel Name","void k(Params)",', HEAD,
                  row("LDC R1, c[0x0][0x28]", 4, 128, 0, 3, 1),
                  row("IADD3 R2, R1, 0x1, RZ", 2, 128, 0, 0, 2),
                  row("STG.E [R2], R3", 30, 64, 25, 0, 5),
                  row("STG.E [R2+0x4], R4", 10, 64, 8, 2, 0),
                  row("EXIT", 0, 128, 0, 0, 0),
                  row("SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR5]", "1,954", "349,367", 0, 1950, 4)])


class SassStallsTest(unittest.TestCase):
    def test_reads_instructions_and_reasons(self):
        ins, reasons = sass_stalls.read_sass(TEXT)
        self.assertEqual(len(ins), 6)
        self.assertEqual(reasons, ["stall_lg", "stall_long_sb", "stall_wait"])
        self.assertEqual(ins[2]["source"], "STG.E [R2], R3")
        self.assertEqual(ins[5]["samples"], 1954)  # thousands separators
        self.assertEqual(ins[5]["executed"], 349367)

    def test_blocks_are_runs_of_equal_counts(self):
        ins, _ = sass_stalls.read_sass(TEXT)
        self.assertEqual([(lo, hi) for _, lo, hi in sass_stalls.blocks(ins)], [(0, 1), (2, 3), (4, 4), (5, 5)])

    def test_regions_sum_samples_and_rank_reasons(self):
        ins, reasons = sass_stalls.read_sass(TEXT)
        rows, total = sass_stalls.summarise(ins, reasons, [("epilogue", 2, 3), ("rest", 0, 1)])
        self.assertEqual(total, 2000)
        name, samples, share, top, first = rows[0]
        self.assertEqual((name, samples, first), ("epilogue", 40, "STG.E [R2], R3"))
        self.assertAlmostEqual(share, 0.02)
        self.assertEqual(top, [("stall_lg", 33), ("stall_wait", 5), ("stall_long_sb", 2)])
        self.assertEqual(rows[1][3], [("stall_long_sb", 3), ("stall_wait", 3)])  # reasons without samples left out

    def test_command_line(self):
        with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False) as f:
            f.write(TEXT)
        try:
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                self.assertEqual(sass_stalls.main([f.name, "--regions", "wait:5-5,stores:2-3"]), 0)
            lines = out.getvalue().splitlines()
            self.assertEqual(lines[0], "2000 samples over 6 instructions")
            self.assertTrue(lines[1].startswith("wait") and "97.7 %" in lines[1] and "long_sb 1950" in lines[1])
            with contextlib.redirect_stdout(io.StringIO()), self.assertRaises(SystemExit):
                sass_stalls.main([f.name, "--regions", "bad:3-9"])  # past the last instruction
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                sass_stalls.main([f.name, "--top", "1"])
            self.assertIn("5-5 x349367", out.getvalue())
        finally:
            os.unlink(f.name)

    def test_an_export_without_samples_is_refused(self):
        with self.assertRaises(SystemExit):
            sass_stalls.read_sass('"Address","Source"\n"0x0","EXIT"')

    def test_a_missing_file_is_named(self):
        with self.assertRaises(SystemExit) as e:
            sass_stalls.main(["/nonexistent/sass.csv"])
        self.assertIn("cannot read /nonexistent/sass.csv", str(e.exception))


if __name__ == "__main__":
    unittest.main()
