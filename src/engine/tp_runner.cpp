#include "engine/tp_runner.h"

#include "util/error.h"

namespace dgemma {

TensorParallelRunner::TensorParallelRunner(TensorParallelModel& tp, const std::vector<KvStorage>& kv) : tp_(tp) {
  DG_CHECK(static_cast<int>(kv.size()) == tp.size());
  for (int r = 0; r < tp.size(); ++r) ranks_.push_back(std::make_unique<DiffusionModelRunner>(tp.rank(r), kv[static_cast<size_t>(r)]));
}

std::vector<DenoiseFlags> TensorParallelRunner::run(const StepPlan& plan) {
  std::vector<std::vector<DenoiseFlags>> flags(ranks_.size());
  tp_.run([&](int r) { flags[static_cast<size_t>(r)] = ranks_[static_cast<size_t>(r)]->run(plan); });
  // The ranks decide alike (same entropies, argmax and samples after the exchanges): a difference is a bug.
  for (size_t r = 1; r < flags.size(); ++r)
    for (size_t i = 0; i < flags[0].size(); ++i)
      DG_CHECK(flags[r].size() == flags[0].size() && flags[r][i].same_argmax == flags[0][i].same_argmax &&
               flags[r][i].confident == flags[0][i].confident);
  return flags[0];
}

}  // namespace dgemma
