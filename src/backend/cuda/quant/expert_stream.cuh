#pragma once
// The weight-streaming ("swap-AB") grouped expert GEMMs for few rows per expert (kernels:
// quant/expert_stream_w8a8_kernel.cuh, quant/expert_stream_w4a16_kernel.cuh; design:
// quant/expert_stream_plan.cuh; sm_90a only). The device grouping of moe/grouped.cuh (offsets, pairs
// by expert); no tile list.
//   * W8A8 (FP8-dynamic experts): bf16 activations in, quantised per row inside the kernel exactly as
//     launch_quantize_fp8_rows does (gate_up: per token; down: per grouped row of act), E4M3 weights
//     [E, Nw, Kd] as the checkpoint stores them, per-channel row scales; the maths of
//     launch_grouped_*_w8a8 (quant/w8a8_experts.cuh) without the separate quantisation launches.
//   * W4A16 (NVFP4) / W8A16 (FP8): the weights and block scales in the device layout of
//     quant/layout.h, bf16 activations; the maths of launch_grouped_*_fp4 / _fp8 (quant/weight_only.cuh).
// Each launch is one kernel; with PDL (ExpertStreamOptions::pdl) it prefetches its first weight stages before it
// waits for the previous kernel.
#include <cstdint>

#include "backend/cuda/core/stream.h"
#include "backend/cuda_options.h"

namespace dgemma::cuda {

// How a launch is shaped (0: automatic, quant/expert_stream_plan.cuh expert_stream_plan). The MoE
// block takes the automatic plan; the GPU checks and the benchmark force each shape.
struct ExpertStreamOptions {
  int max_rows = 0;        // an expert's rows taken a chunk: 16, 32 or 64
  int blocks_per_cta = 0;  // weight blocks a CTA streams (gate_up: 64 gate + 64 up rows; down: 128 rows)
  // Programmatic dependent launch (core/launch.cuh; CudaOptions::pdl): the kernel may start while the
  // previous one finishes, its first weight stages loaded before it waits for that kernel's results.
  bool pdl = false;
};

// The plan a launch ran with (max_rows 0: nothing launched, e.g. no rows).
struct ExpertStreamLaunch {
  int max_rows = 0, stages = 0, blocks_per_cta = 0, ctas_per_sm = 0, smem = 0, grid_x = 0;
};

// Shapes the kernels take: an sm_90 device, 16-byte aligned weights, W8A8 Kd a multiple of 16,
// W4A16 / W8A16 Kd a multiple of 64 (the device layout's stages) and 16-byte aligned block scales,
// output rows (Nw) a multiple of 8, and a plan whose shared memory fits (at the 26B-A4B shapes it does).
bool expert_stream_w8a8_supported(int64_t rows, int64_t Kd, const void* weights);
bool expert_stream_w4a16_supported(bool fp8, int64_t rows, int64_t Kd, const void* weights,
                                   const void* block);

// Whether a MoE call of R routed rows over E experts takes the weight-streaming kernels: the options
// resolved for a hopper-family GPU, and kStream, or kAuto with a mean of at most expert_stream_rows rows
// an expert (R <= E * expert_stream_rows). A pure function of the shapes: a recorded step replays it.
bool expert_stream_chosen(const CudaOptions& options, int64_t R, int64_t E);

// act[r, i] = bf16(bf16(gelu_tanh(bf16(g))) * bf16(u)), g = (q_x[t] . Wg[i]) * s_x[t] * rs[e, i], u likewise
// with the up row I + i, t = pairs[r] / K; q_x, s_x: x [T, H] bf16 quantised per token in the kernel.
ExpertStreamLaunch launch_expert_stream_gate_up_w8a8(const ExpertStreamOptions& o, const uint16_t* x,
                                                     const uint8_t* w, const float* row_scale,
                                                     const int32_t* offsets, const int32_t* pairs, int64_t R,
                                                     int64_t E, int64_t K, int64_t H, int64_t I,
                                                     uint16_t* act, Stream stream);
// y[p, h] = bf16(bf16((q_act[r] . Wd[h]) * s_act[r] * rs[e, h]) * top_w[p]), p = pairs[r]; act [R, I]
// bf16 quantised per grouped row in the kernel.
ExpertStreamLaunch launch_expert_stream_down_w8a8(const ExpertStreamOptions& o, const uint16_t* act,
                                                  const uint8_t* w, const float* row_scale,
                                                  const int32_t* offsets, const int32_t* pairs,
                                                  const float* top_w, int64_t R, int64_t E, int64_t H,
                                                  int64_t I, uint16_t* y, Stream stream);
// NVFP4 (fp8 false: packed [E, 2I, H/2], block scale codes) or FP8 W8A16 (fp8 true: E4M3, block unused):
// act[r, i] as launch_grouped_gate_up_fp4 / _fp8.
ExpertStreamLaunch launch_expert_stream_gate_up_w4a16(const ExpertStreamOptions& o, bool fp8,
                                                      const uint16_t* x, const uint8_t* w,
                                                      const uint8_t* block, const float* row_scale,
                                                      const int32_t* offsets, const int32_t* pairs, int64_t R,
                                                      int64_t E, int64_t K, int64_t H, int64_t I,
                                                      uint16_t* act, Stream stream);
// y[p, h] as launch_grouped_down_fp4 / _fp8.
ExpertStreamLaunch launch_expert_stream_down_w4a16(const ExpertStreamOptions& o, bool fp8,
                                                   const uint16_t* act, const uint8_t* w,
                                                   const uint8_t* block, const float* row_scale,
                                                   const int32_t* offsets, const int32_t* pairs,
                                                   const float* top_w, int64_t R, int64_t E, int64_t H,
                                                   int64_t I, uint16_t* y, Stream stream);

}  // namespace dgemma::cuda
