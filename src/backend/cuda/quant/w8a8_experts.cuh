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

}  // namespace dgemma::cuda
