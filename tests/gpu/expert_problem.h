#pragma once
// One expert-GEMM problem of the MoE block for the expert GEMM benchmark (gpu_bench_experts.cpp): a
// uniform random routing made on the host (the grouping kernel's offsets and pairs, by expert), random
// quantised expert weights in one format, the inputs on the GPU in the layouts the kernels take, and
// the launches of the grouped kernels (quant/w8a8_experts.cuh, quant/weight_only.cuh).
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/core/stream.h"
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

// Every token picks top_k distinct experts uniformly (~T K / E rows an expert). weights_of: a problem
// of the same format and shape whose weights (host and device) this one shares instead of making new
// ones.
ExpertProblem make_expert_problem(Data& d, ExpertFormat f, int64_t T, int64_t H, int64_t I, int64_t E,
                                  int64_t K, const ExpertProblem* weights_of = nullptr);

// The grouped kernels (W8A8 with their activation quantisation launches), on the CUDA backend's
// stream: act [R, I] from x; y [R, H] from act_in [R, I] (GPU tensors).
void grouped_gate_up(const ExpertProblem& p, const Tensor& act, cuda::Stream stream);
void grouped_down(const ExpertProblem& p, const Tensor& act_in, const Tensor& y, cuda::Stream stream);

// The CUDA backend's stream.
cuda::Stream cuda_stream();

}  // namespace dgemma::gpu_test
