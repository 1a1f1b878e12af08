#!/usr/bin/env bash
# The cost of guided decoding at the DiffusionGemma-26B-A4B shape (random weights) on one GPU: the
# denoising step of dgemma_bench unguided and guided by bench/guided_schema.json (docs/API.md "Guided
# decoding on the canvas"), batch 1 and 4, 16 steps, a 512-token prompt, 2 canvases each. Builds with
# scripts/device_build.sh first. On CUDA the guided runs apply the gap mask in the sampler kernels and the
# walk in the decide kernel (CudaBackend::supports_guided_gaps); guided steps run op by op, so the
# unguided step is also timed op by op (--cuda-graphs off): the second ratio is the mask and walk alone.
#
#   scripts/gpu_guided_cost.sh [build-dir]      (default: build-device)
# Prints one dgemma_bench line per run (", guided" at the end of the guided ones) and the ratios of the
# per-step times. TOKENIZER=path/to/tokenizer.json lifts the schema to that vocabulary (default: the
# build's gemma4-tokenizer/tokenizer.json if present, else dgemma_bench's synthetic vocabulary).
# RUNS replaces the runs (dgemma_bench --runs; default 1:16,4:16: batch 1 and 4, 16 steps each).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${1:-build-device}"
case "$BUILD" in /*) ;; *) BUILD="$ROOT/$BUILD" ;; esac
cd "$ROOT"
bash scripts/device_build.sh "$BUILD" > "$BUILD.log" 2>&1 || { tail -30 "$BUILD.log"; exit 1; }
MODEL="$BUILD/model-26b"
python3 bench/denoise_step_bench.py --write-model "$MODEL" > /dev/null
tok=()
TOKENIZER="${TOKENIZER:-$ROOT/build/gemma4-tokenizer/tokenizer.json}"
[ -f "$TOKENIZER" ] && tok=(--tokenizer "$TOKENIZER")
run() { "$BUILD/dgemma_bench" "$MODEL" --runs "${RUNS:-1:16,4:16}" --prompt-len 512 --canvases 2 "$@" 2>&1 | grep 'per denoising step'; }
plain="$(run)"
eager="$(run --cuda-graphs off)"
guided="$(run --guided-schema bench/guided_schema.json "${tok[@]}")"
printf '%s\n%s\n%s\n' "$plain" "$eager" "$guided"
ms() { sed -E 's/.*, ([0-9.]+) ms per denoising step.*/\1/'; }
paste <(echo "$plain" | ms) <(echo "$eager" | ms) <(echo "$guided" | ms) |
  awk '{ printf "batch %s: guided / unguided step = %.3f (unguided op by op: %.3f)\n",
         (NR == 1 ? 1 : 4), $3 / $1, $3 / $2 }'
