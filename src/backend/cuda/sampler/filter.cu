// The sample filters' floors (sample_filter.h: top_k / top_p / min_p from a histogram of the bf16
// logits): per chunk of rows a 65,536-bin histogram (global atomics), then one block per row finds the
// floor by scans over the bins (128-bit fixed-point masses: the CPU's sums exactly). sampler/sampler.cu's
// main pass then draws the sample among z >= floor.
#include <algorithm>
#include <cmath>

#include "backend/cuda/core/common.cuh"
#include "backend/cuda/sampler/common.cuh"
#include "backend/cuda/sampler/sampler.cuh"
#include "backend/sample_filter.h"

namespace dgemma::cuda::sampler_detail {
namespace {

using sample_filter::Mass;
constexpr int kFloorThreads = 1024;  // one block per row, 64 keys per thread
constexpr int kKeysPerThread = static_cast<int>(sample_filter::kBins) / kFloorThreads;

__global__ void __launch_bounds__(kThreads) hist_kernel(const SamplerBatch* bp, int canvas, int64_t row0, uint32_t* hist) {
  const SamplerBatch& b = *bp;
  const SamplerLaunch& a = b.c[canvas];
  const int splits = b.splits;
  const int64_t pos = row0 + blockIdx.y;
  const uint16_t* row = a.logits + pos * a.V;
  uint32_t* h = hist + static_cast<size_t>(blockIdx.y) * sample_filter::kBins;
  int64_t v0, v1;
  slice_of(a.V, splits, v0, v1);
  const uint32_t* mask = row_gap_mask(a, pos);  // a guided gap's row: allowed tokens only
  for (int64_t v = v0 + threadIdx.x; v < v1; v += kThreads) {
    if (mask != nullptr && !gap_allows(mask, a.gap_limit, v)) continue;
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
__global__ void __launch_bounds__(kFloorThreads) floor_kernel(const SamplerBatch* bp, int canvas, int64_t row0,
                                                              const uint32_t* hist, float* row_floor) {
  const SamplerLaunch& a = bp->c[canvas];
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
    if (t == 0) row_floor[a.row0 + pos] = INFINITY;
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
  if (t == 0) row_floor[a.row0 + pos] = zf(lowest);
}

}  // namespace

void launch_filter_floors(const SamplerBatch& b, const SamplerBatch* dev, uint32_t* hist, float* row_floor,
                          Stream stream) {
  for (int i = 0; i < b.n; ++i) {
    const SamplerLaunch& s = b.c[i];
    if (!s.filter.active() || s.C <= 0) continue;
    for (int64_t r0 = 0; r0 < s.C; r0 += kFilterRows) {
      const int64_t rows = std::min<int64_t>(kFilterRows, s.C - r0);
      CUDA_CHECK(cudaMemsetAsync(hist, 0, static_cast<size_t>(rows) * sample_filter::kBins * sizeof(uint32_t), stream));
      launch_kernel(stream, hist_kernel, dim3(static_cast<unsigned>(b.splits), static_cast<unsigned>(rows)),
                    kThreads, 0, dev, i, r0, hist);
      launch_kernel(stream, floor_kernel, static_cast<unsigned>(rows), kFloorThreads, 0, dev, i, r0, hist,
                    row_floor);
    }
  }
}

}  // namespace dgemma::cuda::sampler_detail
