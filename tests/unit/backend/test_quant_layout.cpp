// The device layout of quantised weights (backend/cuda/quant/layout.h) against the definition of the
// mma.sync m16n8k16 B fragment: reading the repacked words the way the W4A16 / W8A16 kernels do (one
// 8- or 16-byte load per lane quad, row and 64-value stage; scale codes 4 bytes per row and stage) and
// decoding them with the kernels' rotate-and-mask must yield, for lane quad b and k16 step kk, exactly
// the checkpoint's values at k = 16 kk + 2 b (+1) (register b0) and 16 kk + 8 + 2 b (+1) (b1), times the
// decode's power of two; the scale codes times the pair bits must give e2m1 * scale exactly.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cuda/quant/layout.h"

namespace dgemma::cuda {
namespace {

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng() & 0xff);
  return v;
}

float bf16_bits_value(uint32_t b16) {  // exact, subnormals included
  const uint32_t u = b16 << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
bool bf16_exact(double v) {  // v is a bf16 value (8 significant bits, normal range)
  const float f = static_cast<float>(v);
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<double>(f) == v && (u & 0xffffu) == 0 && (v == 0 || std::fabs(v) >= std::ldexp(1.0, -126));
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
uint32_t word_at(const uint8_t* p) {
  uint32_t w;
  std::memcpy(&w, p, 4);
  return w;
}

TEST(QuantLayout, Nvfp4WordsOfEachLaneQuadDecodeToItsFragmentValues) {
  const int rows = 3, K = 192;  // three stages a row
  const std::vector<uint8_t> src = random_bytes(rows * K / 2, 1);
  std::vector<uint8_t> dev = src;
  repack_quant_weights(false, dev.data(), static_cast<int64_t>(dev.size()));
  auto nibble = [&](int r, int k) { return (src[r * K / 2 + k / 2] >> (4 * (k & 1))) & 0xf; };
  for (int r = 0; r < rows; ++r)
    for (int st = 0; st < K / 64; ++st)
      for (int b = 0; b < 4; ++b) {
        const uint8_t* load = dev.data() + r * K / 2 + st * 32 + 8 * b;  // the kernel's 8 bytes
        for (int kk = 0; kk < 4; ++kk)
          for (int h = 0; h < 2; ++h) {
            const uint32_t bits = fp4_pair_bits(word_at(load + 4 * (kk >> 1)), 2 * (kk & 1) + h);
            const int k = st * 64 + 16 * kk + 8 * h + 2 * b;
            EXPECT_EQ(std::ldexp(bf16_bits_value(bits & 0xffff), 126), e2m1_ref(nibble(r, k))) << r << " " << st << " " << b << " " << kk << " " << h;
            EXPECT_EQ(std::ldexp(bf16_bits_value(bits >> 16), 126), e2m1_ref(nibble(r, k + 1)));
            // only the pair's bf16 bit positions are set: the decode's masks leave nothing else
            EXPECT_EQ(bits & ~kFp4PairMask, 0u);
          }
      }
}

TEST(QuantLayout, Fp8WordsOfEachLaneQuadDecodeToItsFragmentValues) {
  const int rows = 3, K = 128;
  std::vector<uint8_t> src = random_bytes(rows * K, 2);
  for (auto& c : src)
    if ((c & 0x7f) == 0x7f) c = 0x3f;  // NaN codes: checked below
  std::vector<uint8_t> dev = src;
  repack_quant_weights(true, dev.data(), static_cast<int64_t>(dev.size()));
  for (int r = 0; r < rows; ++r)
    for (int st = 0; st < K / 64; ++st)
      for (int b = 0; b < 4; ++b) {
        const uint8_t* load = dev.data() + r * K + st * 64 + 16 * b;  // the kernel's 16 bytes
        for (int kk = 0; kk < 4; ++kk)
          for (int h = 0; h < 2; ++h) {
            const uint32_t bits = fp8_pair_bits(word_at(load + 4 * kk), h);  // word kk, pair h
            const int k = st * 64 + 16 * kk + 8 * h + 2 * b;
            EXPECT_EQ(std::ldexp(bf16_bits_value(bits & 0xffff), 120), e4m3_ref(src[r * K + k])) << r << " " << k;
            EXPECT_EQ(std::ldexp(bf16_bits_value(bits >> 16), 120), e4m3_ref(src[r * K + k + 1]));
          }
      }
}

TEST(QuantLayout, Fp8EveryCodeDecodesInEverySlot) {  // NaN codes (never written by a quantiser) become 480
  for (int c = 0; c < 256; ++c) {
    const double want = (c & 0x7f) == 0x7f ? ((c & 0x80) ? -480.0 : 480.0) : e4m3_ref(c);
    for (int slot = 0; slot < 4; ++slot) {
      const uint32_t w = quant_word_tables().fp8[slot][c];
      const uint32_t bits = fp8_pair_bits(w, slot / 2);
      EXPECT_EQ(std::ldexp(bf16_bits_value((bits >> (16 * (slot % 2))) & 0xffff), 120), want) << c << " " << slot;
      EXPECT_EQ(fp8_pair_bits(w, 1 - slot / 2), 0u) << "slot " << slot << " leaks into the other pair";
    }
  }
}

TEST(QuantLayout, WordTablesArePermutationsOfTheWordBits) {
  for (bool fp8 : {false, true}) {
    uint32_t seen = 0;
    int count = 0;
    for (int slot = 0; slot < 4; ++slot)
      for (int i = 0; i < 8; ++i) {
        const uint32_t w = (fp8 ? quant_word_tables().fp8 : quant_word_tables().fp4)[slot][1 << i];
        EXPECT_EQ(__builtin_popcount(w), 1);
        EXPECT_EQ(seen & w, 0u);
        seen |= w;
        ++count;
      }
    EXPECT_EQ(seen, 0xffffffffu);
    EXPECT_EQ(count, 32);
  }
}

TEST(QuantLayout, ScaleCodesTimesPairBitsAreTheExactProducts) {
  for (int c = 0; c < 0x7f; ++c) {  // every finite non-negative E4M3 code
    const uint8_t q = scale_code(static_cast<uint8_t>(c));
    if (c == 0) {
      EXPECT_EQ(q, 0);
      continue;
    }
    const uint32_t s2 = scale_code_bits(q | static_cast<uint32_t>(q) << 16);
    EXPECT_EQ(s2 >> 16, s2 & 0xffff);
    const double s = bf16_bits_value(s2 & 0xffff);
    EXPECT_EQ(s, std::ldexp(e4m3_ref(c), 119)) << c;
    for (int n = 0; n < 16; ++n) {  // the kernel's bf16x2 multiply: exact, times the epilogue's 2^7
      const uint32_t bits = fp4_pair_bits(quant_word_tables().fp4[0][n], 0);
      const double prod = static_cast<double>(bf16_bits_value(bits & 0xffff)) * s;
      EXPECT_TRUE(bf16_exact(prod)) << c << " " << n;
      EXPECT_EQ(std::ldexp(prod, 7), e2m1_ref(n) * e4m3_ref(c)) << c << " " << n;
    }
  }
  EXPECT_EQ(scale_code(0x80), 0);  // -0
}

TEST(QuantLayout, BlockScalesAreStageMajorCodes) {
  const int E = 2, N = 5, K = 192, G = K / 16, KT = K / 64;
  std::vector<uint8_t> src = random_bytes(E * N * G, 3);
  for (auto& c : src) c &= 0x7e;  // finite, non-negative
  std::vector<uint8_t> dev(src.size());
  repack_block_scales(src.data(), dev.data(), E, N, K);
  for (int e = 0; e < E; ++e)
    for (int kt = 0; kt < KT; ++kt)
      for (int n = 0; n < N; ++n)
        for (int kk = 0; kk < 4; ++kk)  // the kernel: byte kk of the row's 4 is the scale of k16 step kk
          EXPECT_EQ(dev[((e * KT + kt) * N + n) * 4 + kk], scale_code(src[(e * N + n) * G + (kt * 64 + 16 * kk) / 16]));
}

TEST(QuantLayout, ZeroScaledBlocksLoseTheirValues) {
  const int rows = 2, K = 64;
  std::vector<uint8_t> packed = random_bytes(rows * K / 2, 4), block = {0x38, 0x00, 0x40, 0x41, 0x80, 0x38, 0x10, 0x00};
  const std::vector<uint8_t> orig = packed;
  zero_unscaled_blocks(packed.data(), block.data(), rows, K);
  for (int r = 0; r < rows; ++r)
    for (int g = 0; g < K / 16; ++g)
      for (int i = 0; i < 8; ++i) {
        const size_t at = r * K / 2 + g * 8 + i;
        EXPECT_EQ(packed[at], (block[r * 4 + g] & 0x7f) == 0 ? 0 : orig[at]) << r << " " << g;
      }
}

}  // namespace
}  // namespace dgemma::cuda
