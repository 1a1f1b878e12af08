#!/usr/bin/env bash
# The GPU measurements of docs/BENCHMARKS.md in one command, on a machine with an NVIDIA GPU (sm_90 for
# the wgmma kernels), CUDA, a C++20 compiler and ninja or make: builds with scripts/device_build.sh,
# writes the 26B-A4B dummy-weight config, then runs the stages named (all when none), each into OUT:
#   checks    dgemma_gpu_check, every CUDA-vs-CPU check, in the auto kernel family then in the portable
#             one (after a sticky CUDA error, the rest again one process each)
#                                                  checks/{auto,portable}/checks.txt, checks_isolated.txt
#   steps     bench/denoise_step_bench.py --full, bf16 / NVFP4 (both) / FP8 (HF=1: with transformers,
#             batch 1, 4, 8 and 16)                                          steps.json, steps_log.txt
#   profiles  bench/step_profile.py at batch 1, 4 and 16 (bf16), 1, 4 (NVFP4) and 1 (FP8)  profile_*.txt
#             (PROFILES="FORMAT:BATCH ..." picks others)
#   kernels   dgemma_gpu_check --bench moe, quant, small, w8a8 and experts
#                            bench_moe.txt, bench_quant.txt, bench_small.txt, bench_w8a8.txt, bench_experts.txt
#   moe       the step at batch 4 and 16 with each large-R grouped MoE kernel   moe_kernels.txt
#   quant     the FP8 steps at batch 1 and 4 with each dense and expert path    quant_paths.txt
#   graphs    the step at batch 1, 4, 8, 16 replayed as a CUDA graph and op by op (--cuda-graphs on / off),
#             in the auto and the portable kernel family                       graphs.txt
# Usage: scripts/gpu_suite.sh OUT [stage...]
# Environment: BUILD (default build-device), MODEL (default /tmp/dgemma-26b-a4b), JOBS (the build's),
#   HF=1 (steps: transformers too), PROFILES (profiles: which runs), PARALLEL=N (checks: N processes side
#   by side, scripts/gpu_checks.sh).
# Run nothing else on the GPU meanwhile: the figures are compared with each other (docs/BENCHMARKS.md).
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT" || exit 1
[ $# -ge 1 ] || { sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
OUT="$1"; shift
STAGES=("$@")
[ ${#STAGES[@]} -gt 0 ] || STAGES=(checks steps profiles kernels moe quant graphs)
for s in "${STAGES[@]}"; do
  case "$s" in checks|steps|profiles|kernels|moe|quant|graphs) ;; *) echo "gpu_suite.sh: unknown stage '$s'" >&2; exit 2 ;; esac
done
BUILD="${BUILD:-build-device}"
MODEL="${MODEL:-/tmp/dgemma-26b-a4b}"
mkdir -p "$OUT"
T0=$(date +%s)
say() { echo "[gpu_suite $(( $(date +%s) - T0 )) s] $*"; }

bash scripts/device_build.sh "$BUILD" > "$OUT/build.txt" 2>&1 || { tail -30 "$OUT/build.txt"; exit 1; }
say "built ($BUILD)"
# Memory instructions whose descriptor register no instruction writes (docs/QUANTIZATION.md): they
# stop with an illegal instruction at their first launch and take every later check with them.
find "$BUILD/obj/src/backend/cuda" -name '*.o' | sort | while read -r o; do cuobjdump -sass "$o"; done \
  > "$BUILD/all.sass" 2> /dev/null
python3 tools/cuda/sass_descriptor_check.py "$BUILD/all.sass" > "$OUT/sass_scan.txt" 2>&1
say "sass scan: $(tail -1 "$OUT/sass_scan.txt")"
python3 bench/denoise_step_bench.py --write-model "$MODEL" > /dev/null || { echo "gpu_suite.sh: could not write $MODEL" >&2; exit 1; }
nvidia-smi --query-gpu=name,memory.used,utilization.gpu,clocks.sm --format=csv > "$OUT/gpu.txt" 2>&1

for s in "${STAGES[@]}"; do
  case "$s" in
    checks)
      for family in auto portable; do
        bash scripts/gpu_checks.sh "$BUILD" "$OUT/checks/$family" --kernel-family "$family" |
          while read -r line; do say "$family: $line"; done
      done
      ;;
    steps)
      hf=--skip-hf
      [ "${HF:-0}" = 1 ] && hf=
      python3 bench/denoise_step_bench.py $hf --full --formats bf16,nvfp4-modelopt,nvfp4-ct,fp8-dynamic \
        --dgemma "$BUILD/dgemma_bench" --out "$OUT/steps.json" > "$OUT/steps_log.txt" 2>&1
      say "steps: $(grep -c 'per denoising step' "$OUT/steps_log.txt") runs"
      ;;
    profiles)
      for run in ${PROFILES:-bf16:1 bf16:4 bf16:16 nvfp4-modelopt:1 nvfp4-modelopt:4 fp8-dynamic:1}; do
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
      "$BUILD/dgemma_gpu_check" --bench w8a8 > "$OUT/bench_w8a8.txt" 2>&1
      "$BUILD/dgemma_gpu_check" --bench experts > "$OUT/bench_experts.txt" 2>&1
      say "kernels: bench_moe.txt, bench_quant.txt, bench_small.txt, bench_w8a8.txt, bench_experts.txt"
      ;;
    moe)
      : > "$OUT/moe_kernels.txt"
      for b in 4 16; do
        for k in auto mma-sync-128x128 wgmma-64x128 tma-128x256; do
          r=$("$BUILD/dgemma_bench" "$MODEL" --batch "$b" --steps 8 --prompt-len 512 --moe-kernel "$k" 2>&1 |
              grep -E 'per denoising|dummy weights|rror' | tr '\n' ' ')
          echo "batch $b $k: $r" >> "$OUT/moe_kernels.txt"
        done
      done
      say "moe kernels: moe_kernels.txt"
      ;;
    quant)
      # Each line: the flags of one FP8 path (docs/QUANTIZATION.md), then the steps it gives at batch 1
      # and 4 (one process: one set of dummy weights).
      : > "$OUT/quant_paths.txt"
      for flags in "--dense-quant w8a8 --fp8-moe w8a8" "--dense-quant w8a8 --fp8-moe w8a16" \
                   "--dense-quant kernel --fp8-moe w8a16" "--dense-quant bf16 --fp8-moe w8a16"; do
        read -ra fl <<< "$flags"
        r=$("$BUILD/dgemma_bench" "$MODEL" --runs 1:16,4:16 --prompt-len 512 --quantization fp8-dynamic "${fl[@]}" 2>&1 |
            grep -E 'per denoising|dummy weights|rror' | tr '\n' ' ')
        echo "fp8-dynamic $flags: $r" >> "$OUT/quant_paths.txt"
      done
      say "quantised paths: quant_paths.txt"
      ;;
    graphs)
      : > "$OUT/graphs.txt"
      for run in "--cuda-graphs on" "--cuda-graphs off" "--kernel-family portable"; do
        read -ra flags <<< "$run"
        "$BUILD/dgemma_bench" "$MODEL" --runs 1:16,4:16,8:8,16:8 --prompt-len 512 "${flags[@]}" 2>&1 |
          grep -E 'per denoising|rror' | sed "s/^/$run: /" >> "$OUT/graphs.txt"
      done
      say "graphs, and the portable kernel family: graphs.txt"
      ;;
  esac
done
say "done"
