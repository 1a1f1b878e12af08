// The table kernel of gelu_mul_halves (src/backend/cuda/layer/gelu_kernel.cuh) run on the host through
// cuda_emulator.h, bit for bit against the element formula of the vectorised kernel and the CPU
// reference, bf16(bf16(gelu_tanh(gate)) * up), for every one of the 65,536 bf16 gates (in the table,
// outside it, zeros, subnormals, infinities, NaNs), with a grid of fewer blocks than rounds (each
// block loops, loading the next round ahead) and a partial last round. The FP8-rows kernel
// (gelu_mul_halves_fp8_kernel) writes the same output (the element formula), with and without its table,
// and byte for byte the FP8 rows (backend.h Fp8Rows) that launch_quantize_fp8_rows's kernel and the CPU
// reference write for it (fp8_rows_check.h), at one, two and four words a thread, grids of a block a row
// and of fewer blocks than rows, with an all-zero row (the floor scale), a row of large values, a row with
// one outlier (subnormal codes) and rows of tiny values.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "backend/tensor.h"
#include "util/bf16.h"

// The emulator first: it provides the device operations that the kernel headers use.
// clang-format off
#include "cuda_emulator.h"
#include "backend/cuda/core/bf16_words.cuh"
#include "backend/cuda/layer/gelu_kernel.cuh"
#include "fp8_rows_check.h"
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

TEST(GeluEmulated, RowPlanCoversTheModelShapes) {
  EXPECT_EQ(gelu_row_plan(264).per, 1);  // I = 2,112: one word a thread
  EXPECT_EQ(gelu_row_plan(264).threads, 288);
  EXPECT_EQ(gelu_row_plan(1000).per, 2);
  EXPECT_EQ(gelu_row_plan(2048).per, 4);
  EXPECT_EQ(gelu_row_plan(2049).per, 0);  // the composed ops
  for (int64_t iw = 1; iw <= 2048; ++iw) {
    const GeluRowPlan p = gelu_row_plan(iw);
    ASSERT_TRUE(p.threads % 32 == 0 && p.threads >= 32 && p.threads <= kGeluRowMaxThreads) << iw;
    ASSERT_GE(int64_t{p.per} * p.threads, iw) << iw;
  }
}

struct FpShape {
  int64_t T, I;
  int grid;  // 0: a block a row
  bool table;
};

TEST(GeluEmulated, Fp8RowsKernelWritesTheOutputAndItsFp8Rows) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.5f);
  for (const FpShape& f : {FpShape{6, 2112, 0, false}, FpShape{6, 2112, 4, true}, FpShape{7, 72, 3, false},
                           FpShape{6, 8000, 0, false}, FpShape{6, 16384, 2, true}, FpShape{9, 16, 0, true}}) {
    const GeluRowPlan plan = gelu_row_plan(f.I / 8);
    const std::string name = "T=" + std::to_string(f.T) + " I=" + std::to_string(f.I) +
                             " per=" + std::to_string(plan.per) + " grid=" + std::to_string(f.grid) +
                             (f.table ? " table" : "");
    ASSERT_GT(plan.per, 0) << name;
    Tensor gu = host_tensor(ScalarType::kBF16, {f.T, 2 * f.I});
    uint16_t* p = gu.ptr<uint16_t>();
    for (int64_t t = 0; t < f.T; ++t)
      for (int64_t i = 0; i < f.I; ++i) {
        float g = nd(rng), u = nd(rng);
        if (t == 1) g = u = 0.0f;                  // an all-zero row
        if (t == 2) u *= 3000.0f;                  // large values
        if (t == 3 && i == 5) g = u = 12.0f;       // one outlier: the rest small or subnormal codes
        if (t >= 4) u *= t == 4 ? 1e-3f : 1e-30f;  // tiny values
        p[t * 2 * f.I + i] = f32_to_bf16(g);
        p[t * 2 * f.I + f.I + i] = f32_to_bf16(u);
      }
    std::vector<uint16_t> out(static_cast<size_t>(f.T * f.I), 0x7fc1);
    std::vector<uint64_t> q(static_cast<size_t>(f.T * f.I / 8), 0xa5a5a5a5a5a5a5a5ull);
    std::vector<float> scales(static_cast<size_t>(f.T), -1.0f);
    const auto* in = reinterpret_cast<const uint4*>(p);
    auto* o = reinterpret_cast<uint4*>(out.data());
    auto* qw = reinterpret_cast<uint2*>(q.data());
    const int64_t iw = f.I / 8;
    emu::launch(
        [&] {
          if (plan.per == 1 && f.table)
            gelu_mul_halves_fp8_kernel<1, true>(in, o, qw, scales.data(), f.T, iw);
          else if (plan.per == 1)
            gelu_mul_halves_fp8_kernel<1, false>(in, o, qw, scales.data(), f.T, iw);
          else if (plan.per == 2 && f.table)
            gelu_mul_halves_fp8_kernel<2, true>(in, o, qw, scales.data(), f.T, iw);
          else if (plan.per == 2)
            gelu_mul_halves_fp8_kernel<2, false>(in, o, qw, scales.data(), f.T, iw);
          else if (f.table)
            gelu_mul_halves_fp8_kernel<4, true>(in, o, qw, scales.data(), f.T, iw);
          else
            gelu_mul_halves_fp8_kernel<4, false>(in, o, qw, scales.data(), f.T, iw);
        },
        f.grid > 0 ? f.grid : static_cast<int>(f.T), 1, 0, plan.threads);
    for (int64_t t = 0; t < f.T; ++t)
      for (int64_t i = 0; i < f.I; ++i) {  // the element formula, as the other kernels
        const float g = bf16_to_f32(p[t * 2 * f.I + i]), u = bf16_to_f32(p[t * 2 * f.I + f.I + i]);
        ASSERT_EQ(out[static_cast<size_t>(t * f.I + i)], f32_to_bf16(round_bf16(gelu_tanh(g)) * u))
            << name << ": row " << t << " element " << i;
      }
    const auto* codes = reinterpret_cast<const uint8_t*>(q.data());
    fp8_rows_check::expect_fp8_rows_of(name, out.data(), f.T, f.I, codes, scales.data());
  }
}

}  // namespace
}  // namespace dgemma::cuda
