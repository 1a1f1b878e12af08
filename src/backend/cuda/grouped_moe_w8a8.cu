// The launches of the W8A8 grouped expert GEMMs (grouped_moe_w8a8.cuh; kernel in
// grouped_moe_w8a8_kernel.cuh).
#include <atomic>
#include <cstdlib>
#include <string_view>

#include "backend/cuda/common.cuh"
#include "backend/cuda/device_info.cuh"
#include "backend/cuda/ptx.cuh"
#include "backend/cuda/wgmma_ptx.cuh"
#include "backend/cuda/tma_ptx.cuh"
#include "backend/cuda/grouped_moe_kernel.cuh"
#include "backend/cuda/grouped_moe_w8a8_kernel.cuh"
#include "backend/cuda/grouped_moe_w8a8.cuh"
#include "backend/cuda/tuning.h"

namespace dgemma::cuda {

namespace {

struct W8a8Launcher {
  cudaStream_t stream;
  template <class C, bool kGateUp>
  void w8a8(const W8a8Args& g, const int32_t* tiles, int64_t grid_x, int64_t grid_y) {
    launch_large_smem(grouped_w8a8_kernel<C, kGateUp>, dim3(static_cast<unsigned>(grid_x), static_cast<unsigned>(grid_y)),
                      C::kThreads, C::kSmem, stream, g, tiles);
  }
};

static_assert(kW8a8Variants == kW8a8MoeTiles, "tuning.h lists the tile shapes");

std::atomic<int>& tile_setting() {
  static std::atomic<int> v{[] {
    const char* s = std::getenv("DGEMMA_W8A8_MOE_TILE");
    const int t = s != nullptr ? std::atoi(s) : 0;
    return t >= 0 && t <= kW8a8Variants ? t : 0;
  }()};
  return v;
}

std::atomic<bool>& moe_setting() {
  static std::atomic<bool> on{[] {
    const char* s = std::getenv("DGEMMA_FP8_MOE");
    return s == nullptr || std::string_view(s) != "w8a16";  // "w8a8" or unset: on
  }()};
  return on;
}

GroupedPlanImpl to_impl(const GroupedPlan& p) { return {p.variant, p.tile_rows, p.max_tiles}; }

}  // namespace

int set_w8a8_moe_tile(int variant) { return tile_setting().exchange(variant); }
bool set_fp8_moe_w8a8(bool on) { return moe_setting().exchange(on); }
bool fp8_moe_w8a8() { return moe_setting().load(); }

bool grouped_w8a8_supported(int64_t rows, int64_t Kd, const void* weights) {
  return rows > 0 && rows % 8 == 0 && Kd > 0 && Kd % 16 == 0 && (reinterpret_cast<uintptr_t>(weights) & 15u) == 0 &&
         current_device_has_wgmma();
}

GroupedPlan grouped_w8a8_plan(int64_t R, int64_t E) {
  const GroupedPlanImpl p = w8a8_plan(tile_setting().load(), R, E);
  return {p.variant, p.tile_rows, p.max_tiles};
}

void launch_grouped_gate_up_w8a8(const GroupedPlan& plan, const uint8_t* q_x, const float* s_x, const uint8_t* w,
                                 const float* row_scale, const int32_t* offsets, const int32_t* pairs,
                                 const int32_t* tiles, int64_t R, int64_t E, int64_t K, int64_t H, int64_t I,
                                 uint16_t* act, cudaStream_t stream) {
  if (R <= 0 || E <= 0 || I <= 0) return;
  const W8a8Args g{q_x, s_x, w, row_scale, offsets, pairs, nullptr, act, static_cast<int>(H), static_cast<int>(I),
                   static_cast<int>(K)};
  W8a8Launcher l{stream};
  run_w8a8<true>(l, to_impl(plan), g, tiles);
}

void launch_grouped_down_w8a8(const GroupedPlan& plan, const uint8_t* q_act, const float* s_act, const uint8_t* w,
                              const float* row_scale, const int32_t* offsets, const int32_t* pairs,
                              const int32_t* tiles, const float* top_w, int64_t R, int64_t E, int64_t H, int64_t I,
                              uint16_t* y, cudaStream_t stream) {
  if (R <= 0 || E <= 0 || H <= 0) return;
  const W8a8Args g{q_act, s_act, w, row_scale, offsets, pairs, top_w, y, static_cast<int>(I), static_cast<int>(H), 1};
  W8a8Launcher l{stream};
  run_w8a8<false>(l, to_impl(plan), g, tiles);
}

}  // namespace dgemma::cuda
