// The launches of the MoE routing (moe/route_kernel.cuh: the top-k fused with the grouping of the
// (token, slot) pairs by expert — each block counts its pairs per expert and ranks each pair among the
// block's pairs of its expert; the last block to finish (a ticket on a context counter that it resets)
// turns the per-block counts into offsets and the tile list, then place_pairs_kernel places every pair
// with the whole grid: the stable sort by expert).
#include <climits>

#include "backend/cuda/core/common.cuh"
#include "backend/cuda/moe/expert_groups.cuh"
#include "backend/cuda/moe/route.cuh"
#include "backend/cuda/moe/route_kernel.cuh"
#include "backend/cuda_limits.h"
#include "util/error.h"

namespace dgemma::cuda {

// The limits the engine checks a model against at load (cuda_limits.h) are the kernels' own.
static_assert(kRouteMaxExperts == cuda_limits::kMaxExperts && kRouteMaxK == cuda_limits::kMaxTopK);

namespace {

// The register slots per lane for E experts (0: more than the kernels take).
int slots_for(int64_t E) { return E <= 32 ? 1 : E <= 64 ? 2 : E <= 128 ? 4 : E <= kRouteMaxExperts ? 8 : 0; }

}  // namespace

bool moe_route_supported(int64_t E, int64_t K) { return slots_for(E) > 0 && K >= 1 && K <= E && K <= kRouteMaxK; }

int64_t moe_route_group_scratch(int64_t T, int64_t E, int64_t K) {
  if (!moe_route_supported(E, K) || T <= 0 || T * K > INT_MAX) return 0;
  return ceil_div(T, kRouteTokens) * E + T * K;
}

void launch_moe_route_group(const uint16_t* logits, int64_t T, int64_t E, int64_t K, const uint16_t* per_expert_scale,
                            float* probs, int32_t* top_idx, float* top_w, int32_t* order, int32_t* offsets,
                            int32_t* pairs, int32_t* tiles, int64_t max_tiles, int tile_rows, int32_t* scratch,
                            unsigned* ticket, Stream stream) {
  DG_CHECK(moe_route_group_scratch(T, E, K) > 0);
  const int64_t blocks = ceil_div(T, kRouteTokens);
  RouteLaunch a{logits, T, static_cast<int>(E), static_cast<int>(K), per_expert_scale, probs, top_idx, top_w, order,
                offsets, pairs, max_tiles > 0 ? reinterpret_cast<int4*>(tiles) : nullptr, static_cast<int>(max_tiles),
                tile_rows, scratch, scratch + blocks * E, ticket};
  const unsigned grid = static_cast<unsigned>(blocks);
  switch (slots_for(E)) {
    case 1:
      launch_kernel(stream, route_group_kernel<1>, grid, kRouteWarps * 32, 0, a);
      break;
    case 2:
      launch_kernel(stream, route_group_kernel<2>, grid, kRouteWarps * 32, 0, a);
      break;
    case 4:
      launch_kernel(stream, route_group_kernel<4>, grid, kRouteWarps * 32, 0, a);
      break;
    default:
      launch_kernel(stream, route_group_kernel<8>, grid, kRouteWarps * 32, 0, a);
      break;
  }
  launch_kernel(stream, place_pairs_kernel, static_cast<unsigned>(ceil_div(T * K, 256)), 256, 0, a,
                static_cast<int>(kRouteTokens * K));
}

}  // namespace dgemma::cuda
