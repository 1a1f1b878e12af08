// The emulator's asynchrony (tests/unit/backend/cuda_emulator.h): a cp.async lands when its thread
// waits for its group, a wgmma reads its operands when its thread waits for it, so the kernel tests see
// a refill that comes too early.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "cuda_emulator.h"
#include "backend/cuda/wgmma_desc.cuh"

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

}  // namespace
}  // namespace dgemma::cuda
