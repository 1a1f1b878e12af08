// Launchers of the W4A16 / W8A16 kernels (the kernel and its launch plans: grouped_moe_fp4_kernel.cuh)
// and their shape rules.
#include "backend/cuda/common.cuh"
#include "backend/cuda/device_info.cuh"
#include "backend/cuda/grouped_moe_fp4.cuh"
#include "backend/cuda/ptx.cuh"
#include "backend/cuda/quant_ptx.cuh"
#include "backend/cuda/wgmma_ptx.cuh"
#include "backend/cuda/grouped_moe_fp4_kernel.cuh"

#include <algorithm>
#include <atomic>
#include <cstdlib>

#include "backend/cuda/tuning.h"

namespace dgemma::cuda {
namespace {

std::atomic<bool>& wgmma_setting() {
  static std::atomic<bool> on{[] {
    const char* v = std::getenv("DGEMMA_QUANT_WGMMA");
    return v != nullptr && std::strtol(v, nullptr, 10) != 0;
  }()};
  return on;
}

struct DeviceLauncher {
  cudaStream_t stream;
  bool wgmma = current_device_has_wgmma();
  bool wgmma_auto = wgmma_setting().load();
  template <int MF, int W, int S, bool kGateUp, bool kFp8>
  void go(const Fp4Args& g, int64_t grid_x, int64_t grid_y) {
    auto* kernel = grouped_fp4_kernel<MF, W, S, kGateUp, kFp8>;
    constexpr int smem = smem_bytes<MF, W, S, kFp8>();
    if (smem >= 48 * 1024) CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    kernel<<<dim3(static_cast<unsigned>(grid_x), static_cast<unsigned>(grid_y)), 32 * W, smem, stream>>>(g);
    CUDA_CHECK_LAUNCH();
  }
  template <class C, bool kGateUp, bool kFp8>
  void wg(const Fp4Args& g, int64_t grid_x, int64_t grid_y) {
    launch_large_smem(grouped_fp4_wgmma_kernel<C, kGateUp, kFp8>,
                      dim3(static_cast<unsigned>(grid_x), static_cast<unsigned>(grid_y)), C::kThreads,
                      C::template smem<kFp8>(), stream, g);
  }
};

// The tile variants in use (set_quant_moe_tiles); the environment's DGEMMA_QUANT_MOE_TILE ("gu",
// "gu,down" or "gu,down,m_split", kQuantTiles ids) sets the start values, so that whole-model
// benchmarks can compare them.
static_assert(kQuantTileCount == kQuantMoeTileCount, "tuning.h lists the tile variants");

// which: 0 gate_up, 1 down, 2 dense, 3 the wgmma kernel's m_split (0 automatic).
std::atomic<int>& tile_setting(int which) {
  static std::atomic<int> tiles[4] = {0, 0, 0, 0};
  static const bool from_env = [] {
    if (const char* v = std::getenv("DGEMMA_QUANT_MOE_TILE")) {
      char* end = nullptr;
      const long a = std::strtol(v, &end, 10);
      const long b = (end && *end == ',') ? std::strtol(end + 1, &end, 10) : a;
      const long c = (end && *end == ',') ? std::strtol(end + 1, nullptr, 10) : 0;
      tiles[0] = static_cast<int>(a);
      tiles[1] = static_cast<int>(b);
      tiles[3] = static_cast<int>(c);
    }
    if (const char* v = std::getenv("DGEMMA_QUANT_DENSE_TILE")) tiles[2] = static_cast<int>(std::strtol(v, nullptr, 10));
    return true;
  }();
  (void)from_env;
  return tiles[which];
}

// The requested m_split, clamped to what the kernel supports (0 automatic, 1 .. 16).
int m_split_setting() { return std::clamp(tile_setting(3).load(), 0, 16); }

}  // namespace

QuantMoeTiles set_quant_moe_tiles(QuantMoeTiles t) {
  QuantMoeTiles old;
  old.gate_up = tile_setting(0).exchange(t.gate_up);
  old.down = tile_setting(1).exchange(t.down);
  old.m_split = tile_setting(3).exchange(t.m_split);
  return old;
}

int set_quant_dense_tile(int variant) { return tile_setting(2).exchange(variant); }

bool set_quant_wgmma(bool on) { return wgmma_setting().exchange(on); }

void launch_dense_quant(bool fp8, const uint16_t* x, const uint8_t* w, const uint8_t* block, const float* row_scale,
                        int64_t T, int64_t N, int64_t K, uint16_t* out, cudaStream_t stream) {
  DeviceLauncher l{stream};
  run_dense(l, fp8, x, w, block, row_scale, T, N, K, out, tile_setting(2).load());
}

bool grouped_fp4_supported(int64_t rows, int64_t Kd, const void* packed, const void* block) {
  const auto p = reinterpret_cast<uintptr_t>(packed), b = reinterpret_cast<uintptr_t>(block);
  return rows >= 8 && rows % 8 == 0 && Kd >= kBK && Kd % kBK == 0 && rows * Kd < (int64_t{1} << 31) && p % 16 == 0 &&
         b % 16 == 0;
}

bool grouped_fp8_supported(int64_t rows, int64_t Kd, const void* weights) {
  return rows >= 8 && rows % 8 == 0 && Kd >= kBK && Kd % kBK == 0 && rows * Kd < (int64_t{1} << 31) &&
         reinterpret_cast<uintptr_t>(weights) % 16 == 0;
}

void launch_grouped_gate_up_fp4(const uint16_t* x, const uint8_t* packed, const uint8_t* block, const float* row_scale,
                                const int32_t* offsets, const int32_t* pairs, int64_t R, int64_t E, int64_t K,
                                int64_t H, int64_t I, uint16_t* act, cudaStream_t stream) {
  DeviceLauncher l{stream};
  run_gate_up(l, false, x, packed, block, row_scale, offsets, pairs, R, E, K, H, I, act, tile_setting(0).load(),
              m_split_setting());
}

void launch_grouped_down_fp4(const uint16_t* act, const uint8_t* packed, const uint8_t* block, const float* row_scale,
                             const int32_t* offsets, const int32_t* pairs, const float* top_w, int64_t R, int64_t E,
                             int64_t H, int64_t I, uint16_t* y, cudaStream_t stream) {
  DeviceLauncher l{stream};
  run_down(l, false, act, packed, block, row_scale, offsets, pairs, top_w, R, E, H, I, y, tile_setting(1).load(),
           m_split_setting());
}

void launch_grouped_gate_up_fp8(const uint16_t* x, const uint8_t* w, const float* row_scale, const int32_t* offsets,
                                const int32_t* pairs, int64_t R, int64_t E, int64_t K, int64_t H, int64_t I,
                                uint16_t* act, cudaStream_t stream) {
  DeviceLauncher l{stream};
  run_gate_up(l, true, x, w, nullptr, row_scale, offsets, pairs, R, E, K, H, I, act, tile_setting(0).load(),
              m_split_setting());
}

void launch_grouped_down_fp8(const uint16_t* act, const uint8_t* w, const float* row_scale, const int32_t* offsets,
                             const int32_t* pairs, const float* top_w, int64_t R, int64_t E, int64_t H, int64_t I,
                             uint16_t* y, cudaStream_t stream) {
  DeviceLauncher l{stream};
  run_down(l, true, act, w, nullptr, row_scale, offsets, pairs, top_w, R, E, H, I, y, tile_setting(1).load(),
           m_split_setting());
}

}  // namespace dgemma::cuda
