#pragma once
// MoE kernels (host launchers; kernels in moe.cu, orchestration with the per-expert cuBLAS GEMMs in
// cuda_moe.cpp). Rows of the grouped buffers are (token, slot) pairs sorted by expert: perm[r] is the
// pair id t * K + slot of row r.
#include <cuda_runtime_api.h>

#include <cstdint>

namespace dgemma::cuda {

// Whether the routing kernels below take their faster forms (tuning.h set_fused_moe_routing).
bool fused_moe_routing();

// Per token: fp32 softmax over the E bf16 router logits (the sum taken in index order, as the CPU
// does), top-K (ties to the lower expert index), weights renormalised in fp32 and times
// per_expert_scale. probs (f32 [T, E]) may be null. order[t, j] is the slot holding the j-th smallest
// selected expert index (the accumulation order).
void launch_moe_topk(const uint16_t* logits, int64_t T, int64_t E, int64_t K, const uint16_t* per_expert_scale,
                     float* probs, int32_t* top_idx, float* top_w, int32_t* order, cudaStream_t stream);
// xs[r, :] = x[perm[r] / K, :]
void launch_moe_gather(const uint16_t* x, int64_t H, const int32_t* perm, int64_t R, int64_t K, uint16_t* xs,
                       cudaStream_t stream);
// act[r, i] = bf16(bf16(gelu_tanh(gu[r, i])) * gu[r, I + i]) for rows of gu [R, 2I]
void launch_moe_act(const uint16_t* gu, int64_t R, int64_t I, uint16_t* act, cudaStream_t stream);
// y[perm[r], :] = bf16(ys[r, :] * w[perm[r]])
void launch_moe_weight(const uint16_t* ys, const int32_t* perm, const float* w, int64_t R, int64_t H, uint16_t* y,
                       cudaStream_t stream);
// out[t, :] = bf16 running sum of y[t * K + order[t, j], :] over j (rounded after every add)
void launch_moe_combine(const uint16_t* y, const int32_t* order, int64_t T, int64_t K, int64_t H, uint16_t* out,
                        cudaStream_t stream);

// The faster forms (moe_route.cu), bit-identical to the kernels above; launch_moe_topk and
// launch_moe_combine call them when fused_moe_routing() and they take the shape (they return false
// when not: E > 256 for the top-k; K > 64, H % 8 or unaligned rows for the combine).
bool launch_moe_topk_reg(const uint16_t* logits, int64_t T, int64_t E, int64_t K, const uint16_t* per_expert_scale,
                         float* probs, int32_t* top_idx, float* top_w, int32_t* order, cudaStream_t stream);
bool launch_moe_combine_vec(const uint16_t* y, const int32_t* order, int64_t T, int64_t K, int64_t H, uint16_t* out,
                            cudaStream_t stream);
// launch_moe_topk and launch_moe_group (grouped_moe.cuh) in one kernel: the same outputs (offsets
// [E + 1], pairs [R], the tile list when max_tiles > 0, with tile_rows rows a tile). Needs
// moe_route_group_scratch(T, E, K) i32 of scratch (0: the shape is not supported — E > 256 or
// K > 32 — use the two kernels) and `ticket`, a device word that is zero (the kernel leaves it zero).
int64_t moe_route_group_scratch(int64_t T, int64_t E, int64_t K);
void launch_moe_route_group(const uint16_t* logits, int64_t T, int64_t E, int64_t K, const uint16_t* per_expert_scale,
                            float* probs, int32_t* top_idx, float* top_w, int32_t* order, int32_t* offsets,
                            int32_t* pairs, int32_t* tiles, int64_t max_tiles, int tile_rows, int32_t* scratch,
                            unsigned* ticket, cudaStream_t stream);

}  // namespace dgemma::cuda
