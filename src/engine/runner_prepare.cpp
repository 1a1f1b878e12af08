// DiffusionModelRunner's start-up device work (prepare): the memory plan's ceiling on the allocator,
// the warm-up that is the plan's profile run, and the CUDA graphs of the denoising steps.
#include <fmt/ranges.h>

#include <algorithm>

#include "engine/diffusion_runner.h"
#include "util/error.h"
#include "util/log.h"
#include "util/timing.h"

namespace dgemma {
namespace {

constexpr double kGiB = double(uint64_t{1} << 30);
constexpr double kMiB = double(uint64_t{1} << 20);

// Device memory in use outside the allocator: what the device has in use less what the allocator holds.
uint64_t outside_allocator(const MemoryInfo& m, const AllocatorStats& a) {
  const uint64_t used = m.total - m.free;
  return used > a.reserved ? used - a.reserved : uint64_t{0};
}

}  // namespace

std::vector<int> engine_batch_buckets(int max_num_seqs) {
  std::vector<int> buckets;
  for (int b = 1; b < max_num_seqs; b *= 2) buckets.push_back(b);
  buckets.push_back(std::max(max_num_seqs, 1));
  return buckets;
}

int64_t warm_up_profile_prompt_len(int64_t max_num_batched_tokens, int64_t max_model_len,
                                   int64_t kv_full_tokens, int64_t canvas_length, int batch, int64_t floor) {
  const int64_t C = canvas_length, n = std::max(batch, 1);
  int64_t len = (max_num_batched_tokens + n - 1) / n;
  len = std::min<int64_t>(len, max_model_len - C - 1);
  if (kv_full_tokens > 0) len = std::min<int64_t>(len, kv_full_tokens / n - 3 * C);
  return std::max(len, floor);
}

DiffusionModelRunner::~DiffusionModelRunner() {
  if (options_.budget.step_ceiling_bytes == 0) return;
  const AllocatorStats a = backend_->allocator_stats();
  DG_LOG_INFO(
      "engine",
      "allocator at shutdown: peak {:.2f} GiB reserved of its {:.2f} GiB ceiling ({:.2f} GiB in use at the "
      "peak); {} cached blocks given back to stay under it",
      a.peak_reserved / kGiB, a.ceiling / kGiB, a.peak_in_use / kGiB, a.evictions);
}

void DiffusionModelRunner::prepare(WarmUpSteps& steps) {
  cap_allocator();
  if (options_.warm_up) warm_up(steps);
  if (options_.cuda_graphs) record_graphs(steps.max_model_len());
}

void DiffusionModelRunner::cap_allocator() {
  const DeviceBudget& b = options_.budget;
  if (b.step_ceiling_bytes == 0) return;
  Backend& be = *backend_;
  // What the allocator holds now is the weights and the pool (nothing of the start-up stays cached);
  // steps may take the plan's step ceiling on top, and no more.
  be.release_cached_memory();
  const uint64_t held = be.allocator_stats().reserved;
  const uint64_t steps = b.step_ceiling_bytes + b.graph_pool_bytes;
  be.set_allocator_ceiling(held + steps);
  DG_LOG_INFO(
      "engine",
      "allocator ceiling {:.2f} GiB: {:.2f} GiB of weights and KV pool + the plan's {:.2f} GiB for steps and "
      "{:.2f} GiB for CUDA graphs",
      (held + steps) / kGiB, held / kGiB, b.step_ceiling_bytes / kGiB, b.graph_pool_bytes / kGiB);
}

void DiffusionModelRunner::record_graphs(int64_t max_model_len) {
  // One denoising step per batch-size bucket recorded as a CUDA graph (backends without graphs record
  // nothing), so that every step of denoising canvases replays as one launch, the first request's
  // included. A recording that fails leaves the runner running its steps op by op.
  Backend& be = *backend_;
  if (!be.supports_graphs()) return;
  Stopwatch sw;
  const AllocatorStats a0 = be.allocator_stats();
  try {
    record_rank_graphs(max_model_len);
    const AllocatorStats a1 = be.allocator_stats();
    DG_LOG_INFO("engine",
                "CUDA graphs: denoising steps of {} canvases recorded in {:.0f} ms ({:.2f} GiB graph pool, "
                "the plan's "
                "{:.2f} GiB); --enforce-eager turns them off",
                fmt::join(graph_batches(), ","), sw.ms(), (a1.graph_pool - a0.graph_pool) / kGiB,
                options_.budget.graph_pool_bytes / kGiB);
  } catch (const Error& e) {
    DG_LOG_WARN("engine",
                "CUDA graphs off: recording the denoising steps failed ({}); every step runs op by op",
                e.what());
  }
}

void DiffusionModelRunner::record_rank_graphs(int64_t max_model_len) {
  if (!backend_->supports_graphs()) return;
  if (plan_context_ == 0) plan_context_ = max_model_len;
  enable_graphs(options_.batch_buckets);
}

void DiffusionModelRunner::warm_up(WarmUpSteps& steps) {
  // The first steps of a process pay one-time costs: kernel modules load on first use, cuBLAS picks
  // and loads its kernels per shape, the allocator's cache grows. Paying them here, once per
  // batch-size bucket (1, 2, 4, ... up to --max-num-seqs), makes the first request as fast as the
  // tenth. Each warm-up sequence prefills a prompt of its own (no prefix hits) and runs two steps of one
  // canvas; the core then forgets them (their pages, the prefix cache's entries, the statistics).
  //
  // It is also the memory plan's profile run (as vLLM's): the last batch's prompts together fill a
  // whole step budget, so its steps are as large as the scheduler makes them, and what they held in
  // the allocator (under the plan's ceiling: a step that needs more fails here, at start-up, with the
  // numbers) and what the process took outside the allocator are measured against the plan.
  Backend& be = *backend_;
  const DeviceBudget& budget = options_.budget;
  Stopwatch sw;
  const int64_t C = canvas_;
  const int64_t prompt_len = std::min<int64_t>(2 * C, steps.max_model_len() - C - 1);
  if (prompt_len < 1) return;
  const std::vector<int>& buckets = options_.batch_buckets;
  const int n_last = buckets.back();
  const int64_t profile_len = warm_up_profile_prompt_len(
      steps.max_num_batched_tokens(), steps.max_model_len(), steps.kv_full_tokens(), C, n_last, prompt_len);
  const bool measure = budget.step_ceiling_bytes > 0;
  const MemoryInfo mem0 = measure ? be.memory_info() : MemoryInfo{};
  const AllocatorStats a0 = measure ? be.allocator_stats() : AllocatorStats{};
  int64_t salt = 0;  // every prompt of the warm-up its own
  for (int b : buckets) {
    const int64_t len = b == n_last ? profile_len : prompt_len;
    std::vector<std::vector<int32_t>> prompts;
    for (int i = 0; i < b; ++i, ++salt) {
      std::vector<int32_t> prompt(static_cast<size_t>(len));
      for (int64_t j = 0; j < len; ++j)
        prompt[static_cast<size_t>(j)] = static_cast<int32_t>((j * 7919 + salt * 131) % vocab_);
      prompts.push_back(std::move(prompt));
    }
    // A failed step is a start-up failure (e.g. a step over the allocator's ceiling), not something
    // to serve with.
    if (const std::string error = steps.run_to_end(prompts, 2); !error.empty())
      fail(error.find("out of memory") != std::string::npos ? ErrorKind::kResourceExhausted
                                                            : ErrorKind::kInternal,
           "the start-up warm-up failed at batch size {} (prompts of {} tokens): {}", b, len, error);
  }
  DG_LOG_INFO("engine", "warm-up: batch sizes {} in {:.0f} ms (the last: prompts of {} tokens)",
              fmt::join(buckets, ","), sw.ms(), profile_len);
  if (!measure) return;
  const MemoryInfo mem1 = be.memory_info();
  const AllocatorStats a1 = be.allocator_stats();
  const uint64_t out0 =
      budget.outside_allocator_bytes > 0 ? budget.outside_allocator_bytes : outside_allocator(mem0, a0);
  const uint64_t out1 = outside_allocator(mem1, a1);
  const uint64_t grew = out1 > out0 ? out1 - out0 : 0;
  DG_LOG_INFO("engine",
              "memory profile (warm-up): steps held at most {:.2f} GiB beyond the weights and pool ({:.2f} "
              "GiB reserved "
              "at the peak) of the plan's {:.2f} GiB step ceiling; outside the allocator the process grew by "
              "{:.0f} MiB "
              "(plan: {:.0f} MiB)",
              (a1.peak_in_use - std::min(a1.peak_in_use, a0.in_use)) / kGiB,
              (a1.peak_reserved - std::min(a1.peak_reserved, a0.reserved)) / kGiB,
              budget.step_ceiling_bytes / kGiB, grew / kMiB, budget.runtime_reserve_bytes / kMiB);
  if (grew > budget.runtime_reserve_bytes)
    DG_LOG_WARN(
        "engine",
        "the process took {:.0f} MiB outside the allocator since the memory plan, more than its {:.0f} MiB "
        "reserve: the GPU budget is exceeded by the difference (lower --gpu-memory-utilization to keep it)",
        grew / kMiB, budget.runtime_reserve_bytes / kMiB);
}

}  // namespace dgemma
