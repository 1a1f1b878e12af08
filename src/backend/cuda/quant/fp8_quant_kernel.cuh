#pragma once
// FP8-dynamic's activation quantisation (weight.h ActQuant::kFp8Token) for the W8A8 paths, in a header
// so that the unit tests run it on the host through tests/unit/backend/cuda_emulator.h. Bit for bit the
// CPU reference's quant_ref::quantize_fp8_per_token: per row t of bf16 x [T, K]
//   s_t = max(amax_t / 448, 1 / (448 * 512)),  q[t, k] = e4m3(clamp(x[t, k] / s_t, +-448))
// with round-to-nearest-even, saturation at 448 and NaN -> 0x7f (f32_to_f8e4m3). amax is a max, so any
// order gives the CPU's value (fmaxf skips NaN inputs as std::max(amax, NaN) does); the divisions are
// IEEE (__fdiv_rn, never the fast reciprocal). On the device fp8_gemm.cu includes core/common.cuh first.
// The scale, amax and code helpers are the one place of the rule for the kernels that write FP8 rows
// beside their bf16 output (layer/residual_kernel.cuh, layer/gelu_kernel.cuh).
// What the kernel needs: threadIdx / blockIdx, uint4, uint2 / make_uint2, __float_as_uint /
// __uint_as_float, __fadd_rn, __fdiv_rn, fmaxf / fabsf, __shfl_xor_sync and core/bf16_words.cuh's
// unpack_bf16x8.
#include <cstdint>

#include "backend/cuda/core/kernel_macros.cuh"

namespace dgemma::cuda {

constexpr int kFp8QuantWarps = 4;  // warps per block: kFp8QuantWarps / W rows of W warps each
constexpr float kFp8QuantMax = 448.0f;
constexpr float kFp8QuantMinScale = 1.0f / (448.0f * 512.0f);  // quant_ref::kFp8MinScale (an all-zero row)

// Internal linkage (as layer/residual_kernel.cuh): the unit tests' host build shares a binary with the
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

// The row's scale s_t from its absolute maximum (the rule above).
__device__ __forceinline__ float fp8_row_scale(float amax) {
  return fmaxf(__fdiv_rn(amax, kFp8QuantMax), kFp8QuantMinScale);
}

// The absolute maximum of amax and eight values (fmaxf skips a NaN value).
__device__ __forceinline__ float fp8_amax8(float amax, const float (&f)[8]) {
  DG_UNROLL
  for (int k = 0; k < 8; ++k) amax = fmaxf(amax, fabsf(f[k]));
  return amax;
}

// The codes of eight values at scale s, little-endian in two words (value k in byte k).
__device__ __forceinline__ uint2 fp8_codes8(const float (&f)[8], float s) {
  uint32_t w[2] = {0, 0};
  DG_UNROLL
  for (int k = 0; k < 8; ++k) w[k / 4] |= e4m3_code(__fdiv_rn(f[k], s)) << (8 * (k % 4));
  return make_uint2(w[0], w[1]);
}

// W warps a row (W = 1, 2 or 4; fp8_quant_row_warps), kFp8QuantWarps / W rows a block; `words` = K / 8
// (16-byte words of bf16). q: the row's codes, little-endian in words of four; scales[t] = s_t. The
// row's warps each reduce their words' amax, then meet in shared memory. Why several warps a row: a
// warp walking a 2,816-wide row makes 11 dependent-latency trips twice (amax, then the codes), and at
// T = 256 four rows a block leave half the SMs idle; the step runs ~120 of these launches.
template <int W>
__global__ void __launch_bounds__(32 * kFp8QuantWarps)
    quantize_fp8_rows_kernel(const uint4* __restrict__ x, int64_t T, int64_t words, uint32_t* __restrict__ q,
                             float* __restrict__ scales) {
  static_assert(W == 1 || W == 2 || W == 4, "warps a row");
  constexpr int kRowsPerBlock = kFp8QuantWarps / W;
  __shared__ float row_amax[kFp8QuantWarps];
  const int warp = static_cast<int>(threadIdx.x >> 5), lane = static_cast<int>(threadIdx.x & 31);
  const int r = warp / W, part = warp % W;  // the block's row, this warp's place in it
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + r;
  const bool valid = t < T;  // no early return: every thread reaches the barrier
  const uint4* xr = x + (valid ? t : 0) * words;
  const int64_t first = static_cast<int64_t>(part) * 32 + lane, stride = 32 * W;
  float amax = 0.0f;
  if (valid) {
    for (int64_t i = first; i < words; i += stride) {
      float f[8];
      unpack_bf16x8(xr[i], f);
      amax = fp8_amax8(amax, f);
    }
  }
  DG_UNROLL
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  if (W > 1) {
    if (lane == 0) row_amax[warp] = amax;
    __syncthreads();
    amax = row_amax[r * W];
    DG_UNROLL
    for (int j = 1; j < W; ++j) amax = fmaxf(amax, row_amax[r * W + j]);
  }
  if (!valid) return;
  const float s = fp8_row_scale(amax);
  if (part == 0 && lane == 0) scales[t] = s;
  uint32_t* qr = q + 2 * t * words;
  for (int64_t i = first; i < words; i += stride) {  // the row again (from L1 / L2)
    float f[8];
    unpack_bf16x8(xr[i], f);
    const uint2 w = fp8_codes8(f, s);
    qr[2 * i] = w.x;
    qr[2 * i + 1] = w.y;
  }
}

// Warps a row for rows of `words` 16-byte words: enough that each lane takes at most ~2-3 words.
inline int fp8_quant_row_warps(int64_t words) { return words >= 256 ? 4 : words >= 64 ? 2 : 1; }
inline int64_t fp8_quant_blocks(int64_t T, int row_warps) {
  const int64_t rows_per_block = kFp8QuantWarps / row_warps;
  return (T + rows_per_block - 1) / rows_per_block;
}

}  // namespace

}  // namespace dgemma::cuda
