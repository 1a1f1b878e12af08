// The W8A8 activation quantisation kernel (src/backend/cuda/quant/fp8_quant_kernel.cuh) run on the host
// through cuda_emulator.h against the CPU reference (quant_ref::quantize_fp8_per_token, f32_to_f8e4m3), bit
// for bit: its E4M3 rounding over every bf16 value and over fp32 values at and around every rounding
// tie, and whole rows (random, an all-zero row, rows with outliers, NaN and infinity, subnormal-range
// values, K from 8 to 8192 with rows of several words a lane).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backend/quant_reference.h"
#include "backend/weight.h"
#include "util/bf16.h"

// The emulator first: it provides the device operations that the kernel headers use.
// clang-format off
#include "cuda_emulator.h"
#include "backend/cuda/core/bf16_words.cuh"
#include "backend/cuda/quant/fp8_quant_kernel.cuh"
// clang-format on

namespace dgemma {
namespace {

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// The CPU's code of v as quantize_fp8_per_token forms it (clamp, then the nearest code).
uint32_t cpu_code(float v) { return f32_to_f8e4m3(std::isnan(v) ? v : std::clamp(v, -448.0f, 448.0f)); }

TEST(Fp8QuantEmulated, CodeOfEveryBf16Value) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const float v = bf16_to_f32(static_cast<uint16_t>(b));
    ASSERT_EQ(cuda::e4m3_code(v), cpu_code(v)) << "bf16 0x" << std::hex << b;
  }
}

TEST(Fp8QuantEmulated, CodeAtEveryTieAndItsNeighbours) {
  // Every midpoint between consecutive positive E4M3 values (subnormal and normal), one float step
  // either side, and the values themselves, both signs.
  for (uint32_t c = 0; c < 0x7e; ++c) {
    const float lo = f8e4m3_to_f32(static_cast<uint8_t>(c)), hi = f8e4m3_to_f32(static_cast<uint8_t>(c + 1));
    const float mid = 0.5f * (lo + hi);
    for (float v : {lo, hi, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1000.0f)})
      for (float s : {1.0f, -1.0f}) ASSERT_EQ(cuda::e4m3_code(s * v), cpu_code(s * v)) << s * v;
  }
  for (float v : {448.0f, 449.0f, 464.0f, 1e30f, std::numeric_limits<float>::infinity(), 0.0f, -0.0f, 1e-45f, 1e-38f,
                  std::numeric_limits<float>::quiet_NaN()})
    for (float s : {1.0f, -1.0f}) EXPECT_EQ(cuda::e4m3_code(s * v), cpu_code(s * v)) << s * v;
  std::mt19937 rng(7);
  for (int i = 0; i < 200000; ++i) {  // random finite floats of magnitude 2^-20 .. 2^10
    const uint32_t u = (rng() & 0x807fffffu) | ((107u + rng() % 30u) << 23);
    ASSERT_EQ(cuda::e4m3_code(from_bits(u)), cpu_code(from_bits(u))) << from_bits(u);
  }
}

struct Rows {
  int64_t T, K;
};

// One row layout (w warps a row) against the CPU's codes and scales.
void check_layout(const std::vector<uint16_t>& x, int64_t T, int64_t K, int w, const std::vector<float>& want,
                  const std::vector<float>& want_s, const std::string& at) {
  const int64_t words = K / 8;
  std::vector<uint32_t> q(x.size() / 4, 0xdeadbeefu);
  std::vector<float> s(static_cast<size_t>(T), -1.0f);
  const auto* xv = reinterpret_cast<const uint4*>(x.data());
  emu::launch(
      [&] {
        if (w == 4) cuda::quantize_fp8_rows_kernel<4>(xv, T, words, q.data(), s.data());
        else if (w == 2) cuda::quantize_fp8_rows_kernel<2>(xv, T, words, q.data(), s.data());
        else cuda::quantize_fp8_rows_kernel<1>(xv, T, words, q.data(), s.data());
      },
      static_cast<int>(cuda::fp8_quant_blocks(T, w)), 1, 0, 32 * cuda::kFp8QuantWarps);
  for (int64_t t = 0; t < T; ++t) {
    uint32_t a, b;
    std::memcpy(&a, &s[static_cast<size_t>(t)], 4);
    std::memcpy(&b, &want_s[static_cast<size_t>(t)], 4);
    ASSERT_EQ(a, b) << at << ": scale of row " << t;
  }
  const auto* codes = reinterpret_cast<const uint8_t*>(q.data());
  for (size_t i = 0; i < x.size(); ++i) {
    const float got = f8e4m3_to_f32(codes[i]);
    if (std::isnan(want[i])) {
      ASSERT_TRUE(std::isnan(got)) << at << ": element " << i;
      continue;
    }
    uint32_t a, b;
    std::memcpy(&a, &got, 4);
    std::memcpy(&b, &want[i], 4);
    ASSERT_EQ(a, b) << at << ": element " << i << " (" << bf16_to_f32(x[i]) << ")";
  }
}

// Every row layout (1, 2 or 4 warps a row; launch_quantize_fp8_rows picks one by the row's words).
void check_rows(const std::vector<uint16_t>& x, int64_t T, int64_t K, const std::string& name) {
  std::vector<float> want(x.size()), want_s(static_cast<size_t>(T));
  for (size_t i = 0; i < x.size(); ++i) want[i] = bf16_to_f32(x[i]);
  quant_ref::quantize_fp8_per_token(want.data(), T, K, want_s.data());
  for (const int w : {1, 2, 4}) {
    const bool automatic = w == cuda::fp8_quant_row_warps(K / 8);
    check_layout(x, T, K, w, want, want_s,
                 name + " (" + std::to_string(w) + " warps a row" + (automatic ? ", the automatic choice)" : ")"));
  }
}

TEST(Fp8QuantEmulated, RowsMatchTheCpuReference) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  // T not a multiple of the rows a block (partial blocks), rows of 1 .. 1,024 words (several a lane).
  for (const Rows r : {Rows{1, 8}, Rows{5, 64}, Rows{9, 264}, Rows{3, 2816}, Rows{2, 8192}, Rows{7, 704}, Rows{3, 4096}}) {
    const std::string name = "T=" + std::to_string(r.T) + " K=" + std::to_string(r.K);
    std::vector<uint16_t> x(static_cast<size_t>(r.T * r.K));
    for (size_t i = 0; i < x.size(); ++i) {
      const int64_t t = static_cast<int64_t>(i) / r.K;
      const float scale = t % 3 == 0 ? 1.0f : (t % 3 == 1 ? 300.0f : 1e-3f);
      x[i] = f32_to_bf16(nd(rng) * scale * (i % 97 == 0 ? 50.0f : 1.0f));  // outliers
    }
    check_rows(x, r.T, r.K, name);
  }
  // Special rows: all zero (the floor scale), signed zeros, a NaN (not in amax, stays NaN), an
  // infinity (s = inf: the finite values quantise to 0, the infinity to NaN), tiny values whose
  // scaled values are E4M3 subnormals.
  const int64_t K = 128;
  std::vector<uint16_t> x(static_cast<size_t>(6 * K), 0);
  for (int64_t k = 0; k < K; ++k) {
    x[static_cast<size_t>(K + k)] = k % 2 ? 0x8000 : 0;
    x[static_cast<size_t>(2 * K + k)] = f32_to_bf16(nd(rng));
    x[static_cast<size_t>(3 * K + k)] = f32_to_bf16(nd(rng));
    x[static_cast<size_t>(4 * K + k)] = f32_to_bf16(k == 5 ? 1.0f : nd(rng) * 1e-3f);
    x[static_cast<size_t>(5 * K + k)] = f32_to_bf16(nd(rng) * 1e-30f);
  }
  x[static_cast<size_t>(2 * K + 17)] = 0x7fc0;  // NaN
  x[static_cast<size_t>(3 * K + 3)] = 0xff80;   // -inf
  check_rows(x, 6, K, "special rows");
}

}  // namespace
}  // namespace dgemma
