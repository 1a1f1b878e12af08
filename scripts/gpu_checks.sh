#!/usr/bin/env bash
# Runs every GPU check of a build (dgemma_gpu_check, scripts/device_build.sh) into OUT/checks.txt. A
# sticky CUDA error (an illegal instruction or address, a launch failure) loses the process's CUDA
# context and fails every later check of that process, so the checks after the one that hit it run
# again, each in its own process, into OUT/checks_isolated.txt. Prints a summary line per file.
# Usage: scripts/gpu_checks.sh BUILD OUT   (BUILD/dgemma_gpu_check; scripts/gpu_suite.sh calls it)
# Exit status: 0 when no check failed (the isolated reruns decide for the checks after a sticky error).
set -uo pipefail
[ $# -eq 2 ] || { sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
BIN="$1/dgemma_gpu_check" OUT="$2"
[ -x "$BIN" ] || { echo "gpu_checks.sh: no $BIN" >&2; exit 2; }
mkdir -p "$OUT"
"$BIN" > "$OUT/checks.txt" 2>&1
status=$?
echo "checks: $(tail -1 "$OUT/checks.txt")"
grep -E "^\[ FAIL" "$OUT/checks.txt" | head -20
sticky=$(grep -m1 -nE "cudaErrorIllegal|cudaErrorLaunchFailure|cudaErrorMisaligned|an illegal (instruction|memory)" \
         "$OUT/checks.txt" | cut -d: -f1)
[ -n "$sticky" ] || exit "$status"
first=$(head -n "$sticky" "$OUT/checks.txt" | grep -E "^\[ RUN  \]" | tail -1 | awk '{print $4}')
echo "sticky CUDA error in $first: the checks after it again, each in its own process (checks_isolated.txt)"
: > "$OUT/checks_isolated.txt"
pass=0 fail=0
while read -r name; do
  if "$BIN" --only "$name" >> "$OUT/checks_isolated.txt" 2>&1; then pass=$((pass + 1))
  else fail=$((fail + 1)); echo "[ FAIL ] $name (own process)" >> "$OUT/checks_isolated.txt"; fi
done < <("$BIN" --list | sed -n "/^$first\$/,\$p" | tail -n +2)
echo "after $first: $pass passed, $fail failed (one process each)" >> "$OUT/checks_isolated.txt"
tail -1 "$OUT/checks_isolated.txt"
grep -E "^\[ FAIL \] .*own process" "$OUT/checks_isolated.txt" | head -20
# The check that hit the sticky error failed (the checks before it keep their first-run verdicts).
exit 1
