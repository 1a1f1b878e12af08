#pragma once
// What the sampler's kernels share (sampler/sampler.cu: the passes over the rows; sampler/filter.cu: the
// sample filters' floors): the block size, the per-canvas batch a launch covers, the slice of a row a
// block takes, the soft-capped, temperature-scaled logit z and a guided gap's token mask. The emulated
// unit tests compile it on the host too (tests/unit/backend/cuda_emulator.h first); on the device the
// .cu files include core/common.cuh first (the bf16 conversions).
#include <cstdint>

#include "backend/cuda/sampler/batch.h"

namespace dgemma::cuda::sampler_detail {

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr int kFilterRows = 64;  // rows per histogram chunk of the sample filters (64 x 256 KiB of workspace)

__device__ __forceinline__ float processed(float x, float cap, float temperature) {
  return __fdiv_rn(__fmul_rn(tanhf(__fdiv_rn(x, cap)), cap), temperature);
}

// The slice [v0, v1) of a row that block (s, pos) covers.
__device__ __forceinline__ void slice_of(int64_t V, int splits, int64_t& v0, int64_t& v1) {
  const int64_t per = (V + splits - 1) / splits;
  v0 = blockIdx.x * per;
  v1 = v0 + per < V ? v0 + per : V;
}

// The gap mask row `pos` of canvas `a` sees (SamplerLaunch::gap_mask): null outside a guided gap.
__device__ __forceinline__ const uint32_t* row_gap_mask(const SamplerLaunch& a, int64_t pos) {
  return a.gap_mask != nullptr && pos >= a.gap_first && pos < a.gap_last ? a.gap_mask : nullptr;
}
// Whether the gap mask allows token `id` (ids at or past the constraint's vocabulary never are).
__device__ __forceinline__ bool gap_allows(const uint32_t* mask, int32_t limit, int64_t id) {
  return id < limit && ((__ldg(mask + (id >> 5)) >> (id & 31)) & 1u) != 0;
}

// Whether a slice can be streamed in 16-byte accesses (8 bf16): aligned and a multiple of 8 long.
__device__ __forceinline__ bool vectorisable(const uint16_t* row, int64_t v0, int64_t v1) {
  return ((reinterpret_cast<uintptr_t>(row + v0) & 15) == 0) && ((v1 - v0) % 8 == 0);
}

}  // namespace dgemma::cuda::sampler_detail
