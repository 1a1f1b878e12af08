#pragma once
// The sampler's kernels (the passes of sampler/sampler.cu: the slice maxima, the top-N lists, the merge of
// the slices and the probabilities; the z table and the main pass: sampler/stats_kernel.cuh) in a header
// so that the unit tests run them on the host through tests/unit/backend/cuda_emulator.h
// (test_sampler_emulated.cpp, against the CPU backend's sampler). On the device sampler/sampler.cu includes
// core/common.cuh first. What the kernels need: threadIdx / blockIdx / blockDim, __syncthreads,
// __shfl_xor_sync (float, double, int), block_reduce / MaxOp, atomicMax / atomicMin on shared ints,
// __ldg, __float_as_uint / __uint_as_float / __float_as_int, __fadd_rn / __fsub_rn / __fmul_rn /
// __fdiv_rn / __fmaf_rn, expf / tanhf and the fp64 log, bf16_to_f32 / f32_to_bf16 / round_bf16, uint4
// and the counter-based RNG.
#include <climits>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "backend/cuda/core/kernel_macros.cuh"
#include "backend/cuda/sampler/common.cuh"
#include "util/counter_rng.h"

namespace dgemma::cuda {
using namespace sampler_detail;
// Internal linkage (as moe/combine_kernel.cuh): the unit tests' host build of the kernels shares a
// binary with the device build's host stub.
namespace {

// Per-element values the fp32 screen lets through to the exact double Gumbel: anything within
// kGumbelScreen + |estimate| 2^-18 of the block's best estimate so far (sampler/stats_kernel.cuh
// noise_estimate: twice its error is below that margin at every magnitude).
constexpr float kGumbelScreen = 1e-3f;
constexpr float kGumbelScreenRel = 1.0f / 262144.0f;  // 2^-18


// Best and second-best value (of the multiset) with the index of the best; lower index on ties.
template <typename T>
struct Top2 {
  T v1, v2;
  int i1;
  __device__ __forceinline__ void push(T v, int i) {  // ascending i within a thread, as the CPU's loop
    if (v > v1) {
      v2 = v1;
      v1 = v;
      i1 = i;
    } else if (v > v2) {
      v2 = v;
    }
  }
  // Any order of i: on equal values the lower index (as merge).
  __device__ __forceinline__ void push_tied(T v, int i) {
    if (v > v1 || (v == v1 && i < i1)) {
      v2 = v1;
      v1 = v;
      i1 = i;
    } else if (v > v2) {
      v2 = v;
    }
  }
  __device__ __forceinline__ void merge(T ov1, int oi1, T ov2) {
    if (ov1 > v1 || (ov1 == v1 && oi1 < i1)) {
      v2 = v1 > ov2 ? v1 : ov2;
      v1 = ov1;
      i1 = oi1;
    } else {
      v2 = v2 > ov1 ? v2 : ov1;
    }
  }
};

// One thread's, block's or row's partial results (plain data: it also lives in shared and global
// memory), merged in a fixed order.
struct Stats {
  Top2<float> z;
  Top2<double> g;
  double s1, s2, bsum;

  __device__ __forceinline__ void merge(const Stats& o) {
    z.merge(o.z.v1, o.z.i1, o.z.v2);
    g.merge(o.g.v1, o.g.i1, o.g.v2);
    s1 += o.s1;
    s2 += o.s2;
    bsum += o.bsum;
  }
  __device__ __forceinline__ void merge_lane(int offset) {
    Stats o;
    o.z = {__shfl_xor_sync(0xffffffffu, z.v1, offset), __shfl_xor_sync(0xffffffffu, z.v2, offset),
           __shfl_xor_sync(0xffffffffu, z.i1, offset)};
    o.g = {__shfl_xor_sync(0xffffffffu, g.v1, offset), __shfl_xor_sync(0xffffffffu, g.v2, offset),
           __shfl_xor_sync(0xffffffffu, g.i1, offset)};
    o.s1 = __shfl_xor_sync(0xffffffffu, s1, offset);
    o.s2 = __shfl_xor_sync(0xffffffffu, s2, offset);
    o.bsum = __shfl_xor_sync(0xffffffffu, bsum, offset);
    merge(o);
  }
  __device__ __forceinline__ void warp_reduce_all() {
DG_UNROLL
    for (int o = 16; o > 0; o >>= 1) merge_lane(o);
  }
};

__device__ __forceinline__ void empty_stats(Stats& st) {
  st.z = {-INFINITY, -INFINITY, INT_MAX};
  st.g = {-INFINITY, -INFINITY, INT_MAX};
  st.s1 = st.s2 = st.bsum = 0.0;
}

// Reduces every thread's Stats over the block; the result is valid in thread 0.
__device__ __forceinline__ void block_reduce_stats(Stats& st, Stats* warp_partials) {
  st.warp_reduce_all();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) warp_partials[warp] = st;
  __syncthreads();
  if (warp == 0) {
    if (lane < kWarps) st = warp_partials[lane];
    else empty_stats(st);
    st.warp_reduce_all();
  }
}


// Pass 0: each block's largest raw logit of its slice (fmaxf ignores NaN, as the scalar loop); in a
// guided gap's rows, of the allowed tokens only.
__global__ void __launch_bounds__(kThreads) slice_max_kernel(const SamplerBatch* bp, float* slice_max) {
  const SamplerBatch& b = *bp;
  __shared__ float shared_f[32];
  const SamplerLaunch& a = b.c[blockIdx.z];
  const int64_t pos = blockIdx.y;
  if (pos >= a.C) return;
  const uint16_t* row = a.logits + pos * a.V;
  int64_t v0, v1;
  slice_of(a.V, b.splits, v0, v1);
  float xmax = -INFINITY;
  if (const uint32_t* mask = row_gap_mask(a, pos); mask != nullptr) {
    // A guided gap's row: the largest allowed logit (the shift of the allowed set's z).
    for (int64_t v = v0 + threadIdx.x; v < v1; v += kThreads)
      if (gap_allows(mask, a.gap_limit, v)) xmax = fmaxf(xmax, bf16_to_f32(row[v]));
  } else if (vectorisable(row, v0, v1)) {
    const uint4* vec = reinterpret_cast<const uint4*>(row + v0);
    for (int64_t c = threadIdx.x; c < (v1 - v0) / 8; c += kThreads) {
      const uint4 q = vec[c];
      const uint32_t w[4] = {q.x, q.y, q.z, q.w};
DG_UNROLL
      for (int k = 0; k < 4; ++k)
        xmax = fmaxf(xmax, fmaxf(__uint_as_float(w[k] << 16), __uint_as_float(w[k] & 0xFFFF0000u)));
    }
  } else {
    for (int64_t v = v0 + threadIdx.x; v < v1; v += kThreads) xmax = fmaxf(xmax, bf16_to_f32(row[v]));
  }
  xmax = block_reduce(xmax, MaxOp{}, -INFINITY, shared_f);
  if (threadIdx.x == 0) slice_max[(a.row0 + pos) * b.splits + blockIdx.x] = xmax;
}

// The row's shift m = z(max logit) from the slice maxima.
__device__ __forceinline__ float row_shift(const SamplerLaunch& a, int splits, const float* slice_max, int64_t pos) {
  float xmax = -INFINITY;
  for (int s = 0; s < splits; ++s) xmax = fmaxf(xmax, slice_max[(a.row0 + pos) * splits + s]);
  return processed(xmax, a.softcap, a.temperature);
}

// Entries of a canvas's z table (sampler/stats_kernel.cuh): one per bf16 value.
constexpr int kZTable = 65536;

// Bounds of the Gumbel noise of 64 random bits (u = ((b >> 11) + 0.5) / 2^53): u >= 2^-54, so
// g >= -log(54 ln 2) = -3.6225; and 1 - u >= 2^-52 but for u = 1, so g <= 52 ln 2 = 36.0437 but for the one
// value m = 2^53 - 1 of the 53 bits, where the reference's noise is +inf. These are a little wider. The
// bound test below is exact but for that value (probability 2^-53 per element: an element whose z
// is over 39.7 below the row's best, and whose u rounds to 1, would be the reference's sample).
constexpr float kGumbelMin = -3.63f;
constexpr float kGumbelMax = 36.06f;

// max for floats of any sign through the integer atomics (the stored value starts at -inf).
__device__ __forceinline__ void atomic_max_f32(float* addr, float v) {
  if (v >= 0.0f) atomicMax(reinterpret_cast<int*>(addr), __float_as_int(v));
  else atomicMin(reinterpret_cast<unsigned int*>(addr), __float_as_uint(v));
}

// ---- top-N alternatives --------------------------------------------------------------------------

struct TopEntry {
  float z;
  int id;
};
constexpr int kTopThreads = 256;

// z descending (NaN as -inf), then id ascending: a total order, so any merge order gives the CPU's list.
__device__ __forceinline__ bool ranks_before(float za, int a, float zb, int b) {
  const float ka = isnan(za) ? -INFINITY : za, kb = isnan(zb) ? -INFINITY : zb;
  return ka > kb || (ka == kb && a < b);
}

__device__ __forceinline__ TopEntry best_of_warp(TopEntry e) {
  for (int o = 16; o > 0; o >>= 1) {
    TopEntry x{__shfl_xor_sync(0xffffffffu, e.z, o), __shfl_xor_sync(0xffffffffu, e.id, o)};
    if (ranks_before(x.z, x.id, e.z, e.id)) e = x;
  }
  return e;
}

// Each block: the top_n of its slice, in order, to partials[pos][slice][0..top_n).
__global__ void __launch_bounds__(kTopThreads) topn_partial_kernel(const SamplerBatch* bp, TopEntry* partials) {
  const SamplerBatch& b = *bp;
  __shared__ TopEntry warp_best[kTopThreads / 32];
  const SamplerLaunch& a = b.c[blockIdx.z];
  const int splits = b.splits;
  const int64_t pos = blockIdx.y;
  if (pos >= a.C || a.top_n == 0) return;
  const uint16_t* row = a.logits + pos * a.V;
  const int n = a.top_n, t = threadIdx.x;
  int64_t v0, v1;
  slice_of(a.V, splits, v0, v1);
  TopEntry mine[kMaxTopN];
  for (int j = 0; j < kMaxTopN; ++j) mine[j] = {-INFINITY, INT_MAX};
  const uint32_t* mask = row_gap_mask(a, pos);  // a guided gap's row: the others' z is -inf
  for (int64_t v = v0 + t; v < v1; v += kTopThreads) {
    float z = processed(bf16_to_f32(row[v]), a.softcap, a.temperature);
    if (mask != nullptr && !gap_allows(mask, a.gap_limit, v)) z = -INFINITY;
    const int id = static_cast<int>(v);
    if (!ranks_before(z, id, mine[n - 1].z, mine[n - 1].id)) continue;
    int j = n - 1;
    for (; j > 0 && ranks_before(z, id, mine[j - 1].z, mine[j - 1].id); --j) mine[j] = mine[j - 1];
    mine[j] = {z, id};
  }
  int head = 0;
  TopEntry* out = partials + a.top0 + (pos * splits + blockIdx.x) * n;
  for (int r = 0; r < n; ++r) {
    const TopEntry cand = head < n ? mine[head] : TopEntry{-INFINITY, INT_MAX};
    TopEntry b = best_of_warp(cand);
    if ((t & 31) == 0) warp_best[t >> 5] = b;
    __syncthreads();
    b = warp_best[0];
    for (int w = 1; w < kTopThreads / 32; ++w)
      if (ranks_before(warp_best[w].z, warp_best[w].id, b.z, b.id)) b = warp_best[w];
    __syncthreads();
    if (b.id != INT_MAX && cand.id == b.id) ++head;
    if (t == 0) out[r] = b;
  }
}

// Merges a row's slice partials in slice order (one warp per row) and writes the per-position outputs.
__global__ void finalize_kernel(const SamplerBatch* bp, const float* slice_max, const Stats* partials, float* row_bsum,
                                const float* row_floor, const TopEntry* top_partials) {
  const SamplerBatch& b = *bp;
  const SamplerLaunch& a = b.c[blockIdx.y];
  const int splits = b.splits;
  const int64_t pos = blockIdx.x;
  if (pos >= a.C) return;
  const int64_t r = a.row0 + pos;  // the row in the batch's workspace
  const int lane = threadIdx.x;
  Stats st;
  empty_stats(st);
  // Lane l merges slices l, l + 32, ... in order; then the warp reduction (fixed order).
  for (int s = lane; s < splits; s += 32) st.merge(partials[r * splits + s]);
  st.warp_reduce_all();
  const double md = static_cast<double>(row_shift(a, splits, slice_max, pos));
  const double lse = md + log(st.s1);
  if (a.top_n > 0) {
    // Lane l holds slice l's ordered list (splits <= 32); each round takes the best head.
    const int n = a.top_n;
    const TopEntry* mine = top_partials + a.top0 + (pos * splits + lane) * n;
    int head = 0;
    for (int r = 0; r < n; ++r) {
      const TopEntry cand = lane < splits && head < n ? mine[head] : TopEntry{-INFINITY, INT_MAX};
      const TopEntry b = best_of_warp(cand);
      if (b.id != INT_MAX && cand.id == b.id) ++head;
      if (lane == 0) {
        a.top_ids[pos * n + r] = b.id;
        a.top_logprobs[pos * n + r] = static_cast<float>(static_cast<double>(b.z) - lse);
      }
    }
  }
  if (lane != 0) return;
  if (a.sample_floor != nullptr) a.sample_floor[pos] = a.filter.active() ? row_floor[r] : -INFINITY;
  a.entropy[pos] = static_cast<float>(log(st.s1) - st.s2 / st.s1);
  // No argmax candidate (NaN logits only): token 0, as the CPU (whose argmax starts at 0).
  const int32_t am = st.z.i1 == INT_MAX ? 0 : st.z.i1;
  a.argmax[pos] = am;
  if (a.want_sample) {
    a.sample[pos] = st.g.i1 == INT_MAX ? 0 : st.g.i1;  // no candidate (NaN logits, nothing allowed): token 0, as the CPU
  } else {
    a.sample[pos] = am;
  }
  if (a.argmax_logprob != nullptr) a.argmax_logprob[pos] = static_cast<float>(static_cast<double>(st.z.v1) - lse);
  if (a.argmax_gap != nullptr) a.argmax_gap[pos] = __fsub_rn(st.z.v1, st.z.v2);
  if (a.sample_gap != nullptr)
    a.sample_gap[pos] = a.want_sample ? static_cast<float>(st.g.v1 - st.g.v2) : __fsub_rn(st.z.v1, st.z.v2);
  row_bsum[r] = static_cast<float>(st.bsum);
}

// Pass 2: the slice is overwritten with bf16(exp(bf16(z) - max) / sum).
__global__ void __launch_bounds__(kThreads) probs_kernel(const SamplerBatch* bp, const float* slice_max,
                                                         const float* row_bsum) {
  const SamplerBatch& b = *bp;
  const SamplerLaunch& a = b.c[blockIdx.z];
  const int splits = b.splits;
  const int64_t pos = blockIdx.y;
  if (pos >= a.C || !a.want_probs) return;
  uint16_t* row = a.logits + pos * a.V;
  const float bmax = round_bf16(row_shift(a, splits, slice_max, pos));
  const float bsum = row_bsum[a.row0 + pos];
  int64_t v0, v1;
  slice_of(a.V, splits, v0, v1);
  auto prob = [&](uint16_t zbits) {  // zbits: bf16(z), stored by pass 1
    return f32_to_bf16(__fdiv_rn(expf(__fsub_rn(bf16_to_f32(zbits), bmax)), bsum));
  };
  if (vectorisable(row, v0, v1)) {
    // 8 elements per 16-byte access: enough bytes in flight to stream at the memory's rate.
    uint4* vec = reinterpret_cast<uint4*>(row + v0);
    for (int64_t c = threadIdx.x; c < (v1 - v0) / 8; c += kThreads) {
      uint4 q = vec[c];
      uint32_t* w = reinterpret_cast<uint32_t*>(&q);
DG_UNROLL
      for (int k = 0; k < 4; ++k)
        w[k] = static_cast<uint32_t>(prob(static_cast<uint16_t>(w[k] & 0xFFFFu))) |
               (static_cast<uint32_t>(prob(static_cast<uint16_t>(w[k] >> 16))) << 16);
      vec[c] = q;
    }
    return;
  }
  for (int64_t v = v0 + threadIdx.x; v < v1; v += kThreads) row[v] = prob(row[v]);
}

}  // namespace
}  // namespace dgemma::cuda
