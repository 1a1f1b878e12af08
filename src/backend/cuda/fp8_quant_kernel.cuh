#pragma once
// FP8-dynamic's activation quantisation (weight.h ActQuant::kFp8Token) for the W8A8 paths, in a header
// so that the unit tests run it on the host through tests/unit/backend/cuda_emulator.h. Bit for bit the
// CPU reference's cpu::quantize_fp8_per_token: per row t of bf16 x [T, K]
//   s_t = max(amax_t / 448, 1 / (448 * 512)),  q[t, k] = e4m3(clamp(x[t, k] / s_t, +-448))
// with round-to-nearest-even, saturation at 448 and NaN -> 0x7f (f32_to_f8e4m3). amax is a max, so any
// order gives the CPU's value (fmaxf skips NaN inputs as std::max(amax, NaN) does); the divisions are
// IEEE (__fdiv_rn, never the fast reciprocal). On the device fp8_gemm.cu includes common.cuh first.
// What the kernel needs: threadIdx / blockIdx, uint4, __float_as_uint / __uint_as_float, __fadd_rn,
// __fdiv_rn, fmaxf / fabsf, __shfl_xor_sync and bf16_words.cuh's unpack_bf16x8.
#include <cstdint>

#include "backend/cuda/kernel_macros.cuh"

namespace dgemma::cuda {

constexpr int kFp8QuantWarps = 4;  // rows per block: one warp a row
constexpr float kFp8QuantMax = 448.0f;
constexpr float kFp8QuantMinScale = 1.0f / (448.0f * 512.0f);  // cpu::kFp8MinScale (an all-zero row)

// Internal linkage (as residual_kernel.cuh): the unit tests' host build shares a binary with the
// device build's host stub.
namespace {

// The E4M3 (fn) code of v, as f32_to_f8e4m3 (weight.cpp) for every float: integer rounding of the
// float's bits instead of frexp / nearbyint, same results.
__device__ __forceinline__ uint32_t e4m3_code(float v) {
  const uint32_t u = __float_as_uint(v);
  const uint32_t sign = (u >> 24) & 0x80u;
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return 0x7fu;          // NaN (its sign dropped, as on the CPU)
  if (a >= 0x43e00000u) return sign | 0x7eu;  // |v| >= 448 (and infinities) saturate
  if (a < 0x3c800000u) {
    // below 2^-6: subnormal steps of 2^-9; |v| * 2^9 < 8 is exact, and its sum with 2^23 rounds it to
    // an integer, ties to even (8 is the smallest normal's code)
    const float m = __fadd_rn(__uint_as_float(a) * 512.0f, 8388608.0f);
    return sign | (__float_as_uint(m) - 0x4b000000u);
  }
  // normal: the 23-bit mantissa rounded to 3 bits, ties to even; a carry moves into the exponent
  const uint32_t r = a + 0x7ffffu + ((a >> 20) & 1u);
  const uint32_t code = (((r >> 23) - 120u) << 3) | ((r >> 20) & 7u);  // exponent bias 127 -> 7
  return sign | (code > 0x7eu ? 0x7eu : code);
}

// One warp a row; `words` = K / 8 (16-byte words of bf16). q: the row's codes, little-endian in words
// of four; scales[t] = s_t.
__global__ void __launch_bounds__(32 * kFp8QuantWarps)
    quantize_fp8_rows_kernel(const uint4* __restrict__ x, int64_t T, int64_t words, uint32_t* __restrict__ q,
                             float* __restrict__ scales) {
  const int lane = static_cast<int>(threadIdx.x & 31);
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kFp8QuantWarps + (threadIdx.x >> 5);
  if (t >= T) return;  // whole warps: the shuffles below see full warps only
  const uint4* xr = x + t * words;
  float amax = 0.0f;
  for (int64_t i = lane; i < words; i += 32) {
    float f[8];
    unpack_bf16x8(xr[i], f);
    DG_UNROLL
    for (int k = 0; k < 8; ++k) amax = fmaxf(amax, fabsf(f[k]));
  }
  DG_UNROLL
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  const float s = fmaxf(__fdiv_rn(amax, kFp8QuantMax), kFp8QuantMinScale);
  if (lane == 0) scales[t] = s;
  uint32_t* qr = q + 2 * t * words;
  for (int64_t i = lane; i < words; i += 32) {  // the row again (from L1 / L2)
    float f[8];
    unpack_bf16x8(xr[i], f);
    uint32_t w[2] = {0, 0};
    DG_UNROLL
    for (int k = 0; k < 8; ++k) w[k / 4] |= e4m3_code(__fdiv_rn(f[k], s)) << (8 * (k % 4));
    qr[2 * i] = w[0];
    qr[2 * i + 1] = w[1];
  }
}

}  // namespace

}  // namespace dgemma::cuda
