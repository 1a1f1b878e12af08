#pragma once
// The in-order bf16 sum of K rows picked by an index list, one 16-byte word at a time: the MoE's sum of
// a token's expert rows, shared by the combine kernel (moe/combine_kernel.cuh) and the FFN residual
// junction, which sums the MoE's slot rows itself (layer/residual_kernel.cuh, FfnArgs::m2_slots). Device
// code, emulated on the host by the unit tests (tests/unit/backend/cuda_emulator.h); the includer provides
// __ldg, __fadd_rn, uint4 and the word helpers of core/bf16_words.cuh.
#include <cstdint>

#include "backend/cuda/core/kernel_macros.cuh"

namespace dgemma::cuda {

// One word (eight columns) of one token's sum: the bf16 running sum of the token's K slot rows in the
// order `ot` gives (slot ot[j] is row ot[j] of yt, rows `words` words apart), every add in fp32 then
// rounded to bf16, eight values at a time by round_bf16x8 (four cvt instructions instead of
// f32_to_bf16's integer steps per value). The slot order is read straight from global memory (the
// same K words for every thread of a block: L1 broadcasts), and all of a group of eight rows' loads
// are issued before their adds.
__device__ __forceinline__ uint4 ordered_sum_word(const uint4* __restrict__ yt,
                                                  const int32_t* __restrict__ ot, int K, int64_t words) {
  float acc[8];
  DG_UNROLL
  for (int k = 0; k < 8; ++k) acc[k] = 0.f;
  int j = 0;
  for (; j + 8 <= K; j += 8) {
    int32_t o[8];
    DG_UNROLL
    for (int q = 0; q < 8; ++q) o[q] = __ldg(ot + j + q);
    uint4 u[8];
    DG_UNROLL
    for (int q = 0; q < 8; ++q) u[q] = yt[o[q] * words];
    DG_UNROLL
    for (int q = 0; q < 8; ++q) {
      float f[8];
      unpack_bf16x8(u[q], f);
      DG_UNROLL
      for (int k = 0; k < 8; ++k) acc[k] = __fadd_rn(acc[k], f[k]);
      round_bf16x8(acc);
    }
  }
  for (; j < K; ++j) {
    float f[8];
    unpack_bf16x8(yt[__ldg(ot + j) * words], f);
    DG_UNROLL
    for (int k = 0; k < 8; ++k) acc[k] = __fadd_rn(acc[k], f[k]);
    round_bf16x8(acc);
  }
  return pack_bf16x8_exact(acc);
}

}  // namespace dgemma::cuda
