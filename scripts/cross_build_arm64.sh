#!/usr/bin/env bash
# Cross-builds the CPU part of dgemma (everything but the CUDA backend) for aarch64 Linux on an x86-64
# Debian host, then runs the unit, golden and fuzz-corpus tests under qemu-user.
#
#   scripts/cross_build_arm64.sh [BUILD_DIR] [-- CTEST_ARGS...]
#
# BUILD_DIR defaults to build-arm64; JOBS (default 2) sets the build and test parallelism; TARGETS (a
# space-separated list, default all) builds only those targets, e.g. TARGETS="unit_util unit_text" with
# CTEST_ARGS -R '^(util|text)\.'. CTEST_ARGS replace the default test selection, which leaves out the node
# and Python suites (e2e, python, deploy): they drive the binary from tools that are not emulated. Installs what it needs and only that, like
# scripts/setup.sh:
#   - scripts/setup.sh (host tools, npm packages);
#   - the arm64 architecture in dpkg, the cross compiler and qemu-user;
#   - the arm64 (multiarch) build of every architecture-dependent -dev package that setup.sh lists,
#     plus kExtraArm64Packages below. A library added to setup.sh (e.g. an image decoder's -dev package)
#     is picked up here without an edit; add to kExtraArm64Packages only what setup.sh gets indirectly.
# Installing an arm64 -dev package moves its host (amd64) twin to the same Debian version when the two
# differ (multiarch requires equal versions).
# Not part of `make test` (an emulated run takes long). On an aarch64 host, build natively: `make test`.
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir=build-arm64
if [ $# -gt 0 ] && [ "$1" != "--" ]; then
  build_dir=$1
  shift
fi
[ "${1:-}" = "--" ] && shift
ctest_args=("$@")
[ ${#ctest_args[@]} -eq 0 ] && ctest_args=(-E '^(e2e|python|deploy)\.')
jobs=${JOBS:-2}
read -r -a targets <<<"${TARGETS:-all}"

kExtraArm64Packages=(
  libssl-dev              # CMake's pkg_check_modules(openssl); setup.sh gets it through httplib
  libc6 libstdc++6        # the runtime the tests run against under qemu (the toolchain file says why)
)
kHostCrossPackages=(g++-aarch64-linux-gnu qemu-user)

die() { echo "cross_build_arm64: $*" >&2; exit 1; }
note() { echo "cross_build_arm64: $*"; }

[ "$(uname -m)" != "aarch64" ] || die "this host is aarch64: build natively (make test)"
command -v dpkg >/dev/null && command -v apt-get >/dev/null || die "needs a Debian or Ubuntu host (dpkg, apt)"
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
apt_get() { DEBIAN_FRONTEND=noninteractive $SUDO apt-get -o DPkg::Lock::Timeout=900 -y -qq "$@"; }
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }

bash scripts/setup.sh

# The architecture-dependent -dev packages of setup.sh's list, as arm64 packages.
setup_dev_packages=$(sed -n '/^debian_packages=(/,/^)/p' scripts/setup.sh | sed 's/#.*//' | tr -s ' \t()' '\n\n' |
                     grep -E -- '-dev$' || true)
[ -n "$setup_dev_packages" ] || die "found no -dev packages in scripts/setup.sh's debian_packages list"

if ! dpkg --print-foreign-architectures | grep -qx arm64; then
  note "adding the arm64 architecture to dpkg"
  $SUDO dpkg --add-architecture arm64
  apt_get update
fi

candidate_arch() { apt-cache show --no-all-versions "$1" 2>/dev/null | sed -n 's/^Architecture: //p' | head -1; }
arch_of() {  # "all", "arm64", or empty when the sources hold no arm64 build
  if [ "$(candidate_arch "$1")" = all ]; then echo all; else candidate_arch "$1:arm64"; fi
}
wanted=("${kHostCrossPackages[@]}")
installed_arch() { dpkg-query -W -f='${Architecture}\n' "$1" 2>/dev/null | grep -qx "$2"; }
for p in $setup_dev_packages "${kExtraArm64Packages[@]}"; do
  # Installed already: no apt-cache query (slow, one per package).
  if installed "$p:arm64"; then wanted+=("$p:arm64"); continue; fi
  if installed "$p" && installed_arch "$p" all; then wanted+=("$p"); continue; fi
  arch=$(arch_of "$p")
  if [ -z "$arch" ]; then
    apt_get update
    arch=$(arch_of "$p")
  fi
  case "$arch" in
    all) wanted+=("$p") ;;  # headers only: the host package serves both architectures
    arm64) wanted+=("$p:arm64") ;;
    *) die "no arm64 build of $p in the apt sources (on Ubuntu, arm64 comes from ports.ubuntu.com: add it)" ;;
  esac
done
missing=()
for p in "${wanted[@]}"; do installed "$p" || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  note "installing ${missing[*]}"
  apt_get update
  apt_get install --no-install-recommends "${missing[@]}"
fi
command -v qemu-aarch64 >/dev/null || die "qemu-aarch64 not found after installing qemu-user"

start=$(date +%s)
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_TOOLCHAIN_FILE="$PWD/scripts/aarch64-linux-gnu.toolchain.cmake" \
  -DDGEMMA_CUDA=OFF
nice -n 19 cmake --build "$build_dir" -j "$jobs" --target "${targets[@]}"
built=$(date +%s)

# Some tests start aarch64 executables themselves: the golden CLI runs start build/dgemma, GoogleTest's
# threadsafe death tests start their own binary again. Where the kernel gives a user namespace its own
# binfmt_misc (Linux 6.7 and newer), the tests run in one in which aarch64 executables start under qemu.
# Elsewhere dgemma and dgemma_bench become scripts that start them under qemu, and death tests fail.
qemu=$(command -v qemu-aarch64)
magic='\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\xb7\x00'
mask='\xff\xff\xff\xff\xff\xff\xff\x00\xff\xff\xff\xff\xff\xff\xff\xff\xfe\xff\xff\xff'
binfmt_rule=":qemu-aarch64:M::$magic:$mask:$qemu:F"
with_aarch64_binfmt() {  # runs "$@" in a user namespace whose binfmt_misc starts aarch64 files under qemu
  unshare --user --map-root-user --mount --fork sh -c '
    mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc &&
    printf "%s\n" "$0" >/proc/sys/fs/binfmt_misc/register && exec "$@"' "$binfmt_rule" "$@"
}
for exe in dgemma dgemma_bench; do  # the binaries themselves again, where an earlier run wrapped them
  path="$build_dir/$exe"
  if [ -f "$path.aarch64" ] && ! head -c 4 "$path" | grep -q ELF; then mv -f "$path.aarch64" "$path"; fi
done
runner=()
if with_aarch64_binfmt "$build_dir/dgemma" --version >/dev/null 2>&1; then
  runner=(with_aarch64_binfmt)
  note "aarch64 executables start under qemu through a private binfmt_misc"
else
  note "no private binfmt_misc here: dgemma and dgemma_bench run through scripts, death tests fail"
  for exe in dgemma dgemma_bench; do
    path="$build_dir/$exe"
    if [ -f "$path" ] && head -c 4 "$path" | grep -q ELF; then
      mv -f "$path" "$path.aarch64"
      printf '#!/bin/sh\nexec qemu-aarch64 "$0.aarch64" "$@"\n' >"$path"
      chmod +x "$path"
    fi
  done
fi

set +e
(cd "$build_dir" && "${runner[@]}" nice -n 19 ctest --output-on-failure -j "$jobs" --timeout 3600 "${ctest_args[@]}")
rc=$?
set -e
end=$(date +%s)
note "build $((built - start)) s, tests $((end - built)) s, ctest exit status $rc"
exit $rc
