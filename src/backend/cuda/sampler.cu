// The sampler (docs/MODEL.md §6), each canvas row cut into slices with one block per (slice, position),
// never materialising fp32 [C, V]:
//   pass 0: max of the raw bf16 logits (z is a non-decreasing function of the logit, so this fixes
//           the shift of the exponentials below to the row's max z exactly);
//   pass 1: z = softcap * tanh(x / softcap) / T per element in fp32 (CUDA's tanhf, as torch's
//           soft-cap on the GPU; the CPU backend's glibc tanhf agrees but for ulp-level cases);
//           argmax and the second-best z; the entropy sums accumulated in double from fp32 exps
//           (H = log S1 - S2 / S1 with S1 = sum e^(z - m), S2 = sum e^(z - m) (z - m));
//           Gumbel-max with the counter-based noise in double (screened by an fp32 estimate); the
//           softmax denominator of bf16(z) for the self-conditioning probabilities (double sum);
//   then one warp per row merges the slices' partial results in slice order (deterministic);
//   pass 2 (want_probs): the row (holding bf16(z) since pass 1) is overwritten with
//           bf16(exp(bf16(z) - max) / sum).
// Everything per element is fp32 or integer maths: double-precision transcendentals over 67 M
// elements per canvas step made this op compute-bound (1.6-1.9 ms on an H200).
// Ties: the lowest index wins (the CPU's strict '>' over ascending indices).
// Only when asked (no extra pass otherwise):
//   filter (sample_filter.h): per chunk of rows a 65,536-bin histogram of the bf16 logits (global
//           atomics), then one block per row finds the floor by scans over the bins (128-bit
//           fixed-point masses: the CPU's sums exactly), and pass 1 draws the sample among z >= floor;
//   top_n:  before pass 1 (which overwrites the row), each block keeps its slice's top_n (z, id) in
//           the total order z descending, id ascending; finalize merges the slices and writes
//           z - logsumexp.
#include <algorithm>
#include <climits>
#include <cmath>

#include "backend/cuda/common.cuh"
#include "backend/cuda/sampler.cuh"
#include "util/counter_rng.h"

namespace dgemma::cuda {
namespace {

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;

// Gumbel noise of 64 random bits in fp32, within 2e-5 of rng::gumbel_from_bits (the double value):
// t = -log(u) from u's 53-bit mantissa integer m (through log1p of -(1 - u) when u >= 1/2, where
// 1 - u is exact in the integer domain), then -log(t); fp32 logs are within 1 ulp, so the error is
// a few 1e-7 relative in t and a few ulps of |g| <= 37.
__device__ __forceinline__ float gumbel_approx(uint64_t b) {
  const uint64_t m = b >> 11;  // u = (m + 0.5) / 2^53
  constexpr float kInv53 = 1.0f / 9007199254740992.0f;
  float t;
  if (m < (uint64_t{1} << 52)) {
    t = -logf((static_cast<float>(m) + 0.5f) * kInv53);
  } else {
    const float w = (static_cast<float>((uint64_t{1} << 53) - m) - 0.5f) * kInv53;  // 1 - u
    t = -log1pf(-w);
  }
  return -logf(t);
}

// Per-element values the fp32 screen lets through to the exact double Gumbel: anything within this
// of the thread's running best z + g (fp32 error of z + gumbel_approx < 3e-5 at |z + g| < 128).
constexpr float kGumbelScreen = 1e-3f;

__device__ __forceinline__ float processed(float x, float cap, float temperature) {
  return __fdiv_rn(__fmul_rn(tanhf(__fdiv_rn(x, cap)), cap), temperature);
}

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
#pragma unroll
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

// The slice [v0, v1) of a row that block (s, pos) covers.
__device__ __forceinline__ void slice_of(int64_t V, int splits, int64_t& v0, int64_t& v1) {
  const int64_t per = (V + splits - 1) / splits;
  v0 = blockIdx.x * per;
  v1 = v0 + per < V ? v0 + per : V;
}

// Pass 0: each block's largest raw logit of its slice.
__global__ void __launch_bounds__(kThreads) slice_max_kernel(SamplerLaunch a, int splits, float* slice_max) {
  __shared__ float shared_f[32];
  const int64_t pos = blockIdx.y;
  const uint16_t* row = a.logits + pos * a.V;
  int64_t v0, v1;
  slice_of(a.V, splits, v0, v1);
  float xmax = -INFINITY;
  for (int64_t v = v0 + threadIdx.x; v < v1; v += kThreads) xmax = fmaxf(xmax, bf16_to_f32(row[v]));
  xmax = block_reduce(xmax, MaxOp{}, -INFINITY, shared_f);
  if (threadIdx.x == 0) slice_max[pos * splits + blockIdx.x] = xmax;
}

// The row's shift m = z(max logit) from the slice maxima.
__device__ __forceinline__ float row_shift(const SamplerLaunch& a, int splits, const float* slice_max, int64_t pos) {
  float xmax = -INFINITY;
  for (int s = 0; s < splits; ++s) xmax = fmaxf(xmax, slice_max[pos * splits + s]);
  return processed(xmax, a.softcap, a.temperature);
}

// Pass 1 over a slice: argmax and second-best z, the entropy sums, Gumbel-max, the bf16 softmax sum.
template <bool kFiltered>
__global__ void __launch_bounds__(kThreads) slice_stats_kernel(SamplerLaunch a, int splits, const float* slice_max,
                                                               const float* row_floor, Stats* partials) {
  __shared__ Stats warp_partials[kWarps];
  const int64_t pos = blockIdx.y;
  uint16_t* row = a.logits + pos * a.V;
  const float cap = a.softcap, temp = a.temperature;
  const float m = row_shift(a, splits, slice_max, pos);
  const double md = static_cast<double>(m);
  const float bmax = round_bf16(m);  // = max of bf16(z): rounding is monotonic
  int64_t v0, v1;
  slice_of(a.V, splits, v0, v1);
  Stats st;
  empty_stats(st);
  float screen = -INFINITY;
  float floor = -INFINITY;
  if constexpr (kFiltered) floor = row_floor[pos];
  for (int64_t v = v0 + threadIdx.x; v < v1; v += kThreads) {
    const float z = processed(bf16_to_f32(row[v]), cap, temp);
    st.z.push(z, static_cast<int>(v));
    const double dz = static_cast<double>(z) - md;
    const double e = static_cast<double>(expf(__fsub_rn(z, m)));  // terms far below 1 carry the rounding of z - m
    st.s1 += e;
    st.s2 += e * dz;
    if (a.want_probs) {
      const uint16_t zb = f32_to_bf16(z);
      st.bsum += static_cast<double>(expf(__fsub_rn(bf16_to_f32(zb), bmax)));
      row[v] = zb;  // pass 2 reads bf16(z) back instead of recomputing the soft-cap (one thread per element)
    }
    // Gumbel-max: the exact double value (two double logs) only where the fp32 estimate can be the
    // thread's best — every element when the second-best value is wanted (the sample gap). The
    // thread's exact best always passes the screen: its estimate is within 2 errors of every
    // earlier element's. Elements arrive in ascending v, so exact ties resolve as before.
    if constexpr (kFiltered) {
      if (!(z >= floor)) continue;  // outside the sample's support
    }
    const uint64_t b = rng::bits(a.sample_key, static_cast<uint32_t>(pos), static_cast<uint32_t>(v));
    const float gf = __fadd_rn(z, gumbel_approx(b));
    if (a.sample_gap != nullptr || gf >= screen) {
      st.g.push(static_cast<double>(z) + rng::gumbel_from_bits(b), static_cast<int>(v));
      screen = fmaxf(screen, __fsub_rn(gf, kGumbelScreen));
    }
  }
  block_reduce_stats(st, warp_partials);
  if (threadIdx.x == 0) partials[pos * splits + blockIdx.x] = st;
}

// ---- sample filter ---------------------------------------------------------------------------

using sample_filter::Mass;
constexpr int kFilterRows = 64;      // rows per histogram chunk (64 x 256 KiB of workspace)
constexpr int kFloorThreads = 1024;  // one block per row, 64 keys per thread
constexpr int kKeysPerThread = static_cast<int>(sample_filter::kBins) / kFloorThreads;

__global__ void __launch_bounds__(kThreads) hist_kernel(SamplerLaunch a, int splits, int64_t row0, uint32_t* hist) {
  const int64_t pos = row0 + blockIdx.y;
  const uint16_t* row = a.logits + pos * a.V;
  uint32_t* h = hist + static_cast<size_t>(blockIdx.y) * sample_filter::kBins;
  int64_t v0, v1;
  slice_of(a.V, splits, v0, v1);
  for (int64_t v = v0 + threadIdx.x; v < v1; v += kThreads) {
    const uint32_t key = sample_filter::key_of(row[v]);
    if (sample_filter::valid_key(key)) atomicAdd(&h[key], 1u);
  }
}

// Exclusive prefix (in thread order) of one value per thread over the block; total to every thread.
__device__ Mass block_exclusive_scan(Mass v, Mass* sh, Mass& total) {
  const int t = threadIdx.x;
  sh[t] = v;
  __syncthreads();
  for (int off = 1; off < kFloorThreads; off <<= 1) {
    const Mass add = t >= off ? sh[t - off] : Mass{0};
    __syncthreads();
    sh[t] += add;
    __syncthreads();
  }
  const Mass incl = sh[t];
  total = sh[kFloorThreads - 1];
  __syncthreads();
  return incl - v;
}

__device__ uint32_t block_max_u32(uint32_t v, uint32_t* sh) {
  for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
  if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = v;
  __syncthreads();
  uint32_t r = 0;
  for (int w = 0; w < kFloorThreads / 32; ++w) r = max(r, sh[w]);
  __syncthreads();
  return r;
}

// One row's floor (sample_filter.h's stages, the CPU's row_floor over the same bins). Thread t owns
// the keys [top - 63, top], top = 65535 - 64 t, so prefixes in thread order are suffixes by key.
__global__ void __launch_bounds__(kFloorThreads) floor_kernel(SamplerLaunch a, int64_t row0, const uint32_t* hist,
                                                              float* row_floor) {
  __shared__ Mass scan[kFloorThreads];
  __shared__ uint32_t shared_u[kFloorThreads / 32];
  __shared__ uint32_t found;
  const int64_t pos = row0 + blockIdx.x;
  const uint32_t* h = hist + static_cast<size_t>(blockIdx.x) * sample_filter::kBins;
  const int t = threadIdx.x;
  const uint32_t top = sample_filter::kBins - 1 - static_cast<uint32_t>(t * kKeysPerThread);
  const uint32_t bottom = top - (kKeysPerThread - 1);
  const float cap = a.softcap, temp = a.temperature;
  auto zf = [&](uint32_t key) { return processed(bf16_to_f32(sample_filter::bits_of(key)), cap, temp); };
  const SampleFilter f = a.filter;

  uint32_t mine = 0;
  for (uint32_t k = top; k + 1 > bottom; --k)
    if (sample_filter::valid_key(k) && h[k] != 0) {
      mine = k;
      break;
    }
  const uint32_t kmax = block_max_u32(mine, shared_u);
  if (kmax == 0) {  // only NaN logits: nothing is allowed
    if (t == 0) row_floor[pos] = INFINITY;
    return;
  }
  const float m = zf(kmax);
  uint32_t lo = sample_filter::kMinKey;
  if (f.min_p > 0) lo = sample_filter::lowest_key_at_least(zf, static_cast<double>(m) + log(f.min_p), lo, kmax);
  // This thread's keys within [lo, kmax].
  auto in_range = [&](uint32_t k) { return k >= lo && k <= kmax; };
  if (f.top_k > 0) {
    Mass c = 0;
    for (uint32_t k = top; k + 1 > bottom; --k)
      if (in_range(k)) c += h[k];
    if (t == 0) found = lo;  // fewer than k tokens: all of them
    Mass total;
    const Mass excl = block_exclusive_scan(c, scan, total);
    const Mass K = static_cast<Mass>(f.top_k);
    if (excl < K && excl + c >= K) {
      Mass s = excl;
      for (uint32_t k = top; k + 1 > bottom; --k) {
        if (!in_range(k)) continue;
        s += h[k];
        if (s >= K) {
          found = k;
          break;
        }
      }
    }
    __syncthreads();
    const uint32_t x = found;
    __syncthreads();
    lo = sample_filter::lowest_key_at_least(zf, static_cast<double>(zf(x)), lo, kmax);
  }
  if (f.top_p < 1) {
    auto mass = [&](uint32_t k) {
      return static_cast<Mass>(h[k]) * sample_filter::mass_units(exp(static_cast<double>(zf(k)) - static_cast<double>(m)));
    };
    Mass w = 0;
    for (uint32_t k = top; k + 1 > bottom; --k)
      if (in_range(k) && h[k] != 0) w += mass(k);
    if (t == 0) found = lo;
    Mass total;
    const Mass excl = block_exclusive_scan(w, scan, total);
    const double target = f.top_p * sample_filter::mass_to_double(total);
    if (sample_filter::mass_to_double(excl) < target && sample_filter::mass_to_double(excl + w) >= target) {
      Mass s = excl;
      for (uint32_t k = top; k + 1 > bottom; --k) {
        if (!in_range(k) || h[k] == 0) continue;
        s += mass(k);
        if (sample_filter::mass_to_double(s) >= target) {
          found = k;
          break;
        }
      }
    }
    __syncthreads();
    const uint32_t x = found;
    __syncthreads();
    lo = sample_filter::lowest_key_at_least(zf, static_cast<double>(zf(x)), lo, kmax);
  }
  // The least z present at or above lo.
  uint32_t least = 0xFFFFFFFFu;
  for (uint32_t k = bottom; k <= top; ++k)
    if (in_range(k) && h[k] != 0) {
      least = k;
      break;
    }
  const uint32_t lowest = ~block_max_u32(~least, shared_u);
  if (t == 0) row_floor[pos] = zf(lowest);
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
__global__ void __launch_bounds__(kTopThreads) topn_partial_kernel(SamplerLaunch a, int splits, TopEntry* partials) {
  __shared__ TopEntry warp_best[kTopThreads / 32];
  const int64_t pos = blockIdx.y;
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
  TopEntry* out = partials + (pos * splits + blockIdx.x) * n;
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
__global__ void finalize_kernel(SamplerLaunch a, int splits, const float* slice_max, const Stats* partials,
                                float* row_bsum, const float* row_floor, const TopEntry* top_partials) {
  const int64_t pos = blockIdx.x;
  const int lane = threadIdx.x;
  Stats st;
  empty_stats(st);
  // Lane l merges slices l, l + 32, ... in order; then the warp reduction (fixed order).
  for (int s = lane; s < splits; s += 32) st.merge(partials[pos * splits + s]);
  st.warp_reduce_all();
  const double md = static_cast<double>(row_shift(a, splits, slice_max, pos));
  const double lse = md + log(st.s1);
  if (a.top_n > 0) {
    // Lane l holds slice l's ordered list (splits <= 32); each round takes the best head.
    const int n = a.top_n;
    const TopEntry* mine = top_partials + (pos * splits + lane) * n;
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
  if (a.sample_floor != nullptr) a.sample_floor[pos] = row_floor != nullptr ? row_floor[pos] : -INFINITY;
  a.entropy[pos] = static_cast<float>(log(st.s1) - st.s2 / st.s1);
  a.argmax[pos] = st.z.i1;
  a.sample[pos] = st.g.i1 == INT_MAX ? 0 : st.g.i1;  // no candidate (NaN logits, nothing allowed): token 0, as the CPU
  if (a.argmax_logprob != nullptr) a.argmax_logprob[pos] = static_cast<float>(static_cast<double>(st.z.v1) - lse);
  if (a.argmax_gap != nullptr) a.argmax_gap[pos] = __fsub_rn(st.z.v1, st.z.v2);
  if (a.sample_gap != nullptr) a.sample_gap[pos] = static_cast<float>(st.g.v1 - st.g.v2);
  row_bsum[pos] = static_cast<float>(st.bsum);
}

// Pass 2: the slice is overwritten with bf16(exp(bf16(z) - max) / sum).
__global__ void __launch_bounds__(kThreads) probs_kernel(SamplerLaunch a, int splits, const float* slice_max,
                                                         const float* row_bsum) {
  const int64_t pos = blockIdx.y;
  uint16_t* row = a.logits + pos * a.V;
  const float bmax = round_bf16(row_shift(a, splits, slice_max, pos));
  const float bsum = row_bsum[pos];
  int64_t v0, v1;
  slice_of(a.V, splits, v0, v1);
  for (int64_t v = v0 + threadIdx.x; v < v1; v += kThreads) {
    const float zb = bf16_to_f32(row[v]);  // bf16(z), stored by pass 1
    row[v] = f32_to_bf16(__fdiv_rn(expf(__fsub_rn(zb, bmax)), bsum));
  }
}


}  // namespace

int sampler_splits(int64_t V) {
  // Each row is cut into slices of >= 16K elements (at most 32): C = 256 rows of the 262,144-token
  // vocabulary make 4,096 blocks, enough to fill every SM in one wave instead of two waves of one
  // block per row.
  const int64_t s = (V + 16383) / 16384;
  return static_cast<int>(s < 1 ? 1 : (s > 32 ? 32 : s));
}

namespace {

// The workspace: [Stats n][slice max n][row bsum C] then, when asked, [row floor C][histograms of
// up to kFilterRows rows] and [top-N partials n x top_n]; each part 256-byte aligned.
struct Workspace {
  size_t partials = 0, slice_max = 0, row_bsum = 0, row_floor = 0, hist = 0, top = 0, bytes = 0;
};

Workspace workspace_layout(const SamplerLaunch& s) {
  auto up = [](size_t x) { return (x + 255) & ~size_t{255}; };
  const size_t C = static_cast<size_t>(s.C), n = C * static_cast<size_t>(sampler_splits(s.V));
  Workspace w;
  size_t at = 0;
  w.partials = at;
  at = up(at + n * sizeof(Stats));
  w.slice_max = at;
  at = up(at + n * sizeof(float));
  w.row_bsum = at;
  at = up(at + C * sizeof(float));
  if (s.filter.active()) {
    w.row_floor = at;
    at = up(at + C * sizeof(float));
    w.hist = at;
    at = up(at + std::min<size_t>(C, kFilterRows) * sample_filter::kBins * sizeof(uint32_t));
  }
  if (s.top_n > 0) {
    w.top = at;
    at = up(at + n * static_cast<size_t>(s.top_n) * sizeof(TopEntry));
  }
  w.bytes = at;
  return w;
}

}  // namespace

size_t sampler_workspace_bytes(const SamplerLaunch& s) { return workspace_layout(s).bytes; }

void launch_sampler(const SamplerLaunch& s, void* workspace, cudaStream_t stream) {
  if (s.C <= 0 || s.V <= 0) return;
  const int splits = sampler_splits(s.V);
  const Workspace w = workspace_layout(s);
  char* base = static_cast<char*>(workspace);
  Stats* partials = reinterpret_cast<Stats*>(base + w.partials);
  float* slice_max = reinterpret_cast<float*>(base + w.slice_max);
  float* row_bsum = reinterpret_cast<float*>(base + w.row_bsum);
  const bool filtered = s.filter.active();
  float* row_floor = filtered ? reinterpret_cast<float*>(base + w.row_floor) : nullptr;
  TopEntry* top = s.top_n > 0 ? reinterpret_cast<TopEntry*>(base + w.top) : nullptr;
  const dim3 grid(static_cast<unsigned>(splits), static_cast<unsigned>(s.C));
  slice_max_kernel<<<grid, kThreads, 0, stream>>>(s, splits, slice_max);
  CUDA_CHECK_LAUNCH();
  if (filtered) {
    uint32_t* hist = reinterpret_cast<uint32_t*>(base + w.hist);
    for (int64_t r0 = 0; r0 < s.C; r0 += kFilterRows) {
      const int64_t rows = std::min<int64_t>(kFilterRows, s.C - r0);
      CUDA_CHECK(cudaMemsetAsync(hist, 0, static_cast<size_t>(rows) * sample_filter::kBins * sizeof(uint32_t), stream));
      hist_kernel<<<dim3(static_cast<unsigned>(splits), static_cast<unsigned>(rows)), kThreads, 0, stream>>>(s, splits, r0, hist);
      CUDA_CHECK_LAUNCH();
      floor_kernel<<<static_cast<unsigned>(rows), kFloorThreads, 0, stream>>>(s, r0, hist, row_floor);
      CUDA_CHECK_LAUNCH();
    }
  }
  if (s.top_n > 0) {
    topn_partial_kernel<<<grid, kTopThreads, 0, stream>>>(s, splits, top);
    CUDA_CHECK_LAUNCH();
  }
  if (filtered) slice_stats_kernel<true><<<grid, kThreads, 0, stream>>>(s, splits, slice_max, row_floor, partials);
  else slice_stats_kernel<false><<<grid, kThreads, 0, stream>>>(s, splits, slice_max, nullptr, partials);
  CUDA_CHECK_LAUNCH();
  finalize_kernel<<<static_cast<unsigned>(s.C), 32, 0, stream>>>(s, splits, slice_max, partials, row_bsum, row_floor, top);
  CUDA_CHECK_LAUNCH();
  if (!s.want_probs) return;
  probs_kernel<<<grid, kThreads, 0, stream>>>(s, splits, slice_max, row_bsum);
  CUDA_CHECK_LAUNCH();
}

}  // namespace dgemma::cuda
