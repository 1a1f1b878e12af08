// The table kernel of gelu_mul_halves (src/backend/cuda/layer/gelu_kernel.cuh) run on the host through
// cuda_emulator.h, bit for bit against the element formula of the vectorised kernel and the CPU
// reference, bf16(bf16(gelu_tanh(gate)) * up), for every one of the 65,536 bf16 gates (in the table,
// outside it, zeros, subnormals, infinities, NaNs), with a grid of fewer blocks than rounds (each
// block loops, loading the next round ahead) and a partial last round.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "util/bf16.h"

// The emulator first: it provides the device operations that the kernel headers use.
// clang-format off
#include "cuda_emulator.h"
#include "backend/cuda/core/bf16_words.cuh"
#include "backend/cuda/layer/gelu_kernel.cuh"
// clang-format on

namespace dgemma::cuda {
namespace {

TEST(GeluEmulated, TableIndexCoversTheTabulatedBinades) {
  EXPECT_EQ(gelu_table_index(0x3f80), (0 * kGeluBinades + 8) * 128);  // 1.0: binade 2^0
  EXPECT_EQ(gelu_table_index(0xbf80), (1 * kGeluBinades + 8) * 128);  // -1.0
  EXPECT_EQ(gelu_table_index(0x3b80), 0);                             // 2^-8: the first entry
  EXPECT_EQ(gelu_table_index(0x417f), kGeluBinades * 128 - 1);         // just below 16
  EXPECT_EQ(gelu_table_index(0x4180), -1);                            // 16
  EXPECT_EQ(gelu_table_index(0x3b7f), -1);                            // just below 2^-8
  EXPECT_EQ(gelu_table_index(0x0000), -1);
  EXPECT_EQ(gelu_table_index(0x7fc0), -1);  // NaN
}

TEST(GeluEmulated, EveryGateMatchesTheElementFormula) {
  const int64_t I = 64 + 8, T = 65536 / 8 + 3;  // odd half rows; every bf16 gate at least once
  std::vector<uint16_t> gu(static_cast<size_t>(T * 2 * I));
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  int64_t next = 0;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < I; ++i) {
      gu[static_cast<size_t>(t * 2 * I + i)] = static_cast<uint16_t>(next++ & 0xffff);
      gu[static_cast<size_t>(t * 2 * I + I + i)] = f32_to_bf16(nd(rng));
    }
  const int64_t words = T * I / 8;
  std::vector<uint16_t> got(static_cast<size_t>(T * I), 0x7fc1);
  const auto* in = reinterpret_cast<const uint4*>(gu.data());
  auto* out = reinterpret_cast<uint4*>(got.data());
  const int threads = 256, grid = 5;  // 2 x 256 x 5 words a round: rounds with a partial last one
  emu::launch([&] { gelu_mul_halves_table_kernel(in, out, words, I / 8); }, grid, 1, 0, threads);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < I; ++i) {
      const float g = bf16_to_f32(gu[static_cast<size_t>(t * 2 * I + i)]);
      const float u = bf16_to_f32(gu[static_cast<size_t>(t * 2 * I + I + i)]);
      const uint16_t want = f32_to_bf16(round_bf16(gelu_tanh(g)) * u);
      ASSERT_EQ(got[static_cast<size_t>(t * I + i)], want)
          << "gate 0x" << std::hex << gu[static_cast<size_t>(t * 2 * I + i)] << " up 0x"
          << gu[static_cast<size_t>(t * 2 * I + I + i)];
    }
}

}  // namespace
}  // namespace dgemma::cuda
