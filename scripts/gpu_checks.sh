#!/usr/bin/env bash
# Runs every GPU check of a build (dgemma_gpu_check, scripts/device_build.sh) into OUT/checks.txt. A
# sticky CUDA error (an illegal instruction or address, a launch failure) loses the process's CUDA
# context and fails every later check of that process, so the checks after the one that hit it run
# again, each in its own process, into OUT/checks_isolated.txt. Prints a summary line per file.
# PARALLEL=N (default 1) deals the checks round-robin to N processes run side by side (their CPU
# references take most of the time: 4 processes take the 26B-shape set from over 330 s to 160 s on 16
# cores); their logs follow each other in checks.txt, the isolated reruns per process likewise. The
# memory_* checks run alone afterwards (they read the device's free memory).
# Usage: [PARALLEL=N] scripts/gpu_checks.sh BUILD OUT [--kernel-family auto|hopper|portable]
#          [--poison-allocations]
#   (BUILD/dgemma_gpu_check; the whole set runs with the checks' backend in that kernel family, auto by
#   default; scripts/gpu_suite.sh calls it for auto and portable; --poison-allocations: every CUDA
#   allocation starts as NaN bytes, so a check reading memory nothing wrote fails every time)
# Exit status: 0 when no check failed (the isolated reruns decide for the checks after a sticky error).
set -uo pipefail
usage() {
  sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
}
[ $# -ge 2 ] || usage
BIN="$1/dgemma_gpu_check" OUT="$2"
shift 2
FAMILY=()  # the run's options, passed to every process
while [ $# -gt 0 ]; do
  case "$1" in
    --kernel-family) [ $# -ge 2 ] || usage; FAMILY+=(--kernel-family "$2"); shift 2 ;;
    --poison-allocations) FAMILY+=(--poison-allocations); shift ;;
    *) usage ;;
  esac
done
N="${PARALLEL:-1}"
[ -x "$BIN" ] || { echo "gpu_checks.sh: no $BIN" >&2; exit 2; }
[[ "$N" =~ ^[1-9][0-9]*$ ]] || { echo "gpu_checks.sh: PARALLEL must be a positive integer" >&2; exit 2; }
mkdir -p "$OUT"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

# run_list LIST LOG ISOLATED: the checks named in LIST in one process into LOG; after a sticky error,
# the ones after it one process each into ISOLATED. Exit status 0 when none failed.
run_list() {
  local list="$1" log="$2" iso="$3"
  "$BIN" "${FAMILY[@]}" --only $(cat "$list") > "$log" 2>&1
  local status=$?
  local sticky
  sticky=$(grep -m1 -nE "cudaErrorIllegal|cudaErrorLaunchFailure|cudaErrorMisaligned|an illegal (instruction|memory)" \
           "$log" | cut -d: -f1)
  [ -n "$sticky" ] || return "$status"
  local first
  first=$(head -n "$sticky" "$log" | grep -E "^\[ RUN  \]" | tail -1 | awk '{print $4}')
  echo "sticky CUDA error in $first: the checks after it again, each in its own process" | tee "$iso"
  local pass=0 fail=0 name
  while read -r name; do
    if "$BIN" "${FAMILY[@]}" --only "$name" >> "$iso" 2>&1; then pass=$((pass + 1))
    else fail=$((fail + 1)); echo "[ FAIL ] $name (own process)" >> "$iso"; fi
  done < <(sed -n "/^$first\$/,\$p" "$list" | tail -n +2)
  echo "after $first: $pass passed, $fail failed (one process each)" >> "$iso"
  # The check that hit the sticky error failed (the checks before it keep their first-run verdicts).
  return 1
}

"$BIN" --list > "$WORK/all.txt" || { echo "gpu_checks.sh: $BIN --list failed" >&2; exit 2; }
# The memory_* checks read the device's free memory, which other processes on the GPU change: they run
# alone, in one process after the parallel ones (its log last in checks.txt).
grep -E '^memory_' "$WORK/all.txt" > "$WORK/alone.txt"
for ((s = 0; s < N; ++s)); do
  grep -vE '^memory_' "$WORK/all.txt" | awk -v n="$N" -v s="$s" '(NR - 1) % n == s' > "$WORK/list$s.txt"
done
pids=()
for ((s = 0; s < N; ++s)); do
  if [ -s "$WORK/list$s.txt" ]; then
    run_list "$WORK/list$s.txt" "$WORK/log$s.txt" "$WORK/iso$s.txt" &
    pids+=("$!")
  fi
done
status=0
for p in "${pids[@]}"; do wait "$p" || status=1; done
if [ -s "$WORK/alone.txt" ]; then run_list "$WORK/alone.txt" "$WORK/log_alone.txt" "$WORK/iso_alone.txt" || status=1; fi
: > "$OUT/checks.txt"
for ((s = 0; s < N; ++s)); do [ -f "$WORK/log$s.txt" ] && cat "$WORK/log$s.txt" >> "$OUT/checks.txt"; done
[ -f "$WORK/log_alone.txt" ] && cat "$WORK/log_alone.txt" >> "$OUT/checks.txt"
passed=$(grep -cE "^\[  OK  \]" "$OUT/checks.txt")
failed=$(grep -cE "^\[ FAIL" "$OUT/checks.txt")
echo "checks: $passed passed, $failed failed of $(wc -l < "$WORK/all.txt") ($N process(es)${FAMILY[*]:+, ${FAMILY[*]}})"
grep -E "^\[ FAIL" "$OUT/checks.txt" | head -20
if compgen -G "$WORK/iso*.txt" > /dev/null; then
  cat "$WORK"/iso*.txt > "$OUT/checks_isolated.txt"
  grep -E "^after |^\[ FAIL \] .*own process" "$OUT/checks_isolated.txt" | head -20
fi
exit "$status"
