// The launches of the W8A8 grouped expert GEMMs (quant/w8a8_experts.cuh; kernel in
// quant/w8a8_experts_kernel.cuh).
#include "backend/cuda/core/common.cuh"
#include "backend/cuda/core/ptx.cuh"
#include "backend/cuda/core/tma_ptx.cuh"
#include "backend/cuda/core/wgmma_ptx.cuh"
#include "backend/cuda/moe/grouped_kernel.cuh"
#include "backend/cuda/quant/w8a8_experts.cuh"
#include "backend/cuda/quant/w8a8_experts_kernel.cuh"

namespace dgemma::cuda {

namespace {

struct W8a8Launcher {
  Stream stream;
  template <class C, bool kGateUp>
  void w8a8(const W8a8Args& g, const int32_t* tiles, int64_t grid_x, int64_t grid_y) {
    launch_large_smem(grouped_w8a8_kernel<C, kGateUp>, dim3(static_cast<unsigned>(grid_x), static_cast<unsigned>(grid_y)),
                      C::kThreads, C::kSmem, stream, g, tiles);
  }
  template <class C, bool kGateUp>
  void rows(const W8a8Args& g, int64_t grid_x, int64_t grid_y) {
    launch_large_smem(grouped_w8a8_rows_kernel<C, kGateUp>,
                      dim3(static_cast<unsigned>(grid_x), static_cast<unsigned>(grid_y)), C::kThreads, C::kSmem,
                      stream, g);
  }
};

GroupedPlanImpl to_impl(const GroupedPlan& p) { return {p.kernel, p.tile_rows, p.max_tiles}; }

}  // namespace

bool grouped_w8a8_supported(int64_t rows, int64_t Kd, const void* weights) {
  return rows > 0 && rows % 8 == 0 && Kd > 0 && Kd % 16 == 0 && (reinterpret_cast<uintptr_t>(weights) & 15u) == 0;
}

GroupedPlan grouped_w8a8_plan(int64_t R, int64_t E, MoeKernel kernel) {
  const GroupedPlanImpl p = w8a8_plan(R, E, kernel);
  return {p.kernel, p.tile_rows, p.max_tiles};
}

void launch_grouped_gate_up_w8a8(const GroupedPlan& plan, const uint8_t* q_x, const float* s_x, const uint8_t* w,
                                 const float* row_scale, const int32_t* offsets, const int32_t* pairs,
                                 const int32_t* tiles, int64_t R, int64_t E, int64_t K, int64_t H, int64_t I,
                                 uint16_t* act, Stream stream) {
  if (R <= 0 || E <= 0 || I <= 0) return;
  const W8a8Args g{q_x, s_x, w, row_scale, offsets, pairs, nullptr, act, static_cast<int>(H), static_cast<int>(I),
                   static_cast<int>(K)};
  W8a8Launcher l{stream};
  run_w8a8<true>(l, to_impl(plan), g, tiles, E);
}

void launch_grouped_down_w8a8(const GroupedPlan& plan, const uint8_t* q_act, const float* s_act, const uint8_t* w,
                              const float* row_scale, const int32_t* offsets, const int32_t* pairs,
                              const int32_t* tiles, const float* top_w, int64_t R, int64_t E, int64_t H, int64_t I,
                              uint16_t* y, Stream stream) {
  if (R <= 0 || E <= 0 || H <= 0) return;
  const W8a8Args g{q_act, s_act, w, row_scale, offsets, pairs, top_w, y, static_cast<int>(I), static_cast<int>(H), 1};
  W8a8Launcher l{stream};
  run_w8a8<false>(l, to_impl(plan), g, tiles, E);
}

}  // namespace dgemma::cuda
