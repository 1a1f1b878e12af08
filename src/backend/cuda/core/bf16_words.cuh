#pragma once
// Eight bf16 values as one 16-byte word (the vectorised loads and stores of the bandwidth-bound
// kernels) and the RMSNorm pieces shared by the norm kernels. A header of its own so that the host
// emulation of the unit tests (tests/unit/backend/cuda_emulator.h) compiles the kernel headers that
// use it: the includer provides uint4 / make_uint4, __uint_as_float / __float_as_uint, __byte_perm,
// __fadd_rn / __fmul_rn and f32_to_bf16
// (core/common.cuh on the device, which includes this header at its end).
#include <cmath>
#include <cstdint>

#include "backend/cuda/core/kernel_macros.cuh"

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

// Two fp32 values rounded to bf16 and packed (lo in bits 0-15): f32_to_bf16 of each, which the
// device does in one cvt.rn.bf16x2.f32 instead of twice its integer steps (the junctions, the qkv
// prologue and the MoE combine round several times per element, and those steps were most of their
// instructions). The same bits for every value that is not NaN: both are IEEE round-to-nearest-even
// to bf16, overflow to infinity and subnormals kept (the instruction has no flush-to-zero). For NaN
// the instruction returns the canonical bf16 NaN 0x7fff, and f32_to_bf16's (u >> 16) | 0x40 gives
// 0x7fff too for the canonical fp32 NaN 0x7fffffff, the only NaN that fp32 arithmetic produces on the
// device: so only for values that come out of arithmetic, never for a loaded word passed through
// (pack_bf16x8_exact takes those). The host build (the emulated tests) calls f32_to_bf16 itself, whose
// NaN rule then follows the host's NaNs as the CPU reference's does.
__device__ __forceinline__ uint32_t pack_bf16x2_rn(float lo, float hi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
#else
  return static_cast<uint32_t>(f32_to_bf16(lo)) | (static_cast<uint32_t>(f32_to_bf16(hi)) << 16);
#endif
}

// pack_bf16x8 through pack_bf16x2_rn (values out of arithmetic, see there).
__device__ __forceinline__ uint4 pack_bf16x8_rn(const float (&f)[8]) {
  return make_uint4(pack_bf16x2_rn(f[0], f[1]), pack_bf16x2_rn(f[2], f[3]), pack_bf16x2_rn(f[4], f[5]),
                    pack_bf16x2_rn(f[6], f[7]));
}

// round_bf16 of eight values in place (pack_bf16x8_rn, then back to fp32: exact).
__device__ __forceinline__ void round_bf16x8(float (&f)[8]) { unpack_bf16x8(pack_bf16x8_rn(f), f); }

// pack_bf16x8 of values that round_bf16 (or round_bf16x8) returned: the high halves, one byte
// permutation per pair. f32_to_bf16 of such a value is its high half (the low half is zero, so the
// rounding add carries nothing into the high one, and a NaN's quiet bit is set already).
__device__ __forceinline__ uint4 pack_bf16x8_exact(const float (&f)[8]) {
  uint32_t w[4];
  DG_UNROLL
  for (int k = 0; k < 4; ++k) w[k] = __byte_perm(__float_as_uint(f[2 * k]), __float_as_uint(f[2 * k + 1]), 0x7632);
  return make_uint4(w[0], w[1], w[2], w[3]);
}

// The sum of squares of eight values that are bf16 already, in double (as word_squares).
__device__ __forceinline__ double squares8(const float (&v)[8]) {
  double ss = 0;
  DG_UNROLL
  for (int k = 0; k < 8; ++k) ss += static_cast<double>(v[k]) * v[k];
  return ss;
}

// The sum of squares of a word in double (exact, and the row's sum too for any realistic dynamic
// range, so any summation order gives the same bits) and the row's (mean + eps)^-0.5 from it,
// evaluated as 1/sqrt in double and rounded once.
__device__ __forceinline__ double word_squares(const uint4 u) {
  float v[8];
  unpack_bf16x8(u, v);
  return squares8(v);
}

__device__ __forceinline__ float inv_rms_of(double ss, int64_t n, float eps) {
  const float ms = __fadd_rn(static_cast<float>(ss / static_cast<double>(n)), eps);
  return static_cast<float>(1.0 / sqrt(static_cast<double>(ms)));
}

// y[k] = x[k] * inv * w[k], each product rounded in fp32 (the RMSNorm of eight values with inv from
// inv_rms_of, w the word of their bf16 weights); y may be x.
__device__ __forceinline__ void norm8(const float (&x)[8], float inv, const uint4 w, float (&y)[8]) {
  float wf[8];
  unpack_bf16x8(w, wf);
  DG_UNROLL
  for (int k = 0; k < 8; ++k) y[k] = __fmul_rn(__fmul_rn(x[k], inv), wf[k]);
}

}  // namespace dgemma::cuda
