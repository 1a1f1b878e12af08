#!/usr/bin/env bash
# The image path on a GPU machine in one command: builds dgemma_gpu_check (scripts/device_build.sh), runs
# the image checks against the CPU backend — the vision tower's ops, two towers, a prompt with images
# through the whole tiny model, and the flash attention checks (image-block masks included) — then times
# the released vision tower (27 x 1152, 16 heads of 72, 280 soft tokens an image; dummy weights) at 1 and
# 8 images, and a prompt with one image on the 26B-A4B shape (dummy weights, dgemma_bench --images 1):
# its prefill (the tower included) and denoising steps; then the same shape through `dgemma serve`
# (scripts/image_serve_check.sh: a chat completion with one PNG image, the same without it, a corrupt one).
# Usage: scripts/image_gpu_checks.sh [OUT]      (default OUT: image-gpu; BUILD: default build-device;
#   DGEMMA: the server binary, default .devbin/dgemma with its devlibs/ beside it)
# Output: OUT/checks.txt ends with "N passed, 0 failed"; OUT/bench_vision.txt has the tower's ms per step
# and per image; OUT/bench_image_prompt.txt the 26B run's line; OUT/serve/requests.txt the three requests'
# status, prompt tokens and wall time, and PASS. Exit status 0 when every check passed.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT" || exit 1
OUT="${1:-image-gpu}"
BUILD="${BUILD:-build-device}"
mkdir -p "$OUT"
bash scripts/device_build.sh "$BUILD" > "$OUT/build.txt" 2>&1 || { tail -30 "$OUT/build.txt"; exit 1; }
"$BUILD/dgemma_gpu_check" vision_ flash_attention_image_blocks flash_attention_small > "$OUT/checks.txt" 2>&1
status=$?
grep -E "FAIL|passed" "$OUT/checks.txt"
"$BUILD/dgemma_gpu_check" --bench vision > "$OUT/bench_vision.txt" 2>&1 || status=1
cat "$OUT/bench_vision.txt"
MODEL="${MODEL:-/tmp/dgemma-26b-a4b-vision}"
python3 bench/denoise_step_bench.py --write-model "$MODEL" --with-vision > /dev/null || status=1
"$BUILD/dgemma_bench" "$MODEL" --batch 1 --steps 8 --prompt-len 512 --images 1 > "$OUT/bench_image_prompt.txt" 2>&1 || status=1
"$BUILD/dgemma_bench" "$MODEL" --batch 1 --steps 8 --prompt-len 512 >> "$OUT/bench_image_prompt.txt" 2>&1 || status=1
grep -E "^(1 image|batch)" "$OUT/bench_image_prompt.txt"
SHAPE=26b DEVICE=cuda MODEL="$MODEL" bash scripts/image_serve_check.sh "$OUT/serve" || status=1
exit $status
