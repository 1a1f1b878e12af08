#!/usr/bin/env bash
# Builds dgemma_gpu_check — the CUDA-vs-CPU checks of tests/gpu without GoogleTest — on a machine that
# has only CUDA (nvcc, cuBLAS), a C++20 compiler and ninja or make: the GPU machine, which has none of
# the Debian packages the CMake build needs (GoogleTest, libfmt, CLI11, cpp-httplib).
#
# The two header-only dependencies that the needed sources use travel with the checkout:
#   mkdir -p .devdeps/include && cp -r /usr/include/fmt /usr/include/nlohmann .devdeps/include/
# (fmt is compiled header-only: -DFMT_HEADER_ONLY).
#
# Usage: scripts/device_build.sh [build-dir]        (default: build-device)
#   then: build-device/dgemma_gpu_check [name-substring...]
# Environment: CUDA_HOME (default /usr/local/cuda), CXX (default g++), JOBS (default: all cores),
#   DEVDEPS (default .devdeps/include), WERROR=1 to add -Werror to the C++ files, NVCC_EXTRA: more nvcc
#   flags (e.g. -lineinfo, so compute-sanitizer names source lines), NATIVE=0: no machine code for the
#   GPUs found here (only sm_90a and the compute_80 PTX).
# Compiles: src/util, src/backend (+cpu, +cuda), src/model, src/engine, src/guided, the tokenizer of
# src/text, tests/support (the harness the checks and benchmarks link; not the test server), tests/gpu
# (no api/cli).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${1:-build-device}"
case "$BUILD" in /*) ;; *) BUILD="$ROOT/$BUILD" ;; esac
CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"
NVCC="$CUDA_HOME/bin/nvcc"
CXX="${CXX:-g++}"
JOBS="${JOBS:-$(nproc)}"
DEVDEPS="${DEVDEPS:-$ROOT/.devdeps/include}"
case "$DEVDEPS" in /*) ;; *) DEVDEPS="$ROOT/$DEVDEPS" ;; esac

die() { echo "device_build.sh: $*" >&2; exit 1; }
[ -x "$NVCC" ] || die "nvcc not found at $NVCC (set CUDA_HOME)"
command -v "$CXX" >/dev/null || die "C++ compiler '$CXX' not found (set CXX)"
[ -f "$DEVDEPS/fmt/format.h" ] || die "fmt headers missing in $DEVDEPS; on the dev machine run:
  mkdir -p .devdeps/include && cp -r /usr/include/fmt /usr/include/nlohmann .devdeps/include/"
[ -f "$DEVDEPS/nlohmann/json.hpp" ] || die "nlohmann headers missing in $DEVDEPS (see above)"
case "$ROOT$BUILD$DEVDEPS$CUDA_HOME" in *[[:space:]\$:]*) die "paths must not contain spaces, '\$' or ':'" ;; esac

mkdir -p "$BUILD"
cd "$ROOT"

werror=""
[ "${WERROR:-0}" = "1" ] && werror="-Werror"
common_defs="-DDGEMMA_HAVE_CUDA=1 -DFMT_HEADER_ONLY '-DDGEMMA_SOURCE_DIR=\"$ROOT\"'"
cxxflags="-std=c++20 -O2 -g1 -pthread -Wall -Wextra $werror $common_defs -I$ROOT/src -I$ROOT/tests -isystem $DEVDEPS -isystem $CUDA_HOME/include"
# sm_90a machine code, the compute_80 PTX for other GPUs, and machine code for each GPU nvidia-smi
# reports that nvcc knows (as the CMake build: scripts/cuda_native_archs.cmake; sm_90 runs the sm_90a
# code). NATIVE=0: the two fixed targets only.
gencode="-gencode=arch=compute_90a,code=sm_90a -gencode=arch=compute_80,code=compute_80"
native=""
if [ "${NATIVE:-1}" != 0 ] && command -v nvidia-smi >/dev/null; then
  codes="$("$NVCC" --list-gpu-code 2>/dev/null || true)"
  for cap in $(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | tr -d ' .' | sort -u); do
    case "$cap" in '' | *[!0-9]* | 90) continue ;; esac
    if printf '%s\n' $codes | grep -qx "sm_$cap"; then
      native="$native $cap"
      gencode="$gencode -gencode=arch=compute_$cap,code=sm_$cap"
    else
      echo "device_build.sh: nvcc has no sm_$cap (a GPU here): it runs the compute_80 PTX" >&2
    fi
  done
fi
echo "device_build.sh: CUDA code for sm_90a, compute_80 (PTX), native:${native:- none}"
nvccflags="-std=c++17 -O2 $gencode --expt-relaxed-constexpr -Xcompiler=-Wall,-Wextra -DDGEMMA_HAVE_CUDA=1 -I$ROOT/src -ccbin $CXX ${NVCC_EXTRA:-}"
ldflags="-L$CUDA_HOME/lib64 -Wl,-rpath,$CUDA_HOME/lib64 -lcublas -lcublasLt -lcudart -pthread -ldl"  # -ldl: NCCL is dlopened

cpp_sources=()
# The engine module whole (its sources depend only on util, backend and model), so new engine files
# need no edit here.
# src/backend/cuda: every folder below it (core, attention, moe, quant, sampler, layer).
mapfile -t cuda_cpp < <(find src/backend/cuda -name '*.cpp' | LC_ALL=C sort)
mapfile -t cu_sources < <(find src/backend/cuda -name '*.cu' | LC_ALL=C sort)
# The engine's guided decoding needs src/guided and, of src/text, the tokenizer and UTF-8 helpers.
for f in src/util/*.cpp src/backend/*.cpp src/backend/cpu/*.cpp "${cuda_cpp[@]}" src/model/*.cpp \
         src/engine/*.cpp src/guided/*.cpp src/text/tokenizer/tokenizer.cpp src/text/tokenizer/tokenizer_json.cpp \
         src/text/tokenizer/tokenizer_load.cpp src/text/tokenizer/utf8.cpp tests/support/*.cpp tests/gpu/*.cpp; do
  [ "$f" = tests/gpu/test_gpu.cpp ] && continue  # the GoogleTest driver
  [ "$f" = tests/support/test_server.cpp ] && continue  # the test server (needs api/text/cli)
  cpp_sources+=("$f")
done
# dgemma_bench (bench/model_step_bench.cpp): the library objects (engine and test support included).
bench_sources=(bench/model_step_bench.cpp)
# dgemma_engine_bench (bench/engine_bench.cpp): the threaded engine through create_model_engine.

obj_of() { echo "obj/${1%.*}.o"; }

if command -v ninja >/dev/null; then
  {
    echo "# generated by scripts/device_build.sh"
    echo "cxx = $CXX"
    echo "nvcc = $NVCC"
    echo "cxxflags = $cxxflags"
    echo "nvccflags = $nvccflags"
    echo "ldflags = $ldflags"
    echo "rule cxx"
    echo "  command = \$cxx -MMD -MF \$out.d \$cxxflags \$extra -c \$in -o \$out"
    echo "  depfile = \$out.d"
    echo "  deps = gcc"
    echo "  description = CXX \$in"
    echo "rule nvcc"
    echo "  command = \$nvcc -MD -MF \$out.d \$nvccflags -c \$in -o \$out"
    echo "  depfile = \$out.d"
    echo "  deps = gcc"
    echo "  description = NVCC \$in"
    echo "rule link"
    echo "  command = \$cxx -o \$out \$in \$ldflags"
    echo "  description = LINK \$out"
    objs=()
    for f in "${cpp_sources[@]}"; do
      o="$(obj_of "$f")"
      objs+=("$o")
      echo "build $o: cxx $ROOT/$f"
      case "$f" in
        src/backend/cuda/*) ;;
        src/backend/*) echo "  extra = -ffp-contract=off" ;;  # as the CMake build: fixed-order CPU maths
        tests/gpu/gpu_check_main.cpp) echo "  extra = -DDGEMMA_GPU_CHECK_MAIN" ;;
      esac
    done
    for f in "${cu_sources[@]}"; do
      o="$(obj_of "$f")"
      objs+=("$o")
      echo "build $o: nvcc $ROOT/$f"
    done
    echo "build dgemma_gpu_check: link ${objs[*]}"
    lib_objs=()
    for o in "${objs[@]}"; do case "$o" in obj/tests/support/*) lib_objs+=("$o") ;; obj/tests/*) ;; *) lib_objs+=("$o") ;; esac; done
    for f in "${bench_sources[@]}"; do
      o="$(obj_of "$f")"
      lib_objs+=("$o")
      echo "build $o: cxx $ROOT/$f"
    done
    echo "build dgemma_bench: link ${lib_objs[*]}"
    engine_objs=()
    for o in "${lib_objs[@]}"; do case "$o" in obj/bench/*) ;; *) engine_objs+=("$o") ;; esac; done
    echo "build obj/bench/engine_bench.o: cxx $ROOT/bench/engine_bench.cpp"
    echo "build dgemma_engine_bench: link ${engine_objs[*]} obj/bench/engine_bench.o"
    echo "default dgemma_gpu_check dgemma_bench dgemma_engine_bench"
  } > "$BUILD/build.ninja"
  ninja -C "$BUILD" -j "$JOBS"
else
  # No ninja: compile everything in parallel with xargs, then link.
  jobs_file="$BUILD/compile_jobs.sh"
  : > "$jobs_file"
  objs=()
  for f in "${cpp_sources[@]}"; do
    o="$BUILD/$(obj_of "$f")"
    objs+=("$o")
    extra=""
    case "$f" in
      src/backend/cuda/*) ;;
      src/backend/*) extra="-ffp-contract=off" ;;
      tests/gpu/gpu_check_main.cpp) extra="-DDGEMMA_GPU_CHECK_MAIN" ;;
    esac
    echo "mkdir -p $(dirname "$o") && $CXX $cxxflags $extra -c $ROOT/$f -o $o" >> "$jobs_file"
  done
  for f in "${cu_sources[@]}"; do
    o="$BUILD/$(obj_of "$f")"
    objs+=("$o")
    echo "mkdir -p $(dirname "$o") && $NVCC $nvccflags -c $ROOT/$f -o $o" >> "$jobs_file"
  done
  tr '\n' '\0' < "$jobs_file" | xargs -0 -P "$JOBS" -n 1 sh -c 'echo "$0" | cut -c1-120; eval "$0"'
  $CXX -o "$BUILD/dgemma_gpu_check" "${objs[@]}" $ldflags
fi
echo "built $BUILD/dgemma_gpu_check"
