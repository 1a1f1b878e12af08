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
#include <climits>

#include "backend/cuda/common.cuh"
#include "backend/cuda/expert_groups.cuh"
#include "backend/cuda/moe.cuh"
#include "backend/cuda/moe_combine_kernel.cuh"

namespace dgemma::cuda {
namespace {

constexpr int kTopkWarps = 4;    // tokens per block of the top-k kernel
// The fused routing + grouping kernel: blocks of kRouteWarps warps, of which the first kRouteTokens
// route one token each (sixteen warps and tokens before). Why four tokens a block: a token's routing
// (the softmax, K rounds of warp reductions) is a long chain of instructions, and an SM issues one
// instruction a cycle per scheduler (four): sixteen routing warps on one SM queued four deep on each
// scheduler, while T = 256 used only 16 of the SMs. Now every routing warp has a scheduler to itself
// and 64 SMs share the work. The other warps join the grouping; eight warps a block (at most 128
// registers a thread: two blocks an SM, T = 1024 in one wave) and eight pairs a thread and round in
// the last block's placement keep its rounds as few as before. Its prefix over the (four times as
// many) per-block counts loads 32 blocks' counts at a time (eight before): as many L2 round trips.
constexpr int kRouteWarps = 8;
constexpr int kRouteTokens = 4;
constexpr int kPrefixBatch = 32;
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
#pragma unroll
  for (int m = 0; m < kPer; ++m) {
    const int e = lane + 32 * m;
    x[m] = e < E ? bf16_to_f32(l[e]) : -INFINITY;
    mx = fmaxf(mx, x[m]);
  }
  mx = warp_reduce(mx, MaxOp{});
#pragma unroll
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
#pragma unroll
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
#pragma unroll
    for (int m = 0; m < kPer; ++m)
      if (lane + 32 * m < E && !((taken >> m) & 1u) && p[m] >= 0.f) best = max(best, __float_as_uint(fabsf(p[m])) + 1u);
    best = __reduce_max_sync(0xffffffffu, best);
    int cand = INT_MAX;
#pragma unroll
    for (int m = kPer - 1; m >= 0; --m) {  // the lane's lowest matching index
      const bool untaken = lane + 32 * m < E && !((taken >> m) & 1u);
      const bool match = best == 0 ? untaken  // only NaN probabilities left: the lowest untaken index
                                   : untaken && p[m] >= 0.f && __float_as_uint(fabsf(p[m])) + 1u == best;
      if (match) cand = lane + 32 * m;
    }
    int bi = __reduce_min_sync(0xffffffffu, cand);
    if (bi == INT_MAX) bi = 0;  // unreachable for K <= E (topk_kernel's rule)
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

template <int kPer>
__global__ void __launch_bounds__(kTopkWarps * 32)
    topk_reg_kernel(const uint16_t* __restrict__ logits, int64_t T, int E, int K, const uint16_t* __restrict__ pes,
                    float* __restrict__ probs_out, int32_t* __restrict__ top_idx, float* __restrict__ top_w,
                    int32_t* __restrict__ order) {
  __shared__ __align__(16) float ps_all[kTopkWarps][32 * kPer];
  __shared__ int sel_all[kTopkWarps][32 * kPer];
  const int warp = threadIdx.x >> 5;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kTopkWarps + warp;
  if (t >= T) return;  // warp-level synchronisation only
  route_token<kPer>(logits, t, E, K, pes, probs_out, top_idx, top_w, order, ps_all[warp], sel_all[warp]);
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

template <int kPer>
__global__ void __launch_bounds__(kRouteWarps * 32) route_group_kernel(RouteLaunch a) {
  __shared__ __align__(16) float ps_all[kRouteTokens][32 * kPer];
  __shared__ int blk[kRouteTokens * kRouteMaxK];  // the block's selected experts, in pair order
  __shared__ int base[32 * kPer];
  __shared__ bool last;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int E = a.E, K = a.K;
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * kRouteTokens;
  if (warp < kRouteTokens && t0 + warp < a.T)
    route_token<kPer>(a.logits, t0 + warp, E, K, a.pes, a.probs, a.top_idx, a.top_w, a.order, ps_all[warp],
                      blk + warp * K);
  __syncthreads();
  const int n_pairs = static_cast<int>(min(static_cast<int64_t>(kRouteTokens), a.T - t0)) * K;
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
#pragma unroll
      for (int q = 0; q < kPrefixBatch; ++q)
        n[q] = b0 + q < nb ? __ldcg(a.block_count + static_cast<int64_t>(b0 + q) * E + e) : 0;
#pragma unroll
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
  const int per_block = kRouteTokens * K;
  constexpr int kUnroll = 8;  // independent pairs per thread and round: their loads in flight together
  for (int64_t p0 = threadIdx.x; p0 < R; p0 += kUnroll * static_cast<int64_t>(blockDim.x)) {
    int e[kUnroll], at[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t p = p0 + u * static_cast<int64_t>(blockDim.x);
      e[u] = p < R ? __ldcg(a.top_idx + p) : 0;
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t p = p0 + u * static_cast<int64_t>(blockDim.x);
      at[u] = p < R ? base[e[u]] + __ldcg(a.block_count + (p / per_block) * E + e[u]) + __ldcg(a.local_rank + p) : 0;
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t p = p0 + u * static_cast<int64_t>(blockDim.x);
      if (p < R) a.pairs[at[u]] = static_cast<int32_t>(p);
    }
  }
  if (warp == 0 && a.tiles != nullptr) expert_tiles_warp(base, E, static_cast<int>(R), a.tile_rows, a.tiles, a.max_tiles, lane);
  if (threadIdx.x == 0) atomicExch(a.ticket, 0u);  // for the next launch (stream-ordered after this one)
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
  return ceil_div(T, kRouteTokens) * E + T * K;
}

void launch_moe_route_group(const uint16_t* logits, int64_t T, int64_t E, int64_t K, const uint16_t* per_expert_scale,
                            float* probs, int32_t* top_idx, float* top_w, int32_t* order, int32_t* offsets,
                            int32_t* pairs, int32_t* tiles, int64_t max_tiles, int tile_rows, int32_t* scratch,
                            unsigned* ticket, cudaStream_t stream) {
  const int64_t blocks = ceil_div(T, kRouteTokens);
  RouteLaunch a{logits, T, static_cast<int>(E), static_cast<int>(K), per_expert_scale, probs, top_idx, top_w, order,
                offsets, pairs, max_tiles > 0 ? reinterpret_cast<int4*>(tiles) : nullptr, static_cast<int>(max_tiles),
                tile_rows, scratch, scratch + blocks * E, ticket};
  const unsigned grid = static_cast<unsigned>(blocks);
  switch (slots_for(E)) {
    case 1: route_group_kernel<1><<<grid, kRouteWarps * 32, 0, stream>>>(a); break;
    case 2: route_group_kernel<2><<<grid, kRouteWarps * 32, 0, stream>>>(a); break;
    case 4: route_group_kernel<4><<<grid, kRouteWarps * 32, 0, stream>>>(a); break;
    default: route_group_kernel<8><<<grid, kRouteWarps * 32, 0, stream>>>(a); break;
  }
  CUDA_CHECK_LAUNCH();
}

bool launch_moe_combine_vec(const uint16_t* y, const int32_t* order, int64_t T, int64_t K, int64_t H, uint16_t* out,
                            cudaStream_t stream) {
  if (K > kCombineMaxK || !vec8_ok(H, y, out)) return false;
  if (T <= 0 || H <= 0) return true;
  const int64_t chunks = ceil_div(H / 8, kCombineThreads);
  combine_vec_kernel<<<static_cast<unsigned>(T * chunks), kCombineThreads, 0, stream>>>(
      reinterpret_cast<const uint4*>(y), order, static_cast<int>(K), H / 8, chunks, reinterpret_cast<uint4*>(out));
  CUDA_CHECK_LAUNCH();
  return true;
}

}  // namespace dgemma::cuda
