#!/usr/bin/env bash
# The batch-1 step's levers on one GPU in one command: builds the GPU binaries (scripts/device_build.sh),
# runs the weight-streaming experts' checks (expert_stream_*), the PDL step checks (pdl_step_*) with the
# graphs checks, and the quantised MoE / dense / W8A8 checks (dgemma_gpu_check, three processes side by
# side), the expert GEMM benchmark (dgemma_gpu_check --bench experts), then dgemma_bench on the 26B-A4B
# dummy shape (bench/denoise_step_bench.py --write-model) at batch 1, 4 and 16 for fp8-dynamic,
# nvfp4-modelopt and bf16: (a) every choice automatic, (b) --experts grouped, (c) --pdl on (PDL is off
# in auto until this A/B decides; bf16 only (a): its experts take the grouped kernels at every size).
# Each check set prints one PASS / FAIL line; the last lines are the A/B table (ms per step, launches
# per step). Bench rows that would run past the time budget (BUDGET_S, default 450 s from the start)
# are listed as skipped.
# Usage: scripts/perf_ab.sh OUT   (from the repository root, on the GPU machine; JOBS=16 for the build)
# OUT gets build.log, checks.txt, bench_experts.txt, bench.txt, table.txt and logs.tgz (the rest).
set -uo pipefail
[ $# -eq 1 ] || { sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
OUT="$1"
mkdir -p "$OUT/more"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
START=$SECONDS
BUDGET_S="${BUDGET_S:-450}"
BUILD=build-device
STEPS="${STEPS:-10}"
PROMPT="${PROMPT:-128}"

elapsed() { echo $((SECONDS - START)); }

echo "== build (scripts/device_build.sh $BUILD, JOBS=${JOBS:-16})"
if JOBS="${JOBS:-16}" scripts/device_build.sh "$BUILD" > "$OUT/build.log" 2>&1; then
  echo "PASS build ($(elapsed) s)"
else
  echo "FAIL build: see $OUT/build.log"
  tail -20 "$OUT/build.log"
  exit 1
fi
CHECK="$BUILD/dgemma_gpu_check" BENCH="$BUILD/dgemma_bench"

# One check set: the checks whose names contain any of the substrings, in one process.
check_set() {
  local name="$1"
  shift
  if "$CHECK" "$@" > "$OUT/more/checks_$name.txt" 2>&1; then
    echo "PASS checks $name: $(tail -1 "$OUT/more/checks_$name.txt")"
  else
    echo "FAIL checks $name: $(tail -1 "$OUT/more/checks_$name.txt"):" \
      "$(grep -E '^\[ FAIL \]' "$OUT/more/checks_$name.txt" | awk '{print $4}' | tr '\n' ' ')"
  fi
}
echo "== GPU checks"
check_set expert_stream expert_stream_ > "$OUT/more/status_expert_stream" &
check_set step pdl_step graphs_vs_eager > "$OUT/more/status_step" &
check_set quant fp4_moe fp8_moe fp8_w8a8_moe quant_ dense_ w8a8_quantize w8a8_dense w8a8_refused > "$OUT/more/status_quant" &
wait
cat "$OUT"/more/status_expert_stream "$OUT"/more/status_step "$OUT"/more/status_quant
cat "$OUT"/more/checks_expert_stream.txt "$OUT"/more/checks_step.txt "$OUT"/more/checks_quant.txt > "$OUT/checks.txt"
echo "(checks done at $(elapsed) s)"

echo "== dgemma_gpu_check --bench experts"
if "$CHECK" --bench experts > "$OUT/bench_experts.txt" 2>&1; then
  echo "PASS bench experts"
  grep -E "stream both|grouped" "$OUT/bench_experts.txt" | head -30
else
  echo "FAIL bench experts: see $OUT/bench_experts.txt"
  tail -5 "$OUT/bench_experts.txt"
fi
echo "(expert bench done at $(elapsed) s)"

echo "== dgemma_bench, 26B-A4B dummy shape, batch 1 / 4 / 16, $STEPS steps, $PROMPT-token prompt"
MODEL="$OUT/more/model26b"
python3 bench/denoise_step_bench.py --write-model "$MODEL" > "$OUT/more/write_model.txt" 2>&1 ||
  echo "FAIL write-model: see $OUT/more/write_model.txt"
: > "$OUT/bench.txt"
ROWS=()
# row FORMAT LABEL [flags...]: one dgemma_bench process (one set of dummy weights, three runs).
row() {
  local fmt="$1" label="$2"
  shift 2
  local est=45
  [ "$fmt" = bf16 ] && est=70  # 52 GB of dummy weights
  if [ $(( $(elapsed) + est )) -gt "$BUDGET_S" ]; then
    ROWS+=("$(printf '%-15s %-16s %s' "$fmt" "$label" "skipped (time budget)")")
    return
  fi
  local log="$OUT/more/bench_${fmt}_${label//[^a-z0-9]/_}.txt"
  timeout 150 "$BENCH" "$MODEL" --quantization "$fmt" --runs "1:$STEPS:$PROMPT,4:$STEPS:$PROMPT,16:$STEPS:$PROMPT" \
    "$@" > "$log" 2>&1
  local rc=$?
  { echo "### $fmt $label $*"; cat "$log"; } >> "$OUT/bench.txt"
  local cells=""
  while read -r ms launches; do cells+=$(printf '%9s %7s' "$ms" "$launches"); done < <(
    grep -oE "[0-9.]+ ms per denoising step|[0-9]+ launches per step" "$log" | awk '
      /ms per/ {ms=$1} /launches/ {print ms, $1}')
  [ $rc -eq 0 ] || cells+="  FAIL (exit $rc, see $(basename "$log"))"
  ROWS+=("$(printf '%-15s %-16s %s' "$fmt" "$label" "$cells")")
}
row fp8-dynamic auto
row fp8-dynamic experts=grouped --experts grouped
row nvfp4-modelopt auto
row nvfp4-modelopt experts=grouped --experts grouped
row fp8-dynamic pdl=on --pdl on
row nvfp4-modelopt pdl=on --pdl on
row bf16 auto  # bf16 experts take the grouped kernels at every size: (b) and (c) change nothing there

tar -czf "$OUT/logs.tgz" -C "$OUT" more && rm -rf "$OUT/more"
{
  echo "== A/B (total $(elapsed) s): ms per denoising step and launches per step, batch 1 / 4 / 16"
  printf '%-15s %-16s %17s%17s%17s\n' format variant "b1 ms  launch" "b4 ms  launch" "b16 ms  launch"
  for r in "${ROWS[@]}"; do echo "$r"; done
} | tee "$OUT/table.txt"
