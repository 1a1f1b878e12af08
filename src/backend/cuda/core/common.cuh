#pragma once
// Device helpers shared by the CUDA kernels (nvcc only): bf16 <-> fp32 conversions with exactly the
// rounding of src/util/bf16.h, fp32 maths that cannot be contracted into FMAs where the CPU reference
// rounds every step, libm-like fp32 transcendentals, and warp/block reductions.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "backend/cuda/core/check.h"
#include "backend/cuda/core/error_bits.h"
#include "backend/cuda/core/launch.cuh"
#include "backend/cuda/core/stream.h"

namespace dgemma::cuda {

// ---- bf16 (bit patterns in uint16_t, as everywhere in dgemma) -------------------------------------

__device__ __forceinline__ float bf16_to_f32(uint16_t b) { return __uint_as_float(static_cast<uint32_t>(b) << 16); }

// Round-to-nearest-even with the quiet-NaN rule of util/bf16.h (bit for bit the CPU's conversion;
// __float2bfloat16_rn differs on NaN payloads).
__device__ __forceinline__ uint16_t f32_to_bf16(float f) {
  const uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  const uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding) >> 16);
}

__device__ __forceinline__ float round_bf16(float f) { return bf16_to_f32(f32_to_bf16(f)); }

// True when every pointer is 16-byte aligned and n is a multiple of 8 (the vectorised kernels' terms).
inline bool vec8_ok(int64_t n, const void* a, const void* b = nullptr, const void* c = nullptr) {
  auto al = [](const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; };
  return n % 8 == 0 && al(a) && al(b) && al(c);
}

// ---- fp32 functions matched to the CPU reference ---------------------------------------------------
// The CPU calls glibc's expf/tanhf/cosf/sinf, which return the correctly rounded fp32 result in all
// but rare cases; CUDA's fp32 versions are allowed 1-2 ulp of error. Evaluating in double and
// rounding once to fp32 reproduces the CPU's values far more often, which keeps bf16 rounding
// decisions (made right after these functions) identical. Used where the result is rounded next.
__device__ __forceinline__ float exp_f32(float x) { return static_cast<float>(exp(static_cast<double>(x))); }
__device__ __forceinline__ float tanh_f32(float x) { return static_cast<float>(tanh(static_cast<double>(x))); }
__device__ __forceinline__ float cos_f32(float x) { return static_cast<float>(cos(static_cast<double>(x))); }
__device__ __forceinline__ float sin_f32(float x) { return static_cast<float>(sin(static_cast<double>(x))); }

// gelu_pytorch_tanh exactly as cpu::gelu_tanh evaluates it (no FMA contraction: the CPU library is
// built with -ffp-contract=off).
__device__ __forceinline__ float gelu_tanh(float x) {
  constexpr float kBeta = 0.7978845608028654f;
  constexpr float kKappa = 0.044715f;
  const float cube = __fmul_rn(__fmul_rn(x, x), x);
  const float inner = __fmul_rn(kBeta, __fadd_rn(x, __fmul_rn(kKappa, cube)));
  return __fmul_rn(__fmul_rn(0.5f, x), __fadd_rn(1.0f, tanh_f32(inner)));
}

// ---- reductions ----------------------------------------------------------------------------------

struct SumOp {
  template <typename T>
  __device__ __forceinline__ T operator()(T a, T b) const { return a + b; }
};
struct MaxOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

template <typename T, typename Op>
__device__ __forceinline__ T warp_reduce(T v, Op op) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Reduces v over the block; every thread gets the result. blockDim.x must be a multiple of 32 (at most
// 1024) and every thread of the block must call it. `shared` holds 32 elements; the leading barrier
// makes back-to-back calls with the same scratch safe. The combination order is fixed for a given
// block size, so results are deterministic.
template <typename T, typename Op>
__device__ __forceinline__ T block_reduce(T v, Op op, T identity, T* shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_reduce(v, op);
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  T r = lane < warps ? shared[lane] : identity;
  return warp_reduce(r, op);
}

// ---- launch helpers --------------------------------------------------------------------------------

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Grid size for a grid-stride loop over n elements with `threads` per block (bounded; the loop covers
// the rest).
inline unsigned grid_for(int64_t n, int threads, int64_t max_blocks = 65536) {
  int64_t b = ceil_div(n, threads);
  if (b < 1) b = 1;
  if (b > max_blocks) b = max_blocks;
  return static_cast<unsigned>(b);
}

// Threads per block for a row of n elements handled by one block: a multiple of 32 in [32, max].
inline int threads_for_row(int64_t n, int max_threads = 256) {
  int64_t t = ceil_div(n, 32) * 32;
  if (t < 32) t = 32;
  if (t > max_threads) t = max_threads;
  return static_cast<int>(t);
}

}  // namespace dgemma::cuda

// The 16-byte word helpers (in their own header, which the emulated kernel tests also compile).
#include "backend/cuda/core/bf16_words.cuh"
