#!/usr/bin/env python3
"""Two builds' denoising steps side by side, in one process tree on one GPU: dgemma_bench of a baseline
build (another tree's) and of this one, on one set of dummy weights per format, their runs interleaved
format by format and round by round (ABBA: the baseline first in odd rounds, last in even ones), then
one table of ms per step with each round's figure and the ratio of the means.

  python3 bench/denoise_step_bench.py --write-model /tmp/m
  python3 bench/compare_steps.py --baseline base/dgemma_bench --bench build-device/dgemma_bench \\
      --model /tmp/m [--formats fp8-dynamic,nvfp4-modelopt,bf16] [--runs 1:8:512,4:8:512,16:5:512] [--rounds 2]

Figures of one call only are compared (docs/BENCHMARKS.md): run nothing else on the GPU meanwhile.
"""
import argparse
import contextlib
import io
import os
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
    """{(format, run): {"baseline": [ms per round], "this": [...]}}, the builds' processes interleaved."""
    figures = {(f, r): {"baseline": [], "this": []} for f in formats for r in runs}
    for rnd in range(rounds):
        for fmt in formats:
            order = [("baseline", baseline), ("this", bench)]
            if rnd % 2:
                order.reverse()
            for side, binary in order:
                with contextlib.redirect_stdout(io.StringIO()):
                    results = run_dgemma(binary, model, runs, quantization=None if fmt == "bf16" else fmt,
                                         device=device)
                for run, res in zip(runs, results):
                    figures[(fmt, run)][side].append(res["ms_per_step"])
    return figures


def table(figures, names=("baseline", "this build")):
    lines = [f"| format | batch | prompt | {names[0]}, ms per step | {names[1]} | {names[1]} / {names[0]} |",
             "|---|---|---|---|---|---|"]
    for (fmt, (batch, _, prompt)), f in figures.items():
        b, t = f["baseline"], f["this"]
        ratio = (sum(t) / len(t)) / (sum(b) / len(b))
        lines.append(f"| {fmt} | {batch} | {prompt} | {' / '.join(f'{v:.2f}' for v in b)} | "
                     f"{' / '.join(f'{v:.2f}' for v in t)} | {ratio:.3f} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline", required=True, help="the baseline build's dgemma_bench")
    ap.add_argument("--bench", required=True, help="this build's dgemma_bench")
    ap.add_argument("--model", required=True, help="model directory (denoise_step_bench.py --write-model)")
    ap.add_argument("--formats", default="fp8-dynamic,nvfp4-modelopt,bf16",
                    help="comma-separated: bf16 and dgemma_bench's --quantization values")
    ap.add_argument("--runs", default="1:8:512,4:8:512,16:5:512", help="BATCH:STEPS:PROMPT_LEN,...")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--names", default="baseline,this build", help="the two columns' names, comma-separated")
    ap.add_argument("--device", default="cuda")
    a = ap.parse_args()
    names = a.names.split(",")
    if a.rounds < 1 or len(names) != 2:
        ap.error("--rounds takes a positive integer and --names two names")
    for binary in (a.baseline, a.bench):
        if not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
            ap.error(f"{binary}: not an executable dgemma_bench")
    if not os.path.isdir(a.model):
        ap.error(f"--model {a.model}: not a directory (denoise_step_bench.py --write-model writes one)")
    formats = [f for f in a.formats.split(",") if f]
    print(table(measure(a.baseline, a.bench, a.model, formats, parse_runs(a.runs), a.rounds, a.device), names))


if __name__ == "__main__":
    main()
