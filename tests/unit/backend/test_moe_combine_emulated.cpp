// The MoE combine kernel (src/backend/cuda/moe/combine_kernel.cuh) run on the host through
// cuda_emulator.h against the combine of the CPU reference (cpu/moe.cpp: per token, the bf16 running
// sum of its K expert rows in the order given, rounded after every add), bit for bit: K from 1 to 64
// (the unrolled groups of eight and the tail), rows of one word to several blocks of words with a
// partial last block, and orders that are permutations of the slots.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "util/bf16.h"

// The emulator first: it provides the device operations that the kernel headers use.
// clang-format off
#include "cuda_emulator.h"
#include "backend/cuda/core/bf16_words.cuh"
#include "backend/cuda/moe/combine_kernel.cuh"
// clang-format on

namespace dgemma {
namespace {

TEST(MoeCombineEmulated, MatchesTheInOrderBf16Sum) {
  std::mt19937 rng(31);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  struct Shape {
    int64_t T, H;
    int K;
  };
  for (const Shape s : {Shape{3, 2816, 8}, Shape{2, 8, 1}, Shape{4, 1000, 5}, Shape{2, 2048, 12}, Shape{2, 64, 64},
                        Shape{1, 1032, 3}}) {
    const std::string name = "T=" + std::to_string(s.T) + " H=" + std::to_string(s.H) + " K=" + std::to_string(s.K);
    const int64_t words = s.H / 8, R = s.T * s.K;
    std::vector<uint16_t> y(static_cast<size_t>(R * s.H));
    for (size_t i = 0; i < y.size(); ++i) y[i] = f32_to_bf16(nd(rng) * (i % 7 == 0 ? 100.0f : 1.0f));
    std::vector<int32_t> order(static_cast<size_t>(R));
    for (int64_t t = 0; t < s.T; ++t) {
      auto first = order.begin() + t * s.K;
      std::iota(first, first + s.K, 0);
      std::shuffle(first, first + s.K, rng);
    }
    std::vector<uint16_t> want(static_cast<size_t>(s.T * s.H)), got(want.size(), 0x7fc1);
    for (int64_t t = 0; t < s.T; ++t)
      for (int64_t c = 0; c < s.H; ++c) {
        float acc = 0.0f;
        for (int j = 0; j < s.K; ++j)
          acc = round_bf16(acc + bf16_to_f32(y[static_cast<size_t>((t * s.K + order[t * s.K + j]) * s.H + c)]));
        want[static_cast<size_t>(t * s.H + c)] = f32_to_bf16(acc);
      }
    const int64_t chunks = (words + cuda::kCombineThreads - 1) / cuda::kCombineThreads;
    const auto* yv = reinterpret_cast<const uint4*>(y.data());
    auto* ov = reinterpret_cast<uint4*>(got.data());
    emu::launch([&] { cuda::combine_vec_kernel(yv, order.data(), s.K, words, chunks, ov); },
                static_cast<int>(s.T * chunks), 1, 0, cuda::kCombineThreads);
    for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], want[i]) << name << ": element " << i;
  }
}

}  // namespace
}  // namespace dgemma
