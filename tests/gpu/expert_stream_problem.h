#pragma once
// One expert-GEMM problem of the MoE block for the checks and the benchmark of the weight-streaming
// expert kernels (gpu_check_expert_stream.cpp, gpu_bench_expert_stream.cpp): a routing made on the
// host (the grouping kernel's offsets and pairs, by expert), random quantised expert weights in one
// format, the inputs on the GPU in the layouts the kernels take, the CPU reference of the two
// projections (cpu/moe.cpp's expert maths), and the launches of the grouped kernels in use today
// (quant/w8a8_experts.cuh, quant/weight_only.cuh) and of the weight-streaming ones (expert_stream.cuh).
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/quant/expert_stream.cuh"
#include "backend/cuda/moe/grouped.cuh"
#include "gpu_check_util.h"

namespace dgemma::gpu_test {

enum class ExpertFormat {
  kW8a8,   // FP8-dynamic: E4M3 weights with channel scales, activations quantised per row (FP8 wgmma)
  kNvfp4,  // NVFP4 W4A16: packed E2M1 with E4M3 block scales and a per-projection global scale
  kW8a16,  // FP8 weights with bf16 activations
};
const char* format_name(ExpertFormat f);

struct ExpertProblem {
  ExpertFormat format = ExpertFormat::kW8a8;
  int64_t T = 0, H = 0, I = 0, E = 0, K = 0, R = 0;
  std::vector<int32_t> offsets, pairs;  // host routing: expert e's rows offsets[e] .. offsets[e + 1] - 1
  std::vector<float> top_w;             // [R] by pair id
  Weight gate_up, down;                 // host weights, checkpoint layout
  Tensor x;                             // host bf16 [T, H]
  // On the GPU: the routing, x, the weights in the device layout (W8A8: as stored; NVFP4 / W8A16:
  // quant_layout.h), the row scales; the W8A8 grouped kernel's plan and tile list.
  Tensor d_offsets, d_pairs, d_top_w, d_x, d_gu, d_gu_block, d_gu_rs, d_dn, d_dn_block, d_dn_rs, d_tiles;
  cuda::GroupedPlan w8a8_plan;
  Tensor d_q, d_s;  // the W8A8 grouped kernels' quantised activations and scales (scratch)
  int64_t experts_hit() const;
  // Weight bytes (packed values, block scales) of the experts with rows: gate_up's and down's.
  double gate_up_bytes() const;
  double down_bytes() const;
};

// skew 0: every token picks top_k distinct experts uniformly (~T K / E rows an expert); skew s > 0:
// expert e is picked with weight exp(s z_e), z_e ~ N(0, 1) (a router's imbalance); `empty` experts
// (the last ones) are never picked. weights_of: a problem of the same format and shape whose weights
// (host and device) this one shares instead of making new ones.
ExpertProblem make_expert_problem(Data& d, ExpertFormat f, int64_t T, int64_t H, int64_t I, int64_t E,
                                  int64_t K, double skew, int64_t empty = 0,
                                  const ExpertProblem* weights_of = nullptr);

// The CPU reference: act [R, I] of gate_up, and y [R, H] (by pair id) of down on the input act_in.
std::vector<uint16_t> reference_gate_up(const ExpertProblem& p);
std::vector<uint16_t> reference_down(const ExpertProblem& p, const std::vector<uint16_t>& act_in);

// The grouped kernels in use (W8A8 with their activation quantisation launches), on the CUDA
// backend's stream: act [R, I] from x; y [R, H] from act_in [R, I] (GPU tensors).
void old_gate_up(const ExpertProblem& p, const Tensor& act, cuda::Stream stream);
void old_down(const ExpertProblem& p, const Tensor& act_in, const Tensor& y, cuda::Stream stream);
// The weight-streaming kernels.
cuda::ExpertStreamLaunch new_gate_up(const ExpertProblem& p, const cuda::ExpertStreamOptions& o,
                                     const Tensor& act, cuda::Stream stream);
cuda::ExpertStreamLaunch new_down(const ExpertProblem& p, const cuda::ExpertStreamOptions& o,
                                  const Tensor& act_in, const Tensor& y, cuda::Stream stream);

// The CUDA backend's stream.
cuda::Stream cuda_stream();

}  // namespace dgemma::gpu_test
