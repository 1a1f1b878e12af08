// The sampler (docs/MODEL.md §6) over the canvases of one denoising step: each canvas row cut into
// slices with one block per (slice, position, canvas), all canvases of a batch in each launch (their
// parameters in device memory: SamplerBatch), never materialising fp32 [C, V]:
//   pass 0: max of the raw bf16 logits (z is a non-decreasing function of the logit, so this fixes
//           the shift of the exponentials below to the row's max z exactly);
//   pass 1: z = softcap * tanh(x / softcap) / T per element in fp32 (CUDA's tanhf, as torch's
//           soft-cap on the GPU; the CPU backend's glibc tanhf agrees but for ulp-level cases),
//           read from a per-canvas table of the 65,536 bf16 values (z_exp_table_kernel); argmax and
//           the second-best z; the entropy sums accumulated
//           in double from fp32 runs (H = log S1 - S2 / S1 with S1 = sum e^(z - m),
//           S2 = sum e^(z - m) (z - m)), their terms e^(z - c) from the same table where it serves
//           the row (else fp32 exps); Gumbel-max with the counter-based noise in double, screened by
//           fp32 estimates against the block's best so far and skipped outright where the noise's
//           bound rules an element out (slice_stats_kernel in sampler/stats_kernel.cuh says why
//           both are exact); the softmax denominator of bf16(z) for the self-conditioning
//           probabilities (double sum);
//   then one warp per row merges the slices' partial results in slice order (deterministic);
//   pass 2 (want_probs): the row (holding bf16(z) since pass 1) is overwritten with
//           bf16(exp(bf16(z) - max) / sum).
// Everything per element is fp32 or integer maths but the rare exact Gumbel values: double-precision
// transcendentals over 67 M elements per canvas step made this op compute-bound.
// Ties: the lowest index wins (the CPU's strict '>' over ascending indices).
// Only when asked (no extra pass otherwise):
//   filter (sample_filter.h): per chunk of rows a 65,536-bin histogram of the bf16 logits (global
//           atomics), then one block per row finds the floor by scans over the bins (128-bit
//           fixed-point masses: the CPU's sums exactly), and pass 1 draws the sample among z >= floor
//           (a canvas at a time: filters are per request);
//   top_n:  before pass 1 (which overwrites the row), each block keeps its slice's top_n (z, id) in
//           the total order z descending, id ascending; finalize merges the slices and writes
//           z - logsumexp.
//   want_sample false (greedy canvases): no noise is drawn; the sample is the argmax.
// Guided gaps (backend.h GuidedGap, SamplerLaunch::gap_mask): in a gap's rows the tokens the mask does
// not allow get z = -inf before everything (the row's maximum, the sums, the sample, the filter's
// histogram, top-N): the outputs are those of the allowed set, with the CPU's rules. A batch holding a
// gap runs the main pass's guided instance (the same kernel with the per-row mask); any other runs the
// unguided one.
#include <algorithm>

#include "backend/cuda/core/common.cuh"
#include "backend/cuda/sampler/common.cuh"
#include "backend/cuda/sampler/sampler.cuh"
#include "backend/cuda/sampler/sampler_kernel.cuh"
#include "backend/cuda/sampler/stats_kernel.cuh"
#include "backend/workspace_bounds.h"

namespace dgemma::cuda {
using namespace sampler_detail;

int sampler_splits(int64_t V) {
  // Each row is cut into slices of >= 16K elements (at most 32): C = 256 rows of the 262,144-token
  // vocabulary make 4,096 blocks, enough to fill every SM in one wave instead of two waves of one
  // block per row.
  const int64_t s = (V + 16383) / 16384;
  return static_cast<int>(s < 1 ? 1 : (s > 32 ? 32 : s));
}

namespace {

// The memory plan's bound of this workspace (backend/workspace_bounds.h) assumes these sizes.
static_assert(sizeof(Stats) <= workspace_bounds::kSamplerStatsBytes && sizeof(TopEntry) == 8 && sizeof(uint2) == 8 &&
              sizeof(uint4) == workspace_bounds::kSamplerZEntryBytes);
static_assert(kZTable == workspace_bounds::kSamplerZTable && kFilterRows == workspace_bounds::kSamplerFilterRows &&
              sample_filter::kBins == workspace_bounds::kSamplerBins && kMaxTopN == workspace_bounds::kSamplerMaxTopN &&
              kMaxSamplerBatch == workspace_bounds::kSamplerMaxBatch);

// The workspace: [Stats rows x splits][slice max rows x splits][row bsum rows] then, when a canvas
// asks, [row floor rows][histograms of up to kFilterRows rows] and [top-N partials], then the z
// tables; each part 256-byte aligned. Row r of canvas i is workspace row row0(i) + r.
struct Workspace {
  size_t partials = 0, slice_max = 0, row_bsum = 0, row_floor = 0, hist = 0, top = 0, z_tables = 0, bytes = 0;
};

// Also assigns each canvas its row0 / top0.
Workspace workspace_layout(SamplerLaunch* c, int n) {
  auto up = [](size_t x) { return (x + 255) & ~size_t{255}; };
  size_t rows = 0, top_entries = 0, max_c = 0;
  bool filtered = false;
  const size_t splits = static_cast<size_t>(sampler_splits(c[0].V));
  for (int i = 0; i < n; ++i) {
    c[i].row0 = static_cast<int64_t>(rows);
    c[i].top0 = static_cast<int64_t>(top_entries);
    rows += static_cast<size_t>(c[i].C);
    top_entries += static_cast<size_t>(c[i].C) * splits * static_cast<size_t>(c[i].top_n);
    filtered |= c[i].filter.active();
    max_c = std::max(max_c, static_cast<size_t>(c[i].C));
  }
  const size_t cells = rows * splits;
  Workspace w;
  size_t at = 0;
  w.partials = at;
  at = up(at + cells * sizeof(Stats));
  w.slice_max = at;
  at = up(at + cells * sizeof(float));
  w.row_bsum = at;
  at = up(at + rows * sizeof(float));
  w.row_floor = at;
  at = up(at + rows * sizeof(float));
  if (filtered) {
    w.hist = at;
    at = up(at + std::min<size_t>(max_c, kFilterRows) * sample_filter::kBins * sizeof(uint32_t));
  }
  w.top = at;
  at = up(at + top_entries * sizeof(TopEntry));
  w.z_tables = at;
  at = up(at + static_cast<size_t>(n) * kZTable * sizeof(uint4));  // the e^z table's entries
  w.bytes = at;
  return w;
}

// The callers (cuda_backend.cpp) validate; a violated precondition here is an invalid-value error.
#define SAMPLER_REQUIRE(cond) \
  do {                        \
    if (!(cond)) CUDA_CHECK(cudaErrorInvalidValue); \
  } while (0)

}  // namespace

SamplerBatch make_sampler_batch(const SamplerLaunch* canvases, int n) {
  SAMPLER_REQUIRE(n >= 1 && n <= kMaxSamplerBatch);
  SamplerBatch b;
  b.n = n;
  for (int i = 0; i < n; ++i) {
    b.c[i] = canvases[i];
    SAMPLER_REQUIRE(b.c[i].V == b.c[0].V && b.c[i].top_n >= 0 && b.c[i].top_n <= kMaxTopN);
  }
  b.splits = sampler_splits(b.c[0].V);
  workspace_layout(b.c, n);  // each canvas's row0 / top0
  return b;
}

size_t sampler_workspace_bytes(const SamplerBatch& b) {
  SamplerBatch copy = b;
  return workspace_layout(copy.c, b.n).bytes;
}

void launch_sampler(const SamplerBatch& b, const SamplerBatch* dev, void* workspace, Stream stream) {
  SAMPLER_REQUIRE(b.n >= 1 && b.n <= kMaxSamplerBatch && dev != nullptr);
  const int n = b.n;
  SamplerBatch laid = b;
  const Workspace w = workspace_layout(laid.c, n);
  for (int i = 0; i < n; ++i) SAMPLER_REQUIRE(laid.c[i].row0 == b.c[i].row0 && laid.c[i].top0 == b.c[i].top0);
  int64_t max_c = 0;
  bool any_top = false;
  for (int i = 0; i < n; ++i) {
    max_c = std::max(max_c, b.c[i].C);
    any_top |= b.c[i].top_n > 0;
  }
  if (max_c <= 0 || b.c[0].V <= 0) return;
  const int splits = b.splits;
  char* base = static_cast<char*>(workspace);
  Stats* partials = reinterpret_cast<Stats*>(base + w.partials);
  float* slice_max = reinterpret_cast<float*>(base + w.slice_max);
  float* row_bsum = reinterpret_cast<float*>(base + w.row_bsum);
  float* row_floor = reinterpret_cast<float*>(base + w.row_floor);
  TopEntry* top = reinterpret_cast<TopEntry*>(base + w.top);
  const dim3 grid(static_cast<unsigned>(splits), static_cast<unsigned>(max_c), static_cast<unsigned>(n));
  launch_kernel(stream, slice_max_kernel, grid, kThreads, 0, dev, slice_max);
  // The filters' histograms and floors (only canvases that ask; a canvas at a time, in chunks of rows).
  launch_filter_floors(b, dev, reinterpret_cast<uint32_t*>(base + w.hist), row_floor, stream);
  if (any_top) {
    launch_kernel(stream, topn_partial_kernel, grid, kTopThreads, 0, dev, top);
  }
  uint4* z_tables = reinterpret_cast<uint4*>(base + w.z_tables);
  launch_kernel(stream, z_exp_table_kernel, dim3(kZTable / 256, static_cast<unsigned>(n)), 256, 0, dev,
                z_tables);
  bool any_gap = false;
  for (int i = 0; i < n; ++i) any_gap |= b.c[i].gap_mask != nullptr;
  if (any_gap) {
    launch_kernel(stream, slice_stats_kernel<kCandidates, true>, grid, kThreads, 0, dev, slice_max, row_floor,
                  z_tables, partials);
  } else {
    launch_kernel(stream, slice_stats_kernel<>, grid, kThreads, 0, dev, slice_max, row_floor, z_tables,
                  partials);
  }
  launch_kernel(stream, finalize_kernel, dim3(static_cast<unsigned>(max_c), static_cast<unsigned>(n)), 32, 0,
                dev, slice_max, partials, row_bsum, row_floor, top);
  bool any_probs = false;
  for (int i = 0; i < n; ++i) any_probs |= b.c[i].want_probs;
  if (!any_probs) return;
  launch_kernel(stream, probs_kernel, grid, kThreads, 0, dev, slice_max, row_bsum);
}

}  // namespace dgemma::cuda
