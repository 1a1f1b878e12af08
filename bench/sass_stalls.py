#!/usr/bin/env python3
"""Where one kernel's warps wait, from Nsight Compute's per-instruction samples: the SASS of a launch
profiled with --section WarpStateStats --section SourceCounters, exported as CSV, summed by region.

  ncu --profile-from-start off --section WarpStateStats --section SourceCounters -k regex:KERNEL -c 1 \\
      -o prof dgemma_bench MODEL ... --profile-step 3
  ncu --import prof.ncu-rep --page source --csv --print-source sass > sass.csv
  python3 bench/sass_stalls.py sass.csv [--regions NAME:FIRST-LAST,...] [--top N]

Without --regions the rows are the kernel's runs of consecutive instructions executed equally often
(its straight-line blocks, as far as the counts tell them apart), largest first. --regions names
ranges of instruction indices (0 = the first SASS line, as --list prints them), e.g. the epilogue's.
Each row: the samples of the region, their share of the kernel's, and its three main stall reasons.
"""
import argparse
import csv
import io
import sys

SAMPLES = "Warp Stall Sampling (All Samples)"
EXECUTED = "Instructions Executed"


def number(text):
    try:
        return int(str(text).replace(",", ""))
    except ValueError:
        return 0


def read_sass(text):
    """(instructions, reasons): per SASS line a dict with index, source, samples, executed and the
    samples of each stall reason (the stall_* columns, not-issued ones left out)."""
    rows = list(csv.reader(io.StringIO(text)))
    head = next((i for i, r in enumerate(rows) if SAMPLES in r and "Source" in r), None)
    if head is None:
        raise SystemExit(f"sass_stalls: no '{SAMPLES}' column: export with --page source --csv --print-source sass "
                         "from a report with the SourceCounters section")
    names = rows[head]
    col = {n: i for i, n in enumerate(names)}
    reasons = [n for n in names if n.startswith("stall_") and "Not Issued" not in n]
    out = []
    for r in rows[head + 1:]:
        if len(r) < len(names):
            continue
        out.append({"index": len(out), "source": r[col["Source"]].strip(), "samples": number(r[col[SAMPLES]]),
                    "executed": number(r[col[EXECUTED]]) if EXECUTED in col else 0,
                    "reasons": {n: number(r[col[n]]) for n in reasons}})
    return out, reasons


def blocks(instructions):
    """Runs of consecutive instructions with the same execution count: [(name, first, last)]."""
    runs, first = [], 0
    for i in range(1, len(instructions) + 1):
        if i == len(instructions) or instructions[i]["executed"] != instructions[first]["executed"]:
            runs.append((f"{first}-{i - 1} x{instructions[first]['executed']}", first, i - 1))
            first = i
    return runs


def parse_regions(spec, count):
    regions = []
    for part in spec.split(","):
        name, _, span = part.rpartition(":")
        lo, _, hi = span.partition("-")
        if not name or not lo.isdigit() or not hi.isdigit() or int(lo) > int(hi) or int(hi) >= count:
            raise SystemExit(f"sass_stalls: --regions takes NAME:FIRST-LAST,... within 0-{count - 1}, not {part!r}")
        regions.append((name, int(lo), int(hi)))
    return regions


def summarise(instructions, reasons, regions):
    """[(name, samples, share, [(reason, samples)] top 3, first source line)], and the total."""
    total = sum(i["samples"] for i in instructions)
    rows = []
    for name, lo, hi in regions:
        part = instructions[lo:hi + 1]
        s = sum(i["samples"] for i in part)
        by = sorted(((n, sum(i["reasons"][n] for i in part)) for n in reasons), key=lambda x: -x[1])
        rows.append((name, s, s / total if total else 0.0, [b for b in by[:3] if b[1] > 0], part[0]["source"]))
    return rows, total


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv", help="ncu --page source --csv --print-source sass output")
    ap.add_argument("--regions", help="NAME:FIRST-LAST,... instruction index ranges")
    ap.add_argument("--top", type=int, default=15, help="rows printed without --regions")
    ap.add_argument("--list", action="store_true", help="print every instruction with its index and samples")
    a = ap.parse_args(argv)
    try:
        with open(a.csv, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError as e:
        raise SystemExit(f"sass_stalls: cannot read {a.csv}: {e.strerror}")
    instructions, reasons = read_sass(text)
    if not instructions:
        raise SystemExit("sass_stalls: no instructions in the file")
    if a.list:
        for i in instructions:
            print(f"{i['index']:6d} {i['samples']:6d} {i['executed']:10d}  {i['source']}")
        return 0
    regions = parse_regions(a.regions, len(instructions)) if a.regions else blocks(instructions)
    rows, total = summarise(instructions, reasons, regions)
    if not a.regions:
        rows = sorted(rows, key=lambda r: -r[1])[:a.top]
    print(f"{total} samples over {len(instructions)} instructions")
    for name, s, share, top, first in rows:
        why = ", ".join(f"{n[len('stall_'):]} {v}" for n, v in top)
        print(f"{name:28s} {s:7d} {100 * share:5.1f} %  {why:44s} {first[:48]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
