#pragma once
// The model runner of a tensor-parallel model: every rank's DiffusionModelRunner runs the same step plan
// on its own thread (forward, vocabulary-sharded sampler, self-conditioning GEMM, decide); the ranks'
// canvases, flags and outputs are identical by construction, so rank 0's result is the step's. With
// CUDA graphs every rank records its own denoising steps (its collectives inside) on its own thread, all
// ranks at once, and replays them; the ranks replay or run op by op alike, step for step.
#include <memory>
#include <vector>

#include "engine/diffusion_runner.h"
#include "model/tensor_parallel.h"

namespace dgemma {

class TensorParallelRunner final : public ModelRunner {
 public:
  // Each rank's runner has a pool of its own laid out by `pool` (the rank's KV heads, the same pages).
  // Ownership is shared as DiffusionModelRunner's.
  TensorParallelRunner(std::shared_ptr<TensorParallelModel> tp, const KvPoolPlan& pool,
                       RunnerOptions options = {});
  int canvas_length() const override { return ranks_.front()->canvas_length(); }
  int vocab_size() const override { return ranks_.front()->vocab_size(); }
  // Every rank's allocator ceiling; the warm-up (its steps run every rank; rank 0's memory is measured:
  // the ranks hold equal shares); then the graphs, recorded by every rank or none: a recording that fails
  // on any rank stops the start-up (FatalError: the ranks' recordings meet in every collective, so one
  // that fails leaves the others' unusable), naming --enforce-eager.
  void prepare(WarmUpSteps& steps) override;
  StepResult run(const StepPlan& plan) override;
  void release(const Sequence& seq) override {
    for (auto& r : ranks_) r->release(seq);
  }

 private:
  std::shared_ptr<TensorParallelModel> tp_;
  RunnerOptions options_;
  std::vector<std::unique_ptr<DiffusionModelRunner>> ranks_;
};

}  // namespace dgemma
