#include "engine/tp_runner.h"

#include <fmt/ranges.h>

#include "util/error.h"
#include "util/log.h"

namespace dgemma {

TensorParallelRunner::TensorParallelRunner(std::shared_ptr<TensorParallelModel> tp, const KvPoolPlan& pool,
                                           RunnerOptions options)
    : tp_(std::move(tp)), cuda_graphs_(options.cuda_graphs) {
  for (int r = 0; r < tp_->size(); ++r) {
    RunnerOptions o = options;
    if (r > 0) o.step_dump = nullptr;  // debug dumps: rank 0's tensors
    // The rank's backend and model live as long as the group.
    ranks_.push_back(
        std::make_unique<DiffusionModelRunner>(std::shared_ptr<Backend>(tp_, &tp_->backend(r)),
                                               std::shared_ptr<DiffusionGemma>(tp_, &tp_->rank(r)), pool, o));
  }
}

void TensorParallelRunner::prepare(WarmUpSteps& steps) {
  if (!cuda_graphs_) return;
  try {
    tp_->run([&](int r) { ranks_[static_cast<size_t>(r)]->record_rank_graphs(steps.max_model_len()); });
  } catch (const Error& e) {
    fail(ErrorKind::kInternal,
         "recording the tensor-parallel denoising steps as CUDA graphs failed ({}); --enforce-eager runs "
         "them op by op",
         e.what());
  }
  for (const auto& r : ranks_) DG_CHECK(r->graph_batches() == ranks_.front()->graph_batches());
  if (!graph_batches().empty())
    DG_LOG_INFO("engine", "CUDA graphs: denoising steps of {} canvases recorded on each of {} ranks",
                fmt::join(graph_batches(), ","), ranks_.size());
}

StepResult TensorParallelRunner::run(const StepPlan& plan) {
  std::vector<StepResult> results(ranks_.size());
  tp_->run([&](int r) { results[static_cast<size_t>(r)] = ranks_[static_cast<size_t>(r)]->run(plan); });
  // The ranks decide alike (same entropies, argmax and samples after the exchanges): a difference is a bug.
  const std::vector<CanvasResult>& first = results[0].canvases;
  for (size_t r = 1; r < results.size(); ++r) {
    const std::vector<CanvasResult>& other = results[r].canvases;
    DG_CHECK(other.size() == first.size());
    for (size_t i = 0; i < first.size(); ++i)
      DG_CHECK(other[i].flags.same_argmax == first[i].flags.same_argmax &&
               other[i].flags.confident == first[i].flags.confident && other[i].argmax == first[i].argmax);
  }
  return std::move(results[0]);
}

}  // namespace dgemma
