#!/usr/bin/env bash
# The GPU measurements of docs/BENCHMARKS.md in one command, on a machine with an NVIDIA GPU (sm_90 for
# the wgmma kernels), CUDA, a C++20 compiler and ninja or make: builds with scripts/device_build.sh,
# writes the 26B-A4B dummy-weight config, then runs the stages named (all when none), each into OUT:
#   checks    dgemma_gpu_check, every CUDA-vs-CPU check                      checks.txt
#   steps     bench/denoise_step_bench.py --skip-hf --full, bf16 / NVFP4 / FP8   steps.json, steps_log.txt
#   profiles  bench/step_profile.py at batch 1, 4 and 16 (bf16) and 1, 4 (NVFP4)  profile_*.txt
#   kernels   dgemma_gpu_check --bench moe, quant and small        bench_moe.txt, bench_quant.txt, bench_small.txt
#   moe       the step at batch 4 and 16 with each large-R grouped MoE variant   moe_variants.txt
# Usage: scripts/gpu_suite.sh OUT [stage...]
# Environment: BUILD (default build-device), MODEL (default /tmp/dgemma-26b-a4b), JOBS (the build's).
# Run nothing else on the GPU meanwhile: the figures are compared with each other (docs/BENCHMARKS.md).
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT" || exit 1
[ $# -ge 1 ] || { sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
OUT="$1"; shift
STAGES=("$@")
[ ${#STAGES[@]} -gt 0 ] || STAGES=(checks steps profiles kernels moe)
for s in "${STAGES[@]}"; do
  case "$s" in checks|steps|profiles|kernels|moe) ;; *) echo "gpu_suite.sh: unknown stage '$s'" >&2; exit 2 ;; esac
done
BUILD="${BUILD:-build-device}"
MODEL="${MODEL:-/tmp/dgemma-26b-a4b}"
mkdir -p "$OUT"
T0=$(date +%s)
say() { echo "[gpu_suite $(( $(date +%s) - T0 )) s] $*"; }

bash scripts/device_build.sh "$BUILD" > "$OUT/build.txt" 2>&1 || { tail -30 "$OUT/build.txt"; exit 1; }
say "built ($BUILD)"
python3 bench/denoise_step_bench.py --write-model "$MODEL" > /dev/null || { echo "gpu_suite.sh: could not write $MODEL" >&2; exit 1; }
nvidia-smi --query-gpu=name,memory.used,utilization.gpu,clocks.sm --format=csv > "$OUT/gpu.txt" 2>&1

for s in "${STAGES[@]}"; do
  case "$s" in
    checks)
      "$BUILD/dgemma_gpu_check" > "$OUT/checks.txt" 2>&1
      say "checks: $(tail -1 "$OUT/checks.txt")"
      grep -E "^\[ FAIL" "$OUT/checks.txt" | head -20
      ;;
    steps)
      python3 bench/denoise_step_bench.py --skip-hf --full --formats bf16,nvfp4-modelopt,fp8-dynamic \
        --dgemma "$BUILD/dgemma_bench" --out "$OUT/steps.json" > "$OUT/steps_log.txt" 2>&1
      say "steps: $(grep -c 'per denoising step' "$OUT/steps_log.txt") runs"
      ;;
    profiles)
      for run in bf16:1 bf16:4 bf16:16 nvfp4-modelopt:1 nvfp4-modelopt:4; do
        fmt="${run%%:*}" batch="${run##*:}"
        python3 bench/step_profile.py --bench "$BUILD/dgemma_bench" --model "$MODEL" --step 3 -- \
          --batch "$batch" --steps 6 --prompt-len 512 --quantization "$fmt" > "$OUT/profile_${fmt}_b$batch.txt" 2>&1
        say "profile $fmt batch $batch: $(head -1 "$OUT/profile_${fmt}_b$batch.txt")"
      done
      ;;
    kernels)
      "$BUILD/dgemma_gpu_check" --bench moe > "$OUT/bench_moe.txt" 2>&1
      "$BUILD/dgemma_gpu_check" --bench quant > "$OUT/bench_quant.txt" 2>&1
      "$BUILD/dgemma_gpu_check" --bench small > "$OUT/bench_small.txt" 2>&1
      say "kernels: bench_moe.txt, bench_quant.txt, bench_small.txt"
      ;;
    moe)
      : > "$OUT/moe_variants.txt"
      for b in 4 16; do
        for v in 0 11 12 13 14 15; do
          r=$("$BUILD/dgemma_bench" "$MODEL" --batch "$b" --steps 8 --prompt-len 512 --moe-variant "$v" 2>&1 |
              grep -E 'per denoising|rror' | tr '\n' ' ')
          echo "batch $b variant $v: $r" >> "$OUT/moe_variants.txt"
        done
      done
      say "moe variants: moe_variants.txt"
      ;;
  esac
done
say "done"
