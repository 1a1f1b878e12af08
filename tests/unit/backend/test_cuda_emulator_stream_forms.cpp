// The emulator's forms for the weight-streaming expert kernels (tests/unit/backend/cuda_emulator.h,
// src/backend/cuda/core/wgmma_ptx.cuh, core/tma_ptx.cuh) against products computed here from the PTX ISA's operand
// and fragment layouts: FP8 wgmma m64 n16 / n32 / n48 / n64 k32 (both operands K-major, 128-byte
// swizzle), bf16 wgmma m64 n16 .. n64 k16 with A from registers (the mma.sync A fragment) and B
// K-major, and TMA loads of byte matrices (128-byte swizzled boxes of 128 bytes, plain boxes of 256
// bytes; zeros past the matrix; the transaction bytes of the whole box).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "util/bf16.h"
// clang-format off
#include "cuda_emulator.h"
#include "backend/cuda/core/wgmma_desc.cuh"
// clang-format on

namespace dgemma::cuda {
namespace {

// 128-byte swizzle: 16-byte unit u of 128-byte row r (of an aligned 1024-byte atom) at u ^ (r % 8).
uint32_t swizzled(uint32_t atom, uint32_t row, uint32_t byte) {
  return atom + row * 128 + (((byte / 16) ^ (row % 8)) * 16) + byte % 16;
}
// E4M3 codes of small integers and halves (sign, exponent 6 .. 9, any mantissa): every product and
// every sum of 32 of them is exact in fp32.
std::vector<uint8_t> small_e4m3(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& c : v) c = static_cast<uint8_t>((rng() & 0x87) | ((6 + rng() % 4) << 3));
  return v;
}
float e4m3_value(uint8_t c) {
  const int e = (c >> 3) & 15, m = c & 7;
  const float v = e == 0 ? std::ldexp(static_cast<float>(m), -9) : std::ldexp(1.0f + m / 8.0f, e - 7);
  return (c & 0x80) ? -v : v;
}

// D (64 x N) = A (64 x 32) . B (N x 32)^T over K bytes 64 .. 95 of 128-byte rows (the descriptors start
// 64 bytes in), then D += the same product again (accumulate).
template <int N>
void fp8_form() {
  const auto a = small_e4m3(64 * 128, 1), b = small_e4m3(N * 128, 2);
  constexpr uint32_t kB = 8192;
  std::vector<float> got(64 * N, -1.f);
  emu::launch(
      [&] {
        const int tid = static_cast<int>(threadIdx.x);
        if (tid == 0) {
          for (uint32_t r = 0; r < 64; ++r)
            for (uint32_t k = 0; k < 128; ++k) emu::smem()[swizzled(r / 8 * 1024, r % 8, k)] = a[r * 128 + k];
          for (uint32_t r = 0; r < N; ++r)
            for (uint32_t k = 0; k < 128; ++k)
              emu::smem()[swizzled(kB + r / 8 * 1024, r % 8, k)] = b[r * 128 + k];
        }
        __syncthreads();
        float d[N / 2];
        for (float& x : d) x = 1e6f;  // scale-d 0: overwritten
        wgmma_m64nk32_e4m3<N>(d, sw128_desc(64), sw128_desc(kB + 64), false);
        wgmma_commit();
        wgmma_wait<0>();
        wgmma_m64nk32_e4m3<N>(d, sw128_desc(64), sw128_desc(kB + 64), true);
        wgmma_commit();
        wgmma_wait<0>();
        const int w = tid / 32, g = tid % 32 / 4, t = tid % 4;
        for (int i = 0; i < N / 8; ++i)
          for (int q = 0; q < 4; ++q)
            got[(16 * w + g + 8 * (q / 2)) * N + 8 * i + 2 * t + q % 2] = d[4 * i + q];
      },
      1, 1, kB + N * 128, 128);
  for (int r = 0; r < 64; ++r)
    for (int c = 0; c < N; ++c) {
      float want = 0;
      for (int k = 64; k < 96; ++k) want += e4m3_value(a[r * 128 + k]) * e4m3_value(b[c * 128 + k]);
      ASSERT_EQ(got[r * N + c], 2 * want) << "N " << N << ": " << r << ", " << c;
    }
}

TEST(CudaEmulatorStreamForms, Fp8SmallN) {
  fp8_form<16>();
  fp8_form<32>();
  fp8_form<48>();
  fp8_form<64>();
}

std::vector<uint16_t> small_ints(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> d(-4, 4);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = f32_to_bf16(static_cast<float>(d(rng)));
  return v;
}

// D (64 x N) = C + A (64 x 16, registers) . B (N x 16)^T, B K-major: rows of 64 bf16 (128 bytes) of
// which the MMA reads k16 step 3 (bytes 96 .. 127). The A fragment of warp w's rows 16 w .. 16 w + 15
// as mma.sync m16n8k16's; then the A registers are changed after the issue (the MMA keeps what it
// read at the issue).
template <int N>
void rs_form() {
  const auto p = small_ints(64 * 16, 3), v = small_ints(N * 64, 4);
  std::vector<float> got(64 * N, -1.f);
  emu::launch(
      [&] {
        const int tid = static_cast<int>(threadIdx.x);
        if (tid == 0)
          for (uint32_t r = 0; r < N; ++r)
            for (uint32_t k = 0; k < 64; ++k)
              std::memcpy(emu::smem() + swizzled(r / 8 * 1024, r % 8, 2 * k), &v[r * 64 + k], 2);
        __syncthreads();
        const int w = tid / 32, g = tid % 32 / 4, t = tid % 4;
        auto pair = [&](int r, int k) {
          return static_cast<uint32_t>(p[r * 16 + k]) | (static_cast<uint32_t>(p[r * 16 + k + 1]) << 16);
        };
        const int r0 = 16 * w + g;
        uint32_t frag[4] = {pair(r0, 2 * t), pair(r0 + 8, 2 * t), pair(r0, 2 * t + 8),
                            pair(r0 + 8, 2 * t + 8)};
        float d[N / 2];
        for (int i = 0; i < N / 2; ++i) d[i] = static_cast<float>(i % 5);  // accumulated onto
        wgmma_m64nk16_rs<N>(d, frag, sw128_desc(96), true);
        for (uint32_t& f : frag) f = 0;
        wgmma_commit();
        wgmma_wait<0>();
        for (int i = 0; i < N / 8; ++i)
          for (int q = 0; q < 4; ++q) got[(r0 + 8 * (q / 2)) * N + 8 * i + 2 * t + q % 2] = d[4 * i + q];
      },
      1, 1, N * 128, 128);
  for (int r = 0; r < 64; ++r)
    for (int c = 0; c < N; ++c) {
      const int i = c / 8, q = (r % 16 >= 8) * 2 + c % 2;
      float want = static_cast<float>((4 * i + q) % 5);
      for (int k = 0; k < 16; ++k) want += bf16_to_f32(p[r * 16 + k]) * bf16_to_f32(v[c * 64 + 48 + k]);
      ASSERT_EQ(got[r * N + c], want) << "N " << N << ": " << r << ", " << c;
    }
}

TEST(CudaEmulatorStreamForms, RegisterABf16SmallN) {
  rs_form<16>();
  rs_form<32>();
  rs_form<48>();
  rs_form<64>();
}

// A byte matrix [70, 300]: a swizzled box of 64 rows x 128 bytes at (x 256, y 8) (columns past 300
// and rows past 70 read as zeros), and a plain box of 4 rows x 256 bytes at (x 128, y 68); each lands
// with its barrier's phase, which waits for the whole boxes' bytes.
TEST(CudaEmulatorStreamForms, ByteMapsSwizzledAndPlain) {
  std::vector<uint8_t> m(70 * 300);
  for (size_t i = 0; i < m.size(); ++i) m[i] = static_cast<uint8_t>(1 + i % 251);
  std::vector<uint8_t> a(64 * 128), b(4 * 256);
  bool early = true;
  emu::launch(
      [&] {
        if (threadIdx.x != 0) return;
        std::memset(emu::smem(), 0xEE, 16384);
        const TmaMap sw{m.data(), 70, 300, 64, 128, 1, true}, plain{m.data(), 70, 300, 4, 256, 1, false};
        const uint32_t bar = 16384;
        mbar_init(bar, 1);
        tma_load_2d_hint(0, &sw, 256, 8, bar, 0);
        tma_load_2d(8192, &plain, 128, 68, bar);
        early = emu::smem()[0] == 0xEE && emu::smem()[8192] == 0xEE;  // nothing lands before the phase ...
        mbar_arrive_expect_tx(bar, 64 * 128 + 4 * 256);
        mbar_wait(bar, 0);  // ... completes: both boxes' bytes and the arrival
        std::memcpy(a.data(), emu::smem(), a.size());
        std::memcpy(b.data(), emu::smem() + 8192, b.size());
      },
      1, 1, 16400, 32);
  EXPECT_TRUE(early);
  for (uint32_t r = 0; r < 64; ++r)
    for (uint32_t k = 0; k < 128; ++k) {
      const int64_t row = 8 + r, col = 256 + k;
      const uint8_t want = row < 70 && col < 300 ? m[static_cast<size_t>(row * 300 + col)] : 0;
      ASSERT_EQ(a[swizzled(r / 8 * 1024, r % 8, k)], want) << r << ", " << k;
    }
  for (uint32_t r = 0; r < 4; ++r)
    for (uint32_t k = 0; k < 256; ++k) {
      const int64_t row = 68 + r, col = 128 + k;
      const uint8_t want = row < 70 && col < 300 ? m[static_cast<size_t>(row * 300 + col)] : 0;
      ASSERT_EQ(b[r * 256 + k], want) << r << ", " << k;
    }
}

}  // namespace
}  // namespace dgemma::cuda
