#pragma once
// The MoE combine of moe/combine.cu (launch_moe_combine) in a header so that the unit tests run it on
// the host through tests/unit/backend/cuda_emulator.h. On the device, moe/combine.cu includes core/common.cuh
// first. What the kernel needs: threadIdx / blockIdx, __ldg, __fadd_rn, __byte_perm, uint4 and the
// word helpers of core/bf16_words.cuh.
#include <cstdint>

#include "backend/cuda/core/kernel_macros.cuh"
#include "backend/cuda/core/ordered_sum.cuh"

namespace dgemma::cuda {

constexpr int kCombineThreads = 128;
constexpr int kCombineMaxK = 64;

// Internal linkage (as layer/residual_kernel.cuh): the unit tests' host build of the kernel shares a binary
// with the device build's host stub.
namespace {

// One word of one token per thread, blocks of kCombineThreads words of a token: at H = 2816 a token's
// 352 words take three blocks and every thread one word, so all of a thread's K row loads are in
// flight at once and none waits for a second loop trip (one block of 128 threads a token looped three
// times, each trip another round of K loads).
__global__ void __launch_bounds__(kCombineThreads)
    combine_vec_kernel(const uint4* __restrict__ y, const int32_t* __restrict__ order, int K, int64_t words,
                       int64_t chunks, uint4* __restrict__ out) {
  const int64_t t = blockIdx.x / chunks;
  const int64_t i = (blockIdx.x % chunks) * kCombineThreads + threadIdx.x;
  if (i >= words) return;
  out[t * words + i] = ordered_sum_word(y + t * K * words + i, order + t * K, K, words);
}

}  // namespace

}  // namespace dgemma::cuda
