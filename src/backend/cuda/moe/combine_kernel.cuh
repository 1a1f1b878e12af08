#pragma once
// The MoE combine of moe/combine.cu (launch_moe_combine) in a header so that the unit tests run it on
// the host through tests/unit/backend/cuda_emulator.h. On the device, moe/combine.cu includes core/common.cuh
// first. What the kernel needs: threadIdx / blockIdx, __ldg, __fadd_rn, __byte_perm, uint4 and the
// word helpers of core/bf16_words.cuh.
#include <cstdint>

#include "backend/cuda/core/kernel_macros.cuh"

namespace dgemma::cuda {

constexpr int kCombineThreads = 128;
constexpr int kCombineMaxK = 64;

// Internal linkage (as layer/residual_kernel.cuh): the unit tests' host build of the kernel shares a binary
// with the device build's host stub.
namespace {

// One word (eight columns) of one token per thread, blocks of kCombineThreads words of a token: at
// H = 2816 a token's 352 words take three blocks and every thread one word, so all of a thread's K
// row loads are in flight at once and none waits for a second loop trip (one block of 128 threads a
// token looped three times, each trip another round of K loads). The slot order is read by every
// thread straight from global memory (the same K words for the whole block: L1 broadcasts) instead
// of through shared memory, so there is no barrier between it and the row loads. The adds are the
// same: in order, each rounded to bf16, eight values at a time by round_bf16x8 (four cvt
// instructions instead of f32_to_bf16's integer steps per value: at K = 8 those were ~50 integer
// instructions an element, as much issue time as the kernel's 8 x 2 reads an element take of HBM).
__global__ void __launch_bounds__(kCombineThreads)
    combine_vec_kernel(const uint4* __restrict__ y, const int32_t* __restrict__ order, int K, int64_t words,
                       int64_t chunks, uint4* __restrict__ out) {
  const int64_t t = blockIdx.x / chunks;
  const int64_t i = (blockIdx.x % chunks) * kCombineThreads + threadIdx.x;
  if (i >= words) return;
  const int32_t* ot = order + t * K;
  const uint4* yt = y + t * K * words + i;
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
  out[t * words + i] = pack_bf16x8_exact(acc);
}

}  // namespace

}  // namespace dgemma::cuda
