#!/usr/bin/env bash
# SIGTERM drains `dgemma serve` on the CUDA backend as it does on the CPU (docs/API.md "Shutdown"):
#   1. busy: 4 requests in flight when SIGTERM arrives all complete with 200 and their whole answer, the
#      log says "received SIGTERM: draining", and the process exits 0;
#   2. idle: a server with nothing to do exits 0 on SIGTERM.
# The model is the tests/fixtures/tiny_a config with random weights (--load-format dummy) and the
# tokenizer of models/tiny-code; requests send token-id prompts, so any vocabulary fits.
#
#   scripts/gpu_sigterm_check.sh BUILD_DIR
#
# BUILD_DIR holds the dgemma binary (a CMake build with the CUDA backend). If BUILD_DIR/devlibs exists it
# goes first on LD_LIBRARY_PATH (the shared libraries a machine without the Debian packages lacks; see
# bench/serve_bench.sh for how to copy them). Environment: DEVICE (cuda; cpu checks this script itself),
# PORT (8021), MAX_TOKENS (4000: tokens per request, long enough to be running when the signal comes).
# Prints one PASS or FAIL line per check; exits 0 when both pass. Logs are left in $OUT (default a
# temporary directory, printed).
set -euo pipefail
[ $# -ge 1 ] || { sed -n '2,17p' "$0"; exit 2; }
build="$(cd "$1" && pwd)"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
device="${DEVICE:-cuda}"
port="${PORT:-8021}"
max_tokens="${MAX_TOKENS:-4000}"
out="${OUT:-$(mktemp -d)}"
mkdir -p "$out"
libpath="${LD_LIBRARY_PATH:-}"
[ -d "$build/devlibs" ] && libpath="$build/devlibs${libpath:+:$libpath}"

model="$(mktemp -d)"
pid=""
trap 'rm -rf "$model"; [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null; true' EXIT
cp "$root/tests/fixtures/tiny_a/model/config.json" "$root/tests/fixtures/tiny_a/model/generation_config.json" "$model/"
cp "$root/models/tiny-code/tokenizer.json" "$model/"

start_server() {  # $1: log file
  LD_LIBRARY_PATH="$libpath" "$build/dgemma" serve "$model" --load-format dummy --device "$device" --port "$port" \
    --max-num-seqs 4 --shutdown-timeout 120 --disable-log-stats >"$1" 2>&1 &
  pid=$!
  for _ in $(seq 1 600); do
    if ! kill -0 "$pid" 2>/dev/null; then echo "dgemma serve exited during start-up:"; tail -20 "$1"; return 1; fi
    if python3 -c "import urllib.request,sys; sys.exit(urllib.request.urlopen('http://127.0.0.1:$port/health', timeout=2).status != 200)" 2>/dev/null; then
      return 0
    fi
    sleep 0.5
  done
  echo "dgemma serve did not become healthy in 300 s:"; tail -20 "$1"; return 1
}

# Waits up to $1 seconds for the server to exit; sets `status` to its exit status (or "running").
wait_exit() {
  local waited=0
  while kill -0 "$pid" 2>/dev/null && [ "$waited" -lt "$(( $1 * 10 ))" ]; do sleep 0.1; waited=$((waited + 1)); done
  if kill -0 "$pid" 2>/dev/null; then status=running; return; fi
  status=0
  wait "$pid" || status=$?
  pid=""
}

failures=0

# 1. Busy: SIGTERM while 4 requests run.
start_server "$out/busy.log"
if python3 - "$port" "$pid" "$max_tokens" <<'PY'; then busy_client=ok; else busy_client=failed; fi
import json, os, signal, sys, threading, time, urllib.request, urllib.error
port, pid, max_tokens = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
base = f"http://127.0.0.1:{port}"
results = [None] * 4

def run(i):
    # Every canvas runs its full step cap (a stability threshold no canvas reaches): a long request.
    body = {"prompt": [2, 10 + i, 20, 30], "max_tokens": max_tokens, "ignore_eos": True, "seed": i,
            "max_denoising_steps": 48, "stability_threshold": 64}
    req = urllib.request.Request(f"{base}/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=600) as r:
            results[i] = (r.status, json.load(r), time.monotonic())
    except urllib.error.HTTPError as e:
        results[i] = (e.code, e.read().decode(errors="replace"), time.monotonic())
    except Exception as e:  # connection reset, refused: the request got no answer
        results[i] = (0, repr(e), time.monotonic())

threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
for t in threads:
    t.start()
running = 0
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    text = urllib.request.urlopen(f"{base}/metrics", timeout=5).read().decode()
    for line in text.splitlines():
        if line.startswith("dgemma:num_requests_running"):
            running = int(float(line.split()[-1]))
    if running == 4:
        break
    time.sleep(0.05)
time.sleep(0.2)  # well inside the requests (each runs thousands of denoising steps)
signalled = time.monotonic()
os.kill(pid, signal.SIGTERM)
for t in threads:
    t.join()
ok = running == 4
print(f"requests running when SIGTERM was sent: {running}")
for i, (status, body, done) in enumerate(results):
    tokens = body["usage"]["completion_tokens"] if status == 200 else None
    after = done - signalled
    print(f"request {i}: status {status}, completion_tokens {tokens}, finished {after:.2f} s after the signal")
    if status != 200 or tokens != max_tokens or after <= 0:
        ok = False
        if status != 200:
            print(f"  body: {str(body)[:300]}")
sys.exit(0 if ok else 1)
PY
wait_exit 150
busy_rc="$status"
if [ "$busy_client" = ok ] && [ "$busy_rc" = 0 ] && grep -q "received SIGTERM: draining" "$out/busy.log"; then
  echo "PASS busy: 4 requests in flight completed with 200 after SIGTERM; exit 0"
else
  echo "FAIL busy: client $busy_client, exit status $busy_rc (0 expected; 143 = killed by the signal), log $out/busy.log"
  tail -5 "$out/busy.log"
  failures=$((failures + 1))
fi
[ -n "$pid" ] && kill -9 "$pid" 2>/dev/null && pid=""

# 2. Idle: SIGTERM with nothing running.
start_server "$out/idle.log"
kill -TERM "$pid"
wait_exit 60
idle_rc="$status"
if [ "$idle_rc" = 0 ] && grep -q "received SIGTERM: draining" "$out/idle.log"; then
  echo "PASS idle: exit 0 on SIGTERM"
else
  echo "FAIL idle: exit status $idle_rc (0 expected), log $out/idle.log"
  tail -5 "$out/idle.log"
  failures=$((failures + 1))
fi
echo "logs: $out"
exit "$failures"
