#pragma once
// W8A8 grouped expert GEMMs for FP8-dynamic experts (sm_90 only), the checkpoint's maths: E4M3
// activations with per-row scales (launch_quantize_fp8_rows, quant/fp8_gemm.h: gate_up's input per token,
// down's per grouped row of the activation) times the checkpoint's E4M3 weights [E, Nw, Kd] (row-major,
// not repacked), then the W8A16 kernels' epilogues (quant/weight_only.cuh). Two kernels: few rows an
// expert (batch-1 denoising) on mma.sync m16n8k32 E4M3 (quant/w8a8_rows_kernel.cuh), more on FP8 wgmma
// tiles with the device grouping's tile list (quant/w8a8_experts_kernel.cuh).
#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/core/stream.h"
#include "backend/cuda_options.h"
#include "backend/cuda/moe/grouped.cuh"

namespace dgemma::cuda {

// Shapes these kernels take: Kd a multiple of 16, output rows a multiple of 8, 16-byte aligned weights
// (and an sm_90 device: the hopper family).
bool grouped_w8a8_supported(int64_t rows, int64_t Kd, const void* weights);
// The kernel and its tile list's shape (for launch_moe_route_group): `kernel` kAuto by the rows an
// expert (the few-rows mma.sync kernel up to 24 on average, the 64 x 128 wgmma tiles past it),
// kSmallRows the few-rows kernel, any other the tiles.
GroupedPlan grouped_w8a8_plan(int64_t R, int64_t E, MoeKernel kernel = MoeKernel::kAuto);

// act[r, i] = bf16(bf16(gelu_tanh(bf16(g))) * bf16(u)), g = (q_x[t] . Wg[i]) * s_x[t] * rs[e, i], u likewise
// with the up row I + i, t = pairs[r] / K.
void launch_grouped_gate_up_w8a8(const GroupedPlan& plan, const uint8_t* q_x, const float* s_x, const uint8_t* w,
                                 const float* row_scale, const int32_t* offsets, const int32_t* pairs,
                                 const int32_t* tiles, int64_t R, int64_t E, int64_t K, int64_t H, int64_t I,
                                 uint16_t* act, Stream stream);
// y[p, h] = bf16(bf16((q_act[r] . Wd[h]) * s_act[r] * rs[e, h]) * top_w[p]), p = pairs[r].
void launch_grouped_down_w8a8(const GroupedPlan& plan, const uint8_t* q_act, const float* s_act, const uint8_t* w,
                              const float* row_scale, const int32_t* offsets, const int32_t* pairs,
                              const int32_t* tiles, const float* top_w, int64_t R, int64_t E, int64_t H, int64_t I,
                              uint16_t* y, Stream stream);

// The W8A8 dense linear on the 64 x 128 wgmma tiles (the down kernel's dense mode): out [T, N] =
// bf16((q[t] . w[n]) * s_x[t] * row_scale[n]), q [T, K] E4M3 with per-row scales s_x, w [N, K] E4M3 as
// stored. Shapes: grouped_w8a8_supported(N, K, w).
void launch_dense_w8a8(const uint8_t* q, const float* s_x, const uint8_t* w, const float* row_scale, int64_t T,
                       int64_t N, int64_t K, uint16_t* out, Stream stream);
// Whether a W8A8 dense linear of T rows runs on those tiles rather than cuBLASLt (quant/fp8_gemm.h):
// `gemm` as resolved (cuda_options.h), kAuto the tiles up to kDenseW8a8TileRows rows; always a shape the
// tiles take.
constexpr int64_t kDenseW8a8TileRows = 256;
bool dense_w8a8_on_tiles(W8a8Gemm gemm, int64_t T, int64_t N, int64_t K, const void* w);

}  // namespace dgemma::cuda
