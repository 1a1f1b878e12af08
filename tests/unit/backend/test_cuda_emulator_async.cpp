// The emulator's asynchrony (tests/unit/backend/cuda_emulator.h): a cp.async lands when its thread
// waits for its group, a wgmma reads its operands when its thread waits for it, so the kernel tests see
// a refill that comes too early; a write into the operands of a wgmma in flight is reported at once.
// And the flash attention kernel's wgmma forms against products computed here from the operand
// layouts (core/wgmma_desc.cuh): scores m64n80k16 (K-major A and B), P.V m64n256k16 (A from registers in
// the mma.sync fragment layout, B MN-major).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "cuda_emulator.h"
#include "backend/cuda/core/wgmma_desc.cuh"

namespace dgemma::cuda {
namespace {

TEST(CudaEmulatorAsync, CopyLandsAtTheWait) {
  std::vector<uint32_t> src(4, 0x01020304u);
  std::vector<uint32_t> seen(3, 0);
  emu::launch(
      [&] {
        if (threadIdx.x != 0) return;
        std::memset(emu::smem(), 0, 16);
        cp_async16(0, src.data(), true);
        cp_async_commit();
        seen[0] = lds_u32(0);  // not landed yet
        cp_async16(0, src.data(), false);
        cp_async_commit();
        cp_async_wait<1>();  // the first group
        seen[1] = lds_u32(0);
        cp_async_wait<0>();  // the zero fill
        seen[2] = lds_u32(0);
      },
      1, 1, 16, 32);
  EXPECT_EQ(seen[0], 0u);
  EXPECT_EQ(seen[1], 0x01020304u);
  EXPECT_EQ(seen[2], 0u);
}

// One warpgroup, A = B = ones (64 and 128 rows of 16 bf16): every element of the product is 16 if the
// operands are read at the issue, 0 if at the wait after they were zeroed; the emulator gives 0.
TEST(CudaEmulatorAsync, WgmmaReadsItsOperandsAtTheWait) {
  constexpr int kA = 64 * 128, kB = 128 * 128;
  std::vector<float> out(128, -1.f);
  emu::launch(
      [&] {
        const int tid = static_cast<int>(threadIdx.x);
        if (tid == 0)
          for (int i = 0; i < (kA + kB) / 2; ++i) std::memcpy(emu::smem() + 2 * i, "\x80\x3f", 2);  // bf16 1.0
        __syncthreads();
        float d[64] = {};
        wgmma_m64n128k16(d, sw128_desc(0), sw128_desc(kA));
        wgmma_commit();
        __syncthreads();
        if (tid == 0) std::memset(emu::smem(), 0, kA + kB);
        __syncthreads();
        wgmma_wait<0>();
        out[static_cast<size_t>(tid)] = d[0];
      },
      1, 1, kA + kB, 128);
  for (float v : out) EXPECT_EQ(v, 0.f);
}

// Small integers: every product and sum exact in fp32, whatever the order.
std::vector<uint16_t> small_ints(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> d(-4, 4);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = f32_to_bf16(static_cast<float>(d(rng)));
  return v;
}
// 128-byte swizzle: 16-byte unit u of 128-byte row r (of an aligned 1024-byte atom) at u ^ (r % 8).
uint32_t swizzled(uint32_t atom, uint32_t row, uint32_t byte) {
  return atom + row * 128 + (((byte / 16) ^ (row % 8)) * 16) + byte % 16;
}

// S (64 x 80) = A (64 x 16) . B (80 x 16)^T, both K-major, rows of 64 elements (128 bytes) of which
// the MMA reads k16 step 2 (bytes 64 .. 95): element (r, k) at atom r / 8 (1024 bytes each), row r % 8.
TEST(CudaEmulatorWgmma, ScoresFormK64MajorN80) {
  const auto a = small_ints(64 * 64, 1), b = small_ints(80 * 64, 2);
  constexpr uint32_t kA = 0, kB = 8192;
  std::vector<float> got(64 * 80, -1.f);
  emu::launch(
      [&] {
        const int tid = static_cast<int>(threadIdx.x);
        if (tid == 0) {
          for (uint32_t r = 0; r < 64; ++r)
            for (uint32_t k = 0; k < 64; ++k)
              std::memcpy(emu::smem() + swizzled(kA + r / 8 * 1024, r % 8, 2 * k), &a[r * 64 + k], 2);
          for (uint32_t r = 0; r < 80; ++r)
            for (uint32_t k = 0; k < 64; ++k)
              std::memcpy(emu::smem() + swizzled(kB + r / 8 * 1024, r % 8, 2 * k), &b[r * 64 + k], 2);
        }
        __syncthreads();
        float d[40];
        for (float& x : d) x = 1e6f;  // scale-d 0: overwritten
        wgmma_m64n80k16(d, sw128_desc(kA + 64), sw128_desc(kB + 64), false);
        wgmma_commit();
        wgmma_wait<0>();
        const int w = tid / 32, g = tid % 32 / 4, t = tid % 4;
        for (int i = 0; i < 10; ++i)
          for (int q = 0; q < 4; ++q) got[(16 * w + g + 8 * (q / 2)) * 80 + 8 * i + 2 * t + q % 2] = d[4 * i + q];
      },
      1, 1, 20480, 128);
  for (int r = 0; r < 64; ++r)
    for (int c = 0; c < 80; ++c) {
      float want = 0;
      for (int k = 32; k < 48; ++k) want += bf16_to_f32(a[r * 64 + k]) * bf16_to_f32(b[c * 64 + k]);
      ASSERT_EQ(got[r * 80 + c], want) << r << ", " << c;
    }
}

// O (64 x 256) += P (64 x 16, registers) . V (16 x 256), V MN-major: 32 K rows of 256 elements stored
// as 4 column atoms of 64 elements, 4096 bytes apart (the leading byte offset), each 4 atoms of 8 K
// rows; the MMA reads K rows 16 .. 31 (its descriptor starts 2048 bytes in). Element (k, n) at column
// atom n / 64, atom k / 8 within it, row k % 8, byte 2 (n % 64).
TEST(CudaEmulatorWgmma, PvFormRegisterAMnMajorB) {
  const auto p = small_ints(64 * 16, 3), v = small_ints(32 * 256, 4);
  constexpr uint32_t kLbo = 4096;
  std::vector<float> got(64 * 256, -1.f);
  emu::launch(
      [&] {
        const int tid = static_cast<int>(threadIdx.x);
        if (tid == 0)
          for (uint32_t k = 0; k < 32; ++k)
            for (uint32_t n = 0; n < 256; ++n)
              std::memcpy(emu::smem() + swizzled(n / 64 * kLbo + k / 8 * 1024, k % 8, 2 * (n % 64)), &v[k * 256 + n], 2);
        __syncthreads();
        // The mma.sync A fragment of the warp's rows 16 w .. 16 w + 15.
        const int w = tid / 32, g = tid % 32 / 4, t = tid % 4;
        auto pair = [&](int r, int k) {
          return static_cast<uint32_t>(p[r * 16 + k]) | (static_cast<uint32_t>(p[r * 16 + k + 1]) << 16);
        };
        const int r0 = 16 * w + g;
        const uint32_t frag[4] = {pair(r0, 2 * t), pair(r0 + 8, 2 * t), pair(r0, 2 * t + 8), pair(r0 + 8, 2 * t + 8)};
        float d[128];
        for (int i = 0; i < 128; ++i) d[i] = static_cast<float>(i % 7);  // accumulated onto
        wgmma_m64n256k16_rs_mn(d, frag, sw128_mn_desc(2048, kLbo));
        wgmma_commit();
        wgmma_wait<0>();
        for (int i = 0; i < 32; ++i)
          for (int q = 0; q < 4; ++q) got[(r0 + 8 * (q / 2)) * 256 + 8 * i + 2 * t + q % 2] = d[4 * i + q];
      },
      1, 1, 4 * kLbo, 128);
  for (int r = 0; r < 64; ++r)
    for (int c = 0; c < 256; ++c) {
      const int i = c / 8, q = (r % 16 >= 8) * 2 + c % 2;
      float want = static_cast<float>((4 * i + q) % 7);
      for (int k = 0; k < 16; ++k) want += bf16_to_f32(p[r * 16 + k]) * bf16_to_f32(v[(16 + k) * 256 + c]);
      ASSERT_EQ(got[r * 256 + c], want) << r << ", " << c;
    }
}

// A copy issued into the operands of a wgmma that some thread has issued and not yet waited for is a
// race on the GPU, reported whatever the order in which the emulation runs the threads.
TEST(CudaEmulatorWgmma, ReportsAWriteIntoOperandsInFlight) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  std::vector<uint32_t> src(4, 0);
  EXPECT_DEATH(emu::launch(
                   [&] {
                     float d[40] = {};
                     wgmma_m64n80k16(d, sw128_desc(0), sw128_desc(8192), false);
                     wgmma_commit();
                     __syncthreads();
                     if (threadIdx.x == 0) cp_async16(8192 + 1024, src.data(), true);  // B's rows 8 .. 15
                     wgmma_wait<0>();
                   },
                   1, 1, 20480, 128),
               "written while a wgmma reading it is in flight");
}

// With a jitter schedule (warps sit out runs of rounds) the threads still meet at every barrier, and a
// barrier that some thread never reaches is still reported.
TEST(CudaEmulatorWgmma, JitterScheduleKeepsBarriers) {
  std::vector<int> order;
  emu::g_jitter_seed = 7;
  emu::launch(
      [&] {
        for (int round = 0; round < 20; ++round) {
          if (threadIdx.x % 32 == 0) order.push_back(round);
          __syncthreads();
        }
      },
      1, 1, 0, 256);
  for (size_t i = 0; i < order.size(); ++i) EXPECT_EQ(order[i], static_cast<int>(i / 8));
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(emu::launch(
                   [] {
                     if (threadIdx.x == 0) emu::g_warp_bar[0]->arrive_and_wait();
                     __syncthreads();
                   },
                   1, 1, 0),
               "deadlocked at a barrier");
  emu::g_jitter_seed = 0;
}

}  // namespace
}  // namespace dgemma::cuda
