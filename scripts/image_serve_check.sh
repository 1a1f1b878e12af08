#!/usr/bin/env bash
# A request with an image through `dgemma serve`, timed: starts the server on a model with a vision tower and
# dummy weights, waits for /health, then sends three chat completions and prints one line each:
#   1. one PNG image (a data: URL) and a short text, max_tokens 256 (ignore_eos): HTTP status,
#      usage.prompt_tokens, completion tokens, wall time;
#   2. the same text without the image: the same numbers; the difference of the prompt tokens must be the
#      image's block (<|image>, its soft tokens, <image|>);
#   3. a corrupt base64 image: HTTP 400 and its message.
# Then it stops the server (SIGTERM).
#
#   scripts/image_serve_check.sh [OUT]          (default OUT: image-serve)
#
# Environment:
#   SHAPE   26b (default): the DiffusionGemma-26B-A4B shape with the released vision tower
#           (bench/denoise_step_bench.py --write-model DIR --with-vision: 280 soft tokens an image);
#           tiny: the tiny vision model of tests/fixtures/image (70 soft tokens), to check this script on a
#           machine without a GPU (DEVICE=cpu).
#   DEVICE  cuda (default) or cpu.
#   DGEMMA  the server binary (default .devbin/dgemma, a CMake build with the CUDA backend; build/dgemma
#           here). A devlibs/ folder beside it goes first on LD_LIBRARY_PATH: the shared libraries a
#           machine without the Debian packages lacks (see bench/serve_bench.sh for how to copy them).
#   MODEL   the model directory to use or write (default: a temporary one).
#   PORT (8031), MAX_TOKENS (256), SERVE_FLAGS (more `dgemma serve` flags).
# Output: OUT/serve.log (the server's log) and OUT/requests.txt (the lines above). Exit status 0 when the
# three requests answered as said (200, 200, 400) and the image's tokens were counted.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT" || exit 1
OUT="${1:-image-serve}"
SHAPE="${SHAPE:-26b}"
DEVICE="${DEVICE:-cuda}"
DGEMMA="${DGEMMA:-.devbin/dgemma}"
PORT="${PORT:-8031}"
MAX_TOKENS="${MAX_TOKENS:-256}"
mkdir -p "$OUT"
[ -x "$DGEMMA" ] || { echo "image_serve_check.sh: no server binary at $DGEMMA (set DGEMMA)"; exit 1; }
libpath="${LD_LIBRARY_PATH:-}"
devlibs="$(dirname "$DGEMMA")/devlibs"
[ -d "$devlibs" ] && libpath="$devlibs${libpath:+:$libpath}"

model="${MODEL:-}"
tmp=""
pid=""
cleanup() {
  [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null
  [ -n "$tmp" ] && rm -rf "$tmp"
  true
}
trap cleanup EXIT
if [ -z "$model" ]; then
  tmp="$(mktemp -d)"
  model="$tmp"
fi
case "$SHAPE" in
  26b)
    python3 bench/denoise_step_bench.py --write-model "$model" --with-vision || exit 1
    soft=256  # a square image at 280 soft tokens: 768 x 768 pixels, 16 x 16 pooled cells
    ;;
  tiny)
    python3 bench/serve_files.py "$model" --config tests/fixtures/image/model/config.json --max-soft-tokens 70 || exit 1
    soft=64  # a square image at 70 soft tokens: 384 x 384 pixels, 8 x 8 pooled cells
    ;;
  *) echo "image_serve_check.sh: SHAPE must be 26b or tiny (got '$SHAPE')"; exit 1 ;;
esac

LD_LIBRARY_PATH="$libpath" "$DGEMMA" serve "$model" --load-format dummy --device "$DEVICE" --port "$PORT" \
  --served-model-name vision-dummy --max-num-seqs 2 --max-model-len 4096 --disable-log-stats \
  ${SERVE_FLAGS:-} >"$OUT/serve.log" 2>&1 &
pid=$!
start=$SECONDS
ready=0
for _ in $(seq 1 1200); do
  if ! kill -0 "$pid" 2>/dev/null; then echo "dgemma serve exited during start-up:"; tail -20 "$OUT/serve.log"; exit 1; fi
  if python3 -c "import urllib.request as u, sys
sys.exit(0 if u.urlopen('http://127.0.0.1:$PORT/health', timeout=2).status == 200 else 1)" 2>/dev/null; then
    ready=1
    break
  fi
  sleep 0.5
done
[ "$ready" = 1 ] || { echo "dgemma serve did not become healthy:"; tail -20 "$OUT/serve.log"; exit 1; }
echo "server ready after $((SECONDS - start)) s ($SHAPE shape, $DEVICE)" | tee "$OUT/requests.txt"

python3 - "$PORT" "$MAX_TOKENS" "$soft" <<'PY' | tee -a "$OUT/requests.txt"
import base64, json, struct, sys, time, urllib.error, urllib.request, zlib

port, max_tokens, soft = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])


def png(w, h):
    """An RGB PNG of w x h pixels with a colour pattern."""
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    rows = b"".join(b"\x00" + bytes(v for x in range(w) for v in ((x * 7) & 255, (y * 13) & 255, (x * y) & 255))
                    for y in range(h))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) +
            chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def chat(content):
    body = {"model": "vision-dummy", "messages": [{"role": "user", "content": content}], "max_tokens": max_tokens,
            "ignore_eos": True, "seed": 1}
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json"})
    t0 = time.monotonic()
    try:
        with urllib.request.urlopen(req, timeout=1800) as r:
            status, text = r.status, r.read()
    except urllib.error.HTTPError as e:
        status, text = e.code, e.read()
    return status, json.loads(text or b"null"), time.monotonic() - t0


text = {"type": "text", "text": "Describe this picture in one paragraph."}
image = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(png(480, 480)).decode()}}
ok = True
usage = {}
for name, content in (("with one image", [image, text]), ("text only", [text])):
    status, j, wall = chat(content)
    u = (j or {}).get("usage") or {}
    usage[name] = u.get("prompt_tokens", 0)
    print(f"{name}: HTTP {status}, prompt_tokens {u.get('prompt_tokens')}, completion_tokens "
          f"{u.get('completion_tokens')}, {wall:.2f} s wall")
    ok &= status == 200 and u.get("completion_tokens") == max_tokens
counted = usage["with one image"] - usage["text only"]
print(f"image tokens counted: {counted} (expected {soft + 2}: <|image>, {soft} soft tokens, <image|>)")
ok &= counted == soft + 2
bad = {"type": "image_url", "image_url": {"url": "data:image/png;base64,%%%not-base64%%%"}}
status, j, wall = chat([bad, text])
print(f"corrupt base64: HTTP {status}: {((j or {}).get('error') or {}).get('message')}")
ok &= status == 400
print("PASS" if ok else "FAIL")
sys.exit(0 if ok else 1)
PY
status=$?
kill -TERM "$pid" 2>/dev/null
for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
kill -0 "$pid" 2>/dev/null && { echo "dgemma serve did not stop on SIGTERM"; status=1; }
pid=""
exit $status
