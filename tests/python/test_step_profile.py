#!/usr/bin/env python3
"""bench/step_profile.py: reading Nsight Compute's --csv output and summing a step's kernels."""
import os
import stat
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.environ.get("DGEMMA_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "../..")), "bench"))
import step_profile  # noqa: E402

HEADER = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",'
          '"Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"')


def row(i, name, unit, value):
    return (f'"{i}","77","dgemma_bench","127.0.0.1","{name}","1","7","(256, 1, 1)","(132, 1, 1)","0","9.0",'
            f'"Command line profiler metrics","gpu__time_duration.sum","{unit}","{value}"')


class StepProfileTest(unittest.TestCase):
    def test_reads_launches_in_every_unit(self):
        text = "\n".join(["==PROF== Connected to process 77", HEADER,
                          row(0, "void grouped_gemm_kernel<32, 1>(GroupedArgs)", "usecond", "248.10"),
                          row(1, "nvjet_sm90_tst_64x64", "nsecond", "9,600"),
                          row(2, "void grouped_gemm_kernel<32, 1>(GroupedArgs)", "msecond", "0.25"),
                          row(3, "nvjet_sm90_tst_64x64", "ns", "4,800"),  # the short spelling (ncu 2025+)
                          row(4, "nvjet_sm90_tst_64x64", "us", "12.5"),
                          "==PROF== Disconnected from process 77"])
        got = step_profile.kernel_times(text)
        self.assertEqual(len(got), 5)
        self.assertAlmostEqual(got[3][1], 0.0048)
        self.assertAlmostEqual(got[4][1], 0.0125)
        self.assertAlmostEqual(got[0][1], 0.2481)
        self.assertAlmostEqual(got[1][1], 0.0096)  # thousands separator
        self.assertAlmostEqual(got[2][1], 0.25)

    def test_other_metrics_and_noise_are_ignored(self):
        other = row(0, "k", "usecond", "1").replace("gpu__time_duration.sum", "sm__throughput.avg.pct_of_peak")
        self.assertEqual(step_profile.kernel_times("\n".join(["noise", HEADER, other, '"short","row"'])), [])

    def test_unknown_unit_is_an_error(self):
        with self.assertRaises(SystemExit):
            step_profile.kernel_times("\n".join([HEADER, row(0, "k", "cycle", "5")]))

    def test_summary_sums_per_kernel_largest_first(self):
        s = step_profile.summarise([("a", 1.0), ("b", 3.0), ("a", 1.5)], top=10).splitlines()
        self.assertEqual(s[0], "one step: 3 kernels, 5.50 ms kernel time")
        self.assertIn("3.000 ms  54.5%     1x  b", s[1])
        self.assertIn("2.500 ms  45.5%     2x  a", s[2])

    def test_by_kind_tells_the_vocabulary_gemms_from_the_per_layer_ones(self):
        launches = [("void dgemma::grouped_wgmma_kernel<Cfg, 1>(Args)", 0.4), ("nvjet_sm90_tst_176x128", 0.05),
                    ("nvjet_sm90_tst_176x128", 0.05), ("nvjet_sm90_tst_320x128_TNT", 0.5),
                    ("void flash::flash_attention_kernel<256>(Params)", 0.1), ("dgemma::slice_stats_kernel<32>", 0.2),
                    ("dgemma::z_exp_table_kernel(SamplerBatch const*, uint4*)", 0.1),
                    ("dgemma::quantize_fp8_rows_kernel<4>", 0.01), ("dgemma::route_group_kernel<4>", 0.02),
                    ("residual::ffn_residual_kernel<1>", 0.03)]
        s = step_profile.summarise_by_kind(launches).splitlines()
        self.assertEqual(s[0], "by kind:")
        got = {line.split("x  ", 1)[1]: line.split(" ms")[0].strip() for line in s[1:]}
        self.assertEqual(got, {"experts": "0.400", "dense GEMMs": "0.100", "LM head + self-conditioning GEMM": "0.500",
                               "attention": "0.100", "sampler": "0.300", "FP8 activation quantisation": "0.010",
                               "routing, grouping, combine": "0.020", "small kernels": "0.030"})
        self.assertEqual([line.split("x  ", 1)[1] for line in s[1:]], list(step_profile.KINDS))

    def test_compare_lines_up_kinds_and_kernels(self):
        base = [("void dgemma::grouped_fp4_kernel<2, 8, 4, 1, 0>(Fp4Args)", 0.160),
                ("void dgemma::grouped_fp4_kernel<2, 8, 4, 1, 0>(Fp4Args)", 0.170),
                ("nvjet_sm90_tst_256x128_splitK_NNT", 0.507), ("dgemma::route_group_kernel<4, 4, 8, 0>", 0.011)]
        now = [("void dgemma::grouped_fp4_kernel<2, 8, 4, 1, 0>(Fp4Args)", 0.160),
               ("void dgemma::grouped_fp4_kernel<2, 8, 4, 1, 0>(Fp4Args)", 0.172)]
        now += [("nvjet_sm90_tss_128x128_splitK_NNT", 0.071)] * 8 + [("dgemma::sum_blocks_kernel", 0.010),
                                                                      ("dgemma::route_group_kernel<4>", 0.011)]
        s = step_profile.compare(base, now, top=3).splitlines()
        self.assertEqual(s[0], "baseline 4 kernels, 0.85 ms; this build 12 kernels, 0.92 ms (+0.073 ms)")
        self.assertEqual(s[1], "by kind (baseline -> this build):")
        # One launch of a cuBLAS kernel a step is the vocabulary GEMM's kind, eight are dense GEMMs'.
        self.assertEqual(s[2:8], ["    0.330 ->     0.332 ms (+0.002)  experts",
                                  "    0.000 ->     0.568 ms (+0.568)  dense GEMMs",
                                  "    0.507 ->     0.000 ms (-0.507)  LM head + self-conditioning GEMM",
                                  "    0.011 ->     0.011 ms (+0.000)  routing, grouping, combine",
                                  "    0.000 ->     0.010 ms (+0.010)  small kernels",
                                  "kernels whose time moved most (baseline -> this build):"])
        # Renamed kernels (the routing kernel's template arguments) show as one removed, one added.
        self.assertEqual(s[8:], [
            "  +0.568 ms     0.000 (  0x) ->    0.568 (  8x)  nvjet_sm90_tss_128x128_splitK_NNT",
            "  -0.507 ms     0.507 (  1x) ->    0.000 (  0x)  nvjet_sm90_tst_256x128_splitK_NNT",
            "  -0.011 ms     0.011 (  1x) ->    0.000 (  0x)  dgemma::route_group_kernel<4, 4, 8, 0>"])

    def test_baseline_profiles_both_builds(self):
        # A stand-in for ncu that answers for whichever dgemma_bench it is given.
        with tempfile.TemporaryDirectory() as d:
            ncu = os.path.join(d, "ncu")
            with open(ncu, "w") as f:
                f.write("#!/usr/bin/env python3\nimport sys\n"
                        f"H = {HEADER!r}\n"
                        "ms = '2.0' if 'new' in ' '.join(sys.argv) else '1.5'\n"
                        "print(H)\n"
                        "print('\"0\",\"7\",\"b\",\"h\",\"k\",\"1\",\"7\",\"(1, 1, 1)\",\"(1, 1, 1)\",\"0\",\"9.0\",'\n"
                        "      '\"s\",\"gpu__time_duration.sum\",\"msecond\",\"' + ms + '\"')\n")
            os.chmod(ncu, os.stat(ncu).st_mode | stat.S_IEXEC)
            script = os.path.join(os.path.dirname(step_profile.__file__), "step_profile.py")
            out = subprocess.run([sys.executable, script, "--ncu", ncu, "--bench", "/new/dgemma_bench", "--model", "m",
                                  "--baseline", "/old/dgemma_bench", "--", "--batch", "1"],
                                 capture_output=True, text=True, check=True).stdout
            self.assertIn("one step: 1 kernels, 2.00 ms kernel time", out)
            self.assertIn("baseline 1 kernels, 1.50 ms; this build 1 kernels, 2.00 ms (+0.500 ms)", out)
            self.assertIn("  +0.500 ms     1.500 (  1x) ->    2.000 (  1x)  k", out)


if __name__ == "__main__":
    unittest.main()
