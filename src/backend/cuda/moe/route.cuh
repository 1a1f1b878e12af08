#pragma once
// The MoE routing: the top-k of every token fused with the grouping of its (token, slot) pairs by
// expert (host launcher; kernels in moe/route_kernel.cuh; the orchestration with the grouped expert
// GEMMs and the combine in moe/moe.cpp). Rows of the grouped buffers are (token, slot) pairs sorted by
// expert: pairs[r] is the pair id t * K + slot of row r.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/core/stream.h"

namespace dgemma::cuda {

// The routing's shape limits: at most 256 experts and top-k 32 (moe_route_group_scratch is 0 past them).
bool moe_route_supported(int64_t E, int64_t K);

// Per token: fp32 softmax over the E bf16 router logits (the sum taken in index order, as the CPU
// does), top-K (ties to the lower expert index), weights renormalised in fp32 and times
// per_expert_scale; probs (f32 [T, E]) may be null. order[t, j] is the slot holding the j-th smallest
// selected expert index (the accumulation order). Fused with the grouping of the pairs by expert:
// offsets [E + 1], pairs [R] and, when max_tiles > 0, the tile list (moe/grouped.cuh) with tile_rows
// rows a tile. Needs moe_route_group_scratch(T, E, K) i32 of scratch (0: the shape is not supported)
// and `ticket`, a device word that is zero (the kernels leave it zero).
int64_t moe_route_group_scratch(int64_t T, int64_t E, int64_t K);
void launch_moe_route_group(const uint16_t* logits, int64_t T, int64_t E, int64_t K, const uint16_t* per_expert_scale,
                            float* probs, int32_t* top_idx, float* top_w, int32_t* order, int32_t* offsets,
                            int32_t* pairs, int32_t* tiles, int64_t max_tiles, int tile_rows, int32_t* scratch,
                            unsigned* ticket, Stream stream);

}  // namespace dgemma::cuda
