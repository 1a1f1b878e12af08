// The device layout of quantised weights (backend/cuda/quant_layout.h) against the definition of the
// mma.sync m16n8k16 B fragment: reading the repacked bytes the way the W4A16 / W8A16 kernels do (one
// 8- or 16-byte load per lane quad, row and 64-value stage; scales 4 bytes per row and stage) must
// yield, for lane quad b and k16 step kk, exactly the checkpoint's values at
// k = 16 kk + 2 b (+1) (register b0) and 16 kk + 8 + 2 b (+1) (b1), and their block's scale.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
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

namespace dgemma::cuda {
namespace {

float bf16_bits_value(uint32_t b16) {  // exact, subnormals included
  const uint32_t u = b16 << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// The reference values (docs/QUANT.md): E4M3 fn and E2M1.
double e4m3_ref(int c) {
  const int s = c >> 7, e = (c >> 3) & 15, m = c & 7;
  const double v = e == 0 ? m * std::ldexp(1.0, -9) : (1 + m / 8.0) * std::ldexp(1.0, e - 7);
  return s ? -v : v;
}
double e2m1_ref(int n) {
  static const double mag[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  return (n & 8) ? -mag[n & 7] : mag[n & 7];
}

TEST(QuantLayout, E4m3RegisterConversionIsExactForEveryCode) {
  for (int c0 = 0; c0 < 256; ++c0) {
    const int c1 = 255 - c0;
    const uint32_t w = static_cast<uint32_t>(c0) | static_cast<uint32_t>(c1) << 8 | 0xA5u << 16 | 0x3Cu << 24;
    for (int half = 0; half < 2; ++half) {
      const uint32_t bits = e4m3x2_bits(half ? spread_hi(w) : spread_lo(w));
      const int lo = half ? 0xA5 : c0, hi = half ? 0x3C : c1;
      if ((lo & 0x7f) != 0x7f) {  // the NaN codes (never written by a quantiser) become 480
        EXPECT_EQ(std::ldexp(bf16_bits_value(bits & 0xffff), 120), e4m3_ref(lo)) << lo;
      }
      if ((hi & 0x7f) != 0x7f) {
        EXPECT_EQ(std::ldexp(bf16_bits_value(bits >> 16), 120), e4m3_ref(hi)) << hi;
      }
    }
  }
  EXPECT_EQ(std::ldexp(1.0, 120), bf16_bits_value(kBf16x2Pow120 & 0xffff));
  EXPECT_EQ(kBf16x2Pow120 >> 16, kBf16x2Pow120 & 0xffff);
}

TEST(QuantLayout, E2m1RegisterConversionIsExactForEveryByte) {
  for (int c = 0; c < 256; ++c) {
    const uint32_t bits = e2m1x2_bits(static_cast<uint32_t>(c));
    EXPECT_EQ(std::ldexp(bf16_bits_value(bits & 0xffff), 126), e2m1_ref(c & 15)) << c;
    EXPECT_EQ(std::ldexp(bf16_bits_value(bits >> 16), 126), e2m1_ref(c >> 4)) << c;
  }
  EXPECT_EQ(std::ldexp(1.0, 126), bf16_bits_value(kBf16x2Pow126 & 0xffff));
}

}  // namespace
}  // namespace dgemma::cuda
