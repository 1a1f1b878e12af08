#!/usr/bin/env bash
# `dgemma bench` against `dgemma serve` at the real DiffusionGemma-26B-A4B shape with random weights
# (--load-format dummy; the config of bench/denoise_step_bench.py), on one GPU, in one call:
# starts the server, waits for /health, runs the sweep, stops the server.
#
#   bench/serve_bench.sh BUILD_DIR OUT_DIR [dgemma bench flags...]
#
# BUILD_DIR holds the dgemma binary and gemma4-tokenizer/tokenizer.json (a CMake build). If
# BUILD_DIR/devlibs exists it goes first on dgemma's LD_LIBRARY_PATH: the shared libraries the binary
# needs that a machine without the Debian packages lacks (cpp-httplib, fmt, brotli, gcc 12's libstdc++),
# copied next to the build with
#   mkdir -p build/devlibs && cp $(ldd build/dgemma | awk '/httplib|fmt|brotli|stdc/ {print $3}') build/devlibs/
# OUT_DIR receives bench.json, bench.svg, bench.txt (the table) and serve.log.
# Environment: DEVICE (cuda), SHAPE (26b, or "embedded" for a quick CPU check of this script), PORT (8011),
#   MAX_NUM_SEQS (16), MAX_MODEL_LEN (8192), QUANT (bf16; or nvfp4-modelopt, nvfp4-ct, fp8-dynamic: the
#   dummy weights in that checkpoint format, 26b only), GPU_MEMORY_UTILIZATION (the server's default; e.g.
#   0.227 of an H200's 141 GB is a 32 GB card's budget), SERVE_FLAGS (more `dgemma serve` flags, e.g.
#   --enforce-eager). With nvidia-smi present, OUT_DIR/gpu_memory.txt
#   gets the peak GPU memory the server used (sampled every 0.2 s).
# Default sweep: concurrency 1,4,16; 32 requests each; 512-word prompts; 256 output tokens +-50%,
# ignore_eos (random weights rarely stop). Bench flags given on the command line replace that sweep.
set -euo pipefail
[ $# -ge 2 ] || { sed -n '2,18p' "$0"; exit 2; }
build="$(cd "$1" && pwd)"
out="$2"
shift 2
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mkdir -p "$out"
libpath="${LD_LIBRARY_PATH:-}"
[ -d "$build/devlibs" ] && libpath="$build/devlibs${libpath:+:$libpath}"
dgemma() { LD_LIBRARY_PATH="$libpath" "$build/dgemma" "$@"; }
device="${DEVICE:-cuda}"
shape="${SHAPE:-26b}"
port="${PORT:-8011}"

model="$(mktemp -d)"
trap 'rm -rf "$model"; [ -n "${pid:-}" ] && kill "$pid" 2>/dev/null; true' EXIT
if [ "$shape" = 26b ]; then
  cp "$build/gemma4-tokenizer/tokenizer.json" "$root/models/tiny-code/chat_template.jinja" "$model/"
  python3 - "$root/bench" "$model" <<'PY'
import json, os, sys
sys.path.insert(0, sys.argv[1])
import denoise_step_bench as d  # the 26B-A4B config and the checkpoint's generation config
top = dict(d.TOP)
quant = os.environ.get("QUANT", "bf16")
if quant != "bf16":
    if quant not in d.QUANT_CONFIGS:
        sys.exit(f"serve_bench.sh: QUANT={quant!r} is not one of bf16, {', '.join(d.QUANT_CONFIGS)}")
    top["quantization_config"] = d.QUANT_CONFIGS[quant]
json.dump(top, open(os.path.join(sys.argv[2], "config.json"), "w"))
json.dump(d.GEN, open(os.path.join(sys.argv[2], "generation_config.json"), "w"))
PY
  bench_defaults=(--concurrency 1,4,16 --num-prompts 32 --input-len 512 --output-len 256 --range-ratio 0.5 --ignore-eos)
  name=diffusiongemma-26B-A4B-dummy
else
  bash "$root/scripts/embedded_model.sh" "$build" >/dev/null
  cp "$build/embedded-model/config.json" "$build/embedded-model/generation_config.json" \
     "$build/embedded-model/tokenizer.json" "$build/embedded-model/chat_template.jinja" "$model/"  # its shape, random weights
  bench_defaults=(--concurrency 1,2 --num-prompts 2 --input-len 8 --output-len 8 --ignore-eos)
  name=dgemma-embedded
fi

[ $# -gt 0 ] && bench_defaults=()

LD_LIBRARY_PATH="$libpath" "$build/dgemma" serve "$model" --load-format dummy --device "$device" --port "$port" \
  --served-model-name "$name" --max-num-seqs "${MAX_NUM_SEQS:-16}" \
  --max-model-len "${MAX_MODEL_LEN:-8192}" ${GPU_MEMORY_UTILIZATION:+--gpu-memory-utilization "$GPU_MEMORY_UTILIZATION"} \
  ${SERVE_FLAGS:-} >"$out/serve.log" 2>&1 &
pid=$!
if command -v nvidia-smi >/dev/null; then
  ( peak=0
    while kill -0 "$pid" 2>/dev/null; do
      used=$(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits 2>/dev/null |
             awk -F', ' -v p="$pid" '$1 == p {print $2}')
      [ -n "$used" ] && [ "$used" -gt "$peak" ] && { peak=$used; echo "peak GPU memory of the server: $peak MiB" >"$out/gpu_memory.txt"; }
      sleep 0.2
    done ) &
fi
for _ in $(seq 1 600); do
  if ! kill -0 "$pid" 2>/dev/null; then echo "serve exited:"; tail -20 "$out/serve.log"; exit 1; fi
  [ "$(python3 -c "import urllib.request as u
try: print(u.urlopen('http://127.0.0.1:$port/health', timeout=2).status)
except Exception: print(0)")" = 200 ] && break
  sleep 1
done
echo "serve_bench: server ready after $SECONDS s"
dgemma bench --base-url "http://127.0.0.1:$port" "${bench_defaults[@]}" "$@" \
  --output-json "$out/bench.json" --plot "$out/bench.svg" | tee "$out/bench.txt"
echo "serve_bench: done after $SECONDS s"
