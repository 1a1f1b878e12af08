// The faster forms of the MoE routing kernels (moe.cuh; moe.cu holds the earlier ones, which stay the
// fallback and the reference the GPU checks compare these with bit for bit):
//   - top-k with the probabilities in registers (expert e = lane + 32 m in slot m of its lane): the
//     softmax as topk_kernel (fp32 exps, the sum in index order), each of the K picks one max and one
//     min warp reduction on keys (the probability's bits + 1; 0 for a taken or NaN one: non-negative
//     floats order as their bits and equal keys are equal probabilities, so max key then min index is
//     topk_kernel's pick), the accumulation order by rank counting instead of lane 0's insertion sort;
//   - the same top-k fused with the grouping of the (token, slot) pairs by expert (grouped_moe.cuh's
//     offsets / pairs / tile list): each block counts its pairs per expert and ranks each pair among
//     the block's pairs of its expert; the last block to finish (a ticket on a context counter that it
//     resets) turns the per-block counts into offsets and places every pair. The grouping is the
//     stable sort by expert, so the result is launch_moe_group's exactly;
//   - the combine with 16-byte words, one word a thread, all K rows' words loaded before the in-order
//     bf16 adds.
#include <atomic>
#include <climits>
#include <cstdlib>
#include <string_view>
#include <type_traits>

#include "backend/cuda/common.cuh"
#include "backend/cuda/expert_groups.cuh"
#include "backend/cuda/moe.cuh"
#include "backend/cuda/moe_combine_kernel.cuh"
#include "backend/cuda/moe_route_kernel.cuh"
#include "backend/cuda/norm_rope.cuh"

namespace dgemma::cuda {
namespace {

// The earlier combine (set_small_kernel_variant(2), A/B runs): one block of kCombineThreads threads a
// token looping over its words, the order through shared memory. The same adds.
__global__ void __launch_bounds__(kCombineThreads)
    combine_token_kernel(const uint4* __restrict__ y, const int32_t* __restrict__ order, int K, int64_t words,
                         uint4* __restrict__ out) {
  __shared__ int32_t o[kCombineMaxK];
  const int64_t t = blockIdx.x;
  for (int j = threadIdx.x; j < K; j += blockDim.x) o[j] = order[t * K + j];
  __syncthreads();
  const uint4* yt = y + t * K * words;
  for (int64_t i = threadIdx.x; i < words; i += blockDim.x) {
    float acc[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) acc[k] = 0.f;
    for (int j = 0; j < K; ++j) {
      float f[8];
      unpack_bf16x8(yt[o[j] * words + i], f);
#pragma unroll
      for (int k = 0; k < 8; ++k) acc[k] = round_bf16(__fadd_rn(acc[k], f[k]));
    }
    out[t * words + i] = pack_bf16x8(acc);
  }
}

std::atomic<bool>& split_placement_setting() {
  static std::atomic<bool> on{[] {
    const char* e = std::getenv("DGEMMA_ROUTE_SPLIT");
    return e == nullptr || std::string_view(e) != "0";  // on unless DGEMMA_ROUTE_SPLIT=0
  }()};
  return on;
}

// The register slots per lane for E experts (0: more than the kernels take).
int slots_for(int64_t E) { return E <= 32 ? 1 : E <= 64 ? 2 : E <= 128 ? 4 : E <= 256 ? 8 : 0; }

}  // namespace

bool launch_moe_topk_reg(const uint16_t* logits, int64_t T, int64_t E, int64_t K, const uint16_t* per_expert_scale,
                         float* probs, int32_t* top_idx, float* top_w, int32_t* order, cudaStream_t stream) {
  const int slots = slots_for(E);
  if (slots == 0 || K < 1 || K > E) return false;
  if (T <= 0) return true;
  const unsigned blocks = static_cast<unsigned>(ceil_div(T, kTopkWarps));
  const int e = static_cast<int>(E), k = static_cast<int>(K);
  auto run = [&](auto kernel) {
    kernel<<<blocks, kTopkWarps * 32, 0, stream>>>(logits, T, e, k, per_expert_scale, probs, top_idx, top_w, order);
  };
  switch (slots) {
    case 1: run(topk_reg_kernel<1>); break;
    case 2: run(topk_reg_kernel<2>); break;
    case 4: run(topk_reg_kernel<4>); break;
    default: run(topk_reg_kernel<8>); break;
  }
  CUDA_CHECK_LAUNCH();
  return true;
}

int64_t moe_route_group_scratch(int64_t T, int64_t E, int64_t K) {
  if (slots_for(E) == 0 || K < 1 || K > E || K > kRouteMaxK || T <= 0 || T * K > INT_MAX) return 0;
  return ceil_div(T, kRouteTokens) * E + T * K;  // the most blocks of either shape (kRouteTokens <= 16)
}

void launch_moe_route_group(const uint16_t* logits, int64_t T, int64_t E, int64_t K, const uint16_t* per_expert_scale,
                            float* probs, int32_t* top_idx, float* top_w, int32_t* order, int32_t* offsets,
                            int32_t* pairs, int32_t* tiles, int64_t max_tiles, int tile_rows, int32_t* scratch,
                            unsigned* ticket, cudaStream_t stream) {
  const bool earlier = small_kernel_variant() == 2;
  const int64_t blocks = ceil_div(T, earlier ? kRouteTokensEarlier : kRouteTokens);
  RouteLaunch a{logits, T, static_cast<int>(E), static_cast<int>(K), per_expert_scale, probs, top_idx, top_w, order,
                offsets, pairs, max_tiles > 0 ? reinterpret_cast<int4*>(tiles) : nullptr, static_cast<int>(max_tiles),
                tile_rows, scratch, scratch + blocks * E, ticket};
  const unsigned grid = static_cast<unsigned>(blocks);
  const bool split = split_placement_setting().load(std::memory_order_relaxed);
  auto run = [&](auto tokens, auto warps, auto place) {
    constexpr int kT = decltype(tokens)::value, kW = decltype(warps)::value;
    constexpr bool kP = decltype(place)::value;
    switch (slots_for(E)) {
      case 1: route_group_kernel<1, kT, kW, kP><<<grid, kW * 32, 0, stream>>>(a); break;
      case 2: route_group_kernel<2, kT, kW, kP><<<grid, kW * 32, 0, stream>>>(a); break;
      case 4: route_group_kernel<4, kT, kW, kP><<<grid, kW * 32, 0, stream>>>(a); break;
      default: route_group_kernel<8, kT, kW, kP><<<grid, kW * 32, 0, stream>>>(a); break;
    }
    CUDA_CHECK_LAUNCH();
    if (!kP) {
      place_pairs_kernel<<<static_cast<unsigned>(ceil_div(T * K, 256)), 256, 0, stream>>>(a, static_cast<int>(kT * K));
      CUDA_CHECK_LAUNCH();
    }
  };
  using Early = std::integral_constant<int, kRouteTokensEarlier>;
  using EarlyWarps = std::integral_constant<int, kRouteWarpsEarlier>;
  using Tokens = std::integral_constant<int, kRouteTokens>;
  using Warps = std::integral_constant<int, kRouteWarps>;
  if (earlier)
    run(Early{}, EarlyWarps{}, std::true_type{});
  else if (split)
    run(Tokens{}, Warps{}, std::false_type{});
  else
    run(Tokens{}, Warps{}, std::true_type{});
}

bool set_route_split_placement(bool on) { return split_placement_setting().exchange(on); }

bool launch_moe_combine_vec(const uint16_t* y, const int32_t* order, int64_t T, int64_t K, int64_t H, uint16_t* out,
                            cudaStream_t stream) {
  if (K > kCombineMaxK || !vec8_ok(H, y, out)) return false;
  if (T <= 0 || H <= 0) return true;
  if (small_kernel_variant() == 2) {
    combine_token_kernel<<<static_cast<unsigned>(T), kCombineThreads, 0, stream>>>(
        reinterpret_cast<const uint4*>(y), order, static_cast<int>(K), H / 8, reinterpret_cast<uint4*>(out));
    CUDA_CHECK_LAUNCH();
    return true;
  }
  const int64_t chunks = ceil_div(H / 8, kCombineThreads);
  combine_vec_kernel<<<static_cast<unsigned>(T * chunks), kCombineThreads, 0, stream>>>(
      reinterpret_cast<const uint4*>(y), order, static_cast<int>(K), H / 8, chunks, reinterpret_cast<uint4*>(out));
  CUDA_CHECK_LAUNCH();
  return true;
}

}  // namespace dgemma::cuda
