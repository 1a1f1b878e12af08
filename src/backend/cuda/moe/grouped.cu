// The launches of the bf16 grouped expert GEMMs (the kernels and their launch plan:
// moe/grouped_kernel.cuh; the grouping they read: moe/route.cuh launch_moe_route_group).
#include <algorithm>

#include "backend/cuda/core/common.cuh"
#include "backend/cuda/core/ptx.cuh"
#include "backend/cuda/core/tma_map.h"
#include "backend/cuda/core/tma_ptx.cuh"
#include "backend/cuda/core/wgmma_ptx.cuh"
#include "backend/cuda/moe/grouped.cuh"
#include "backend/cuda/moe/grouped_kernel.cuh"

namespace dgemma::cuda {
namespace {

struct DeviceLauncher {
  Stream stream;
  template <int BM, bool kGateUp>
  void small(const GroupedArgs& g, int64_t grid_x, int64_t grid_y) {
    constexpr int smem = small_smem_bytes<BM>();
    auto* kernel = grouped_gemm_kernel<BM, kGateUp>;
    if (smem > 48 * 1024) CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    launch_kernel(stream, kernel, dim3(static_cast<unsigned>(grid_x), static_cast<unsigned>(grid_y)),
                  kSmallThreads, smem, g);
  }
  template <class C, bool kGateUp>
  void tile(const GroupedArgs& g, const int32_t* tiles, int64_t grid_x, int64_t grid_y) {
    go<C>(grouped_tile_kernel<C, kGateUp>, g, tiles, grid_x, grid_y);
  }
  template <class C, bool kGateUp>
  void wg(const GroupedArgs& g, const int32_t* tiles, int64_t grid_x, int64_t grid_y) {
    go<C>(grouped_wgmma_kernel<C, kGateUp>, g, tiles, grid_x, grid_y);
  }
  // The weight map of the call: [E Nw, Kd] (gate_up Nw = 2 N), boxes of half a tile's weight rows.
  template <class C, bool kGateUp>
  void tma(const GroupedArgs& g, const int32_t* tiles, int64_t grid_x, int64_t grid_y, int64_t E) {
    const int64_t rows = E * (kGateUp ? 2 : 1) * g.N;
    const TmaMap map = stream.tma_maps->bf16_row_tile(g.w, rows, g.Kd, C::kBN / 2);
    launch_large_smem(grouped_tma_kernel<C, kGateUp>, dim3(static_cast<unsigned>(grid_x), static_cast<unsigned>(grid_y)),
                      C::kThreads, C::kSmem, stream, map, g, tiles);
  }
  template <class C>
  void go(void (*kernel)(GroupedArgs, const int32_t*), const GroupedArgs& g, const int32_t* tiles, int64_t grid_x,
          int64_t grid_y) {
    launch_large_smem(kernel, dim3(static_cast<unsigned>(grid_x), static_cast<unsigned>(grid_y)), C::kThreads, C::kSmem,
                      stream, g, tiles);
  }
};

GroupedPlanImpl to_impl(const GroupedPlan& p) { return {p.kernel, p.tile_rows, p.max_tiles}; }

}  // namespace

bool grouped_moe_supported(int64_t T, int64_t H, int64_t I, int64_t E, int64_t K, const void* x,
                           const void* gate_up, const void* down) {
  auto aligned = [](const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; };
  constexpr int64_t kMaxDim = int64_t{1} << 20;  // N tiles (gridDim.y of the tile kernel) <= 16384
  return T >= 1 && H >= 8 && I >= 8 && H % 8 == 0 && I % 8 == 0 && H <= kMaxDim && I <= kMaxDim && E >= 1 &&
         E <= 65535 && K >= 1 && K <= E && T * K <= (int64_t{1} << 30) && H * 2 * I < (int64_t{1} << 31) &&
         aligned(x) && aligned(gate_up) && aligned(down);
}

GroupedPlan grouped_moe_plan(int64_t R, int64_t E, MoeKernel kernel, bool hopper) {
  const GroupedPlanImpl p = grouped_plan(kernel, R, E, hopper);
  return {p.kernel, p.tile_rows, p.max_tiles};
}

void launch_grouped_gate_up(const GroupedPlan& plan, const uint16_t* x, const uint16_t* gate_up,
                            const int32_t* offsets, const int32_t* pairs, const int32_t* tiles, int64_t R, int64_t E,
                            int64_t K, int64_t H, int64_t I, uint16_t* act, Stream stream) {
  DeviceLauncher l{stream};
  run_grouped_gate_up(l, to_impl(plan), x, gate_up, offsets, pairs, tiles, R, E, K, H, I, act);
}

void launch_grouped_down(const GroupedPlan& plan, const uint16_t* act, const uint16_t* down, const int32_t* offsets,
                         const int32_t* pairs, const int32_t* tiles, const float* top_w, int64_t R, int64_t E,
                         int64_t H, int64_t I, uint16_t* y, Stream stream) {
  DeviceLauncher l{stream};
  run_grouped_down(l, to_impl(plan), act, down, offsets, pairs, tiles, top_w, R, E, H, I, y);
}

}  // namespace dgemma::cuda
