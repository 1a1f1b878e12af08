#!/usr/bin/env python3
"""scripts/gpu_checks.sh against a stand-in dgemma_gpu_check: after a sticky CUDA error the checks that
followed it run again one process each, with their own verdicts; without one, a single run decides."""
import os
import subprocess
import tempfile
import textwrap
import unittest

ROOT = os.environ.get("DGEMMA_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
SCRIPT = os.path.join(ROOT, "scripts", "gpu_checks.sh")

# The stand-in: checks a .. d; `sticky` makes b hit an illegal instruction in a run of several checks,
# after which the rest of that run fails too (the lost context); on their own, c passes and d fails.
FAKE = textwrap.dedent("""\
    #!/usr/bin/env python3
    import os, sys
    names = ["a", "b", "c", "d"]
    sticky = os.environ.get("FAKE_STICKY") == "1"
    args = sys.argv[1:]
    if args == ["--list"]:
        print("\\n".join(names)); sys.exit(0)
    if args[:1] == ["--only"]:
        run = args[1:]
    else:
        run = names
    passed = failed = 0
    lost = False
    for n in run:
        print(f"[ RUN  ] {n}")
        bad = lost or (n == "d" and len(run) == 1)
        if sticky and n == "b" and len(run) > 1:
            print("  FAIL: exception: CUDA error 715 (cudaErrorIllegalInstruction: an illegal instruction was encountered)")
            lost = bad = True
        if bad:
            failed += 1; print(f"[ FAIL ] {n} (1 failure(s), 1 ms)")
        else:
            passed += 1; print(f"[  OK  ] {n} (1 ms)")
    print(f"{passed} passed, {failed} failed")
    sys.exit(0 if failed == 0 and passed > 0 else 1)
    """)


class GpuChecksScriptTest(unittest.TestCase):
    def run_script(self, sticky, parallel=1):
        build = tempfile.mkdtemp()
        out = tempfile.mkdtemp()
        fake = os.path.join(build, "dgemma_gpu_check")
        with open(fake, "w") as f:
            f.write(FAKE)
        os.chmod(fake, 0o755)
        env = dict(os.environ, FAKE_STICKY="1" if sticky else "0", PARALLEL=str(parallel))
        p = subprocess.run(["bash", SCRIPT, build, out], capture_output=True, text=True, env=env)
        return p, out

    def test_after_a_sticky_error_the_rest_run_one_process_each(self):
        p, out = self.run_script(sticky=True)
        self.assertEqual(p.returncode, 1)
        self.assertIn("sticky CUDA error in b", p.stdout)
        with open(os.path.join(out, "checks_isolated.txt")) as f:
            iso = f.read()
        self.assertIn("after b: 1 passed, 1 failed (one process each)", iso)
        self.assertIn("[ FAIL ] d (own process)", iso)
        self.assertNotIn("[ RUN  ] a", iso)  # the checks before the sticky one are not run again
        self.assertNotIn("[ RUN  ] b", iso)

    def test_without_a_sticky_error_one_run_decides(self):
        p, out = self.run_script(sticky=False)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("checks: 4 passed, 0 failed", p.stdout)
        self.assertFalse(os.path.exists(os.path.join(out, "checks_isolated.txt")))

    def test_parallel_processes_share_the_checks_and_keep_the_sticky_rule(self):
        # PARALLEL=2 deals a, c to one process and b, d to the other: b's sticky error takes d with it,
        # and d alone fails again; a and c pass in their own process.
        p, out = self.run_script(sticky=True, parallel=2)
        self.assertEqual(p.returncode, 1)
        self.assertIn("checks: 2 passed, 2 failed of 4 (2 process(es))", p.stdout)
        with open(os.path.join(out, "checks_isolated.txt")) as f:
            iso = f.read()
        self.assertIn("after b: 0 passed, 1 failed (one process each)", iso)
        self.assertNotIn("[ RUN  ] c", iso)
        with open(os.path.join(out, "checks.txt")) as f:
            log = f.read()
        for name in "abcd":
            self.assertIn(f"[ RUN  ] {name}", log)

    def test_parallel_without_a_sticky_error(self):
        p, out = self.run_script(sticky=False, parallel=3)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("checks: 4 passed, 0 failed of 4 (3 process(es))", p.stdout)
        self.assertFalse(os.path.exists(os.path.join(out, "checks_isolated.txt")))


if __name__ == "__main__":
    unittest.main()
