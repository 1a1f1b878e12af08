// The device layout of quantised weights (backend/cuda/quant_layout.h) against the definition of the
// mma.sync m16n8k16 B fragment: reading the repacked bytes the way the W4A16 / W8A16 kernels do (one
// 8- or 16-byte load per lane quad, row and 64-value stage; scales 4 bytes per row and stage) must
// yield, for lane quad b and k16 step kk, exactly the checkpoint's values at
// k = 16 kk + 2 b (+1) (register b0) and 16 kk + 8 + 2 b (+1) (b1), and their block's scale.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "backend/cuda/quant_layout.h"

namespace dgemma::cuda {
namespace {

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng() & 0xff);
  return v;
}

TEST(QuantLayout, Nvfp4BytesOfEachLaneQuadAreItsFragmentValues) {
  const int rows = 3, K = 192;  // three stages a row
  const std::vector<uint8_t> src = random_bytes(rows * K / 2, 1);
  std::vector<uint8_t> dev = src;
  repack_quant_weights(false, dev.data(), static_cast<int64_t>(dev.size()));
  auto nibble = [&](int r, int k) { return (src[r * K / 2 + k / 2] >> (4 * (k & 1))) & 0xf; };
  for (int r = 0; r < rows; ++r)
    for (int st = 0; st < K / 64; ++st)
      for (int b = 0; b < 4; ++b) {
        const uint8_t* load = dev.data() + r * K / 2 + st * 32 + fp4_slice_pos(b, 0, 0);  // the kernel's 8 bytes
        for (int kk = 0; kk < 4; ++kk)
          for (int h = 0; h < 2; ++h) {
            const uint8_t byte = load[2 * kk + h];  // kernel: bytes 2 kk (b0) and 2 kk + 1 (b1)
            const int k = st * 64 + 16 * kk + 8 * h + 2 * b;
            EXPECT_EQ(byte & 0xf, nibble(r, k)) << r << " " << st << " " << b << " " << kk << " " << h;
            EXPECT_EQ(byte >> 4, nibble(r, k + 1));
          }
      }
}

TEST(QuantLayout, Fp8BytesOfEachLaneQuadAreItsFragmentValues) {
  const int rows = 3, K = 128;
  const std::vector<uint8_t> src = random_bytes(rows * K, 2);
  std::vector<uint8_t> dev = src;
  repack_quant_weights(true, dev.data(), static_cast<int64_t>(dev.size()));
  for (int r = 0; r < rows; ++r)
    for (int st = 0; st < K / 64; ++st)
      for (int b = 0; b < 4; ++b) {
        const uint8_t* load = dev.data() + r * K + st * 64 + fp8_slice_pos(b, 0, 0);  // the kernel's 16 bytes
        for (int kk = 0; kk < 4; ++kk)
          for (int h = 0; h < 2; ++h) {
            const int k = st * 64 + 16 * kk + 8 * h + 2 * b;  // kernel: word kk, low half b0, high half b1
            EXPECT_EQ(load[4 * kk + 2 * h], src[r * K + k]);
            EXPECT_EQ(load[4 * kk + 2 * h + 1], src[r * K + k + 1]);
          }
      }
}

TEST(QuantLayout, RepacksArePermutationsOfEachSlice) {
  for (bool fp8 : {false, true}) {
    const int slice = fp8 ? 64 : 32;
    std::vector<uint8_t> v(slice);
    for (int i = 0; i < slice; ++i) v[i] = static_cast<uint8_t>(i);
    repack_quant_weights(fp8, v.data(), slice);
    std::vector<int> seen(slice, 0);
    for (uint8_t x : v) ++seen[x];
    for (int c : seen) EXPECT_EQ(c, 1);
  }
}

TEST(QuantLayout, BlockScalesAreStageMajor) {
  const int E = 2, N = 5, K = 192, G = K / 16, KT = K / 64;
  const std::vector<uint8_t> src = random_bytes(E * N * G, 3);
  std::vector<uint8_t> dev(src.size());
  repack_block_scales(src.data(), dev.data(), E, N, K);
  for (int e = 0; e < E; ++e)
    for (int kt = 0; kt < KT; ++kt)
      for (int n = 0; n < N; ++n)
        for (int kk = 0; kk < 4; ++kk)  // the kernel: byte kk of the row's 4 is the scale of k16 step kk
          EXPECT_EQ(dev[((e * KT + kt) * N + n) * 4 + kk], src[(e * N + n) * G + (kt * 64 + 16 * kk) / 16]);
}

}  // namespace
}  // namespace dgemma::cuda
