#!/usr/bin/env python3
"""Where one denoising step's GPU time goes, kernel by kernel (Nsight Compute, on the GPU machine).

Runs `dgemma_bench ... --profile-step N` under `ncu --profile-from-start off`, so only the kernels of
the measured round's N-th denoising step are timed (every canvas of the batch denoising, no prefill in
it: dgemma_bench encodes the prompts in steps of their own), then sums gpu__time_duration per kernel.

  python3 bench/step_profile.py --bench build-device/dgemma_bench --model /tmp/m26 \
      [--step 3] [--top 40] [--csv out.csv] [--baseline other/dgemma_bench] -- --batch 4 --steps 8 --prompt-len 512

--baseline profiles the same step of a second build (another tree's dgemma_bench) with the same
arguments, then prints both trees' kernel time by kind and the kernels whose time moved most between
them (a kernel whose name changed between the trees shows as one removed and one added).

Arguments after `--` go to dgemma_bench as they are. The kernels run one at a time under the profiler
(no overlap, caches flushed between kernels by default), so the sum is close to, not equal to, the
step's wall time that dgemma_bench prints without the profiler.
"""
import argparse
import collections
import csv
import io
import subprocess
import sys

SCALE_MS = {"nsecond": 1e-6, "usecond": 1e-3, "msecond": 1.0, "second": 1e3,
            "ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}  # ncu writes either spelling


def kernel_times(text):
    """(kernel name, ms) for each profiled launch in ncu's --csv output."""
    rows = list(csv.reader(io.StringIO(text)))
    header = None
    out = []
    for r in rows:
        if "Kernel Name" in r and "Metric Value" in r:
            header = r
            continue
        if header is None or len(r) != len(header):
            continue
        d = dict(zip(header, r))
        if d.get("Metric Name") != "gpu__time_duration.sum":
            continue
        unit = d.get("Metric Unit", "nsecond")
        if unit not in SCALE_MS:
            raise SystemExit(f"step_profile: unknown time unit {unit!r} in ncu's output")
        out.append((d["Kernel Name"], float(d["Metric Value"].replace(",", "")) * SCALE_MS[unit]))
    return out


def per_kernel(launches):
    """{kernel name (cut to 120 characters): [ms, launches]} summed over the step."""
    agg = collections.defaultdict(lambda: [0.0, 0])
    for name, ms in launches:
        key = name if len(name) <= 120 else name[:117] + "..."
        agg[key][0] += ms
        agg[key][1] += 1
    return agg


def summarise(launches, top):
    agg = per_kernel(launches)
    total = sum(v[0] for v in agg.values())
    lines = [f"one step: {len(launches)} kernels, {total:.2f} ms kernel time"]
    for name, (ms, n) in sorted(agg.items(), key=lambda kv: -kv[1][0])[:top]:
        lines.append(f"{ms:9.3f} ms {100 * ms / total if total else 0:5.1f}% {n:5d}x  {name}")
    return "\n".join(lines)


# The kinds of docs/BENCHMARKS.md's step tables, in their order. A cuBLAS kernel launched once in the
# step is the LM head or the self-conditioning GEMM (the dense GEMMs run once per layer or more).
KINDS = ("experts", "dense GEMMs", "LM head + self-conditioning GEMM", "attention", "sampler",
         "FP8 activation quantisation", "routing, grouping, combine", "small kernels")


def kind_of(name, launches):
    if "grouped_" in name:
        return "experts"
    if "flash" in name or "attention" in name:
        return "attention"
    if any(k in name for k in ("slice_", "probs_kernel", "z_exp_table", "topn_partial", "hist_kernel", "floor_kernel",
                               "finalize_kernel", "decide_kernel")):
        return "sampler"
    if "quantize_fp8" in name:
        return "FP8 activation quantisation"
    if name.startswith("nvjet") or "cublasLt" in name or "cutlass" in name:
        return "LM head + self-conditioning GEMM" if launches == 1 else "dense GEMMs"
    if any(k in name for k in ("route", "place_pairs", "combine")):
        return "routing, grouping, combine"
    return "small kernels"


def per_kind(launches):
    """{kind: [ms, launches]} for every kind of KINDS, in their order."""
    per_name = collections.Counter(name for name, _ in launches)
    agg = {k: [0.0, 0] for k in KINDS}
    for name, t in launches:
        k = kind_of(name, per_name[name])
        agg[k][0] += t
        agg[k][1] += 1
    return agg


def summarise_by_kind(launches):
    lines = ["by kind:"]
    for k, (ms, n) in per_kind(launches).items():
        if n:
            lines.append(f"{ms:9.3f} ms {n:5d}x  {k}")
    return "\n".join(lines)


def compare(base, launches, top):
    """The two runs side by side: total and by kind, then the kernels (by name) whose summed time moved
    most, largest change first. base / launches: (kernel name, ms) lists of the baseline and this build."""
    tb, tn = sum(ms for _, ms in base), sum(ms for _, ms in launches)
    lines = [f"baseline {len(base)} kernels, {tb:.2f} ms; this build {len(launches)} kernels, {tn:.2f} ms "
             f"({tn - tb:+.3f} ms)", "by kind (baseline -> this build):"]
    kb, kn = per_kind(base), per_kind(launches)
    for k in KINDS:
        if kb[k][1] or kn[k][1]:
            lines.append(f"{kb[k][0]:9.3f} -> {kn[k][0]:9.3f} ms ({kn[k][0] - kb[k][0]:+.3f})  {k}")
    nb, nn = per_kernel(base), per_kernel(launches)
    rows = []
    for name in set(nb) | set(nn):
        (mb, cb), (mn, cn) = nb.get(name, (0.0, 0)), nn.get(name, (0.0, 0))
        rows.append((mn - mb, mb, cb, mn, cn, name))
    rows.sort(key=lambda r: (-abs(r[0]), r[5]))
    lines.append("kernels whose time moved most (baseline -> this build):")
    for d, mb, cb, mn, cn, name in rows[:top]:
        lines.append(f"{d:+8.3f} ms  {mb:8.3f} ({cb:3d}x) -> {mn:8.3f} ({cn:3d}x)  {name}")
    return "\n".join(lines)


def profile(ncu, bench, model, extra, step, csv_path=None):
    """(kernel name, ms) of every kernel of the step, from ncu run over dgemma_bench."""
    cmd = [ncu, "--profile-from-start", "off", "--clock-control", "none", "--metrics", "gpu__time_duration.sum",
           "--csv", bench, model, *extra, "--profile-step", str(step)]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if csv_path:
        with open(csv_path, "w") as f:
            f.write(p.stdout)
    launches = kernel_times(p.stdout)
    if p.returncode != 0 or not launches:
        sys.stderr.write(p.stderr[-3000:])
        raise SystemExit(f"step_profile: ncu exited {p.returncode} with {len(launches)} profiled kernels ({bench})")
    return launches


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", required=True, help="the dgemma_bench binary")
    ap.add_argument("--model", required=True, help="model directory (e.g. from denoise_step_bench.py --write-model)")
    ap.add_argument("--step", type=int, default=3, help="which denoising step of the measured round (>= 2)")
    ap.add_argument("--top", type=int, default=40, help="kernels listed")
    ap.add_argument("--ncu", default="ncu")
    ap.add_argument("--csv", help="also keep ncu's raw CSV here (this build's)")
    ap.add_argument("--baseline", help="another build's dgemma_bench: its step profiled too, and compared")
    ap.add_argument("bench_args", nargs=argparse.REMAINDER, help="-- then dgemma_bench's arguments")
    a = ap.parse_args()
    if a.step < 2:
        ap.error("--step must be >= 2 (the step before it identifies it as a denoising step)")
    extra = a.bench_args[1:] if a.bench_args[:1] == ["--"] else a.bench_args
    launches = profile(a.ncu, a.bench, a.model, extra, a.step, a.csv)
    print(summarise(launches, a.top))
    print(summarise_by_kind(launches))
    if a.baseline:
        print(compare(profile(a.ncu, a.baseline, a.model, extra, a.step), launches, a.top))


if __name__ == "__main__":
    main()
