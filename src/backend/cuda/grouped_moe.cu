// Device-side grouping of the MoE (token, slot) pairs by expert (group_kernel, here) and the launches
// of the grouped expert GEMMs (the kernels and their launch plans: grouped_moe_kernel.cuh).
#include <algorithm>
#include <atomic>

#include "backend/cuda/common.cuh"
#include "backend/cuda/device_info.cuh"
#include "backend/cuda/expert_groups.cuh"
#include "backend/cuda/grouped_moe.cuh"
#include "backend/cuda/ptx.cuh"
#include "backend/cuda/wgmma_ptx.cuh"
#include "backend/cuda/tma_ptx.cuh"
#include "backend/cuda/grouped_moe_kernel.cuh"
#include "backend/cuda/tma_map.h"
#include "backend/cuda/tuning.h"

namespace dgemma::cuda {
namespace {

constexpr int kGroupThreads = 1024;
constexpr int kGroupSmemLimit = 48 * 1024;

// ---- grouping -----------------------------------------------------------------------------------

// One block of kGroupThreads. Warp w owns the contiguous pair segment [w * seg, (w + 1) * seg);
// shared: cnt[nw][E] (per-warp counts, then per-warp start within the expert) and base[E].
// Pass 1 counts per warp (lanes with equal experts found by __match_any_sync, the lowest one adds),
// then per expert the counts become exclusive prefixes over warps, warp 0 scans the expert totals
// into offsets, and pass 2 places each pair at base[e] + warp start + rank among earlier lanes of the
// same expert. Segments, chunks and lanes are visited in pair order, so the grouping is stable.
// With a tile list (tiles != nullptr), warp 0 then cuts every expert's rows into tiles of tile_rows
// (the expert's base[] is final since the barrier before pass 2, and pass 2 leaves it alone) and pads
// the list with {-1, 0, 0, 0} up to max_tiles entries.
__global__ void __launch_bounds__(kGroupThreads) group_kernel(const int32_t* __restrict__ top_idx, int R, int E,
                                                              int nw, int32_t* __restrict__ offsets,
                                                              int32_t* __restrict__ pairs, int tile_rows,
                                                              int max_tiles, int4* __restrict__ tiles) {
  extern __shared__ int32_t gsm[];
  int32_t* cnt = gsm;             // [nw][E]
  int32_t* base = gsm + nw * E;   // [E]
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  for (int i = threadIdx.x; i < nw * E; i += blockDim.x) cnt[i] = 0;
  __syncthreads();
  const int64_t seg = (static_cast<int64_t>(R) + nw - 1) / nw;
  const int begin = warp < nw ? static_cast<int>(min(static_cast<int64_t>(R), warp * seg)) : R;
  const int end = warp < nw ? static_cast<int>(min(static_cast<int64_t>(R), begin + seg)) : R;
  const unsigned lt_mask = (1u << lane) - 1u;
  for (int b = begin; b < end; b += 32) {  // warp-uniform bounds
    const int p = b + lane;
    const bool valid = p < end;
    const int e = valid ? top_idx[p] : -1;
    const unsigned same = __match_any_sync(0xffffffffu, e);
    if (valid && (same & lt_mask) == 0) cnt[warp * E + e] += __popc(same);
    __syncwarp();  // match/shuffle imply no memory order: the next chunk's adder of e must see this add
  }
  __syncthreads();
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    int run = 0;
    for (int w = 0; w < nw; ++w) {
      const int c = cnt[w * E + e];
      cnt[w * E + e] = run;
      run += c;
    }
    base[e] = run;  // the total for now
  }
  __syncthreads();
  if (warp == 0) expert_offsets_warp(base, E, offsets, lane);
  __syncthreads();
  for (int b = begin; b < end; b += 32) {
    const int p = b + lane;
    const bool valid = p < end;
    const int e = valid ? top_idx[p] : -1;
    const unsigned same = __match_any_sync(0xffffffffu, e);
    if (valid) pairs[base[e] + cnt[warp * E + e] + __popc(same & lt_mask)] = p;
    __syncwarp();  // every lane has read cnt before the group's first lane advances it
    if (valid && (same & lt_mask) == 0) cnt[warp * E + e] += __popc(same);
    __syncwarp();
  }
  if (tiles == nullptr || warp != 0) return;
  expert_tiles_warp(base, E, R, tile_rows, tiles, max_tiles, lane);
}

int group_warps(int64_t E) {
  const int64_t per_warp = E * 4;
  int64_t nw = (kGroupSmemLimit - per_warp) / per_warp;  // cnt[nw][E] + base[E] within the limit
  return static_cast<int>(std::clamp<int64_t>(nw, 1, kGroupThreads / 32));
}

struct DeviceLauncher {
  cudaStream_t stream;
  template <int BM, bool kGateUp>
  void small(const GroupedArgs& g, int64_t grid_x, int64_t grid_y) {
    constexpr int smem = small_smem_bytes<BM>();
    auto* kernel = grouped_gemm_kernel<BM, kGateUp>;
    if (smem > 48 * 1024) CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    kernel<<<dim3(static_cast<unsigned>(grid_x), static_cast<unsigned>(grid_y)), kSmallThreads, smem, stream>>>(g);
    CUDA_CHECK_LAUNCH();
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
    const TmaMap map = bf16_row_tile_map(g.w, rows, g.Kd, C::kBN / 2);
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

static_assert(kGroupedMoeVariants == kLastVariant, "tuning.h lists the variants");
std::atomic<int> g_variant{0};

GroupedPlanImpl to_impl(const GroupedPlan& p) { return {p.variant, p.tile_rows, p.max_tiles}; }

}  // namespace

int set_grouped_moe_variant(int variant) { return g_variant.exchange(variant); }

bool grouped_moe_supported(int64_t T, int64_t H, int64_t I, int64_t E, int64_t K, const void* x,
                           const void* gate_up, const void* down) {
  auto aligned = [](const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; };
  constexpr int64_t kMaxDim = int64_t{1} << 20;  // N tiles (gridDim.y of the tile kernel) <= 16384
  return T >= 1 && H >= 8 && I >= 8 && H % 8 == 0 && I % 8 == 0 && H <= kMaxDim && I <= kMaxDim && E >= 1 &&
         E <= 6144 && K >= 1 && K <= E && T * K <= (int64_t{1} << 30) && H * 2 * I < (int64_t{1} << 31) &&
         aligned(x) && aligned(gate_up) && aligned(down);
}

GroupedPlan grouped_moe_plan(int64_t R, int64_t E) {
  GroupedPlanImpl p = grouped_plan(g_variant.load(), R, E);
  if (p.variant >= kFirstWgmmaVariant && !current_device_has_wgmma()) p = grouped_plan(kFirstTileVariant, R, E);
  return {p.variant, p.tile_rows, p.max_tiles};
}

void launch_moe_group(const int32_t* top_idx, int64_t R, int64_t E, const GroupedPlan& plan, int32_t* offsets,
                      int32_t* pairs, int32_t* tiles, cudaStream_t stream) {
  if (E <= 0) return;
  const int nw = group_warps(E);
  const size_t smem = static_cast<size_t>(nw + 1) * static_cast<size_t>(E) * 4;
  const bool list = plan.max_tiles > 0 && tiles != nullptr;
  group_kernel<<<1, kGroupThreads, smem, stream>>>(top_idx, static_cast<int>(R), static_cast<int>(E), nw, offsets,
                                                   pairs, plan.tile_rows, list ? static_cast<int>(plan.max_tiles) : 0,
                                                   list ? reinterpret_cast<int4*>(tiles) : nullptr);
  CUDA_CHECK_LAUNCH();
}

void launch_grouped_gate_up(const GroupedPlan& plan, const uint16_t* x, const uint16_t* gate_up,
                            const int32_t* offsets, const int32_t* pairs, const int32_t* tiles, int64_t R, int64_t E,
                            int64_t K, int64_t H, int64_t I, uint16_t* act, cudaStream_t stream) {
  DeviceLauncher l{stream};
  run_grouped_gate_up(l, to_impl(plan), x, gate_up, offsets, pairs, tiles, R, E, K, H, I, act);
}

void launch_grouped_down(const GroupedPlan& plan, const uint16_t* act, const uint16_t* down, const int32_t* offsets,
                         const int32_t* pairs, const int32_t* tiles, const float* top_w, int64_t R, int64_t E,
                         int64_t H, int64_t I, uint16_t* y, cudaStream_t stream) {
  DeviceLauncher l{stream};
  run_grouped_down(l, to_impl(plan), act, down, offsets, pairs, tiles, top_w, R, E, H, I, y);
}

}  // namespace dgemma::cuda
