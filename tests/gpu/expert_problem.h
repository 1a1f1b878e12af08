#pragma once
// One expert-GEMM problem of the MoE block for the expert GEMM benchmarks (gpu_bench_experts.cpp,
// gpu_bench_tp_experts.cpp): a routing given as each token's top-k experts, grouped on the host as the
// grouping kernel writes it (offsets, pairs and tile list, by expert), random expert weights in one
// format, the inputs on the GPU in the layouts the kernels take, and the launches of the grouped kernels
// (moe/grouped.cuh, quant/w8a8_experts.cuh, quant/weight_only.cuh) over all experts or over one rank's
// experts as the expert-parallel MoE runs them (moe/moe.cpp).
#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
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
  kBf16,   // bf16 weights (the grouped bf16 kernels with their tile list)
};
const char* format_name(ExpertFormat f);
// Weight bytes per value (NVFP4: the block scales included).
double bytes_per_weight(ExpertFormat f);
// The K step of the format's grouped kernels: down's I must be a multiple of it.
int64_t k_granule(ExpertFormat f);

struct ExpertProblem {
  ExpertFormat format = ExpertFormat::kW8a8;
  int64_t T = 0, H = 0, I = 0, E = 0, K = 0, R = 0;
  std::vector<int32_t> offsets, pairs;  // host routing: expert e's rows offsets[e] .. offsets[e + 1] - 1
  std::vector<int32_t> tiles;           // host tile list of `plan` (empty without one)
  std::vector<float> top_w;             // [R] by pair id
  Weight gate_up, down;                 // host weights, checkpoint layout (bf16: none, made on the GPU)
  Tensor x;                             // host bf16 [T, H]
  // On the GPU: the routing, x, the weights in the device layout (W8A8, bf16: as stored; NVFP4 / W8A16:
  // quant_layout.h), the row scales; the grouped kernel's plan (W8A8, bf16) and tile list.
  Tensor d_offsets, d_pairs, d_top_w, d_x, d_gu, d_gu_block, d_gu_rs, d_dn, d_dn_block, d_dn_rs, d_tiles;
  cuda::GroupedPlan plan;
  Tensor d_q, d_s;  // the W8A8 grouped kernels' quantised activations and scales (scratch)
  int64_t experts_hit() const;
  // Weight bytes (packed values, block scales) of the experts with rows: gate_up's and down's.
  double gate_up_bytes() const;
  double down_bytes() const;
};

// Random host experts [E, N, K] in FP8 (E4M3 codes of magnitude 2^-2 .. 2^2, random sign and mantissa,
// channel scales around typical / 1.6) or NVFP4 (uniform nibbles, block scale codes 0x20 .. 0x5f with
// about one in 64 zero, one global scale per `rows_per_scale` rows), in the checkpoint layout.
Weight random_experts(Data& d, bool fp8, int64_t E, int64_t N, int64_t K, int64_t rows_per_scale, float typical);

// top_idx [T * K]: token t's K distinct experts (support/expert_split.h random_top_k). weights_of: a
// problem of the same format and shape whose weights (host and device) this one shares instead of
// making new ones.
ExpertProblem make_expert_problem(Data& d, ExpertFormat f, int64_t H, int64_t I, int64_t E, int64_t K,
                                  const std::vector<int32_t>& top_idx,
                                  const ExpertProblem* weights_of = nullptr);

// Experts [first, first + count) of a problem as one rank of the split by expert runs them (moe/moe.cpp
// with expert_first): the weights of those experts, the routing's offsets from `first`, the full R and
// the tile list restricted to them (launch_moe_tiles_local: renumbered, the others skipped).
struct ExpertSlice {
  int64_t first = 0, count = 0;
  Tensor d_tiles;
};
ExpertSlice expert_slice(const ExpertProblem& p, int64_t first, int64_t count);

// The grouped kernels (W8A8 with their activation quantisation launches), on `stream`: act [R, I] from
// x; y [R, H] from act_in [R, I] (GPU tensors). Without a slice: every expert.
void grouped_gate_up(const ExpertProblem& p, const ExpertSlice& s, const Tensor& act, cuda::Stream stream);
void grouped_down(const ExpertProblem& p, const ExpertSlice& s, const Tensor& act_in, const Tensor& y,
                  cuda::Stream stream);
void grouped_gate_up(const ExpertProblem& p, const Tensor& act, cuda::Stream stream);
void grouped_down(const ExpertProblem& p, const Tensor& act_in, const Tensor& y, cuda::Stream stream);

// The CUDA backend's stream.
cuda::Stream cuda_stream();

// The expert benchmarks' timing: ms of one `launch` sequence on cuda_stream(), the fastest of 5 bursts
// of 10 back to back (after 3 warm-up launches).
double time_launches(const std::function<void()>& launch);

constexpr double kHbmBytesPerS = 3.35e12;  // H100 SXM HBM3

}  // namespace dgemma::gpu_test
