#pragma once
// The sampler's kernels (the passes of sampler.cu: the slice maxima, the z table, the main pass, the
// top-N lists, the merge of the slices and the probabilities) in a header so that the unit tests run
// them on the host through tests/unit/backend/cuda_emulator.h (test_sampler_emulated.cpp, against the
// CPU backend's sampler). On the device sampler.cu includes common.cuh first. What the kernels need:
// threadIdx / blockIdx / blockDim, __syncthreads, __shfl_xor_sync (float, double, int), block_reduce /
// MaxOp, atomicMax / atomicMin on shared ints, __ldg, __float_as_uint / __uint_as_float /
// __float_as_int, __fadd_rn / __fsub_rn / __fmul_rn / __fdiv_rn / __fmaf_rn, expf / tanhf / __logf and
// the fp64 log, bf16_to_f32 / f32_to_bf16 / round_bf16, uint2 / uint4 and the counter-based RNG.
#include <climits>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "backend/cuda/kernel_macros.cuh"
#include "backend/cuda/sampler_common.cuh"
#include "util/counter_rng.h"

namespace dgemma::cuda {
using namespace sampler_detail;
// Internal linkage (as moe_combine_kernel.cuh): the unit tests' host build of the kernels shares a
// binary with the device build's host stub.
namespace {

// Gumbel noise of 64 random bits in fp32, within 2e-5 of rng::gumbel_from_bits (the double value),
// without branches (a warp's lanes take both halves of u's range alike). With m = b >> 11 the
// reference's u is double(m) + 0.5 rounded, / 2^53: (m + 0.5) / 2^53 below 2^52, and above it the
// halfway m + 0.5 rounds to the even neighbour, so 1 - u = k / 2^53 with k = 2^53 - m - (m & 1)
// exactly (k = 0, u = 1 when m = 2^53 - 1: the noise is +inf, as the reference's). With x = u
// (u < 1/2) or x = 1 - u, t = -log(u) is
//   u < 1/2:          -__logf(u): 3 ulp of |log u| >= 0.69, a few 1e-7 relative in t;
//   1/2 <= u <= 15/16: -__logf(1 - x): the intrinsic's 2^-21.4 absolute error on [1/2, 2] is under
//                      6e-6 of t >= 0.0645;
//   u > 15/16:        x (1 + x/2 + x^2/3 + x^3/4), the series of -log(1 - x) cut after its fourth
//                      term: within x^4 / 5 / (1 - x) <= 3.3e-6 relative;
// then g = -__logf(t): 3 ulp of |log t| <= 37.5, at most 1.2e-5; in all at most 2e-5.
__device__ __forceinline__ float gumbel_approx(uint64_t b) {
  const uint64_t m = b >> 11;
  constexpr float kInv53 = 1.0f / 9007199254740992.0f;
  const bool low = m < (uint64_t{1} << 52);
  const float x = low ? (static_cast<float>(m) + 0.5f) * kInv53                                    // u
                      : static_cast<float>((uint64_t{1} << 53) - m - (m & 1)) * kInv53;           // 1 - u
  const float series = x * fmaf(x, fmaf(x, fmaf(x, 0.25f, 1.0f / 3.0f), 0.5f), 1.0f);
  const float by_log = -__logf(low ? x : 1.0f - x);
  const float t = !low && x < 0.0625f ? series : by_log;
  return -__logf(t);
}

// Per-element values the fp32 screen lets through to the exact double Gumbel: anything within
// kGumbelScreen + |estimate| 2^-18 of the block's best estimate so far. An estimate z + g is within
// 2e-5 + 2^-24 |z + g| of the double value (the noise above, the fp32 addition; z is the same fp32
// value on both paths), so twice that error is below the margin at every magnitude.
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


// Pass 0: each block's largest raw logit of its slice (fmaxf ignores NaN, as the scalar loop).
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
  if (vectorisable(row, v0, v1)) {
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

// z of every bf16 value, per canvas (slice_stats_earlier_kernel<true> reads it instead of evaluating the
// soft-cap per element: the same function of the same input, so the same z bit for bit). A real
// row's logits take a few thousand distinct values, so the lookups hit the L1 cache.
// Each entry holds z's fp32 bits (low word) and bf16(z) (high word): one 8-byte load per element.
constexpr int kZTable = 65536;
__global__ void z_table_kernel(const SamplerBatch* bp, uint2* z_tables) {
  const SamplerLaunch& a = bp->c[blockIdx.y];
  const int k = blockIdx.x * blockDim.x + threadIdx.x;
  const float z = processed(bf16_to_f32(static_cast<uint16_t>(k)), a.softcap, a.temperature);
  z_tables[static_cast<size_t>(blockIdx.y) * kZTable + k] = make_uint2(__float_as_uint(z), f32_to_bf16(z));
}

// Bounds of the Gumbel noise of 64 random bits (gumbel_approx's u): u >= 2^-54, so g >= -log(54 ln 2)
// = -3.6225; and 1 - u >= 2^-52 but for u = 1, so g <= 52 ln 2 = 36.0437 but for the one value
// m = 2^53 - 1 of the 53 bits, where the reference's noise is +inf. These are a little wider. The
// bound test below is exact but for that value (probability 2^-53 per element: an element whose z
// is over 39.7 below the row's best, and whose u rounds to 1, would be the reference's sample).
constexpr float kGumbelMin = -3.63f;
constexpr float kGumbelMax = 36.06f;

// max for floats of any sign through the integer atomics (the stored value starts at -inf).
__device__ __forceinline__ void atomic_max_f32(float* addr, float v) {
  if (v >= 0.0f) atomicMax(reinterpret_cast<int*>(addr), __float_as_int(v));
  else atomicMin(reinterpret_cast<unsigned int*>(addr), __float_as_uint(v));
}

// Pass 1 over a slice: argmax and second-best z, the entropy sums, Gumbel-max, the bf16 softmax sum.
// The earlier form of the main pass (set_sampler_lean_sweep(false); sampler_stats_kernel.cuh holds the
// default one, which computes the same outputs with fewer instructions per element).
//
// The Gumbel-max sample, exactly as the CPU's double z + gumbel_from_bits with the lowest index on
// ties, at the cost of an fp32 estimate for most elements (the row's exact best is all that is
// output unless sample_gap is asked, when every element takes the exact double path as before):
//   screen: the largest estimate seen so far by the block (shared memory, raised by each warp every
//           round) less the margin (kGumbelScreen); an element whose estimate is below it cannot be the row's
//           best nor tie it (its exact value is within half the margin of its estimate, the screen's source
//           element's exact value is above the screen), so only estimates at or above the screen
//           take the double path. Any element tying the best exactly passes, so ties still go to the
//           lowest index at the merge. Reading a stale screen only lets more elements through.
//   bound:  the noise is at most kGumbelMax, so an element whose z + kGumbelMax is below the screen,
//           or below m + kGumbelMin (the row's argmax alone reaches that), cannot win either: it
//           skips the random bits altogether (exact, and cheap where the distribution is peaked).
// The warps sweep the slice in lockstep rounds (a lane past the end contributes nothing), so the
// warp-wide maxima are well defined.
template <bool kTable, int kMinBlocks>
__global__ void __launch_bounds__(kThreads, kMinBlocks) slice_stats_earlier_kernel(const SamplerBatch* bp, const float* slice_max,
                                                                       const float* row_floor, const uint2* z_tables,
                                                                       Stats* partials) {
  const SamplerBatch& b = *bp;
  __shared__ Stats warp_partials[kWarps];
  __shared__ float block_screen;
  const SamplerLaunch& a = b.c[blockIdx.z];
  const int64_t pos = blockIdx.y;
  if (pos >= a.C) return;
  const int splits = b.splits;
  if (threadIdx.x == 0) block_screen = -INFINITY;
  __syncthreads();
  uint16_t* row = a.logits + pos * a.V;
  const float cap = a.softcap, temp = a.temperature;
  const float m = row_shift(a, splits, slice_max, pos);
  const float bmax = round_bf16(m);  // = max of bf16(z): rounding is monotonic
  const bool want_probs = a.want_probs, want_sample = a.want_sample;
  const bool all_exact = a.sample_gap != nullptr;  // the runner-up of z + g is wanted: no screening
  const uint64_t key = a.sample_key;
  const float floor = a.filter.active() ? row_floor[a.row0 + pos] : -INFINITY;
  const uint2* z_table = kTable ? z_tables + static_cast<size_t>(blockIdx.z) * kZTable : nullptr;
  // The row's best z + g is at least m + kGumbelMin (the argmax is always in the support).
  const float best_floor = __fadd_rn(m, kGumbelMin);
  int64_t v0, v1;
  slice_of(a.V, splits, v0, v1);
  Stats st;
  empty_stats(st);
  float screen = -INFINITY;
  // The sums over runs of kRun of the thread's elements in fp32, each run's sum then added in double:
  // a run's sum of k same-sign terms, each within 2u of its double value (the fp32 z - m and the
  // fused multiply-add), is within (k + 1) u = 5.4e-7 relative of the double sum (u = 2^-24), so
  // S1, S2 and the probabilities' denominator are within that of the double sums; the entropy
  // log S1 - S2 / S1 then moves by at most 5.4e-7 (1 + 2 |S2 / S1|) <= 5.4e-7 (1 + 2 H) (S1 >= 1,
  // so -S2 / S1 <= H), under the 1e-5 (1 + H) the CUDA-vs-CPU checks allow, and the fp32
  // denominator by an ulp or so (a probability then rounds to its other bf16 neighbour about
  // never). Per element this replaces three fp32->fp64 conversions and four fp64 operations with
  // four fp32 ones.
  constexpr int kRun = 8;
  float r1 = 0.0f, r2 = 0.0f, rb = 0.0f;
  int run = 0;
  // One round: this thread's N elements [first, first + N) (N = 8: one 16-byte load of consecutive
  // logits; N = 1: the scalar sweep of slices that are not 16-byte aligned or a multiple of 8 long),
  // in three phases:
  //   1. per element: z, the argmax, the entropy terms, bf16(z), and where the noise can still matter
  //      (the bound below) the fp32 estimate z + g — the N elements are independent, so their
  //      counter-based hashes interleave (instruction-level parallelism);
  //   2. the screen: raised to the warp's best estimate of this round less the margin, and shared
  //      with the block (every round: each warp's first round already faces a screen, so only
  //      elements near the warp's best take the exact path);
  //   3. the exact double value for the estimates at or above the screen (their random bits hashed
  //      again: rare), in ascending index order.
  auto sweep_round = [&](auto n_tag, int64_t first, bool last, const uint16_t (&x)[decltype(n_tag)::value]) {
    constexpr int N = decltype(n_tag)::value;
    float zs[N], gf[N];
    uint16_t zbs[N];
    bool live[N];
    float w = -INFINITY;
DG_UNROLL
    for (int k = 0; k < N; ++k) {
      const int64_t v = first + k;
      live[k] = v < v1;
      gf[k] = -INFINITY;
      float z = -INFINITY;
      uint16_t zb = 0;
      if (live[k]) {
        if constexpr (kTable) {  // the same processed() of the same value, and its bf16 rounding
          const uint2 zt = __ldg(z_table + x[k]);
          z = __uint_as_float(zt.x);
          zb = static_cast<uint16_t>(zt.y);
        } else {
          z = processed(bf16_to_f32(x[k]), cap, temp);
          zb = f32_to_bf16(z);
        }
        st.z.push(z, static_cast<int>(v));
        const float dz = __fsub_rn(z, m);
        const float e = expf(dz);  // terms far below 1 carry the rounding of z - m
        r1 = __fadd_rn(r1, e);
        r2 = __fmaf_rn(e, dz, r2);
        if (want_probs) rb = __fadd_rn(rb, expf(__fsub_rn(bf16_to_f32(zb), bmax)));
        // z >= floor: in the sample's support (NaN never is; floor is -inf without a filter).
        if (want_sample && z >= floor) {
          if (all_exact) {
            const uint64_t bits = rng::bits(key, static_cast<uint32_t>(pos), static_cast<uint32_t>(v));
            st.g.push(static_cast<double>(z) + rng::gumbel_from_bits(bits), static_cast<int>(v));
          } else if (!(__fadd_rn(z, kGumbelMax) < fmaxf(screen, best_floor))) {
            const uint64_t bits = rng::bits(key, static_cast<uint32_t>(pos), static_cast<uint32_t>(v));
            gf[k] = __fadd_rn(z, gumbel_approx(bits));
            w = fmaxf(w, gf[k]);
          }
        }
      }
      zs[k] = z;
      zbs[k] = zb;
    }
    if (want_probs) {  // pass 2 reads bf16(z) back instead of recomputing the soft-cap
      if constexpr (N == 8) {
        if (live[0]) {
          uint4 q;
          q.x = zbs[0] | (static_cast<uint32_t>(zbs[1]) << 16);
          q.y = zbs[2] | (static_cast<uint32_t>(zbs[3]) << 16);
          q.z = zbs[4] | (static_cast<uint32_t>(zbs[5]) << 16);
          q.w = zbs[6] | (static_cast<uint32_t>(zbs[7]) << 16);
          *reinterpret_cast<uint4*>(row + first) = q;
        }
      } else {
        if (live[0]) row[first] = zbs[0];
      }
    }
    run += N;
    if (run >= kRun || last) {
      st.s1 += static_cast<double>(r1);
      st.s2 += static_cast<double>(r2);
      st.bsum += static_cast<double>(rb);
      r1 = r2 = rb = 0.0f;
      run = 0;
    }
    if (!want_sample || all_exact) return;
DG_UNROLL
    for (int o = 16; o > 0; o >>= 1) w = fmaxf(w, __shfl_xor_sync(0xffffffffu, w, o));
    const float mine = __fsub_rn(w, __fmaf_rn(fabsf(w), kGumbelScreenRel, kGumbelScreen));
    const float shared_screen = *static_cast<volatile float*>(&block_screen);
    if ((threadIdx.x & 31) == 0 && mine > shared_screen) atomic_max_f32(&block_screen, mine);
    screen = fmaxf(screen, fmaxf(mine, shared_screen));
DG_UNROLL
    for (int k = 0; k < N; ++k) {
      if (gf[k] >= screen && gf[k] > -INFINITY) {
        const int64_t v = first + k;
        const uint64_t bits = rng::bits(key, static_cast<uint32_t>(pos), static_cast<uint32_t>(v));
        st.g.push(static_cast<double>(zs[k]) + rng::gumbel_from_bits(bits), static_cast<int>(v));
      }
    }
  };
  if (b.vector && vectorisable(row, v0, v1)) {
    // Lane-consecutive 16-byte chunks: round r covers [v0 + 8 kThreads r, v0 + 8 kThreads (r + 1)).
    const uint4* vec = reinterpret_cast<const uint4*>(row + v0);
    const int64_t chunks = (v1 - v0) / 8;
    uint4 next = threadIdx.x < chunks ? vec[threadIdx.x] : make_uint4(0, 0, 0, 0);
    for (int64_t c = threadIdx.x, base = 0; base < chunks; base += kThreads, c += kThreads) {
      const uint4 q = next;
      if (c + kThreads < chunks) next = vec[c + kThreads];  // the thread's own chunks only (stores below)
      const uint16_t x[8] = {static_cast<uint16_t>(q.x), static_cast<uint16_t>(q.x >> 16), static_cast<uint16_t>(q.y),
                             static_cast<uint16_t>(q.y >> 16), static_cast<uint16_t>(q.z), static_cast<uint16_t>(q.z >> 16),
                             static_cast<uint16_t>(q.w), static_cast<uint16_t>(q.w >> 16)};
      const int64_t first = c < chunks ? v0 + 8 * c : v1;  // past the end: no live element
      sweep_round(std::integral_constant<int, 8>{}, first, base + kThreads >= chunks, x);
    }
  } else {
    for (int64_t base = v0; base < v1; base += kThreads) {
      const int64_t v = base + threadIdx.x;
      const uint16_t x[1] = {v < v1 ? row[v] : uint16_t{0}};
      sweep_round(std::integral_constant<int, 1>{}, v < v1 ? v : v1, base + kThreads >= v1, x);
    }
  }
  block_reduce_stats(st, warp_partials);
  if (threadIdx.x == 0) partials[(a.row0 + pos) * splits + blockIdx.x] = st;
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
  for (int64_t v = v0 + t; v < v1; v += kTopThreads) {
    const float z = processed(bf16_to_f32(row[v]), a.softcap, a.temperature);
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
