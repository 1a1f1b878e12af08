// The launches of the weight-streaming expert GEMMs (quant/expert_stream.cuh; kernels in
// quant/expert_stream_w8a8_kernel.cuh and quant/expert_stream_w4a16_kernel.cuh).
// The device operations first: the kernel headers use them (clang-format keeps this order).
// clang-format off
#include "backend/cuda/core/common.cuh"
#include "backend/cuda/core/ptx.cuh"
#include "backend/cuda/quant/ptx.cuh"
#include "backend/cuda/core/wgmma_ptx.cuh"
#include "backend/cuda/core/tma_ptx.cuh"
#include "backend/cuda/quant/expert_stream_ptx.cuh"
#include "backend/cuda/quant/expert_stream_w8a8_kernel.cuh"
#include "backend/cuda/quant/expert_stream_w4a16_kernel.cuh"
// clang-format on
#include "backend/cuda/core/launch.cuh"
#include "backend/cuda/core/tma_map.h"
#include "backend/cuda/quant/expert_stream.cuh"
#include "util/error.h"

namespace dgemma::cuda {
namespace {

struct DeviceStreamLauncher {
  Stream stream;
  bool pdl;
  ExpertStreamLaunch* info;
  TmaMap map(const void* base, int64_t rows, int64_t cols, int box_cols, int box_rows, bool swizzle) {
    return byte_tile_map(base, rows, cols, box_cols, box_rows, swizzle);
  }
  template <bool kGateUp, int kMaxRows>
  void w8a8(const TmaMap& m, const ExpertStreamArgs& g, int grid_x, int64_t grid_y, int smem) {
    info->grid_x = grid_x;
    launch_kernel(stream, pdl, expert_stream_w8a8_kernel<kGateUp, kMaxRows>,
                  dim3(static_cast<unsigned>(grid_x), static_cast<unsigned>(grid_y)), dim3(kStreamThreads), smem, m,
                  g);
  }
  template <bool kGateUp, bool kFp8, int kMaxRows>
  void w4a16(const TmaMap& wm, const TmaMap& sm, const ExpertStreamArgs& g, int grid_x, int64_t grid_y,
             int smem) {
    info->grid_x = grid_x;
    launch_kernel(stream, pdl, expert_stream_w4a16_kernel<kGateUp, kFp8, kMaxRows>,
                  dim3(static_cast<unsigned>(grid_x), static_cast<unsigned>(grid_y)), dim3(kW4a16Threads), smem,
                  wm, sm, g);
  }
};

ExpertStreamLaunch to_launch(const ExpertStreamPlan& p) {
  return {p.max_rows, p.stages, p.blocks_per_cta, p.ctas_per_sm, p.smem, 0};
}

template <bool kGateUp>
ExpertStreamLaunch run_w8a8(const ExpertStreamOptions& o, const ExpertStreamArgs& g, const uint8_t* w,
                            int64_t R, int64_t E, const Stream& stream) {
  const ExpertStreamPlan p =
      expert_stream_plan(kGateUp, R, E, g.N, o.max_rows, o.blocks_per_cta, stream.occupancy->sm_count(),
                         kW8a8StreamTwoCtaRows, [&](int rows) { return w8a8_stream_smem(g.Kd, rows); });
  if (p.max_rows == 0)
    fail(ErrorKind::kUnsupported, "expert_stream W8A8: no plan for Kd={} N={} (max_rows {})", g.Kd, g.N,
         o.max_rows);
  ExpertStreamLaunch info = to_launch(p);
  DeviceStreamLauncher l{stream, o.pdl, &info};
  run_expert_stream_w8a8<kGateUp>(l, p, g, w, E, o.pdl);
  return info;
}

template <bool kGateUp>
ExpertStreamLaunch run_w4a16(const ExpertStreamOptions& o, bool fp8, const ExpertStreamArgs& g,
                             const uint8_t* w, const uint8_t* block, int64_t R, int64_t E,
                             const Stream& stream) {
  const ExpertStreamPlan p = expert_stream_plan(
      kGateUp, R, E, g.N, o.max_rows, o.blocks_per_cta, stream.occupancy->sm_count(), kW4a16StreamTwoCtaRows,
      [&](int rows) {
        return fp8 ? w4a16_stream_smem<true>(kGateUp, g.Kd, rows) : w4a16_stream_smem<false>(kGateUp, g.Kd, rows);
      });
  if (p.max_rows == 0)
    fail(ErrorKind::kUnsupported, "expert_stream W4A16: no plan for Kd={} N={} (max_rows {})", g.Kd, g.N,
         o.max_rows);
  ExpertStreamLaunch info = to_launch(p);
  DeviceStreamLauncher l{stream, o.pdl, &info};
  if (fp8)
    run_expert_stream_w4a16<kGateUp, true>(l, p, g, w, block, E, o.pdl);
  else
    run_expert_stream_w4a16<kGateUp, false>(l, p, g, w, block, E, o.pdl);
  return info;
}

ExpertStreamArgs args(const uint16_t* x, const float* row_scale, const int32_t* offsets, const int32_t* pairs,
                      const float* top_w, uint16_t* out, int64_t Kd, int64_t N, int64_t K) {
  ExpertStreamArgs g;
  g.x = x;
  g.row_scale = row_scale;
  g.offsets = offsets;
  g.pairs = pairs;
  g.top_w = top_w;
  g.out = out;
  g.Kd = static_cast<int>(Kd);
  g.N = static_cast<int>(N);
  g.top_k = static_cast<int>(K);
  return g;
}

bool aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
}

}  // namespace

bool expert_stream_chosen(const CudaOptions& options, int64_t R, int64_t E) {
  if (options.family != KernelFamily::kHopper || E <= 0) return false;
  if (options.experts == ExpertKernels::kStream) return true;
  return options.experts == ExpertKernels::kAuto && R <= E * static_cast<int64_t>(options.expert_stream_rows);
}

bool expert_stream_w8a8_supported(int64_t rows, int64_t Kd, const void* weights) {
  return rows > 0 && rows % 8 == 0 && Kd > 0 && Kd % 16 == 0 && Kd <= (int64_t{1} << 20) && aligned16(weights);
}

bool expert_stream_w4a16_supported(bool fp8, int64_t rows, int64_t Kd, const void* weights,
                                   const void* block) {
  return rows > 0 && rows % 8 == 0 && Kd >= 64 && Kd % 64 == 0 && Kd <= (int64_t{1} << 20) &&
         aligned16(weights) && (fp8 || aligned16(block));
}

ExpertStreamLaunch launch_expert_stream_gate_up_w8a8(const ExpertStreamOptions& o, const uint16_t* x,
                                                     const uint8_t* w, const float* row_scale,
                                                     const int32_t* offsets, const int32_t* pairs, int64_t R,
                                                     int64_t E, int64_t K, int64_t H, int64_t I,
                                                     uint16_t* act, Stream stream) {
  if (R <= 0 || E <= 0 || I <= 0) return {};
  return run_w8a8<true>(o, args(x, row_scale, offsets, pairs, nullptr, act, H, I, K), w, R, E, stream);
}

ExpertStreamLaunch launch_expert_stream_down_w8a8(const ExpertStreamOptions& o, const uint16_t* act,
                                                  const uint8_t* w, const float* row_scale,
                                                  const int32_t* offsets, const int32_t* pairs,
                                                  const float* top_w, int64_t R, int64_t E, int64_t H,
                                                  int64_t I, uint16_t* y, Stream stream) {
  if (R <= 0 || E <= 0 || H <= 0) return {};
  return run_w8a8<false>(o, args(act, row_scale, offsets, pairs, top_w, y, I, H, 1), w, R, E, stream);
}

ExpertStreamLaunch launch_expert_stream_gate_up_w4a16(const ExpertStreamOptions& o, bool fp8,
                                                      const uint16_t* x, const uint8_t* w,
                                                      const uint8_t* block, const float* row_scale,
                                                      const int32_t* offsets, const int32_t* pairs, int64_t R,
                                                      int64_t E, int64_t K, int64_t H, int64_t I,
                                                      uint16_t* act, Stream stream) {
  if (R <= 0 || E <= 0 || I <= 0) return {};
  return run_w4a16<true>(o, fp8, args(x, row_scale, offsets, pairs, nullptr, act, H, I, K), w, block, R, E,
                         stream);
}

ExpertStreamLaunch launch_expert_stream_down_w4a16(const ExpertStreamOptions& o, bool fp8,
                                                   const uint16_t* act, const uint8_t* w,
                                                   const uint8_t* block, const float* row_scale,
                                                   const int32_t* offsets, const int32_t* pairs,
                                                   const float* top_w, int64_t R, int64_t E, int64_t H,
                                                   int64_t I, uint16_t* y, Stream stream) {
  if (R <= 0 || E <= 0 || H <= 0) return {};
  return run_w4a16<false>(o, fp8, args(act, row_scale, offsets, pairs, top_w, y, I, H, 1), w, block, R, E,
                          stream);
}

}  // namespace dgemma::cuda
