#pragma once
// The device-grouped MoE experts (kernels in moe/grouped.cu, orchestration in moe/moe.cpp): the
// (token, slot) pairs are grouped by expert on the device, then one grouped GEMM kernel per projection
// runs every expert with a fixed grid (no host synchronisation, CUDA-graph capturable).
//
// Layouts: pairs[r] is the pair id t * K + slot of grouped row r; rows of expert e are
// offsets[e] .. offsets[e + 1] - 1, in pair order (a stable grouping, moe/route.cuh launch_moe_route_group).
// When the plan (below) has a tile list the GEMMs also read a tile list written by the grouping: entry
// j (4 int32, the buffer 16-byte aligned) is {expert, first grouped row, rows (1 .. tile height)} for
// the tiles of every expert in expert order, then {-1, 0, 0, 0} up to plan.max_tiles entries. All
// launches are no-ops for empty inputs.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/core/stream.h"
#include "backend/cuda_options.h"

namespace dgemma::cuda {

// Whether the grouped kernels take a shape. Rule: H and I multiples of 8 (16-byte rows for cp.async),
// x / gate_up / down 16-byte aligned, R = T * K at most 2^30, H and I at most 2^20 (grid limits),
// 1 <= E <= 65535 (a grid dimension) and 1 <= K <= E.
bool grouped_moe_supported(int64_t T, int64_t H, int64_t I, int64_t E, int64_t K, const void* x,
                           const void* gate_up, const void* down);

// Which grouped GEMM kernel a call with R grouped rows over E experts runs (`kernel`, kAuto: by the mean
// rows per expert, the hopper family's kernels where `hopper`) and its tile list: max_tiles > 0
// entries of tile_rows-row tiles, or none (the small-rows kernel). One plan is made per MoE call and
// passed to the grouping and both GEMMs.
struct GroupedPlan {
  MoeKernel kernel = MoeKernel::kSmallRows;
  int tile_rows = 0;
  int64_t max_tiles = 0;  // entries of the tile list (0: none)
};
GroupedPlan grouped_moe_plan(int64_t R, int64_t E, MoeKernel kernel, bool hopper);

// act[r, i] = bf16(bf16(gelu_tanh(bf16(x[t] . Wg[i]))) * bf16(x[t] . Wu[i])) for every grouped row r of
// expert e, t = pairs[r] / K, Wg = gate_up[e, 0:I, :], Wu = gate_up[e, I:2I, :] (gate_up [E, 2I, H]).
void launch_grouped_gate_up(const GroupedPlan& plan, const uint16_t* x, const uint16_t* gate_up,
                            const int32_t* offsets, const int32_t* pairs, const int32_t* tiles, int64_t R, int64_t E,
                            int64_t K, int64_t H, int64_t I, uint16_t* act, Stream stream);

// y[p, h] = bf16(bf16(act[r] . down[e, h, :]) * top_w[p]) for every grouped row r of expert e,
// p = pairs[r] (down [E, H, I]; y [R, H] indexed by pair id).
void launch_grouped_down(const GroupedPlan& plan, const uint16_t* act, const uint16_t* down, const int32_t* offsets,
                         const int32_t* pairs, const int32_t* tiles, const float* top_w, int64_t R, int64_t E,
                         int64_t H, int64_t I, uint16_t* y, Stream stream);

}  // namespace dgemma::cuda
