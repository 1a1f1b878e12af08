#pragma once
// Eight bf16 values as one 16-byte word (the vectorised loads and stores of the bandwidth-bound
// kernels) and the RMSNorm pieces shared by the norm kernels. A header of its own so that the host
// emulation of the unit tests (tests/unit/backend/cuda_emulator.h) compiles the kernel headers that
// use it: the includer provides uint4 / make_uint4, __uint_as_float, __fadd_rn and f32_to_bf16
// (common.cuh on the device, which includes this header at its end).
#include <cmath>
#include <cstdint>

#include "backend/cuda/kernel_macros.cuh"

namespace dgemma::cuda {

__device__ __forceinline__ void unpack_bf16x8(const uint4 v, float (&f)[8]) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
  DG_UNROLL
  for (int k = 0; k < 4; ++k) {
    f[2 * k] = __uint_as_float(w[k] << 16);
    f[2 * k + 1] = __uint_as_float(w[k] & 0xffff0000u);
  }
}

__device__ __forceinline__ uint4 pack_bf16x8(const float (&f)[8]) {
  uint32_t w[4];
  DG_UNROLL
  for (int k = 0; k < 4; ++k)
    w[k] = static_cast<uint32_t>(f32_to_bf16(f[2 * k])) |
           (static_cast<uint32_t>(f32_to_bf16(f[2 * k + 1])) << 16);
  return make_uint4(w[0], w[1], w[2], w[3]);
}

// The sum of squares of a word in double (exact, and the row's sum too for any realistic dynamic
// range, so any summation order gives the same bits) and the row's (mean + eps)^-0.5 from it,
// evaluated as 1/sqrt in double and rounded once.
__device__ __forceinline__ double word_squares(const uint4 u) {
  float v[8];
  unpack_bf16x8(u, v);
  double ss = 0;
  DG_UNROLL
  for (int k = 0; k < 8; ++k) ss += static_cast<double>(v[k]) * v[k];
  return ss;
}

__device__ __forceinline__ float inv_rms_of(double ss, int64_t n, float eps) {
  const float ms = __fadd_rn(static_cast<float>(ss / static_cast<double>(n)), eps);
  return static_cast<float>(1.0 / sqrt(static_cast<double>(ms)));
}

}  // namespace dgemma::cuda
