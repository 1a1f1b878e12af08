#!/usr/bin/env python3
"""Builds' denoising steps side by side, in one process tree on one GPU: dgemma_bench of a baseline build
(another tree's) and of one or more others, on one set of dummy weights per format, their runs
interleaved format by format and round by round (the baseline first and the others in the order given
in odd rounds, the reverse in even ones: ABBA for two builds), then one table of ms per step with each
round's figure and each build's ratio of the means to the baseline's. A build whose process fails (or
times out) is reported on stderr and shown as "failed" in its rounds; the others' figures stand.

  python3 bench/denoise_step_bench.py --write-model /tmp/m
  python3 bench/compare_steps.py --baseline base/dgemma_bench --bench build-device/dgemma_bench \\
      --model /tmp/m [--formats fp8-dynamic,nvfp4-modelopt,bf16] [--runs 1:8:512,4:8:512,16:5:512] [--rounds 2]
  python3 bench/compare_steps.py --baseline main/dgemma_bench --bench flash=flash/dgemma_bench \\
      --bench pdl=pdl/dgemma_bench --model /tmp/m          (several builds against one baseline)
  python3 bench/compare_steps.py --baseline all/dgemma_bench \\
      --bench 'waves=all/dgemma_bench --dense-gemm fill-waves' --model /tmp/m   (one build, two choices)

Figures of one call only are compared (docs/BENCHMARKS.md): run nothing else on the GPU meanwhile.
"""
import argparse
import contextlib
import io
import math
import os
import shlex
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from denoise_step_bench import run_dgemma  # noqa: E402


def parse_runs(spec):
    runs = []
    for part in spec.split(","):
        fields = part.split(":")
        if len(fields) != 3 or not all(f.isdigit() and int(f) > 0 for f in fields):
            raise SystemExit(f"compare_steps: --runs takes BATCH:STEPS:PROMPT_LEN,... (positive integers), "
                             f"not {spec!r}")
        runs.append(tuple(int(f) for f in fields))
    return runs


def measure(baseline, bench, model, formats, runs, rounds, device="cuda"):
    """{(format, run): {side: [ms per round]}}, the builds' processes interleaved. bench: one dgemma_bench
    (side "this") or a list of (name, dgemma_bench, [its own arguments]) (sides by name); the baseline's side
    is "baseline"."""
    builds = [("this", bench, [])] if isinstance(bench, str) else list(bench)
    sides = [("baseline", baseline, [])] + builds
    figures = {(f, r): {name: [] for name, _, _ in sides} for f in formats for r in runs}
    for rnd in range(rounds):
        for fmt in formats:
            order = sides if rnd % 2 == 0 else sides[::-1]
            for side, binary, extra in order:
                try:
                    with contextlib.redirect_stdout(io.StringIO()):
                        results = run_dgemma(binary, model, runs, quantization=None if fmt == "bf16" else fmt,
                                             device=device, extra_args=extra)
                    step_ms = [res["ms_per_step"] for res in results]
                except (RuntimeError, subprocess.TimeoutExpired) as e:  # one build's failure, not the table's
                    print(f"compare_steps: {side} {fmt} round {rnd + 1} failed: {str(e)[-1500:]}", file=sys.stderr,
                          flush=True)
                    step_ms = [math.nan] * len(runs)
                for run, ms in zip(runs, step_ms):
                    figures[(fmt, run)][side].append(ms)
    return figures


def table(figures, names=("baseline", "this build")):
    """names: the baseline's title, then one per other side (in the figures' order)."""
    first = next(iter(figures.values()))
    others = [side for side in first if side != "baseline"]
    if len(names) != 1 + len(others):
        raise ValueError(f"table: {len(names)} names for {1 + len(others)} builds")
    head = f"| format | batch | prompt | {names[0]}, ms per step |"
    rule = "|---|---|---|---|"
    for name in names[1:]:
        head += f" {name} | {name} / {names[0]} |"
        rule += "---|---|"
    lines = [head, rule]

    def rounds(values):
        return " / ".join("failed" if math.isnan(v) else f"{v:.2f}" for v in values)

    for (fmt, (batch, _, prompt)), f in figures.items():
        b = f["baseline"]
        row = f"| {fmt} | {batch} | {prompt} | {rounds(b)} |"
        for side in others:
            t = f[side]
            ratio = (sum(t) / len(t)) / (sum(b) / len(b))  # NaN when a round of either failed
            row += f" {rounds(t)} | {'-' if math.isnan(ratio) else f'{ratio:.3f}'} |"
        lines.append(row)
    return "\n".join(lines)


def parse_bench(spec):
    """NAME=PATH or PATH (named after its folder), then that build's own dgemma_bench arguments, shell-quoted
    -> (name, path, [arguments]); ValueError for an empty value or unbalanced quotes."""
    words = shlex.split(spec)
    if not words:
        raise ValueError("empty")
    head, extra = words[0], words[1:]
    name, sep, path = head.partition("=")
    if not sep:
        path = head
        name = os.path.basename(os.path.dirname(os.path.abspath(head))) or head
    return name, path, extra


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline", required=True, help="the baseline build's dgemma_bench")
    ap.add_argument("--bench", required=True, action="append",
                    help="another build's dgemma_bench, as PATH or NAME=PATH, then its own dgemma_bench arguments "
                    "in the same (quoted) value; repeat for several builds")
    ap.add_argument("--model", required=True, help="model directory (denoise_step_bench.py --write-model)")
    ap.add_argument("--formats", default="fp8-dynamic,nvfp4-modelopt,bf16",
                    help="comma-separated: bf16 and dgemma_bench's --quantization values")
    ap.add_argument("--runs", default="1:8:512,4:8:512,16:5:512", help="BATCH:STEPS:PROMPT_LEN,...")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--names", help="the columns' names, comma-separated: the baseline's, then one per --bench "
                    "(default: 'baseline,this build' for one --bench, else 'baseline' and the NAMEs)")
    ap.add_argument("--device", default="cuda")
    a = ap.parse_args()
    builds = []
    for b in a.bench:
        try:
            builds.append(parse_bench(b))
        except ValueError as e:
            ap.error(f"--bench {b!r}: {e} (PATH or NAME=PATH, then its own dgemma_bench arguments)")
    if a.names:
        names = a.names.split(",")
    else:
        names = ["baseline", "this build"] if len(builds) == 1 else ["baseline"] + [n for n, _, _ in builds]
    if a.rounds < 1 or len(names) != 1 + len(builds):
        ap.error(f"--rounds takes a positive integer and --names {1 + len(builds)} names")
    if len({n for n, _, _ in builds}) != len(builds) or "baseline" in {n for n, _, _ in builds}:
        ap.error("every --bench needs its own name, other than 'baseline'")
    for binary in [a.baseline] + [p for _, p, _ in builds]:
        if not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
            ap.error(f"{binary}: not an executable dgemma_bench")
    if not os.path.isdir(a.model):
        ap.error(f"--model {a.model}: not a directory (denoise_step_bench.py --write-model writes one)")
    formats = [f for f in a.formats.split(",") if f]
    print(table(measure(a.baseline, builds, a.model, formats, parse_runs(a.runs), a.rounds, a.device), names))


if __name__ == "__main__":
    main()
