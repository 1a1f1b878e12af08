#pragma once
// The MoE routing kernels of moe/route.cu (the top-k with the probabilities in registers fused with the
// grouping of the (token, slot) pairs by expert, and the placement of the pairs) in a header so that
// the unit tests run them on the host through tests/unit/backend/cuda_emulator.h. On the device, moe/route.cu
// includes core/common.cuh and moe/expert_groups.cuh first. What the kernels need: threadIdx / blockIdx /
// blockDim / gridDim, __syncthreads, __syncwarp, the warp collectives __shfl_xor_sync (warp_reduce),
// __shfl_up_sync / __shfl_sync (moe/expert_groups.cuh), __reduce_max_sync / __reduce_min_sync,
// __float_as_uint, fabsf, __fadd_rn / __fmul_rn / __fdiv_rn, exp_f32, bf16_to_f32, MaxOp, atomicAdd /
// atomicExch, __threadfence(_block), __ldcg / __stcg, make_int4, and the warp steps of
// moe/expert_groups.cuh.
#include <climits>
#include <cstdint>

#include "backend/cuda/core/kernel_macros.cuh"

namespace dgemma::cuda {
// Internal linkage (as moe/combine_kernel.cuh): the unit tests' host build of the kernels shares a
// binary with the device build's host stub.
namespace {

// The fused routing + grouping kernel: blocks of kRouteWarps warps, of which the first kRouteTokens
// route one token each. Why four tokens a block: a token's routing (the softmax, K rounds of warp
// reductions) is a long chain of instructions, and an SM issues one instruction a cycle per scheduler
// (four), so every routing warp gets a scheduler to itself and T = 256 spreads over 64 SMs. The other
// warps join the grouping; eight warps a block (at most 128 registers a thread: two blocks an SM,
// T = 1024 in one wave). The last block's prefix over the per-block counts loads 32 blocks' counts at a
// time.
constexpr int kRouteWarps = 8;
constexpr int kRouteTokens = 4;
constexpr int kPrefixBatch = 32;
// The largest expert count (32 kPer with kPer <= 8 register slots a lane) and top-k the kernel takes.
constexpr int kRouteMaxExperts = 256;
constexpr int kRouteMaxK = 32;

// One token's routing by one warp. ps: the warp's 32 kPer floats; sel: K ints (the selected experts,
// by slot) — both shared memory.
template <int kPer>
__device__ __forceinline__ void route_token(const uint16_t* __restrict__ logits, int64_t t, int E, int K,
                                            const uint16_t* __restrict__ pes, float* __restrict__ probs_out,
                                            int32_t* __restrict__ top_idx, float* __restrict__ top_w,
                                            int32_t* __restrict__ order, float* ps, int* sel) {
  const int lane = threadIdx.x & 31;
  const uint16_t* l = logits + t * E;
  float x[kPer];
  float mx = -INFINITY;
DG_UNROLL
  for (int m = 0; m < kPer; ++m) {
    const int e = lane + 32 * m;
    x[m] = e < E ? bf16_to_f32(l[e]) : -INFINITY;
    mx = fmaxf(mx, x[m]);
  }
  mx = warp_reduce(mx, MaxOp{});
DG_UNROLL
  for (int m = 0; m < kPer; ++m)
    if (lane + 32 * m < E) ps[lane + 32 * m] = exp_f32(__fsub_rn(x[m], mx));
  __syncwarp();
  float sum = 0.f;  // the CPU's order, in 16-byte broadcast reads (ps is 16-byte aligned)
  int e4 = 0;
  for (; e4 + 4 <= E; e4 += 4) {
    const float4 v = *reinterpret_cast<const float4*>(ps + e4);
    sum = __fadd_rn(__fadd_rn(__fadd_rn(__fadd_rn(sum, v.x), v.y), v.z), v.w);
  }
  for (; e4 < E; ++e4) sum = __fadd_rn(sum, ps[e4]);
  __syncwarp();  // every lane has read the exps before the probabilities replace them
  float p[kPer];
DG_UNROLL
  for (int m = 0; m < kPer; ++m) {
    const int e = lane + 32 * m;
    p[m] = 0.f;
    if (e < E) {
      p[m] = __fdiv_rn(ps[e], sum);
      ps[e] = p[m];
      if (probs_out != nullptr) probs_out[t * E + e] = p[m];
    }
  }
  unsigned taken = 0;  // bit m: expert lane + 32 m selected
  for (int k = 0; k < K; ++k) {
    unsigned best = 0;
DG_UNROLL
    for (int m = 0; m < kPer; ++m)
      if (lane + 32 * m < E && !((taken >> m) & 1u) && p[m] >= 0.f) best = max(best, __float_as_uint(fabsf(p[m])) + 1u);
    best = __reduce_max_sync(0xffffffffu, best);
    int cand = INT_MAX;
DG_UNROLL
    for (int m = kPer - 1; m >= 0; --m) {  // the lane's lowest matching index
      const bool untaken = lane + 32 * m < E && !((taken >> m) & 1u);
      const bool match = best == 0 ? untaken  // only NaN probabilities left: the lowest untaken index
                                   : untaken && p[m] >= 0.f && __float_as_uint(fabsf(p[m])) + 1u == best;
      if (match) cand = lane + 32 * m;
    }
    int bi = __reduce_min_sync(0xffffffffu, cand);
    if (bi == INT_MAX) bi = 0;  // unreachable for K <= E
    if ((bi & 31) == lane) taken |= 1u << (bi >> 5);
    if (lane == 0) sel[k] = bi;
  }
  __syncwarp();
  float wsum = 0.f;
  for (int k = 0; k < K; ++k) wsum = __fadd_rn(wsum, ps[sel[k]]);
  for (int k = lane; k < K; k += 32) {
    const int e = sel[k];
    top_idx[t * K + k] = e;
    top_w[t * K + k] = __fmul_rn(__fdiv_rn(ps[e], wsum), bf16_to_f32(pes[e]));
    int rank = 0;  // slots by ascending expert (equal experts, never seen: by slot, as the insertion sort)
    for (int j = 0; j < K; ++j) rank += sel[j] < e || (sel[j] == e && j < k);
    order[t * K + rank] = k;
  }
  __syncwarp();  // sel is read by every lane above; callers may reuse it
}

struct RouteLaunch {
  const uint16_t* logits;
  int64_t T;
  int E, K;
  const uint16_t* pes;
  float* probs;
  int32_t* top_idx;
  float* top_w;
  int32_t* order;
  int32_t* offsets;     // [E + 1]
  int32_t* pairs;       // [R]
  int4* tiles;          // null: no tile list
  int max_tiles, tile_rows;
  int32_t* block_count; // [blocks, E] scratch: the block's pairs per expert, then their exclusive prefix
  int32_t* local_rank;  // [R] scratch: a pair's rank among its block's pairs of the same expert
  unsigned* ticket;     // zero before the launch; the last block sets it back to zero
};

// The last block stops after the offsets and the tile list; place_pairs_kernel, launched next, places
// the pairs with the whole grid (one block's placement loop would take R / 2048 rounds of dependent
// L2 loads at large T).
template <int kPer>
__global__ void __launch_bounds__(kRouteWarps * 32) route_group_kernel(RouteLaunch a) {
  constexpr int kTokens = kRouteTokens;
  __shared__ __align__(16) float ps_all[kTokens][32 * kPer];
  __shared__ int blk[kTokens * kRouteMaxK];  // the block's selected experts, in pair order
  __shared__ int base[32 * kPer];
  __shared__ bool last;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int E = a.E, K = a.K;
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * kTokens;
  if (warp < kTokens && t0 + warp < a.T)
    route_token<kPer>(a.logits, t0 + warp, E, K, a.pes, a.probs, a.top_idx, a.top_w, a.order, ps_all[warp],
                      blk + warp * K);
  __syncthreads();
  const int n_pairs = static_cast<int>(min(static_cast<int64_t>(kTokens), a.T - t0)) * K;
  const int64_t p0 = t0 * K;
  for (int j = threadIdx.x; j < n_pairs; j += blockDim.x) {
    const int e = blk[j];
    int rank = 0;
    for (int i = 0; i < j; ++i) rank += blk[i] == e;
    a.local_rank[p0 + j] = rank;
  }
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    int c = 0;
    for (int i = 0; i < n_pairs; ++i) c += blk[i] == e;
    a.block_count[static_cast<int64_t>(blockIdx.x) * E + e] = c;
  }
  __threadfence();  // this thread's results, before the ticket
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(a.ticket, 1u) == gridDim.x - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  // The last block. Per expert, the exclusive prefix of the block counts (L2 loads and stores: the
  // other blocks' data, then read back by other threads of this block), and the expert's total.
  const int nb = static_cast<int>(gridDim.x);
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    int run = 0;
    for (int b0 = 0; b0 < nb; b0 += kPrefixBatch) {  // kPrefixBatch loads in flight, then their prefix
      int n[kPrefixBatch];
DG_UNROLL
      for (int q = 0; q < kPrefixBatch; ++q)
        n[q] = b0 + q < nb ? __ldcg(a.block_count + static_cast<int64_t>(b0 + q) * E + e) : 0;
DG_UNROLL
      for (int q = 0; q < kPrefixBatch; ++q) {
        if (b0 + q < nb) __stcg(a.block_count + static_cast<int64_t>(b0 + q) * E + e, run);
        run += n[q];
      }
    }
    base[e] = run;
  }
  __syncthreads();
  if (warp == 0) expert_offsets_warp(base, E, a.offsets, lane);  // totals -> offsets
  __threadfence_block();
  __syncthreads();
  const int64_t R = a.T * K;
  if (warp == 0 && a.tiles != nullptr)
    expert_tiles_warp(base, E, static_cast<int>(R), a.tile_rows, a.tiles, a.max_tiles, lane);
  if (threadIdx.x == 0) atomicExch(a.ticket, 0u);  // for the next launch (stream-ordered after this one)
}

// The placement after route_group_kernel: pair p (block p / (kTokens K) of the routing grid) goes to
// its expert's first row + the exclusive prefix of the expert's pairs in earlier blocks + its rank
// among its block's pairs of the expert: the stable sort by expert. One pair a thread; the grid
// covers R.
__global__ void __launch_bounds__(256) place_pairs_kernel(RouteLaunch a, int per_block) {
  const int64_t R = a.T * a.K;
  const int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (p >= R) return;
  const int e = a.top_idx[p];
  const int at = a.offsets[e] + a.block_count[(p / per_block) * a.E + e] + a.local_rank[p];
  a.pairs[at] = static_cast<int32_t>(p);
}

}  // namespace
}  // namespace dgemma::cuda
